//! The sweeper: what a crashed replica left behind, taken over by any replica. Queued tasks whose
//! intake nobody owns any more are taken over, stages left `planned` are published again, stages
//! published long ago without a result applied are recovered (a recorded result applied, a lost
//! request published again), ended tasks whose publication is due are published (in the
//! background), and ended tasks still listed as active — or listed without a record — are taken
//! off the index (decision 32).
//!
//! A pass decides with the pure [`chore`] per task and never waits for the work it starts beyond
//! a compare-and-set or a publish: intakes and publications run in the background, so a slow
//! repository or code host cannot hold up a pass, let alone the results loop (issue 8).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge};
use verdict_backends::clock::Clock;
use verdict_backends::store::{Liveness, ResultStore, StageState};

use super::budgets::Budgets;
use super::intake::Intake;
use super::outbox::Outbox;
use super::publish::Publication;
use super::records::TaskRecords;
use super::transition::Transitions;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::service::ServiceError;
use verdict_api::document::PublicationState;
use verdict_api::document::TaskState;
use verdict_policy::pipeline;
use verdict_policy::task::{StageStatus, TaskRecord};

/// What the sweeper does about one active task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chore {
    /// It ended: take it off the active index.
    Retire,
    /// It ended and its publication is due (never started, failed retryably, or its claim
    /// lapsed): try again.
    Publish,
    /// Still queued, and no live intake owns it: take its intake over.
    Restart,
    /// These stages are still planned long after being written: publish them again.
    Republish(Vec<String>),
    /// These stages were published long ago and have no result applied: look them up — apply a
    /// recorded result that never arrived, publish again one that nobody holds (lost).
    Recover(Vec<String>),
    /// Nothing is stalled.
    Nothing,
}

/// The times the sweeper judges by, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Anything written this long ago and not moved on since is stalled.
    pub stall_after_ms: u64,
    /// How long an intake owns its task from its stamp (it ends the task by then).
    pub intake_timeout_ms: u64,
    /// A stage published this long ago without a result applied is looked up.
    pub recover_after_ms: u64,
}

/// Whether queued `task`'s intake is nobody's at `now`: given back or never stamped and older
/// than `stall_after`; stamped by an owner whose heartbeat lease has lapsed (`owner_alive`
/// false) more than `stall_after` ago; or stamped longer ago than its owner's deadline plus
/// `stall_after` (the owner records its timeout at the deadline). An intake whose owner is alive
/// is never taken over for being slow.
pub(super) fn intake_abandoned(
    task: &TaskRecord,
    now: u64,
    limits: &Limits,
    owner_alive: bool,
) -> bool {
    match task.intake_started_unix_ms {
        Some(started) => {
            let age = now.saturating_sub(started);
            let owner_gone = task.intake_owner.is_some() && !owner_alive;
            (owner_gone && age > limits.stall_after_ms)
                || age
                    > limits
                        .intake_timeout_ms
                        .saturating_add(limits.stall_after_ms)
        }
        None => now.saturating_sub(task.created_unix_ms) > limits.stall_after_ms,
    }
}

/// The chore for `task` at `now`; `owner_alive` says whether the replica owning its intake (if
/// it is queued and owned) still beats.
pub(super) fn chore(task: &TaskRecord, now: u64, limits: &Limits, owner_alive: bool) -> Chore {
    let stall_after_ms = limits.stall_after_ms;
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
    if task.state == TaskState::Queued {
        return if intake_abandoned(task, now, limits, owner_alive) {
            Chore::Restart
        } else {
            Chore::Nothing
        };
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
    if !stalled.is_empty() {
        return Chore::Republish(stalled);
    }
    let overdue: Vec<String> = task
        .stages
        .iter()
        .filter(|s| {
            s.status == StageStatus::Dispatched
                && now.saturating_sub(s.dispatched_unix_ms.unwrap_or(s.planned_unix_ms))
                    > limits.recover_after_ms
        })
        .map(|s| s.id.clone())
        .collect();
    if overdue.is_empty() {
        Chore::Nothing
    } else {
        Chore::Recover(overdue)
    }
}

/// Sweeps the active tasks; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Sweeper {
    records: TaskRecords,
    intake: Intake,
    transitions: Transitions,
    outbox: Outbox,
    publication: Publication,
    budgets: Budgets,
    results: Arc<dyn ResultStore>,
    liveness: Arc<dyn Liveness>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    active: IntGauge,
    recovered: IntCounterVec,
}

impl Sweeper {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        parts: &Parts,
    ) -> Sweeper {
        Sweeper {
            records: parts.records.clone(),
            intake: parts.intake.clone(),
            transitions: parts.transitions.clone(),
            outbox: parts.outbox.clone(),
            publication: parts.publication.clone(),
            budgets: parts.budgets.clone(),
            results: deps.results.clone(),
            liveness: deps.liveness.clone(),
            clock: deps.clock.clone(),
            limits: Limits {
                stall_after_ms: millis(settings.stall_after),
                intake_timeout_ms: parts.intake.timeout_ms(),
                recover_after_ms: millis(settings.recover_after),
            },
            active: deps.metrics.active.clone(),
            recovered: deps.metrics.recovered.clone(),
        }
    }

    /// One pass over the active tasks. Unreadable tasks are skipped until the next pass.
    pub(super) async fn sweep(&self) {
        let ids = match self.records.active().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "sweep skipped");
                return;
            }
        };
        self.active
            .set(i64::try_from(ids.len()).unwrap_or(i64::MAX));
        let now = self.clock.now_unix_ms();
        let mut owners = HashMap::new();
        for id in ids {
            let task = match self.records.load(&id).await {
                Ok(task) => task,
                // Listed without a record: one whose creation was undone after its listing
                // landed unseen, or one expired. Nothing to sweep, ever.
                Err(ServiceError::NotFound(_)) => {
                    if let Err(e) = self.records.unlist(&id).await {
                        tracing::debug!(task = %id, error = %e, "a listed task without a record stays listed");
                    }
                    continue;
                }
                Err(_) => continue,
            };
            let owner = task
                .intake_owner
                .clone()
                .filter(|_| task.state == TaskState::Queued);
            let owner_alive = match &owner {
                Some(owner) => self.alive(owner, &mut owners).await,
                None => true,
            };
            match chore(&task, now, &self.limits, owner_alive) {
                Chore::Retire => {
                    if self.budgets.settle(&task).await {
                        let _ = self.records.retire(&task).await;
                    }
                }
                Chore::Publish => self.publication.spawn(&id),
                Chore::Restart => {
                    let limits = self.limits;
                    // Judged again inside the compare-and-set: an owner other than the one
                    // looked up (a replica that took it over meanwhile) counts as alive.
                    self.intake
                        .take_over(&id, move |t, now| {
                            let alive = owner_alive || t.intake_owner != owner;
                            intake_abandoned(t, now, &limits, alive)
                        })
                        .await;
                }
                Chore::Republish(stages) => self.transitions.dispatch(&id, &stages).await,
                Chore::Recover(stages) => self.recover(&id, &stages).await,
                Chore::Nothing => {}
            }
        }
    }

    /// Looks up stages of task `id` published long ago without a result applied: a result the
    /// store holds (its message was lost) is applied; a stage nobody holds and nobody answered
    /// (its request was lost) is published again; one a worker holds is left to it.
    async fn recover(&self, id: &str, stages: &[String]) {
        let mut lost = Vec::new();
        for stage in stages {
            match self.results.inspect(id, stage).await {
                Ok(StageState::Done(result)) => {
                    let now = self.clock.now_unix_ms();
                    let applied = self
                        .transitions
                        .apply(id, |t| pipeline::on_result(t, &result, now))
                        .await;
                    match applied {
                        Ok(_) => {
                            self.recovered.with_label_values(&["applied"]).inc();
                            tracing::info!(task = %id, %stage, "a recorded result that never arrived was applied");
                        }
                        Err(e) => {
                            tracing::warn!(task = %id, %stage, error = %e, "recovered result not applied")
                        }
                    }
                }
                Ok(StageState::Held { .. }) => {}
                Ok(StageState::Free) => lost.push(stage.clone()),
                Err(e) => tracing::warn!(task = %id, %stage, error = %e, "stage not looked up"),
            }
        }
        if !lost.is_empty() {
            let republished = self.outbox.republish(id, &lost).await;
            self.recovered
                .with_label_values(&["republished"])
                .inc_by(u64::try_from(republished).unwrap_or(u64::MAX));
            tracing::warn!(task = %id, stages = ?lost, "stages published long ago had neither a result nor a worker; published again");
        }
    }
}

impl Sweeper {
    /// Whether replica `owner` still beats, asked once per pass; a lease that cannot be read
    /// counts as alive, so an outage never makes two replicas run one intake.
    async fn alive(&self, owner: &str, seen: &mut HashMap<String, bool>) -> bool {
        if let Some(alive) = seen.get(owner) {
            return *alive;
        }
        let alive = match self.liveness.alive(owner).await {
            Ok(alive) => alive,
            Err(e) => {
                tracing::warn!(error = %e, replica = owner, "heartbeat lease not read; its intakes are left to it");
                true
            }
        };
        seen.insert(owner.to_owned(), alive);
        alive
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::{Fixture, STALL_AFTER};
    use verdict_policy::pipeline;

    const STALL_MS: u64 = 30_000;
    const INTAKE_MS: u64 = 300_000;
    const RECOVER_MS: u64 = 600_000;
    const LIMITS: Limits = Limits {
        stall_after_ms: STALL_MS,
        intake_timeout_ms: INTAKE_MS,
        recover_after_ms: RECOVER_MS,
    };

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
        // Never stamped (or given back): taken over after `stall_after`.
        let queued = fx.queued_scan().await;
        let created = queued.created_unix_ms;
        assert_eq!(
            chore(&queued, created + STALL_MS, &LIMITS, true),
            Chore::Nothing
        );
        assert_eq!(
            chore(&queued, created + STALL_MS + 1, &LIMITS, true),
            Chore::Restart
        );

        let task = running(&fx, 1_000).await;
        assert_eq!(
            chore(&task, 1_000 + STALL_MS, &LIMITS, true),
            Chore::Nothing
        );
        assert_eq!(
            chore(&task, 1_001 + STALL_MS, &LIMITS, true),
            Chore::Republish(vec!["old-planned".to_owned()])
        );
        assert_eq!(
            chore(&task, 1_002 + STALL_MS, &LIMITS, true),
            Chore::Republish(vec!["old-planned".to_owned(), "new-planned".to_owned()])
        );

        let mut ended = task;
        pipeline::cancel(&mut ended, "cancelled on request", 2_000);
        assert_eq!(chore(&ended, 2_000, &LIMITS, true), Chore::Retire);
    }

    /// Issue 11's feedback loop: an intake that is merely slow (waiting for a slot, or for a
    /// large clone) is its owner's until its own deadline; only after that, plus the usual
    /// grace, is it a crashed replica's.
    #[tokio::test(start_paused = true)]
    async fn a_stamped_intake_is_taken_over_only_after_its_own_deadline() {
        let fx = Fixture::new();
        let mut queued = fx.queued_scan().await;
        let started = queued.created_unix_ms + 5_000;
        queued.intake_started_unix_ms = Some(started);
        for waited in [STALL_MS + 1, 10 * STALL_MS, INTAKE_MS, INTAKE_MS + STALL_MS] {
            assert_eq!(
                chore(&queued, started + waited, &LIMITS, true),
                Chore::Nothing,
                "after {waited} ms"
            );
        }
        assert_eq!(
            chore(&queued, started + INTAKE_MS + STALL_MS + 1, &LIMITS, true),
            Chore::Restart
        );
    }

    /// With heartbeats, a gone owner's intake is taken over once its stamp is older than
    /// `stall_after`, long before the deadline; a live owner's, never before the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_gone_owners_intake_is_taken_over_early_and_a_live_ones_never() {
        let fx = Fixture::new();
        let mut queued = fx.queued_scan().await;
        let started = queued.created_unix_ms;
        queued.intake_started_unix_ms = Some(started);
        queued.intake_owner = Some("scheduler-a".to_owned());
        for (waited, alive, chore_then) in [
            (STALL_MS, false, Chore::Nothing),
            (STALL_MS + 1, false, Chore::Restart),
            (STALL_MS + 1, true, Chore::Nothing),
            (INTAKE_MS + STALL_MS, true, Chore::Nothing),
            (INTAKE_MS + STALL_MS + 1, true, Chore::Restart),
        ] {
            assert_eq!(
                chore(&queued, started + waited, &LIMITS, alive),
                chore_then,
                "after {waited} ms, owner alive: {alive}"
            );
        }
    }

    /// An id listed as active without a record (its creation undone after the listing landed
    /// unseen) is taken off the index.
    #[tokio::test(start_paused = true)]
    async fn a_listed_task_without_a_record_is_taken_off_the_index() {
        let fx = Fixture::new();
        let kept = fx.queued_scan().await;
        fx.deps
            .documents
            .set_add("tasks:active", "gone")
            .await
            .unwrap();

        Sweeper::new(&fx.deps, &fx.settings, &fx.parts)
            .sweep()
            .await;

        assert_eq!(fx.parts.records.active().await.unwrap(), [kept.id]);
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
        // The intake it took over runs in the background.
        fx.settle().await;

        assert_eq!(fx.metrics().active.get(), 2);

        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 2);
        for id in [&unpublished.id, &never_taken_in.id] {
            let task = fx.load(id).await;
            assert_eq!(task.stage("scan").unwrap().status, StageStatus::Dispatched);
        }
        let mut active = fx.parts.records.active().await.unwrap();
        active.sort();
        let mut expected = vec![unpublished.id, never_taken_in.id.clone()];
        expected.sort();
        assert_eq!(active, expected);
        let taken = fx.load(&never_taken_in.id).await;
        assert_eq!(
            taken.intake_started_unix_ms,
            Some(fx.now()),
            "stamped as this replica's before its intake ran"
        );
    }
}

#[cfg(test)]
mod recovery_tests {
    use verdict_backends::broker::{Broker as _, Route};
    use verdict_backends::store::ResultStore as _;
    use verdict_proto::outcome::StageOutcome;
    use verdict_proto::wire::{Priority, StageKind, StageResult, Usage, WIRE_VERSION};

    use super::*;
    use crate::engine::fixture::{Fixture, RECOVER_AFTER};

    /// A scan whose stage was published (dispatched) and then nothing came back.
    async fn published_scan(fx: &Fixture) -> TaskRecord {
        let task = fx.queued_scan().await;
        fx.parts.intake.start(&task.id).await;
        fx.settle().await;
        let task = fx.load(&task.id).await;
        assert_eq!(task.stage("scan").unwrap().status, StageStatus::Dispatched);
        // Taken off the queue, as a worker would before it died (or the message was lost).
        let mut queue = fx
            .broker
            .consume(Route::Stages(Priority::Bulk), 1)
            .await
            .unwrap();
        queue.next().await.unwrap().acker.ack().await.unwrap();
        task
    }

    fn sweeper(fx: &Fixture) -> Sweeper {
        Sweeper::new(&fx.deps, &fx.settings, &fx.parts)
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_lost_on_the_way_is_published_again_only_when_nobody_holds_it() {
        let fx = Fixture::new();
        let task = published_scan(&fx).await;
        let sweeper = sweeper(&fx);

        sweeper.sweep().await;
        assert_eq!(
            fx.broker.depth(Route::Stages(Priority::Bulk)),
            0,
            "not before recover_after"
        );

        // A worker is running it: left alone.
        tokio::time::advance(RECOVER_AFTER + Duration::from_secs(1)).await;
        fx.store
            .claim(&task.id, "scan", "worker-1", Duration::from_secs(15))
            .await
            .unwrap();
        sweeper.sweep().await;
        assert_eq!(
            fx.broker.depth(Route::Stages(Priority::Bulk)),
            0,
            "a live claim: running"
        );

        // Its worker is gone and its claim lapsed: the stage is published again, once.
        tokio::time::advance(Duration::from_secs(16)).await;
        sweeper.sweep().await;
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 1);
        let republished = fx.load(&task.id).await;
        assert_eq!(
            republished.stage("scan").unwrap().dispatched_unix_ms,
            Some(fx.now()),
            "the new publication is noted, so the next sweep waits again"
        );
        sweeper.sweep().await;
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 1);
        let counted = fx
            .metrics()
            .recovered
            .with_label_values(&["republished"])
            .get();
        assert_eq!(counted, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_recorded_but_never_received_is_applied() {
        let fx = Fixture::new();
        let task = published_scan(&fx).await;
        let result = StageResult {
            version: WIRE_VERSION,
            task_id: task.id.clone(),
            stage_id: "scan".to_owned(),
            stage: StageKind::Scan,
            attempt: 1,
            outcome: StageOutcome::Ok {
                value: serde_json::json!({"version": 1, "overall_score": 90, "summary": "s", "findings": []}),
                repaired: false,
                attempts: 1,
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        };
        // The worker recorded it; its message on the results queue was lost.
        fx.store.record(&result).await.unwrap();
        tokio::time::advance(RECOVER_AFTER + Duration::from_secs(1)).await;

        sweeper(&fx).sweep().await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Completed);
        assert_eq!(
            fx.broker.depth(Route::Stages(Priority::Bulk)),
            0,
            "not run again"
        );
        let applied = fx.metrics().recovered.with_label_values(&["applied"]).get();
        assert_eq!(applied, 1);
    }
}
