//! The sweeper: what a crashed replica left behind, taken over by any replica. Queued tasks whose
//! intake never finished are started again, stages left `planned` are published again, ended
//! tasks whose publication is due are published (in the background), and ended tasks still listed
//! as active are taken off the index (decision 32).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use verdict_backends::clock::Clock;

use super::intake::Intake;
use super::outbox::Outbox;
use super::publish::Publication;
use super::records::TaskRecords;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::document::TaskState;
use crate::task::{PublicationState, StageStatus, TaskRecord};

/// What the sweeper does about one active task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chore {
    /// It ended: take it off the active index.
    Retire,
    /// It ended and its publication is due (never started, failed retryably, or its claim
    /// lapsed): try again.
    Publish,
    /// Still queued long after submission: run its intake again.
    Restart,
    /// These stages are still planned long after being written: publish them again.
    Republish(Vec<String>),
    /// Nothing is stalled.
    Nothing,
}

/// The chore for `task` at `now`, where anything written more than `stall_after_ms` ago and not
/// moved on since is stalled.
pub(super) fn chore(task: &TaskRecord, now: u64, stall_after_ms: u64) -> Chore {
    if task.state.is_terminal() {
        return match &task.publication {
            Some(p) if p.state == PublicationState::Pending => {
                // A publication started by the replica that ended the task gets `stall_after` to
                // claim it before the sweeper steps in.
                let ended = task.finished_unix_ms.unwrap_or(0);
                if super::publish::due(p, now) && now.saturating_sub(ended) > stall_after_ms {
                    Chore::Publish
                } else {
                    Chore::Nothing
                }
            }
            _ => Chore::Retire,
        };
    }
    if task.state == TaskState::Queued && now.saturating_sub(task.created_unix_ms) > stall_after_ms
    {
        return Chore::Restart;
    }
    let stalled: Vec<String> = task
        .stages
        .iter()
        .filter(|s| {
            s.status == StageStatus::Planned
                && now.saturating_sub(s.planned_unix_ms) > stall_after_ms
        })
        .map(|s| s.id.clone())
        .collect();
    if stalled.is_empty() {
        Chore::Nothing
    } else {
        Chore::Republish(stalled)
    }
}

/// Sweeps the active tasks; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Sweeper {
    records: TaskRecords,
    intake: Intake,
    outbox: Outbox,
    publication: Publication,
    clock: Arc<dyn Clock>,
    stall_after: Duration,
    active: IntGauge,
}

impl Sweeper {
    pub fn new(deps: &SchedulerDeps, settings: &SchedulerSettings, parts: &Parts) -> Sweeper {
        Sweeper {
            records: parts.records.clone(),
            intake: parts.intake.clone(),
            outbox: parts.outbox.clone(),
            publication: parts.publication.clone(),
            clock: deps.clock.clone(),
            stall_after: settings.stall_after,
            active: deps.metrics.active.clone(),
        }
    }

    /// One pass over the active tasks. Unreadable tasks are skipped until the next pass.
    pub async fn sweep(&self) {
        let ids = match self.records.active().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "sweep skipped");
                return;
            }
        };
        self.active
            .set(i64::try_from(ids.len()).unwrap_or(i64::MAX));
        let stall_after_ms = u64::try_from(self.stall_after.as_millis()).unwrap_or(u64::MAX);
        let now = self.clock.now_unix_ms();
        for id in ids {
            let Ok(task) = self.records.load(&id).await else {
                continue;
            };
            match chore(&task, now, stall_after_ms) {
                Chore::Retire => {
                    let _ = self.records.retire(&id).await;
                }
                Chore::Publish => self.publication.spawn(&id),
                Chore::Restart => self.intake.start(&id).await,
                Chore::Republish(stages) => self.outbox.dispatch(&id, &stages).await,
                Chore::Nothing => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::{Fixture, STALL_AFTER};
    use crate::pipeline;

    const STALL_MS: u64 = 30_000;

    /// A running scan with stages in every status, planned at `planned_at` or a moment later.
    async fn running(fx: &Fixture, planned_at: u64) -> TaskRecord {
        let mut task = fx.started_unpublished_scan().await;
        let template = task.stages[0].clone();
        task.stages.clear();
        for (id, status, at) in [
            ("old-planned", StageStatus::Planned, planned_at),
            ("new-planned", StageStatus::Planned, planned_at + 1),
            ("old-dispatched", StageStatus::Dispatched, planned_at),
            ("old-done", StageStatus::Done, planned_at),
        ] {
            let mut stage = template.clone();
            stage.id = id.to_owned();
            stage.status = status;
            stage.planned_unix_ms = at;
            task.stages.push(stage);
        }
        task
    }

    #[tokio::test(start_paused = true)]
    async fn only_what_waited_longer_than_the_threshold_is_stalled() {
        let fx = Fixture::new();
        let queued = fx.queued_scan().await;
        let created = queued.created_unix_ms;
        assert_eq!(chore(&queued, created + STALL_MS, STALL_MS), Chore::Nothing);
        assert_eq!(
            chore(&queued, created + STALL_MS + 1, STALL_MS),
            Chore::Restart
        );

        let task = running(&fx, 1_000).await;
        assert_eq!(chore(&task, 1_000 + STALL_MS, STALL_MS), Chore::Nothing);
        assert_eq!(
            chore(&task, 1_001 + STALL_MS, STALL_MS),
            Chore::Republish(vec!["old-planned".to_owned()])
        );
        assert_eq!(
            chore(&task, 1_002 + STALL_MS, STALL_MS),
            Chore::Republish(vec!["old-planned".to_owned(), "new-planned".to_owned()])
        );

        let mut ended = task;
        pipeline::cancel(&mut ended, "cancelled on request", 2_000);
        assert_eq!(chore(&ended, 2_000, STALL_MS), Chore::Retire);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_takes_over_what_a_crashed_replica_left() {
        let fx = Fixture::new();
        let sweeper = Sweeper::new(&fx.deps, &fx.settings, &fx.parts);
        let unpublished = fx.started_unpublished_scan().await;
        let never_taken_in = fx.queued_scan().await;
        let ended = fx.queued_scan().await;
        let now = fx.now();
        // Ended, but still listed as active (the index update after the write was lost).
        fx.parts
            .records
            .update(&ended.id, |t| {
                pipeline::cancel(t, "cancelled on request", now)
            })
            .await
            .unwrap();

        sweeper.sweep().await;
        assert_eq!(fx.metrics().active.get(), 3);
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 0);

        tokio::time::advance(STALL_AFTER + Duration::from_millis(1)).await;
        sweeper.sweep().await;

        assert_eq!(fx.metrics().active.get(), 2);

        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 2);
        for id in [&unpublished.id, &never_taken_in.id] {
            let task = fx.load(id).await;
            assert_eq!(task.stage("scan").unwrap().status, StageStatus::Dispatched);
        }
        let mut active = fx.parts.records.active().await.unwrap();
        active.sort();
        let mut expected = vec![unpublished.id, never_taken_in.id];
        expected.sort();
        assert_eq!(active, expected);
    }
}
