//! Publication to a code host (SPEC G1–G3, X1, X2): the [`CodeHost`] trait — what the scheduler
//! reads of a pull request or issue before and while it publishes, and the few writes it makes —
//! with the GitHub implementation and an in-memory one that behaves the same where a caller can
//! tell (`backends/tests/code_host.rs` runs one suite on both).
//!
//! The trait speaks `verdict_proto::publication`'s drafts; what a review says is decided by the
//! scheduler. An implementation only carries it: it maps drafts to the host's wire format, reports
//! the host's refusals as [`CodeHostError`]s, and never retries a write that may have landed.
//!
//! # Layout
//! - this file: the trait, what it returns, its errors.
//! - [`memory`]: [`MemoryCodeHost`], pull requests and issues in memory with GitHub's rules for
//!   inline comments (the diff safety zone).
//! - [`github`]: [`GitHubCodeHost`], the GitHub REST API (App or token authentication, GitHub
//!   Enterprise base URLs), which also gives git its credentials for fetches.
//!
//! The code host is also where an organisation scan finds its repositories
//! ([`CodeHost::organisation_repositories`]): the same credentials read the organisation's list.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;
pub use verdict_proto::publication::HostedRepository;

use verdict_proto::publication::{
    DraftComment, ItemKind, ItemRef, RepoId, ReviewDraft, StatusDraft,
};

use crate::BoxFuture;

pub mod github;
pub mod memory;

pub use github::GitHubCodeHost;
pub use memory::MemoryCodeHost;

/// A code host that pull requests and issues are read from and published to. Every call has a
/// timeout inside the implementation; dropping the future cancels it. Reads may be retried by
/// the caller; a write that failed as [`CodeHostError::Unavailable`] may still have landed, so
/// callers check [`CodeHost::posted`] before writing again.
pub trait CodeHost: Send + Sync + fmt::Debug {
    /// The pull request as the host has it now (its head moves with every push).
    fn pull_request<'a>(
        &'a self,
        item: &'a ItemRef,
    ) -> BoxFuture<'a, Result<PullRequest, CodeHostError>>;

    /// The issue as the host has it now.
    fn issue<'a>(&'a self, item: &'a ItemRef) -> BoxFuture<'a, Result<Issue, CodeHostError>>;

    /// What verdict already posted on the item, read from the markers in it: submitted reviews
    /// and their inline comments (pull requests) and issue comments (both kinds). Pending
    /// (unsubmitted) reviews are not counted.
    fn posted<'a>(
        &'a self,
        item: &'a ItemRef,
        kind: ItemKind,
    ) -> BoxFuture<'a, Result<Posted, CodeHostError>>;

    /// Submits one review with its inline comments, all or nothing. A comment the host refuses
    /// (outside the diff) fails the whole review as [`CodeHostError::Rejected`] and posts nothing.
    fn create_review<'a>(
        &'a self,
        item: &'a ItemRef,
        draft: &'a ReviewDraft,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>>;

    /// Whether the host accepts `comment` inline on the pull request at `commit`, found out
    /// without leaving anything behind (on GitHub: a pending review with that one comment, made
    /// and deleted). `Ok(false)` when the host refuses it; an error when it could not tell.
    fn accepts_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        commit: &'a str,
        comment: &'a DraftComment,
    ) -> BoxFuture<'a, Result<bool, CodeHostError>>;

    /// Sets a commit status (the same `context` replaces the earlier one on that commit).
    fn set_status<'a>(
        &'a self,
        repo: &'a RepoId,
        status: &'a StatusDraft,
    ) -> BoxFuture<'a, Result<(), CodeHostError>>;

    /// Posts one top-level comment on an issue or pull request.
    fn create_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        body: &'a str,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>>;

    /// The names of the labels defined in the repository.
    fn labels<'a>(&'a self, repo: &'a RepoId) -> BoxFuture<'a, Result<Vec<String>, CodeHostError>>;

    /// Adds labels to an issue or pull request. Hosts create labels that do not exist, so callers
    /// pass only names [`CodeHost::labels`] listed.
    fn add_labels<'a>(
        &'a self,
        item: &'a ItemRef,
        labels: &'a [String],
    ) -> BoxFuture<'a, Result<(), CodeHostError>>;

    /// Every repository of organisation `org` the credentials can see (GitHub's
    /// `GET /orgs/{org}/repos?type=all`, all pages), archived ones and forks included — the
    /// caller filters. Ordered by full name.
    fn organisation_repositories<'a>(
        &'a self,
        org: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HostedRepository>, CodeHostError>>;
}

/// Whether an issue or pull request is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemState {
    Open,
    Closed,
    /// A pull request that was merged (closed by merging).
    Merged,
}

/// Who opened an issue or pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub login: String,
    /// A bot account (GitHub's `type: "Bot"`).
    pub bot: bool,
}

/// A pull request as the host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub item: ItemRef,
    pub state: ItemState,
    pub draft: bool,
    pub title: String,
    pub body: Option<String>,
    pub author: Author,
    pub labels: Vec<String>,
    /// The head commit now: the one a review must be about to be published.
    pub head_sha: String,
    /// The base branch's commit now.
    pub base_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    /// Where the base repository is fetched from; its refs include the pull request's head
    /// (`refs/pull/N/head`), so fork pull requests are reviewed from here too.
    pub clone_url: String,
    /// The web page of the pull request.
    pub html_url: String,
}

/// An issue as the host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub item: ItemRef,
    pub state: ItemState,
    pub title: String,
    pub body: Option<String>,
    pub author: Author,
    pub labels: Vec<String>,
    /// Where the repository is fetched from.
    pub clone_url: String,
    pub html_url: String,
}

/// What verdict already posted on an item, by marker (`verdict_proto::publication::markers_in`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Posted {
    /// Task id → the web address of what that task posted (a review or a comment).
    pub tasks: BTreeMap<String, String>,
    /// Fingerprints of findings posted (inline or in a review body), on any head (SPEC X2).
    pub findings: BTreeSet<String>,
}

/// Something the host created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedItem {
    pub id: u64,
    /// Its web address.
    pub url: String,
}

/// Why a host call failed. Messages name the item and the fix; none carries a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeHostError {
    #[error(
        "{what} was not found on the code host; check the URL, and that verdict's GitHub App is installed on the repository or its token can read it"
    )]
    NotFound { what: String },

    #[error(
        "the code host refused access ({status}: {message}); check the token's or the App's permissions (docs/github.md lists them)"
    )]
    Denied { status: u16, message: String },

    #[error("the code host's rate limit is exhausted ({message}){}", retry_after.map(|d| format!("; retry in {} s", d.as_secs())).unwrap_or_default())]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },

    /// The host understood the request and refused it (GitHub's 422), with its own words.
    #[error("the code host rejected the request: {message}{}", if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) })]
    Rejected {
        message: String,
        errors: Vec<String>,
    },

    #[error("the code host is unavailable: {reason}; publication is retried")]
    Unavailable { reason: String },

    #[error("the code host answered in an unexpected form: {reason}")]
    Protocol { reason: String },
}

impl CodeHostError {
    /// Whether the same call may succeed later without anything changing on verdict's side.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            CodeHostError::RateLimited { .. } | CodeHostError::Unavailable { .. }
        )
    }

    /// The wait the host asked for, when it named one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CodeHostError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The [`Posted`] record of bodies already on an item: each body's task markers (with `url`) and
/// finding fingerprints.
pub fn collect_posted<'a>(bodies: impl IntoIterator<Item = (&'a str, &'a str)>) -> Posted {
    let mut posted = Posted::default();
    for (body, url) in bodies {
        let (tasks, findings) = verdict_proto::publication::markers_in(body);
        for task in tasks {
            posted.tasks.entry(task).or_insert_with(|| url.to_owned());
        }
        posted.findings.extend(findings);
    }
    posted
}
