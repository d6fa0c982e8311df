//! Every metric the scheduler exports, in one place (SPEC O1), documented in `docs/metrics.md`.
//! Labels are bounded: task kind, terminal state, stage, outcome, queue, the configured model —
//! never task, PR or repository ids. [`SchedulerMetrics::register`] creates every label set it
//! can know in advance at 0, so `rate()` and `increase()` see a series before its first event.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use verdict_proto::wire::StageKind;

use verdict_policy::task::PipelineKind;

/// The help text of `verdict_build_info`, the same as the worker's (`verdict dev` registers
/// both on one registry, which requires it).
pub const BUILD_INFO_HELP: &str =
    "Always 1: the version and source commit of this verdict process part (role).";

/// The `queue` label of the broker's queues, as `verdict_queue_messages` names them.
pub const QUEUE_LABELS: [&str; 4] = ["interactive", "bulk", "results", "dead"];

/// Task kinds (`kind` label).
const TASK_KINDS: [&str; 3] = ["review", "issue-analysis", "scan"];
/// Terminal task states (`verdict_tasks_total{state}`).
const TERMINAL_STATES: [&str; 5] = ["completed", "skipped", "degraded", "incomplete", "aborted"];
/// How publication attempts end (`verdict_publications_total{outcome}`).
/// The outcomes of sealing an ended task (`verdict_tasks_sealed_total`).
pub const SEAL_OUTCOMES: [&str; 4] = ["sealed", "changed", "nothing", "failed"];
const PUBLICATION_OUTCOMES: [&str; 5] = ["published", "nothing", "stale", "failed", "retry"];
/// What a consumed dead letter was (`verdict_dead_letters_consumed_total{what}`).
pub const DEAD_LETTER_KINDS: [&str; 4] = ["result", "request", "poison", "unidentified"];

#[derive(Debug, Clone)]
pub struct SchedulerMetrics {
    /// `verdict_tasks_submitted_total{kind}`
    pub submitted: IntCounterVec,
    /// `verdict_tasks_total{kind, state}`: tasks that reached a terminal state.
    pub finished: IntCounterVec,
    /// `verdict_tasks_active`: tasks queued or running, as seen by this replica's last sweep.
    pub active: IntGauge,
    /// `verdict_triage_fallbacks_total`
    pub triage_fallbacks: IntCounter,
    /// `verdict_stage_dispatches_total{stage}`
    pub dispatches: IntCounterVec,
    /// `verdict_stage_results_total{stage, outcome}`: results applied to tasks.
    pub results: IntCounterVec,
    /// `verdict_dead_letters_total{queue}`: messages the scheduler dead-lettered as poison
    /// (`results`), and dead letters it consumed that name no task it knows (`unidentified`).
    pub dead_letters: IntCounterVec,
    /// `verdict_task_conflicts_total`: compare-and-set retries (replicas racing on one task).
    pub conflicts: IntCounter,
    /// `verdict_findings_merged_total{stage, model}`: findings merged into another finding
    /// (`verdict_policy::merge`; a group of n findings counts n − 1), by the kind of stage that raised the
    /// merged-away finding and the model that answered there (`unknown` when its result did not
    /// say). A model whose findings often merge is repeating what was already said.
    pub findings_merged: IntCounterVec,
    /// `verdict_stages_recovered_total{how}`: stages the sweeper recovered long after
    /// publication — `applied` (a recorded result whose message never arrived) or `republished`
    /// (neither a result nor a live claim: the request was lost).
    pub recovered: IntCounterVec,
    /// `verdict_tasks_sealed_total{outcome}`: ended tasks whose records were gathered into one
    /// (`sealed`), found changed while being read and left as they were (`changed`), had nothing
    /// to gather (`nothing`), or could not be sealed (`failed`: the store did not answer).
    pub sealed: IntCounterVec,
    /// `verdict_publications_total{kind, outcome}`: publication attempts to GitHub by task kind
    /// and how they ended (published, nothing, stale, failed, retry).
    pub publications: IntCounterVec,
    /// `verdict_dead_letters_consumed_total{what}`: dead letters this replica consumed, by what
    /// they turned out to be — a `result` applied, a stage `request` or a `poison` message that
    /// failed its stage or task, or `unidentified`.
    pub dead_letters_consumed: IntCounterVec,
    /// `verdict_queue_messages{queue}`: messages ready on each broker queue at the last poll.
    pub queue_messages: IntGaugeVec,
    /// `verdict_queue_consumers{queue}`: consumers of each broker queue at the last poll.
    pub queue_consumers: IntGaugeVec,
    /// `verdict_backend_pressure{backend}`: 1 while that backend (`redis`, `broker`) reports it
    /// has no room for new tasks and submissions are refused as overloaded, else 0.
    pub backend_pressure: IntGaugeVec,
    /// `verdict_queue_stats_failures_total{queue}`: polls the broker did not answer (the gauges
    /// keep their last values).
    pub queue_stats_failures: IntCounterVec,
    /// `verdict_build_info{version, role="scheduler", commit}` = 1.
    pub build_info: IntGauge,
}

impl SchedulerMetrics {
    pub fn register(registry: &Registry) -> Result<SchedulerMetrics, prometheus::Error> {
        let m = SchedulerMetrics {
            submitted: IntCounterVec::new(
                Opts::new("verdict_tasks_submitted_total", "Tasks submitted, by kind."),
                &["kind"],
            )?,
            finished: IntCounterVec::new(
                Opts::new(
                    "verdict_tasks_total",
                    "Tasks that reached a terminal state, by kind and state (completed, skipped, degraded, incomplete, aborted).",
                ),
                &["kind", "state"],
            )?,
            active: IntGauge::new(
                "verdict_tasks_active",
                "Tasks queued or running (last sweep).",
            )?,
            triage_fallbacks: IntCounter::new(
                "verdict_triage_fallbacks_total",
                "Reviews that continued by default because triage output was invalid after repair.",
            )?,
            dispatches: IntCounterVec::new(
                Opts::new(
                    "verdict_stage_dispatches_total",
                    "Stage requests published, by stage.",
                ),
                &["stage"],
            )?,
            results: IntCounterVec::new(
                Opts::new(
                    "verdict_stage_results_total",
                    "Stage results applied to tasks, by stage and outcome.",
                ),
                &["stage", "outcome"],
            )?,
            dead_letters: IntCounterVec::new(
                Opts::new(
                    "verdict_dead_letters_total",
                    "Messages dead-lettered as poison, by queue (results), and consumed dead letters that named no known task (unidentified).",
                ),
                &["queue"],
            )?,
            conflicts: IntCounter::new(
                "verdict_task_conflicts_total",
                "Task updates retried because another replica changed the task first.",
            )?,
            findings_merged: IntCounterVec::new(
                Opts::new(
                    "verdict_findings_merged_total",
                    "Findings merged into another finding as duplicates (a group of n counts n - 1), by stage kind and the model that answered.",
                ),
                &["stage", "model"],
            )?,
            sealed: IntCounterVec::new(
                Opts::new(
                    "verdict_tasks_sealed_total",
                    "Ended tasks whose records were gathered into one archive, by outcome: sealed, changed (written meanwhile; left as they were), nothing, failed.",
                ),
                &["outcome"],
            )?,
            recovered: IntCounterVec::new(
                Opts::new(
                    "verdict_stages_recovered_total",
                    "Stages recovered by the sweeper long after publication: applied (a recorded result that never arrived) or republished (lost).",
                ),
                &["how"],
            )?,
            publications: IntCounterVec::new(
                Opts::new(
                    "verdict_publications_total",
                    "Publication attempts to the code host, by task kind and outcome (published, nothing, stale, failed, retry).",
                ),
                &["kind", "outcome"],
            )?,
            dead_letters_consumed: IntCounterVec::new(
                Opts::new(
                    "verdict_dead_letters_consumed_total",
                    "Dead letters consumed, by what they were: result (applied), request or poison (ended their stage or task), unidentified.",
                ),
                &["what"],
            )?,
            queue_messages: IntGaugeVec::new(
                Opts::new(
                    "verdict_queue_messages",
                    "Messages ready on each broker queue, as the broker reported at the last poll.",
                ),
                &["queue"],
            )?,
            queue_consumers: IntGaugeVec::new(
                Opts::new(
                    "verdict_queue_consumers",
                    "Consumers of each broker queue, as the broker reported at the last poll.",
                ),
                &["queue"],
            )?,
            backend_pressure: IntGaugeVec::new(
                Opts::new(
                    "verdict_backend_pressure",
                    "1 while the backend (redis, broker) has no room for new tasks and submissions are refused as overloaded.",
                ),
                &["backend"],
            )?,
            queue_stats_failures: IntCounterVec::new(
                Opts::new(
                    "verdict_queue_stats_failures_total",
                    "Polls of a queue's counts that the broker did not answer.",
                ),
                &["queue"],
            )?,
            build_info: IntGauge::with_opts(
                Opts::new("verdict_build_info", BUILD_INFO_HELP)
                    .const_label("version", env!("CARGO_PKG_VERSION"))
                    .const_label("role", "scheduler")
                    .const_label(
                        "commit",
                        option_env!("VERDICT_GIT_COMMIT").unwrap_or("unknown"),
                    ),
            )?,
        };
        registry.register(Box::new(m.submitted.clone()))?;
        registry.register(Box::new(m.finished.clone()))?;
        registry.register(Box::new(m.active.clone()))?;
        registry.register(Box::new(m.triage_fallbacks.clone()))?;
        registry.register(Box::new(m.dispatches.clone()))?;
        registry.register(Box::new(m.results.clone()))?;
        registry.register(Box::new(m.dead_letters.clone()))?;
        registry.register(Box::new(m.conflicts.clone()))?;
        registry.register(Box::new(m.findings_merged.clone()))?;
        registry.register(Box::new(m.publications.clone()))?;
        registry.register(Box::new(m.recovered.clone()))?;
        registry.register(Box::new(m.sealed.clone()))?;
        registry.register(Box::new(m.dead_letters_consumed.clone()))?;
        registry.register(Box::new(m.queue_messages.clone()))?;
        registry.register(Box::new(m.queue_consumers.clone()))?;
        registry.register(Box::new(m.backend_pressure.clone()))?;
        registry.register(Box::new(m.queue_stats_failures.clone()))?;
        registry.register(Box::new(m.build_info.clone()))?;
        m.build_info.set(1);
        m.initialise();
        Ok(m)
    }

    /// Creates `verdict_findings_merged_total` at 0 for each `(stage, model)` the configuration
    /// names (the pipeline settings' stages and models).
    pub fn initialise_models(&self, stage_models: &[(StageKind, String)]) {
        for (stage, model) in stage_models {
            self.findings_merged
                .with_label_values(&[stage.as_str(), model.as_str()]);
        }
    }

    /// Every label set known in advance, at 0: task kinds and terminal states, stages and
    /// outcomes, queues, dead-letter and publication outcomes.
    fn initialise(&self) {
        for kind in TASK_KINDS {
            self.submitted.with_label_values(&[kind]);
            for state in TERMINAL_STATES {
                self.finished.with_label_values(&[kind, state]);
            }
            for outcome in PUBLICATION_OUTCOMES {
                self.publications.with_label_values(&[kind, outcome]);
            }
        }
        for stage in StageKind::ALL.map(StageKind::as_str) {
            self.dispatches.with_label_values(&[stage]);
            for outcome in ["ok", "invalid_output", "execution_failure"] {
                self.results.with_label_values(&[stage, outcome]);
            }
        }
        for queue in ["results", "unidentified"] {
            self.dead_letters.with_label_values(&[queue]);
        }
        for what in DEAD_LETTER_KINDS {
            self.dead_letters_consumed.with_label_values(&[what]);
        }
        for how in ["applied", "republished"] {
            self.recovered.with_label_values(&[how]);
        }
        for outcome in SEAL_OUTCOMES {
            self.sealed.with_label_values(&[outcome]);
        }
        for backend in PRESSURE_BACKENDS {
            self.backend_pressure.with_label_values(&[backend]);
        }
        for queue in QUEUE_LABELS {
            self.queue_messages.with_label_values(&[queue]);
            self.queue_consumers.with_label_values(&[queue]);
            self.queue_stats_failures.with_label_values(&[queue]);
        }
    }
}

/// The `backend` labels of `verdict_backend_pressure`.
pub const PRESSURE_BACKENDS: [&str; 2] = ["redis", "broker"];

/// The `kind` label of a task: both review pipelines count as `review`.
pub fn task_kind_label(pipeline: PipelineKind) -> &'static str {
    match pipeline {
        PipelineKind::Multi | PipelineKind::Single => "review",
        PipelineKind::IssueAnalysis => "issue-analysis",
        PipelineKind::Scan => "scan",
    }
}
