//! The simulated nodes' history (`/nodes/<n>/rrddata`): 70 rows at the
//! step Proxmox uses for each timeframe, drawn from what the node carries
//! now — its CPU load, the memory its VMs use, how many of them run — with
//! a daily swing and a little noise that is the same on every read of the
//! same moment, so refreshes do not make the charts jump.

use pvedeck_domain::types::Timeframe;

use pvedeck_proxmox::RrdRow;

/// Rows per timeframe, as Proxmox's RRD keeps them.
pub const ROWS: i64 = 70;

/// Seconds between rows: Proxmox's steps (1 min, 30 min, 3 h).
pub fn step(timeframe: Timeframe) -> i64 {
    match timeframe {
        Timeframe::Hour => 60,
        Timeframe::Day => 1800,
        Timeframe::Week => 10_800,
    }
}

/// Why a `timeframe` parameter is refused, in Proxmox's words (what
/// follows `timeframe: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeframeError {
    #[error("property is missing and it is not optional")]
    Missing,
    #[error("value '{0}' does not have a value in the enumeration 'hour, day, week, month, year'")]
    Unknown(String),
}

/// The `timeframe` parameter as both faces check it.
pub fn timeframe(raw: Option<&str>) -> Result<Timeframe, TimeframeError> {
    let raw = raw.ok_or(TimeframeError::Missing)?;
    Timeframe::parse(raw).ok_or_else(|| TimeframeError::Unknown(raw.to_string()))
}

/// What a node carries now.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// 0–1.
    pub cpu: f64,
    pub cpus: u32,
    pub mem_used: f64,
    pub mem_total: f64,
    pub running_vms: usize,
}

/// A number in [-1, 1] fixed by `seed` and `slot` (splitmix64).
fn noise(seed: u64, slot: i64) -> f64 {
    let mut z = seed ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

fn seed_of(node: &str) -> u64 {
    node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The rows of `timeframe` ending at `now` (Unix seconds), oldest first.
pub fn rows(node: &str, load: Load, timeframe: Timeframe, now: i64) -> Vec<RrdRow> {
    let step = step(timeframe);
    let seed = seed_of(node);
    let last = now - now.rem_euclid(step);
    (0..ROWS)
        .map(|i| {
            let time = last - (ROWS - 1 - i) * step;
            let day = (time as f64 / 86_400.0 * std::f64::consts::TAU).sin();
            let jitter = noise(seed, time / step);
            let cpu = (load.cpu * (1.0 + 0.3 * day + 0.2 * jitter)).clamp(0.0, 1.0);
            let mem =
                (load.mem_used * (1.0 + 0.04 * day + 0.01 * jitter)).clamp(0.0, load.mem_total);
            let traffic = (20_000.0 + 150_000.0 * load.running_vms as f64)
                * (1.0 + 0.4 * day + 0.3 * noise(seed ^ 1, time / step)).max(0.05);
            RrdRow {
                time,
                cpu: Some(cpu),
                maxcpu: Some(f64::from(load.cpus)),
                iowait: Some((cpu * 0.06 * (1.0 + noise(seed ^ 2, time / step))).max(0.0)),
                loadavg: Some(cpu * f64::from(load.cpus)),
                memused: Some(mem),
                memtotal: Some(load.mem_total),
                netin: Some(traffic),
                netout: Some(traffic * 0.6),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOAD: Load = Load {
        cpu: 0.2,
        cpus: 16,
        mem_used: 8e9,
        mem_total: 64e9,
        running_vms: 3,
    };

    #[test]
    fn seventy_rows_a_step_apart_ending_now() {
        for tf in Timeframe::ALL {
            let rows = rows("pve1", LOAD, tf, 1_800_000_123);
            assert_eq!(rows.len(), 70);
            assert!(rows.windows(2).all(|w| w[1].time - w[0].time == step(tf)));
            let last = rows.last().map(|r| r.time).unwrap_or(0);
            assert!(last <= 1_800_000_123 && 1_800_000_123 - last < step(tf));
        }
    }

    #[test]
    fn values_stay_in_range_and_follow_the_load() {
        let rows = rows("pve1", LOAD, Timeframe::Day, 1_800_000_000);
        for r in &rows {
            let cpu = r.cpu.unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&cpu));
            assert!(r.memused.unwrap_or(0.0) <= 64e9);
        }
        let mean = rows.iter().filter_map(|r| r.cpu).sum::<f64>() / 70.0;
        assert!((0.12..0.28).contains(&mean), "around the load: {mean}");
        let idle = Load {
            running_vms: 0,
            ..LOAD
        };
        let quiet: f64 = super::rows("pve1", idle, Timeframe::Day, 1_800_000_000)
            .iter()
            .filter_map(|r| r.netin)
            .sum();
        let busy: f64 = rows.iter().filter_map(|r| r.netin).sum();
        assert!(busy > 3.0 * quiet, "running VMs make traffic");
    }

    #[test]
    fn a_timeframe_is_required_and_one_of_proxmoxs() {
        assert_eq!(timeframe(Some("week")), Ok(Timeframe::Week));
        assert_eq!(
            timeframe(None).unwrap_err().to_string(),
            "property is missing and it is not optional"
        );
        assert!(
            timeframe(Some("decade")).is_err_and(|e| e.to_string().starts_with("value 'decade'"))
        );
    }

    #[test]
    fn the_same_moment_reads_the_same() {
        assert_eq!(
            rows("pve1", LOAD, Timeframe::Hour, 1_800_000_000),
            rows("pve1", LOAD, Timeframe::Hour, 1_800_000_030)
        );
    }
}
