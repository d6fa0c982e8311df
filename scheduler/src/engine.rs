//! The scheduler engine: task intake, the results loop and the sweeper around the pure pipeline
//! ([`crate::pipeline`]), on the broker and store traits.
//!
//! Every change to a task is a compare-and-set of its whole record (`DocumentStore::put` with the
//! version read), so several replicas can consume results at once without double-advancing a
//! task. Stages are written as `planned` in the same update that decides them (an outbox), then
//! published and marked `dispatched`; a replica that crashes in between leaves them `planned`,
//! and the sweeper of any replica publishes them again (workers deduplicate, SPEC E7).

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_backends::BoxFuture;
use verdict_backends::broker::{Broker, Delivery, Message, Route};
use verdict_backends::clock::Clock;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::InputStore;
use verdict_backends::store::{CancelSignals, DocumentStore, EventLog, StoreError, StoredEvent};
use verdict_proto::Language;
use verdict_proto::wire::{
    self, EventType, Priority, ProgressEvent, RepositoryRef, StageResult, WIRE_VERSION,
};

use crate::document::{TaskDocument, TaskState};
use crate::intake;
use crate::metrics::SchedulerMetrics;
use crate::pipeline::{self, Effects, PipelineSettings};
use crate::service::{
    IssueAnalysisSubmission, Readiness, ReviewSubmission, ScanSubmission, ServiceError,
    SubmissionOptions, Submitted, TaskService,
};
use crate::task::{PipelineKind, StageStatus, TaskInputs, TaskRecord};

/// The set of task ids that are not terminal.
const ACTIVE: &str = "tasks:active";

fn task_key(id: &str) -> String {
    format!("task:{id}")
}

/// The backends a scheduler talks to.
#[derive(Debug, Clone)]
pub struct SchedulerDeps {
    pub broker: Arc<dyn Broker>,
    pub documents: Arc<dyn DocumentStore>,
    pub events: Arc<dyn EventLog>,
    pub cancels: Arc<dyn CancelSignals>,
    pub inputs: Arc<dyn InputStore>,
    pub repositories: Arc<dyn RepositorySource>,
    pub clock: Arc<dyn Clock>,
    pub metrics: SchedulerMetrics,
}

/// What the scheduler decides with.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    /// Copied into every task at submission.
    pub pipeline: PipelineSettings,
    pub review_timeout: Duration,
    pub language: Language,
    /// Largest stage-result message accepted from the queue.
    pub message_max_bytes: usize,
    /// How often the sweeper looks for stalled tasks.
    pub sweep_interval: Duration,
    /// A stage still `planned` (or a task still `queued`) this long after being written is
    /// taken over by the sweeper.
    pub stall_after: Duration,
}

/// The scheduler; cheap to clone (everything inside is shared).
#[derive(Debug, Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    deps: SchedulerDeps,
    settings: SchedulerSettings,
    background: TaskTracker,
}

impl Scheduler {
    pub fn new(deps: SchedulerDeps, settings: SchedulerSettings) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                deps,
                settings,
                background: TaskTracker::new(),
            }),
        }
    }

    fn deps(&self) -> &SchedulerDeps {
        &self.inner.deps
    }

    fn now(&self) -> u64 {
        self.deps().clock.now_unix_ms()
    }

    /// Consumes stage results and sweeps until `shutdown`; then waits for intake jobs it started.
    pub async fn run(
        &self,
        shutdown: CancellationToken,
    ) -> Result<(), verdict_backends::broker::BrokerError> {
        let mut results = self.deps().broker.consume(Route::Results, 32).await?;
        let mut sweep = tokio::time::interval(self.inner.settings.sweep_interval);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                delivery = results.next() => match delivery {
                    Some(d) => {
                        let this = self.clone();
                        self.inner.background.spawn(async move { this.handle_result(d).await });
                    }
                    None => break,
                },
                _ = sweep.tick() => self.sweep().await,
            }
        }
        self.inner.background.close();
        self.inner.background.wait().await;
        Ok(())
    }

    /// Applies one stage result; acknowledges only once the task record holds it.
    async fn handle_result(&self, delivery: Delivery) {
        let result = match wire::decode::<StageResult>(
            &delivery.message.body,
            self.inner.settings.message_max_bytes,
        ) {
            Ok(r) => r,
            Err(e) => {
                self.deps()
                    .metrics
                    .dead_letters
                    .with_label_values(&["results"])
                    .inc();
                tracing::warn!(error = %e, "dead-lettering a poison stage result");
                if self
                    .deps()
                    .broker
                    .dead_letter(&delivery.message, &e.to_string())
                    .await
                    .is_ok()
                {
                    let _ = delivery.acker.ack().await;
                }
                return;
            }
        };
        let now = self.now();
        let outcome = result.outcome.label();
        let stage = result.stage.as_str();
        match self
            .transition(&result.task_id, |t| pipeline::on_result(t, &result, now))
            .await
        {
            Ok(_) => {
                self.deps()
                    .metrics
                    .results
                    .with_label_values(&[stage, outcome])
                    .inc();
                let _ = delivery.acker.ack().await;
            }
            Err(ServiceError::NotFound(id)) => {
                let reason = format!("stage result for unknown task {id}");
                if self
                    .deps()
                    .broker
                    .dead_letter(&delivery.message, &reason)
                    .await
                    .is_ok()
                {
                    let _ = delivery.acker.ack().await;
                }
            }
            Err(e) => {
                // The record could not be updated: give the result back for a later try.
                tracing::warn!(error = %e, task = %result.task_id, "stage result not applied; requeueing");
                tokio::time::sleep(Duration::from_millis(500)).await;
                let _ = delivery.acker.requeue().await;
            }
        }
    }

    /// Loads, changes and stores a task with compare-and-set, retrying on conflict; then emits
    /// the transition's events and publishes its planned stages.
    async fn transition(
        &self,
        id: &str,
        change: impl Fn(&mut TaskRecord) -> Effects,
    ) -> Result<TaskRecord, ServiceError> {
        let (task, fx, was_terminal) = self.update(id, change).await?;
        self.after(&task, &fx, was_terminal).await;
        Ok(task)
    }

    /// The compare-and-set loop alone: returns the stored task, the effects of the change that
    /// won, and whether the task was already terminal before it. Nothing is written when the
    /// change changes nothing.
    async fn update(
        &self,
        id: &str,
        change: impl Fn(&mut TaskRecord) -> Effects,
    ) -> Result<(TaskRecord, Effects, bool), ServiceError> {
        let key = task_key(id);
        for _ in 0..64 {
            let stored = self
                .deps()
                .documents
                .get(&key)
                .await
                .map_err(unavailable)?
                .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
            let mut task: TaskRecord = serde_json::from_str(&stored.body).map_err(|e| {
                ServiceError::Unavailable(format!("task {id} record is unreadable: {e}"))
            })?;
            let was_terminal = task.state.is_terminal();
            let before = task.clone();
            let fx = change(&mut task);
            if task == before && fx.events.is_empty() && fx.planned.is_empty() {
                return Ok((task, fx, was_terminal));
            }
            let body = serde_json::to_string(&task)
                .map_err(|e| ServiceError::Unavailable(format!("encode task {id}: {e}")))?;
            match self
                .deps()
                .documents
                .put(&key, &body, Some(stored.version))
                .await
                .map_err(unavailable)?
            {
                Some(_) => return Ok((task, fx, was_terminal)),
                None => self.deps().metrics.conflicts.inc(),
            }
        }
        Err(ServiceError::Unavailable(format!(
            "task {id} keeps changing under concurrent updates"
        )))
    }

    /// The side effects of a stored transition, in order: events, terminal bookkeeping, then
    /// publication of the planned stages (so a fallback event precedes the next stage).
    async fn after(&self, task: &TaskRecord, fx: &Effects, was_terminal: bool) {
        let now = self.now();
        for draft in &fx.events {
            if draft.kind == EventType::TriageFallback {
                self.deps().metrics.triage_fallbacks.inc();
            }
            let event = ProgressEvent {
                version: WIRE_VERSION,
                task_id: task.id.clone(),
                at_unix_ms: now,
                kind: draft.kind,
                channel: None,
                stage_id: draft.stage_id.clone(),
                message: draft.message.clone(),
                data: draft.data.clone(),
            };
            if let Err(e) = self.deps().events.append(&event).await {
                tracing::warn!(error = %e, task = %task.id, "progress event not recorded");
            }
        }
        if task.state.is_terminal() && !was_terminal {
            let kind = kind_label(task.pipeline);
            self.deps()
                .metrics
                .finished
                .with_label_values(&[kind, task.state.as_str()])
                .inc();
            if let Err(e) = self.deps().documents.set_remove(ACTIVE, &task.id).await {
                tracing::warn!(error = %e, "active-task index not updated");
            }
            tracing::info!(task = %task.id, state = task.state.as_str(), "task finished");
        }
        if !fx.planned.is_empty() {
            self.dispatch(&task.id, &fx.planned).await;
        }
    }

    /// Publishes planned stages and marks them dispatched. A failure leaves them planned for the
    /// sweeper.
    async fn dispatch(&self, task_id: &str, stage_ids: &[String]) {
        let Ok(Some(stored)) = self.deps().documents.get(&task_key(task_id)).await else {
            return;
        };
        let Ok(task) = serde_json::from_str::<TaskRecord>(&stored.body) else {
            return;
        };
        if task.state.is_terminal() {
            return;
        }
        let mut published = Vec::new();
        for id in stage_ids {
            let Some(stage) = task.stage(id) else {
                continue;
            };
            if stage.status != StageStatus::Planned {
                continue;
            }
            let body = match wire::encode(&stage.request) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %e, "stage request not encodable");
                    continue;
                }
            };
            let mut message = Message {
                body,
                headers: Default::default(),
            };
            message
                .headers
                .insert("x-verdict-task".into(), task.id.clone());
            message.headers.insert("x-verdict-stage".into(), id.clone());
            verdict_backends::trace::inject(&mut message.headers);
            match self
                .deps()
                .broker
                .publish(Route::Stages(stage.request.priority), &message)
                .await
            {
                Ok(()) => {
                    self.deps()
                        .metrics
                        .dispatches
                        .with_label_values(&[stage.kind.as_str()])
                        .inc();
                    published.push(id.clone());
                }
                Err(e) => {
                    tracing::warn!(error = %e, task = %task.id, stage = %id, "stage not published; the sweeper will retry")
                }
            }
        }
        if published.is_empty() {
            return;
        }
        let _ = self
            .update(task_id, |t| {
                for id in &published {
                    if let Some(s) = t.stage_mut(id)
                        && s.status == StageStatus::Planned
                    {
                        s.status = StageStatus::Dispatched;
                    }
                }
                Effects::default()
            })
            .await;
    }

    /// Restarts what a crashed replica left: queued tasks whose intake never finished, planned
    /// stages never published.
    async fn sweep(&self) {
        let ids = match self.deps().documents.set_members(ACTIVE).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "sweep skipped");
                return;
            }
        };
        self.deps()
            .metrics
            .active
            .set(i64::try_from(ids.len()).unwrap_or(i64::MAX));
        let stall = u64::try_from(self.inner.settings.stall_after.as_millis()).unwrap_or(u64::MAX);
        let now = self.now();
        for id in ids {
            let Ok(Some(stored)) = self.deps().documents.get(&task_key(&id)).await else {
                continue;
            };
            let Ok(task) = serde_json::from_str::<TaskRecord>(&stored.body) else {
                continue;
            };
            if task.state.is_terminal() {
                let _ = self.deps().documents.set_remove(ACTIVE, &id).await;
                continue;
            }
            if task.state == TaskState::Queued && now.saturating_sub(task.created_unix_ms) > stall {
                self.intake(&id).await;
                continue;
            }
            let stalled: Vec<String> = task
                .stages
                .iter()
                .filter(|s| {
                    s.status == StageStatus::Planned
                        && now.saturating_sub(s.planned_unix_ms) > stall
                })
                .map(|s| s.id.clone())
                .collect();
            if !stalled.is_empty() {
                self.dispatch(&id, &stalled).await;
            }
        }
    }

    /// Prepares a queued task's inputs (for reviews: the change and its diff) and starts it.
    async fn intake(&self, id: &str) {
        let Ok(Some(stored)) = self.deps().documents.get(&task_key(id)).await else {
            return;
        };
        let Ok(task) = serde_json::from_str::<TaskRecord>(&stored.body) else {
            return;
        };
        if task.state != TaskState::Queued {
            return;
        }
        let prepared = match task.pipeline {
            PipelineKind::Multi | PipelineKind::Single => {
                self.prepare_review(&task).await.map(Some)
            }
            // Issue analyses and scans use the repository as given; the snapshot resolves the
            // revision when a stage needs it.
            PipelineKind::IssueAnalysis | PipelineKind::Scan => {
                Ok(task.repository.clone().map(|repo| (repo, None)))
            }
        };
        let now = self.now();
        let outcome = match prepared {
            Ok(prep) => {
                self.transition(id, |t| {
                    if let Some((repo, diff)) = prep.clone() {
                        t.repository = Some(repo);
                        if let Some(d) = diff {
                            t.inputs.diff_files = d.files;
                            t.inputs.diffstat = Some(d.diffstat);
                            t.coverage = d.coverage;
                        }
                    }
                    pipeline::start(t, now)
                })
                .await
            }
            Err(reason) => {
                self.transition(id, |t| pipeline::fail_intake(t, reason.clone(), now))
                    .await
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, task = %id, "intake not recorded; the sweeper will retry");
        }
    }

    async fn prepare_review(
        &self,
        task: &TaskRecord,
    ) -> Result<(RepositoryRef, Option<intake::PreparedDiff>), String> {
        let Some(repo) = &task.repository else {
            return Err("the review names no repository".to_owned());
        };
        let base = repo.base.clone().unwrap_or_default();
        let cancel = CancellationToken::new();
        let change = self
            .deps()
            .repositories
            .change(&repo.url, &base, &repo.commit, &cancel)
            .await
            .map_err(|e| format!("cannot read the change {base}..{}: {e}", repo.commit))?;
        let prepared = intake::prepare(
            self.deps().inputs.as_ref(),
            &change.diff,
            task.settings.max_diff_bytes,
        )
        .await
        .map_err(|e| format!("cannot store the diff: {e}"))?;
        Ok((
            RepositoryRef {
                url: repo.url.clone(),
                commit: change.head,
                base: Some(change.base),
            },
            Some(prepared),
        ))
    }

    async fn create(&self, mut task: TaskRecord) -> Result<Submitted, ServiceError> {
        let id = task.id.clone();
        task.created_unix_ms = self.now();
        let body =
            serde_json::to_string(&task).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        if self
            .deps()
            .documents
            .put(&task_key(&id), &body, None)
            .await
            .map_err(unavailable)?
            .is_none()
        {
            return Err(ServiceError::Conflict(format!("task {id} already exists")));
        }
        self.deps()
            .documents
            .set_add(ACTIVE, &id)
            .await
            .map_err(unavailable)?;
        self.deps()
            .metrics
            .submitted
            .with_label_values(&[kind_label(task.pipeline)])
            .inc();
        let queued = ProgressEvent {
            version: WIRE_VERSION,
            task_id: id.clone(),
            at_unix_ms: self.now(),
            kind: EventType::TaskQueued,
            channel: None,
            stage_id: None,
            message: task
                .language
                .pick("Task queued.", "任务已排队。")
                .to_owned(),
            data: serde_json::json!({"pipeline": task.pipeline.as_str()}),
        };
        if let Err(e) = self.deps().events.append(&queued).await {
            tracing::warn!(error = %e, "progress event not recorded");
        }
        let this = self.clone();
        let task_id = id.clone();
        self.inner
            .background
            .spawn(async move { this.intake(&task_id).await });
        Ok(Submitted { id })
    }

    fn new_task(
        &self,
        pipeline: PipelineKind,
        repository: Option<RepositoryRef>,
        inputs: TaskInputs,
        options: &SubmissionOptions,
        default_priority: Priority,
    ) -> Result<TaskRecord, ServiceError> {
        let language = match options.language.as_deref() {
            Some(l) => Language::normalise(l),
            None => self.inner.settings.language,
        };
        let timeout = options
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(self.inner.settings.review_timeout);
        if timeout.is_zero() {
            return Err(ServiceError::Invalid(
                "options.timeout_seconds must be greater than 0".into(),
            ));
        }
        let mut settings = self.inner.settings.pipeline.clone();
        if let Some(n) = options.reviewers {
            if n == 0 || usize::from(n) > pipeline::MAX_REVIEWERS {
                return Err(ServiceError::Invalid(format!(
                    "options.reviewers must be between 1 and {}",
                    pipeline::MAX_REVIEWERS
                )));
            }
            settings.reviewers = n;
        }
        let now = self.now();
        Ok(TaskRecord {
            id: new_id(),
            pipeline,
            state: TaskState::Queued,
            reason: None,
            language,
            priority: options.priority.unwrap_or(default_priority),
            repository,
            inputs,
            settings,
            stages: Vec::new(),
            result: None,
            coverage: Default::default(),
            created_unix_ms: now,
            started_unix_ms: None,
            finished_unix_ms: None,
            deadline_unix_ms: now
                .saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            triage_fallback: false,
        })
    }

    async fn load(&self, id: &str) -> Result<TaskRecord, ServiceError> {
        let stored = self
            .deps()
            .documents
            .get(&task_key(id))
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
        serde_json::from_str(&stored.body)
            .map_err(|e| ServiceError::Unavailable(format!("task {id} record is unreadable: {e}")))
    }

    async fn document(&self, task: &TaskRecord) -> Result<TaskDocument, ServiceError> {
        let mut events = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let batch = self
                .deps()
                .events
                .read(&task.id, after.as_deref(), Duration::ZERO)
                .await
                .map_err(unavailable)?;
            if batch.is_empty() {
                break;
            }
            after = batch.last().map(|e| e.id.clone());
            events.extend(batch.into_iter().map(|e| e.event));
        }
        Ok(task.document(events))
    }
}

fn kind_label(p: PipelineKind) -> &'static str {
    match p {
        PipelineKind::Multi | PipelineKind::Single => "review",
        PipelineKind::IssueAnalysis => "issue-analysis",
        PipelineKind::Scan => "scan",
    }
}

fn unavailable(e: StoreError) -> ServiceError {
    ServiceError::Unavailable(e.to_string())
}

/// A random task id (UUID v4 text form).
pub fn new_id() -> String {
    let b: [u8; 16] = rand::rng().random();
    let mut b = b;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn required(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.trim().is_empty() {
        Err(ServiceError::Invalid(format!(
            "{field} is required and must not be empty"
        )))
    } else {
        Ok(())
    }
}

impl TaskService for Scheduler {
    fn submit_review(&self, s: ReviewSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            required("repository", &s.repository)?;
            required("base", &s.base)?;
            required("head", &s.head)?;
            let pipeline = match s.pipeline.as_deref() {
                None | Some("multi") => PipelineKind::Multi,
                Some("single") => PipelineKind::Single,
                Some(other) => {
                    return Err(ServiceError::Invalid(format!(
                        "pipeline `{other}` is unknown; use `multi` (staged review) or `single` (one agentic review)"
                    )));
                }
            };
            let repo = RepositoryRef {
                url: s.repository,
                commit: s.head,
                base: Some(s.base),
            };
            let inputs = TaskInputs {
                title: s.title,
                body: s.body,
                ..TaskInputs::default()
            };
            let task = self.new_task(
                pipeline,
                Some(repo),
                inputs,
                &s.options,
                Priority::Interactive,
            )?;
            self.create(task).await
        })
    }

    fn submit_issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            required("issue.title", &s.issue.title)?;
            let repo = s.repository.map(|url| RepositoryRef {
                url,
                commit: s.revision.clone().unwrap_or_else(|| "HEAD".to_owned()),
                base: None,
            });
            if let Some(r) = &repo
                && r.commit == "HEAD"
            {
                return Err(ServiceError::Invalid(
                    "revision is required with repository (a commit, branch or tag)".into(),
                ));
            }
            let inputs = TaskInputs {
                issue: Some(s.issue),
                ..TaskInputs::default()
            };
            let mut task = self.new_task(
                PipelineKind::IssueAnalysis,
                repo,
                inputs,
                &s.options,
                Priority::Interactive,
            )?;
            if let Some(c) = s.categories {
                if c.is_empty() || c.iter().any(|x| x.trim().is_empty()) {
                    return Err(ServiceError::Invalid(
                        "categories must be non-empty names".into(),
                    ));
                }
                task.settings.issue_categories = Some(c);
            }
            self.create(task).await
        })
    }

    fn submit_scan(&self, s: ScanSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            required("repository", &s.repository)?;
            required("revision", &s.revision)?;
            let repo = RepositoryRef {
                url: s.repository,
                commit: s.revision,
                base: None,
            };
            let task = self.new_task(
                PipelineKind::Scan,
                Some(repo),
                TaskInputs::default(),
                &s.options,
                Priority::Bulk,
            )?;
            self.create(task).await
        })
    }

    fn task<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(async move {
            let task = self.load(id).await?;
            self.document(&task).await
        })
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(async move {
            let current = self.load(id).await?;
            if current.state.is_terminal() {
                return Err(ServiceError::Conflict(format!(
                    "task {id} already ended ({}); there is nothing to cancel",
                    current.state.as_str()
                )));
            }
            let now = self.now();
            let task = self
                .transition(id, |t| pipeline::cancel(t, "cancelled on request", now))
                .await?;
            // Workers stop in-flight stages of the task.
            self.deps()
                .cancels
                .request_cancel(id)
                .await
                .map_err(unavailable)?;
            self.document(&task).await
        })
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, ServiceError>> {
        Box::pin(async move {
            // Existence check: an unknown task is a 404, not an empty stream. The wait is the
            // caller's: a terminal task's closing events may still be on their way.
            self.load(id).await?;
            self.deps()
                .events
                .read(id, after, wait)
                .await
                .map_err(unavailable)
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async move {
            let mut problems = Vec::new();
            let health = self.deps().broker.health();
            if !health.connected {
                problems.push("broker not connected".to_owned());
            }
            if let Err(e) = self.deps().documents.get("readiness-probe").await {
                problems.push(format!("state store: {e}"));
            }
            Readiness {
                ready: problems.is_empty(),
                problems,
            }
        })
    }
}
