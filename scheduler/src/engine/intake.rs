//! Intake: a queued task's inputs prepared, then the task started. Every revision a task names is
//! resolved here, once, to a full commit id through the repository source (a scan's or issue
//! analysis's revision; a review's base and head together with its change, whose diff is stored
//! in per-file pieces by [`crate::diff_pieces`]). The task keeps the revisions as given beside
//! the commits, and every stage works on the commits. A task that cannot be prepared ends
//! `incomplete` with the reason and a failure kind: a revision or repository that does not exist
//! is the request's mistake (`not_found`), never `internal`; a repository the allowlist refuses
//! is `invalid_request`, checked before any git process runs.
//!
//! The state store's outages (a Redis primary failing over, `NOREPLICAS` after it) are waited
//! out within the intake's deadline, never a reason to end the task (issue 34): every store step
//! is made again until it answers, and an intake whose deadline passes while the store is down
//! ends its task `store_unavailable`. The intake slot is held only while the code host and the
//! repository are read, so intakes waiting for the store do not keep others from git.
//!
//! Intakes never run in the scheduler's loops (issue 8): [`Intake::spawn`] runs each in the
//! background, at most `scheduler.intake_concurrency` at once (the rest wait for a slot), and
//! only once per task in this process. An intake owns its task from the time stamped on the
//! record (`intake_started_unix_ms` and `intake_owner`, written at submission or by the
//! sweeper's compare-and-set takeover) until that time plus `scheduler.intake_timeout_seconds`,
//! waiting for a slot included: it ends the task by then. Another replica takes an intake over
//! only when its owner's heartbeat lease has lapsed (the owner is gone), or when it is older than
//! its deadline; never because it is slow. A stopping scheduler gives its intakes in flight back.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;
use verdict_backends::clock::Clock;
use verdict_backends::code_host::{CodeHost, CodeHostError};
use verdict_backends::repo::{RepoError, RepositorySource};
use verdict_backends::store::{InputError, InputStore};
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::RepositoryRef;

use super::allowlist::{HostResolver, RepositoryAllowlist};
use super::budgets::{Budgets, Refusal};
use super::records::TaskRecords;
use super::transition::Transitions;
use super::{SchedulerDeps, SchedulerSettings};
use crate::diff_pieces;
use crate::service::ServiceError;
use verdict_api::document::TaskState;
use verdict_api::submission::IssueInput;
use verdict_policy::ignore::IgnoredPaths;
use verdict_policy::pipeline::{self, Effects};
use verdict_policy::task::{GivenRevisions, PipelineKind, TaskRecord};

/// Starts queued tasks; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Intake {
    records: TaskRecords,
    transitions: Transitions,
    repositories: Arc<dyn RepositorySource>,
    code_host: Option<Arc<dyn CodeHost>>,
    inputs: Arc<dyn InputStore>,
    clock: Arc<dyn Clock>,
    allowlist: RepositoryAllowlist,
    resolver: Arc<dyn HostResolver>,
    budgets: Budgets,
    /// One per intake allowed to run at once.
    slots: Arc<Semaphore>,
    concurrency: usize,
    /// How long an intake owns its task, from the stamp on the record.
    timeout: Duration,
    /// Tasks whose intake runs in this process.
    running: Arc<Mutex<HashSet<String>>>,
    /// Tasks held (running or waiting) beyond which retryable submissions are refused.
    backlog: usize,
    /// This scheduler replica, as intake owners name it.
    replica: Arc<str>,
    /// When the most recent intakes ended, for how long a refused submitter should wait.
    pace: Arc<Mutex<VecDeque<std::time::Instant>>>,
    background: TaskTracker,
    /// Cancelled when the scheduler stops: intakes in flight give their tasks back.
    stop: CancellationToken,
}

/// How many recent intake ends the pace is measured over.
const PACE_WINDOW: usize = 256;

/// Seconds for `count` intakes to end at the pace of the recent `ends` (oldest first), 1 to 60;
/// 5 when too few ended recently to tell.
fn seconds_to_finish(ends: &VecDeque<std::time::Instant>, count: usize) -> u64 {
    let (Some(first), Some(last)) = (ends.front(), ends.back()) else {
        return 5;
    };
    let span = last.duration_since(*first).as_secs_f64();
    if span <= 0.0 {
        return 5;
    }
    let per_second = (ends.len() - 1) as f64 / span;
    // At least 1/span a second, so the quotient is finite; clamped to 1–60, so the conversion
    // cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = (count as f64 / per_second).ceil().clamp(1.0, 60.0) as u64;
    whole
}

/// Where an intake is, for the reason given when its time runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Waiting for a slot.
    Waiting,
    /// Reading from the code host and the repository.
    Preparing,
    /// Waiting out the state store, which answered this.
    StoreDown(String),
}

/// How the waits between tries of a store step grow while the store is down: from 0.2 s to 5 s
/// (each drawn with jitter, so intakes waiting together do not come back together), for as long
/// as the intake's deadline lets them.
fn store_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .with_jitter()
}

/// A failure that is the state store's outage, waited out rather than ending the task: in
/// words, or `None` for any other failure.
trait Outage {
    fn outage(&self) -> Option<String>;
}

impl Outage for ServiceError {
    fn outage(&self) -> Option<String> {
        match self {
            ServiceError::Unavailable(reason) | ServiceError::Overloaded { reason, .. } => {
                Some(reason.clone())
            }
            _ => None,
        }
    }
}

impl Outage for InputError {
    fn outage(&self) -> Option<String> {
        self.is_retryable().then(|| self.to_string())
    }
}

impl Outage for Refusal {
    fn outage(&self) -> Option<String> {
        match self {
            Refusal::Unavailable(e) => Some(e.to_string()),
            Refusal::OverBudget(_) => None,
        }
    }
}

/// Keeps a task listed as running an intake in this process until dropped.
struct Running {
    running: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// What intake adds to a task before it starts.
#[derive(Debug, Clone)]
struct Prepared {
    /// The repository with its revisions resolved to full commit ids.
    repository: RepositoryRef,
    /// The revisions as the request gave them.
    revisions: GivenRevisions,
    /// A review's diff as git gave it, stored in pieces before the task starts.
    diff: Option<PendingDiff>,
    /// What the code host said of the task's pull request or issue.
    host: Option<FromHost>,
    /// A scan's files classified and packed into shards.
    scan: Option<verdict_policy::scan_shards::ScanPlan>,
}

/// A review's diff, read, and how it is to be stored ([`diff_pieces::prepare`]).
#[derive(Debug, Clone)]
struct PendingDiff {
    text: String,
    ignore: IgnoredPaths,
    max_bytes: usize,
}

/// What intake read from the code host for a task given by a pull-request or issue URL.
#[derive(Debug, Clone)]
enum FromHost {
    PullRequest {
        head_sha: String,
        title: String,
        body: Option<String>,
    },
    Issue(IssueInput),
}

impl Prepared {
    /// What was read, on the task; a review's diff is written by [`Stored::write_to`].
    fn write_to(&self, task: &mut TaskRecord) {
        task.repository = Some(self.repository.clone());
        task.revisions = Some(self.revisions.clone());
        if let Some(plan) = &self.scan {
            task.inputs.scan_shards = Some(plan.shards.clone());
            task.coverage = plan.coverage.clone();
        }
        match &self.host {
            Some(FromHost::PullRequest {
                head_sha,
                title,
                body,
            }) => {
                if let Some(github) = &mut task.github {
                    github.head_sha = Some(head_sha.clone());
                }
                task.inputs.title.get_or_insert_with(|| title.clone());
                if task.inputs.body.is_none() {
                    task.inputs.body.clone_from(body);
                }
            }
            Some(FromHost::Issue(issue)) => task.inputs.issue = Some(issue.clone()),
            None => {}
        }
    }
}

/// What intake stored for a task, ready to start it.
#[derive(Debug, Clone, Default)]
struct Stored {
    prepared: Option<Prepared>,
    diff: Option<diff_pieces::PreparedDiff>,
    budget: Option<verdict_policy::budget::BudgetHold>,
}

impl Stored {
    fn write_to(&self, task: &mut TaskRecord) {
        if let Some(p) = &self.prepared {
            p.write_to(task);
        }
        if let Some(d) = &self.diff {
            task.inputs.diff_files = d.files.clone();
            task.inputs.diffstat = Some(d.diffstat.clone());
            task.coverage = d.coverage.clone();
        }
        task.budget.clone_from(&self.budget);
    }
}

/// Why a task could not be taken in: in words for its reason, and classified.
#[derive(Debug, Clone)]
struct Refused {
    kind: FailureKind,
    reason: String,
}

impl Refused {
    /// A repository error, classified the one way workers classify it too.
    fn repository(context: Option<String>, error: &RepoError) -> Refused {
        Refused {
            kind: error.failure_kind(),
            reason: match context {
                Some(context) => format!("{context}: {error}"),
                None => error.to_string(),
            },
        }
    }

    /// A code-host error while reading the task's pull request or issue.
    fn host(what: &str, error: &CodeHostError) -> Refused {
        Refused {
            kind: match error {
                CodeHostError::NotFound { .. } => FailureKind::NotFound,
                CodeHostError::Denied { .. } => FailureKind::Auth,
                CodeHostError::RateLimited { .. } => FailureKind::RateLimited,
                CodeHostError::Rejected { .. } => FailureKind::InvalidRequest,
                CodeHostError::Unavailable { .. } => FailureKind::RepositoryUnavailable,
                CodeHostError::Protocol { .. } => FailureKind::Internal,
            },
            reason: format!("cannot read {what}: {error}"),
        }
    }
}

impl Intake {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        records: &TaskRecords,
        transitions: &Transitions,
        budgets: &Budgets,
        background: &TaskTracker,
        stop: &CancellationToken,
    ) -> Intake {
        let concurrency = settings.intake_concurrency.max(1);
        Intake {
            records: records.clone(),
            transitions: transitions.clone(),
            repositories: deps.repositories.clone(),
            code_host: deps.code_host.clone(),
            inputs: deps.inputs.clone(),
            clock: deps.clock.clone(),
            allowlist: settings.repositories.clone(),
            resolver: deps.resolver.clone(),
            budgets: budgets.clone(),
            slots: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            timeout: settings.intake_timeout,
            running: Arc::new(Mutex::new(HashSet::new())),
            backlog: settings.intake_backlog.max(1),
            // Fresh per process: a restarted replica is a new owner, and the intakes its
            // previous life owned are taken over once that life's lease lapses.
            replica: format!("scheduler-{}", super::submission::new_id()).into(),
            pace: Arc::new(Mutex::new(VecDeque::with_capacity(PACE_WINDOW))),
            background: background.clone(),
            stop: stop.clone(),
        }
    }

    /// The intake pool's slots and its time limit, which a scan batch's enumeration shares
    /// (`engine::batches`): listing an organisation is intake work too.
    pub(super) fn pool(&self) -> (Arc<Semaphore>, Duration) {
        (self.slots.clone(), self.timeout)
    }

    /// This replica's name on the intakes it owns and on its heartbeat.
    pub(super) fn replica(&self) -> Arc<str> {
        self.replica.clone()
    }

    /// How long an intake owns its task, in milliseconds.
    pub(super) fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts task `id`'s intake in the background, unless one already runs in this process.
    /// The caller never waits for it.
    pub(super) fn spawn(&self, id: &str) {
        let guard = {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            if !running.insert(id.to_owned()) {
                return;
            }
            Running {
                running: self.running.clone(),
                id: id.to_owned(),
            }
        };
        let this = self.clone();
        self.background.spawn(async move {
            this.start(&guard.id).await;
            drop(guard);
            this.ended_one();
        });
    }

    /// Whether a submission that can be made again may be admitted: refused as busy while this
    /// replica holds `intake_backlog` tasks for intake, with the wait the recent pace needs to
    /// make room for a sixteenth of the backlog. A soft bound: submissions checked at the same
    /// moment may all pass.
    pub(super) fn check_backlog(&self) -> Result<(), ServiceError> {
        let held = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        if held < self.backlog {
            return Ok(());
        }
        let room = (self.backlog / 16).max(1) + held - self.backlog;
        let retry_after_secs = {
            let pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
            seconds_to_finish(&pace, room)
        };
        Err(ServiceError::Busy {
            reason: format!(
                "the scheduler is busy: {held} tasks are waiting for intake here (scheduler.intake_backlog = {}); nothing was created, submit again in {retry_after_secs} s (Retry-After), or add scheduler replicas or raise scheduler.intake_concurrency",
                self.backlog
            ),
            retry_after_secs,
        })
    }

    fn ended_one(&self) {
        let mut pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
        if pace.len() == PACE_WINDOW {
            pace.pop_front();
        }
        pace.push_back(std::time::Instant::now());
    }

    /// Whether task `id`'s intake runs in this process.
    pub(super) fn is_running(&self, id: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(id)
    }

    /// The sweeper's takeover of a queued task whose intake was given back, never ran, or
    /// outlived its owner's deadline (`abandoned` says which records qualify): the task is
    /// stamped as this replica's with compare-and-set, so one replica wins, and its intake is
    /// spawned. Not awaited past that write.
    pub(super) async fn take_over(&self, id: &str, abandoned: impl Fn(&TaskRecord, u64) -> bool) {
        if self.is_running(id) {
            return;
        }
        let now = self.clock.now_unix_ms();
        let taken = AtomicBool::new(false);
        let stamped = self
            .records
            .update(id, |t| {
                let take = t.state == TaskState::Queued && abandoned(t, now);
                taken.store(take, Ordering::Relaxed);
                if take {
                    t.own_intake(&self.replica, now);
                }
                Effects::default()
            })
            .await;
        match stamped {
            Ok(_) if taken.load(Ordering::Relaxed) => {
                tracing::info!(task = %id, "taking over an abandoned intake");
                self.spawn(id);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, task = %id, "intake not taken over"),
        }
    }

    /// Prepares task `id` and starts it, if it is still queued, within the intake's deadline
    /// (its stamp plus the timeout; a slot is waited for within it too). When the deadline
    /// passes, the task ends `incomplete` (`timeout`, or `store_unavailable` when the state
    /// store was what it waited for); when the scheduler stops first, the task is given back.
    /// Failing to record the end is logged: the task stays queued and the sweeper tries again.
    pub(super) async fn start(&self, id: &str) {
        // The record is read through a store outage too, bounded by the intake's timeout: the
        // task's own deadline is on it.
        let phase = Mutex::new(Phase::Waiting);
        let read = self.through_outages(&phase, || self.records.load(id));
        let read = tokio::select! {
            biased;
            () = self.stop.cancelled() => return,
            read = tokio::time::timeout(self.timeout, read) => read,
        };
        let task = match read {
            Ok(Ok(task)) => task,
            Ok(Err(e)) => {
                tracing::debug!(task = %id, error = %e, "no intake: the task cannot be read");
                return;
            }
            Err(_) => {
                tracing::warn!(task = %id, "intake not started: its record could not be read; the sweeper will retry");
                return;
            }
        };
        if task.state != TaskState::Queued {
            return;
        }
        let span = tracing::info_span!("intake", task_id = %id);
        verdict_backends::trace::set_parent(&span, &task.trace);
        self.start_queued(id, &task).instrument(span).await;
    }

    /// [`Intake::start`] of a task loaded queued.
    async fn start_queued(&self, id: &str, task: &TaskRecord) {
        let now = self.clock.now_unix_ms();
        let stamp = task.intake_started_unix_ms.unwrap_or(now);
        let left = stamp.saturating_add(self.timeout_ms()).saturating_sub(now);
        let phase = Mutex::new(Phase::Waiting);
        let ended = tokio::select! {
            biased;
            () = self.stop.cancelled() => {
                self.give_back(id, task.intake_started_unix_ms).await;
                return;
            }
            ended = tokio::time::timeout(Duration::from_millis(left), self.take_in(id, &phase)) => ended,
        };
        if ended.is_err() {
            let phase = phase.lock().unwrap_or_else(PoisonError::into_inner).clone();
            self.time_out(id, task.intake_started_unix_ms, phase).await;
        }
    }

    /// The intake itself: a slot waited for, the task read from the code host and the
    /// repository while holding it, then its inputs stored and the task started — or ended with
    /// why it cannot start.
    async fn take_in(&self, id: &str, phase: &Mutex<Phase>) {
        let (task, read) = {
            let _slot = self.slots.acquire().await;
            // The task may have been cancelled (or started elsewhere) while it waited.
            let task = match self.through_outages(phase, || self.records.load(id)).await {
                Ok(task) if task.state == TaskState::Queued => task,
                _ => return,
            };
            *phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::Preparing;
            let read = self.prepare(&task).await;
            (task, read)
        };
        let stored = match read {
            Ok(prepared) => self.store(&task, prepared, phase).await,
            Err(refused) => Err(refused),
        };
        let ended = match stored {
            Ok(stored) => {
                let stored = &stored;
                self.through_outages(phase, || {
                    let now = self.clock.now_unix_ms();
                    self.transitions.apply(id, move |t| {
                        // Another intake (a sweeper's restart) may have started it meanwhile.
                        if t.state == TaskState::Queued {
                            stored.write_to(t);
                        }
                        pipeline::start(t, now)
                    })
                })
                .await
            }
            Err(refused) => {
                let refused = &refused;
                self.through_outages(phase, || {
                    let now = self.clock.now_unix_ms();
                    self.transitions.apply(id, move |t| {
                        pipeline::fail_intake(t, refused.reason.clone(), refused.kind, now)
                    })
                })
                .await
            }
        };
        if let Err(e) = ended {
            tracing::warn!(error = %e, task = %id, "intake not recorded; the sweeper will retry");
        }
    }

    /// What intake read, stored: a review's diff in pieces, then the task's estimate reserved
    /// against its organisation's budget (SPEC X5) — a task that does not fit is refused before
    /// it starts. Each step is idempotent (a piece stored again only renews it, a reservation
    /// is the task's own), so one cut short by an outage is simply made again.
    async fn store(
        &self,
        task: &TaskRecord,
        prepared: Option<Prepared>,
        phase: &Mutex<Phase>,
    ) -> Result<Stored, Refused> {
        let mut stored = Stored::default();
        if let Some(pending) = prepared.as_ref().and_then(|p| p.diff.as_ref()) {
            let diff = self
                .through_outages(phase, || {
                    diff_pieces::prepare(
                        self.inputs.as_ref(),
                        &pending.text,
                        pending.max_bytes,
                        &pending.ignore,
                    )
                })
                .await
                .map_err(|e| Refused {
                    kind: FailureKind::Internal,
                    reason: format!("cannot store the diff: {e}"),
                })?;
            stored.diff = Some(diff);
        }
        stored.prepared = prepared;
        let mut taken_in = task.clone();
        stored.write_to(&mut taken_in);
        stored.budget = self
            .through_outages(phase, || self.budgets.reserve(&taken_in))
            .await
            .map_err(|refusal| match refusal {
                Refusal::OverBudget(reason) => Refused {
                    kind: FailureKind::BudgetExceeded,
                    reason,
                },
                Refusal::Unavailable(e) => Refused {
                    kind: FailureKind::StoreUnavailable,
                    reason: format!("the budget ledger did not answer: {e}"),
                },
            })?;
        Ok(stored)
    }

    /// `op`, made again while it fails with a state-store outage ([`store_backoff`]); any other
    /// outcome is returned. The outage is kept in `phase` for the reason a timeout gives: the
    /// intake's deadline bounds the waiting, and a stopping scheduler ends it.
    async fn through_outages<T, E, F, Fut>(&self, phase: &Mutex<Phase>, op: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Outage,
    {
        let before = phase.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let result = op
            .retry(store_backoff())
            .sleep(tokio::time::sleep)
            .when(|e: &E| e.outage().is_some())
            .notify(|e: &E, wait| {
                let outage = e.outage().unwrap_or_default();
                tracing::info!(error = %outage, wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "the state store is unavailable; intake waits");
                *phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::StoreDown(outage);
            })
            .await;
        *phase.lock().unwrap_or_else(PoisonError::into_inner) = before;
        result
    }

    /// The intake's deadline passed: the task ends `incomplete` with kind `timeout` (or
    /// `store_unavailable`), unless another replica has taken it over since (its stamp changed).
    async fn time_out(&self, id: &str, stamp: Option<u64>, phase: Phase) {
        let seconds = self.timeout.as_secs();
        let (kind, reason) = match phase {
            Phase::Waiting => (
                FailureKind::Timeout,
                format!(
                    "intake did not start within {seconds} s: all {} intake slots were busy with other tasks; raise scheduler.intake_concurrency, or scheduler.intake_timeout_seconds when bursts are expected",
                    self.concurrency
                ),
            ),
            Phase::Preparing => (
                FailureKind::Timeout,
                format!(
                    "intake did not finish within {seconds} s: the code host or the repository did not answer in time; check them, or raise scheduler.intake_timeout_seconds (git's own limits are repositories.fetch_timeout_seconds and repositories.local_timeout_seconds)"
                ),
            ),
            Phase::StoreDown(outage) => (
                FailureKind::StoreUnavailable,
                format!(
                    "intake did not finish within {seconds} s: the state store was unavailable ({outage}); check Redis (docs/deploy.md says what a failover costs), or raise scheduler.intake_timeout_seconds to wait longer"
                ),
            ),
        };
        let now = self.clock.now_unix_ms();
        let ended = self
            .transitions
            .apply(id, |t| {
                if t.intake_started_unix_ms != stamp {
                    return Effects::default();
                }
                pipeline::fail_intake(t, reason.clone(), kind, now)
            })
            .await;
        if let Err(e) = ended {
            tracing::warn!(error = %e, task = %id, "intake timeout not recorded; the sweeper will retry");
        }
    }

    /// A stopping scheduler gives a queued task back, so that any replica's sweeper starts it
    /// again without waiting for this intake's deadline.
    async fn give_back(&self, id: &str, stamp: Option<u64>) {
        let released = self
            .records
            .update(id, |t| {
                if t.state == TaskState::Queued && t.intake_started_unix_ms == stamp {
                    t.disown_intake();
                }
                Effects::default()
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, task = %id, "intake not given back; it lapses at its deadline");
        }
    }

    /// The allowlist's verdict on a repository URL, before any git process runs for it (SPEC
    /// R4): records that never passed the API (a pull request's clone URL) are checked here too.
    async fn allowed(&self, url: &str) -> Result<(), Refused> {
        self.allowlist
            .check(url, self.resolver.as_ref())
            .await
            .map_err(|refusal| Refused {
                kind: if refusal.retryable {
                    FailureKind::RepositoryUnavailable
                } else {
                    FailureKind::InvalidRequest
                },
                reason: refusal.to_string(),
            })
    }

    /// The task's inputs, or why they cannot be had.
    async fn prepare(&self, task: &TaskRecord) -> Result<Option<Prepared>, Refused> {
        match task.pipeline {
            PipelineKind::Multi | PipelineKind::Single => self.prepare_review(task).await.map(Some),
            PipelineKind::IssueAnalysis => {
                let issue = self.issue_from_host(task).await?;
                let repository = task.repository.clone().or_else(|| {
                    issue.as_ref().map(|(_, url)| RepositoryRef {
                        url: url.clone(),
                        commit: "HEAD".to_owned(),
                        base: None,
                    })
                });
                let host = issue.map(|(i, _)| FromHost::Issue(i));
                match repository {
                    Some(repo) => {
                        let mut prepared = self.resolve(&repo).await?;
                        prepared.host = host;
                        Ok(Some(prepared))
                    }
                    // An issue analysis without a repository has nothing to resolve; what the
                    // host said of the issue still goes in.
                    None => Ok(None),
                }
            }
            PipelineKind::Scan => match &task.repository {
                Some(repo) => {
                    let mut prepared = self.resolve(repo).await?;
                    prepared.scan = Some(self.plan_scan(task, &prepared.repository).await?);
                    Ok(Some(prepared))
                }
                None => Ok(None),
            },
        }
    }

    /// The code host, for a task that needs one.
    fn code_host(&self) -> Result<&dyn CodeHost, Refused> {
        self.code_host.as_deref().ok_or_else(|| Refused {
            kind: FailureKind::InvalidRequest,
            reason: "the task names a GitHub pull request or issue, but this scheduler has no GitHub configured; set [github] (docs/github.md)".to_owned(),
        })
    }

    /// The issue of a task given by its URL (its title still empty), with its repository's clone
    /// URL; `None` for issues given in the request.
    async fn issue_from_host(
        &self,
        task: &TaskRecord,
    ) -> Result<Option<(IssueInput, String)>, Refused> {
        let Some(github) = &task.github else {
            return Ok(None);
        };
        if task
            .inputs
            .issue
            .as_ref()
            .is_some_and(|i| !i.title.trim().is_empty())
        {
            return Ok(None);
        }
        let item = &github.item;
        let what = format!("issue {}#{}", item.repo, item.number);
        let issue = self
            .code_host()?
            .issue(item)
            .await
            .map_err(|e| Refused::host(&what, &e))?;
        Ok(Some((
            IssueInput {
                number: Some(item.number),
                title: issue.title,
                body: issue.body.unwrap_or_default(),
                labels: issue.labels,
            },
            issue.clone_url,
        )))
    }

    /// A scan's files at its resolved commit, classified and packed into shards (SPEC S4, X4).
    async fn plan_scan(
        &self,
        task: &TaskRecord,
        repo: &RepositoryRef,
    ) -> Result<verdict_policy::scan_shards::ScanPlan, Refused> {
        let cancel = CancellationToken::new();
        let files = self
            .repositories
            .files(&repo.url, &repo.commit, &cancel)
            .await
            .map_err(|e| {
                let context = format!("cannot list the files of commit {}", repo.commit);
                Refused::repository(Some(context), &e)
            })?;
        verdict_policy::scan_shards::plan(&files, &task.settings.scan).map_err(|e| Refused {
            kind: FailureKind::InvalidRequest,
            reason: format!("scan.exclude: {e}"),
        })
    }

    /// A scan's or issue analysis's repository with its revision resolved.
    async fn resolve(&self, repo: &RepositoryRef) -> Result<Prepared, Refused> {
        self.allowed(&repo.url).await?;
        let cancel = CancellationToken::new();
        let commit = self
            .repositories
            .resolve(&repo.url, &repo.commit, &cancel)
            .await
            .map_err(|e| Refused::repository(None, &e))?;
        Ok(Prepared {
            repository: RepositoryRef {
                url: repo.url.clone(),
                commit,
                base: None,
            },
            revisions: GivenRevisions {
                head: repo.commit.clone(),
                base: None,
            },
            diff: None,
            host: None,
            scan: None,
        })
    }

    async fn prepare_review(&self, task: &TaskRecord) -> Result<Prepared, Refused> {
        let (repository, host) = match (&task.repository, &task.github) {
            (Some(repo), _) => (repo.clone(), None),
            (None, Some(github)) => {
                let item = &github.item;
                let what = format!("pull request {}#{}", item.repo, item.number);
                let pull = self
                    .code_host()?
                    .pull_request(item)
                    .await
                    .map_err(|e| Refused::host(&what, &e))?;
                let repo = RepositoryRef {
                    url: pull.clone_url,
                    commit: pull.head_sha.clone(),
                    base: Some(pull.base_sha),
                };
                let host = FromHost::PullRequest {
                    head_sha: pull.head_sha,
                    title: pull.title,
                    body: pull.body,
                };
                (repo, Some(host))
            }
            (None, None) => {
                return Err(Refused {
                    kind: FailureKind::InvalidRequest,
                    reason: "the review names no repository".to_owned(),
                });
            }
        };
        let repo = &repository;
        self.allowed(&repo.url).await?;
        let base = repo.base.clone().unwrap_or_default();
        let cancel = CancellationToken::new();
        let change = self
            .repositories
            .change(&repo.url, &base, &repo.commit, &cancel)
            .await
            .map_err(|e| {
                let context = format!("cannot read the change from `{base}` to `{}`", repo.commit);
                Refused::repository(Some(context), &e)
            })?;
        let ignore = IgnoredPaths::new(&task.settings.ignore_paths).map_err(|e| Refused {
            kind: FailureKind::InvalidRequest,
            reason: format!("pipeline.ignore_paths: {e}"),
        })?;
        let diff = PendingDiff {
            text: change.diff,
            ignore,
            max_bytes: task.settings.max_diff_bytes,
        };
        Ok(Prepared {
            repository: RepositoryRef {
                url: repo.url.clone(),
                commit: change.head,
                base: Some(change.base),
            },
            revisions: GivenRevisions {
                head: repo.commit.clone(),
                base: repo.base.clone(),
            },
            diff: Some(diff),
            host,
            scan: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::{DIFF, Fixture, INTAKE_TIMEOUT, MAIN_COMMIT, Outages, REPO, V1};
    use verdict_policy::task::StageStatus;

    const MAIN: &str = "0000000000000000000000000000000000000a11";
    const FEATURE: &str = "00000000000000000000000000000000000fea70";

    /// [`REPO`]'s `main` and `feature` branches, `feature` changing it by [`DIFF`].
    fn feature_branch(fx: &Fixture) {
        fx.repositories.insert_revision(REPO, "main", MAIN);
        fx.repositories.insert_revision(REPO, "feature", FEATURE);
        fx.repositories.insert_change(REPO, MAIN, FEATURE, DIFF);
    }

    /// `Retry-After` from the recent pace: 101 ends over 10 s is 10 a second, so 25 more take
    /// 3 s; the answer stays within 1 to 60 s, and is 5 s when the pace cannot be told.
    #[test]
    fn the_wait_a_busy_answer_names_follows_the_recent_pace() {
        let start = std::time::Instant::now();
        let ends: VecDeque<_> = (0..=100u64)
            .map(|i| start + Duration::from_millis(100 * i))
            .collect();
        assert_eq!(seconds_to_finish(&ends, 25), 3);
        assert_eq!(seconds_to_finish(&ends, 1), 1);
        assert_eq!(seconds_to_finish(&ends, 10_000), 60);
        assert_eq!(seconds_to_finish(&VecDeque::new(), 25), 5);
        assert_eq!(seconds_to_finish(&VecDeque::from([start]), 25), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_starts_with_its_change_stored_in_pieces() {
        let fx = Fixture::new();
        feature_branch(&fx);
        let task = fx.queued_review().await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        let repository = started.repository.as_ref().unwrap();
        assert_eq!(
            (repository.commit.as_str(), repository.base.as_deref()),
            (FEATURE, Some(MAIN)),
            "stages work on the commits"
        );
        assert_eq!(
            started.revisions,
            Some(GivenRevisions {
                head: "feature".to_owned(),
                base: Some("main".to_owned())
            }),
            "the revisions as given are kept"
        );
        let request = &started.stage("summary").unwrap().request;
        assert_eq!(request.repository.as_ref().unwrap().commit, FEATURE);
        assert_eq!(started.inputs.diff_files.len(), 1);
        assert_eq!(
            started.inputs.diffstat.as_deref(),
            Some("src/cart.rs (+1 -0)\n")
        );
        assert_eq!(started.coverage.files_reviewed, vec!["src/cart.rs"]);
        assert_eq!(
            started.stage("summary").unwrap().status,
            StageStatus::Dispatched
        );
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Interactive)), 1);
    }

    /// Issue 34: a state store down while a review is taken in (a Redis primary failing over)
    /// is waited out: the task starts once the store answers, its diff stored, instead of
    /// ending `internal`.
    #[tokio::test(start_paused = true)]
    async fn an_intake_waits_out_a_store_outage_and_starts_the_task() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        feature_branch(&fx);
        let task = fx.queued_review().await;
        outages.inputs_down.store(true, Ordering::SeqCst);
        outages.documents_down.store(true, Ordering::SeqCst);

        let intake = fx.parts.intake.clone();
        let id = task.id.clone();
        let running = tokio::spawn(async move { intake.start(&id).await });
        tokio::time::sleep(Duration::from_secs(20)).await;
        outages.documents_down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(
            fx.load(&task.id).await.state,
            TaskState::Queued,
            "still waiting"
        );
        outages.inputs_down.store(false, Ordering::SeqCst);
        running.await.unwrap();

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        assert_eq!(started.failure_kind, None);
        assert_eq!(started.inputs.diff_files.len(), 1);
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Interactive)), 1);
    }

    /// An intake whose deadline passes while the store is down ends its task with the kind that
    /// says so, and the reason names the store and what it answered.
    #[tokio::test(start_paused = true)]
    async fn an_intake_the_store_outlasts_ends_its_task_store_unavailable() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        feature_branch(&fx);
        let task = fx.queued_review().await;
        outages.inputs_down.store(true, Ordering::SeqCst);
        let start = tokio::time::Instant::now();

        fx.parts.intake.start(&task.id).await;

        assert_eq!(start.elapsed(), INTAKE_TIMEOUT);
        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::StoreUnavailable));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "intake did not finish within 300 s: the state store was unavailable (input store unavailable: MOVED 7414); check Redis (docs/deploy.md says what a failover costs), or raise scheduler.intake_timeout_seconds to wait longer"
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_whose_every_file_is_ignored_is_skipped_without_asking_a_model() {
        let fx = Fixture::new();
        feature_branch(&fx);
        let task = fx.queued_review().await;
        fx.parts
            .records
            .update(&task.id, |t| {
                t.settings.ignore_paths = vec!["src/**".to_owned()];
                pipeline::Effects::default()
            })
            .await
            .unwrap();

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Skipped);
        assert_eq!(
            ended.reason.as_deref(),
            Some("every changed file matches pipeline.ignore_paths")
        );
        assert_eq!(
            ended.coverage.files_not_reviewed[0].reason,
            "ignored: matches `src/**` (pipeline.ignore_paths)"
        );
        assert!(ended.stages.is_empty());
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Interactive)), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_cannot_be_read_ends_the_review_incomplete() {
        let fx = Fixture::new();
        let task = fx.queued_review().await;

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::NotFound));
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with(
                "cannot read the change from `main` to `feature`: revision `main` was not found in repository https://example.test/shop.git; check the branch, tag or commit name"
            ),
            "{reason}"
        );
        assert!(fx.parts.records.active().await.unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_scan_works_on_the_commit_its_revision_names_at_intake() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let queued = task.document(Vec::new()).repository.unwrap();
        assert_eq!((queued.revision.as_str(), queued.commit), ("v1", None));

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        assert_eq!(started.repository.as_ref().unwrap().commit, V1);
        let request = &started.stage("scan").unwrap().request;
        assert_eq!(request.repository.as_ref().unwrap().commit, V1);
        let shown = started.document(Vec::new()).repository.unwrap();
        assert_eq!(
            (shown.revision.as_str(), shown.commit.as_deref()),
            ("v1", Some(V1))
        );
        assert_eq!(started.failure_kind, None);
    }

    /// SPEC S4, X4: intake lists the commit's files, skips what is not to be scanned with its
    /// reason, and tells the scan stage which files are its own.
    #[tokio::test(start_paused = true)]
    async fn a_scan_lists_its_files_and_tells_the_stage_which_are_its_own() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.coverage.files_total, 2);
        assert_eq!(started.coverage.files_reviewed, ["src/cart.rs"]);
        let skipped = &started.coverage.files_not_reviewed;
        assert_eq!(skipped.len(), 1);
        assert_eq!(
            (skipped[0].path.as_str(), skipped[0].kind),
            (
                "vendor/lib/x.go",
                Some(verdict_api::document::SkipReason::Vendored)
            )
        );
        let request = &started.stage("scan").unwrap().request;
        let verdict_proto::wire::InputContent::Inline { text } = &request.inputs[0].content else {
            panic!("the scan request is inline");
        };
        assert_eq!(text.lines().skip(1).collect::<Vec<_>>(), ["src/cart.rs"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revision_that_does_not_exist_is_the_requests_mistake() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        fx.parts
            .records
            .update(&task.id, |t| {
                t.repository.as_mut().unwrap().commit = "no-such-branch".to_owned();
                pipeline::Effects::default()
            })
            .await
            .unwrap();

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::NotFound));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "revision `no-such-branch` was not found in repository https://example.test/shop.git; check the branch, tag or commit name, that it was pushed, and that the request names the right repository"
            )
        );
        let doc = ended.document(Vec::new());
        assert_eq!(doc.failure_kind, Some(FailureKind::NotFound));
        let shown = doc.repository.unwrap();
        assert_eq!(
            (shown.revision.as_str(), shown.commit),
            ("no-such-branch", None)
        );
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pull_request_given_by_url_is_read_from_the_host_and_reviewed_at_its_head() {
        let fx = Fixture::new();
        let item = fx.pull_request(7, FEATURE);
        let task = fx.queued_pull_request_review(&item, true).await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        let repository = started.repository.as_ref().unwrap();
        assert_eq!(repository.url, REPO);
        assert_eq!(
            (repository.commit.as_str(), repository.base.as_deref()),
            (FEATURE, Some(MAIN_COMMIT))
        );
        assert_eq!(
            started.github.as_ref().unwrap().head_sha.as_deref(),
            Some(FEATURE),
            "a later push is recognised as a newer head"
        );
        assert_eq!(started.inputs.title.as_deref(), Some("Apply coupons"));
        assert_eq!(started.inputs.body.as_deref(), Some("Coupons at checkout."));
        assert_eq!(started.coverage.files_reviewed, vec!["src/cart.rs"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pull_request_the_host_does_not_have_is_not_found() {
        let fx = Fixture::new();
        let mut item = fx.pull_request(7, FEATURE);
        item.number = 8;
        let task = fx.queued_pull_request_review(&item, false).await;

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::NotFound));
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with(
                "cannot read pull request acme/shop#8: pull request acme/shop#8 was not found"
            ),
            "{reason}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_issue_given_by_url_is_read_from_the_host_with_its_repository() {
        use verdict_backends::code_host::{Author, Issue, ItemState};
        let fx = Fixture::new();
        let item = fx.pull_request(7, FEATURE);
        let issue_item = verdict_proto::publication::ItemRef { number: 12, ..item };
        fx.repositories.insert_revision(REPO, "HEAD", MAIN_COMMIT);
        fx.code_host.add_issue(Issue {
            item: issue_item.clone(),
            state: ItemState::Open,
            title: "Crash on empty cart".to_owned(),
            body: Some("Steps to reproduce".to_owned()),
            author: Author {
                login: "bob".to_owned(),
                bot: false,
            },
            labels: vec!["bug".to_owned()],
            clone_url: REPO.to_owned(),
            html_url: "https://github.com/acme/shop/issues/12".to_owned(),
        });
        let submission = verdict_api::submission::IssueAnalysisSubmission {
            issue_url: Some("https://github.com/acme/shop/issues/12".to_owned()),
            ..Default::default()
        };
        let task = super::super::submission::TaskDefaults::new(&fx.settings)
            .issue_analysis(submission, fx.now())
            .unwrap();
        fx.parts.records.create(&task).await.unwrap();

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        let issue = started.inputs.issue.as_ref().unwrap();
        assert_eq!(
            (issue.number, issue.title.as_str(), issue.labels.as_slice()),
            (Some(12), "Crash on empty cart", &["bug".to_owned()][..])
        );
        assert_eq!(started.repository.as_ref().unwrap().commit, MAIN_COMMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn an_intake_that_finds_no_slot_before_its_deadline_ends_its_task() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let _all = fx.parts.intake.slots.acquire_many(8).await.unwrap();
        let start = tokio::time::Instant::now();

        fx.parts.intake.start(&task.id).await;

        assert_eq!(start.elapsed(), INTAKE_TIMEOUT);
        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::Timeout));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "intake did not start within 300 s: all 8 intake slots were busy with other tasks; raise scheduler.intake_concurrency, or scheduler.intake_timeout_seconds when bursts are expected"
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_repository_the_allowlist_refuses_is_never_fetched() {
        use verdict_backends::code_host::{Author, ItemState, PullRequest};
        let fx = Fixture::new();
        let item = fx.pull_request(7, FEATURE);
        let task = fx.queued_pull_request_review(&item, false).await;
        // The host hands out a clone URL the API never saw.
        fx.code_host.add_pull_request(
            PullRequest {
                item: item.clone(),
                state: ItemState::Open,
                draft: false,
                title: "Apply coupons".to_owned(),
                body: None,
                author: Author {
                    login: "ada".to_owned(),
                    bot: false,
                },
                labels: Vec::new(),
                head_sha: FEATURE.to_owned(),
                base_sha: MAIN_COMMIT.to_owned(),
                head_ref: "feature".to_owned(),
                base_ref: "main".to_owned(),
                clone_url: "file:///etc".to_owned(),
                html_url: "https://github.com/acme/shop/pull/7".to_owned(),
            },
            DIFF,
        );

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::InvalidRequest));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "repository `file:///etc` is not allowed: local paths and file:// URLs are read only by `verdict dev` (repositories.allow_local_paths); give an https:// URL"
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_already_taken_in_is_left_alone() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;

        fx.parts.intake.start(&task.id).await;
        fx.parts.intake.start(&task.id).await;

        assert_eq!(fx.load(&task.id).await.stages.len(), 1);
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 1);
    }
}
