//! A fake GitHub: a real HTTP server on a loopback port speaking GitHub's REST wire format under a
//! GitHub Enterprise-style `/api/v3` root, so verdict's GitHub client is tested through its real
//! HTTP stack against a server that rejects what GitHub rejects (comments outside the diff, a
//! second pending review, JWTs GitHub would refuse, …) — a wire mistake fails a test.
//!
//! # Layout
//! - this file: [`FakeGitHub`], the handle: set-up (repositories, pull requests, issues, labels,
//!   credentials, apps), fault injection, and what was posted, for assertions.
//! - [`model`]: the plain data a test passes in and reads back.
//! - `routes`: request handling — recording, faults, authentication, the endpoints and their
//!   rules; `auth`: credentials (tokens, RS256 JWTs verified with ring); `hunks`: the fake's own
//!   reading of a diff's commentable lines; `page`: pagination and `Link`; `json`: GitHub's
//!   response shapes; `state`: what the server knows; `clock`: GitHub's timestamps.
//! - [`webhook`]: `pull_request` and `issues` event bodies and their signature.
//! - `key`: [`TEST_APP_PRIVATE_KEY`], a test fixture.
//!
//! ```no_run
//! # async fn demo() {
//! use verdict_testkit::github::{FakeGitHub, FakePullRequest, TEST_APP_PRIVATE_KEY};
//!
//! let gh = FakeGitHub::start().await;
//! gh.add_repository("acme", "app", "file:///tmp/app.git");
//! gh.add_pull_request(FakePullRequest::new("acme", "app", 7, "b".repeat(40), "h".repeat(40), "…"));
//! gh.install_app(42, TEST_APP_PRIVATE_KEY, 4242, &[("acme", "app")]);
//! // ... point the client at gh.api_url(), then:
//! assert_eq!(gh.reviews("acme", "app", 7).len(), 1);
//! # }
//! ```

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod auth;
mod clock;
mod hunks;
mod json;
mod key;
pub mod model;
mod page;
mod routes;
mod state;
pub mod webhook;

pub use auth::{app_jwt, sign_app_jwt};
pub use key::TEST_APP_PRIVATE_KEY;
pub use model::{
    AuthKind, FakeIssue, FakeIssueComment, FakePullRequest, FakeRepoTraits, FakeReview,
    FakeReviewComment, FakeStatus, GitHubRequest,
};

use crate::record::WaitTimeout;
use routes::{API_ROOT, Shared, lock};
use state::{
    App, Fault, Head, Installation, IssueState, Item, Label, PullState, Repo, State, repo_key,
};

/// Request bodies larger than this are refused (413); GitHub's own limit is of this order.
const MAX_REQUEST_BYTES: usize = 25 * 1024 * 1024;

/// A fake GitHub on `127.0.0.1:<random port>`. A cheap handle: clones share one server, which
/// runs until the last clone is dropped (then hanging requests end and the listener closes).
///
/// Set-up methods panic on misuse (a pull request in a repository that was never added, a key
/// that is not an RSA key): they are test infrastructure, and the message says what to fix.
#[derive(Debug, Clone)]
pub struct FakeGitHub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        self.server.abort();
    }
}

impl FakeGitHub {
    /// Starts the server. Panics if no loopback port can be bound; see [`FakeGitHub::try_start`].
    pub async fn start() -> FakeGitHub {
        match FakeGitHub::try_start().await {
            Ok(gh) => gh,
            Err(e) => panic!("start the fake GitHub on 127.0.0.1: {e}"),
        }
    }

    pub async fn try_start() -> std::io::Result<FakeGitHub> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let web = format!("http://{addr}");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(clock::now_seconds() + 3600)),
            urls: json::Urls {
                api: format!("{web}{API_ROOT}"),
                web,
            },
            shutdown: shutdown_rx,
            received: watch::Sender::new(0),
        });
        let app = Router::new()
            .fallback(routes::handle)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            // Serving fails only on listener errors, which the test sees as connection errors.
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeGitHub {
            inner: Arc::new(Inner {
                addr,
                shared,
                shutdown,
                server,
            }),
        })
    }

    /// The REST root, GitHub Enterprise style: `http://127.0.0.1:PORT/api/v3` (no trailing
    /// slash). Every endpoint is served under it and nowhere else.
    pub fn api_url(&self) -> String {
        self.inner.shared.urls.api.clone()
    }

    /// The web root: `http://127.0.0.1:PORT`; a pull request's page is `{web}/OWNER/REPO/pull/N`.
    pub fn web_url(&self) -> String {
        self.inner.shared.urls.web.clone()
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.inner.shared.state)
    }

    /// Adds a repository; `clone_url` is what payloads report as its `clone_url` (tests pass a
    /// local path or `file://` URL). Adding it again changes the clone URL only.
    pub fn add_repository(&self, owner: &str, name: &str, clone_url: &str) {
        let mut state = self.state();
        let key = repo_key(owner, name);
        if let Some(repo) = state.repos.get_mut(&key) {
            repo.clone_url = clone_url.to_owned();
            return;
        }
        let id = state.next_id();
        state.repos.insert(
            key,
            Repo {
                id,
                owner: owner.to_owned(),
                name: name.to_owned(),
                clone_url: clone_url.to_owned(),
                labels: Vec::new(),
                items: Default::default(),
                statuses: Vec::new(),
                commits: BTreeSet::new(),
                created: SystemTime::now(),
                traits: FakeRepoTraits::default(),
            },
        );
    }

    /// Sets what listings say of an existing repository: default branch, archived, fork, size,
    /// visibility. `GET /orgs/{org}/repos` lists every repository added under `org`.
    pub fn describe_repository(&self, owner: &str, name: &str, traits: FakeRepoTraits) {
        let mut state = self.state();
        repo_or_panic(&mut state, owner, name).traits = traits;
    }

    /// Makes a commit known to the repository, so statuses may be set on it (heads and bases of
    /// pull requests are known already).
    pub fn add_commit(&self, owner: &str, repo: &str, sha: &str) {
        let mut state = self.state();
        repo_or_panic(&mut state, owner, repo)
            .commits
            .insert(sha.to_owned());
    }

    /// Adds a pull request; its repository must exist and its number must be free (pull
    /// requests and issues share one sequence). Its labels are defined in the repository.
    pub fn add_pull_request(&self, pr: FakePullRequest) {
        let mut state = self.state();
        let id = state.next_id();
        let (owner, name, number) = (pr.owner.clone(), pr.repo.clone(), pr.number);
        let labels = pr.labels.clone();
        let repo = repo_or_panic(&mut state, &owner, &name);
        if repo.items.contains_key(&number) {
            panic!("fake GitHub: {owner}/{name}#{number} exists already; use another number");
        }
        repo.items.insert(
            number,
            Item::Pull(PullState::new(id, pr, SystemTime::now())),
        );
        define(&mut state, &owner, &name, &labels);
    }

    /// A push to the pull request: the new head and its diff (base…head). Reviews on older heads
    /// stay valid; their comments read as outdated (GitHub nulls their current `line`).
    pub fn push(&self, owner: &str, repo: &str, number: u64, head_sha: &str, diff: &str) {
        let mut state = self.state();
        let Some(pull) = repo_or_panic(&mut state, owner, repo).pull_mut(number) else {
            panic!("fake GitHub: no pull request {owner}/{repo}#{number} to push to");
        };
        pull.pr.head_sha = head_sha.to_owned();
        pull.pr.diff = diff.to_owned();
        pull.heads.push(Head::new(head_sha, diff));
    }

    /// Adds an issue; its repository must exist and its number must be free.
    pub fn add_issue(&self, issue: FakeIssue) {
        let mut state = self.state();
        let id = state.next_id();
        let (owner, name, number) = (issue.owner.clone(), issue.repo.clone(), issue.number);
        let labels = issue.labels.clone();
        let repo = repo_or_panic(&mut state, &owner, &name);
        if repo.items.contains_key(&number) {
            panic!("fake GitHub: {owner}/{name}#{number} exists already; use another number");
        }
        repo.items.insert(
            number,
            Item::Issue(IssueState {
                id,
                issue,
                comments: Vec::new(),
                created: SystemTime::now(),
            }),
        );
        define(&mut state, &owner, &name, &labels);
    }

    /// Defines labels in the repository (those it has already are kept).
    pub fn define_labels(&self, owner: &str, repo: &str, labels: &[&str]) {
        let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        define(&mut self.state(), owner, repo, &labels);
    }

    /// A personal access token the server accepts (as `Authorization: Bearer T` or `token T`),
    /// acting as the user `fake-user`.
    pub fn accept_token(&self, token: &str) {
        self.accept_token_as(token, "fake-user");
    }

    /// A personal access token acting as `login` (for reviews by several users, or by the pull
    /// request's author, whom GitHub does not let approve).
    pub fn accept_token_as(&self, token: &str, login: &str) {
        self.state().pats.insert(token.to_owned(), login.to_owned());
    }

    /// A GitHub App with the RSA key `private_key_pem` (PKCS#1 or PKCS#8 PEM) installed as
    /// `installation_id` on `repos`. JWTs signed with the key (RS256; `iss` the app id as a
    /// string or number; `exp - iat` at most 10 minutes; `exp` in the future; `iat` at most 60 s
    /// ahead) are accepted on `GET /repos/{o}/{r}/installation` and
    /// `POST /app/installations/{id}/access_tokens`. Its installation tokens act as
    /// `fake-app-<app_id>[bot]`.
    pub fn install_app(
        &self,
        app_id: u64,
        private_key_pem: &str,
        installation_id: u64,
        repos: &[(&str, &str)],
    ) {
        let public_key = match auth::public_key_der(private_key_pem) {
            Ok(key) => key,
            Err(e) => panic!("fake GitHub: install app {app_id}: {e}"),
        };
        let mut state = self.state();
        if let Some(other) = state.installations.get(&installation_id)
            && other.app_id != app_id
        {
            panic!(
                "fake GitHub: installation {installation_id} belongs to app {}; use another id",
                other.app_id
            );
        }
        state.apps.insert(app_id, App { public_key });
        state.installations.insert(
            installation_id,
            Installation {
                app_id,
                repos: repos.iter().map(|(o, r)| repo_key(o, r)).collect(),
            },
        );
    }

    /// Lifetime of the installation tokens issued from now on (default 1 h; zero issues tokens
    /// that are expired at once).
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.state().token_lifetime = lifetime;
    }

    /// Expires every installation token issued so far, as if their hour had passed.
    pub fn expire_tokens(&self) {
        let now = SystemTime::now();
        for token in self.state().issued.values_mut() {
            token.expires_at = token.expires_at.min(now);
        }
    }

    /// How many installation tokens the server has issued.
    pub fn tokens_issued(&self) -> usize {
        self.state().tokens_issued
    }

    /// Every request so far, in arrival order (including refused, faulted and hanging ones).
    pub fn requests(&self) -> Vec<GitHubRequest> {
        self.state().requests.clone()
    }

    /// Waits until at least `n` requests have arrived (without polling), then returns them;
    /// fails after `timeout` saying how many arrived.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<GitHubRequest>, WaitTimeout> {
        let mut received = self.inner.shared.received.subscribe();
        let reached = tokio::time::timeout(timeout, received.wait_for(|count| *count >= n)).await;
        match reached {
            Ok(Ok(_)) => Ok(self.requests()),
            // The sender lives in `shared`, which `self` keeps alive: only the timeout is real.
            Ok(Err(_)) | Err(_) => Err(WaitTimeout {
                wanted: n,
                received: *self.inner.shared.received.borrow(),
                timeout,
            }),
        }
    }

    /// The next request with this method and path (without `/api/v3` and the query) is answered
    /// with `status` and `body` (a `null` body sends none), before authentication; several calls
    /// queue in order.
    pub fn fail_next(&self, method: &str, path: &str, status: u16, body: Value) {
        self.fail_next_with_headers(method, path, status, &[], body);
    }

    /// Like [`FakeGitHub::fail_next`] with response headers, which replace the fake's own of the
    /// same name (`x-ratelimit-remaining: 0`, `retry-after: 3`, …).
    pub fn fail_next_with_headers(
        &self,
        method: &str,
        path: &str,
        status: u16,
        headers: &[(&str, &str)],
        body: Value,
    ) {
        let status = match StatusCode::from_u16(status) {
            Ok(status) => status,
            Err(e) => panic!("fake GitHub: fail_next with status {status}: {e}"),
        };
        self.state().faults.push(Fault {
            method: method.to_owned(),
            path: path.to_owned(),
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_ascii_lowercase(), (*v).to_owned()))
                .collect(),
            body,
        });
    }

    /// Requests with this method and path (without `/api/v3`) never get an answer while the
    /// server lives: for client timeouts.
    pub fn hang(&self, method: &str, path: &str) {
        self.state()
            .hangs
            .push((method.to_owned(), path.to_owned()));
    }

    /// Requests to `method path` are answered again from now on (those hanging already keep
    /// hanging until the server stops).
    pub fn stop_hanging(&self, method: &str, path: &str) {
        self.state()
            .hangs
            .retain(|(m, p)| !(m.eq_ignore_ascii_case(method) && p == path));
    }

    /// Every review of the pull request, pending ones included, in creation order (deleted
    /// pending reviews are gone).
    pub fn reviews(&self, owner: &str, repo: &str, number: u64) -> Vec<FakeReview> {
        self.with_pull(owner, repo, number, |p| {
            p.reviews.iter().map(|r| r.review.clone()).collect()
        })
    }

    /// The inline comments of the pull request's submitted reviews, oldest first — what GitHub
    /// shows on the pull request (a pending review's comments are in [`FakeGitHub::reviews`]).
    pub fn review_comments(&self, owner: &str, repo: &str, number: u64) -> Vec<FakeReviewComment> {
        self.with_pull(owner, repo, number, |p| {
            p.reviews
                .iter()
                .filter(|r| r.submitted_at.is_some())
                .flat_map(|r| r.review.comments.iter().cloned())
                .collect()
        })
    }

    /// The statuses set on a commit, oldest first.
    pub fn statuses(&self, owner: &str, repo: &str, sha: &str) -> Vec<FakeStatus> {
        let state = self.state();
        state.repo(owner, repo).map_or_else(Vec::new, |r| {
            r.statuses
                .iter()
                .filter(|s| s.sha == sha)
                .map(|s| s.status.clone())
                .collect()
        })
    }

    /// The top-level comments on an issue or pull request, oldest first.
    pub fn issue_comments(&self, owner: &str, repo: &str, number: u64) -> Vec<FakeIssueComment> {
        let state = self.state();
        state
            .repo(owner, repo)
            .and_then(|r| r.items.get(&number))
            .map_or_else(Vec::new, |item| {
                item.comments().iter().map(|c| c.comment.clone()).collect()
            })
    }

    /// The labels on an issue or pull request, in the order they were added.
    pub fn issue_labels(&self, owner: &str, repo: &str, number: u64) -> Vec<String> {
        let state = self.state();
        state
            .repo(owner, repo)
            .and_then(|r| r.items.get(&number))
            .map_or_else(Vec::new, |item| item.labels().to_vec())
    }

    /// The labels defined in the repository, in creation order.
    pub fn repo_labels(&self, owner: &str, repo: &str) -> Vec<String> {
        let state = self.state();
        state.repo(owner, repo).map_or_else(Vec::new, |r| {
            r.labels.iter().map(|l| l.name.clone()).collect()
        })
    }

    fn with_pull<T: Default>(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        read: impl FnOnce(&PullState) -> T,
    ) -> T {
        let state = self.state();
        state
            .repo(owner, repo)
            .and_then(|r| r.pull(number))
            .map_or_else(T::default, read)
    }
}

fn repo_or_panic<'a>(state: &'a mut State, owner: &str, name: &str) -> &'a mut Repo {
    match state.repo_mut(owner, name) {
        Some(repo) => repo,
        None => panic!("fake GitHub: no repository {owner}/{name}; call add_repository first"),
    }
}

/// Defines the labels the repository lacks (GitHub's default colour for a new label).
fn define(state: &mut State, owner: &str, name: &str, labels: &[String]) {
    for label in labels {
        if repo_or_panic(state, owner, name).label(label).is_some() {
            continue;
        }
        let id = state.next_id();
        repo_or_panic(state, owner, name).labels.push(Label {
            id,
            name: label.clone(),
            color: "ededed".to_owned(),
        });
    }
}
