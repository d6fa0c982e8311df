//! A pipeline transition carried out: the pure change stored with compare-and-set, then — only
//! once stored — its side effects in order: progress events, terminal bookkeeping, publication of
//! the stages it planned (so a fallback event precedes the next stage). A stage that cannot be
//! carried (its request larger than a broker message, or dead-lettered) fails as an execution
//! failure of that stage, through the same pipeline rule as any other.

use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec};
use verdict_backends::clock::Clock;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::wire::{EventType, StageResult, Usage, WIRE_VERSION};

use super::SchedulerDeps;
use super::budgets::Budgets;
use super::outbox::{Outbox, Uncarried};
use super::progress::Progress;
use super::publish::Publication;
use super::records::{TaskRecords, Updated};
use crate::metrics;
use crate::service::ServiceError;
use verdict_policy::pipeline::{self, Effects};
use verdict_policy::task::{StageStatus, TaskRecord};

/// Applies transitions; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Transitions {
    records: TaskRecords,
    progress: Progress,
    outbox: Outbox,
    publication: Publication,
    clock: Arc<dyn Clock>,
    finished: IntCounterVec,
    triage_fallbacks: IntCounter,
    findings_merged: IntCounterVec,
    budgets: Budgets,
}

impl Transitions {
    pub(super) fn new(
        deps: &SchedulerDeps,
        records: &TaskRecords,
        progress: &Progress,
        outbox: &Outbox,
        publication: &Publication,
        budgets: &Budgets,
    ) -> Transitions {
        Transitions {
            records: records.clone(),
            progress: progress.clone(),
            outbox: outbox.clone(),
            publication: publication.clone(),
            clock: deps.clock.clone(),
            finished: deps.metrics.finished.clone(),
            triage_fallbacks: deps.metrics.triage_fallbacks.clone(),
            findings_merged: deps.metrics.findings_merged.clone(),
            budgets: budgets.clone(),
        }
    }

    /// Stores `change` of task `id` (see [`TaskRecords::update`]), then carries out its effects.
    pub(super) async fn apply(
        &self,
        id: &str,
        change: impl Fn(&mut TaskRecord) -> Effects,
    ) -> Result<TaskRecord, ServiceError> {
        let updated = self.records.update(id, change).await?;
        self.follow(&updated).await;
        Ok(updated.task)
    }

    /// The side effects of a stored transition.
    async fn follow(&self, updated: &Updated) {
        let Updated {
            task,
            effects,
            was_terminal,
        } = updated;
        let fallbacks = effects
            .events
            .iter()
            .filter(|d| d.kind == EventType::TriageFallback)
            .count();
        self.triage_fallbacks
            .inc_by(u64::try_from(fallbacks).unwrap_or(u64::MAX));
        for merged in &effects.merged {
            self.findings_merged
                .with_label_values(&[merged.stage.as_str(), merged.model.as_str()])
                .inc_by(merged.findings);
        }
        self.progress.append(&task.id, &effects.events).await;
        if task.state.is_terminal() && !was_terminal {
            self.finished
                .with_label_values(&[metrics::task_kind_label(task.pipeline), task.state.as_str()])
                .inc();
            tracing::info!(task = %task.id, state = task.state.as_str(), "task finished");
            let admitted =
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(task.created_unix_ms);
            verdict_backends::trace::close_task(
                &task.trace,
                "task",
                admitted,
                &[
                    ("task_id", &task.id),
                    ("kind", metrics::task_kind_label(task.pipeline)),
                    ("pipeline", task.pipeline.as_str()),
                    ("state", task.state.as_str()),
                ],
            );
            // Before anything retires it: a task leaves the active index only once its spending
            // is counted (the sweeper settles what this replica does not).
            let settled = self.budgets.settle(task).await;
            if task.publication.is_some() {
                // It stays on the active index until its publication settles (the sweeper
                // retries what this replica does not finish).
                self.publication.spawn(&task.id);
            } else if settled && let Err(e) = self.records.retire(task).await {
                tracing::warn!(error = %e, "active-task index not updated");
            }
        }
        let started = effects
            .events
            .iter()
            .any(|d| d.kind == EventType::TaskStarted);
        if started && task.github.as_ref().is_some_and(|g| g.publish) {
            self.publication.spawn_started(task);
        }
        if !effects.planned.is_empty() {
            // From the record just stored: nothing newer can have planned fewer stages.
            let refused = self.outbox.dispatch_from(task, &effects.planned).await;
            self.fail_uncarried(&task.id, refused).await;
        }
    }

    /// Publishes the planned stages of `stage_ids` ([`Outbox::dispatch`]); a stage whose request
    /// is larger than a broker message fails its task instead of being published (decision 117).
    pub(super) async fn dispatch(&self, task_id: &str, stage_ids: &[String]) {
        let refused = self.outbox.dispatch(task_id, stage_ids).await;
        self.fail_uncarried(task_id, refused).await;
    }

    async fn fail_uncarried(&self, task_id: &str, refused: Vec<Uncarried>) {
        for refused in refused {
            // Boxed: failing a stage is itself a transition, whose effects come back here (with
            // nothing left to publish once the task has ended).
            let failed = Box::pin(self.fail_stage(
                task_id,
                Some(&refused.stage_id),
                FailureKind::InvalidRequest,
                &refused.reason,
            ))
            .await;
            if let Err(e) = failed {
                tracing::warn!(error = %e, task = %task_id, "oversize stage not failed; the sweeper retries");
            }
        }
    }

    /// Ends stage `stage_id` of task `task_id` as an execution failure of `kind` that says
    /// `detail` (which ends the task `incomplete`, SPEC E4), as if its worker had reported it; a
    /// stage already done is left as its own result says. Without a stage that the task knows,
    /// the task itself ends `incomplete` with `detail` as its reason.
    pub(super) async fn fail_stage(
        &self,
        task_id: &str,
        stage_id: Option<&str>,
        kind: FailureKind,
        detail: &str,
    ) -> Result<TaskRecord, ServiceError> {
        let now = self.clock.now_unix_ms();
        self.apply(task_id, |t| {
            let Some(stage) = stage_id.and_then(|id| t.stage(id)) else {
                return pipeline::fail_intake(t, detail.to_owned(), kind, now);
            };
            if stage.status == StageStatus::Done {
                return Effects::default();
            }
            let result = StageResult {
                version: WIRE_VERSION,
                task_id: t.id.clone(),
                stage_id: stage.id.clone(),
                stage: stage.kind,
                attempt: stage.attempts,
                outcome: StageOutcome::ExecutionFailure {
                    kind,
                    retryable: false,
                    message: detail.to_owned(),
                },
                usage: Usage::default(),
                started_unix_ms: now,
                finished_unix_ms: now,
                model: None,
                evidence_cut: None,
            };
            pipeline::on_result(t, &result, now)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::outcome::StageOutcome;
    use verdict_proto::wire::{Priority, StageKind, StageResult, Usage, WIRE_VERSION};

    use super::*;
    use crate::engine::fixture::Fixture;
    use verdict_api::document::TaskState;
    use verdict_policy::pipeline;
    use verdict_policy::task::StageStatus;

    #[tokio::test(start_paused = true)]
    async fn a_start_is_stored_announced_and_its_stage_published() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let now = fx.now();

        let returned = fx
            .parts
            .transitions
            .apply(&task.id, |t| pipeline::start(t, now))
            .await
            .unwrap();

        assert_eq!(returned.state, TaskState::Running);
        assert_eq!(fx.store.events_of_type(EventType::TaskStarted).len(), 1);
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 1);
        let stored = fx.load(&task.id).await;
        assert_eq!(
            stored.stage("scan").unwrap().status,
            StageStatus::Dispatched
        );
    }

    #[tokio::test(start_paused = true)]
    async fn merged_findings_are_counted_by_stage_kind_and_model() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        let now = fx.now();
        let finding = serde_json::json!({"severity": "minor", "category": "bug", "file": "src/a.rs",
            "start_line": 1, "end_line": 1, "title": "Panic on empty input", "description": "d",
            "suggestion": null, "confidence": 50});
        let result = StageResult {
            version: WIRE_VERSION,
            task_id: task.id.clone(),
            stage_id: "scan".to_owned(),
            stage: StageKind::Scan,
            attempt: 1,
            outcome: StageOutcome::Ok {
                value: serde_json::json!({"version": 1, "overall_score": 80, "summary": "s",
                    "findings": [finding.clone(), finding]}),
                repaired: false,
                attempts: 1,
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: Some("m-scan".to_owned()),
            evidence_cut: None,
        };

        fx.parts
            .transitions
            .apply(&task.id, |t| pipeline::on_result(t, &result, now))
            .await
            .unwrap();

        let merged = &fx.metrics().findings_merged;
        assert_eq!(merged.with_label_values(&["scan", "m-scan"]).get(), 1);
        let stored = fx.load(&task.id).await;
        assert_eq!(stored.state, TaskState::Completed);
        assert_eq!(
            stored.result.unwrap()["findings"].as_array().unwrap().len(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ending_is_counted_and_retired_once() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let now = fx.now();
        let transitions = &fx.parts.transitions;

        for _ in 0..2 {
            let ended = transitions
                .apply(&task.id, |t| {
                    pipeline::cancel(t, "cancelled on request", now)
                })
                .await
                .unwrap();
            assert_eq!(ended.state, TaskState::Aborted);
        }

        let finished = &fx.metrics().finished;
        assert_eq!(finished.with_label_values(&["scan", "aborted"]).get(), 1);
        assert!(fx.parts.records.active().await.unwrap().is_empty());
        assert_eq!(fx.store.events_of_type(EventType::TaskFinished).len(), 1);
    }
}
