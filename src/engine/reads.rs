//! Reads of one VM that go to Proxmox — `GET /api/vm/:id/status` (`qm
//! status`) and a VM page's configuration (`qm config`) — served from a
//! short per-VM memory and limited per client, so that no client can turn
//! its requests into Proxmox commands that take the job's slots: however
//! many ask, one VM costs at most one read per [`FRESH`], and one client
//! gets [`PER_SECOND`] reads a second (a burst of [`BURST`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pvedeck_config::allow::ClientKey;
use pvedeck_support::sync::lock;

use super::EngineError;

/// How long a read is served again.
pub const FRESH: Duration = Duration::from_secs(2);
/// Reads a client may make a second, and at once.
pub const PER_SECOND: f64 = 10.0;
pub const BURST: f64 = 40.0;
/// Clients tracked at most (the oldest go first).
const MAX_CLIENTS: usize = 100_000;

/// One VM's last answer and when it was read; its lock is held by the
/// one read under way, which the others wait for.
type Slot<V> = Arc<tokio::sync::Mutex<Option<(Instant, V)>>>;

/// The last answer of one read per VM; concurrent askers of a stale or
/// missing one wait for a single read.
pub struct Recent<V> {
    entries: Mutex<HashMap<u32, Slot<V>>>,
}

impl<V> Default for Recent<V> {
    fn default() -> Recent<V> {
        Recent {
            entries: Mutex::default(),
        }
    }
}

impl<V: Clone> Recent<V> {
    /// The answer read less than [`FRESH`] ago, or `read`'s.
    pub async fn get<F, Fut>(&self, vmid: u32, read: F) -> Result<V, EngineError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<V, EngineError>>,
    {
        let slot = lock(&self.entries).entry(vmid).or_default().clone();
        let mut held = slot.lock().await;
        if let Some((at, value)) = held.as_ref()
            && at.elapsed() < FRESH
        {
            return Ok(value.clone());
        }
        let value = read().await?;
        *held = Some((Instant::now(), value.clone()));
        Ok(value)
    }

    /// The VM changed (an action on it): its next read goes to Proxmox.
    pub fn forget(&self, vmid: u32) {
        lock(&self.entries).remove(&vmid);
    }
}

/// A token bucket per client.
#[derive(Default)]
pub struct ReadRate {
    buckets: Mutex<HashMap<ClientKey, (f64, Instant)>>,
}

impl ReadRate {
    /// Takes one read of `ip`'s, or 429 once its bucket is empty.
    pub fn take(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), EngineError> {
        let Some(ip) = ip else { return Ok(()) };
        let key = ClientKey::of(ip);
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(&key) {
            // Full buckets hold no information: those go first.
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() * PER_SECOND < BURST
            });
            if buckets.len() >= MAX_CLIENTS
                && let Some(oldest) = buckets
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(k, _)| *k)
            {
                buckets.remove(&oldest);
            }
        }
        let (tokens, at) = buckets.entry(key).or_insert((BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * PER_SECOND).min(BURST);
        *at = now;
        if *tokens < 1.0 {
            return Err(EngineError::TooMany(format!(
                "too many VM reads from {key}: {PER_SECOND} a second at most"
            )));
        }
        *tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn many_askers_cost_one_read_until_it_is_stale_or_forgotten() {
        let recent: Recent<String> = Recent::default();
        let reads = AtomicU32::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, EngineError>("running".to_string())
        };
        let answers = futures_util::future::join_all((0..50).map(|_| recent.get(101, read))).await;
        assert!(answers.iter().all(|a| a.as_deref().ok() == Some("running")));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        recent.forget(101);
        recent.get(101, read).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        recent.get(102, read).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 3, "per VM");
    }

    #[test]
    fn a_client_gets_its_burst_then_its_rate() {
        let rate = ReadRate::default();
        let ip = Some("10.0.0.9".parse().unwrap());
        let now = Instant::now();
        for _ in 0..BURST as u32 {
            rate.take(ip, now).unwrap();
        }
        let refused = rate.take(ip, now).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "too many VM reads from 10.0.0.9: 10 a second at most"
        );
        assert!(rate.take(Some("10.0.0.10".parse().unwrap()), now).is_ok());
        assert!(rate.take(ip, now + Duration::from_millis(150)).is_ok());
    }
}
