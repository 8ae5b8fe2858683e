//! Nodes' history (`rrddata`) for the charts, kept in memory: Proxmox adds
//! a row per minute at best, so a timeframe is read again only once its
//! step has passed (a minute for the hour, ten for the day and week), and
//! readers who ask at once share the read. The snapshot's refresher reads
//! the hour of every node ahead of the overview (its sparklines).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use app::types::{HistoryPoint, NodeHistory, Timeframe};

use crate::pve::{PveError, RrdRow, Timed};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// How long a read timeframe is kept.
fn ttl(timeframe: Timeframe) -> Duration {
    match timeframe {
        Timeframe::Hour => Duration::from_secs(60),
        Timeframe::Day | Timeframe::Week => Duration::from_secs(600),
    }
}

type Key = (String, Timeframe);

#[derive(Default)]
pub struct History {
    kept: Mutex<HashMap<Key, (Instant, Arc<NodeHistory>)>>,
    /// One read per key at a time.
    flights: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// Proxmox's row as the UI draws it: shares as %, memory in GiB.
fn point(row: &RrdRow) -> HistoryPoint {
    let pct = |v: Option<f64>| v.map(|v| (v * 100.0) as f32);
    let gib = |v: Option<f64>| v.map(|v| (v / GIB) as f32);
    HistoryPoint {
        time: row.time,
        cpu: pct(row.cpu),
        iowait: pct(row.iowait),
        memory_used: gib(row.memused),
        memory_total: gib(row.memtotal),
        net_in: row.netin.map(|v| v as f32),
        net_out: row.netout.map(|v| v as f32),
    }
}

impl History {
    fn fresh(&self, key: &Key) -> Option<Arc<NodeHistory>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(key)
            .filter(|(at, _)| at.elapsed() < ttl(key.1))
            .map(|(_, h)| h.clone())
    }

    /// A node's timeframe, from memory when recent enough.
    pub async fn get(
        &self,
        proxmox: &Timed,
        node: &str,
        timeframe: Timeframe,
    ) -> Result<Arc<NodeHistory>, PveError> {
        let key = (node.to_string(), timeframe);
        if let Some(h) = self.fresh(&key) {
            return Ok(h);
        }
        let flight = self
            .flights
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let _one = flight.lock().await;
        if let Some(h) = self.fresh(&key) {
            return Ok(h);
        }
        let rows = proxmox.rrddata(node, timeframe).await?;
        let history = Arc::new(NodeHistory {
            node: node.to_string(),
            timeframe,
            points: rows.iter().map(point).collect(),
        });
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (Instant::now(), history.clone()));
        Ok(history)
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
    fn rows_become_percentages_and_gibibytes() {
        let row = RrdRow {
            time: 60,
            cpu: Some(0.25),
            memused: Some(2.0 * GIB),
            memtotal: Some(8.0 * GIB),
            ..RrdRow::default()
        };
        let p = point(&row);
        assert_eq!(
            (p.cpu, p.memory_used, p.memory_total),
            (Some(25.0), Some(2.0), Some(8.0))
        );
        assert_eq!(p.net_in, None, "a missing field is a gap, not a zero");
    }
}
