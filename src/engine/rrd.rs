//! Nodes' history (`rrddata`) for the charts, kept in memory: Proxmox adds
//! a row per minute at best, so a timeframe is read again only once its
//! step has passed (a minute for the hour, ten for the day and week), and
//! readers who ask at once share the read. A failed read is kept too, for
//! a shorter while, so that a node that cannot answer is not asked again
//! by every reader. The snapshot's refresher reads the hour of every node
//! ahead of the overview (its sparklines).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pvedeck_domain::types::{NodeHistory, Timeframe};
use pvedeck_proxmox::{PveError, Timed};
use pvedeck_support::sync::lock;

/// How long a read timeframe is kept.
fn ttl(timeframe: Timeframe) -> Duration {
    match timeframe {
        Timeframe::Hour => Duration::from_secs(60),
        Timeframe::Day | Timeframe::Week => Duration::from_secs(600),
    }
}

/// How long a failed read is kept before the next reader tries again.
const FAILED: Duration = Duration::from_secs(15);

type Read = (Instant, Result<Arc<NodeHistory>, PveError>);

/// One node and timeframe: its last read; the lock is held while a read
/// runs, so readers who come meanwhile wait for it instead of reading too.
type Slot = Arc<tokio::sync::Mutex<Option<Read>>>;

#[derive(Default)]
pub struct History {
    slots: Mutex<HashMap<(String, Timeframe), Slot>>,
}

/// Whether a read is recent enough to answer with.
fn fresh((at, outcome): &Read, timeframe: Timeframe) -> bool {
    let kept = if outcome.is_ok() {
        ttl(timeframe)
    } else {
        FAILED
    };
    at.elapsed() < kept
}

impl History {
    /// A node's timeframe, from memory when recent enough.
    pub async fn get(
        &self,
        proxmox: &Timed,
        node: &str,
        timeframe: Timeframe,
    ) -> Result<Arc<NodeHistory>, PveError> {
        let slot = lock(&self.slots)
            .entry((node.to_string(), timeframe))
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        if let Some(read) = last.as_ref().filter(|r| fresh(r, timeframe)) {
            return read.1.clone();
        }
        let outcome = proxmox.rrddata(node, timeframe).await.map(|rows| {
            Arc::new(NodeHistory {
                node: node.to_string(),
                timeframe,
                rows,
            })
        });
        *last = Some((Instant::now(), outcome.clone()));
        outcome
    }

    /// The hour of each node, as far as it can be read (a node that
    /// cannot is left out: its card goes without sparklines).
    pub async fn hours(&self, proxmox: &Timed, nodes: &[String]) -> Vec<Arc<NodeHistory>> {
        let reads = nodes
            .iter()
            .map(|node| self.get(proxmox, node, Timeframe::Hour));
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_less_long_than_an_answer() {
        let at = Instant::now() - Duration::from_secs(30);
        let ok: Read = (
            at,
            Ok(Arc::new(NodeHistory {
                node: "pve1".into(),
                timeframe: Timeframe::Hour,
                rows: Vec::new(),
            })),
        );
        let failed: Read = (
            at,
            Err(PveError::Timeout {
                command: "pvesh".into(),
                secs: 1,
            }),
        );
        assert!(fresh(&ok, Timeframe::Hour));
        assert!(!fresh(&failed, Timeframe::Hour));
        assert!(!fresh(
            &(Instant::now() - Duration::from_secs(61), ok.1),
            Timeframe::Hour
        ));
    }
}
