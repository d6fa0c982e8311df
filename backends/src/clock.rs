//! Wall-clock time for the soft deadline, behind a trait so tests can run on tokio's virtual time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as the wire messages carry deadlines.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_unix_ms(&self) -> u64;
}

/// The system clock (production).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        unix_ms(SystemTime::now())
    }
}

/// Wall time derived from tokio's clock: starts at the system time when created and advances with
/// `tokio::time`, so `tokio::time::pause()`/`advance()` move it too (virtual-time tests).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_unix_ms: u64,
    base: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        TokioClock {
            base_unix_ms: unix_ms(SystemTime::now()),
            base: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.base);
        self.base_unix_ms
            .saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Milliseconds since the epoch; a clock before 1970 reads as 0 rather than failing.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How long from `now` until `deadline`, zero when passed.
pub fn until(now_unix_ms: u64, deadline_unix_ms: u64) -> Duration {
    Duration::from_millis(deadline_unix_ms.saturating_sub(now_unix_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_virtual_time() {
        let clock = TokioClock::new();
        let t0 = clock.now_unix_ms();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(clock.now_unix_ms() - t0, 600_000);
    }
}
