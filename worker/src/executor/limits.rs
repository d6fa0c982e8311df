//! The pool's rate limits on provider calls (SPEC Q3, X6): before a call, one request and the
//! call's estimated tokens are taken from the limits of its provider and model through the shared
//! [`RateLimiter`] (every worker of the pool sees the same buckets); a 429 or a provider's reset
//! header pauses that provider and model for the whole pool. A provider and model without limits
//! makes no limiter call at all.
//!
//! Waiting is part of the call: in place while a wait is no longer than `max_inline_wait`
//! (longer ones requeue the stage, SPEC E5), cancellable, cut at the soft deadline when the call
//! would offer tools (so the call after it is the final one, SPEC E2), and metered. A limiter
//! that cannot be reached is waited for, with backoff — never called around.

use std::collections::BTreeMap;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use verdict_backends::ratelimit::{Bucket, Demand, Limit, Permit};

use super::context::CallContext;
use crate::provider::ChatRequest;

/// Requests and tokens per minute allowed on one provider and model, for the whole pool; `None`
/// is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelLimits {
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u32>,
}

impl ModelLimits {
    /// Each of `self`'s limits, else `fallback`'s.
    pub fn or(self, fallback: ModelLimits) -> ModelLimits {
        ModelLimits {
            requests_per_minute: self.requests_per_minute.or(fallback.requests_per_minute),
            tokens_per_minute: self.tokens_per_minute.or(fallback.tokens_per_minute),
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.requests_per_minute.is_none() && self.tokens_per_minute.is_none()
    }
}

/// Every configured limit: per provider (each of its models gets them, separately, as providers
/// limit per model), and per provider and model (overriding the provider's, limit by limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    providers: BTreeMap<String, ModelLimits>,
    models: BTreeMap<(String, String), ModelLimits>,
    /// Output tokens a call of the provider may produce (its `max_tokens`), reserved with the
    /// prompt's estimate.
    output_tokens: BTreeMap<String, u32>,
}

impl RateLimits {
    /// The limits of every model of `provider`, and the output tokens each of its calls reserves
    /// against a tokens limit (its `max_tokens`; 0 when it sets none).
    pub fn set_provider(&mut self, provider: &str, limits: ModelLimits, output_tokens: u32) {
        self.providers.insert(provider.to_owned(), limits);
        self.output_tokens
            .insert(provider.to_owned(), output_tokens);
    }

    /// The limits of `model` on `provider`, overriding the provider's.
    pub fn set_model(&mut self, provider: &str, model: &str, limits: ModelLimits) {
        self.models
            .insert((provider.to_owned(), model.to_owned()), limits);
    }

    /// What applies to calls of `model` on `provider`.
    pub fn limits(&self, provider: &str, model: &str) -> ModelLimits {
        let of_provider = self.providers.get(provider).copied().unwrap_or_default();
        self.models
            .get(&(provider.to_owned(), model.to_owned()))
            .map_or(of_provider, |m| m.or(of_provider))
    }

    /// Whether any limit is configured at all.
    pub fn is_empty(&self) -> bool {
        self.providers
            .values()
            .chain(self.models.values())
            .all(ModelLimits::is_unlimited)
    }

    fn output_tokens(&self, provider: &str) -> u32 {
        self.output_tokens.get(provider).copied().unwrap_or(0)
    }
}

/// The limiter's key of a provider and model.
fn key(provider: &str, model: &str) -> String {
    format!("{provider}:{model}")
}

/// What one call takes: a request, with bursts of one second's worth (providers enforce per
/// minute limits over shorter spans too), and its estimated tokens, with bursts of a whole
/// minute's worth (one call may need that many; a bigger one takes the whole minute).
fn demands(limits: ModelLimits, tokens: u64) -> Vec<Demand> {
    let mut demands = Vec::with_capacity(2);
    if let Some(rpm) = limits.requests_per_minute {
        let rpm = u64::from(rpm);
        demands.push(Demand {
            bucket: Bucket::Requests,
            limit: Limit::per_minute(rpm, rpm.div_ceil(60).max(1)),
            cost: 1,
        });
    }
    if let Some(tpm) = limits.tokens_per_minute {
        let tpm = u64::from(tpm);
        demands.push(Demand {
            bucket: Bucket::Tokens,
            limit: Limit::per_minute(tpm, tpm),
            cost: tokens.min(tpm),
        });
    }
    demands
}

/// The tokens a call is expected to count against a provider's limit: its prompt — every
/// message's text, tool calls and results, and the tool definitions, at one token per three
/// bytes of UTF-8 (about four characters of English, one of Chinese or Japanese: on the high
/// side, as a limit wants) plus four per message for the chat framing — and the output it may
/// produce (`max_tokens`).
pub(super) fn estimated_tokens(request: &ChatRequest, output_tokens: u32) -> u64 {
    let prompt =
        super::sizing::prompt_tokens(&request.messages, super::sizing::tool_bytes(&request.tools));
    let output = request.max_tokens.unwrap_or(output_tokens);
    prompt.saturating_add(u64::from(output))
}

/// How waiting for the limiter ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Admission {
    /// Go ahead: the units are taken (or no limit applies).
    Granted,
    /// The soft deadline came while waiting (only when asked to stop there): finalise the
    /// conversation, then ask again for the final call.
    DeadlineReached,
    /// The wait is longer than the inline limit: end the attempt and requeue the stage after
    /// this long.
    Requeue(Duration),
    Cancelled,
    /// The limiter refused the demand or holds unreadable state (never expected: limits are
    /// checked at start-up); the call is not made.
    Refused(String),
}

/// Outage backoff: 50 ms doubling to 2 s, full jitter, for as long as it takes.
fn outage_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Waits until the call `request` to `provider` may go: its request and estimated tokens taken
/// from the pool's limits of its provider and model. `stop_at` is the soft deadline (ms since the
/// epoch) when a wait must end there.
pub(super) async fn admit(
    ctx: &CallContext<'_>,
    provider: &str,
    request: &ChatRequest,
    stop_at: Option<u64>,
) -> Admission {
    let limits = ctx.settings.rate_limits.limits(provider, &request.model);
    if limits.is_unlimited() {
        return Admission::Granted;
    }
    let tokens = estimated_tokens(request, ctx.settings.rate_limits.output_tokens(provider));
    let demands = demands(limits, tokens);
    let key = key(provider, &request.model);
    let metrics = &ctx.deps.metrics;
    let labels = [provider, request.model.as_str()];
    let mut waited = Duration::ZERO;
    let mut outage = outage_backoff();
    // Logged once per call, not at every retry of a long outage.
    let mut outage_seen = false;
    let ended = |waited: Duration, admission: Admission| {
        if !waited.is_zero() || matches!(admission, Admission::Requeue(_)) {
            metrics.rate_limit_waits.with_label_values(&labels).inc();
        }
        if !waited.is_zero() {
            metrics
                .rate_limit_wait_seconds
                .with_label_values(&labels)
                .observe(waited.as_secs_f64());
        }
        admission
    };
    loop {
        let answer = tokio::select! {
            answer = ctx.deps.limiter.acquire(&key, &demands) => answer,
            () = ctx.cancel.cancelled() => return ended(waited, Admission::Cancelled),
        };
        let wait = match answer {
            Ok(Permit::Granted) => return ended(waited, Admission::Granted),
            Ok(Permit::Wait(wait)) if wait > ctx.settings.retry.max_inline_wait => {
                tracing::info!(
                    wait_ms = millis(wait),
                    "rate limit wait too long to hold the slot; requeueing the stage"
                );
                return ended(waited, Admission::Requeue(wait));
            }
            Ok(Permit::Wait(wait)) => wait,
            Err(e) if e.is_retryable() => {
                metrics
                    .rate_limiter_unavailable
                    .with_label_values(&labels)
                    .inc();
                if outage_seen {
                    tracing::debug!(error = %e, "rate limiter still unavailable");
                } else {
                    tracing::warn!(error = %e, "rate limiter unavailable; waiting for it before calling the provider");
                    outage_seen = true;
                }
                outage.next().unwrap_or(Duration::from_secs(2))
            }
            Err(e) => {
                tracing::error!(error = %e, "rate limiter refused the call");
                return ended(waited, Admission::Refused(e.to_string()));
            }
        };
        let (wait, cut) = match stop_at {
            Some(deadline) => {
                let left = Duration::from_millis(deadline.saturating_sub(ctx.now_unix_ms()));
                (wait.min(left), left <= wait)
            }
            None => (wait, false),
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ctx.cancel.cancelled() => return ended(waited, Admission::Cancelled),
        }
        waited += wait;
        if cut {
            return ended(waited, Admission::DeadlineReached);
        }
    }
}

/// After a provider said to slow down (SPEC X6): pauses `model` on `provider` for the whole pool
/// for `duration`, when it has limits. Best effort: if the limiter cannot be reached, this caller
/// still waits on its own.
pub(super) async fn pause(ctx: &CallContext<'_>, provider: &str, model: &str, duration: Duration) {
    if ctx
        .settings
        .rate_limits
        .limits(provider, model)
        .is_unlimited()
    {
        return;
    }
    let key = key(provider, model);
    let paused = tokio::select! {
        paused = ctx.deps.limiter.pause(&key, duration) => paused,
        () = ctx.cancel.cancelled() => return,
    };
    match paused {
        Ok(()) => {
            ctx.deps
                .metrics
                .rate_limit_pauses
                .with_label_values(&[provider, model])
                .inc();
            tracing::info!(
                wait_ms = millis(duration),
                "provider asked to slow down; pausing this provider and model for the pool"
            );
        }
        Err(e) => tracing::warn!(error = %e, "pool-wide pause not set; only this call waits"),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolCall};

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages,
            tools: Vec::new(),
            tool_choice: crate::provider::ToolChoice::None,
            temperature: None,
            max_tokens: None,
            constraint: None,
        }
    }

    #[test]
    fn model_limits_override_the_providers_one_by_one() {
        let mut limits = RateLimits::default();
        assert!(limits.is_empty());
        limits.set_provider(
            "p",
            ModelLimits {
                requests_per_minute: Some(100),
                tokens_per_minute: Some(10_000),
            },
            512,
        );
        limits.set_model(
            "p",
            "small",
            ModelLimits {
                requests_per_minute: Some(500),
                tokens_per_minute: None,
            },
        );
        assert!(!limits.is_empty());
        assert_eq!(
            limits.limits("p", "small"),
            ModelLimits {
                requests_per_minute: Some(500),
                tokens_per_minute: Some(10_000),
            }
        );
        assert_eq!(limits.limits("p", "big").requests_per_minute, Some(100));
        assert!(limits.limits("q", "small").is_unlimited());
        assert_eq!(limits.output_tokens("p"), 512);
    }

    #[test]
    fn tokens_are_estimated_on_the_high_side_with_the_output_reserved() {
        // 300 bytes of English (~75 real tokens) → 100, plus 4 per message, plus the output.
        let english = request(vec![Message::user("abc ".repeat(75))]);
        assert_eq!(estimated_tokens(&english, 0), 104);
        assert_eq!(estimated_tokens(&english, 1000), 1104);
        let mut capped = english.clone();
        capped.max_tokens = Some(10);
        assert_eq!(
            estimated_tokens(&capped, 1000),
            114,
            "the request's own cap wins"
        );
        // 100 CJK characters are 300 bytes: about a token each.
        let chinese = request(vec![Message::user("审".repeat(100))]);
        assert_eq!(estimated_tokens(&chinese, 0), 104);
        let tools = request(vec![Message::assistant(
            "",
            vec![ToolCall {
                id: "c1".into(),
                name: "read".into(),
                arguments: "{\"path\":\"src/lib.rs\"}".into(),
            }],
        )]);
        assert_eq!(
            estimated_tokens(&tools, 0),
            4 + (2 + 4 + 21_usize).div_ceil(3) as u64
        );
    }

    #[test]
    fn a_call_takes_one_request_and_its_tokens_capped_at_the_minute() {
        let limits = ModelLimits {
            requests_per_minute: Some(120),
            tokens_per_minute: Some(1000),
        };
        let d = demands(limits, 5000);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].bucket, d[0].cost), (Bucket::Requests, 1));
        assert_eq!(d[0].limit, Limit::per_minute(120, 2));
        assert_eq!((d[1].bucket, d[1].cost), (Bucket::Tokens, 1000));
        assert_eq!(d[1].limit, Limit::per_minute(1000, 1000));
        let slow = demands(
            ModelLimits {
                requests_per_minute: Some(3),
                tokens_per_minute: None,
            },
            10,
        );
        assert_eq!(slow.len(), 1);
        assert_eq!(slow[0].limit.burst, 1);
    }
}
