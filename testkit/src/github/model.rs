//! What a test gives the fake GitHub (repositories' pull requests and issues) and what it reads
//! back for assertions (reviews, comments, statuses, the requests themselves). Plain data: the
//! server's rules live in `routes`.

use serde_json::Value;

/// A pull request as a test sets it up. `diff` is what GitHub would compute for base…head and
/// decides where inline comments may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePullRequest {
    pub owner: String,
    pub repo: String,
    pub number: u64,
    pub title: String,
    pub body: Option<String>,
    pub draft: bool,
    /// `"open"` or `"closed"` (a merged pull request is closed with `merged`).
    pub state: String,
    pub merged: bool,
    pub author: String,
    pub author_is_bot: bool,
    pub labels: Vec<String>,
    pub base_ref: String,
    pub base_sha: String,
    pub head_ref: String,
    pub head_sha: String,
    /// The unified diff base…head, as `git diff` prints it.
    pub diff: String,
}

impl FakePullRequest {
    /// An open, non-draft pull request by `contributor` from `feature-N` into `main`, titled
    /// `Change N`, without body or labels.
    pub fn new(
        owner: impl Into<String>,
        repo: impl Into<String>,
        number: u64,
        base_sha: impl Into<String>,
        head_sha: impl Into<String>,
        diff: impl Into<String>,
    ) -> Self {
        FakePullRequest {
            owner: owner.into(),
            repo: repo.into(),
            number,
            title: format!("Change {number}"),
            body: None,
            draft: false,
            state: "open".to_owned(),
            merged: false,
            author: "contributor".to_owned(),
            author_is_bot: false,
            labels: Vec::new(),
            base_ref: "main".to_owned(),
            base_sha: base_sha.into(),
            head_ref: format!("feature-{number}"),
            head_sha: head_sha.into(),
            diff: diff.into(),
        }
    }
}

/// What the organisation listing says of a repository besides its name and clone URL
/// (`FakeGitHub::describe_repository`). The default is GitHub's for a new private repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRepoTraits {
    pub default_branch: String,
    pub archived: bool,
    pub fork: bool,
    /// GitHub's `size`, in KiB.
    pub size_kib: u64,
    /// `public`, `private` or `internal`.
    pub visibility: String,
}

impl Default for FakeRepoTraits {
    fn default() -> Self {
        FakeRepoTraits {
            default_branch: "main".to_owned(),
            archived: false,
            fork: false,
            size_kib: 1,
            visibility: "private".to_owned(),
        }
    }
}

/// An issue as a test sets it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeIssue {
    pub owner: String,
    pub repo: String,
    pub number: u64,
    pub title: String,
    pub body: Option<String>,
    pub author: String,
    pub author_is_bot: bool,
    pub labels: Vec<String>,
    /// `"open"` or `"closed"`.
    pub state: String,
}

impl FakeIssue {
    /// An open issue by `reporter` titled `Issue N`, without body or labels.
    pub fn new(owner: impl Into<String>, repo: impl Into<String>, number: u64) -> Self {
        FakeIssue {
            owner: owner.into(),
            repo: repo.into(),
            number,
            title: format!("Issue {number}"),
            body: None,
            author: "reporter".to_owned(),
            author_is_bot: false,
            labels: Vec::new(),
            state: "open".to_owned(),
        }
    }
}

/// A review as it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeReview {
    pub id: u64,
    /// `PENDING`, `COMMENTED`, `APPROVED` or `CHANGES_REQUESTED`.
    pub state: String,
    pub body: String,
    pub commit_id: String,
    pub comments: Vec<FakeReviewComment>,
    /// The login of whoever created it (`fake-app-<app id>[bot]` for an installation token).
    pub user: String,
}

/// An inline comment of a review, with the line numbers as posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeReviewComment {
    pub id: u64,
    pub review_id: u64,
    pub path: String,
    pub line: u32,
    pub start_line: Option<u32>,
    /// Always `RIGHT`: the fake refuses anything else.
    pub side: String,
    pub body: String,
    pub commit_id: String,
}

/// A commit status as it was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeStatus {
    pub state: String,
    pub description: Option<String>,
    pub context: String,
    pub target_url: Option<String>,
}

/// A top-level comment on an issue or pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeIssueComment {
    pub id: u64,
    pub body: String,
    pub user: String,
}

/// Which credential a request carried, as the fake classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthKind {
    /// No `Authorization` header.
    None,
    /// A personal access token given to [`crate::github::FakeGitHub::accept_token`].
    Token,
    /// An installation token the fake issued (possibly expired by now).
    Installation,
    /// A GitHub App JWT that verified (signature and claims).
    Jwt,
    /// Anything else: an unknown token, a JWT that did not verify, another scheme.
    Invalid,
}

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct GitHubRequest {
    pub method: String,
    /// Without the `/api/v3` prefix (as received when the request missed the prefix; see
    /// `under_api_root`) and without the query.
    pub path: String,
    pub query: Option<String>,
    pub auth: AuthKind,
    /// The JSON body, when there was one and it parsed.
    pub body: Option<Value>,
    /// Whether the path started with `/api/v3` — a client that drops its base path is caught here.
    pub under_api_root: bool,
    /// The credential itself (`Bearer`/`token` value), to assert that tokens are reused.
    pub token: Option<String>,
    /// Header names in lowercase with their values, in arrival order.
    pub headers: Vec<(String, String)>,
}

impl GitHubRequest {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
