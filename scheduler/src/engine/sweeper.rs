//! The sweeper: what a crashed replica left behind, taken over by any replica. Queued tasks whose
//! intake never finished are started again, stages left `planned` are published again, and ended
//! tasks still listed as active are taken off the index (decision 32).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use verdict_backends::clock::Clock;

use super::intake::Intake;
use super::outbox::Outbox;
use super::records::TaskRecords;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::document::TaskState;
use crate::task::{StageStatus, TaskRecord};

/// What the sweeper does about one active task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chore {
    /// It ended: take it off the active index.
    Retire,
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
        return Chore::Retire;
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
                Chore::Restart => self.intake.start(&id).await,
                Chore::Republish(stages) => self.outbox.dispatch(&id, &stages).await,
                Chore::Nothing => {}
            }
        }
    }
}
