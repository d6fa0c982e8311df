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
