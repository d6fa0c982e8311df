//! The rate limiter in one process, for `verdict dev` (whose workers share one value) and unit
//! tests: the same GCRA as the Redis script, on tokio's clock so paused-time tests can watch a
//! limit hold over minutes without waiting for them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Bucket, Demand, LimitError, Permit, RateLimiter, check, wait_from_nanos};
use crate::BoxFuture;

/// Buckets and pauses in memory. Share one value (in an `Arc`) among the callers it limits.
#[derive(Debug, Default)]
pub struct MemoryRateLimiter {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each bucket's theoretical arrival time; a bucket whose TAT has passed is idle and is
    /// dropped, as its Redis key expires.
    tats: HashMap<(String, Bucket), Instant>,
    pauses: HashMap<String, Instant>,
}

impl MemoryRateLimiter {
    pub fn new() -> MemoryRateLimiter {
        MemoryRateLimiter::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self, key: &str, demands: &[Demand]) -> Result<Permit, LimitError> {
        check(key, demands)?;
        let now = Instant::now();
        let mut state = self.lock();
        state.tats.retain(|_, tat| *tat > now);
        state.pauses.retain(|_, until| *until > now);
        if let Some(until) = state.pauses.get(key) {
            return Ok(Permit::Wait(*until - now));
        }
        let mut wait_nanos = 0.0_f64;
        let mut next = Vec::with_capacity(demands.len());
        for d in demands {
            let unit = d.limit.unit_nanos();
            let tat = state
                .tats
                .get(&(key.to_owned(), d.bucket))
                .map_or(0.0, |tat| (*tat - now).as_nanos() as f64);
            // Nanoseconds from now: the TAT after this demand, and the most it may be ahead.
            let new_tat = tat + d.cost as f64 * unit;
            let tolerance = d.limit.burst as f64 * unit;
            if new_tat > tolerance {
                wait_nanos = wait_nanos.max(new_tat - tolerance);
            }
            next.push((d.bucket, new_tat));
        }
        if wait_nanos > 0.0 {
            return Ok(Permit::Wait(wait_from_nanos(wait_nanos)));
        }
        for (bucket, new_tat) in next {
            let at = now + Duration::from_nanos(new_tat.ceil() as u64);
            state.tats.insert((key.to_owned(), bucket), at);
        }
        Ok(Permit::Granted)
    }

    fn hold(&self, key: &str, duration: Duration) {
        let until = Instant::now() + duration;
        let mut state = self.lock();
        let pause = state.pauses.entry(key.to_owned()).or_insert(until);
        *pause = (*pause).max(until);
    }
}

impl RateLimiter for MemoryRateLimiter {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        demands: &'a [Demand],
    ) -> BoxFuture<'a, Result<Permit, LimitError>> {
        Box::pin(async move { self.take(key, demands) })
    }

    fn pause<'a>(
        &'a self,
        key: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), LimitError>> {
        Box::pin(async move {
            self.hold(key, duration);
            Ok(())
        })
    }
}
