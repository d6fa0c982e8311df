//! Every metric the worker exports, in one place (SPEC O1), so dashboards and alert rules can be
//! checked against this file. Names follow `verdict_<name>_<unit>[_total]`; labels are bounded
//! (stage, protocol, provider, model, outcome, kind, status, tool) — never task, PR or repository.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// Buckets for stage durations: seconds to the default 10-minute deadline and beyond.
const STAGE_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
];
/// Buckets for rate-limit waits: pacing gaps of milliseconds to pauses of minutes.
const WAIT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Buckets for single provider calls.
const CALL_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The worker's metrics, registered on one registry (the process's `/metrics`).
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    /// `verdict_stage_duration_seconds{stage, outcome}`
    pub stage_duration: HistogramVec,
    /// `verdict_stage_outcomes_total{stage, outcome, kind}`; kind is `none` unless the outcome
    /// is an execution failure.
    pub stage_outcomes: IntCounterVec,
    /// `verdict_stages_in_flight`
    pub stages_in_flight: IntGauge,
    /// `verdict_protocol_repair_rounds_total{protocol, result}`; result is `repaired`,
    /// `invalid`, `ungrounded` (the answer follows the contract but some findings still point at
    /// nothing) or `execution_failure`.
    pub repair_rounds: IntCounterVec,
    /// `verdict_protocol_repair_consistency_warnings_total{protocol}`
    pub repair_consistency_warnings: IntCounterVec,
    /// `verdict_soft_deadline_finalisations_total{stage}`
    pub deadline_finalisations: IntCounterVec,
    /// `verdict_provider_requests_total{provider, model, status}`; status is `ok` or the
    /// failure kind.
    pub provider_requests: IntCounterVec,
    /// `verdict_provider_request_duration_seconds{provider, model}`
    pub provider_latency: HistogramVec,
    /// `verdict_provider_tokens_total{provider, model, direction}`; direction `input`/`output`.
    pub provider_tokens: IntCounterVec,
    /// `verdict_provider_retries_total{provider, model, kind}`
    pub provider_retries: IntCounterVec,
    /// `verdict_rate_limit_waits_total{provider, model}`: calls that waited on a rate limit —
    /// the pool's limiter (SPEC Q3) or a provider's 429 — in place or by a requeue.
    pub rate_limit_waits: IntCounterVec,
    /// `verdict_rate_limit_wait_seconds{provider, model}`: how long each such wait held its slot.
    pub rate_limit_wait_seconds: HistogramVec,
    /// `verdict_rate_limit_pauses_total{provider, model}`: pool-wide pauses set after a provider
    /// said to slow down (SPEC X6).
    pub rate_limit_pauses: IntCounterVec,
    /// `verdict_rate_limiter_unavailable_total{provider, model}`: limiter calls that failed (its
    /// store unreachable) and were retried after a backoff; the provider is not called meanwhile.
    pub rate_limiter_unavailable: IntCounterVec,
    /// `verdict_provider_responses_reused_total{provider}`: answers taken from the journal of
    /// an earlier delivery instead of paying again (E7).
    pub responses_reused: IntCounterVec,
    /// `verdict_tool_calls_total{tool, result}`; result `ok`, `error` or `not_executed`.
    pub tool_calls: IntCounterVec,
    /// `verdict_findings_grounded_total{stage, model, outcome}`: findings of final answers by
    /// what grounding concluded — `located` as given, `corrected` to the one real place, or
    /// `unlocated` (demoted: the model pointed at nothing).
    pub findings_grounded: IntCounterVec,
    /// `verdict_stage_deliveries_total{result}`: what the consumer did with each delivery —
    /// `executed`, `requeued_later` (retry with delay), `given_back` (shutdown, or the store
    /// unreachable when claiming: deferred), `already_done` (result recorded: republished),
    /// `deferred` (another worker's live claim, or a second copy in this process: published
    /// again for when the claim would lapse), `taken_over` (this worker lost its lease to
    /// another), `record_retried` (a result held while the store was unreachable),
    /// `task_cancelled`, `poison` (dead-lettered).
    pub deliveries: IntCounterVec,
}

impl WorkerMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &Registry) -> Result<WorkerMetrics, prometheus::Error> {
        let m = WorkerMetrics {
            stage_duration: HistogramVec::new(
                HistogramOpts::new(
                    "verdict_stage_duration_seconds",
                    "Wall time of one stage attempt, by stage and outcome.",
                )
                .buckets(STAGE_BUCKETS.to_vec()),
                &["stage", "outcome"],
            )?,
            stage_outcomes: IntCounterVec::new(
                Opts::new(
                    "verdict_stage_outcomes_total",
                    "Stage attempts by stage, outcome (ok, invalid_output, execution_failure) and failure kind.",
                ),
                &["stage", "outcome", "kind"],
            )?,
            stages_in_flight: IntGauge::new(
                "verdict_stages_in_flight",
                "Stage attempts currently executing in this process.",
            )?,
            repair_rounds: IntCounterVec::new(
                Opts::new(
                    "verdict_protocol_repair_rounds_total",
                    "Protocol repair rounds by protocol and result (repaired, invalid, ungrounded, execution_failure).",
                ),
                &["protocol", "result"],
            )?,
            repair_consistency_warnings: IntCounterVec::new(
                Opts::new(
                    "verdict_protocol_repair_consistency_warnings_total",
                    "Repaired answers whose finding count differs from the original response.",
                ),
                &["protocol"],
            )?,
            deadline_finalisations: IntCounterVec::new(
                Opts::new(
                    "verdict_soft_deadline_finalisations_total",
                    "Stage attempts that reached the soft task deadline and were asked to finalise.",
                ),
                &["stage"],
            )?,
            provider_requests: IntCounterVec::new(
                Opts::new(
                    "verdict_provider_requests_total",
                    "Provider calls by provider, model and status (ok or failure kind).",
                ),
                &["provider", "model", "status"],
            )?,
            provider_latency: HistogramVec::new(
                HistogramOpts::new(
                    "verdict_provider_request_duration_seconds",
                    "Latency of one provider call.",
                )
                .buckets(CALL_BUCKETS.to_vec()),
                &["provider", "model"],
            )?,
            provider_tokens: IntCounterVec::new(
                Opts::new(
                    "verdict_provider_tokens_total",
                    "Tokens reported by providers, by direction (input, output).",
                ),
                &["provider", "model", "direction"],
            )?,
            provider_retries: IntCounterVec::new(
                Opts::new(
                    "verdict_provider_retries_total",
                    "Retries of failed provider calls, by failure kind.",
                ),
                &["provider", "model", "kind"],
            )?,
            rate_limit_waits: IntCounterVec::new(
                Opts::new(
                    "verdict_rate_limit_waits_total",
                    "Provider calls that waited on a rate limit (the pool's limiter, or a 429 and its Retry-After).",
                ),
                &["provider", "model"],
            )?,
            rate_limit_wait_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "verdict_rate_limit_wait_seconds",
                    "Time one provider call waited in place on a rate limit.",
                )
                .buckets(WAIT_BUCKETS.to_vec()),
                &["provider", "model"],
            )?,
            rate_limit_pauses: IntCounterVec::new(
                Opts::new(
                    "verdict_rate_limit_pauses_total",
                    "Pool-wide pauses of a provider and model after a 429 or a rate-limit reset header.",
                ),
                &["provider", "model"],
            )?,
            rate_limiter_unavailable: IntCounterVec::new(
                Opts::new(
                    "verdict_rate_limiter_unavailable_total",
                    "Rate limiter calls that failed (its store unreachable) and were retried before calling the provider.",
                ),
                &["provider", "model"],
            )?,
            responses_reused: IntCounterVec::new(
                Opts::new(
                    "verdict_provider_responses_reused_total",
                    "Provider responses reused from an earlier delivery of the same stage.",
                ),
                &["provider"],
            )?,
            tool_calls: IntCounterVec::new(
                Opts::new(
                    "verdict_tool_calls_total",
                    "Repository tool calls by tool and result (ok, error, not_executed).",
                ),
                &["tool", "result"],
            )?,
            findings_grounded: IntCounterVec::new(
                Opts::new(
                    "verdict_findings_grounded_total",
                    "Findings of final answers by stage, model and grounding outcome (located, corrected, unlocated).",
                ),
                &["stage", "model", "outcome"],
            )?,
            deliveries: IntCounterVec::new(
                Opts::new(
                    "verdict_stage_deliveries_total",
                    "Stage request deliveries by what the worker did with them.",
                ),
                &["result"],
            )?,
        };
        registry.register(Box::new(m.stage_duration.clone()))?;
        registry.register(Box::new(m.stage_outcomes.clone()))?;
        registry.register(Box::new(m.stages_in_flight.clone()))?;
        registry.register(Box::new(m.repair_rounds.clone()))?;
        registry.register(Box::new(m.repair_consistency_warnings.clone()))?;
        registry.register(Box::new(m.deadline_finalisations.clone()))?;
        registry.register(Box::new(m.provider_requests.clone()))?;
        registry.register(Box::new(m.provider_latency.clone()))?;
        registry.register(Box::new(m.provider_tokens.clone()))?;
        registry.register(Box::new(m.provider_retries.clone()))?;
        registry.register(Box::new(m.rate_limit_waits.clone()))?;
        registry.register(Box::new(m.rate_limit_wait_seconds.clone()))?;
        registry.register(Box::new(m.rate_limit_pauses.clone()))?;
        registry.register(Box::new(m.rate_limiter_unavailable.clone()))?;
        registry.register(Box::new(m.responses_reused.clone()))?;
        registry.register(Box::new(m.tool_calls.clone()))?;
        registry.register(Box::new(m.findings_grounded.clone()))?;
        registry.register(Box::new(m.deliveries.clone()))?;
        Ok(m)
    }
}

/// Renders a registry in the Prometheus text format (the body of `/metrics`).
pub fn render(registry: &Registry) -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    if encoder.encode(&registry.gather(), &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_with_conventional_names() {
        let registry = Registry::new();
        let m = WorkerMetrics::register(&registry).unwrap();
        m.stage_outcomes
            .with_label_values(&["review", "ok", "none"])
            .inc();
        m.stage_duration
            .with_label_values(&["review", "ok"])
            .observe(1.0);
        let text = render(&registry);
        assert!(
            text.contains(
                "verdict_stage_outcomes_total{kind=\"none\",outcome=\"ok\",stage=\"review\"} 1"
            ),
            "{text}"
        );
        for family in registry.gather() {
            let name = family.name();
            assert!(name.starts_with("verdict_"), "{name}");
        }
        assert!(
            WorkerMetrics::register(&registry).is_err(),
            "double registration is refused"
        );
    }
}
