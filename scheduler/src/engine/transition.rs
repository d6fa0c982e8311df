//! A pipeline transition carried out: the pure change stored with compare-and-set, then — only
//! once stored — its side effects in order: progress events, terminal bookkeeping, publication of
//! the stages it planned (so a fallback event precedes the next stage).

use prometheus::{IntCounter, IntCounterVec};
use verdict_proto::wire::EventType;

use super::SchedulerDeps;
use super::outbox::Outbox;
use super::progress::Progress;
use super::records::{TaskRecords, Updated};
use crate::metrics;
use crate::pipeline::Effects;
use crate::service::ServiceError;
use crate::task::TaskRecord;

/// Applies transitions; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Transitions {
    records: TaskRecords,
    progress: Progress,
    outbox: Outbox,
    finished: IntCounterVec,
    triage_fallbacks: IntCounter,
}

impl Transitions {
    pub fn new(
        deps: &SchedulerDeps,
        records: &TaskRecords,
        progress: &Progress,
        outbox: &Outbox,
    ) -> Transitions {
        Transitions {
            records: records.clone(),
            progress: progress.clone(),
            outbox: outbox.clone(),
            finished: deps.metrics.finished.clone(),
            triage_fallbacks: deps.metrics.triage_fallbacks.clone(),
        }
    }

    /// Stores `change` of task `id` (see [`TaskRecords::update`]), then carries out its effects.
    pub async fn apply(
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
        self.progress.append(&task.id, &effects.events).await;
        if task.state.is_terminal() && !was_terminal {
            self.finished
                .with_label_values(&[metrics::task_kind_label(task.pipeline), task.state.as_str()])
                .inc();
            if let Err(e) = self.records.retire(&task.id).await {
                tracing::warn!(error = %e, "active-task index not updated");
            }
            tracing::info!(task = %task.id, state = task.state.as_str(), "task finished");
        }
        if !effects.planned.is_empty() {
            self.outbox.dispatch(&task.id, &effects.planned).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::document::TaskState;
    use crate::engine::fixture::Fixture;
    use crate::pipeline;
    use crate::task::StageStatus;

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
