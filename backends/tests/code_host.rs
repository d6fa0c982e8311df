//! One conformance suite for the [`CodeHost`] trait: every behaviour a caller may rely on is one
//! check function, run on `MemoryCodeHost` and on `GitHubCodeHost` against the fake GitHub
//! server of the test kit (a real HTTP server speaking GitHub's wire format under `/api/v3`,
//! which refuses what GitHub refuses), so `verdict dev` and the scheduler's tests see what
//! production sees. Seeding (pull requests with their diffs, pushes, issues, labels) and reading
//! back what was posted go through [`Harness`], one small adapter per backend.
//!
//! On both: pull requests and issues read (state, draft, bot authors, labels, head and base,
//! clone URL of the base repository); items that do not exist; a review with inline comments
//! inside the diff posted once with its event, also on an earlier head; a comment outside the
//! diff, spanning two hunks, or with its start not before its end refusing the whole review;
//! `accepts_comment` answering both ways and leaving nothing behind; `posted` finding task
//! markers and finding fingerprints in review bodies, inline comments and issue comments but
//! not in pending reviews; statuses (descriptions cut to 140 characters); comments; labels
//! listed and applied (a new one created); an organisation's repositories listed over several
//! pages with their default branch, archived and fork flags, size and visibility.
//!
//! GitHub only (the second half): App authentication (the JWT only for the installation lookup
//! and the token exchange, the token reused, refreshed near its expiry), personal tokens, the
//! GitHub Enterprise base path, rate limits with their waits, a retried read, a hanging
//! endpoint, a leftover pending review cleaned up, and no credential in any error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use verdict_backends::code_host::github::{GitHubAuth, GitHubCodeHost, GitHubConfig};
use verdict_backends::code_host::{
    Author, CodeHost, CodeHostError, HostedRepository, Issue, ItemState, MemoryCodeHost,
    PullRequest,
};
use verdict_backends::secret::Secret;
use verdict_proto::publication::{
    CommitState, DraftComment, ItemKind, ItemRef, RepoId, ReviewDraft, ReviewEvent, StatusDraft,
    fingerprint_marker, marker,
};
use verdict_testkit::github::{
    AuthKind, FakeGitHub, FakeIssue, FakePullRequest, FakeRepoTraits, GitHubRequest,
    TEST_APP_PRIVATE_KEY, app_jwt,
};

use support::wait::within;

// ---------------------------------------------------------------------------------------------
// What the suite seeds, the same for every backend

const OWNER: &str = "acme";
const REPO: &str = "shop";
const CLONE_URL: &str = "/srv/repos/acme/shop";
const BASE_SHA: &str = "1111111111111111111111111111111111111111";
const HEAD_SHA: &str = "2222222222222222222222222222222222222222";
const NEXT_SHA: &str = "3333333333333333333333333333333333333333";

/// Two hunks of `src/lib.rs`: new-side lines 1–5 and 21–24.
const DIFF: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,4 +1,5 @@
 fn a() {}
+fn b() {}
 fn c() {}
 fn d() {}
 fn e() {}
@@ -20,3 +21,4 @@
 fn x() {}
+fn y() {}
 fn z() {}
 fn w() {}
";

/// After a push: one hunk of `src/lib.rs`, new-side lines 40–42, and a new file.
const NEXT_DIFF: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 2222222..3333333 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -40,2 +40,3 @@
 fn p() {}
+fn q() {}
 fn r() {}
diff --git a/src/new.rs b/src/new.rs
new file mode 100644
index 0000000..4444444
--- /dev/null
+++ b/src/new.rs
@@ -0,0 +1,2 @@
+fn n() {}
+fn m() {}
";

/// The GitHub App the conformance run authenticates as, and its installation on acme/shop.
const APP_ID: u64 = 42;
const INSTALLATION_ID: u64 = 4242;
/// A personal access token the fake accepts (the GitHub-only token tests).
const PAT: &str = "ghp_conformanceSuiteToken0123456789abcd";

fn repo() -> RepoId {
    RepoId {
        owner: OWNER.to_owned(),
        name: REPO.to_owned(),
    }
}

fn item(number: u64) -> ItemRef {
    ItemRef {
        repo: repo(),
        number,
    }
}

/// A pull request to seed.
#[derive(Debug, Clone)]
struct PullSeed {
    number: u64,
    title: String,
    body: Option<String>,
    draft: bool,
    /// `open` or `closed`.
    state: &'static str,
    merged: bool,
    author: String,
    bot: bool,
    labels: Vec<String>,
}

impl PullSeed {
    fn new(number: u64) -> PullSeed {
        PullSeed {
            number,
            title: format!("Pull request {number}"),
            body: Some("Adds b and y.".to_owned()),
            draft: false,
            state: "open",
            merged: false,
            author: "octocat".to_owned(),
            bot: false,
            labels: Vec::new(),
        }
    }
}

/// An issue to seed.
#[derive(Debug, Clone)]
struct IssueSeed {
    number: u64,
    title: String,
    body: Option<String>,
    state: &'static str,
    author: String,
    bot: bool,
    labels: Vec<String>,
}

impl IssueSeed {
    fn new(number: u64) -> IssueSeed {
        IssueSeed {
            number,
            title: format!("Issue {number}"),
            body: Some("It breaks.".to_owned()),
            state: "open",
            author: "reporter".to_owned(),
            bot: false,
            labels: Vec::new(),
        }
    }
}

/// A submitted review as a backend holds it, in one vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenReview {
    /// `APPROVE`, `REQUEST_CHANGES` or `COMMENT`.
    event: String,
    body: String,
    commit_id: String,
    /// `(path, start_line, line, body)`.
    comments: Vec<(String, Option<u32>, u32, String)>,
}

/// A status as a backend holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenStatus {
    state: String,
    description: String,
    context: String,
    target_url: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The harness: one code host per test, and what the trait leaves to each backend

enum Backend {
    Memory(Arc<MemoryCodeHost>),
    GitHub(FakeGitHub),
}

struct Harness {
    code_host: Arc<dyn CodeHost>,
    backend: Backend,
}

impl Harness {
    fn memory() -> Harness {
        let memory = Arc::new(MemoryCodeHost::new());
        Harness {
            code_host: memory.clone(),
            backend: Backend::Memory(memory),
        }
    }

    /// `GitHubCodeHost` authenticated as the App installed on acme/shop, against a fresh fake.
    async fn github() -> Harness {
        let fake = github_fake().await;
        let code_host = Arc::new(GitHubCodeHost::new(app_config(&fake)).unwrap());
        Harness {
            code_host,
            backend: Backend::GitHub(fake),
        }
    }

    fn fake(&self) -> &FakeGitHub {
        match &self.backend {
            Backend::GitHub(fake) => fake,
            Backend::Memory(_) => panic!("a GitHub-only check ran on memory"),
        }
    }

    fn code_host(&self) -> &dyn CodeHost {
        self.code_host.as_ref()
    }

    fn add_pull_request(&self, seed: &PullSeed) {
        match &self.backend {
            Backend::Memory(memory) => {
                let pull = PullRequest {
                    item: item(seed.number),
                    state: match (seed.state, seed.merged) {
                        (_, true) => ItemState::Merged,
                        ("open", false) => ItemState::Open,
                        _ => ItemState::Closed,
                    },
                    draft: seed.draft,
                    title: seed.title.clone(),
                    body: seed.body.clone(),
                    author: Author {
                        login: seed.author.clone(),
                        bot: seed.bot,
                    },
                    labels: seed.labels.clone(),
                    head_sha: HEAD_SHA.to_owned(),
                    base_sha: BASE_SHA.to_owned(),
                    head_ref: "feature".to_owned(),
                    base_ref: "main".to_owned(),
                    clone_url: CLONE_URL.to_owned(),
                    html_url: format!("memory://{OWNER}/{REPO}/pull/{}", seed.number),
                };
                memory.add_pull_request(pull, DIFF);
            }
            Backend::GitHub(fake) => fake.add_pull_request(FakePullRequest {
                title: seed.title.clone(),
                body: seed.body.clone(),
                draft: seed.draft,
                state: seed.state.to_owned(),
                merged: seed.merged,
                author: seed.author.clone(),
                author_is_bot: seed.bot,
                labels: seed.labels.clone(),
                base_ref: "main".to_owned(),
                head_ref: "feature".to_owned(),
                ..FakePullRequest::new(OWNER, REPO, seed.number, BASE_SHA, HEAD_SHA, DIFF)
            }),
        }
    }

    fn push(&self, number: u64, head_sha: &str, diff: &str) {
        match &self.backend {
            Backend::Memory(memory) => memory.push(&item(number), head_sha, diff),
            Backend::GitHub(fake) => fake.push(OWNER, REPO, number, head_sha, diff),
        }
    }

    fn add_issue(&self, seed: &IssueSeed) {
        match &self.backend {
            Backend::Memory(memory) => memory.add_issue(Issue {
                item: item(seed.number),
                state: if seed.state == "open" {
                    ItemState::Open
                } else {
                    ItemState::Closed
                },
                title: seed.title.clone(),
                body: seed.body.clone(),
                author: Author {
                    login: seed.author.clone(),
                    bot: seed.bot,
                },
                labels: seed.labels.clone(),
                clone_url: CLONE_URL.to_owned(),
                html_url: format!("memory://{OWNER}/{REPO}/issues/{}", seed.number),
            }),
            Backend::GitHub(fake) => fake.add_issue(FakeIssue {
                title: seed.title.clone(),
                body: seed.body.clone(),
                author: seed.author.clone(),
                author_is_bot: seed.bot,
                labels: seed.labels.clone(),
                state: seed.state.to_owned(),
                ..FakeIssue::new(OWNER, REPO, seed.number)
            }),
        }
    }

    /// Adds the repositories to their organisations (on GitHub, with the App installed on them
    /// as well as on acme/shop).
    fn add_org_repositories(&self, repos: &[HostedRepository]) {
        match &self.backend {
            Backend::Memory(memory) => {
                for r in repos {
                    memory.add_repository(r.clone());
                }
            }
            Backend::GitHub(fake) => {
                let mut names = vec![(OWNER.to_owned(), REPO.to_owned())];
                for r in repos {
                    let (owner, name) = r.full_name.split_once('/').unwrap();
                    fake.add_repository(owner, name, &r.clone_url);
                    fake.describe_repository(
                        owner,
                        name,
                        FakeRepoTraits {
                            default_branch: r.default_branch.clone(),
                            archived: r.archived,
                            fork: r.fork,
                            size_kib: r.size_kib,
                            visibility: r.visibility.clone(),
                        },
                    );
                    names.push((owner.to_owned(), name.to_owned()));
                }
                let names: Vec<(&str, &str)> = names
                    .iter()
                    .map(|(o, n)| (o.as_str(), n.as_str()))
                    .collect();
                fake.install_app(APP_ID, TEST_APP_PRIVATE_KEY, INSTALLATION_ID, &names);
            }
        }
    }

    fn define_labels(&self, labels: &[&str]) {
        match &self.backend {
            Backend::Memory(memory) => memory.define_labels(&repo(), labels),
            Backend::GitHub(fake) => fake.define_labels(OWNER, REPO, labels),
        }
    }

    /// A pending review left on the pull request by verdict's own account (a probe that was
    /// interrupted, say), with `body` and one inline comment with `comment_body`. The memory
    /// host has no pending reviews: for it this leaves nothing.
    async fn leave_pending_review(&self, number: u64, body: &str, comment_body: &str) {
        match &self.backend {
            Backend::Memory(_) => {}
            Backend::GitHub(fake) => leave_pending_review(fake, number, body, comment_body).await,
        }
    }

    /// The submitted reviews on the pull request, oldest first.
    fn reviews(&self, number: u64) -> Vec<SeenReview> {
        match &self.backend {
            Backend::Memory(memory) => memory
                .reviews(&item(number))
                .into_iter()
                .map(|r| SeenReview {
                    event: r.draft.event.as_str().to_owned(),
                    body: r.draft.body,
                    commit_id: r.draft.commit_id,
                    comments: r
                        .draft
                        .comments
                        .into_iter()
                        .map(|c| (c.path, c.start_line, c.line, c.body))
                        .collect(),
                })
                .collect(),
            Backend::GitHub(fake) => fake
                .reviews(OWNER, REPO, number)
                .into_iter()
                .filter(|r| r.state != "PENDING")
                .map(|r| SeenReview {
                    event: match r.state.as_str() {
                        "APPROVED" => "APPROVE",
                        "CHANGES_REQUESTED" => "REQUEST_CHANGES",
                        "COMMENTED" => "COMMENT",
                        other => panic!("unexpected review state {other}"),
                    }
                    .to_owned(),
                    body: r.body,
                    commit_id: r.commit_id,
                    comments: r
                        .comments
                        .into_iter()
                        .map(|c| (c.path, c.start_line, c.line, c.body))
                        .collect(),
                })
                .collect(),
        }
    }

    /// How many pending reviews the pull request has.
    fn pending_reviews(&self, number: u64) -> usize {
        match &self.backend {
            Backend::Memory(_) => 0,
            Backend::GitHub(fake) => fake
                .reviews(OWNER, REPO, number)
                .iter()
                .filter(|r| r.state == "PENDING")
                .count(),
        }
    }

    fn statuses(&self, sha: &str) -> Vec<SeenStatus> {
        match &self.backend {
            Backend::Memory(memory) => memory
                .statuses(&repo())
                .into_iter()
                .filter(|s| s.sha == sha)
                .map(|s| SeenStatus {
                    state: s.state.as_str().to_owned(),
                    description: s.description,
                    context: s.context,
                    target_url: s.target_url,
                })
                .collect(),
            Backend::GitHub(fake) => fake
                .statuses(OWNER, REPO, sha)
                .into_iter()
                .map(|s| SeenStatus {
                    state: s.state,
                    description: s.description.unwrap_or_default(),
                    context: s.context,
                    target_url: s.target_url,
                })
                .collect(),
        }
    }

    /// The bodies of the top-level comments on the item, oldest first.
    fn comments(&self, number: u64) -> Vec<String> {
        match &self.backend {
            Backend::Memory(memory) => memory
                .comments(&item(number))
                .into_iter()
                .map(|c| c.body)
                .collect(),
            Backend::GitHub(fake) => fake
                .issue_comments(OWNER, REPO, number)
                .into_iter()
                .map(|c| c.body)
                .collect(),
        }
    }
}

/// A fake GitHub with acme/shop, verdict's App installed on it, and [`PAT`] accepted.
async fn github_fake() -> FakeGitHub {
    let fake = FakeGitHub::start().await;
    fake.add_repository(OWNER, REPO, CLONE_URL);
    fake.install_app(
        APP_ID,
        TEST_APP_PRIVATE_KEY,
        INSTALLATION_ID,
        &[(OWNER, REPO)],
    );
    fake.accept_token(PAT);
    fake
}

fn app_config(fake: &FakeGitHub) -> GitHubConfig {
    GitHubConfig::new(
        fake.api_url(),
        GitHubAuth::App {
            app_id: APP_ID,
            private_key_pem: Secret::new(TEST_APP_PRIVATE_KEY),
        },
    )
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A pending review by verdict's own account (the App's installation), made over the wire as an
/// interrupted probe would have left it.
async fn leave_pending_review(fake: &FakeGitHub, number: u64, body: &str, comment_body: &str) {
    let api = fake.api_url();
    let issued: serde_json::Value = http()
        .post(format!(
            "{api}/app/installations/{INSTALLATION_ID}/access_tokens"
        ))
        .bearer_auth(app_jwt(APP_ID, TEST_APP_PRIVATE_KEY))
        .header("user-agent", "conformance-suite")
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = issued["token"].as_str().unwrap();
    let created: serde_json::Value = http()
        .post(format!("{api}/repos/{OWNER}/{REPO}/pulls/{number}/reviews"))
        .bearer_auth(token)
        .header("user-agent", "conformance-suite")
        .json(&serde_json::json!({
            "commit_id": HEAD_SHA,
            "body": body,
            "comments": [{"path": "src/lib.rs", "line": 2, "side": "RIGHT", "body": comment_body}],
        }))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["state"], "PENDING", "{created}");
}

macro_rules! on_every_publisher {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test]
            async fn memory() {
                let harness = super::Harness::memory();
                super::$check(&harness).await;
            }

            #[tokio::test]
            async fn github() {
                let harness = super::Harness::github().await;
                super::$check(&harness).await;
            }
        }
    )*};
}

on_every_publisher!(
    pull_requests_are_read_as_the_host_has_them,
    issues_are_read_as_the_host_has_them,
    items_that_do_not_exist_are_not_found,
    a_review_inside_the_diff_is_posted_once_with_its_event,
    a_review_on_an_earlier_head_is_still_accepted,
    one_comment_outside_the_diff_refuses_the_whole_review,
    accepts_comment_answers_and_leaves_nothing_behind,
    posted_finds_markers_but_not_in_pending_reviews,
    statuses_are_set_with_descriptions_cut_to_140_characters,
    comments_are_posted_on_issues_and_pull_requests,
    labels_are_listed_and_applied_and_new_ones_created,
    an_organisations_repositories_are_listed_over_every_page,
);

/// 130 repositories of `bigorg` (more than one page of 100): every tenth archived, every
/// seventh a fork, every fifth public, some with another default branch.
fn org_repositories(html_root: &str) -> Vec<HostedRepository> {
    (0..130)
        .map(|i| HostedRepository {
            full_name: format!("bigorg/repo-{i:03}"),
            clone_url: format!("/srv/repos/bigorg/repo-{i:03}"),
            html_url: format!("{html_root}/bigorg/repo-{i:03}"),
            default_branch: if i % 11 == 0 { "trunk" } else { "main" }.to_owned(),
            archived: i % 10 == 3,
            fork: i % 7 == 2,
            size_kib: 10 + i,
            visibility: if i % 5 == 0 { "public" } else { "private" }.to_owned(),
        })
        .collect()
}

async fn an_organisations_repositories_are_listed_over_every_page(h: &Harness) {
    let html_root = match &h.backend {
        Backend::GitHub(fake) => fake.web_url(),
        Backend::Memory(_) => "https://github.example".to_owned(),
    };
    let seeded = org_repositories(html_root.trim_end_matches('/'));
    // Seeded out of order: the listing is by full name whatever the host's own order.
    let mut shuffled = seeded.clone();
    shuffled.reverse();
    h.add_org_repositories(&shuffled);
    let listed = h
        .code_host()
        .organisation_repositories("BigOrg")
        .await
        .unwrap();
    assert_eq!(listed, seeded);
    assert_eq!(listed.iter().filter(|r| r.archived).count(), 13);
    assert_eq!(listed.iter().filter(|r| r.fork).count(), 19);
    assert_not_found(
        h.code_host().organisation_repositories("no-such-org").await,
        "organisation no-such-org",
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn comment(start_line: Option<u32>, line: u32, body: &str) -> DraftComment {
    DraftComment {
        path: "src/lib.rs".to_owned(),
        start_line,
        line,
        body: body.to_owned(),
    }
}

fn review(event: ReviewEvent, body: &str, comments: Vec<DraftComment>) -> ReviewDraft {
    ReviewDraft {
        commit_id: HEAD_SHA.to_owned(),
        event,
        body: body.to_owned(),
        comments,
    }
}

fn assert_not_found(result: Result<impl std::fmt::Debug, CodeHostError>, what: &str) {
    match result {
        Err(CodeHostError::NotFound { what: said }) => {
            assert!(said.contains(what), "`{said}` names `{what}`");
        }
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

/// GitHub's refusal of an inline comment it cannot place.
fn assert_refused_placement(result: Result<impl std::fmt::Debug, CodeHostError>) {
    match result {
        Err(CodeHostError::Rejected { message, errors }) => {
            let said = format!("{message} {}", errors.join(" "));
            assert!(said.contains("Pull request review thread"), "{said}");
        }
        other => panic!("expected a 422 rejection, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

async fn pull_requests_are_read_as_the_host_has_them(h: &Harness) {
    let open = PullSeed {
        draft: true,
        author: "renovate[bot]".to_owned(),
        bot: true,
        labels: vec!["dependencies".to_owned(), "ui".to_owned()],
        ..PullSeed::new(7)
    };
    h.add_pull_request(&open);
    h.add_pull_request(&PullSeed {
        state: "closed",
        merged: true,
        body: None,
        ..PullSeed::new(8)
    });
    h.add_pull_request(&PullSeed {
        state: "closed",
        ..PullSeed::new(9)
    });

    let pull = h.code_host().pull_request(&item(7)).await.unwrap();
    assert_eq!(pull.item, item(7));
    assert_eq!(pull.state, ItemState::Open);
    assert!(pull.draft);
    assert_eq!(pull.title, "Pull request 7");
    assert_eq!(pull.body.as_deref(), Some("Adds b and y."));
    assert_eq!(
        pull.author,
        Author {
            login: "renovate[bot]".to_owned(),
            bot: true
        }
    );
    assert_eq!(pull.labels, ["dependencies", "ui"]);
    assert_eq!(
        (pull.head_sha.as_str(), pull.base_sha.as_str()),
        (HEAD_SHA, BASE_SHA)
    );
    assert_eq!(
        (pull.head_ref.as_str(), pull.base_ref.as_str()),
        ("feature", "main")
    );
    assert_eq!(pull.clone_url, CLONE_URL, "the base repository's");
    assert!(
        pull.html_url.ends_with("/acme/shop/pull/7"),
        "{}",
        pull.html_url
    );

    let merged = h.code_host().pull_request(&item(8)).await.unwrap();
    assert_eq!(merged.state, ItemState::Merged);
    assert_eq!(merged.body, None);
    assert!(!merged.draft && !merged.author.bot);
    let closed = h.code_host().pull_request(&item(9)).await.unwrap();
    assert_eq!(closed.state, ItemState::Closed);

    h.push(7, NEXT_SHA, NEXT_DIFF);
    let pushed = h.code_host().pull_request(&item(7)).await.unwrap();
    assert_eq!(pushed.head_sha, NEXT_SHA, "the head moves with a push");
    assert_eq!(pushed.base_sha, BASE_SHA);
}

async fn issues_are_read_as_the_host_has_them(h: &Harness) {
    h.add_issue(&IssueSeed {
        labels: vec!["bug".to_owned()],
        ..IssueSeed::new(3)
    });
    h.add_issue(&IssueSeed {
        state: "closed",
        author: "dependabot[bot]".to_owned(),
        bot: true,
        body: None,
        ..IssueSeed::new(4)
    });
    let issue = h.code_host().issue(&item(3)).await.unwrap();
    assert_eq!(issue.item, item(3));
    assert_eq!(issue.state, ItemState::Open);
    assert_eq!(issue.title, "Issue 3");
    assert_eq!(issue.body.as_deref(), Some("It breaks."));
    assert_eq!(
        issue.author,
        Author {
            login: "reporter".to_owned(),
            bot: false
        }
    );
    assert_eq!(issue.labels, ["bug"]);
    assert_eq!(issue.clone_url, CLONE_URL);
    assert!(
        issue.html_url.ends_with("/acme/shop/issues/3"),
        "{}",
        issue.html_url
    );
    let closed = h.code_host().issue(&item(4)).await.unwrap();
    assert_eq!(closed.state, ItemState::Closed);
    assert!(closed.author.bot);
    assert_eq!(closed.body, None);
}

async fn items_that_do_not_exist_are_not_found(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    h.add_issue(&IssueSeed::new(3));
    let p = h.code_host();
    assert_not_found(p.pull_request(&item(99)).await, "acme/shop#99");
    assert_not_found(p.issue(&item(98)).await, "acme/shop#98");
    assert_not_found(p.pull_request(&item(3)).await, "acme/shop#3");
    assert_not_found(p.issue(&item(7)).await, "acme/shop#7");
    assert_not_found(
        p.posted(&item(99), ItemKind::PullRequest).await,
        "acme/shop#99",
    );
    assert_not_found(
        p.posted(&item(3), ItemKind::PullRequest).await,
        "acme/shop#3",
    );
    assert_not_found(
        p.create_review(
            &item(99),
            &review(ReviewEvent::Comment, "Looks fine.", vec![]),
        )
        .await,
        "acme/shop#99",
    );
    assert_not_found(p.create_comment(&item(99), "hello").await, "acme/shop#99");
    assert_not_found(
        p.add_labels(&item(99), &["bug".to_owned()]).await,
        "acme/shop#99",
    );
    let elsewhere = RepoId {
        owner: OWNER.to_owned(),
        name: "no-such-repo".to_owned(),
    };
    assert_not_found(p.labels(&elsewhere).await, "acme/no-such-repo");
}

async fn a_review_inside_the_diff_is_posted_once_with_its_event(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    let draft = review(
        ReviewEvent::RequestChanges,
        &format!("Two problems.\n{}", marker("task-1")),
        vec![
            comment(None, 2, "b is unused"),
            comment(Some(21), 23, "y, z and w repeat x"),
        ],
    );
    let posted = h.code_host().create_review(&item(7), &draft).await.unwrap();
    assert!(posted.url.contains("/acme/shop/pull/7"), "{}", posted.url);
    assert_eq!(
        h.reviews(7),
        [SeenReview {
            event: "REQUEST_CHANGES".to_owned(),
            body: draft.body.clone(),
            commit_id: HEAD_SHA.to_owned(),
            comments: vec![
                ("src/lib.rs".to_owned(), None, 2, "b is unused".to_owned()),
                (
                    "src/lib.rs".to_owned(),
                    Some(21),
                    23,
                    "y, z and w repeat x".to_owned()
                ),
            ],
        }]
    );

    let approve = review(ReviewEvent::Approve, "", vec![]);
    h.code_host()
        .create_review(&item(7), &approve)
        .await
        .unwrap();
    let events: Vec<String> = h.reviews(7).into_iter().map(|r| r.event).collect();
    assert_eq!(events, ["REQUEST_CHANGES", "APPROVE"]);

    // A comment or request for changes needs words.
    let wordless = review(ReviewEvent::Comment, " ", vec![]);
    let e = h
        .code_host()
        .create_review(&item(7), &wordless)
        .await
        .unwrap_err();
    assert!(matches!(e, CodeHostError::Rejected { .. }), "{e:?}");
    assert_eq!(h.reviews(7).len(), 2);
}

async fn a_review_on_an_earlier_head_is_still_accepted(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    h.push(7, NEXT_SHA, NEXT_DIFF);
    // The old head's diff still decides where its review's comments may go.
    let old = review(
        ReviewEvent::Comment,
        "On the old head.",
        vec![comment(None, 22, "y")],
    );
    h.code_host().create_review(&item(7), &old).await.unwrap();
    let new = ReviewDraft {
        commit_id: NEXT_SHA.to_owned(),
        comments: vec![DraftComment {
            path: "src/new.rs".to_owned(),
            start_line: Some(1),
            line: 2,
            body: "n and m".to_owned(),
        }],
        ..review(ReviewEvent::Comment, "On the new head.", vec![])
    };
    h.code_host().create_review(&item(7), &new).await.unwrap();
    let commits: Vec<String> = h.reviews(7).into_iter().map(|r| r.commit_id).collect();
    assert_eq!(commits, [HEAD_SHA, NEXT_SHA]);

    // The old head's lines are not the new head's.
    let stale = ReviewDraft {
        commit_id: NEXT_SHA.to_owned(),
        ..review(
            ReviewEvent::Comment,
            "Mixed up.",
            vec![comment(None, 22, "y")],
        )
    };
    assert_refused_placement(h.code_host().create_review(&item(7), &stale).await);
    // A commit that was never a head of the pull request.
    let foreign = ReviewDraft {
        commit_id: "4444444444444444444444444444444444444444".to_owned(),
        ..review(ReviewEvent::Comment, "Elsewhere.", vec![])
    };
    let e = h
        .code_host()
        .create_review(&item(7), &foreign)
        .await
        .unwrap_err();
    assert!(matches!(e, CodeHostError::Rejected { .. }), "{e:?}");
    assert_eq!(h.reviews(7).len(), 2);
}

async fn one_comment_outside_the_diff_refuses_the_whole_review(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    let inside = comment(None, 2, "fine");
    let refused = [
        ("outside every hunk", comment(None, 10, "line 10")),
        ("spanning two hunks", comment(Some(4), 22, "4 to 22")),
        ("start equal to end", comment(Some(3), 3, "3 to 3")),
        ("start after end", comment(Some(5), 3, "5 to 3")),
        (
            "in a file the diff does not touch",
            DraftComment {
                path: "src/other.rs".to_owned(),
                ..comment(None, 2, "other")
            },
        ),
    ];
    for (case, bad) in refused {
        let draft = review(
            ReviewEvent::Comment,
            "Mixed.",
            vec![inside.clone(), bad.clone()],
        );
        let result = h.code_host().create_review(&item(7), &draft).await;
        assert!(result.is_err(), "{case}: {result:?}");
        assert_refused_placement(result);
        assert_eq!(h.reviews(7), [], "{case}: nothing posted");
        assert_eq!(h.pending_reviews(7), 0, "{case}: nothing left pending");
    }
}

async fn accepts_comment_answers_and_leaves_nothing_behind(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    let p = h.code_host();
    let cases = [
        (comment(None, 2, "added line"), true),
        (comment(None, 1, "context line"), true),
        (comment(Some(21), 24, "a whole hunk"), true),
        (comment(None, 10, "between the hunks"), false),
        (comment(Some(4), 22, "over two hunks"), false),
        (comment(Some(3), 3, "start equal to end"), false),
        (comment(None, 6, "just past the first hunk"), false),
    ];
    for (draft, accepted) in cases {
        let answer = p.accepts_comment(&item(7), HEAD_SHA, &draft).await.unwrap();
        assert_eq!(answer, accepted, "{}", draft.body);
    }
    assert_eq!(h.reviews(7), [], "nothing submitted");
    assert_eq!(h.pending_reviews(7), 0, "nothing left pending");
    assert!(
        h.code_host()
            .posted(&item(7), ItemKind::PullRequest)
            .await
            .unwrap()
            .findings
            .is_empty()
    );
    // A commit that is not a head: it cannot tell.
    let e = p
        .accepts_comment(
            &item(7),
            "4444444444444444444444444444444444444444",
            &comment(None, 2, "x"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, CodeHostError::Rejected { .. }), "{e:?}");
    assert_not_found(
        p.accepts_comment(&item(99), HEAD_SHA, &comment(None, 2, "x"))
            .await,
        "acme/shop#99",
    );
}

async fn posted_finds_markers_but_not_in_pending_reviews(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    h.add_issue(&IssueSeed::new(3));
    let p = h.code_host();
    let empty = p.posted(&item(7), ItemKind::PullRequest).await.unwrap();
    assert!(empty.tasks.is_empty() && empty.findings.is_empty());

    let draft = review(
        ReviewEvent::Comment,
        &format!(
            "Review.\n{}\n{}",
            marker("task-review"),
            fingerprint_marker("fp-body")
        ),
        vec![comment(
            None,
            2,
            &format!("b is unused\n{}", fingerprint_marker("fp-inline")),
        )],
    );
    let review_url = p.create_review(&item(7), &draft).await.unwrap().url;
    let comment_url = p
        .create_comment(
            &item(7),
            &format!(
                "Degraded.\n{}\n{}",
                marker("task-comment"),
                fingerprint_marker("fp-comment")
            ),
        )
        .await
        .unwrap()
        .url;
    h.leave_pending_review(
        7,
        &format!("Pending.\n{}", marker("task-pending")),
        &format!("pending\n{}", fingerprint_marker("fp-pending")),
    )
    .await;

    let posted = p.posted(&item(7), ItemKind::PullRequest).await.unwrap();
    assert_eq!(
        posted.tasks.into_iter().collect::<Vec<_>>(),
        [
            ("task-comment".to_owned(), comment_url),
            ("task-review".to_owned(), review_url),
        ]
    );
    assert_eq!(
        posted.findings.into_iter().collect::<Vec<_>>(),
        ["fp-body", "fp-comment", "fp-inline"]
    );

    let issue_url = p
        .create_comment(&item(3), &format!("Analysis.\n{}", marker("task-issue")))
        .await
        .unwrap()
        .url;
    let posted = p.posted(&item(3), ItemKind::Issue).await.unwrap();
    assert_eq!(
        posted.tasks.into_iter().collect::<Vec<_>>(),
        [("task-issue".to_owned(), issue_url)]
    );
    assert!(posted.findings.is_empty());
}

async fn statuses_are_set_with_descriptions_cut_to_140_characters(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    let p = h.code_host();
    let running = StatusDraft {
        sha: HEAD_SHA.to_owned(),
        state: CommitState::Pending,
        description: "Review running".to_owned(),
        context: "verdict/review".to_owned(),
        target_url: Some("https://verdict.example/tasks/t-1".to_owned()),
    };
    p.set_status(&repo(), &running).await.unwrap();
    let long = "é".repeat(150);
    let done = StatusDraft {
        state: CommitState::Failure,
        description: format!("{long}…"),
        target_url: None,
        ..running.clone()
    };
    p.set_status(&repo(), &done).await.unwrap();
    assert_eq!(
        h.statuses(HEAD_SHA),
        [
            SeenStatus {
                state: "pending".to_owned(),
                description: "Review running".to_owned(),
                context: "verdict/review".to_owned(),
                target_url: Some("https://verdict.example/tasks/t-1".to_owned()),
            },
            SeenStatus {
                state: "failure".to_owned(),
                description: "é".repeat(140),
                context: "verdict/review".to_owned(),
                target_url: None,
            },
        ]
    );
    // The base is a commit of the repository too; a commit it does not have is refused.
    let on_base = StatusDraft {
        sha: BASE_SHA.to_owned(),
        ..running.clone()
    };
    p.set_status(&repo(), &on_base).await.unwrap();
    assert_eq!(h.statuses(BASE_SHA).len(), 1);
    let unknown = StatusDraft {
        sha: "5555555555555555555555555555555555555555".to_owned(),
        ..running
    };
    let e = p.set_status(&repo(), &unknown).await.unwrap_err();
    assert!(matches!(e, CodeHostError::Rejected { .. }), "{e:?}");
}

async fn comments_are_posted_on_issues_and_pull_requests(h: &Harness) {
    h.add_pull_request(&PullSeed::new(7));
    h.add_issue(&IssueSeed::new(3));
    let p = h.code_host();
    let on_issue = p.create_comment(&item(3), "Analysis: …").await.unwrap();
    let on_pull = p.create_comment(&item(7), "Neutral note.").await.unwrap();
    assert_ne!(on_issue.id, on_pull.id);
    assert!(
        on_issue.url.contains("/acme/shop/issues/3"),
        "{}",
        on_issue.url
    );
    assert_eq!(h.comments(3), ["Analysis: …"]);
    assert_eq!(h.comments(7), ["Neutral note."]);
}

async fn labels_are_listed_and_applied_and_new_ones_created(h: &Harness) {
    h.add_issue(&IssueSeed {
        labels: vec!["triage".to_owned()],
        ..IssueSeed::new(3)
    });
    h.add_pull_request(&PullSeed::new(7));
    h.define_labels(&["bug", "triage", "ui"]);
    let p = h.code_host();
    let mut listed = p.labels(&repo()).await.unwrap();
    listed.sort();
    assert_eq!(listed, ["bug", "triage", "ui"]);

    p.add_labels(&item(3), &["bug".to_owned(), "brand-new".to_owned()])
        .await
        .unwrap();
    let mut shown = p.issue(&item(3)).await.unwrap().labels;
    shown.sort();
    assert_eq!(shown, ["brand-new", "bug", "triage"]);
    let mut listed = p.labels(&repo()).await.unwrap();
    listed.sort();
    assert_eq!(listed, ["brand-new", "bug", "triage", "ui"], "created");

    p.add_labels(&item(7), &["ui".to_owned()]).await.unwrap();
    assert_eq!(p.pull_request(&item(7)).await.unwrap().labels, ["ui"]);
}

// ---------------------------------------------------------------------------------------------
// GitHub only: authentication, the wire, failures

/// A `GitHubCodeHost` on `fake` with `auth` and `timeout`.
fn code_host(fake: &FakeGitHub, auth: GitHubAuth, timeout: Duration) -> GitHubCodeHost {
    GitHubCodeHost::new(GitHubConfig {
        timeout,
        ..GitHubConfig::new(fake.api_url(), auth)
    })
    .unwrap()
}

fn pat() -> GitHubAuth {
    GitHubAuth::Token(Secret::new(PAT))
}

fn requests_to(fake: &FakeGitHub, method: &str, path: &str) -> Vec<GitHubRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

const PULL_7: &str = "/repos/acme/shop/pulls/7";
const LOOKUP: &str = "/repos/acme/shop/installation";
const EXCHANGE: &str = "/app/installations/4242/access_tokens";

#[tokio::test]
async fn the_app_jwt_only_finds_the_installation_and_gets_one_token_for_many_calls() {
    let h = Harness::github().await;
    h.add_pull_request(&PullSeed::new(7));
    h.add_issue(&IssueSeed::new(3));
    h.define_labels(&["bug"]);
    // Many callers at once share one lookup and one exchange.
    let p = h.code_host.clone();
    let calls = (0..8).map(|_| {
        let p = p.clone();
        tokio::spawn(async move { p.pull_request(&item(7)).await })
    });
    for call in calls {
        within("a pull request read", call).await.unwrap().unwrap();
    }
    for _ in 0..3 {
        h.code_host().issue(&item(3)).await.unwrap();
        h.code_host().labels(&repo()).await.unwrap();
        h.code_host()
            .posted(&item(7), ItemKind::PullRequest)
            .await
            .unwrap();
    }
    let fake = h.fake();
    assert_eq!(fake.tokens_issued(), 1);
    let requests = fake.requests();
    let jwt: Vec<(&str, &str)> = requests
        .iter()
        .filter(|r| r.auth == AuthKind::Jwt)
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(jwt, [("GET", LOOKUP), ("POST", EXCHANGE)]);
    let others: Vec<&GitHubRequest> = requests
        .iter()
        .filter(|r| r.auth != AuthKind::Jwt)
        .collect();
    assert!(others.len() > 20, "{}", others.len());
    let token = others[0].token.clone().unwrap();
    assert!(token.starts_with("ghs_"), "an installation token");
    for r in others {
        assert_eq!(r.auth, AuthKind::Installation, "{} {}", r.method, r.path);
        assert_eq!(r.token.as_deref(), Some(token.as_str()), "the same token");
    }
}

#[tokio::test]
async fn an_installation_token_near_its_expiry_is_replaced() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let p = GitHubCodeHost::new(app_config(&fake)).unwrap();
    // Tokens living less than the five minutes of margin are never reused.
    fake.set_token_lifetime(Duration::from_secs(4 * 60));
    p.pull_request(&item(7)).await.unwrap();
    p.pull_request(&item(7)).await.unwrap();
    assert_eq!(fake.tokens_issued(), 2);
    fake.set_token_lifetime(Duration::from_secs(3600));
    p.pull_request(&item(7)).await.unwrap();
    p.pull_request(&item(7)).await.unwrap();
    p.pull_request(&item(7)).await.unwrap();
    assert_eq!(fake.tokens_issued(), 3);
    assert_eq!(
        requests_to(&fake, "GET", LOOKUP).len(),
        1,
        "the installation is looked up once"
    );

    // A token GitHub stops honouring early (401) is replaced and the call made once more.
    fake.expire_tokens();
    let pull = p.pull_request(&item(7)).await.unwrap();
    assert_eq!(pull.head_sha, HEAD_SHA);
    assert_eq!(fake.tokens_issued(), 4);
    let reads = requests_to(&fake, "GET", PULL_7);
    let last_two: Vec<AuthKind> = reads[reads.len() - 2..].iter().map(|r| r.auth).collect();
    assert_eq!(last_two, [AuthKind::Installation, AuthKind::Installation]);
    assert_ne!(reads[reads.len() - 2].token, reads[reads.len() - 1].token);
}

#[tokio::test]
async fn an_app_not_installed_on_the_repository_is_not_found_and_says_so() {
    let fake = github_fake().await;
    fake.add_repository(OWNER, "elsewhere", "/srv/repos/acme/elsewhere");
    let p = GitHubCodeHost::new(app_config(&fake)).unwrap();
    let elsewhere = ItemRef {
        repo: RepoId {
            owner: OWNER.to_owned(),
            name: "elsewhere".to_owned(),
        },
        number: 1,
    };
    let e = p.pull_request(&elsewhere).await.unwrap_err();
    assert!(matches!(e, CodeHostError::NotFound { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("GitHub App 42 on acme/elsewhere"), "{text}");
    assert!(text.contains("is installed on the repository"), "{text}");
    assert_eq!(fake.tokens_issued(), 0);
}

#[tokio::test]
async fn an_organisation_is_listed_with_type_all_a_hundred_a_page_along_the_link_header() {
    let h = Harness::github().await;
    h.add_org_repositories(&org_repositories(&h.fake().web_url()));
    let listed = h
        .code_host()
        .organisation_repositories("bigorg")
        .await
        .unwrap();
    assert_eq!(listed.len(), 130);
    let pages = requests_to(h.fake(), "GET", "/orgs/bigorg/repos");
    assert_eq!(pages.len(), 2, "{pages:#?}");
    let first = pages[0].query.as_deref().unwrap();
    assert!(first.contains("type=all"), "{first}");
    assert!(first.contains("per_page=100"), "{first}");
    assert!(pages[1].query.as_deref().unwrap().contains("page=2"));
    // The App's installation is found through the organisation, once.
    assert_eq!(
        requests_to(h.fake(), "GET", "/orgs/bigorg/installation").len(),
        1
    );
}

#[tokio::test]
async fn a_personal_token_is_used_as_is() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let p = code_host(&fake, pat(), Duration::from_secs(10));
    let pull = p.pull_request(&item(7)).await.unwrap();
    assert_eq!(pull.head_sha, HEAD_SHA);
    p.create_comment(&item(7), "hello").await.unwrap();
    assert_eq!(fake.tokens_issued(), 0);
    for r in fake.requests() {
        assert_eq!(r.auth, AuthKind::Token, "{} {}", r.method, r.path);
        assert_eq!(r.token.as_deref(), Some(PAT));
    }
    assert_eq!(fake.issue_comments(OWNER, REPO, 7)[0].user, "fake-user");

    let wrong = code_host(
        &fake,
        GitHubAuth::Token(Secret::new("ghp_notAcceptedAnywhere0123456789abcdef")),
        Duration::from_secs(10),
    );
    let e = wrong.pull_request(&item(7)).await.unwrap_err();
    assert!(
        matches!(e, CodeHostError::Denied { status: 401, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("Bad credentials"), "{e}");
}

#[tokio::test]
async fn the_enterprise_base_path_is_kept_and_the_user_agent_is_verdicts() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    // 150 labels: the second page comes from GitHub's absolute `Link` URL.
    let many: Vec<String> = (0..150).map(|i| format!("label-{i:03}")).collect();
    fake.define_labels(
        OWNER,
        REPO,
        &many.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let slash =
        GitHubCodeHost::new(GitHubConfig::new(format!("{}/", fake.api_url()), pat())).unwrap();
    assert!(fake.api_url().ends_with("/api/v3"));
    slash.pull_request(&item(7)).await.unwrap();
    let mut labels = slash.labels(&repo()).await.unwrap();
    labels.sort();
    assert_eq!(labels, many, "every page");
    let app = GitHubCodeHost::new(app_config(&fake)).unwrap();
    app.pull_request(&item(7)).await.unwrap();

    let requests = fake.requests();
    let label_pages: Vec<Option<String>> = requests
        .iter()
        .filter(|r| r.path == "/repos/acme/shop/labels")
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(label_pages.len(), 2, "{label_pages:?}");
    for r in &requests {
        assert!(r.under_api_root, "{} {} missed /api/v3", r.method, r.path);
        let agents: Vec<&str> = r
            .headers
            .iter()
            .filter(|(n, _)| n == "user-agent")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            agents,
            [concat!("verdict/", env!("CARGO_PKG_VERSION"))],
            "{} {}",
            r.method,
            r.path
        );
        assert_eq!(r.header("accept"), Some("application/vnd.github+json"));
        assert_eq!(r.header("x-github-api-version"), Some("2022-11-28"));
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn rate_limits_are_reported_with_their_waits_and_not_retried() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let p = code_host(&fake, pat(), Duration::from_secs(10));
    let reset = (unix_now() + 90).to_string();
    fake.fail_next_with_headers(
        "GET",
        PULL_7,
        403,
        &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &reset)],
        serde_json::json!({"message": "API rate limit exceeded for user ID 1.",
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
    );
    let e = p.pull_request(&item(7)).await.unwrap_err();
    let CodeHostError::RateLimited {
        retry_after,
        message,
    } = &e
    else {
        panic!("{e:?}");
    };
    let wait = retry_after.unwrap();
    assert!(
        wait <= Duration::from_secs(90) && wait >= Duration::from_secs(80),
        "{wait:?}"
    );
    assert!(message.contains("rate limit exceeded"), "{message}");
    assert!(e.retryable());

    fake.fail_next_with_headers(
        "GET",
        PULL_7,
        429,
        &[("retry-after", "17")],
        serde_json::json!({"message": "You have exceeded a secondary rate limit."}),
    );
    let e = p.pull_request(&item(7)).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(17)), "{e:?}");

    // A 403 with retry-after is GitHub's secondary limit too; one without is permissions.
    fake.fail_next_with_headers(
        "POST",
        "/repos/acme/shop/issues/7/comments",
        403,
        &[("retry-after", "5")],
        serde_json::json!({"message": "You have exceeded a secondary rate limit."}),
    );
    let e = p.create_comment(&item(7), "x").await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(5)), "{e:?}");
    fake.fail_next(
        "POST",
        "/repos/acme/shop/issues/7/comments",
        403,
        serde_json::json!({"message": "Resource not accessible by integration"}),
    );
    let e = p.create_comment(&item(7), "x").await.unwrap_err();
    assert!(
        matches!(e, CodeHostError::Denied { status: 403, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("Resource not accessible"), "{e}");

    assert_eq!(requests_to(&fake, "GET", PULL_7).len(), 2, "no retry");
    assert!(fake.issue_comments(OWNER, REPO, 7).is_empty());
}

#[tokio::test]
async fn a_failed_read_is_retried_and_a_failed_write_is_not() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let p = code_host(&fake, pat(), Duration::from_secs(10));
    fake.fail_next(
        "GET",
        PULL_7,
        502,
        serde_json::json!({"message": "Server Error"}),
    );
    let pull = p.pull_request(&item(7)).await.unwrap();
    assert_eq!(pull.head_sha, HEAD_SHA);
    assert_eq!(requests_to(&fake, "GET", PULL_7).len(), 2);

    // Three failures in a row exhaust the retries.
    for _ in 0..3 {
        fake.fail_next(
            "GET",
            PULL_7,
            503,
            serde_json::json!({"message": "Unavailable"}),
        );
    }
    let e = p.pull_request(&item(7)).await.unwrap_err();
    assert!(matches!(e, CodeHostError::Unavailable { .. }), "{e:?}");
    assert_eq!(requests_to(&fake, "GET", PULL_7).len(), 5);

    let comments = "/repos/acme/shop/issues/7/comments";
    fake.fail_next(
        "POST",
        comments,
        502,
        serde_json::json!({"message": "Server Error"}),
    );
    let e = p.create_comment(&item(7), "once").await.unwrap_err();
    assert!(matches!(e, CodeHostError::Unavailable { .. }), "{e:?}");
    assert!(e.retryable());
    assert_eq!(
        requests_to(&fake, "POST", comments).len(),
        1,
        "a write is not retried"
    );
}

#[tokio::test]
async fn a_hanging_endpoint_is_unavailable_within_the_timeout() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let p = code_host(&fake, pat(), Duration::from_millis(300));
    fake.hang("GET", PULL_7);
    fake.hang("POST", "/repos/acme/shop/pulls/7/reviews");
    let e = within("a read of a hanging endpoint", p.pull_request(&item(7)))
        .await
        .unwrap_err();
    assert!(matches!(e, CodeHostError::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("pull request acme/shop#7"), "{e}");
    let draft = review(ReviewEvent::Comment, "Hello.", vec![]);
    let e = within(
        "a write to a hanging endpoint",
        p.create_review(&item(7), &draft),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CodeHostError::Unavailable { .. }), "{e:?}");
    assert_eq!(
        requests_to(&fake, "POST", "/repos/acme/shop/pulls/7/reviews").len(),
        1
    );
}

#[tokio::test]
async fn a_leftover_pending_review_is_deleted_before_the_review_is_posted() {
    let h = Harness::github().await;
    h.add_pull_request(&PullSeed::new(7));
    h.leave_pending_review(7, "interrupted probe", "probe")
        .await;
    assert_eq!(h.pending_reviews(7), 1);
    let draft = review(
        ReviewEvent::Comment,
        "The review.",
        vec![comment(None, 2, "b")],
    );
    h.code_host().create_review(&item(7), &draft).await.unwrap();
    assert_eq!(h.pending_reviews(7), 0);
    assert_eq!(h.reviews(7).len(), 1);
    let fake = h.fake();
    let reviews = "/repos/acme/shop/pulls/7/reviews";
    let sequence: Vec<(String, String)> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(reviews) && r.auth == AuthKind::Installation)
        .map(|r| (r.method, r.path))
        .collect();
    let pending_id = sequence[3]
        .1
        .trim_start_matches(&format!("{reviews}/"))
        .to_owned();
    assert!(pending_id.parse::<u64>().is_ok(), "{sequence:?}");
    assert_eq!(
        sequence[1..],
        [
            ("POST".to_owned(), reviews.to_owned()),
            ("GET".to_owned(), reviews.to_owned()),
            ("DELETE".to_owned(), format!("{reviews}/{pending_id}")),
            ("POST".to_owned(), reviews.to_owned()),
        ][..],
        "the leftover's POST, then refused, cleaned up, posted: {sequence:?}"
    );

    // The probe too.
    h.leave_pending_review(7, "another", "probe").await;
    assert!(
        h.code_host()
            .accepts_comment(&item(7), HEAD_SHA, &comment(None, 2, "b"))
            .await
            .unwrap()
    );
    assert_eq!(h.pending_reviews(7), 0);
}

#[tokio::test]
async fn no_credential_appears_in_any_error() {
    let fake = github_fake().await;
    fake.add_pull_request(FakePullRequest::new(
        OWNER, REPO, 7, BASE_SHA, HEAD_SHA, DIFF,
    ));
    let app = GitHubCodeHost::new(app_config(&fake)).unwrap();
    app.pull_request(&item(7)).await.unwrap();
    let token = requests_to(&fake, "GET", PULL_7)[0].token.clone().unwrap();
    let pat_publisher = code_host(&fake, pat(), Duration::from_millis(300));
    let jwt_like = app_jwt(APP_ID, TEST_APP_PRIVATE_KEY);

    // How many times each call asks: a 401 makes the App exchange a new token and ask once
    // more, a 500 is retried twice, a 422 is final.
    let mut errors = Vec::new();
    for (status, words, app_tries, pat_tries) in [
        (401, format!("Bad credentials: {token}"), 2, 1),
        (422, format!("token {token} and {PAT} rejected"), 1, 1),
        (500, format!("leaked {token} / {PAT} / {jwt_like}"), 3, 3),
    ] {
        let body = serde_json::json!({"message": words, "errors": [words]});
        for _ in 0..app_tries {
            fake.fail_next("GET", PULL_7, status, body.clone());
        }
        errors.push(app.pull_request(&item(7)).await.unwrap_err());
        for _ in 0..pat_tries {
            fake.fail_next("GET", PULL_7, status, body.clone());
        }
        errors.push(pat_publisher.pull_request(&item(7)).await.unwrap_err());
    }
    assert!(
        errors.iter().all(|e| e.to_string().contains("[REDACTED]")),
        "GitHub's words are shown, the credentials in them hidden: {errors:#?}"
    );
    app.pull_request(&item(7))
        .await
        .expect("every injected failure was used up by the calls above");
    fake.hang("GET", "/repos/acme/shop/issues/3");
    errors.push(pat_publisher.issue(&item(3)).await.unwrap_err());
    let unknown = code_host(
        &fake,
        GitHubAuth::Token(Secret::new("not-a-known-token-xyz")),
        Duration::from_secs(5),
    );
    errors.push(unknown.pull_request(&item(7)).await.unwrap_err());

    for e in &errors {
        for text in [e.to_string(), format!("{e:?}")] {
            for secret in [
                token.as_str(),
                PAT,
                jwt_like.as_str(),
                "not-a-known-token-xyz",
            ] {
                assert!(!text.contains(secret), "{text}");
            }
        }
    }
    for p in [&app, &pat_publisher] {
        let shown = format!("{p:?}");
        assert!(
            !shown.contains(PAT) && !shown.contains("PRIVATE KEY"),
            "{shown}"
        );
    }
}
