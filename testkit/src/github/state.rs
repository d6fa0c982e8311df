//! Everything the fake GitHub knows, behind one mutex: repositories with their pull requests,
//! issues, reviews, comments, labels and statuses; accepted credentials and issued tokens; the
//! request log and the faults to inject. No HTTP here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use serde_json::Value;

use super::hunks::{self, FileDiff};
use super::model::{
    FakeIssue, FakeIssueComment, FakePullRequest, FakeRepoTraits, FakeReview, FakeStatus,
    GitHubRequest,
};

/// GitHub's owner and repository names are case-insensitive; state is keyed by the lowercase
/// pair and keeps the spelling it was given.
pub(crate) type RepoKey = (String, String);

pub(crate) fn repo_key(owner: &str, name: &str) -> RepoKey {
    (owner.to_ascii_lowercase(), name.to_ascii_lowercase())
}

/// Ids start here so that a review id, a comment id and a pull-request number are never the
/// same number by accident: a client that mixes them up gets a 404, not someone else's object.
const FIRST_ID: u64 = 10_001;

/// How long installation tokens live unless a test says otherwise (GitHub: one hour).
pub(crate) const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

#[derive(Debug)]
pub(crate) struct State {
    pub repos: BTreeMap<RepoKey, Repo>,
    /// Personal access tokens → the login they act as.
    pub pats: HashMap<String, String>,
    pub apps: HashMap<u64, App>,
    pub installations: BTreeMap<u64, Installation>,
    pub issued: HashMap<String, IssuedToken>,
    pub token_lifetime: Duration,
    pub tokens_issued: usize,
    pub requests: Vec<GitHubRequest>,
    pub faults: Vec<Fault>,
    pub hangs: Vec<(String, String)>,
    /// Requests answered so far, for the rate-limit headers.
    pub served: u64,
    /// When the rate-limit window resets (Unix seconds), fixed at start.
    pub rate_reset: i64,
    next_id: u64,
}

impl State {
    pub(super) fn new(rate_reset: i64) -> State {
        State {
            repos: BTreeMap::new(),
            pats: HashMap::new(),
            apps: HashMap::new(),
            installations: BTreeMap::new(),
            issued: HashMap::new(),
            token_lifetime: DEFAULT_TOKEN_LIFETIME,
            tokens_issued: 0,
            requests: Vec::new(),
            faults: Vec::new(),
            hangs: Vec::new(),
            served: 0,
            rate_reset,
            next_id: FIRST_ID,
        }
    }

    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(super) fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos.get(&repo_key(owner, name))
    }

    pub(super) fn repo_mut(&mut self, owner: &str, name: &str) -> Option<&mut Repo> {
        self.repos.get_mut(&repo_key(owner, name))
    }

    /// The installation of `app_id` that covers the repository, if any.
    pub(super) fn installation_for(
        &self,
        app_id: u64,
        key: &RepoKey,
    ) -> Option<(u64, &Installation)> {
        self.installations
            .iter()
            .find(|(_, i)| i.app_id == app_id && i.repos.contains(key))
            .map(|(id, i)| (*id, i))
    }

    /// Any installation that covers the repository (for webhook payloads).
    pub(super) fn any_installation(&self, key: &RepoKey) -> Option<u64> {
        self.installations
            .iter()
            .find(|(_, i)| i.repos.contains(key))
            .map(|(id, _)| *id)
    }
}

/// A GitHub App: the public half of its key, in the form ring verifies with.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub public_key: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(crate) struct Installation {
    pub app_id: u64,
    pub repos: BTreeSet<RepoKey>,
}

#[derive(Debug, Clone)]
pub(crate) struct IssuedToken {
    pub app_id: u64,
    /// The repositories the token may touch (the installation's, or fewer when asked).
    pub repos: BTreeSet<RepoKey>,
    pub expires_at: SystemTime,
}

/// A scripted answer for the next request to `method path`.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub method: String,
    pub path: String,
    pub status: StatusCode,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

#[derive(Debug)]
pub(crate) struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub clone_url: String,
    /// In creation order.
    pub labels: Vec<Label>,
    pub items: BTreeMap<u64, Item>,
    /// Every status, oldest first.
    pub statuses: Vec<StatusRecord>,
    /// Commits a status may be set on besides the pull requests' heads and bases.
    pub commits: BTreeSet<String>,
    pub created: SystemTime,
    /// Default branch, archived, fork, size and visibility, as listings show them.
    pub traits: FakeRepoTraits,
}

impl Repo {
    pub(super) fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    pub(super) fn label(&self, name: &str) -> Option<&Label> {
        self.labels
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case(name))
    }

    /// Whether GitHub would know the commit: a head any pull request has had, a base, or one a
    /// test added.
    pub(super) fn knows_commit(&self, sha: &str) -> bool {
        self.commits.contains(sha)
            || self.items.values().any(|item| match item {
                Item::Pull(p) => p.pr.base_sha == sha || p.heads.iter().any(|h| h.sha == sha),
                Item::Issue(_) => false,
            })
    }

    pub(super) fn pull(&self, number: u64) -> Option<&PullState> {
        match self.items.get(&number) {
            Some(Item::Pull(p)) => Some(p),
            _ => None,
        }
    }

    pub(super) fn pull_mut(&mut self, number: u64) -> Option<&mut PullState> {
        match self.items.get_mut(&number) {
            Some(Item::Pull(p)) => Some(p),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Label {
    pub id: u64,
    pub name: String,
    pub color: String,
}

/// A number in a repository: GitHub numbers pull requests and issues in one sequence, and every
/// pull request is an issue too.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a handful per test; boxing buys nothing
pub(crate) enum Item {
    Pull(PullState),
    Issue(IssueState),
}

impl Item {
    pub(super) fn labels(&self) -> &[String] {
        match self {
            Item::Pull(p) => &p.pr.labels,
            Item::Issue(i) => &i.issue.labels,
        }
    }

    pub(super) fn labels_mut(&mut self) -> &mut Vec<String> {
        match self {
            Item::Pull(p) => &mut p.pr.labels,
            Item::Issue(i) => &mut i.issue.labels,
        }
    }

    pub(super) fn comments(&self) -> &[CommentRecord] {
        match self {
            Item::Pull(p) => &p.comments,
            Item::Issue(i) => &i.comments,
        }
    }

    pub(super) fn comments_mut(&mut self) -> &mut Vec<CommentRecord> {
        match self {
            Item::Pull(p) => &mut p.comments,
            Item::Issue(i) => &mut i.comments,
        }
    }
}

#[derive(Debug)]
pub(crate) struct PullState {
    pub id: u64,
    pub pr: FakePullRequest,
    /// Every head the pull request has had, oldest first, each with its diff.
    pub heads: Vec<Head>,
    /// In creation order; deleted pending reviews are removed.
    pub reviews: Vec<ReviewRecord>,
    pub comments: Vec<CommentRecord>,
    pub created: SystemTime,
}

impl PullState {
    pub(super) fn new(id: u64, pr: FakePullRequest, created: SystemTime) -> PullState {
        let head = Head::new(&pr.head_sha, &pr.diff);
        PullState {
            id,
            pr,
            heads: vec![head],
            reviews: Vec::new(),
            comments: Vec::new(),
            created,
        }
    }

    pub(super) fn head(&self, sha: &str) -> Option<&Head> {
        self.heads.iter().rev().find(|h| h.sha == sha)
    }
}

#[derive(Debug)]
pub(crate) struct Head {
    pub sha: String,
    pub files: Vec<FileDiff>,
}

impl Head {
    pub(super) fn new(sha: &str, diff: &str) -> Head {
        Head {
            sha: sha.to_owned(),
            files: hunks::parse(diff),
        }
    }
}

#[derive(Debug)]
pub(crate) struct IssueState {
    pub id: u64,
    pub issue: FakeIssue,
    pub comments: Vec<CommentRecord>,
    pub created: SystemTime,
}

#[derive(Debug, Clone)]
pub(crate) struct ReviewRecord {
    pub review: FakeReview,
    /// `None` while pending.
    pub submitted_at: Option<SystemTime>,
    pub created: SystemTime,
    /// Where each comment sits in its commit's diff, in the order of `review.comments`.
    pub anchors: Vec<Anchor>,
    pub user_is_bot: bool,
}

/// A comment's place in the diff as GitHub reports it: the hunk down to its line, and the line's
/// `position` in the file's diff.
#[derive(Debug, Clone)]
pub(crate) struct Anchor {
    pub diff_hunk: String,
    pub position: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct CommentRecord {
    pub comment: FakeIssueComment,
    pub user_is_bot: bool,
    pub created: SystemTime,
}

#[derive(Debug, Clone)]
pub(crate) struct StatusRecord {
    pub id: u64,
    pub sha: String,
    pub status: FakeStatus,
    pub creator: String,
    pub creator_is_bot: bool,
    pub created: SystemTime,
}
