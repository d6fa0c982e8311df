//! The scheduler engine: the parts that carry a task from submission to its stored result on the
//! broker and store traits, around the pure pipeline ([`verdict_policy::pipeline`]), and the [`Scheduler`]
//! that assembles them.
//!
//! Every change to a task is a compare-and-set of its whole record, so several replicas can
//! consume results at once without double-advancing a task. Stages are written as `planned` in
//! the same update that decides them (an outbox), then published and marked `dispatched`; a
//! replica that crashes in between leaves them `planned`, and the sweeper of any replica
//! publishes them again (workers deduplicate, SPEC E7).
//!
//! # Layout (in the order a task flows through it)
//! - [`facade`]: `TaskService` for [`Scheduler`]: submit, look up, follow and cancel tasks.
//! - [`submission`]: a submission validated into a new task record (no I/O), its texts within
//!   what one broker message carries.
//! - [`allowlist`]: which repositories a task may name (SPEC R4), at submission and at intake.
//! - [`records`]: task records loaded, created and changed with compare-and-set; the only code
//!   that writes a record or the index of active tasks.
//! - [`intake`]: a queued task's inputs prepared (its revisions resolved to commits, a review's
//!   change read and its diff stored), then the task started; in the background, a bounded
//!   number at once, never in a loop of the scheduler.
//! - [`transition`]: a pipeline transition stored, then its side effects: events, terminal
//!   bookkeeping, publication of planned stages.
//! - [`progress`]: a task's progress stream: drafts stamped and appended, events read back.
//! - [`outbox`]: planned stages published and marked dispatched.
//! - [`results`]: a stage result from a worker decoded and applied; acknowledged, requeued or
//!   dead-lettered.
//! - [`dead_letters`]: what the broker gave up on, attributed to its task, which ends with the
//!   reason.
//! - [`publish`]: a finished task's outcome posted to its pull request or issue, and its commit
//!   status, each attempt safe to repeat.
//! - [`sweeper`]: what a crashed replica left: abandoned intakes taken over, planned stages
//!   republished, publications retried.
//! - [`queues`]: the broker's counts of each queue polled into gauges, in a loop of its own.
//! - [`budgets`]: budgets applied — a task's estimate reserved at intake, settled with what it
//!   spent before it is retired; a scan batch's pre-flight estimate judged.
//! - [`batches`]: scan batches — an organisation's repositories enumerated in the intake pool,
//!   one scan task per repository created idempotently, the batch driven on after a crash and
//!   marked finished.
//!
//! [`Scheduler::run`] only receives: each stage result and dead letter is handled in a task of
//! its own, and the sweeper passes run in a loop of their own, so nothing slow (a repository, the
//! code host) can hold up the results of other tasks (issue 8).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_backends::broker::{Broker, BrokerError, Route};
use verdict_backends::clock::Clock;
use verdict_backends::code_host::CodeHost;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::{
    BudgetLedger, CancelSignals, Capacity, DocumentStore, EventLog, InputStore, Liveness,
    ResultStore, StoreError, TaskArchive, TranscriptStore,
};
use verdict_proto::Language;

use crate::metrics::SchedulerMetrics;
use crate::service::ServiceError;
use verdict_policy::pipeline::PipelineSettings;

mod allowlist;
mod batches;
mod budgets;
mod dead_letters;
mod facade;
mod intake;
mod outbox;
mod pressure;
mod progress;
mod publish;
mod queues;
mod records;
mod results;
mod submission;
mod sweeper;
mod transition;

pub use allowlist::{
    Admission, AllowlistRules, EXTRA_SCHEMES, HostResolver, InvalidRule, RESOLVE_TIMEOUT, Refusal,
    RepositoryAllowlist, StaticResolver, SystemResolver, is_private,
};
pub use submission::{TextLimits, new_id};

use batches::Batches;
use budgets::Budgets;
use dead_letters::DeadLetters;
use facade::Service;
use intake::Intake;
use outbox::Outbox;
use pressure::Pressure;
use progress::Progress;
use publish::Publication;
use records::TaskRecords;
use results::Results;
use sweeper::Sweeper;
use transition::Transitions;

/// Stage results taken from the queue at once (each is applied in its own background task).
const RESULTS_PREFETCH: u16 = 32;

/// Dead letters taken from their queue at once.
const DEAD_LETTERS_PREFETCH: u16 = 8;

/// The backends a scheduler talks to.
#[derive(Debug, Clone)]
pub struct SchedulerDeps {
    pub broker: Arc<dyn Broker>,
    pub documents: Arc<dyn DocumentStore>,
    pub events: Arc<dyn EventLog>,
    pub cancels: Arc<dyn CancelSignals>,
    pub inputs: Arc<dyn InputStore>,
    pub repositories: Arc<dyn RepositorySource>,
    /// Stage results and claims, read by the sweeper to recover stages that were published and
    /// then lost.
    pub results: Arc<dyn ResultStore>,
    /// The code host pull requests and issues are read from and results published to; `None`
    /// when no GitHub is configured (submissions that need one are refused).
    pub code_host: Option<Arc<dyn CodeHost>>,
    /// Resolves the hosts of repositories matched only by an allowlist pattern.
    pub resolver: Arc<dyn HostResolver>,
    pub clock: Arc<dyn Clock>,
    pub metrics: SchedulerMetrics,
    /// Where budgets are counted (SPEC X5).
    pub budgets: Arc<dyn BudgetLedger>,
    /// Heartbeat leases: which replicas are alive, so only a gone replica's intakes are taken
    /// over.
    pub liveness: Arc<dyn Liveness>,
    /// The workers' transcripts, read back for operators (`GET /v1/tasks/{id}/transcripts`).
    pub transcripts: Arc<dyn TranscriptStore>,
    /// Seals a task's stage records once it is retired (issue 14).
    pub archive: Arc<dyn TaskArchive>,
    /// Whether the state store has room for new tasks (issue 14): asked before each admission.
    pub capacity: Arc<dyn Capacity>,
}

/// What the scheduler decides with.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    /// Copied into every task at submission.
    pub pipeline: PipelineSettings,
    pub review_timeout: Duration,
    pub language: Language,
    /// The largest message the broker carries: no stage request larger is published, stage
    /// results larger are refused, and submitted texts are bounded by it ([`TextLimits`]).
    pub message_max_bytes: usize,
    /// How often the sweeper looks for stalled tasks.
    pub sweep_interval: Duration,
    /// How often the broker's queue counts are polled into `verdict_queue_messages` and
    /// `verdict_queue_consumers`.
    pub queue_stats_interval: Duration,
    /// A stage still `planned` (or a task still `queued`) this long after being written is
    /// taken over by the sweeper.
    pub stall_after: Duration,
    /// A stage published this long ago that has neither a result nor a live claim is published
    /// again (it was lost on the way); one whose result is recorded but was never applied is
    /// applied.
    pub recover_after: Duration,
    /// The code host, when one is configured.
    pub code_host: Option<CodeHostSettings>,
    /// Intakes running at once; more wait for a slot.
    pub intake_concurrency: usize,
    /// Tasks this replica holds for intake (running or waiting for a slot) beyond which a
    /// submission whose sender can retry is refused as busy (429 with `Retry-After`).
    pub intake_backlog: usize,
    /// How long an intake owns its task, waiting for a slot included: it ends the task by then,
    /// and only an older intake is taken over by the sweeper.
    pub intake_timeout: Duration,
    /// The repositories tasks may name.
    pub repositories: RepositoryAllowlist,
    /// Per-organisation budgets and how estimates are made (SPEC X5).
    pub budgets: verdict_policy::budget::BudgetSettings,
    /// How long a replica's heartbeat proves it alive; it beats three times per lease.
    pub replica_lease: Duration,
}

/// What the scheduler knows of the configured code host (GitHub or GitHub Enterprise).
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHostSettings {
    /// The web host pull-request and issue URLs must name (`github.com`, `ghe.example.com`).
    pub web_host: String,
    /// How results are written there.
    pub publish: verdict_policy::publication::PublishSettings,
    /// Apply the labels an issue analysis suggests (only those the repository defines).
    pub apply_labels: bool,
}

/// The scheduler; cheap to clone (everything inside is shared).
#[derive(Debug, Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    service: Service,
    results: Results,
    dead_letters: DeadLetters,
    sweeper: Sweeper,
    batches: Batches,
    heartbeat: Heartbeat,
    pressure: Pressure,
    broker: Arc<dyn Broker>,
    sweep_interval: Duration,
    queue_stats_interval: Duration,
    metrics: SchedulerMetrics,
    /// Result handlers, intakes and publications in flight; `run` waits for them before it
    /// returns.
    background: TaskTracker,
    /// Cancelled when `run` stops: publications in flight give their claims back instead of
    /// holding up the shutdown.
    stop: CancellationToken,
}

/// The parts more than one other part is built on, assembled once.
#[derive(Debug)]
struct Parts {
    records: TaskRecords,
    progress: Progress,
    outbox: Outbox,
    publication: Publication,
    transitions: Transitions,
    intake: Intake,
    budgets: Budgets,
    pressure: Pressure,
}

impl Parts {
    /// The parts; `background` runs what they start and must not wait for (publications).
    fn assemble(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        background: &TaskTracker,
        stop: &CancellationToken,
    ) -> Parts {
        let records = TaskRecords::new(deps);
        let budgets = Budgets::new(deps, settings);
        let progress = Progress::new(deps);
        let outbox = Outbox::new(deps, settings, &records);
        let publication = Publication::new(
            deps,
            settings.code_host.clone(),
            &records,
            &progress,
            &budgets,
            background,
            stop,
        );
        let transitions =
            Transitions::new(deps, &records, &progress, &outbox, &publication, &budgets);
        let intake = Intake::new(
            deps,
            settings,
            &records,
            &transitions,
            &budgets,
            background,
            stop,
        );
        Parts {
            records,
            progress,
            outbox,
            publication,
            transitions,
            intake,
            budgets,
            pressure: Pressure::new(
                deps.capacity.clone(),
                deps.broker.clone(),
                deps.metrics.backend_pressure.clone(),
            ),
        }
    }
}

impl Scheduler {
    pub fn new(deps: SchedulerDeps, settings: SchedulerSettings) -> Scheduler {
        let background = TaskTracker::new();
        let stop = CancellationToken::new();
        let parts = Parts::assemble(&deps, &settings, &background, &stop);
        Scheduler {
            inner: Arc::new(Inner {
                service: Service::new(&deps, &settings, &parts),
                results: Results::new(&deps, &settings, &parts),
                dead_letters: DeadLetters::new(&deps, &settings, &parts),
                sweeper: Sweeper::new(&deps, &settings, &parts),
                batches: Batches::new(
                    &deps,
                    &settings,
                    &parts.records,
                    &parts.budgets,
                    parts.intake.pool(),
                    &background,
                    &stop,
                ),
                heartbeat: Heartbeat {
                    liveness: deps.liveness.clone(),
                    replica: parts.intake.replica(),
                    lease: settings.replica_lease,
                },
                pressure: parts.pressure.clone(),
                broker: deps.broker,
                sweep_interval: settings.sweep_interval,
                queue_stats_interval: settings.queue_stats_interval,
                metrics: deps.metrics,
                background,
                stop,
            }),
        }
    }

    /// Consumes stage results and dead letters and sweeps until `shutdown`; then waits for the
    /// handlers, intakes and publications it started (intakes and publications give their tasks
    /// back rather than finish). The loop only receives: every delivery is handled in a task of
    /// its own and the sweeper runs beside it, so no delivery waits for another's work.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), BrokerError> {
        let inner = &self.inner;
        let mut results = inner
            .broker
            .consume(Route::Results, RESULTS_PREFETCH)
            .await?;
        let mut dead = inner
            .broker
            .consume(Route::DeadLetters, DEAD_LETTERS_PREFETCH)
            .await?;
        // Alive before anything is swept, then every third of the lease.
        inner.heartbeat.beat().await;
        inner
            .background
            .spawn(inner.heartbeat.clone().run(inner.stop.clone()));
        inner.background.spawn(sweep_loop(
            inner.sweeper.clone(),
            inner.sweep_interval,
            inner.stop.clone(),
        ));
        inner
            .background
            .spawn(inner.pressure.clone().sample_loop(inner.stop.clone()));
        inner.background.spawn(queues::poll_loop(
            inner.broker.clone(),
            inner.metrics.clone(),
            inner.queue_stats_interval,
            inner.stop.clone(),
        ));
        inner.background.spawn(batch_loop(
            self.clone(),
            inner.sweep_interval,
            inner.stop.clone(),
        ));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                delivery = results.next() => match delivery {
                    Some(d) => {
                        let handler = inner.results.clone();
                        inner.background.spawn(async move { handler.handle(d).await });
                    }
                    None => break,
                },
                delivery = dead.next() => match delivery {
                    Some(d) => {
                        let handler = inner.dead_letters.clone();
                        inner.background.spawn(async move { handler.handle(d).await });
                    }
                    None => break,
                },
            }
        }
        inner.stop.cancel();
        inner.background.close();
        inner.background.wait().await;
        // Everything given back: no other replica needs to wait for the lease to lapse.
        inner.heartbeat.leave().await;
        Ok(())
    }

    fn service(&self) -> &Service {
        &self.inner.service
    }

    /// This replica's name, as its heartbeat and the intakes it owns carry it.
    pub fn replica(&self) -> Arc<str> {
        self.inner.heartbeat.replica.clone()
    }

    fn batches(&self) -> &Batches {
        &self.inner.batches
    }
}

/// The scan batches' pass, beside the sweeper's and at its interval: batches a stopped replica
/// left are driven on, finished ones marked so.
async fn batch_loop(scheduler: Scheduler, interval: Duration, stop: CancellationToken) {
    every(Instant::now(), interval, stop, || {
        scheduler.batches().sweep(&scheduler)
    })
    .await;
}

/// Runs `pass` at `first` and then every `interval`, never two at once, until `stop`. A pass
/// that has begun runs to its end, so it never leaves its work (a takeover, a beat) half done.
async fn every<F, Fut>(first: Instant, interval: Duration, stop: CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval_at(first, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        pass().await;
    }
}

/// This replica's heartbeat: its lease renewed every third of its length, so a missed beat or
/// two (a slow Redis) does not make it look gone.
#[derive(Debug, Clone)]
struct Heartbeat {
    liveness: Arc<dyn Liveness>,
    replica: Arc<str>,
    lease: Duration,
}

/// The longest one beat may take: within a third of any sensible lease.
const BEAT_TIMEOUT: Duration = Duration::from_secs(2);

impl Heartbeat {
    async fn beat(&self) {
        match tokio::time::timeout(BEAT_TIMEOUT, self.liveness.beat(&self.replica, self.lease))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, replica = %self.replica, "heartbeat not recorded; another replica may take this one's intakes over when its lease lapses");
            }
            Err(_) => {
                tracing::warn!(replica = %self.replica, "heartbeat timed out; another replica may take this one's intakes over when its lease lapses");
            }
        }
    }

    /// Beats every third of the lease, the first a third after the beat `run` made before it.
    async fn run(self, stop: CancellationToken) {
        let period = self.lease / 3;
        every(Instant::now() + period, period, stop, || self.beat()).await;
    }

    async fn leave(&self) {
        let left = tokio::time::timeout(BEAT_TIMEOUT, self.liveness.leave(&self.replica)).await;
        if !matches!(left, Ok(Ok(()))) {
            tracing::debug!(replica = %self.replica, "lease not ended; it lapses by itself");
        }
    }
}

/// The sweeper's own loop: a pass every `interval` until `stop`.
async fn sweep_loop(sweeper: Sweeper, interval: Duration, stop: CancellationToken) {
    every(Instant::now(), interval, stop, || sweeper.sweep()).await;
}

/// A store failure as the API answers it: a store out of memory is back-pressure (retry after a
/// while), anything else a backend that is down.
fn unavailable(e: StoreError) -> ServiceError {
    match e {
        StoreError::Full(_) => ServiceError::Overloaded {
            reason: e.to_string(),
            retry_after_secs: pressure::RETRY_AFTER_SECS,
        },
        e => ServiceError::Unavailable(e.to_string()),
    }
}

#[cfg(test)]
mod fixture;

/// The scheduler's loops under a repository that never answers (issue 8, item 3).
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use verdict_backends::BoxFuture;
    use verdict_backends::broker::Message;
    use verdict_backends::repo::{Change, MemoryRepositorySource, RepoError, Snapshot};
    use verdict_proto::outcome::{FailureKind, StageOutcome};
    use verdict_proto::wire::{
        self, Priority, RepositoryRef, StageKind, StageRequest, StageResult, Usage, WIRE_VERSION,
    };

    use super::*;
    use crate::engine::fixture::{Fixture, INTAKE_TIMEOUT, REPO, STALL_AFTER};
    use crate::service::TaskService;
    use verdict_api::document::{TaskDocument, TaskState};
    use verdict_api::submission::{ScanSubmission, SubmissionOptions};

    /// A repository that accepts the request and never answers.
    const HANG: &str = "https://hang.example.test/x.git";

    /// The fixture's repositories, except that [`HANG`] never answers; counts the calls for it
    /// and the calls given up (their futures dropped, as a killed git process is).
    #[derive(Debug)]
    struct Hanging {
        inner: Arc<MemoryRepositorySource>,
        calls: AtomicUsize,
        dropped: Arc<AtomicUsize>,
    }

    struct CountsDrop(Arc<AtomicUsize>);

    impl Drop for CountsDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Hanging {
        fn hang<'a, T: 'a>(&'a self) -> BoxFuture<'a, Result<T, RepoError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let dropped = CountsDrop(self.dropped.clone());
            Box::pin(async move {
                let _dropped = dropped;
                std::future::pending().await
            })
        }
    }

    impl RepositorySource for Hanging {
        fn snapshot<'a>(
            &'a self,
            repo: &'a RepositoryRef,
            cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Snapshot, RepoError>> {
            self.inner.snapshot(repo, cancel)
        }

        fn files<'a>(
            &'a self,
            url: &'a str,
            commit: &'a str,
            cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Vec<verdict_backends::repo::RepoFile>, RepoError>> {
            self.inner.files(url, commit, cancel)
        }

        fn resolve<'a>(
            &'a self,
            url: &'a str,
            revision: &'a str,
            cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<String, RepoError>> {
            if url == HANG {
                return self.hang();
            }
            self.inner.resolve(url, revision, cancel)
        }

        fn change<'a>(
            &'a self,
            url: &'a str,
            base: &'a str,
            head: &'a str,
            cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Change, RepoError>> {
            if url == HANG {
                return self.hang();
            }
            self.inner.change(url, base, head, cancel)
        }
    }

    struct Rig {
        fx: Fixture,
        deps: SchedulerDeps,
        settings: SchedulerSettings,
        hanging: Arc<Hanging>,
        scheduler: Scheduler,
        shutdown: CancellationToken,
        running: tokio::task::JoinHandle<Result<(), BrokerError>>,
    }

    fn rig(intake_concurrency: usize) -> Rig {
        let fx = Fixture::new();
        let hanging = Arc::new(Hanging {
            inner: fx.repositories.clone(),
            calls: AtomicUsize::new(0),
            dropped: Arc::new(AtomicUsize::new(0)),
        });
        let deps = SchedulerDeps {
            repositories: hanging.clone(),
            ..fx.deps.clone()
        };
        let mut settings = fx.settings.clone();
        settings.intake_concurrency = intake_concurrency;
        settings.repositories =
            crate::engine::RepositoryAllowlist::hosts(&["example.test", "hang.example.test"]);
        let scheduler = Scheduler::new(deps.clone(), settings.clone());
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
            async move { scheduler.run(shutdown).await }
        });
        Rig {
            fx,
            deps,
            settings,
            hanging,
            scheduler,
            shutdown,
            running,
        }
    }

    fn scan(repository: &str) -> ScanSubmission {
        ScanSubmission {
            repository: repository.to_owned(),
            revision: "v1".to_owned(),
            options: SubmissionOptions::default(),
        }
    }

    /// The task's document once `done` holds, within `within` of (paused) time.
    async fn once(
        scheduler: &Scheduler,
        id: &str,
        within: Duration,
        done: impl Fn(&TaskDocument) -> bool,
    ) -> TaskDocument {
        tokio::time::timeout(within, async {
            loop {
                let doc = scheduler.task(id).await.unwrap();
                if done(&doc) {
                    return doc;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the task got there in time")
    }

    /// What a worker does with the scan's stage: take it off the queue, answer it.
    async fn answer_scan(broker: &dyn Broker) {
        let mut stages = broker
            .consume(Route::Stages(Priority::Bulk), 1)
            .await
            .unwrap();
        let delivery = stages.next().await.unwrap();
        let request: StageRequest = wire::decode(&delivery.message.body, usize::MAX).unwrap();
        delivery.acker.ack().await.unwrap();
        let result = StageResult {
            version: WIRE_VERSION,
            task_id: request.task_id,
            stage_id: request.stage_id,
            stage: StageKind::Scan,
            attempt: 1,
            outcome: StageOutcome::Ok {
                value: serde_json::json!({"version": 1, "overall_score": 80, "summary": "s", "findings": []}),
                repaired: false,
                attempts: 1,
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        };
        let message = Message {
            body: wire::encode(&result).unwrap(),
            headers: Default::default(),
        };
        broker.publish(Route::Results, &message).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_repository_that_never_answers_holds_up_only_its_own_task() {
        let rig = rig(8);
        let stuck = rig.scheduler.submit_scan(scan(HANG)).await.unwrap().id;
        // Sweeps come and go (every 10 s, stalled after 30 s) while its intake hangs.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(
            rig.hanging.calls.load(Ordering::SeqCst),
            1,
            "a live intake is not started again"
        );

        let normal = rig.scheduler.submit_scan(scan(REPO)).await.unwrap().id;
        answer_scan(rig.fx.broker.as_ref()).await;
        let done = once(&rig.scheduler, &normal, Duration::from_secs(30), |d| {
            d.state.is_terminal()
        })
        .await;
        assert_eq!(done.state, TaskState::Completed, "{done:#?}");
        assert_eq!(
            rig.scheduler.task(&stuck).await.unwrap().state,
            TaskState::Queued,
            "still hanging"
        );

        let ended = once(&rig.scheduler, &stuck, INTAKE_TIMEOUT, |d| {
            d.state.is_terminal()
        })
        .await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::Timeout));
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with("intake did not finish within 300 s: the code host or the repository did not answer in time"),
            "{reason}"
        );
        assert!(
            reason.contains("scheduler.intake_timeout_seconds"),
            "{reason}"
        );
        assert_eq!(rig.hanging.calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            rig.hanging.dropped.load(Ordering::SeqCst),
            1,
            "the hanging work was given up, not left running"
        );
        rig.shutdown.cancel();
        rig.running.await.unwrap().unwrap();
    }

    /// Issue 11, item 3: ownership, not age. A second replica sweeps beside the owner of an
    /// intake that never ends; while the owner beats, the intake runs once, however long it takes.
    /// A replica that stops beating (it never ran: gone before its first beat) has its intake
    /// taken over as soon as its stamp is older than `stall_after`, long before the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_slow_intake_runs_once_while_its_owner_beats_and_a_gone_owners_is_taken_over() {
        let rig = rig(8);
        let other = Scheduler::new(rig.deps.clone(), rig.settings.clone());
        let other_stop = CancellationToken::new();
        let other_running = tokio::spawn({
            let (other, stop) = (other.clone(), other_stop.clone());
            async move { other.run(stop).await }
        });

        let slow = rig.scheduler.submit_scan(scan(HANG)).await.unwrap().id;
        // Twelve sweeps of each replica, four times `stall_after`, a third of the deadline.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(
            rig.hanging.calls.load(Ordering::SeqCst),
            1,
            "a live owner's intake is not started again"
        );
        let task = rig.fx.load(&slow).await;
        assert_eq!(
            task.intake_owner.as_deref(),
            Some(&*rig.scheduler.replica())
        );
        assert_eq!(task.intake_started_unix_ms, Some(task.created_unix_ms));

        let gone = Scheduler::new(rig.deps.clone(), rig.settings.clone());
        let orphan = gone.submit_scan(scan(HANG)).await.unwrap().id;
        tokio::time::sleep(STALL_AFTER + Duration::from_secs(25)).await;
        let task = rig.fx.load(&orphan).await;
        let taker = task.intake_owner.clone().unwrap();
        assert_ne!(taker, &*gone.replica(), "taken over from the gone replica");
        assert!(
            [rig.scheduler.replica(), other.replica()]
                .iter()
                .any(|r| **r == *taker),
            "{taker}"
        );
        assert_eq!(
            rig.hanging.calls.load(Ordering::SeqCst),
            3,
            "the slow intake once, the orphan's by its owner and once by the taker"
        );
        let still = rig.fx.load(&slow).await;
        assert_eq!(
            (still.intake_started_unix_ms, still.intake_owner.as_deref()),
            (Some(still.created_unix_ms), Some(&*rig.scheduler.replica())),
            "the slow intake is still its owner's"
        );
        other_stop.cancel();
        other_running.await.unwrap().unwrap();
        rig.shutdown.cancel();
        rig.running.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_intake_waits_for_a_free_slot() {
        let rig = rig(1);
        let stuck = rig.scheduler.submit_scan(scan(HANG)).await.unwrap().id;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let waiting = rig.scheduler.submit_scan(scan(REPO)).await.unwrap().id;

        tokio::time::sleep(INTAKE_TIMEOUT - Duration::from_secs(2)).await;
        assert_eq!(
            rig.scheduler.task(&waiting).await.unwrap().state,
            TaskState::Queued,
            "the only slot is taken"
        );
        assert_eq!(rig.fx.broker.depth(Route::Stages(Priority::Bulk)), 0);

        // The slot's holder reaches its deadline; the waiting intake runs within its own.
        let started = once(&rig.scheduler, &waiting, Duration::from_secs(10), |d| {
            d.state == TaskState::Running
        })
        .await;
        assert_eq!(started.stages.len(), 1);
        let ended = rig.scheduler.task(&stuck).await.unwrap();
        assert_eq!(ended.failure_kind, Some(FailureKind::Timeout));
        rig.shutdown.cancel();
        rig.running.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopping_scheduler_gives_its_intakes_back_at_once() {
        let rig = rig(8);
        let stuck = rig.scheduler.submit_scan(scan(HANG)).await.unwrap().id;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stopping = tokio::time::Instant::now();

        rig.shutdown.cancel();
        rig.running.await.unwrap().unwrap();

        assert!(
            stopping.elapsed() < Duration::from_secs(1),
            "did not wait for the intake"
        );
        let task = rig.fx.load(&stuck).await;
        assert_eq!(task.state, TaskState::Queued);
        assert_eq!(
            task.intake_started_unix_ms, None,
            "given back: another replica's sweeper takes it over after stall_after"
        );
        assert_eq!(rig.hanging.dropped.load(Ordering::SeqCst), 1);
    }
}
