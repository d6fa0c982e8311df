//! Publication: a finished task's outcome posted to its pull request or issue (SPEC G1–G3, X1,
//! X2), and a running task's commit status. What is posted is decided by the pure
//! [`verdict_policy::publication`]; this part does the I/O around it, in an order that makes every
//! attempt safe to repeat:
//!
//! 1. **Claim.** The record's publication is claimed for a lease with compare-and-set, so one
//!    replica publishes at a time; a replica that dies mid-way leaves the claim to expire and the
//!    sweeper of any replica tries again.
//! 2. **Already posted?** The task's marker on the pull request or issue means an earlier attempt
//!    posted and crashed before recording it: that post is the answer, nothing is posted again.
//! 3. **Plan**, from the stored result, the diff pieces and the fingerprints already posted on
//!    earlier heads (so a finding is never posted twice).
//! 4. **Still the head?** Right before posting, the pull request's head is read again; a newer
//!    head makes the result stale, and nothing is posted (X1).
//! 5. **Post.** A review GitHub refuses (422) has its inline comments checked one by one; those
//!    refused move into the body and the review is posted anyway.
//! 6. **Settle** the record: published, nothing, stale, failed, or pending again with a backoff
//!    for a failure worth retrying. Only a settled publication takes the task off the active
//!    index.
//!
//! The commit status follows the task: pending when it starts, its outcome when it ends. Status
//! failures are logged and never hold up the review.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus::IntCounterVec;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;
use verdict_backends::clock::Clock;
use verdict_backends::code_host::{CodeHost, CodeHostError};
use verdict_backends::store::InputStore;
use verdict_proto::issue_analysis::IssueAnalysis;
use verdict_proto::publication::{ItemKind, ItemRef, ReviewDraft};
use verdict_proto::wire::{EventType, InputContent};

use super::budgets::Budgets;
use super::progress::Progress;
use super::records::TaskRecords;
use super::{CodeHostSettings, SchedulerDeps};
use crate::metrics;
use verdict_api::document::TaskState;
use verdict_api::document::{PublicationRecord, PublicationState};
use verdict_policy::pipeline::{Draft, Effects};
use verdict_policy::publication::{
    self, ChangedFile, ReviewInput, ReviewPlan, ReviewPublication, labels_to_apply,
    plan_issue_comment,
};
use verdict_policy::result::ReviewResult;
use verdict_policy::task::{PipelineKind, TaskRecord};

/// How long a claim lasts: longer than one attempt can take (every host call has its own
/// timeout; an attempt makes at most a few dozen).
const LEASE: Duration = Duration::from_secs(300);

/// The longest one attempt may take: every host call has its own timeout, but a review with
/// many refused comments makes many calls; the rest of the lease is margin.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(240);

/// Attempts before a publication that keeps failing with retryable errors is given up.
const MAX_ATTEMPTS: u32 = 8;

/// The first retry's wait; each further one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(15);
const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// Publishes finished tasks; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Publication {
    code_host: Option<Arc<dyn CodeHost>>,
    settings: Option<CodeHostSettings>,
    records: TaskRecords,
    progress: Progress,
    inputs: Arc<dyn InputStore>,
    clock: Arc<dyn Clock>,
    background: TaskTracker,
    /// Cancelled when the scheduler stops: attempts in flight give their claims back.
    stop: CancellationToken,
    outcomes: IntCounterVec,
    budgets: Budgets,
}

/// How an attempt ended, when it ended the publication.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settled {
    Posted { url: String, detail: String },
    Nothing(String),
    Stale(String),
}

impl Publication {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: Option<CodeHostSettings>,
        records: &TaskRecords,
        progress: &Progress,
        budgets: &Budgets,
        background: &TaskTracker,
        stop: &CancellationToken,
    ) -> Publication {
        Publication {
            code_host: deps.code_host.clone(),
            settings,
            records: records.clone(),
            progress: progress.clone(),
            inputs: deps.inputs.clone(),
            clock: deps.clock.clone(),
            background: background.clone(),
            stop: stop.clone(),
            outcomes: deps.metrics.publications.clone(),
            budgets: budgets.clone(),
        }
    }

    /// Publishes task `id` in the background (the caller's loop never waits on the host).
    pub(super) fn spawn(&self, id: &str) {
        let (this, id) = (self.clone(), id.to_owned());
        self.background
            .spawn(async move { this.publish(&id).await });
    }

    /// Sets the pending status of a task to publish that just started, in the background, once;
    /// a failure is logged (the final status replaces it anyway).
    pub(super) fn spawn_started(&self, task: &TaskRecord) {
        let (Some(code_host), Some(settings)) = (self.code_host.clone(), self.settings.clone())
        else {
            return;
        };
        let Some((item, head)) = review_head(task) else {
            return;
        };
        let status =
            publication::status(&task.id, &head, task.state, None, None, &settings.publish);
        let id = task.id.clone();
        self.background.spawn(async move {
            if let Err(e) = code_host.set_status(&item.repo, &status).await {
                tracing::warn!(task = %id, error = %e, "pending commit status not set");
            }
        });
    }

    /// One attempt at publishing task `id`, if it is due and nobody else holds it.
    pub(super) async fn publish(&self, id: &str) {
        let now = self.clock.now_unix_ms();
        let lease_ms = u64::try_from(LEASE.as_millis()).unwrap_or(u64::MAX);
        let claimed = AtomicBool::new(false);
        let task = match self
            .records
            .update(id, |t| {
                claimed.store(claim(t, now, lease_ms), Ordering::Relaxed);
                Effects::default()
            })
            .await
        {
            Ok(updated) if claimed.load(Ordering::Relaxed) => updated.task,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(task = %id, error = %e, "publication not claimed; the sweeper retries");
                return;
            }
        };
        let kind = metrics::task_kind_label(task.pipeline);
        let span =
            tracing::info_span!("publish_result", task_id = %id, outcome = tracing::field::Empty);
        verdict_backends::trace::set_parent(&span, &task.trace);
        // An attempt ends well inside its lease, so no other replica starts while it runs; a
        // process shutting down gives its claim back for another replica to take at once.
        let attempt = tokio::select! {
            // A stopping process starts nothing new.
            biased;
            () = self.stop.cancelled() => {
                self.release(id).await;
                return;
            }
            attempt = tokio::time::timeout(ATTEMPT_TIMEOUT, self.attempt(&task).instrument(span.clone())) => match attempt {
                Ok(attempt) => attempt,
                Err(_) => Err(CodeHostError::Unavailable {
                    reason: format!(
                        "publishing took longer than {} s",
                        ATTEMPT_TIMEOUT.as_secs()
                    ),
                }),
            },
        };
        span.record("outcome", if attempt.is_ok() { "settled" } else { "error" });
        let now = self.clock.now_unix_ms();
        let (state, url, detail, retry_at) = match attempt {
            Ok(Settled::Posted { url, detail }) => {
                (PublicationState::Published, Some(url), detail, None)
            }
            Ok(Settled::Nothing(detail)) => (PublicationState::Nothing, None, detail, None),
            Ok(Settled::Stale(detail)) => (PublicationState::Stale, None, detail, None),
            Err(e) => {
                let attempts = task.publication.as_ref().map_or(1, |p| p.attempts);
                if e.retryable() && attempts < MAX_ATTEMPTS {
                    let wait = e.retry_after().unwrap_or_else(|| backoff(attempts));
                    let at =
                        now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                    (PublicationState::Pending, None, e.to_string(), Some(at))
                } else {
                    (PublicationState::Failed, None, e.to_string(), None)
                }
            }
        };
        let settled = self
            .records
            .update(id, |t| {
                if let Some(p) = &mut t.publication {
                    p.state = state;
                    p.url.clone_from(&url);
                    p.detail = Some(detail.clone());
                    p.claimed_until_unix_ms = 0;
                    p.not_before_unix_ms = retry_at.unwrap_or(0);
                }
                Effects::default()
            })
            .await;
        let settled = match settled {
            Ok(updated) => updated.task,
            Err(e) => {
                // The claim expires and the sweeper tries again; the marker keeps it from
                // posting twice.
                tracing::warn!(task = %id, error = %e, "publication outcome not recorded");
                return;
            }
        };
        self.outcomes
            .with_label_values(&[kind, outcome_label(state)])
            .inc();
        match state {
            PublicationState::Pending => {
                tracing::warn!(task = %id, error = %detail, "publication failed; it is retried");
                return;
            }
            PublicationState::Failed => {
                tracing::error!(task = %id, error = %detail, "publication failed");
            }
            _ => tracing::info!(task = %id, state = state.as_str(), "publication settled"),
        }
        if state == PublicationState::Published {
            let event = Draft {
                kind: EventType::Published,
                stage_id: None,
                message: task
                    .language
                    .pick(
                        &format!("Published: {}", url.as_deref().unwrap_or_default()),
                        &format!("已发布：{}", url.as_deref().unwrap_or_default()),
                    )
                    .to_owned(),
                data: json!({"url": url, "detail": detail}),
            };
            self.progress.append(id, &[event]).await;
        }
        // Left active when the budget is not settled: the sweeper settles it, then retires it.
        if self.budgets.settle(&settled).await
            && let Err(e) = self.records.retire(&settled).await
        {
            tracing::warn!(task = %id, error = %e, "active-task index not updated");
        }
    }

    /// Gives up this replica's claim on task `id`'s publication, so any replica's sweeper may
    /// start it again; the task's marker keeps a half-done attempt from posting twice.
    async fn release(&self, id: &str) {
        let released = self
            .records
            .update(id, |t| {
                if let Some(p) = &mut t.publication
                    && p.state == PublicationState::Pending
                {
                    p.claimed_until_unix_ms = 0;
                }
                Effects::default()
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(task = %id, error = %e, "publication claim not released; it lapses");
        }
    }

    /// What the task posts, by kind.
    async fn attempt(&self, task: &TaskRecord) -> Result<Settled, CodeHostError> {
        let (Some(code_host), Some(settings)) = (self.code_host.as_deref(), self.settings.as_ref())
        else {
            return Ok(Settled::Nothing(
                "this scheduler has no GitHub configured; nothing was posted".to_owned(),
            ));
        };
        match task.pipeline {
            PipelineKind::Multi | PipelineKind::Single => {
                self.review(code_host, settings, task).await
            }
            PipelineKind::IssueAnalysis => issue(code_host, settings, task).await,
            PipelineKind::Scan => Ok(Settled::Nothing("scans are not published".to_owned())),
        }
    }

    async fn review(
        &self,
        code_host: &dyn CodeHost,
        settings: &CodeHostSettings,
        task: &TaskRecord,
    ) -> Result<Settled, CodeHostError> {
        let Some((item, head)) = review_head(task) else {
            return Ok(Settled::Nothing(
                "the task never learnt its pull request's head; nothing was posted".to_owned(),
            ));
        };
        let result: Option<ReviewResult> = task
            .result
            .clone()
            .and_then(|v| serde_json::from_value(v).ok());
        let reason = task.reason.as_deref();
        let status = publication::status(
            &task.id,
            &head,
            task.state,
            result.as_ref(),
            reason,
            &settings.publish,
        );
        let settled = self
            .review_body(code_host, settings, task, &item, &head, result.as_ref())
            .await;
        // The final status even when nothing was posted (it says why); not when the review
        // could not be posted yet: a retry sets it then.
        if settled.is_ok()
            && let Err(e) = code_host.set_status(&item.repo, &status).await
        {
            tracing::warn!(task = %task.id, error = %e, "final commit status not set");
        }
        settled
    }

    async fn review_body(
        &self,
        code_host: &dyn CodeHost,
        settings: &CodeHostSettings,
        task: &TaskRecord,
        item: &ItemRef,
        head: &str,
        result: Option<&ReviewResult>,
    ) -> Result<Settled, CodeHostError> {
        if !matches!(
            task.state,
            TaskState::Completed | TaskState::Degraded | TaskState::Skipped
        ) {
            // G3: an incomplete or aborted task posts nothing; the status says what happened.
            return Ok(Settled::Nothing(format!(
                "nothing is published for a task that ended {}",
                task.state.as_str()
            )));
        }
        let posted = code_host.posted(item, ItemKind::PullRequest).await?;
        if let Some(url) = posted.tasks.get(&task.id) {
            return Ok(Settled::Posted {
                url: url.clone(),
                detail: "already posted by an earlier attempt".to_owned(),
            });
        }
        let files = self.changed_files(task).await?;
        let input = ReviewInput {
            task_id: &task.id,
            head_sha: head,
            state: task.state,
            reason: task.reason.as_deref(),
            result,
            coverage: &task.coverage,
            files: &files,
            already_posted: &posted.findings,
        };
        let plan = match publication::plan_review(&input, &settings.publish) {
            ReviewPublication::Nothing { why } => return Ok(Settled::Nothing(why)),
            ReviewPublication::Review(plan) => plan,
        };
        let pull = code_host.pull_request(item).await?;
        if pull.head_sha != head {
            return Ok(Settled::Stale(format!(
                "the pull request's head moved from {} to {} while the review ran; the stale review was not posted",
                short(head),
                short(&pull.head_sha)
            )));
        }
        match code_host.create_review(item, &plan.draft).await {
            Ok(posted) => Ok(Settled::Posted {
                url: posted.url,
                detail: describe(&plan, 0),
            }),
            Err(CodeHostError::Rejected { .. }) if !plan.draft.comments.is_empty() => {
                let refused = refused_comments(code_host, item, head, &plan.draft).await?;
                let moved = publication::move_to_body(&input, &settings.publish, &plan, &refused);
                let posted = code_host.create_review(item, &moved.draft).await?;
                Ok(Settled::Posted {
                    url: posted.url,
                    detail: describe(&moved, refused.len()),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Every changed file's diff piece, as intake stored it.
    async fn changed_files(&self, task: &TaskRecord) -> Result<Vec<ChangedFile>, CodeHostError> {
        let mut files = Vec::with_capacity(task.inputs.diff_files.len());
        for file in &task.inputs.diff_files {
            let diff =
                match &file.input.content {
                    InputContent::Inline { text } => text.clone(),
                    InputContent::Stored { sha256, .. } => {
                        let bytes = self.inputs.get(sha256).await.map_err(|e| {
                            CodeHostError::Unavailable {
                                reason: format!("the diff of {} cannot be read: {e}", file.path),
                            }
                        })?;
                        // A piece the store lost (expired) leaves the file out of the zone: its
                        // findings go into the body.
                        String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned()
                    }
                };
            files.push(ChangedFile {
                path: file.path.clone(),
                diff,
            });
        }
        Ok(files)
    }
}

/// The issue analysis's comment, and the suggested labels the repository defines.
async fn issue(
    code_host: &dyn CodeHost,
    settings: &CodeHostSettings,
    task: &TaskRecord,
) -> Result<Settled, CodeHostError> {
    let Some(github) = &task.github else {
        return Ok(Settled::Nothing("the task names no issue".to_owned()));
    };
    let item = &github.item;
    let analysis: Option<IssueAnalysis> = task
        .result
        .clone()
        .and_then(|v| serde_json::from_value(v).ok());
    let degraded = task.state == TaskState::Degraded;
    let Some(comment) = plan_issue_comment(
        &task.id,
        task.state,
        task.reason.as_deref(),
        analysis.as_ref(),
        degraded,
        &settings.publish,
    ) else {
        return Ok(Settled::Nothing(format!(
            "nothing is published for an issue analysis that ended {}",
            task.state.as_str()
        )));
    };
    let posted = code_host.posted(item, ItemKind::Issue).await?;
    let url = match posted.tasks.get(&task.id) {
        Some(url) => url.clone(),
        None => code_host.create_comment(item, &comment.body).await?.url,
    };
    let mut detail = "the analysis was posted as a comment".to_owned();
    if settings.apply_labels && !comment.labels.is_empty() {
        let defined = code_host.labels(&item.repo).await?;
        let apply = labels_to_apply(&comment.labels, &defined);
        if !apply.is_empty() {
            code_host.add_labels(item, &apply).await?;
        }
        detail.push_str(&format!("; labels applied: {}", apply.join(", ")));
    }
    Ok(Settled::Posted { url, detail })
}

/// The inline comments of `draft` the host refuses, checked one at a time. When it accepts each
/// alone, the refusal was about their combination, which cannot be pinned down: all move.
async fn refused_comments(
    code_host: &dyn CodeHost,
    item: &ItemRef,
    head: &str,
    draft: &ReviewDraft,
) -> Result<Vec<usize>, CodeHostError> {
    let mut refused = Vec::new();
    for (i, comment) in draft.comments.iter().enumerate() {
        if !code_host.accepts_comment(item, head, comment).await? {
            refused.push(i);
        }
    }
    if refused.is_empty() {
        refused = (0..draft.comments.len()).collect();
    }
    Ok(refused)
}

/// Takes the publication of `t` for this replica when it is pending, due, and not held by
/// another: the lease starts and the attempt is counted. Returns whether it did.
fn claim(t: &mut TaskRecord, now: u64, lease_ms: u64) -> bool {
    let Some(p) = &mut t.publication else {
        return false;
    };
    if p.state != PublicationState::Pending
        || p.claimed_until_unix_ms > now
        || p.not_before_unix_ms > now
    {
        return false;
    }
    p.claimed_until_unix_ms = now.saturating_add(lease_ms);
    p.attempts += 1;
    true
}

/// Whether the sweeper should start an attempt at `now`: pending, due and not held.
pub(super) fn due(p: &PublicationRecord, now: u64) -> bool {
    p.state == PublicationState::Pending
        && p.claimed_until_unix_ms <= now
        && p.not_before_unix_ms <= now
}

/// The pull request and head commit a review task is about.
fn review_head(task: &TaskRecord) -> Option<(ItemRef, String)> {
    let github = task.github.as_ref()?;
    if !matches!(task.pipeline, PipelineKind::Multi | PipelineKind::Single) {
        return None;
    }
    let head = github
        .head_sha
        .clone()
        .or_else(|| task.repository.as_ref().map(|r| r.commit.clone()))?;
    Some((github.item.clone(), head))
}

/// The wait before attempt `attempts + 1`.
fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1)))
        .min(MAX_BACKOFF)
}

fn describe(plan: &ReviewPlan, moved: usize) -> String {
    let mut text = format!(
        "{} inline comment(s), {} finding(s) in the body, {} already posted on an earlier head",
        plan.inline.len(),
        plan.in_body.len(),
        plan.repeated.len()
    );
    if moved > 0 {
        text.push_str(&format!(
            "; {moved} comment(s) GitHub refused inline were moved into the body"
        ));
    }
    text
}

fn outcome_label(state: PublicationState) -> &'static str {
    match state {
        PublicationState::Pending => "retry",
        other => other.as_str(),
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

#[cfg(test)]
mod tests;
