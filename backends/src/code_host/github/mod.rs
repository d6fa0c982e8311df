//! [`GitHubCodeHost`]: the [`CodeHost`] trait over GitHub's REST API (github.com or GitHub
//! Enterprise at `https://HOST/api/v3`), authenticated as a GitHub App (an installation token per
//! repository's installation) or with a personal token, and the [`GitCredentials`] that let git
//! fetch the same repositories over HTTPS with the same token.
//!
//! # Layout
//! - this file: configuration, the code host, how each trait method maps to GitHub's endpoints.
//! - `auth`: the App's JWT (RS256 with ring) and the installation and token caches.
//! - `client`: octocrab on reqwest — per-request credentials, timeouts, read retries, pages.
//! - `error`: GitHub's answers as [`CodeHostError`]s.
//! - `wire`: the JSON payloads read and sent.
//!
//! # What a caller can rely on
//! - Reads are retried a few times on 5xx, connection trouble and timeouts; writes never are (a
//!   write may have landed). The one exception: creating a review (or the pending review of
//!   [`CodeHost::accepts_comment`]) refused because verdict's own account already has a pending
//!   review on the pull request deletes verdict's pending reviews there and tries once more —
//!   a pending review is invisible to everyone else, so nothing anyone saw is lost. And an
//!   installation token GitHub calls bad credentials (revoked early) is replaced and the call
//!   made once more: a 401 is decided before anything is done.
//! - Credentials never appear in errors, logs or `Debug`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use verdict_proto::publication::{
    DraftComment, ItemKind, ItemRef, RepoId, ReviewDraft, StatusDraft,
};

use super::{
    Author, CodeHost, CodeHostError, HostedRepository, Issue, ItemState, Posted, PostedItem,
    PullRequest, collect_posted,
};
use crate::BoxFuture;
use crate::clock::{Clock, SystemClock};
use crate::repo::{GitCredentials, RepoError};
use crate::secret::Secret;

mod auth;
mod client;
mod error;
mod wire;

use client::Api;

/// github.com's REST root.
pub const GITHUB_API_URL: &str = "https://api.github.com";

/// The longest commit-status description GitHub takes.
pub const MAX_STATUS_DESCRIPTION_CHARS: usize = 140;

/// Configuration of [`GitHubCodeHost`].
#[derive(Debug, Clone)]
pub struct GitHubConfig {
    /// The REST root: `https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise
    /// Server (its path is kept in front of every route).
    pub api_url: String,
    pub auth: GitHubAuth,
    /// The bound on every exchange with GitHub (connecting, sending, reading the answer).
    /// Default 30 s.
    pub timeout: Duration,
    /// Hosts whose https:// clone URLs get the credentials for git fetches; default derived:
    /// api.github.com → github.com, otherwise the API URL's host. Empty means the default. An
    /// entry with a port (`host:8443`) matches only that port.
    pub git_hosts: Vec<String>,
}

impl GitHubConfig {
    /// The defaults for `api_url` and `auth`: a 30 s timeout, git hosts derived.
    pub fn new(api_url: impl Into<String>, auth: GitHubAuth) -> GitHubConfig {
        GitHubConfig {
            api_url: api_url.into(),
            auth,
            timeout: Duration::from_secs(30),
            git_hosts: Vec::new(),
        }
    }
}

/// How verdict authenticates to GitHub.
#[derive(Debug, Clone)]
pub enum GitHubAuth {
    /// A personal access token (classic or fine-grained), used as is.
    Token(Secret),
    /// A GitHub App: its id and private key (the PEM GitHub generated, PKCS#1, or PKCS#8).
    App {
        app_id: u64,
        private_key_pem: Secret,
    },
}

/// Why a [`GitHubConfig`] cannot be used; each names the setting and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitHubConfigError {
    #[error(
        "the GitHub API URL `{url}` is not usable: {reason}; use {GITHUB_API_URL}, or https://HOST/api/v3 for GitHub Enterprise Server"
    )]
    ApiUrl { url: String, reason: String },

    #[error(
        "the GitHub request timeout is zero; set a timeout of a few seconds or more (default 30 s)"
    )]
    ZeroTimeout,

    #[error(
        "the GitHub token is {reason}; give a personal access token (ghp_…, github_pat_…) with the permissions docs/github.md lists"
    )]
    Token { reason: &'static str },

    #[error("the GitHub App id is 0; use the App ID shown on the App's settings page")]
    AppId,

    #[error(
        "the GitHub App private key is not usable: {reason}; give the unencrypted PEM file GitHub generated for the App (PKCS#1, `-----BEGIN RSA PRIVATE KEY-----`) or its PKCS#8 form (`-----BEGIN PRIVATE KEY-----`)"
    )]
    PrivateKey { reason: String },

    #[error(
        "the git host `{host}` is not a host name; list bare host names (github.example.com, or host:port), without scheme or path"
    )]
    GitHost { host: String },

    #[error(
        "the HTTP client for GitHub could not be built: {reason}; check the system's TLS certificates"
    )]
    HttpClient { reason: String },

    #[error(
        "the GitHub code host was created outside a tokio runtime; create it inside the runtime that uses it"
    )]
    NoRuntime,
}

/// How requests are authenticated, once checked.
#[derive(Debug)]
enum Auth {
    Token(Secret),
    App(Box<auth::App>),
}

/// Pull requests and issues on GitHub (see the module documentation).
pub struct GitHubCodeHost {
    api: Api,
    auth: Auth,
    api_url: String,
    git_hosts: Vec<String>,
}

impl std::fmt::Debug for GitHubCodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::Token(_) => "token".to_owned(),
            Auth::App(app) => format!("App {}", app.app_id()),
        };
        f.debug_struct("GitHubCodeHost")
            .field("api_url", &self.api_url)
            .field("auth", &auth)
            .field("git_hosts", &self.git_hosts)
            .finish_non_exhaustive()
    }
}

impl GitHubCodeHost {
    /// Checks `config` and builds the client. No request is made: a wrong token or an App that
    /// is not installed shows on the first call. Must be called inside the tokio runtime that
    /// uses the code host.
    pub fn new(config: GitHubConfig) -> Result<GitHubCodeHost, GitHubConfigError> {
        GitHubCodeHost::with_clock(config, Arc::new(SystemClock))
    }

    /// [`Self::new`] with the clock tokens expire by (tests).
    pub fn with_clock(
        config: GitHubConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<GitHubCodeHost, GitHubConfigError> {
        let api_url = config.api_url.trim().trim_end_matches('/').to_owned();
        let url = parse_api_url(&api_url)?;
        if config.timeout.is_zero() {
            return Err(GitHubConfigError::ZeroTimeout);
        }
        let auth = match &config.auth {
            GitHubAuth::Token(token) => {
                check_token(token)?;
                Auth::Token(token.clone())
            }
            GitHubAuth::App {
                app_id,
                private_key_pem,
            } => {
                if *app_id == 0 {
                    return Err(GitHubConfigError::AppId);
                }
                let key = auth::AppKey::from_pem(*app_id, private_key_pem).map_err(|problem| {
                    GitHubConfigError::PrivateKey {
                        reason: key_problem(&problem),
                    }
                })?;
                Auth::App(Box::new(auth::App::new(key, clock)))
            }
        };
        let git_hosts = git_hosts(&config.git_hosts, &url)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(GitHubConfigError::NoRuntime);
        }
        let api = Api::new(&url, config.timeout).map_err(|e| match e {
            client::BuildError::BaseUri(reason) => GitHubConfigError::ApiUrl {
                url: api_url.clone(),
                reason,
            },
            client::BuildError::Http(reason) => GitHubConfigError::HttpClient { reason },
        })?;
        Ok(GitHubCodeHost {
            api,
            auth,
            api_url,
            git_hosts,
        })
    }

    /// The REST root requests go to (without a trailing slash).
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The hosts whose clone URLs get credentials (lowercase).
    pub fn git_hosts(&self) -> &[String] {
        &self.git_hosts
    }

    /// The credential for requests about `repo`.
    async fn credential(&self, repo: &RepoId) -> Result<Secret, CodeHostError> {
        match &self.auth {
            Auth::Token(token) => Ok(token.clone()),
            Auth::App(app) => app.token(&self.api, repo).await,
        }
    }

    /// A call about `repo` with its credential. An installation token GitHub refuses as bad
    /// credentials (401: revoked or expired before its time) is dropped and the call made once
    /// more with a new one; that is safe for writes too, since a 401 is decided before anything
    /// is done.
    async fn with_credential<T, F, Fut>(&self, repo: &RepoId, call: F) -> Result<T, CodeHostError>
    where
        F: Fn(Secret) -> Fut,
        Fut: Future<Output = Result<T, CodeHostError>>,
    {
        let credential = self.credential(repo).await?;
        let result = call(credential.clone()).await;
        match (&self.auth, &result) {
            (Auth::App(app), Err(CodeHostError::Denied { status: 401, .. })) => {
                app.invalidate(&credential).await;
                let fresh = self.credential(repo).await?;
                call(fresh).await
            }
            _ => result,
        }
    }

    async fn get_pull(&self, item: &ItemRef) -> Result<PullRequest, CodeHostError> {
        let what = describe("pull request", item);
        let route = format!("{}/pulls/{}", repo_route(&item.repo, &what)?, item.number);
        let (route, what) = (&route, &what);
        let pull: wire::Pull = self
            .with_credential(&item.repo, |c| async move {
                self.api.get(route, &c, what).await
            })
            .await?;
        let clone_url =
            pull.base
                .repo
                .map(|r| r.clone_url)
                .ok_or_else(|| CodeHostError::Protocol {
                    reason: format!("{what}: the base repository is missing"),
                })?;
        Ok(PullRequest {
            item: item.clone(),
            state: if pull.merged || pull.merged_at.is_some() {
                ItemState::Merged
            } else {
                item_state(&pull.state)
            },
            draft: pull.draft,
            title: pull.title,
            body: pull.body,
            author: Author {
                bot: pull.user.is_bot(),
                login: pull.user.login,
            },
            labels: pull.labels.into_iter().map(|l| l.name).collect(),
            head_sha: pull.head.sha,
            base_sha: pull.base.sha,
            head_ref: pull.head.name,
            base_ref: pull.base.name,
            clone_url,
            html_url: pull.html_url,
        })
    }

    async fn get_issue(&self, item: &ItemRef) -> Result<Issue, CodeHostError> {
        let what = describe("issue", item);
        let repo_route = repo_route(&item.repo, &what)?;
        let (repo_route, what) = (&repo_route, &what);
        let (issue, repository) = self
            .with_credential(&item.repo, |c| async move {
                let issue: wire::Issue = self
                    .api
                    .get(&format!("{repo_route}/issues/{}", item.number), &c, what)
                    .await?;
                if issue.pull_request.is_some() {
                    return Err(CodeHostError::NotFound {
                        what: format!("{what} (it is a pull request)"),
                    });
                }
                let repository: wire::Repository = self
                    .api
                    .get(repo_route, &c, &format!("repository {}", item.repo))
                    .await?;
                Ok((issue, repository))
            })
            .await?;
        Ok(Issue {
            item: item.clone(),
            state: item_state(&issue.state),
            title: issue.title,
            body: issue.body,
            author: Author {
                bot: issue.user.is_bot(),
                login: issue.user.login,
            },
            labels: issue.labels.into_iter().map(|l| l.name).collect(),
            clone_url: repository.clone_url,
            html_url: issue.html_url,
        })
    }

    async fn get_posted(&self, item: &ItemRef, kind: ItemKind) -> Result<Posted, CodeHostError> {
        let what = describe(kind_name(kind), item);
        let repo_route = repo_route(&item.repo, &what)?;
        let n = item.number;
        let (repo_route, what) = (&repo_route, &what);
        self.with_credential(&item.repo, |c| async move {
            let mut bodies: Vec<(String, String)> = Vec::new();
            if kind == ItemKind::PullRequest {
                let reviews: Vec<wire::Review> = self
                    .api
                    .get_all(&format!("{repo_route}/pulls/{n}/reviews"), &c, what)
                    .await?;
                let comments: Vec<wire::ReviewComment> = self
                    .api
                    .get_all(&format!("{repo_route}/pulls/{n}/comments"), &c, what)
                    .await?;
                let submitted: std::collections::HashMap<u64, &str> = reviews
                    .iter()
                    .filter(|r| !r.is_pending())
                    .map(|r| (r.id, r.html_url.as_str()))
                    .collect();
                for review in reviews.iter().filter(|r| !r.is_pending()) {
                    bodies.push((
                        review.body.clone().unwrap_or_default(),
                        review.html_url.clone(),
                    ));
                }
                for comment in comments {
                    // A pending review's comments are not posted yet; comments without a
                    // review (older API versions) count as posted.
                    let url = match comment.pull_request_review_id {
                        Some(review) => match submitted.get(&review) {
                            Some(url) => (*url).to_owned(),
                            None if reviews.iter().any(|r| r.id == review) => continue,
                            None => comment.html_url,
                        },
                        None => comment.html_url,
                    };
                    bodies.push((comment.body, url));
                }
            }
            let comments: Vec<wire::IssueComment> = self
                .api
                .get_all(&format!("{repo_route}/issues/{n}/comments"), &c, what)
                .await?;
            for comment in comments {
                bodies.push((comment.body.unwrap_or_default(), comment.html_url));
            }
            Ok(collect_posted(
                bodies.iter().map(|(b, u)| (b.as_str(), u.as_str())),
            ))
        })
        .await
    }

    /// Posts `review`; when GitHub refuses it because verdict already has a pending review on
    /// the pull request, deletes verdict's pending reviews there and posts once more.
    async fn post_review(
        &self,
        item: &ItemRef,
        review: &wire::NewReview<'_>,
        credential: &Secret,
        what: &str,
    ) -> Result<wire::Review, CodeHostError> {
        let route = format!(
            "{}/pulls/{}/reviews",
            repo_route(&item.repo, what)?,
            item.number
        );
        match self.api.post(&route, review, credential, what).await {
            Err(e) if one_pending_review(&e) => {
                self.delete_pending_reviews(item, credential, what).await?;
                self.api.post(&route, review, credential, what).await
            }
            other => other,
        }
    }

    /// Deletes every pending review verdict's account has on the pull request (GitHub lists a
    /// pending review to its author only, so each one listed is verdict's).
    async fn delete_pending_reviews(
        &self,
        item: &ItemRef,
        credential: &Secret,
        what: &str,
    ) -> Result<(), CodeHostError> {
        let route = format!(
            "{}/pulls/{}/reviews",
            repo_route(&item.repo, what)?,
            item.number
        );
        let reviews: Vec<wire::Review> = self.api.get_all(&route, credential, what).await?;
        for review in reviews.iter().filter(|r| r.is_pending()) {
            let _: serde::de::IgnoredAny = self
                .api
                .delete(
                    &format!("{route}/{}", review.id),
                    credential,
                    &format!("pending review {} on {what}", review.id),
                )
                .await?;
        }
        Ok(())
    }

    async fn submit_review(
        &self,
        item: &ItemRef,
        draft: &ReviewDraft,
    ) -> Result<PostedItem, CodeHostError> {
        let what = describe("pull request", item);
        let review = wire::NewReview {
            commit_id: checked_sha(&draft.commit_id)?,
            body: Some(&draft.body),
            event: Some(draft.event.as_str()),
            comments: draft
                .comments
                .iter()
                .map(wire::NewReviewComment::from_draft)
                .collect(),
        };
        let (review, what) = (&review, &what);
        let posted = self
            .with_credential(&item.repo, |c| async move {
                self.post_review(item, review, &c, what).await
            })
            .await?;
        Ok(PostedItem {
            id: posted.id,
            url: posted.html_url,
        })
    }

    async fn probe_comment(
        &self,
        item: &ItemRef,
        commit: &str,
        comment: &DraftComment,
    ) -> Result<bool, CodeHostError> {
        let what = describe("pull request", item);
        let review = wire::NewReview {
            commit_id: checked_sha(commit)?,
            body: None,
            event: None,
            comments: vec![wire::NewReviewComment::from_draft(comment)],
        };
        let route = format!(
            "{}/pulls/{}/reviews",
            repo_route(&item.repo, &what)?,
            item.number
        );
        let (review, route, what) = (&review, &route, &what);
        self.with_credential(&item.repo, |c| async move {
            let pending = match self.post_review(item, review, &c, what).await {
                Ok(pending) => pending,
                Err(e) if outside_diff(&e) => return Ok(false),
                Err(e) => return Err(e),
            };
            let _: serde::de::IgnoredAny = self
                .api
                .delete(
                    &format!("{route}/{}", pending.id),
                    &c,
                    &format!("pending review {} on {what}", pending.id),
                )
                .await?;
            Ok(true)
        })
        .await
    }

    async fn post_status(&self, repo: &RepoId, status: &StatusDraft) -> Result<(), CodeHostError> {
        let what = format!("commit {} in {repo}", status.sha);
        let route = format!(
            "{}/statuses/{}",
            repo_route(repo, &what)?,
            checked_sha(&status.sha)?
        );
        let description = cut(&status.description, MAX_STATUS_DESCRIPTION_CHARS);
        let body = wire::NewStatus {
            state: status.state.as_str(),
            description,
            context: &status.context,
            target_url: status.target_url.as_deref(),
        };
        let (route, body, what) = (&route, &body, &what);
        self.with_credential(repo, |c| async move {
            let _: serde::de::IgnoredAny = self.api.post(route, body, &c, what).await?;
            Ok(())
        })
        .await
    }

    async fn post_comment(&self, item: &ItemRef, body: &str) -> Result<PostedItem, CodeHostError> {
        let what = describe("issue", item);
        let route = format!(
            "{}/issues/{}/comments",
            repo_route(&item.repo, &what)?,
            item.number
        );
        let (route, what) = (&route, &what);
        let created: wire::IssueComment = self
            .with_credential(&item.repo, |c| async move {
                self.api
                    .post(route, &wire::NewComment { body }, &c, what)
                    .await
            })
            .await?;
        Ok(PostedItem {
            id: created.id,
            url: created.html_url,
        })
    }

    async fn list_labels(&self, repo: &RepoId) -> Result<Vec<String>, CodeHostError> {
        let what = format!("repository {repo}");
        let route = format!("{}/labels", repo_route(repo, &what)?);
        let (route, what) = (&route, &what);
        let labels: Vec<wire::Label> = self
            .with_credential(
                repo,
                |c| async move { self.api.get_all(route, &c, what).await },
            )
            .await?;
        Ok(labels.into_iter().map(|l| l.name).collect())
    }

    async fn apply_labels(&self, item: &ItemRef, labels: &[String]) -> Result<(), CodeHostError> {
        let what = describe("issue", item);
        let route = format!(
            "{}/issues/{}/labels",
            repo_route(&item.repo, &what)?,
            item.number
        );
        let (route, what) = (&route, &what);
        self.with_credential(&item.repo, |c| async move {
            let _: serde::de::IgnoredAny = self
                .api
                .post(route, &wire::NewLabels { labels }, &c, what)
                .await?;
            Ok(())
        })
        .await
    }

    async fn list_organisation(&self, org: &str) -> Result<Vec<HostedRepository>, CodeHostError> {
        let what = format!("organisation {org}");
        let valid = !org.is_empty()
            && org
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid || org == "." || org == ".." {
            return Err(CodeHostError::NotFound {
                what: format!("{what} (not a GitHub organisation name)"),
            });
        }
        let route = format!("/orgs/{org}/repos?type=all&sort=full_name&direction=asc");
        let (route, what) = (&route, &what);
        let call = |c: Secret| async move {
            self.api
                .get_all::<wire::OrgRepository>(route, &c, what)
                .await
        };
        let listed = match &self.auth {
            Auth::Token(token) => call(token.clone()).await?,
            Auth::App(app) => {
                let token = app.organisation_token(&self.api, org).await?;
                match call(token.clone()).await {
                    Err(CodeHostError::Denied { status: 401, .. }) => {
                        app.invalidate(&token).await;
                        call(app.organisation_token(&self.api, org).await?).await?
                    }
                    other => other?,
                }
            }
        };
        let mut repos: Vec<HostedRepository> = listed
            .into_iter()
            .map(|r| HostedRepository {
                visibility: r
                    .visibility
                    .unwrap_or_else(|| if r.private { "private" } else { "public" }.to_owned()),
                full_name: r.full_name,
                clone_url: r.clone_url,
                html_url: r.html_url,
                default_branch: r.default_branch.unwrap_or_else(|| "HEAD".to_owned()),
                archived: r.archived,
                fork: r.fork,
                size_kib: r.size,
            })
            .collect();
        repos.sort_by_key(|r| r.full_name.to_ascii_lowercase());
        repos.dedup_by(|a, b| a.full_name.eq_ignore_ascii_case(&b.full_name));
        Ok(repos)
    }

    /// The `Authorization` header git sends for `url`, if these credentials serve it.
    async fn git_headers(&self, url: &str) -> Result<Vec<Secret>, RepoError> {
        let Some((host, repo)) = self.served(url) else {
            return Ok(Vec::new());
        };
        let fail = |reason: String, retryable: bool| RepoError::Credentials {
            host: host.clone(),
            reason,
            retryable,
        };
        let repo =
            repo.ok_or_else(|| fail("the URL names no OWNER/REPO repository".to_owned(), false))?;
        let token = self
            .credential(&repo)
            .await
            .map_err(|e| fail(e.to_string(), e.retryable()))?;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("x-access-token:{}", token.expose()));
        Ok(vec![Secret::new(format!("Authorization: Basic {basic}"))])
    }

    /// The host of an `https://` `url` on one of the git hosts, and the repository it names.
    fn served(&self, url: &str) -> Option<(String, Option<RepoId>)> {
        let parsed = reqwest::Url::parse(url).ok()?;
        if parsed.scheme() != "https" {
            return None;
        }
        let host = parsed.host_str()?.to_ascii_lowercase();
        let with_port = format!("{host}:{}", parsed.port_or_known_default().unwrap_or(443));
        if !self.git_hosts.iter().any(|h| *h == host || *h == with_port) {
            return None;
        }
        let mut segments = parsed.path_segments()?.filter(|s| !s.is_empty());
        let repo = match (segments.next(), segments.next()) {
            (Some(owner), Some(name)) => Some(RepoId {
                owner: owner.to_owned(),
                name: name.trim_end_matches(".git").to_owned(),
            }),
            _ => None,
        };
        Some((host, repo))
    }
}

impl CodeHost for GitHubCodeHost {
    fn pull_request<'a>(
        &'a self,
        item: &'a ItemRef,
    ) -> BoxFuture<'a, Result<PullRequest, CodeHostError>> {
        Box::pin(self.get_pull(item))
    }

    fn issue<'a>(&'a self, item: &'a ItemRef) -> BoxFuture<'a, Result<Issue, CodeHostError>> {
        Box::pin(self.get_issue(item))
    }

    fn posted<'a>(
        &'a self,
        item: &'a ItemRef,
        kind: ItemKind,
    ) -> BoxFuture<'a, Result<Posted, CodeHostError>> {
        Box::pin(self.get_posted(item, kind))
    }

    fn create_review<'a>(
        &'a self,
        item: &'a ItemRef,
        draft: &'a ReviewDraft,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>> {
        Box::pin(self.submit_review(item, draft))
    }

    fn accepts_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        commit: &'a str,
        comment: &'a DraftComment,
    ) -> BoxFuture<'a, Result<bool, CodeHostError>> {
        Box::pin(self.probe_comment(item, commit, comment))
    }

    fn set_status<'a>(
        &'a self,
        repo: &'a RepoId,
        status: &'a StatusDraft,
    ) -> BoxFuture<'a, Result<(), CodeHostError>> {
        Box::pin(self.post_status(repo, status))
    }

    fn create_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        body: &'a str,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>> {
        Box::pin(self.post_comment(item, body))
    }

    fn labels<'a>(&'a self, repo: &'a RepoId) -> BoxFuture<'a, Result<Vec<String>, CodeHostError>> {
        Box::pin(self.list_labels(repo))
    }

    fn add_labels<'a>(
        &'a self,
        item: &'a ItemRef,
        labels: &'a [String],
    ) -> BoxFuture<'a, Result<(), CodeHostError>> {
        Box::pin(self.apply_labels(item, labels))
    }

    fn organisation_repositories<'a>(
        &'a self,
        org: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HostedRepository>, CodeHostError>> {
        Box::pin(self.list_organisation(org))
    }
}

impl GitCredentials for GitHubCodeHost {
    fn http_headers<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Vec<Secret>, RepoError>> {
        Box::pin(self.git_headers(url))
    }
}

/// GitHub's 422 for a second pending review by the same account on one pull request.
fn one_pending_review(error: &CodeHostError) -> bool {
    rejection_says(error, "one pending review")
}

/// GitHub's 422s for an inline comment it cannot place: a line outside the diff, a range over
/// two hunks, a start not before the end (all "Pull request review thread …").
fn outside_diff(error: &CodeHostError) -> bool {
    rejection_says(error, "pull request review thread")
}

fn rejection_says(error: &CodeHostError, words: &str) -> bool {
    match error {
        CodeHostError::Rejected { message, errors } => std::iter::once(message)
            .chain(errors)
            .any(|text| text.to_ascii_lowercase().contains(words)),
        _ => false,
    }
}

/// `/repos/OWNER/NAME`, when both are names GitHub could have (letters, digits, `-`, `_`, `.`):
/// anything else would change the route.
fn repo_route(repo: &RepoId, what: &str) -> Result<String, CodeHostError> {
    let valid = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if valid(&repo.owner) && valid(&repo.name) {
        Ok(format!("/repos/{}/{}", repo.owner, repo.name))
    } else {
        Err(CodeHostError::NotFound {
            what: format!("{what} (`{repo}` is not a GitHub OWNER/REPO name)"),
        })
    }
}

/// A commit id as a route segment (hex only), else GitHub's own refusal words.
fn checked_sha(sha: &str) -> Result<&str, CodeHostError> {
    if !sha.is_empty() && sha.len() <= 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(sha)
    } else {
        Err(CodeHostError::Rejected {
            message: "Unprocessable Entity".to_owned(),
            errors: vec![format!(
                "commit `{}` is not a commit id",
                verdict_proto::redact::safe_preview(sha, 80)
            )],
        })
    }
}

/// At most `max` characters of `text`, cut on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

fn describe(kind: &str, item: &ItemRef) -> String {
    format!("{kind} {}#{}", item.repo, item.number)
}

fn kind_name(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::PullRequest => "pull request",
        ItemKind::Issue => "issue",
    }
}

fn item_state(state: &str) -> ItemState {
    if state.eq_ignore_ascii_case("open") {
        ItemState::Open
    } else {
        ItemState::Closed
    }
}

fn parse_api_url(api_url: &str) -> Result<reqwest::Url, GitHubConfigError> {
    let fail = |reason: &str| GitHubConfigError::ApiUrl {
        url: verdict_proto::redact::redact_urls(api_url),
        reason: reason.to_owned(),
    };
    let url = reqwest::Url::parse(api_url).map_err(|e| fail(&e.to_string()))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(fail("the scheme is not https (or http)"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(fail("it has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fail(
            "it carries credentials; give them as the token or App key instead",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(fail("a base URL takes no query or fragment"));
    }
    Ok(url)
}

fn check_token(token: &Secret) -> Result<(), GitHubConfigError> {
    let value = token.expose();
    if value.trim().is_empty() {
        return Err(GitHubConfigError::Token { reason: "empty" });
    }
    if value.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(GitHubConfigError::Token {
            reason: "not a single word of visible ASCII characters (a stray newline or space?)",
        });
    }
    Ok(())
}

fn key_problem(problem: &auth::KeyProblem) -> String {
    match problem {
        auth::KeyProblem::NotPem => "it is not a PEM block (no `-----BEGIN …-----`)".to_owned(),
        auth::KeyProblem::Encrypted => "it is encrypted".to_owned(),
        auth::KeyProblem::OtherKind(label) => format!("it is a `{label}`, not an RSA private key"),
        auth::KeyProblem::Base64(e) => format!("its body is not base64 ({e})"),
        auth::KeyProblem::Rejected { format, reason } => {
            format!("it is labelled {format} but is not a valid {format} RSA key ({reason})")
        }
    }
}

/// The configured git hosts (lowercase), or the default for the API at `api`.
fn git_hosts(configured: &[String], api: &reqwest::Url) -> Result<Vec<String>, GitHubConfigError> {
    if configured.is_empty() {
        let host = api.host_str().unwrap_or_default().to_ascii_lowercase();
        let host = if host == "api.github.com" {
            "github.com".to_owned()
        } else {
            host
        };
        return Ok(vec![host]);
    }
    configured
        .iter()
        .map(|h| {
            let host = h.trim().to_ascii_lowercase();
            let valid = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'));
            if valid {
                Ok(host)
            } else {
                Err(GitHubConfigError::GitHost { host: h.clone() })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn token(value: &str) -> GitHubAuth {
        GitHubAuth::Token(Secret::new(value))
    }

    #[test]
    fn bad_configurations_name_the_setting_and_the_fix() {
        let cases: Vec<(GitHubConfig, &str)> = vec![
            (
                GitHubConfig::new("api.github.com", token("t0ken1")),
                "https://HOST/api/v3",
            ),
            (
                GitHubConfig::new("ftp://ghe.example.com/api/v3", token("t0ken1")),
                "scheme",
            ),
            (
                GitHubConfig::new("https://user:pw@ghe.example.com/api/v3", token("t0ken1")),
                "carries credentials",
            ),
            (
                GitHubConfig::new(GITHUB_API_URL, token(" ")),
                "token is empty",
            ),
            (
                GitHubConfig::new(GITHUB_API_URL, token("ghp_abc\n")),
                "stray newline",
            ),
            (
                GitHubConfig::new(
                    GITHUB_API_URL,
                    GitHubAuth::App {
                        app_id: 0,
                        private_key_pem: Secret::new("x"),
                    },
                ),
                "App ID",
            ),
            (
                GitHubConfig::new(
                    GITHUB_API_URL,
                    GitHubAuth::App {
                        app_id: 5,
                        private_key_pem: Secret::new("ssh-rsa AAAA"),
                    },
                ),
                "PKCS#1, `-----BEGIN RSA PRIVATE KEY-----`) or its PKCS#8 form",
            ),
            (
                GitHubConfig {
                    timeout: Duration::ZERO,
                    ..GitHubConfig::new(GITHUB_API_URL, token("t0ken1"))
                },
                "timeout is zero",
            ),
            (
                GitHubConfig {
                    git_hosts: vec!["https://github.com/".into()],
                    ..GitHubConfig::new(GITHUB_API_URL, token("t0ken1"))
                },
                "without scheme or path",
            ),
        ];
        for (config, expected) in cases {
            let e = GitHubCodeHost::new(config).unwrap_err();
            assert!(e.to_string().contains(expected), "{e}");
        }
        let e = GitHubCodeHost::new(GitHubConfig::new(
            "https://user:hunter22@ghe.example.com",
            token("t0ken1"),
        ))
        .unwrap_err();
        assert!(!e.to_string().contains("hunter22"), "{e}");
    }

    #[test]
    fn outside_a_runtime_the_publisher_says_so() {
        let e =
            GitHubCodeHost::new(GitHubConfig::new(GITHUB_API_URL, token("t0ken1"))).unwrap_err();
        assert_eq!(e, GitHubConfigError::NoRuntime);
    }

    #[tokio::test]
    async fn git_hosts_default_to_the_web_host_and_serve_only_https_repositories() {
        let dotcom =
            GitHubCodeHost::new(GitHubConfig::new(GITHUB_API_URL, token("t0ken1"))).unwrap();
        assert_eq!(dotcom.git_hosts(), ["github.com"]);
        let ghe = GitHubCodeHost::new(GitHubConfig::new(
            "https://GHE.example.com/api/v3/",
            token("t0ken1"),
        ))
        .unwrap();
        assert_eq!(ghe.api_url(), "https://GHE.example.com/api/v3");
        assert_eq!(ghe.git_hosts(), ["ghe.example.com"]);

        let header = dotcom
            .http_headers("https://github.com/acme/shop.git")
            .await
            .unwrap();
        assert_eq!(header.len(), 1);
        assert_eq!(
            header[0].expose(),
            format!(
                "Authorization: Basic {}",
                base64::engine::general_purpose::STANDARD.encode("x-access-token:t0ken1")
            )
        );
        for other in [
            "http://github.com/acme/shop.git",
            "https://gitlab.com/acme/shop.git",
            "git@github.com:acme/shop.git",
            "/srv/repos/shop",
            "https://github.com.evil.example/acme/shop.git",
        ] {
            assert!(
                dotcom.http_headers(other).await.unwrap().is_empty(),
                "{other}"
            );
        }
        let e = dotcom
            .http_headers("https://github.com/acme")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("github.com"), "{e}");
        assert!(!format!("{dotcom:?}").contains("t0ken1"));
    }

    #[tokio::test]
    async fn a_git_host_with_a_port_matches_only_that_port() {
        let code_host = GitHubCodeHost::new(GitHubConfig {
            git_hosts: vec!["git.example.com:8443".into()],
            ..GitHubConfig::new(GITHUB_API_URL, token("t0ken1"))
        })
        .unwrap();
        let served = |url: &str| code_host.served(url).is_some();
        assert!(served("https://git.example.com:8443/a/b.git"));
        assert!(!served("https://git.example.com/a/b.git"));
    }

    #[test]
    fn descriptions_are_cut_on_a_character_boundary() {
        let long = "é".repeat(150);
        assert_eq!(cut(&long, 140).chars().count(), 140);
        assert_eq!(cut("short", 140), "short");
    }

    #[test]
    fn only_plain_names_make_routes() {
        let repo = |owner: &str, name: &str| RepoId {
            owner: owner.into(),
            name: name.into(),
        };
        assert_eq!(
            repo_route(&repo("acme", "shop.rs"), "x").unwrap(),
            "/repos/acme/shop.rs"
        );
        for (owner, name) in [
            ("acme", ".."),
            ("a/b", "c"),
            ("acme", "shop?x=1"),
            ("", "x"),
        ] {
            assert!(
                repo_route(&repo(owner, name), "x").is_err(),
                "{owner}/{name}"
            );
        }
        assert!(checked_sha("../../x").is_err());
        assert_eq!(checked_sha("abc123").unwrap(), "abc123");
    }
}
