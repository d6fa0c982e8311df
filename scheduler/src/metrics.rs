//! Every metric the scheduler exports, in one place (SPEC O1). Labels are bounded: task kind,
//! terminal state, stage, outcome, the configured model — never task, PR or repository ids.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::task::PipelineKind;

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
    /// (`crate::merge`; a group of n findings counts n − 1), by the kind of stage that raised the
    /// merged-away finding and the model that answered there (`unknown` when its result did not
    /// say). A model whose findings often merge is repeating what was already said.
    pub findings_merged: IntCounterVec,
    /// `verdict_stages_recovered_total{how}`: stages the sweeper recovered long after
    /// publication — `applied` (a recorded result whose message never arrived) or `republished`
    /// (neither a result nor a live claim: the request was lost).
    pub recovered: IntCounterVec,
    /// `verdict_publications_total{kind, outcome}`: publication attempts to GitHub by task kind
    /// and how they ended (published, nothing, stale, failed, retry).
    pub publications: IntCounterVec,
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
        Ok(m)
    }
}

/// The `kind` label of a task: both review pipelines count as `review`.
pub fn task_kind_label(pipeline: PipelineKind) -> &'static str {
    match pipeline {
        PipelineKind::Multi | PipelineKind::Single => "review",
        PipelineKind::IssueAnalysis => "issue-analysis",
        PipelineKind::Scan => "scan",
    }
}
