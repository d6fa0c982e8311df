//! Retries of failed provider calls (SPEC E5): exponential backoff with full jitter from `backon`,
//! `Retry-After` honoured, a budget per stage attempt, and long waits handed back to the queue
//! (requeue with delay) instead of holding a worker slot. Also how long a rate limit pauses the
//! whole pool (SPEC X6) and how long a rate-limited stage waits in the queue once its retries are
//! spent.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::RngExt;

use verdict_proto::outcome::FailureKind;

use crate::provider::ProviderError;

/// How a stage attempt retries its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries allowed per stage attempt, counted across all of its calls (per model: a fallback
    /// model starts with a fresh budget).
    pub budget: u32,
    /// First backoff step before jitter.
    pub base_delay: Duration,
    /// Largest backoff step before jitter.
    pub max_delay: Duration,
    /// Waits up to this long are spent in place; longer ones (typically a long `Retry-After`)
    /// end the attempt so the stage is requeued with that delay.
    pub max_inline_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_inline_wait: Duration::from_secs(30),
        }
    }
}

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long in place, then call again.
    Wait(Duration),
    /// End the attempt; the stage should be requeued after this delay.
    Requeue(Duration),
    /// Do not retry: not retryable, or the budget is spent.
    GiveUp,
}

/// The retry state of one stage attempt on one model.
#[derive(Debug)]
pub struct RetryState {
    policy: RetryPolicy,
    schedule: ExponentialBackoff,
    used: u32,
    /// The last backoff step drawn, before jitter.
    step: Option<Duration>,
}

impl RetryState {
    pub fn new(policy: &RetryPolicy) -> RetryState {
        let schedule = ExponentialBuilder::default()
            .with_min_delay(policy.base_delay)
            .with_max_delay(policy.max_delay)
            .with_factor(2.0)
            .with_max_times(usize::try_from(policy.budget).unwrap_or(usize::MAX))
            .build();
        RetryState {
            policy: policy.clone(),
            schedule,
            used: 0,
            step: None,
        }
    }

    /// Retries used so far.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Decides about one failure. A provider-requested wait (`Retry-After`) is honoured exactly;
    /// otherwise the next backoff step is drawn with full jitter, uniformly from zero to the step.
    pub fn decide(&mut self, error: &ProviderError) -> RetryDecision {
        if !error.kind.is_retryable() || self.used >= self.policy.budget {
            return RetryDecision::GiveUp;
        }
        let Some(step) = self.schedule.next() else {
            return RetryDecision::GiveUp;
        };
        self.step = Some(step);
        let wait = error.retry_after.unwrap_or_else(|| full_jitter(step));
        if wait > self.policy.max_inline_wait {
            return RetryDecision::Requeue(wait);
        }
        self.used += 1;
        RetryDecision::Wait(wait)
    }

    /// How long the whole pool should leave this provider and model alone after `error` (SPEC
    /// X6): what the provider asked for (`Retry-After`, a rate-limit reset header) on any
    /// retryable failure; for a 429 without one, the current backoff step (before jitter, which
    /// only spreads out one caller's retries). Call it after [`RetryState::decide`].
    pub fn pool_pause(&self, error: &ProviderError) -> Option<Duration> {
        if !error.kind.is_retryable() {
            return None;
        }
        match (error.retry_after, error.kind) {
            (Some(wait), _) => Some(wait),
            (None, FailureKind::RateLimited) => Some(self.current_step()),
            (None, _) => None,
        }
        .filter(|wait| !wait.is_zero())
    }

    /// How long a rate-limited stage whose retries are spent waits in the queue before its next
    /// attempt (SPEC E5): what the provider asked for, else the backoff step after the last one.
    pub fn requeue_delay(&self, error: &ProviderError) -> Duration {
        error.retry_after.unwrap_or_else(|| {
            self.step
                .map_or(self.policy.base_delay, |step| step.saturating_mul(2))
                .min(self.policy.max_delay)
        })
    }

    fn current_step(&self) -> Duration {
        self.step.unwrap_or(self.policy.base_delay)
    }
}

/// A uniformly random duration in `[0, step]` ("full jitter").
pub fn full_jitter(step: Duration) -> Duration {
    let max = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::rng().random_range(0..=max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_proto::outcome::FailureKind;

    fn error(kind: FailureKind, retry_after: Option<u64>) -> ProviderError {
        ProviderError {
            kind,
            message: "x".into(),
            status: None,
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn auth_and_bad_request_are_never_retried() {
        let mut s = RetryState::new(&RetryPolicy::default());
        for kind in [
            FailureKind::Auth,
            FailureKind::BadRequest,
            FailureKind::ProcessExit,
            FailureKind::ProcessStart,
            FailureKind::Cancelled,
            FailureKind::Internal,
        ] {
            assert_eq!(
                s.decide(&error(kind, None)),
                RetryDecision::GiveUp,
                "{kind}"
            );
        }
    }

    #[test]
    fn budget_bounds_retries_and_jitter_stays_under_the_step() {
        let policy = RetryPolicy {
            budget: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(250),
            max_inline_wait: Duration::from_secs(10),
        };
        let mut s = RetryState::new(&policy);
        let steps = [100, 200, 250];
        for step in steps {
            match s.decide(&error(FailureKind::ProviderUnavailable, None)) {
                RetryDecision::Wait(w) => {
                    assert!(w <= Duration::from_millis(step), "{w:?} > {step}")
                }
                other => panic!("expected a wait, got {other:?}"),
            }
        }
        assert_eq!(
            s.decide(&error(FailureKind::ProviderUnavailable, None)),
            RetryDecision::GiveUp
        );
        assert_eq!(s.used(), 3);
    }

    #[test]
    fn retry_after_is_honoured_and_long_waits_requeue() {
        let mut s = RetryState::new(&RetryPolicy::default());
        assert_eq!(
            s.decide(&error(FailureKind::RateLimited, Some(2))),
            RetryDecision::Wait(Duration::from_secs(2))
        );
        assert_eq!(
            s.decide(&error(FailureKind::RateLimited, Some(120))),
            RetryDecision::Requeue(Duration::from_secs(120))
        );
    }

    #[test]
    fn a_rate_limit_pauses_the_pool_for_what_the_provider_asked_else_the_step() {
        let policy = RetryPolicy {
            budget: 2,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(250),
            max_inline_wait: Duration::from_secs(10),
        };
        let mut s = RetryState::new(&policy);
        let asked = error(FailureKind::RateLimited, Some(7));
        s.decide(&asked);
        assert_eq!(s.pool_pause(&asked), Some(Duration::from_secs(7)));
        let bare = error(FailureKind::RateLimited, None);
        s.decide(&bare);
        let pause = s.pool_pause(&bare).unwrap();
        assert!(pause.abs_diff(Duration::from_millis(200)) < Duration::from_millis(1));
        // A 503 pauses only when the provider named a wait; auth never does.
        assert_eq!(
            s.pool_pause(&error(FailureKind::ProviderUnavailable, Some(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            s.pool_pause(&error(FailureKind::ProviderUnavailable, None)),
            None
        );
        assert_eq!(s.pool_pause(&error(FailureKind::Auth, Some(3))), None);
        assert_eq!(
            s.pool_pause(&error(FailureKind::RateLimited, Some(0))),
            None
        );

        // The budget is spent: the stage waits in the queue for the next step (capped) or
        // what the provider asked.
        assert_eq!(s.decide(&bare), RetryDecision::GiveUp);
        assert_eq!(s.requeue_delay(&bare), Duration::from_millis(250));
        assert_eq!(s.requeue_delay(&asked), Duration::from_secs(7));
        assert_eq!(
            RetryState::new(&policy).requeue_delay(&bare),
            Duration::from_millis(100)
        );
    }
}
