//! A rate limiter every worker of a pool shares (SPEC Q3, X6): provider limits — requests and
//! tokens per minute — hold for the pool as a whole, and a provider's "slow down" (a 429, a reset
//! header) pauses every caller, not only the one that heard it. [`RateLimiter`] is the one small
//! trait; `RedisStore` implements it with one Lua script per operation on Redis server time (see
//! `ratelimit::redis`), [`memory::MemoryRateLimiter`] on tokio time for `verdict dev` and tests.
//!
//! # The algorithm
//! GCRA (the generic cell rate algorithm, a leaky bucket kept as one timestamp per bucket): a
//! [`Limit`] of `count` per `period` spaces units `period / count` apart and tolerates a burst of
//! `burst` units. Each bucket stores its *theoretical arrival time* (TAT): taking `cost` units
//! moves it to `max(TAT, now) + cost · period / count`, allowed while that stays within
//! `burst · period / count` of now. So over any window `w`, at most `w · count / period + burst`
//! units are granted, and an idle bucket needs no state (its key expires when its TAT passes).
//!
//! One acquisition takes several [`Demand`]s of one key (one request *and* N tokens) all or
//! nothing: a caller told to wait has spent nothing, in no bucket.
//!
//! [`slots`] caps concurrency instead of rate: at most N leased holders of a key across the pool
//! (one organisation's bulk stages, SPEC Q6).

pub mod memory;
mod redis;
pub mod slots;

pub use slots::{MemorySlots, SlotLimiter};

use std::fmt;
use std::time::Duration;

use crate::BoxFuture;
use crate::store::StoreError;

/// `count` units per `period`, with bursts of up to `burst` units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub count: u64,
    pub period: Duration,
    /// The most units granted at once from an idle bucket; also the largest cost one demand may
    /// ask for.
    pub burst: u64,
}

impl Limit {
    /// `count` per minute with a burst of `burst`.
    pub fn per_minute(count: u64, burst: u64) -> Limit {
        Limit {
            count,
            period: Duration::from_secs(60),
            burst,
        }
    }

    /// How far one unit moves a bucket's TAT, in nanoseconds (fractional: a period need not
    /// divide evenly).
    fn unit_nanos(&self) -> f64 {
        self.period.as_nanos() as f64 / self.count as f64
    }
}

/// The two buckets a key has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    Requests,
    Tokens,
}

impl Bucket {
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Requests => "requests",
            Bucket::Tokens => "tokens",
        }
    }
}

/// `cost` units from one bucket of a key, limited to `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    pub bucket: Bucket,
    pub limit: Limit,
    pub cost: u64,
}

/// The answer to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Every demand was taken.
    Granted,
    /// Nothing was taken; the demands could be granted after this long (if no one else takes
    /// the units first), or the key is paused that long.
    Wait(Duration),
}

/// A limiter failure. `Unavailable` is transient (the store is unreachable or slow): wait and
/// try again, never go ahead unlimited. `Refused` is a demand that can never be granted as
/// asked; `Corrupt` is limiter state that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("rate limiter unavailable: {0}")]
    Unavailable(String),
    #[error("rate limit demand on `{key}` refused: {reason}")]
    Refused { key: String, reason: String },
    #[error("rate limiter holds invalid data at {key}: {reason}")]
    Corrupt { key: String, reason: String },
}

impl LimitError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, LimitError::Unavailable(_))
    }
}

impl From<StoreError> for LimitError {
    fn from(e: StoreError) -> LimitError {
        match e {
            StoreError::Unavailable(m) | StoreError::Full(m) => LimitError::Unavailable(m),
            StoreError::Corrupt { key, reason } => LimitError::Corrupt { key, reason },
            StoreError::Config(m) => LimitError::Refused {
                key: "-".into(),
                reason: m,
            },
        }
    }
}

/// Limits shared by every process that reaches the same limiter (SPEC Q3). Keys are opaque to
/// the limiter (the worker uses `provider:model`).
pub trait RateLimiter: Send + Sync + fmt::Debug {
    /// Takes every demand from its bucket of `key`, all or nothing: `Granted`, or `Wait(d)` —
    /// nothing taken, try again after `d` — while the demands do not fit or `key` is paused.
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        demands: &'a [Demand],
    ) -> BoxFuture<'a, Result<Permit, LimitError>>;

    /// Pauses `key` for every caller for `duration` from now (a 429's `Retry-After`, a reset
    /// header; SPEC X6). A pause never shortens one already in force.
    fn pause<'a>(
        &'a self,
        key: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), LimitError>>;
}

/// Refuses demands that could never be granted: an empty limit, a cost above the burst, a
/// bucket named twice. Both implementations check before touching any state.
fn check(key: &str, demands: &[Demand]) -> Result<(), LimitError> {
    let refuse = |reason: String| {
        Err(LimitError::Refused {
            key: key.to_owned(),
            reason,
        })
    };
    for (i, d) in demands.iter().enumerate() {
        let bucket = d.bucket.as_str();
        if d.limit.count == 0 || d.limit.period.is_zero() || d.limit.burst == 0 {
            return refuse(format!(
                "the {bucket} limit {:?} allows nothing; count, period and burst must be positive",
                d.limit
            ));
        }
        if d.cost > d.limit.burst {
            return refuse(format!(
                "a cost of {} {bucket} exceeds the burst of {}, so it could never be granted",
                d.cost, d.limit.burst
            ));
        }
        if demands[..i].iter().any(|o| o.bucket == d.bucket) {
            return refuse(format!("the {bucket} bucket is named twice"));
        }
    }
    Ok(())
}

/// A wait in nanoseconds as a duration, rounded up so a caller never comes back early.
fn wait_from_nanos(nanos: f64) -> Duration {
    Duration::from_nanos(nanos.ceil().clamp(1.0, u64::MAX as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(bucket: Bucket, count: u64, burst: u64, cost: u64) -> Demand {
        Demand {
            bucket,
            limit: Limit::per_minute(count, burst),
            cost,
        }
    }

    #[test]
    fn demands_that_can_never_be_granted_are_refused_with_the_reason() {
        assert_eq!(check("k", &[demand(Bucket::Requests, 60, 1, 1)]), Ok(()));
        let e = check("k", &[demand(Bucket::Tokens, 100, 100, 101)]).unwrap_err();
        assert!(e.to_string().contains("exceeds the burst of 100"), "{e}");
        assert!(!e.is_retryable());
        let e = check("k", &[demand(Bucket::Requests, 0, 1, 1)]).unwrap_err();
        assert!(e.to_string().contains("allows nothing"), "{e}");
        let twice = [
            demand(Bucket::Tokens, 10, 10, 1),
            demand(Bucket::Tokens, 10, 10, 1),
        ];
        let e = check("k", &twice).unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
    }

    #[test]
    fn waits_round_up() {
        assert_eq!(wait_from_nanos(0.2), Duration::from_nanos(1));
        assert_eq!(wait_from_nanos(1_500.5), Duration::from_nanos(1_501));
    }
}
