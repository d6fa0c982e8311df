//! The task document: what `GET /v1/tasks/{id}` returns, `verdict dev review --json` prints and
//! `verdict submit --wait` shows. It is the public face of a task, so it changes additively only.

use serde::{Deserialize, Serialize};
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::wire::{ProgressEvent, StageKind, Usage};

/// What kind of work a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    Review,
    IssueAnalysis,
    Scan,
}

/// Where a task is. The last five are terminal (SPEC §0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    /// A trustworthy decision.
    Completed,
    /// Triage said no review is needed.
    Skipped,
    /// Completed with a safe non-decision (protocol exhausted).
    Degraded,
    /// A required stage failed; nothing is published.
    Incomplete,
    /// Cancelled (or superseded).
    Aborted,
}

impl TaskState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskState::Queued | TaskState::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Skipped => "skipped",
            TaskState::Degraded => "degraded",
            TaskState::Incomplete => "incomplete",
            TaskState::Aborted => "aborted",
        }
    }
}

/// One stage as the document shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageView {
    pub id: String,
    pub stage: StageKind,
    pub required: bool,
    /// `pending`, `running` or `done`.
    pub status: String,
    /// `ok`, `invalid_output` or `execution_failure` once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// The full outcome (value, diagnostics, preview) once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<StageOutcome>,
    pub attempts: u32,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_unix_ms: Option<u64>,
}

/// What part of the change was reviewed (SPEC X4: never silently partial).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Coverage {
    pub files_total: usize,
    pub files_reviewed: Vec<String>,
    /// Files left out (budget, binary, deleted), each with the reason.
    pub files_not_reviewed: Vec<NotReviewed>,
    /// A sharded scan's shards whose answer never followed the protocol (their files are in
    /// `files_not_reviewed` with kind `shard_failed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards_failed: Vec<FailedShard>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReviewed {
    pub path: String,
    pub reason: String,
    /// The reason's class, for a scan's files (SPEC X4); reviews say it in `reason` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<SkipReason>,
}

impl NotReviewed {
    /// A file a scan did not look at, with the class of the reason and its words.
    pub fn skipped(path: &str, kind: SkipReason, reason: String) -> NotReviewed {
        NotReviewed {
            path: path.to_owned(),
            reason,
            kind: Some(kind),
        }
    }
}

/// Why a scan left a file out (SPEC X4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Someone else's code checked in (`vendor/`, `node_modules/`, `third_party/`…).
    Vendored,
    /// Written by a tool (lockfiles, minified bundles, protobuf code…).
    Generated,
    Binary,
    /// Over `scan.max_file_bytes`.
    TooLarge,
    /// Matched by `scan.exclude`, or a symbolic link.
    Excluded,
    /// Beyond `scan.max_shards`.
    OverBudget,
    /// In a shard whose scan answer never followed the protocol.
    ShardFailed,
}

impl SkipReason {
    pub const ALL: [SkipReason; 7] = [
        SkipReason::Vendored,
        SkipReason::Generated,
        SkipReason::Binary,
        SkipReason::TooLarge,
        SkipReason::Excluded,
        SkipReason::OverBudget,
        SkipReason::ShardFailed,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Vendored => "vendored",
            SkipReason::Generated => "generated",
            SkipReason::Binary => "binary",
            SkipReason::TooLarge => "too_large",
            SkipReason::Excluded => "excluded",
            SkipReason::OverBudget => "over_budget",
            SkipReason::ShardFailed => "shard_failed",
        }
    }
}

/// A scan shard that produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedShard {
    pub stage: String,
    pub files: usize,
    pub reason: String,
}

/// When things happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Timings {
    pub created_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_unix_ms: Option<u64>,
    /// The soft deadline shared by the task's stages (SPEC E2).
    pub deadline_unix_ms: u64,
}

/// The repository a task looks at: the revisions as the request gave them, and the commits
/// intake resolved them to, which every stage works on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryView {
    /// The repository's URL or path, credentials redacted.
    pub url: String,
    /// The revision as given: a review's head, a scan's or an issue analysis's revision.
    pub revision: String,
    /// The full commit id `revision` was resolved to at intake; absent until then (and when
    /// intake failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// A review's base revision as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_revision: Option<String>,
    /// The full commit id `base_revision` was resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDocument {
    pub id: String,
    pub kind: TaskKind,
    /// `multi`, `single`, `issue-analysis` or `scan`.
    pub pipeline: String,
    pub state: TaskState,
    /// Why the task ended where it did (terminal states), in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the task could not run, classified (SPEC E4 kinds): from intake (`not_found` for a
    /// revision or repository that does not exist, `invalid_request`, `repository_unavailable`)
    /// or from the stage whose execution failure ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// The repository and revisions, for tasks that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryView>,
    /// The GitHub pull request or issue the task is about, and whether it is published there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<crate::submission::GitHubSource>,
    /// Publishing the outcome there: pending, published (with the address), nothing, stale or
    /// failed (with why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication: Option<PublicationRecord>,
    /// The task's trace id, when tracing export is on: its spans from every process are in
    /// that one trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The result model (review, issue analysis or scan) once terminal with a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    pub stages: Vec<StageView>,
    #[serde(default)]
    pub events: Vec<ProgressEvent>,
    #[serde(default)]
    pub coverage: Coverage,
    pub timings: Timings,
    #[serde(default)]
    pub usage: Usage,
    /// What the usage cost in US dollars by the configured price table, when every stage's
    /// provider has prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The body of `GET /v1/tasks/{id}/transcripts` (and `/{stage}`): every stored attempt's
/// transcript, in reading order, as the workers redacted them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptsDocument {
    pub task_id: String,
    pub transcripts: Vec<verdict_proto::transcript::Transcript>,
}

/// Where publishing a task's outcome stands (SPEC G1–G3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationRecord {
    pub state: PublicationState,
    /// Attempts started so far.
    #[serde(default)]
    pub attempts: u32,
    /// Not before this: a retry's backoff, or the host's rate-limit wait.
    #[serde(default)]
    pub not_before_unix_ms: u64,
    /// A replica is publishing it until this time; others leave it alone until then.
    #[serde(default)]
    pub claimed_until_unix_ms: u64,
    /// The web address of what was posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// In words: what was posted, why nothing was, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl PublicationRecord {
    pub fn pending() -> PublicationRecord {
        PublicationRecord {
            state: PublicationState::Pending,
            attempts: 0,
            not_before_unix_ms: 0,
            claimed_until_unix_ms: 0,
            url: None,
            detail: None,
        }
    }
}

/// The states of [`PublicationRecord`]; every one but `pending` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationState {
    /// To be published (again, after a retryable failure).
    Pending,
    /// Posted (or found already posted).
    Published,
    /// Nothing to post for this outcome (G3: incomplete, aborted; skipped; a degraded review
    /// without `degraded_comment`); the commit status still shows it.
    Nothing,
    /// The pull request has a newer head: the result is stale and was not posted (X1).
    Stale,
    /// Could not be posted; `detail` says why.
    Failed,
}

impl PublicationState {
    pub fn as_str(self) -> &'static str {
        match self {
            PublicationState::Pending => "pending",
            PublicationState::Published => "published",
            PublicationState::Nothing => "nothing",
            PublicationState::Stale => "stale",
            PublicationState::Failed => "failed",
        }
    }
}
