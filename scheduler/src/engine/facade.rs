//! The scheduler as the API and the CLI see it: [`TaskService`] for [`Scheduler`]. Submissions
//! are checked (their fields and sizes by [`submission`], their repository by the allowlist),
//! then become new records that intake picks up in the background; look-ups, event streams,
//! cancellation and readiness go to the part that owns each.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use tracing::Instrument;
use verdict_backends::BoxFuture;
use verdict_backends::broker::Broker;
use verdict_backends::clock::Clock;
use verdict_backends::store::{CancelSignals, StoredEvent, TranscriptStore};
use verdict_proto::transcript::Transcript;

use super::allowlist::{HostResolver, RepositoryAllowlist};
use super::budgets::Budgets;
use super::intake::Intake;
use super::pressure::Pressure;
use super::progress::Progress;
use super::records::TaskRecords;
use super::submission::{self, TaskDefaults};
use super::transition::Transitions;
use super::{Parts, Scheduler, SchedulerDeps, SchedulerSettings, unavailable};
use crate::metrics;
use crate::service::{ServiceError, TaskService};
use verdict_api::batch::ScanBatchDocument;
use verdict_api::document::{TaskDocument, TaskState};
use verdict_api::submission::{
    IssueAnalysisSubmission, Readiness, ReviewSubmission, ScanBatchSubmission, ScanSubmission,
    Submitted,
};
use verdict_policy::pipeline;
use verdict_policy::scan_batch::BatchRecord;
use verdict_policy::task::TaskRecord;

/// What the service calls use.
#[derive(Debug)]
pub(super) struct Service {
    defaults: TaskDefaults,
    records: TaskRecords,
    progress: Progress,
    transitions: Transitions,
    intake: Intake,
    cancels: Arc<dyn CancelSignals>,
    broker: Arc<dyn Broker>,
    clock: Arc<dyn Clock>,
    submitted: IntCounterVec,
    allowlist: RepositoryAllowlist,
    resolver: Arc<dyn HostResolver>,
    budgets: Budgets,
    transcripts: Arc<dyn TranscriptStore>,
    pressure: Pressure,
}

impl Service {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        parts: &Parts,
    ) -> Service {
        Service {
            defaults: TaskDefaults::new(settings),
            records: parts.records.clone(),
            budgets: parts.budgets.clone(),
            progress: parts.progress.clone(),
            transitions: parts.transitions.clone(),
            intake: parts.intake.clone(),
            cancels: deps.cancels.clone(),
            broker: deps.broker.clone(),
            clock: deps.clock.clone(),
            submitted: deps.metrics.submitted.clone(),
            allowlist: settings.repositories.clone(),
            resolver: deps.resolver.clone(),
            transcripts: deps.transcripts.clone(),
            pressure: parts.pressure.clone(),
        }
    }

    fn now(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    /// Checks the task's repository against the allowlist (SPEC R4), then stores it, opens its
    /// stream and starts its intake in the background; the new record names this replica's
    /// intake as its owner from now.
    /// A submission that can be made again later (`past_backlog` false) is refused before
    /// anything is written: as busy while this replica's intake backlog is full, as overloaded
    /// while a backend has no room (`pressure`). A webhook delivery, which GitHub does not send
    /// again, is taken anyway: its stages wait in the outbox while the pressure lasts.
    async fn admit(
        &self,
        mut task: TaskRecord,
        past_backlog: bool,
    ) -> Result<Submitted, ServiceError> {
        if !past_backlog {
            self.intake.check_backlog()?;
            self.pressure.check()?;
        }
        if let Some(repo) = &task.repository {
            self.allowlist
                .check(&repo.url, self.resolver.as_ref())
                .await
                .map_err(|refusal| {
                    if refusal.retryable {
                        ServiceError::Unavailable(refusal.to_string())
                    } else {
                        ServiceError::Invalid(refusal.to_string())
                    }
                })?;
        }
        task.created_unix_ms = self.now();
        task.own_intake(&self.intake.replica(), task.created_unix_ms);
        // The root of the task's trace, recorded when the task ends: every span of the task, in
        // any process, is its child through the context kept on the record.
        task.trace = verdict_backends::trace::open_task();
        let span = tracing::info_span!("admit", task_id = %task.id);
        verdict_backends::trace::set_parent(&span, &task.trace);
        match self.records.create(&task).instrument(span).await {
            Ok(()) => {}
            // Random ids do not collide: the id came from an idempotency key already used, and
            // the task that key made is the answer. An earlier try of this very submission may
            // have stored it and failed after: it is listed, and its intake started here if it
            // is this replica's and runs nowhere in it.
            Err(ServiceError::Conflict(_)) => {
                let existing = self.records.adopt(&task.id).await?;
                let ours = existing.intake_owner.as_deref() == Some(&*self.intake.replica());
                if existing.state == TaskState::Queued && ours {
                    self.intake.spawn(&task.id);
                }
                return Ok(Submitted { id: task.id });
            }
            Err(e) => return Err(e),
        }
        self.supersede_older_heads(&task).await;
        self.submitted
            .with_label_values(&[metrics::task_kind_label(task.pipeline)])
            .inc();
        self.progress
            .append(&task.id, &[submission::queued_event(&task)])
            .await;
        self.intake.spawn(&task.id);
        Ok(Submitted { id: task.id })
    }

    /// X1: a review of a newer head of a pull request aborts the running reviews of its older
    /// heads (reason `superseded`), so nothing stale is published. Best effort: a task missed
    /// here is still caught by the head check right before publishing.
    async fn supersede_older_heads(&self, task: &TaskRecord) {
        let Some((item, head)) = task
            .github
            .as_ref()
            .and_then(|g| Some((&g.item, g.head_sha.as_deref()?)))
        else {
            return;
        };
        let active = match self.records.active().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, task = %task.id, "older heads not superseded: the active index is unavailable");
                return;
            }
        };
        for id in active.iter().filter(|id| **id != task.id) {
            let Ok(other) = self.records.load(id).await else {
                continue;
            };
            let older = other.github.as_ref().is_some_and(|g| {
                &g.item == item && g.head_sha.as_deref().is_some_and(|h| h != head)
            });
            if !older || other.state.is_terminal() {
                continue;
            }
            let reason = format!(
                "superseded: {} #{} has a new head {} (task {})",
                item.repo,
                item.number,
                head.get(..12).unwrap_or(head),
                task.id
            );
            let now = self.now();
            let cancelled = self
                .transitions
                .apply(id, |t| pipeline::cancel(t, &reason, now))
                .await;
            match cancelled {
                Ok(_) => {
                    if let Err(e) = self.cancels.request_cancel(id).await {
                        tracing::warn!(error = %e, task = %id, "superseded task's stages not signalled");
                    }
                }
                Err(e) => tracing::warn!(error = %e, task = %id, "older head not superseded"),
            }
        }
    }

    async fn document(&self, task: &TaskRecord) -> Result<TaskDocument, ServiceError> {
        let mut doc = task.document(self.progress.all(&task.id).await?);
        doc.cost_usd = self.budgets.settings().cost_usd(task);
        Ok(doc)
    }

    async fn task(&self, id: &str) -> Result<TaskDocument, ServiceError> {
        let task = self.records.load(id).await?;
        self.document(&task).await
    }

    async fn cancel(&self, id: &str) -> Result<TaskDocument, ServiceError> {
        let current = self.records.load(id).await?;
        if current.state.is_terminal() {
            return Err(ServiceError::Conflict(format!(
                "task {id} already ended ({}); there is nothing to cancel",
                current.state.as_str()
            )));
        }
        let now = self.now();
        let task = self
            .transitions
            .apply(id, |t| pipeline::cancel(t, "cancelled on request", now))
            .await?;
        // Workers stop in-flight stages of the task.
        self.cancels.request_cancel(id).await.map_err(unavailable)?;
        self.document(&task).await
    }

    async fn events(
        &self,
        id: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<Vec<StoredEvent>, ServiceError> {
        // Existence check: an unknown task is a 404, not an empty stream. The wait is the
        // caller's: a terminal task's closing events may still be on their way (decision 45).
        self.records.load(id).await?;
        self.progress.after(id, after, wait).await
    }

    async fn transcripts(
        &self,
        id: &str,
        stage: Option<&str>,
    ) -> Result<Vec<Transcript>, ServiceError> {
        // An unknown task is a 404, and so is a stage the task does not have; a stage that has
        // not run yet (or whose transcripts expired) has none.
        let task = self.records.load(id).await?;
        if let Some(stage) = stage
            && !task.stages.iter().any(|s| s.id == stage)
        {
            let stages: Vec<&str> = task.stages.iter().map(|s| s.id.as_str()).collect();
            return Err(ServiceError::NoSuchStage {
                task: id.to_owned(),
                stage: stage.to_owned(),
                stages: if stages.is_empty() {
                    "none yet".to_owned()
                } else {
                    stages.join(", ")
                },
            });
        }
        let mut transcripts = self
            .transcripts
            .of_task(id)
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        if let Some(stage) = stage {
            transcripts.retain(|t| t.stage_id == stage);
        }
        Ok(transcripts)
    }

    async fn readiness(&self) -> Readiness {
        let mut problems = Vec::new();
        if !self.broker.health().connected {
            problems.push("broker not connected".to_owned());
        }
        if let Err(e) = self.records.probe().await {
            problems.push(format!("state store: {e}"));
        }
        Readiness {
            ready: problems.is_empty(),
            problems,
        }
    }
}

impl TaskService for Scheduler {
    fn submit_review(&self, s: ReviewSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        let service = self.service();
        Box::pin(async move {
            let past_backlog = s.options.past_backlog;
            let task = service.defaults.review(s, service.now())?;
            service.admit(task, past_backlog).await
        })
    }

    fn submit_issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        let service = self.service();
        Box::pin(async move {
            let past_backlog = s.options.past_backlog;
            let task = service.defaults.issue_analysis(s, service.now())?;
            service.admit(task, past_backlog).await
        })
    }

    fn submit_scan(&self, s: ScanSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        let service = self.service();
        Box::pin(async move {
            let past_backlog = s.options.past_backlog;
            let task = service.defaults.scan(s, service.now())?;
            service.admit(task, past_backlog).await
        })
    }

    fn submit_scan_batch(
        &self,
        mut s: ScanBatchSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            let key = s.options.idempotency_key.take();
            if key
                .as_ref()
                .is_some_and(|k| k.trim().is_empty() || k.len() > 256)
            {
                return Err(ServiceError::Invalid(
                    "options.idempotency_key must be 1 to 256 characters".into(),
                ));
            }
            let id = key.map_or_else(submission::new_id, |k| {
                submission::id_for_key(&format!("scan-batch:{k}"))
            });
            // The member tasks' own options are checked as any scan's, before anything is
            // stored: a bad language or timeout refuses the batch, not each member later.
            let probe = ScanSubmission {
                repository: "batch".to_owned(),
                revision: "HEAD".to_owned(),
                options: s.options.clone(),
            };
            self.service().defaults.scan(probe, self.service().now())?;
            let batch = BatchRecord::new(id.clone(), s, self.service().now())
                .map_err(ServiceError::Invalid)?;
            if self.batches().create(&batch).await? {
                self.batches().spawn(self, &id, false);
            }
            Ok(Submitted { id })
        })
    }

    fn scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ScanBatchDocument, ServiceError>> {
        Box::pin(self.batches().document(id))
    }

    fn resume_scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ScanBatchDocument, ServiceError>> {
        Box::pin(async move {
            let batch = self.batches().load(id).await?;
            if !batch.state.is_terminal() {
                self.batches().spawn(self, id, true);
            }
            self.batches().document(id).await
        })
    }

    fn task<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(self.service().task(id))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(self.service().cancel(id))
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, ServiceError>> {
        Box::pin(self.service().events(id, after, wait))
    }

    fn transcripts<'a>(
        &'a self,
        id: &'a str,
        stage: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, ServiceError>> {
        Box::pin(self.service().transcripts(id, stage))
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(self.service().readiness())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use verdict_backends::store::CancelSignals as _;
    use verdict_backends::store::memory::MemoryStore;
    use verdict_proto::wire::EventType;

    use super::*;
    use crate::engine::fixture::{Fixture, Outages, REPO, Unreachable};
    use verdict_api::document::TaskState;
    use verdict_api::submission::SubmissionOptions;

    fn scheduler(fx: &Fixture) -> Scheduler {
        Scheduler::new(fx.deps.clone(), fx.settings.clone())
    }

    fn scan() -> ScanSubmission {
        ScanSubmission {
            repository: REPO.to_owned(),
            revision: "v1".to_owned(),
            options: SubmissionOptions::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_submission_is_stored_announced_counted_and_taken_in() {
        let fx = Fixture::new();
        let scheduler = scheduler(&fx);

        let submitted = scheduler.submit_scan(scan()).await.unwrap();
        scheduler.inner.background.close();
        scheduler.inner.background.wait().await;

        let doc = scheduler.task(&submitted.id).await.unwrap();
        assert_eq!(doc.state, TaskState::Running);
        let kinds: Vec<EventType> = doc.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventType::TaskQueued,
                EventType::TaskStarted,
                EventType::StageStarted
            ]
        );
        let submitted = fx.metrics().submitted.with_label_values(&["scan"]);
        assert_eq!(submitted.get(), 1);
    }

    /// Issue 34: a submission refused half-way (its record stored, the active-task index not
    /// written) is answered, when made again with its idempotency key, with the same task,
    /// listed as active and taken in.
    #[tokio::test(start_paused = true)]
    async fn a_keyed_submission_refused_half_way_is_taken_in_when_made_again() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        let scheduler = scheduler(&fx);
        outages
            .refused_adds
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let mut submission = scan();
        submission.options.idempotency_key = Some("nightly".to_owned());

        let refused = scheduler.submit_scan(submission.clone()).await.unwrap_err();
        assert!(
            matches!(refused, ServiceError::Unavailable(_)),
            "{refused:?}"
        );
        let submitted = scheduler.submit_scan(submission).await.unwrap();
        scheduler.inner.background.close();
        scheduler.inner.background.wait().await;

        let doc = scheduler.task(&submitted.id).await.unwrap();
        assert_eq!(doc.state, TaskState::Running);
        assert_eq!(fx.parts.records.active().await.unwrap(), [submitted.id]);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_twice_is_a_conflict_and_unknown_tasks_are_not_found() {
        let fx = Fixture::new();
        let scheduler = scheduler(&fx);
        let task = fx.queued_scan().await;

        let doc = scheduler.cancel(&task.id).await.unwrap();
        assert_eq!(doc.state, TaskState::Aborted);
        assert!(fx.store.is_cancelled(&task.id).await.unwrap());
        assert_eq!(
            scheduler.cancel(&task.id).await.unwrap_err(),
            ServiceError::Conflict(format!(
                "task {} already ended (aborted); there is nothing to cancel",
                task.id
            ))
        );
        assert_eq!(
            scheduler.events("nope", None, Duration::ZERO).await,
            Err(ServiceError::NotFound("nope".to_owned()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_names_each_backend_that_is_down() {
        let fx = Fixture::with_documents(Arc::new(Unreachable), Arc::new(MemoryStore::new()));
        fx.broker.shutdown(std::time::Duration::ZERO).await;

        let readiness = scheduler(&fx).readiness().await;

        assert!(!readiness.ready);
        assert_eq!(
            readiness.problems,
            [
                "broker not connected",
                "state store: state store unavailable: connection refused"
            ]
        );
    }
}
