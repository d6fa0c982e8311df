//! GitHub in and out, end to end: signed webhook deliveries from the fake GitHub server reach
//! the scheduler's API, the whole pool runs in-process (the real git source over the sample
//! repository, the fake provider answering for the model), and the result is published back to
//! the fake GitHub through the real `GitHubCodeHost` authenticated as a GitHub App. What the
//! fake GitHub holds afterwards is what a pull request would show.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use verdict::config::Config;
use verdict::dev::DevPool;
use verdict::runtime;
use verdict_api::document::PublicationState;
use verdict_api::document::{TaskDocument, TaskState};
use verdict_backends::code_host::CodeHost;
use verdict_backends::repo::GitCredentials;
use verdict_backends::secret::Secret;
use verdict_backends::store::DocumentStore;
use verdict_proto::publication::marker;
use verdict_scheduler::api::webhooks::GitHubWebhooks;
use verdict_scheduler::api::{self, ApiAuth};
use verdict_scheduler::service::TaskService;
use verdict_testkit::github::{
    FakeGitHub, FakeIssue, FakePullRequest, FakeReview, TEST_APP_PRIVATE_KEY, webhook,
};
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

const SECRET: &str = "webhook-s3cret";
const API_TOKEN: &str = "api-token-github-e2e";
const APP_ID: u64 = 4242;
const PR: u64 = 7;

/// Lines 59–60 of `src/shopcart/cart.py` at the head: `count = …` and the division by it, both
/// added by the change.
const DIVISION: (u32, u32) = (59, 60);
/// Line 52 (`def items`) is a context line of the change's second hunk: commentable in the
/// three-line-context diff verdict reads, absent from a diff without context.
const CONTEXT_LINE: u32 = 52;

struct Rig {
    fake: FakeGitHub,
    llm: FakeProvider,
    pool: DevPool,
    api: String,
    http: reqwest::Client,
    repo: PathBuf,
    base: String,
    head: String,
    /// The configuration file the pool runs on (for the `verdict` processes a test starts).
    config: PathBuf,
    _dir: tempfile::TempDir,
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// What GitHub shows for the pull request from `base` to `head`, with `context` lines.
fn pr_diff(repo: &Path, base: &str, head: &str, context: u32) -> String {
    git(
        repo,
        &[
            "diff",
            &format!("-U{context}"),
            "-M",
            &format!("{base}...{head}"),
        ],
    ) + "\n"
}

fn finding(severity: &str, file: &str, lines: (u32, u32), title: &str) -> String {
    format!(
        "<FINDING>\n<SEVERITY>{severity}</SEVERITY>\n<FILE>{file}</FILE>\n<START_LINE>{}</START_LINE>\n<END_LINE>{}</END_LINE>\n<TITLE>{title}</TITLE>\n<DESCRIPTION>\nEvidence for {title}.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n",
        lines.0, lines.1
    )
}

fn envelope(decision: &str, findings: &[String]) -> String {
    format!(
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>7</SCORE>\n<DECISION>{decision}</DECISION>\n<DECISION_REASON>\nThe reason.\n</DECISION_REASON>\n<SUMMARY>\nAdds coupons.\n</SUMMARY>\n<FINDINGS>\n{}</FINDINGS>\n</SAKURA_REVIEW>\n",
        findings.concat()
    )
}

fn division() -> String {
    finding(
        "major",
        "src/shopcart/cart.py",
        DIVISION,
        "Division by zero on an empty cart",
    )
}

/// A pool whose single-pass review answers with `review`, pull request #7 of `acme/shop` from
/// `main` to `feature/coupons` on the fake GitHub (its diff with `context` lines), webhooks
/// served with [`SECRET`].
async fn rig(review: Script, context: u32) -> Rig {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let repo = scenario::sample_repo(&dir.path().join("repo")).unwrap();
    let base = git(&repo, &["rev-parse", "main"]);
    let head = git(&repo, &["rev-parse", "feature/coupons"]);

    let fake = FakeGitHub::start().await;
    fake.add_repository("acme", "shop", &repo.display().to_string());
    let mut pr = FakePullRequest::new(
        "acme",
        "shop",
        PR,
        &base,
        &head,
        pr_diff(&repo, &base, &head, context),
    );
    pr.title = "Add percentage coupons".to_owned();
    pr.head_ref = "feature/coupons".to_owned();
    fake.add_pull_request(pr);
    fake.install_app(APP_ID, TEST_APP_PRIVATE_KEY, 99, &[("acme", "shop")]);

    let llm = FakeProvider::start().await;
    scenario::script_valid_answers(&llm);
    llm.script(scenario::REVIEW, review);

    let cache = dir.path().join("cache");
    let mut toml = scenario::config_toml(&llm.base_url(), &Isolation::unique("gh"), &cache);
    toml.push_str(&format!(
        "\n[github]\napi_url = \"{}\"\nweb_url = \"{}\"\napp_id = {APP_ID}\napp_private_key_env = \"GH_APP_KEY\"\nwebhook_secret_env = \"GH_HOOK\"\npipeline = \"single\"\napply_labels = true\ndetails_url = \"https://verdict.example/v1/tasks/{{id}}\"\n",
        fake.api_url(),
        fake.web_url()
    ));
    let path = dir.path().join("verdict.toml");
    std::fs::write(&path, toml).unwrap();
    let env = [
        ("GH_APP_KEY".to_owned(), TEST_APP_PRIVATE_KEY.to_owned()),
        ("GH_HOOK".to_owned(), SECRET.to_owned()),
    ];
    let config = Config::load(Some(&path), &env).unwrap();

    let github = runtime::open_github(&config).unwrap().unwrap();
    let mut git = verdict_backends::repo::GitSourceConfig::new(&cache);
    git.env = vec![("GIT_CONFIG_GLOBAL".into(), "/dev/null".into())];
    git.credentials = Some(github.clone() as Arc<dyn GitCredentials>);
    let repositories = Arc::new(verdict_backends::repo::GitRepositorySource::open(git).unwrap());
    let providers = runtime::provider_registry(&config).unwrap();
    let code_host = github as Arc<dyn CodeHost>;
    let pool = DevPool::start(&config, providers, repositories, Some(code_host), 2).unwrap();

    let hooks = config.github.as_ref().map(|g| GitHubWebhooks {
        secret: g.webhook_secret.clone().unwrap(),
        policy: g.policy.clone(),
    });
    let auth = ApiAuth::new([Secret::new(API_TOKEN)]).unwrap();
    let router = api::router_with_webhooks(pool.service(), auth, pool.registry.clone(), hooks);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    Rig {
        fake,
        llm,
        pool,
        api,
        http: reqwest::Client::new(),
        repo,
        base,
        head,
        config: path,
        _dir: dir,
    }
}

impl Rig {
    /// Delivers `event` for pull request #7 as the fake has it now, signed with `secret`.
    async fn deliver(
        &self,
        event: &str,
        action: &str,
        delivery: &str,
        secret: &str,
    ) -> (u16, Value) {
        let body = webhook::pull_request_event(&self.fake, "acme", "shop", PR, action);
        let mut request = self.http.post(format!("{}/v1/webhooks/github", self.api));
        for (name, value) in webhook::delivery_headers(event, delivery, secret, &body) {
            request = request.header(name, value);
        }
        let response = request.body(body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The id of the task a signed `pull_request` delivery made.
    async fn opened(&self, action: &str, delivery: &str) -> String {
        let (status, body) = self.deliver("pull_request", action, delivery, SECRET).await;
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// The task once it ended and its publication settled.
    async fn settled(&self, id: &str) -> TaskDocument {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut after: Option<String> = None;
        loop {
            let doc = self.pool.scheduler.task(id).await.unwrap();
            let published = doc
                .publication
                .as_ref()
                .is_none_or(|p| p.state != PublicationState::Pending);
            if doc.state.is_terminal() && published {
                return doc;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} did not settle: {doc:#?}"
            );
            // Long-polls the task's events: returns at the next event or after the wait.
            let events = self
                .pool
                .scheduler
                .events(id, after.as_deref(), Duration::from_millis(200))
                .await
                .unwrap();
            if let Some(last) = events.last() {
                after = Some(last.id.clone());
            }
        }
    }

    /// Submitted reviews on the pull request (pending probes excluded), oldest first.
    fn reviews(&self) -> Vec<FakeReview> {
        self.fake
            .reviews("acme", "shop", PR)
            .into_iter()
            .filter(|r| r.state != "PENDING")
            .collect()
    }

    /// A new commit on `feature/coupons` that leaves `cart.py` alone, pushed to the pull request.
    fn push_unrelated_commit(&mut self) -> String {
        git(&self.repo, &["checkout", "--quiet", "feature/coupons"]);
        let test = self.repo.join("tests/test_cart.py");
        let mut text = std::fs::read_to_string(&test).unwrap();
        text.push_str(
            "\n\ndef test_empty_cart_total_is_zero():\n    assert Cart().total_cents() == 0\n",
        );
        std::fs::write(&test, text).unwrap();
        git(
            &self.repo,
            &["commit", "--quiet", "-am", "Test the empty cart"],
        );
        let head = git(&self.repo, &["rev-parse", "HEAD"]);
        let diff = pr_diff(&self.repo, &self.base, &head, 3);
        self.fake.push("acme", "shop", PR, &head, &diff);
        self.head = head.clone();
        head
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_pull_request_is_reviewed_and_published_once_inline_where_github_allows() {
    let misplaced = finding(
        "minor",
        "src/shopcart/cart.py",
        (5, 5),
        "Module docstring is stale",
    );
    // A path with the leading `src/` missing: it names exactly one changed file.
    let wrong_prefix = finding(
        "minor",
        "shopcart/cart.py",
        (55, 56),
        "apply_coupon accepts any coupon",
    );
    let answer = envelope("request_changes", &[division(), misplaced, wrong_prefix]);
    let rig = rig(Script::always(Behaviour::text(answer)), 3).await;

    let id = rig.opened("opened", "delivery-1").await;
    let again = rig.opened("opened", "delivery-1").await;
    assert_eq!(again, id, "a redelivered webhook names the same task");
    let doc = rig.settled(&id).await;

    assert_eq!(doc.state, TaskState::Completed, "{:?}", doc.reason);
    let publication = doc.publication.as_ref().unwrap();
    assert_eq!(
        publication.state,
        PublicationState::Published,
        "{publication:?}"
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1, "exactly one review: {reviews:#?}");
    let review = &reviews[0];
    assert_eq!(review.state, "CHANGES_REQUESTED");
    assert_eq!(review.commit_id, rig.head);
    assert!(review.body.contains(&marker(&id)));
    let mut inline: Vec<(String, Option<u32>, u32)> = review
        .comments
        .iter()
        .map(|c| (c.path.clone(), c.start_line, c.line))
        .collect();
    inline.sort();
    assert_eq!(
        inline,
        [
            ("src/shopcart/cart.py".to_owned(), Some(55), 56),
            (
                "src/shopcart/cart.py".to_owned(),
                Some(DIVISION.0),
                DIVISION.1
            ),
        ],
        "only commentable lines inline; the wrong-prefix path lands on the one file it names"
    );
    assert!(
        review.body.contains("Module docstring is stale") && review.body.contains("cart.py:5"),
        "a finding outside the diff is in the body: {}",
        review.body
    );
    let statuses = rig.fake.statuses("acme", "shop", &rig.head);
    let states: Vec<&str> = statuses.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(states, ["pending", "failure"], "{statuses:#?}");
    assert_eq!(
        statuses[1].target_url.as_deref(),
        Some(format!("https://verdict.example/v1/tasks/{id}").as_str())
    );
    assert_eq!(
        rig.llm.requests_for(scenario::REVIEW).len(),
        1,
        "the redelivery did not review again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_signature_is_refused_and_makes_nothing() {
    let rig = rig(Script::always(Behaviour::text(envelope("comment", &[]))), 3).await;

    for secret in ["not-the-secret", ""] {
        let (status, body) = rig
            .deliver("pull_request", "opened", "delivery-bad", secret)
            .await;
        assert_eq!(status, 401, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("X-Hub-Signature-256")
        );
    }

    let active = rig.pool.store.set_members("tasks:active").await.unwrap();
    assert!(active.is_empty(), "no task was made: {active:?}");
    assert!(rig.llm.requests_for(scenario::REVIEW).is_empty());
    assert!(rig.reviews().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_during_a_review_supersedes_it_and_nothing_stale_is_published() {
    // The first review call never answers; the next ones do.
    let script =
        Script::new([Behaviour::hang()]).then(Behaviour::text(envelope("comment", &[division()])));
    let mut rig = rig(script, 3).await;
    let old_head = rig.head.clone();
    let old = rig.opened("opened", "delivery-old").await;
    rig.llm
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();

    let new_head = rig.push_unrelated_commit();
    let new = rig.opened("synchronize", "delivery-new").await;

    let old_doc = rig.settled(&old).await;
    assert_eq!(old_doc.state, TaskState::Aborted);
    assert!(
        old_doc
            .reason
            .as_deref()
            .unwrap()
            .starts_with("superseded: acme/shop #7 has a new head")
    );
    assert_eq!(
        old_doc.publication.as_ref().unwrap().state,
        PublicationState::Nothing
    );
    let new_doc = rig.settled(&new).await;
    assert_eq!(
        new_doc.publication.as_ref().unwrap().state,
        PublicationState::Published
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(
        reviews[0].commit_id, new_head,
        "only the new head's review is posted"
    );
    let old_statuses = rig.fake.statuses("acme", "shop", &old_head);
    assert_eq!(old_statuses.last().unwrap().state, "error");
    assert!(
        old_statuses
            .last()
            .unwrap()
            .description
            .as_deref()
            .unwrap()
            .to_lowercase()
            .contains("superseded")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_that_ends_after_a_push_it_missed_is_not_posted() {
    // No webhook for the push arrives (a lost delivery): the head check right before posting
    // still keeps the stale review off the pull request.
    let script =
        Script::new([Behaviour::text(envelope("approve", &[])).after(Duration::from_millis(800))]);
    let mut rig = rig(script, 3).await;
    let id = rig.opened("opened", "delivery-1").await;
    rig.llm
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    rig.push_unrelated_commit();

    let doc = rig.settled(&id).await;

    assert_eq!(doc.state, TaskState::Completed);
    assert_eq!(
        doc.publication.as_ref().unwrap().state,
        PublicationState::Stale
    );
    assert!(rig.reviews().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_finding_on_the_next_head_is_not_posted_again() {
    let rig_script = Script::always(Behaviour::text(envelope("comment", &[division()])));
    let mut rig = rig(rig_script, 3).await;
    let first = rig.opened("opened", "delivery-1").await;
    rig.settled(&first).await;
    assert_eq!(rig.reviews()[0].comments.len(), 1);

    rig.push_unrelated_commit();
    let second = rig.opened("synchronize", "delivery-2").await;
    let doc = rig.settled(&second).await;

    assert_eq!(
        doc.publication.as_ref().unwrap().state,
        PublicationState::Published
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 2);
    assert!(
        reviews[1].comments.is_empty(),
        "not posted again: {:#?}",
        reviews[1]
    );
    assert!(
        reviews[1]
            .body
            .contains("already reported on an earlier commit"),
        "{}",
        reviews[1].body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_github_refuses_move_into_the_body_and_the_review_is_still_published() {
    let on_context = finding(
        "minor",
        "src/shopcart/cart.py",
        (CONTEXT_LINE, CONTEXT_LINE),
        "items() copies every line item",
    );
    let answer = envelope("comment", &[division(), on_context]);
    // GitHub's diff of this pull request has no context lines: line 52 is not in it.
    let rig = rig(Script::always(Behaviour::text(answer)), 0).await;

    let id = rig.opened("opened", "delivery-1").await;
    let doc = rig.settled(&id).await;

    let publication = doc.publication.as_ref().unwrap();
    assert_eq!(
        publication.state,
        PublicationState::Published,
        "{publication:?}"
    );
    assert!(
        publication
            .detail
            .as_deref()
            .unwrap()
            .contains("1 comment(s) GitHub refused inline were moved into the body")
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1);
    let lines: Vec<u32> = reviews[0].comments.iter().map(|c| c.line).collect();
    assert_eq!(lines, [DIVISION.1], "the accepted comment stays inline");
    assert!(
        reviews[0].body.contains("items() copies every line item"),
        "{}",
        reviews[0].body
    );
    let refused = rig
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pulls/7/reviews"))
        .count();
    assert_eq!(
        refused, 4,
        "the refused review, one probe per comment, the review posted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_and_aborted_reviews_publish_nothing() {
    // The provider refuses verdict's key: the review cannot run and ends incomplete.
    let rig = rig(Script::always(Behaviour::status(401)), 3).await;
    let id = rig.opened("opened", "delivery-1").await;
    let doc = rig.settled(&id).await;
    assert_eq!(doc.state, TaskState::Incomplete, "{:?}", doc.reason);
    assert_eq!(
        doc.publication.as_ref().unwrap().state,
        PublicationState::Nothing
    );
    assert!(rig.reviews().is_empty());
    assert!(rig.fake.issue_comments("acme", "shop", PR).is_empty());
    let statuses = rig.fake.statuses("acme", "shop", &rig.head);
    assert_eq!(statuses.last().unwrap().state, "error");

    let rig = rig_hanging().await;
    let id = rig.opened("opened", "delivery-1").await;
    rig.llm
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    let cancelled = rig
        .http
        .post(format!("{}/v1/tasks/{id}/cancel", rig.api))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status().as_u16(), 202);
    let doc = rig.settled(&id).await;
    assert_eq!(doc.state, TaskState::Aborted);
    assert_eq!(
        doc.publication.as_ref().unwrap().state,
        PublicationState::Nothing
    );
    assert!(rig.reviews().is_empty());
    assert!(rig.fake.issue_comments("acme", "shop", PR).is_empty());
}

async fn rig_hanging() -> Rig {
    rig(Script::always(Behaviour::hang()), 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_approval_with_a_critical_finding_requests_changes() {
    let critical = finding(
        "critical",
        "src/shopcart/cart.py",
        DIVISION,
        "Division by zero on an empty cart",
    );
    let rig = rig(
        Script::always(Behaviour::text(envelope("approve", &[critical]))),
        3,
    )
    .await;

    let id = rig.opened("opened", "delivery-1").await;
    let doc = rig.settled(&id).await;

    assert_eq!(
        doc.result.as_ref().unwrap()["decision"],
        "approve",
        "the model approved"
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1);
    assert_eq!(
        reviews[0].state, "CHANGES_REQUESTED",
        "never an approval over a critical finding"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdict_submit_review_by_pull_request_url_waits_for_the_result_and_publishes_it() {
    let answer = envelope("comment", &[division()]);
    let rig = rig(Script::always(Behaviour::text(answer)), 3).await;
    let url = format!("{}/acme/shop/pull/{PR}", rig.fake.web_url());

    let api = rig.api.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args([
                "submit",
                "review",
                "--pr",
                &url,
                "--publish",
                "--pipeline",
                "single",
                "--wait",
                "--json",
                "--server",
                &api,
            ])
            .env("VERDICT_API_TOKEN", API_TOKEN)
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["state"], "completed");
    assert_eq!(doc["repository"]["commit"], rig.head.as_str());
    assert_eq!(doc["repository"]["base"], rig.base.as_str());
    assert_eq!(
        doc["publication"]["state"], "published",
        "--wait waits for the publication"
    );
    let id = doc["id"].as_str().unwrap().to_owned();
    let settled = rig.settled(&id).await;
    assert_eq!(
        settled.publication.as_ref().unwrap().state,
        PublicationState::Published
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].comments.len(), 1);
    assert!(reviews[0].body.contains(&marker(&id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opened_issue_is_analysed_and_answered_with_one_comment_and_defined_labels() {
    let rig = rig(Script::always(Behaviour::text(envelope("comment", &[]))), 3).await;
    let mut issue = FakeIssue::new("acme", "shop", 12);
    issue.title = "An empty cart crashes the average price".to_owned();
    issue.body = Some("average_item_price_cents() divides by zero.".to_owned());
    rig.fake.add_issue(issue);
    rig.fake.define_labels("acme", "shop", &["bug", "checkout"]);
    let analysis = "<SAKURA_ISSUE_ANALYSIS>\n<VERSION>1</VERSION>\n<CATEGORY>bug</CATEGORY>\n<PRIORITY>high</PRIORITY>\n<SUMMARY>\nAn empty cart divides by zero.\n</SUMMARY>\n<FEASIBILITY>\nA guard in average_item_price_cents.\n</FEASIBILITY>\n<SUGGESTED_LABELS>\n<LABEL>\n<NAME>Bug</NAME>\n<CONFIDENCE>0.9</CONFIDENCE>\n<REASON>\nA crash.\n</REASON>\n</LABEL>\n<LABEL>\n<NAME>needs-triage</NAME>\n<CONFIDENCE>0.95</CONFIDENCE>\n<REASON>\nNew.\n</REASON>\n</LABEL>\n</SUGGESTED_LABELS>\n<SUGGESTED_ASSIGNEES>\n</SUGGESTED_ASSIGNEES>\n<SUGGESTED_MILESTONE>NONE</SUGGESTED_MILESTONE>\n<DUPLICATE_OF>NONE</DUPLICATE_OF>\n<SUGGESTED_TITLE>NONE</SUGGESTED_TITLE>\n</SAKURA_ISSUE_ANALYSIS>\n";
    rig.llm
        .script(scenario::DEFAULT, Script::always(Behaviour::text(analysis)));

    let body = webhook::issues_event(&rig.fake, "acme", "shop", 12, "opened");
    let mut request = rig.http.post(format!("{}/v1/webhooks/github", rig.api));
    for (name, value) in webhook::delivery_headers("issues", "delivery-issue", SECRET, &body) {
        request = request.header(name, value);
    }
    let response = request.body(body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = rig.settled(&id).await;

    assert_eq!(doc.state, TaskState::Completed, "{:?}", doc.reason);
    assert_eq!(
        doc.publication.as_ref().unwrap().state,
        PublicationState::Published
    );
    let comments = rig.fake.issue_comments("acme", "shop", 12);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].body.contains("An empty cart divides by zero."));
    assert!(comments[0].body.contains(&marker(&id)));
    assert_eq!(
        rig.fake.issue_labels("acme", "shop", 12),
        ["bug"],
        "only a label the repository defines, in its spelling"
    );
    assert_eq!(
        rig.fake.repo_labels("acme", "shop"),
        ["bug", "checkout"],
        "no label created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdict_dev_review_by_pull_request_url_publishes_from_one_process() {
    let answer = envelope("comment", &[division()]);
    let rig = rig(Script::always(Behaviour::text(answer)), 3).await;
    let url = format!("{}/acme/shop/pull/{PR}", rig.fake.web_url());
    let config = rig.config.clone();

    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["dev", "review", "--config"])
            .arg(&config)
            .args(["--pr", &url, "--publish", "--pipeline", "single", "--json"])
            .env("GH_APP_KEY", TEST_APP_PRIVATE_KEY)
            .env("GH_HOOK", SECRET)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("VERDICT_LOG", "warn")
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["state"], "completed", "{doc:#}");
    assert_eq!(doc["repository"]["commit"], rig.head.as_str());
    assert_eq!(
        doc["publication"]["state"], "published",
        "the printed document says where"
    );
    let reviews = rig.reviews();
    assert_eq!(reviews.len(), 1, "published before the process exited");
    assert!(
        reviews[0]
            .body
            .contains(&marker(doc["id"].as_str().unwrap()))
    );
}
