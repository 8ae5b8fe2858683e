//! Time as pvedeck's parts see it. A `Clock` runs at a speed: 1 against a
//! real cluster; `SIM_SPEED` against the simulated one, where every duration
//! (a boot, the engine's pause between retries) is given at real Proxmox
//! speed and divided by it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    speed: f64,
}

impl Clock {
    /// Wall-clock time.
    pub fn real() -> Clock {
        Clock { speed: 1.0 }
    }

    pub fn new(speed: f64) -> Clock {
        Clock {
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1.0
            },
        }
    }

    /// A span of this clock's time in wall-clock terms.
    pub fn scaled(&self, ms: u64) -> Duration {
        Duration::from_secs_f64(ms as f64 / 1000.0 / self.speed)
    }

    pub async fn sleep(&self, ms: u64) {
        if ms > 0 {
            tokio::time::sleep(self.scaled(ms)).await;
        }
    }

    /// The wall-clock instant (unix ms) at which `ms` of this clock's time
    /// from now will have passed.
    pub fn after(&self, ms: u64) -> i64 {
        now_ms() + self.scaled(ms).as_millis() as i64
    }

    /// Milliseconds of this clock's time elapsed since a wall-clock instant.
    pub fn since(&self, wall_ms: i64) -> u64 {
        let real = (now_ms() - wall_ms).max(0) as f64;
        (real * self.speed) as u64
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_divides_durations() {
        let c = Clock::new(100.0);
        assert_eq!(c.scaled(10_000), Duration::from_millis(100));
        assert_eq!(Clock::new(0.0).scaled(1000), Duration::from_secs(1));
        assert_eq!(Clock::real().scaled(1500), Duration::from_millis(1500));
    }
}
