//! Every metric the worker exports, in one place (SPEC O1), so dashboards and alert rules can be
//! checked against this file and `docs/metrics.md`. Names follow
//! `verdict_<name>_<unit>[_total]`; labels are bounded (stage, protocol, provider, model, queue,
//! outcome, kind, status, tool) — never task, PR or repository. The label sets a process can know
//! in advance (every stage, outcome and failure kind; the configured providers and models) are
//! created at 0 by [`WorkerMetrics::initialise`], so `rate()` and `increase()` see a series
//! before its first event.

use prometheus::{
    CounterVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use verdict_proto::outcome::FailureKind;
use verdict_proto::protocol::ProtocolId;
use verdict_proto::wire::{Priority, StageKind};

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

/// The help text of `verdict_build_info`, the same on every process part that registers it
/// (the scheduler's copy must match: `verdict dev` registers both on one registry).
pub const BUILD_INFO_HELP: &str =
    "Always 1: the version and source commit of this verdict process part (role).";

/// The `model` label of a stage attempt that ended before any provider call.
pub const NO_MODEL: &str = "none";

/// The results of repair rounds (`verdict_protocol_repair_rounds_total{result}`).
pub const REPAIR_RESULTS: [&str; 4] = ["repaired", "invalid", "ungrounded", "execution_failure"];
/// What grounding concluded of a finding (`verdict_findings_grounded_total{outcome}`).
pub const GROUNDING_OUTCOMES: [&str; 3] = ["located", "corrected", "unlocated"];
/// The tool label: the four tools and `other` (a name the model made up).
pub const TOOL_LABELS: [&str; 5] = ["read", "grep", "find", "ls", "other"];
/// Tool call results (`verdict_tool_calls_total{result}`).
pub const TOOL_RESULTS: [&str; 3] = ["ok", "error", "not_executed"];
/// What the consumer does with a delivery (`verdict_stage_deliveries_total{result}`).
pub const DELIVERY_RESULTS: [&str; 9] = [
    "executed",
    "requeued_later",
    "given_back",
    "already_done",
    "deferred",
    "taken_over",
    "record_retried",
    "task_cancelled",
    "poison",
];

/// The `queue` label of a stage queue.
pub fn queue_label(priority: Priority) -> &'static str {
    match priority {
        Priority::Interactive => "interactive",
        Priority::Bulk => "bulk",
    }
}

pub use verdict_proto::budget::{Prices, TokenPrice};

/// The label values a worker knows from its configuration: which models each stage may call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownLabels {
    /// `(stage, provider, model)`: each stage's model and its fallback models.
    pub stage_models: Vec<(StageKind, String, String)>,
}

/// The worker's metrics, registered on one registry (the process's `/metrics`).
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    /// `verdict_stage_duration_seconds{stage, outcome}`
    pub stage_duration: HistogramVec,
    /// `verdict_stage_outcomes_total{stage, model, outcome, kind}`; kind is `none` unless the
    /// outcome is an execution failure; model is the one that answered last ([`NO_MODEL`] when
    /// the attempt ended before any call).
    pub stage_outcomes: IntCounterVec,
    /// `verdict_stages_in_flight{queue}`: stage attempts executing, by the queue they came from.
    pub stages_in_flight: IntGaugeVec,
    /// `verdict_worker_prefetch_in_use{queue}`: deliveries this process holds unsettled (running,
    /// claiming, being settled): what it uses of its prefetch.
    pub prefetch_in_use: IntGaugeVec,
    /// `verdict_worker_prefetch_limit{queue}`: the prefetch this process subscribed with (0 when
    /// it does not consume the queue).
    pub prefetch_limit: IntGaugeVec,
    /// `verdict_build_info{version, role="worker", commit}` = 1.
    pub build_info: IntGauge,
    /// `verdict_protocol_repair_rounds_total{protocol, model, result}`; result is `repaired`,
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
    /// `verdict_provider_cost_usd_total{provider, model}`: tokens × the provider's configured
    /// prices, estimated; only for providers with prices.
    pub provider_cost: CounterVec,
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
    /// `verdict_response_cache_total{stage, result}`: the response cache (X3) per stage —
    /// `hit` (answered without a provider call), `miss`, `stored` (an accepted answer kept),
    /// `error` (the cache unreachable: the provider is called as if it missed).
    pub response_cache: IntCounterVec,
    /// `verdict_structured_output_downgrades_total{provider, model, mode}`: decoding
    /// constraints a provider refused (HTTP 400 naming them); the call was retried without and
    /// that model is asked unconstrained from then on.
    pub structured_downgrades: IntCounterVec,
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
                    "Stage attempts by stage, the model that answered (none: no call made), outcome (ok, invalid_output, execution_failure) and failure kind.",
                ),
                &["stage", "model", "outcome", "kind"],
            )?,
            stages_in_flight: IntGaugeVec::new(
                Opts::new(
                    "verdict_stages_in_flight",
                    "Stage attempts currently executing in this process, by the queue they came from.",
                ),
                &["queue"],
            )?,
            prefetch_in_use: IntGaugeVec::new(
                Opts::new(
                    "verdict_worker_prefetch_in_use",
                    "Deliveries this process holds unsettled, by queue: the part of its prefetch in use.",
                ),
                &["queue"],
            )?,
            prefetch_limit: IntGaugeVec::new(
                Opts::new(
                    "verdict_worker_prefetch_limit",
                    "The prefetch this process subscribed to each queue with (0: not consumed).",
                ),
                &["queue"],
            )?,
            build_info: IntGauge::with_opts(
                Opts::new("verdict_build_info", BUILD_INFO_HELP)
                    .const_label("version", env!("CARGO_PKG_VERSION"))
                    .const_label("role", "worker")
                    .const_label(
                        "commit",
                        option_env!("VERDICT_GIT_COMMIT").unwrap_or("unknown"),
                    ),
            )?,
            repair_rounds: IntCounterVec::new(
                Opts::new(
                    "verdict_protocol_repair_rounds_total",
                    "Protocol repair rounds by protocol, model and result (repaired, invalid, ungrounded, execution_failure).",
                ),
                &["protocol", "model", "result"],
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
            provider_cost: CounterVec::new(
                Opts::new(
                    "verdict_provider_cost_usd_total",
                    "Estimated provider cost in US dollars: tokens times the provider's configured prices.",
                ),
                &["provider", "model"],
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
            response_cache: IntCounterVec::new(
                Opts::new(
                    "verdict_response_cache_total",
                    "Response cache lookups and stores by stage and result (hit, miss, stored, error).",
                ),
                &["stage", "result"],
            )?,
            structured_downgrades: IntCounterVec::new(
                Opts::new(
                    "verdict_structured_output_downgrades_total",
                    "Decoding constraints a provider refused (HTTP 400 naming them), by provider, model and mode (json_schema, grammar); the call was retried without.",
                ),
                &["provider", "model", "mode"],
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
        registry.register(Box::new(m.prefetch_in_use.clone()))?;
        registry.register(Box::new(m.prefetch_limit.clone()))?;
        registry.register(Box::new(m.build_info.clone()))?;
        registry.register(Box::new(m.provider_cost.clone()))?;
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
        registry.register(Box::new(m.response_cache.clone()))?;
        registry.register(Box::new(m.structured_downgrades.clone()))?;
        registry.register(Box::new(m.tool_calls.clone()))?;
        registry.register(Box::new(m.findings_grounded.clone()))?;
        registry.register(Box::new(m.deliveries.clone()))?;
        m.build_info.set(1);
        Ok(m)
    }

    /// Creates at 0 every series whose labels are known before any event: every stage, outcome
    /// and failure kind, protocol, tool and delivery result, both queues, and for each model the
    /// configuration names (`known`) its provider series — the cost only where `prices` has the
    /// provider. Bounded: stages × kinds plus models × kinds, a few hundred series.
    pub fn initialise(&self, known: &KnownLabels, prices: &Prices) {
        let kinds = FailureKind::ALL.map(FailureKind::as_str);
        for stage in StageKind::ALL.map(StageKind::as_str) {
            for outcome in ["ok", "invalid_output", "execution_failure"] {
                self.stage_duration.with_label_values(&[stage, outcome]);
            }
            for kind in kinds {
                self.stage_outcomes.with_label_values(&[
                    stage,
                    NO_MODEL,
                    "execution_failure",
                    kind,
                ]);
            }
            self.deadline_finalisations.with_label_values(&[stage]);
            for result in ["hit", "miss", "stored", "error"] {
                self.response_cache.with_label_values(&[stage, result]);
            }
        }
        for protocol in ProtocolId::ALL.map(ProtocolId::as_str) {
            self.repair_consistency_warnings
                .with_label_values(&[protocol]);
        }
        for priority in [Priority::Interactive, Priority::Bulk] {
            let queue = queue_label(priority);
            self.stages_in_flight.with_label_values(&[queue]);
            self.prefetch_in_use.with_label_values(&[queue]);
            self.prefetch_limit.with_label_values(&[queue]);
        }
        for tool in TOOL_LABELS {
            for result in TOOL_RESULTS {
                self.tool_calls.with_label_values(&[tool, result]);
            }
        }
        for result in DELIVERY_RESULTS {
            self.deliveries.with_label_values(&[result]);
        }
        for (stage, provider, model) in &known.stage_models {
            let (stage, provider, model) = (stage.as_str(), provider.as_str(), model.as_str());
            self.stage_outcomes
                .with_label_values(&[stage, model, "ok", "none"]);
            self.stage_outcomes
                .with_label_values(&[stage, model, "invalid_output", "none"]);
            for kind in kinds {
                self.stage_outcomes
                    .with_label_values(&[stage, model, "execution_failure", kind]);
            }
            for protocol in ProtocolId::ALL.map(ProtocolId::as_str) {
                for result in REPAIR_RESULTS {
                    self.repair_rounds
                        .with_label_values(&[protocol, model, result]);
                }
            }
            for outcome in GROUNDING_OUTCOMES {
                self.findings_grounded
                    .with_label_values(&[stage, model, outcome]);
            }
            self.provider_requests
                .with_label_values(&[provider, model, "ok"]);
            for kind in kinds {
                self.provider_requests
                    .with_label_values(&[provider, model, kind]);
                self.provider_retries
                    .with_label_values(&[provider, model, kind]);
            }
            self.provider_latency.with_label_values(&[provider, model]);
            for direction in ["input", "output"] {
                self.provider_tokens
                    .with_label_values(&[provider, model, direction]);
            }
            if prices.get(provider).is_some() {
                self.provider_cost.with_label_values(&[provider, model]);
            }
            self.rate_limit_waits.with_label_values(&[provider, model]);
            for mode in ["json_schema", "grammar"] {
                self.structured_downgrades
                    .with_label_values(&[provider, model, mode]);
            }
            self.rate_limit_wait_seconds
                .with_label_values(&[provider, model]);
            self.rate_limit_pauses.with_label_values(&[provider, model]);
            self.rate_limiter_unavailable
                .with_label_values(&[provider, model]);
            self.responses_reused.with_label_values(&[provider]);
        }
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
            .with_label_values(&["review", "big", "ok", "none"])
            .inc();
        m.stage_duration
            .with_label_values(&["review", "ok"])
            .observe(1.0);
        let text = render(&registry);
        assert!(
            text.contains(
                "verdict_stage_outcomes_total{kind=\"none\",model=\"big\",outcome=\"ok\",stage=\"review\"} 1"
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
        assert!(text.contains("verdict_build_info{commit="), "{text}");
    }

    #[test]
    fn initialise_creates_the_known_series_at_zero() {
        let registry = Registry::new();
        let m = WorkerMetrics::register(&registry).unwrap();
        let known = KnownLabels {
            stage_models: vec![(StageKind::Reviewer, "main".into(), "big".into())],
        };
        let mut prices = Prices::default();
        prices.set(
            "main",
            TokenPrice {
                input_per_million: 3.0,
                output_per_million: 15.0,
            },
        );
        m.initialise(&known, &prices);
        let text = render(&registry);
        for series in [
            r#"verdict_stage_outcomes_total{kind="timeout",model="none",outcome="execution_failure",stage="triage"} 0"#,
            r#"verdict_stage_outcomes_total{kind="none",model="big",outcome="invalid_output",stage="reviewer"} 0"#,
            r#"verdict_protocol_repair_rounds_total{model="big",protocol="reviewer",result="invalid"} 0"#,
            r#"verdict_provider_requests_total{model="big",provider="main",status="rate_limited"} 0"#,
            r#"verdict_provider_cost_usd_total{model="big",provider="main"} 0"#,
            r#"verdict_worker_prefetch_limit{queue="bulk"} 0"#,
            r#"verdict_stage_deliveries_total{result="poison"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
    }

    #[test]
    fn cost_is_tokens_times_price_per_million() {
        let price = TokenPrice {
            input_per_million: 3.0,
            output_per_million: 15.0,
        };
        let cost = price.cost(2_000, 1_000);
        assert!((cost - 0.021).abs() < 1e-12, "{cost}");
    }
}
