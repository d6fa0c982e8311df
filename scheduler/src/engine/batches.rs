//! Scan batches (issue 10): an organisation's repositories (or a manifest's) enumerated in the
//! background, then one scan task created per repository at bulk priority, the batch followed
//! to its end. Nothing here runs in an API handler: a submission stores the batch as
//! `enumerating` and answers; the driver takes a slot of the intake pool, lists the
//! repositories under the intake time limit and the scheduler's stop token, writes the members
//! (each with a task id fixed by its idempotency key) and creates their tasks through the same
//! submission path as any scan (`TaskService::submit_scan`, allowlist included).
//!
//! Resuming is safe at any point: a member task is created with its key, so a second create
//! answers with the task that exists — finished or running, it is never made again. A replica
//! that stops or dies mid-batch leaves a lease on the record (`driver_until_unix_ms`); the
//! batch pass of any replica drives the batch on once the lease has lapsed, and `POST
//! /v1/scans/{id}/resume` does so at once. The batch pass also marks a batch `finished` when
//! every member task ended.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_backends::clock::Clock;
use verdict_backends::code_host::{CodeHost, CodeHostError};
use verdict_backends::store::DocumentStore;
use verdict_proto::budget::Amount;
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::Priority;

use super::allowlist::{HostResolver, RepositoryAllowlist};
use super::budgets::{Budgets, Refusal};
use super::records::{TaskRecords, create_listed};
use super::submission::id_for_key;
use super::{Scheduler, SchedulerDeps, SchedulerSettings, unavailable};
use crate::service::{ServiceError, TaskService};
use verdict_api::batch::{BatchState, ScanBatchDocument, Skipped};
use verdict_api::document::TaskState;
use verdict_api::submission::ScanSubmission;
use verdict_policy::scan_batch::{self, BatchRecord, BatchSource, Member, RepositoryFilter};
use verdict_policy::scan_shards::ScanSettings;

/// The set of batch ids not known to have ended.
const ACTIVE: &str = "scan-batches:active";

/// A compare-and-set that keeps losing gives up after this many tries.
const MAX_TRIES: usize = 64;

fn batch_key(id: &str) -> String {
    format!("scan-batch:{id}")
}

/// The scan batches; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Batches {
    documents: Arc<dyn DocumentStore>,
    records: TaskRecords,
    code_host: Option<Arc<dyn CodeHost>>,
    clock: Arc<dyn Clock>,
    allowlist: RepositoryAllowlist,
    resolver: Arc<dyn HostResolver>,
    /// The intake pool's slots: an enumeration takes one.
    slots: Arc<Semaphore>,
    /// The intake time limit: how long an enumeration may take, and the driver's lease.
    timeout: Duration,
    budgets: Budgets,
    /// How scans are sharded, for a batch's pre-flight estimate.
    scan: ScanSettings,
    /// Batches driven in this process now.
    running: Arc<Mutex<HashSet<String>>>,
    background: TaskTracker,
    stop: CancellationToken,
}

/// Why listing a batch's repositories failed.
#[derive(Debug)]
enum Enumeration {
    /// Another try will not change it: the batch fails with the reason.
    Final(String),
    /// Worth another try (the code host is down or rate-limited): the batch pass retries.
    Transient(String),
    /// The pre-flight estimate does not fit the organisation's budget (SPEC X5): the batch is
    /// refused with the reason, and the estimate is kept on it.
    OverBudget(String, Amount),
}

/// Keeps a batch listed as driven in this process until dropped.
struct Driving {
    running: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Drop for Driving {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Batches {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        records: &TaskRecords,
        budgets: &Budgets,
        pool: (Arc<Semaphore>, Duration),
        background: &TaskTracker,
        stop: &CancellationToken,
    ) -> Batches {
        Batches {
            documents: deps.documents.clone(),
            records: records.clone(),
            code_host: deps.code_host.clone(),
            clock: deps.clock.clone(),
            allowlist: settings.repositories.clone(),
            resolver: deps.resolver.clone(),
            budgets: budgets.clone(),
            scan: settings.pipeline.scan.clone(),
            slots: pool.0,
            timeout: pool.1,
            running: Arc::new(Mutex::new(HashSet::new())),
            background: background.clone(),
            stop: stop.clone(),
        }
    }

    fn now(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// Stores a new batch and lists it as active, or nothing
    /// ([`super::records::create_listed`]); `false` when one with this id exists (the same
    /// idempotency key was used before), which is listed as active again unless it ended: the
    /// earlier try may have failed to list it.
    pub(super) async fn create(&self, batch: &BatchRecord) -> Result<bool, ServiceError> {
        let body = serde_json::to_string(batch)
            .map_err(|e| ServiceError::Unavailable(format!("encode scan batch: {e}")))?;
        let id = &batch.id;
        let keyed = super::submission::named_by_key(id);
        let created = create_listed(
            &self.documents,
            (&batch_key(id), &body),
            (ACTIVE, id),
            keyed,
        )
        .await
        .map_err(unavailable)?;
        if created.is_some() {
            return Ok(true);
        }
        if !self.load(id).await?.state.is_terminal() {
            self.documents
                .set_add(ACTIVE, id)
                .await
                .map_err(unavailable)?;
        }
        Ok(false)
    }

    async fn read(&self, id: &str) -> Result<(u64, BatchRecord), ServiceError> {
        let stored = self
            .documents
            .get(&batch_key(id))
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ServiceError::NoSuchBatch(id.to_owned()))?;
        let batch = serde_json::from_str(&stored.body).map_err(|e| {
            ServiceError::Unavailable(format!("scan batch {id} record is unreadable: {e}"))
        })?;
        Ok((stored.version, batch))
    }

    pub(super) async fn load(&self, id: &str) -> Result<BatchRecord, ServiceError> {
        self.read(id).await.map(|(_, b)| b)
    }

    /// Loads, changes and stores the batch with compare-and-set, retrying on conflict; nothing
    /// is written when `change` changes nothing. The stored batch.
    async fn update(
        &self,
        id: &str,
        change: impl Fn(&mut BatchRecord),
    ) -> Result<BatchRecord, ServiceError> {
        for _ in 0..MAX_TRIES {
            let (version, mut batch) = self.read(id).await?;
            let before = batch.clone();
            change(&mut batch);
            if batch == before {
                return Ok(batch);
            }
            let body = serde_json::to_string(&batch)
                .map_err(|e| ServiceError::Unavailable(format!("encode scan batch {id}: {e}")))?;
            if self
                .documents
                .put(&batch_key(id), &body, Some(version))
                .await
                .map_err(unavailable)?
                .is_some()
            {
                return Ok(batch);
            }
        }
        Err(ServiceError::Unavailable(format!(
            "scan batch {id} keeps changing under concurrent updates"
        )))
    }

    /// The batch's document: its members' task states read now.
    pub(super) async fn document(&self, id: &str) -> Result<ScanBatchDocument, ServiceError> {
        let batch = self.load(id).await?;
        let (states, over_budget) = self.member_tasks(&batch).await?;
        let mut doc = scan_batch::document(&batch, &states);
        scan_batch::mark_over_budget(&mut doc, &over_budget);
        Ok(doc)
    }

    /// Each member's task state, `None` for a member whose task does not exist (yet).
    async fn member_states(
        &self,
        batch: &BatchRecord,
    ) -> Result<Vec<Option<TaskState>>, ServiceError> {
        self.member_tasks(batch).await.map(|(states, _)| states)
    }

    /// [`Batches::member_states`], and for each member the reason its task was refused by the
    /// budget, if it was.
    async fn member_tasks(
        &self,
        batch: &BatchRecord,
    ) -> Result<(Vec<Option<TaskState>>, Vec<Option<String>>), ServiceError> {
        let mut states = Vec::new();
        let mut over_budget = Vec::new();
        for m in batch.members.iter().flatten() {
            if !m.created {
                states.push(None);
                over_budget.push(None);
                continue;
            }
            match self.records.load(&m.task_id).await {
                Ok(task) => {
                    states.push(Some(task.state));
                    over_budget.push(
                        (task.failure_kind == Some(FailureKind::BudgetExceeded))
                            .then(|| task.reason.clone().unwrap_or_default()),
                    );
                }
                Err(ServiceError::NotFound(_)) => {
                    states.push(None);
                    over_budget.push(None);
                }
                Err(e) => return Err(e),
            }
        }
        Ok((states, over_budget))
    }

    /// Drives batch `id` in the background unless this process already does. `force`: even
    /// while another replica's lease is live (an explicit resume; safe, since creating a member
    /// twice names one task).
    pub(super) fn spawn(&self, scheduler: &Scheduler, id: &str, force: bool) {
        let guard = {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            if !running.insert(id.to_owned()) {
                return;
            }
            Driving {
                running: self.running.clone(),
                id: id.to_owned(),
            }
        };
        let this = self.clone();
        let scheduler = scheduler.clone();
        self.background.spawn(async move {
            if let Err(e) = this.drive(&scheduler, &guard.id, force).await {
                tracing::warn!(batch = %guard.id, error = %e, "scan batch not driven on; the batch pass retries");
            }
            drop(guard);
        });
    }

    /// Takes the batch's lease, enumerates it if needed, creates the members' tasks, gives the
    /// lease back.
    async fn drive(
        &self,
        scheduler: &Scheduler,
        id: &str,
        force: bool,
    ) -> Result<(), ServiceError> {
        let now = self.now();
        let until = now.saturating_add(self.timeout_ms());
        let lease_held = |b: &BatchRecord| b.driver_until_unix_ms.is_some_and(|t| t > now);
        let batch = self
            .update(id, |b| {
                if !b.state.is_terminal() && (force || !lease_held(b)) {
                    b.driver_until_unix_ms = Some(until);
                }
            })
            .await?;
        if batch.state.is_terminal() || batch.driver_until_unix_ms != Some(until) {
            return Ok(());
        }
        let outcome = self.drive_leased(scheduler, id, batch).await;
        // The lease given back whatever happened, so the batch pass (or a resume) goes on.
        self.update(id, |b| {
            if b.driver_until_unix_ms == Some(until) {
                b.driver_until_unix_ms = None;
            }
        })
        .await?;
        outcome
    }

    async fn drive_leased(
        &self,
        scheduler: &Scheduler,
        id: &str,
        mut batch: BatchRecord,
    ) -> Result<(), ServiceError> {
        if batch.members.is_none() {
            let listed = {
                let permit = tokio::select! {
                    () = self.stop.cancelled() => return Ok(()),
                    permit = tokio::time::timeout(self.timeout, self.slots.acquire()) => permit,
                };
                match permit {
                    Ok(Ok(_permit)) => tokio::select! {
                        () = self.stop.cancelled() => return Ok(()),
                        listed = tokio::time::timeout(self.timeout, self.enumerate(&batch)) => {
                            listed.unwrap_or_else(|_| Err(Enumeration::Transient(format!(
                                "listing the repositories took longer than {} s",
                                self.timeout.as_secs()
                            ))))
                        }
                    },
                    Ok(Err(_)) | Err(_) => Err(Enumeration::Transient(
                        "no intake slot came free in time".to_owned(),
                    )),
                }
            };
            let now = self.now();
            batch = match listed {
                Ok((members, skipped, estimate)) => {
                    self.update(id, |b| {
                        if b.members.is_none() {
                            b.members = Some(members.clone());
                            b.skipped = skipped.clone();
                            b.state = BatchState::Running;
                            b.reason = None;
                            b.estimate = estimate;
                        }
                    })
                    .await?
                }
                Err(Enumeration::OverBudget(reason, estimate)) => {
                    self.update(id, |b| {
                        if b.members.is_none() {
                            b.state = BatchState::Refused;
                            b.reason = Some(reason.clone());
                            b.estimate = Some(estimate);
                            b.finished_unix_ms = Some(now);
                        }
                    })
                    .await?;
                    tracing::info!(batch = %id, %reason, "scan batch refused");
                    self.documents
                        .set_remove(ACTIVE, id)
                        .await
                        .map_err(unavailable)?;
                    return Ok(());
                }
                Err(Enumeration::Final(reason)) => {
                    self.update(id, |b| {
                        if b.members.is_none() {
                            b.state = BatchState::Failed;
                            b.reason = Some(reason.clone());
                            b.finished_unix_ms = Some(now);
                        }
                    })
                    .await?;
                    self.documents
                        .set_remove(ACTIVE, id)
                        .await
                        .map_err(unavailable)?;
                    return Ok(());
                }
                Err(Enumeration::Transient(reason)) => {
                    self.update(id, |b| b.reason = Some(reason.clone())).await?;
                    return Err(ServiceError::Unavailable(reason));
                }
            };
        }
        let pending: Vec<Member> = batch
            .members
            .iter()
            .flatten()
            .filter(|m| !m.created && m.refused.is_none())
            .cloned()
            .collect();
        for member in pending {
            if self.stop.is_cancelled() {
                return Ok(());
            }
            let mut options = batch.options.clone();
            options.priority = Some(Priority::Bulk);
            options.idempotency_key = Some(member.key.clone());
            if let BatchSource::Organisation { name, .. } = &batch.source {
                options.organisation = Some(name.clone());
            }
            let submission = ScanSubmission {
                repository: member.clone_url.clone(),
                revision: member.revision.clone(),
                options,
            };
            let answer = loop {
                match scheduler.submit_scan(submission.clone()).await {
                    // Intake is full: the batch waits for room like any client, member by
                    // member, instead of failing or flooding the backlog.
                    Err(ServiceError::Busy {
                        retry_after_secs, ..
                    }) => {
                        let wait = Duration::from_secs(retry_after_secs);
                        tokio::select! {
                            () = self.stop.cancelled() => return Ok(()),
                            () = tokio::time::sleep(wait) => {}
                        }
                    }
                    answer => break answer,
                }
            };
            let (created, refused) = match answer {
                Ok(_) => (true, None),
                Err(ServiceError::Invalid(reason) | ServiceError::TooLarge(reason)) => {
                    (false, Some(reason))
                }
                Err(e) => {
                    let reason = format!("creating the scan of {}: {e}", member.repository);
                    self.update(id, |b| b.reason = Some(reason.clone())).await?;
                    return Err(e);
                }
            };
            self.update(id, |b| {
                if let Some(m) = b.members.iter_mut().flatten().find(|m| m.key == member.key) {
                    m.created = created;
                    m.refused.clone_from(&refused);
                }
            })
            .await?;
        }
        Ok(())
    }

    /// The batch's members, the repositories it leaves out with the reason for each, and its
    /// pre-flight estimate when its organisation has a budget.
    async fn enumerate(
        &self,
        batch: &BatchRecord,
    ) -> Result<(Vec<Member>, Vec<Skipped>, Option<Amount>), Enumeration> {
        let mut chosen: Vec<(String, String, String)> = Vec::new();
        let mut sizes_kib: HashMap<String, u64> = HashMap::new();
        let mut skipped = Vec::new();
        match &batch.source {
            BatchSource::Organisation { name, filters } => {
                let Some(code_host) = &self.code_host else {
                    return Err(Enumeration::Final(
                        "no code host is configured: set [github] to scan an organisation"
                            .to_owned(),
                    ));
                };
                let filter = RepositoryFilter::new(filters).map_err(Enumeration::Final)?;
                let repos =
                    code_host
                        .organisation_repositories(name)
                        .await
                        .map_err(|e| match e {
                            CodeHostError::RateLimited { .. }
                            | CodeHostError::Unavailable { .. } => {
                                Enumeration::Transient(e.to_string())
                            }
                            other => Enumeration::Final(other.to_string()),
                        })?;
                for repo in repos {
                    match filter.decide(&repo) {
                        Ok(()) => {
                            sizes_kib.insert(repo.clone_url.clone(), repo.size_kib);
                            chosen.push((
                                repo.full_name.clone(),
                                repo.clone_url.clone(),
                                batch
                                    .reference
                                    .clone()
                                    .unwrap_or_else(|| repo.default_branch.clone()),
                            ));
                        }
                        Err(reason) => skipped.push(Skipped {
                            repository: repo.full_name,
                            reason,
                        }),
                    }
                }
            }
            BatchSource::Manifest { entries } => {
                for e in entries {
                    let revision = e
                        .reference
                        .clone()
                        .or_else(|| batch.reference.clone())
                        .unwrap_or_else(|| "HEAD".to_owned());
                    chosen.push((e.repository.clone(), e.repository.clone(), revision));
                }
            }
        }
        // The allowlist (SPEC R4) decides before any task exists; submission checks again.
        let mut allowed = Vec::new();
        for (repository, url, revision) in chosen {
            match self.allowlist.check(&url, self.resolver.as_ref()).await {
                Ok(()) => allowed.push((repository, url, revision)),
                Err(refusal) if refusal.retryable => {
                    return Err(Enumeration::Transient(refusal.to_string()));
                }
                Err(refusal) => skipped.push(Skipped {
                    repository,
                    reason: format!("refused by the repository allowlist: {refusal}"),
                }),
            }
        }
        let estimate = self.preflight(batch, &allowed, &sizes_kib).await?;
        let members = scan_batch::members_of(&batch.id, allowed, id_for_key);
        Ok((members, skipped, estimate))
    }

    /// An organisation batch's estimate from the code host's repository sizes, judged against
    /// the organisation's budget before any member task exists (SPEC X5). A manifest's
    /// repositories have no size to go by: each member is judged at its own intake.
    async fn preflight(
        &self,
        batch: &BatchRecord,
        allowed: &[(String, String, String)],
        sizes_kib: &HashMap<String, u64>,
    ) -> Result<Option<Amount>, Enumeration> {
        let BatchSource::Organisation { name, .. } = &batch.source else {
            return Ok(None);
        };
        if self.budgets.settings().limit_of(name).is_none() {
            return Ok(None);
        }
        let estimate = allowed
            .iter()
            .map(|(_, url, _)| {
                let size = sizes_kib.get(url).copied().unwrap_or(0);
                self.budgets
                    .settings()
                    .estimate_repository(size, &self.scan)
            })
            .fold(Amount::default(), Amount::plus);
        let what = format!(
            "this scan of {} repositor{}",
            allowed.len(),
            if allowed.len() == 1 { "y" } else { "ies" }
        );
        match self.budgets.preflight(name, &what, estimate).await {
            Ok(()) => Ok(Some(estimate)),
            Err(Refusal::OverBudget(reason)) => Err(Enumeration::OverBudget(reason, estimate)),
            Err(Refusal::Unavailable(e)) => Err(Enumeration::Transient(format!(
                "the budget ledger did not answer: {e}"
            ))),
        }
    }

    /// One pass over the active batches: a finished one marked so and retired; one whose
    /// driver's lease lapsed with work left (not enumerated, members not created) driven on.
    pub(super) async fn sweep(&self, scheduler: &Scheduler) {
        let ids = match self.documents.set_members(ACTIVE).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "scan batches not swept: the store is unavailable");
                return;
            }
        };
        for id in ids {
            if self.stop.is_cancelled() {
                return;
            }
            if let Err(e) = self.sweep_one(scheduler, &id).await {
                tracing::warn!(batch = %id, error = %e, "scan batch not swept");
            }
        }
    }

    async fn sweep_one(&self, scheduler: &Scheduler, id: &str) -> Result<(), ServiceError> {
        let batch = match self.load(id).await {
            Ok(b) => b,
            Err(ServiceError::NoSuchBatch(_)) => {
                return self
                    .documents
                    .set_remove(ACTIVE, id)
                    .await
                    .map_err(unavailable);
            }
            Err(e) => return Err(e),
        };
        if batch.state.is_terminal() {
            return self
                .documents
                .set_remove(ACTIVE, id)
                .await
                .map_err(unavailable);
        }
        let lapsed = batch.driver_until_unix_ms.is_none_or(|t| t <= self.now());
        if batch.members.is_none() || batch.pending_members() > 0 {
            if lapsed {
                self.spawn(scheduler, id, false);
            }
            return Ok(());
        }
        let states = self.member_states(&batch).await?;
        if !scan_batch::is_finished(&batch, &states) {
            return Ok(());
        }
        let now = self.now();
        let finished = self
            .update(id, |b| {
                if b.state == BatchState::Running {
                    b.state = BatchState::Finished;
                    b.finished_unix_ms = Some(now);
                }
            })
            .await?;
        if finished.finished_unix_ms == Some(now) {
            // The report is built on demand from the members' documents (`verdict report
            // --scan ID`, `verdict scan --report DIR`), never stored: it cannot go stale and
            // costs nothing until someone asks for it (decision 158).
            tracing::info!(batch = %id, members = states.len(), "scan batch finished");
        }
        self.documents
            .set_remove(ACTIVE, id)
            .await
            .map_err(unavailable)
    }
}
