//! What a client sends to submit work, and what it gets back: the bodies of `POST /v1/reviews`,
//! `/v1/issue-analyses` and `/v1/scans`, their options, and the answer. Validated by the
//! scheduler (`engine::submission`); here only their shape.

use serde::{Deserialize, Serialize};
use verdict_proto::wire::Priority;

/// `POST /v1/reviews`: a change given by its repository and revisions, or a pull request given by
/// its URL (`pull_request`), whose repository and revisions are then read from the code host
/// when the task is taken in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewSubmission {
    /// A git URL or a path the scheduler can read; empty with `pull_request`.
    #[serde(default)]
    pub repository: String,
    /// The base revision of the change, as a person types it to git: a full or abbreviated
    /// commit SHA, a branch, a tag, `HEAD` (the repository's default branch), `origin/<branch>`,
    /// optionally followed by `~n`/`^n` steps ([`verdict_proto::revision`]). Resolved to a full
    /// commit id once, when the task is taken in; every stage works on that commit. The diff is
    /// taken from the merge base of `base` and `head`, as a pull request shows it.
    #[serde(default)]
    pub base: String,
    /// The head revision of the change, written like `base`.
    #[serde(default)]
    pub head: String,
    /// A pull request's web URL (`https://github.com/OWNER/REPO/pull/N`), instead of
    /// `repository`, `base` and `head`: its head is reviewed against its base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
    /// Post the result to the pull request (only with `pull_request`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub publish: bool,
    /// `multi` (S1, default) or `single` (S2).
    #[serde(default)]
    pub pipeline: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub options: SubmissionOptions,
    /// The pull request this is about, as a webhook delivery names it (set by the scheduler's
    /// webhook intake, not by API clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GitHubSource>,
}

/// `POST /v1/issue-analyses`: an issue given in the request, or by its URL (`issue_url`), whose
/// title, body, labels and repository are then read from the code host when the task is taken in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueAnalysisSubmission {
    /// The repository the issue belongs to (gives the model code to look at when tools are on).
    #[serde(default)]
    pub repository: Option<String>,
    /// The revision to analyse against, written like a review's `base`; defaults to `HEAD`, the
    /// repository's default branch. Only with `repository`.
    #[serde(default)]
    pub revision: Option<String>,
    /// The issue; leave it out with `issue_url`.
    #[serde(default)]
    pub issue: IssueInput,
    /// An issue's web URL (`https://github.com/OWNER/REPO/issues/N`), instead of `issue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_url: Option<String>,
    /// Post the analysis to the issue (only with `issue_url`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub publish: bool,
    /// The category set CATEGORY must come from; the configured one when absent.
    #[serde(default)]
    pub categories: Option<Vec<String>>,
    #[serde(default)]
    pub options: SubmissionOptions,
    /// The issue this is about, as a webhook delivery names it (set by the scheduler's webhook
    /// intake, not by API clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GitHubSource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueInput {
    #[serde(default)]
    pub number: Option<u64>,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// `POST /v1/scans`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanSubmission {
    pub repository: String,
    /// The revision to scan, written like a review's `base`.
    pub revision: String,
    #[serde(default)]
    pub options: SubmissionOptions,
}

/// `POST /v1/scans` for many repositories at once (issue 10): an organisation's repositories on
/// the configured code host, chosen by the filters, or the repositories of a manifest. One scan
/// task per repository at bulk priority, tracked as a batch (`GET /v1/scans/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanBatchSubmission {
    /// The organisation (or user) whose repositories are scanned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organisation: Option<String>,
    /// The repositories to scan, instead of an organisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Vec<ManifestEntry>>,
    /// Globs on repository names (`OWNER/NAME` when the pattern has a `/`); none: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Scan forks too (left out by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forks: bool,
    /// Scan archived repositories too (left out by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// The revision every repository is scanned at; by default each one's default branch (a
    /// manifest entry's own `ref` comes before it).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Applied to every member task; `idempotency_key` names the batch instead (the same key
    /// answers with the same batch).
    #[serde(default)]
    pub options: SubmissionOptions,
}

/// One repository of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// A git URL the scheduler may read.
    pub repository: String,
    /// The revision to scan; the batch's `ref`, else the default branch (`HEAD`).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// Per-task overrides of configured defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmissionOptions {
    /// `en` or `zh-CN` (normalised as P6 says).
    #[serde(default)]
    pub language: Option<String>,
    /// Scans default to `bulk`, everything else to `interactive`.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Overrides `review_timeout_seconds` for this task.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Number of reviewers in a multi-stage review.
    #[serde(default)]
    pub reviewers: Option<u8>,
    /// Submissions with the same key make one task: the first makes it, the others are answered
    /// with its id (webhook redeliveries use the delivery id; API clients may retry safely).
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The organisation whose budget the task spends (SPEC X5), when verdict itself knows it
    /// better than the repository URL says: a scan batch's organisation, whose repositories
    /// may be cloned from anywhere. Never read from a request.
    #[serde(skip)]
    pub organisation: Option<String>,
    /// Admitted even when intake's backlog is full: the sender cannot submit again (a webhook
    /// delivery, which GitHub does not resend by itself). Never read from a request.
    #[serde(skip)]
    pub past_backlog: bool,
}

/// The pull request or issue on the code host a task is about, and whether its result is posted
/// back there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubSource {
    pub item: verdict_proto::publication::ItemRef,
    /// A pull request's head when the task was made; a newer head supersedes the task (X1).
    #[serde(default)]
    pub head_sha: Option<String>,
    #[serde(default)]
    pub publish: bool,
}

/// The answer to a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    pub id: String,
}

/// Whether the process can serve (`/readyz`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub ready: bool,
    /// What is not ready, in words (empty when ready).
    pub problems: Vec<String>,
}
