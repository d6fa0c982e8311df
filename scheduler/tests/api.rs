//! The HTTP API and its client over real HTTP, against an in-memory `TaskService` whose task
//! documents and event lists the test changes while clients watch.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ALLOW, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use serde_json::{Value, json};
use verdict_api::document::{Coverage, TaskDocument, TaskKind, TaskState, Timings};
use verdict_api::submission::{
    IssueAnalysisSubmission, IssueInput, Readiness, ReviewSubmission, ScanSubmission,
    SubmissionOptions, Submitted,
};
use verdict_backends::BoxFuture;
use verdict_backends::secret::Secret;
use verdict_backends::store::StoredEvent;
use verdict_client::client::{ApiClient, ClientError, ReconnectPolicy, StreamItem};
use verdict_proto::wire::{EventType, ProgressEvent, Usage, WIRE_VERSION};
use verdict_scheduler::api::{self, ApiAuth, MAX_BODY_BYTES, StreamEnd};
use verdict_scheduler::service::{ServiceError, TaskService};

const TOKEN: &str = "test-token-1";

// ---------------------------------------------------------------------------------------------
// The fake service

#[derive(Debug, Default)]
struct State {
    docs: HashMap<String, TaskDocument>,
    /// Per task, in order; ids are `<n>-0` with n counting from 1.
    events: HashMap<String, Vec<StoredEvent>>,
    submissions: Vec<Value>,
    /// The `after` of every `events` call, in order.
    reads: Vec<Option<String>>,
    /// `events` called with this position fails, this many times.
    fail_after: Option<(Option<String>, usize)>,
    not_ready: Vec<String>,
    /// The next this many review submissions are answered busy, with `Retry-After: 0`.
    busy: usize,
}

#[derive(Debug, Default)]
struct Fake {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
    next_id: AtomicU64,
}

fn document(id: &str, kind: TaskKind, pipeline: &str) -> TaskDocument {
    TaskDocument {
        id: id.to_owned(),
        kind,
        pipeline: pipeline.to_owned(),
        state: TaskState::Queued,
        reason: None,
        failure_kind: None,
        github: None,
        publication: None,
        trace_id: None,
        repository: None,
        result: None,
        stages: vec![],
        events: vec![],
        coverage: Coverage::default(),
        timings: Timings::default(),
        usage: Usage::default(),
        cost_usd: None,
    }
}

fn progress(task: &str, kind: EventType, stage: Option<&str>, message: &str) -> ProgressEvent {
    ProgressEvent {
        version: WIRE_VERSION,
        task_id: task.to_owned(),
        at_unix_ms: 1_000,
        kind,
        channel: None,
        stage_id: stage.map(str::to_owned),
        message: message.to_owned(),
        data: Value::Null,
    }
}

fn position(id: &str) -> u64 {
    id.split('-').next().unwrap().parse().unwrap()
}

impl Fake {
    fn create(&self, kind: TaskKind, pipeline: &str, submission: Value) -> String {
        let id = format!("t-{}", self.next_id.fetch_add(1, Ordering::SeqCst) + 1);
        let mut s = self.state.lock().unwrap();
        s.docs.insert(id.clone(), document(&id, kind, pipeline));
        s.events.insert(id.clone(), vec![]);
        s.submissions.push(submission);
        id
    }

    fn append(&self, task: &str, kind: EventType, stage: Option<&str>, message: &str) -> String {
        let event = progress(task, kind, stage, message);
        let id = {
            let mut s = self.state.lock().unwrap();
            s.docs.get_mut(task).unwrap().events.push(event.clone());
            let list = s.events.get_mut(task).unwrap();
            let id = format!("{}-0", list.len() + 1);
            list.push(StoredEvent {
                id: id.clone(),
                event,
            });
            id
        };
        self.changed.notify_waiters();
        id
    }

    fn set_state(&self, task: &str, state: TaskState) {
        self.state.lock().unwrap().docs.get_mut(task).unwrap().state = state;
        self.changed.notify_waiters();
    }

    fn fail_events_after(&self, after: Option<&str>, times: usize) {
        self.state.lock().unwrap().fail_after = Some((after.map(str::to_owned), times));
    }

    fn reads(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().reads.clone()
    }

    /// At most one event per read, like a stream read with a small COUNT, so that resuming
    /// mid-replay is exercised.
    fn read(&self, task: &str, after: Option<&str>) -> Result<Vec<StoredEvent>, ServiceError> {
        let s = self.state.lock().unwrap();
        let list = s
            .events
            .get(task)
            .ok_or_else(|| ServiceError::NotFound(task.to_owned()))?;
        let from = after.map_or(0, position);
        Ok(list
            .iter()
            .filter(|e| position(&e.id) > from)
            .take(1)
            .cloned()
            .collect())
    }
}

impl TaskService for Fake {
    fn submit_review(&self, s: ReviewSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            {
                let mut state = self.state.lock().unwrap();
                if state.busy > 0 {
                    state.busy -= 1;
                    return Err(ServiceError::Busy {
                        reason: "the scheduler is busy".into(),
                        retry_after_secs: 0,
                    });
                }
            }
            if s.repository.is_empty() {
                return Err(ServiceError::Invalid(
                    "`repository` is empty: give a git URL or path".into(),
                ));
            }
            let pipeline = s.pipeline.clone().unwrap_or_else(|| "multi".into());
            let id = self.create(
                TaskKind::Review,
                &pipeline,
                serde_json::to_value(&s).unwrap(),
            );
            Ok(Submitted { id })
        })
    }

    fn submit_issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            let value = serde_json::to_value(&s).unwrap();
            let id = self.create(TaskKind::IssueAnalysis, "issue-analysis", value);
            Ok(Submitted { id })
        })
    }

    fn submit_scan(&self, s: ScanSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            let id = self.create(TaskKind::Scan, "scan", serde_json::to_value(&s).unwrap());
            Ok(Submitted { id })
        })
    }

    fn submit_scan_batch(
        &self,
        s: verdict_api::submission::ScanBatchSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        // This double keeps no batches: it answers with the organisation it was given.
        Box::pin(async move {
            Ok(Submitted {
                id: format!("batch-{}", s.organisation.unwrap_or_default()),
            })
        })
    }

    fn scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<verdict_api::batch::ScanBatchDocument, ServiceError>> {
        Box::pin(async move { Err(ServiceError::NoSuchBatch(id.to_owned())) })
    }

    fn resume_scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<verdict_api::batch::ScanBatchDocument, ServiceError>> {
        Box::pin(async move { Err(ServiceError::NoSuchBatch(id.to_owned())) })
    }

    fn task<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(async move {
            self.state
                .lock()
                .unwrap()
                .docs
                .get(id)
                .cloned()
                .ok_or_else(|| ServiceError::NotFound(id.to_owned()))
        })
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(async move {
            let doc = {
                let mut s = self.state.lock().unwrap();
                let doc = s
                    .docs
                    .get_mut(id)
                    .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
                if doc.state.is_terminal() {
                    return Err(ServiceError::Conflict(format!(
                        "task {id} already ended ({})",
                        doc.state.as_str()
                    )));
                }
                doc.state = TaskState::Aborted;
                doc.reason = Some("cancelled".into());
                doc.clone()
            };
            self.changed.notify_waiters();
            Ok(doc)
        })
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, ServiceError>> {
        Box::pin(async move {
            {
                let mut s = self.state.lock().unwrap();
                let after = after.map(str::to_owned);
                s.reads.push(after.clone());
                if let Some((at, times)) = &mut s.fail_after
                    && *at == after
                {
                    *times -= 1;
                    if *times == 0 {
                        s.fail_after = None;
                    }
                    return Err(ServiceError::Unavailable("event log read timed out".into()));
                }
            }
            // Registered before the read, so a change between the read and the wait is seen.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let batch = self.read(id, after)?;
            if !batch.is_empty() || wait.is_zero() {
                return Ok(batch);
            }
            let _ = tokio::time::timeout(wait, changed).await;
            self.read(id, after)
        })
    }

    fn transcripts<'a>(
        &'a self,
        id: &'a str,
        _stage: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<verdict_proto::transcript::Transcript>, ServiceError>> {
        // This double keeps no transcripts: a task it knows has none yet.
        Box::pin(async move {
            if self.state.lock().unwrap().docs.contains_key(id) {
                Ok(Vec::new())
            } else {
                Err(ServiceError::NotFound(id.to_owned()))
            }
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async move {
            let problems = self.state.lock().unwrap().not_ready.clone();
            Readiness {
                ready: problems.is_empty(),
                problems,
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The server and raw HTTP helpers

struct Server {
    base: String,
    fake: Arc<Fake>,
    http: reqwest::Client,
}

async fn serve() -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = Arc::new(Fake::default());
    let registry = prometheus::Registry::new();
    let marker =
        prometheus::IntCounter::new("verdict_test_marker_total", "A process metric.").unwrap();
    registry.register(Box::new(marker.clone())).unwrap();
    marker.inc();
    let auth = ApiAuth::new([Secret::new("old-token"), Secret::new(TOKEN)]).unwrap();
    let router = api::router(fake.clone(), auth, registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Server {
        base: format!("http://{addr}"),
        fake,
        http: reqwest::Client::new(),
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(TOKEN)
    }

    fn post_json(&self, path: &str, body: &str) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_owned())
    }

    fn client(&self) -> ApiClient {
        ApiClient::new(&self.base, Some(TOKEN.to_owned()))
            .unwrap()
            .with_reconnect(ReconnectPolicy {
                max_reconnects: 3,
                min_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(5),
                idle_timeout: Duration::from_secs(30),
            })
    }
}

/// The JSON error of a response, after checking its status.
async fn error_of(response: reqwest::Response, status: StatusCode) -> (String, String) {
    assert_eq!(response.status(), status);
    assert!(
        response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = response.json().await.unwrap();
    (
        body["error"]["code"].as_str().unwrap().to_owned(),
        body["error"]["message"].as_str().unwrap().to_owned(),
    )
}

const REVIEW: &str = r#"{"repository":"https://example.com/r.git","base":"main","head":"feature"}"#;

// ---------------------------------------------------------------------------------------------
// Authentication

#[tokio::test]
async fn v1_routes_require_an_accepted_bearer_token() {
    let srv = serve().await;
    let missing = srv.http.get(srv.url("/v1/tasks/t-1")).send().await.unwrap();
    assert_eq!(
        missing.headers()[WWW_AUTHENTICATE],
        r#"Bearer realm="verdict""#
    );
    let (code, message) = error_of(missing, StatusCode::UNAUTHORIZED).await;
    assert_eq!(code, "unauthorized");
    assert!(message.contains("Authorization: Bearer"), "{message}");

    let wrong = srv
        .http
        .post(srv.url("/v1/reviews"))
        .bearer_auth("nope")
        .header(CONTENT_TYPE, "application/json")
        .body(REVIEW)
        .send()
        .await
        .unwrap();
    assert!(
        wrong.headers()[WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    let (code, message) = error_of(wrong, StatusCode::UNAUTHORIZED).await;
    assert_eq!(code, "unauthorized");
    assert!(
        !message.contains("nope"),
        "the token is not echoed: {message}"
    );
    assert!(srv.fake.state.lock().unwrap().submissions.is_empty());

    // Unknown routes under /v1 are not probeable without a token.
    let unknown = srv.http.get(srv.url("/v1/secrets")).send().await.unwrap();
    assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);

    // Both tokens of a rotation are accepted.
    for token in ["old-token", TOKEN] {
        let ok = srv
            .http
            .post(srv.url("/v1/reviews"))
            .bearer_auth(token)
            .header(CONTENT_TYPE, "application/json")
            .body(REVIEW)
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::ACCEPTED, "{token}");
    }
}

thread_local! {
    static THREAD_LOG: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes log lines into a buffer of the writing thread. One global subscriber for the whole
/// binary (a scoped one can miss events whose callsites other test threads cached first); each
/// `#[tokio::test]` runs server and client on its own single thread, so its buffer holds only
/// its own lines.
struct ThreadLog;

impl std::io::Write for ThreadLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        THREAD_LOG.with(|l| l.borrow_mut().extend_from_slice(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(|| ThreadLog)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    THREAD_LOG.with(|l| l.borrow_mut().clear());
}

#[tokio::test]
async fn the_request_log_names_route_and_status_but_never_the_token() {
    capture_logs();
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.get(&format!("/v1/tasks/{id}")).send().await.unwrap();
    srv.http
        .get(srv.url(&format!("/v1/tasks/{id}")))
        .bearer_auth("a-rejected-secret")
        .send()
        .await
        .unwrap();
    let text = THREAD_LOG.with(|l| String::from_utf8(l.borrow().clone()).unwrap());
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["fields"]["message"] == "HttpRequestServed")
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["fields"]["route"], "/v1/tasks/{id}");
    assert_eq!(lines[0]["fields"]["method"], "GET");
    assert_eq!(lines[0]["fields"]["status"], 200);
    assert_eq!(lines[1]["fields"]["status"], 401);
    assert!(lines[0]["fields"]["latency_ms"].is_number());
    assert!(
        !text.contains(TOKEN) && !text.contains("a-rejected-secret"),
        "{text}"
    );
    assert!(
        !text.contains(&format!("/v1/tasks/{id}")),
        "route templates, not raw paths: {text}"
    );
}

#[tokio::test]
async fn health_readiness_and_metrics_are_open() {
    let srv = serve().await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let r = srv.http.get(srv.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
}

// ---------------------------------------------------------------------------------------------
// Submissions and tasks

#[tokio::test]
async fn submissions_answer_202_with_location_and_id() {
    let srv = serve().await;
    let cases = [
        ("/v1/reviews", REVIEW.to_owned()),
        (
            "/v1/issue-analyses",
            json!({"issue": {"title": "Crash on start", "number": 7}, "categories": ["bug"]})
                .to_string(),
        ),
        (
            "/v1/scans",
            json!({"repository": "r", "revision": "abc", "options": {"priority": "bulk"}})
                .to_string(),
        ),
    ];
    for (path, body) in cases {
        let r = srv.post_json(path, &body).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED, "{path}");
        let location = r.headers()[LOCATION].to_str().unwrap().to_owned();
        let body: Value = r.json().await.unwrap();
        let id = body["id"].as_str().unwrap();
        assert_eq!(location, format!("/v1/tasks/{id}"));

        let doc: TaskDocument = srv
            .get(&location)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc.id, id);
        assert_eq!(doc.state, TaskState::Queued);
    }
    let s = srv.fake.state.lock().unwrap();
    assert_eq!(s.submissions[1]["issue"]["title"], "Crash on start");
    assert_eq!(s.submissions[2]["options"]["priority"], "bulk");
}

/// Intake's backlog full: 429 with `Retry-After`, nothing created; `ApiClient` waits that long
/// and submits again, until its patience runs out.
#[tokio::test]
async fn a_busy_scheduler_answers_429_with_retry_after_and_the_client_submits_again() {
    let srv = serve().await;
    srv.fake.state.lock().unwrap().busy = 1;
    let r = srv.post_json("/v1/reviews", REVIEW).send().await.unwrap();
    assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "0");
    let (code, message) = error_of(r, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(code, "busy");
    assert!(message.contains("busy"), "{message}");
    assert!(srv.fake.state.lock().unwrap().submissions.is_empty());

    srv.fake.state.lock().unwrap().busy = 3;
    let review: ReviewSubmission = serde_json::from_str(REVIEW).unwrap();
    let submitted = srv.client().submit_review(&review).await.unwrap();
    assert!(!submitted.id.is_empty());
    let (busy, submissions) = {
        let s = srv.fake.state.lock().unwrap();
        (s.busy, s.submissions.len())
    };
    assert_eq!((busy, submissions), (0, 1), "three refusals, then one task");

    srv.fake.state.lock().unwrap().busy = 1;
    let impatient = srv.client().with_busy_patience(Duration::ZERO);
    let error = impatient.submit_review(&review).await.unwrap_err();
    assert_eq!(error.status(), Some(429), "{error}");
}

#[tokio::test]
async fn a_service_rejection_is_a_400_naming_the_field() {
    let srv = serve().await;
    let body = r#"{"repository":"","base":"a","head":"b"}"#;
    let r = srv.post_json("/v1/reviews", body).send().await.unwrap();
    let (code, message) = error_of(r, StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "invalid_request");
    assert!(message.contains("`repository` is empty"), "{message}");
}

/// The real scheduler behind the API, on the in-memory backends, with repository [`REPO_URL`]
/// whose `HEAD` is [`HEAD_COMMIT`].
async fn serve_scheduler() -> Server {
    use verdict_backends::repo::MemoryRepositorySource;

    // Every server helper installs the provider its client needs: tests run one per process
    // under nextest, so none can count on another having done it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let repositories = Arc::new(MemoryRepositorySource::new());
    repositories.insert_revision(REPO_URL, "HEAD", HEAD_COMMIT);
    repositories.insert(
        REPO_URL,
        HEAD_COMMIT,
        verdict_backends::repo::MemoryTree::new().file("src/lib.rs", "pub fn f() {}\n"),
    );
    let (scheduler, registry) = support::memory_scheduler(repositories);
    let auth = ApiAuth::new([Secret::new(TOKEN)]).unwrap();
    let router = api::router(scheduler, auth, registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Server {
        base: format!("http://{addr}"),
        fake: Arc::new(Fake::default()),
        http: reqwest::Client::new(),
    }
}

const REPO_URL: &str = "https://git.example.com/shop.git";
const HEAD_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// The task's document once `done` holds for it (intake runs in the background).
async fn document_when(srv: &Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let doc: Value = srv
                .get(&format!("/v1/tasks/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if done(&doc) {
                return doc;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the task reaches the state in time")
}

#[tokio::test]
async fn an_option_like_revision_is_a_400_naming_it() {
    let srv = serve_scheduler().await;
    let cases = [
        (
            "/v1/scans",
            json!({"repository": REPO_URL, "revision": "--upload-pack=touch /tmp/pwned"}),
            "revision: revision `--upload-pack=touch /tmp/pwned` starts with `-`, which git would read as an option",
        ),
        (
            "/v1/reviews",
            json!({"repository": REPO_URL, "base": "main", "head": "-x"}),
            "head: revision `-x` starts with `-`",
        ),
        (
            "/v1/reviews",
            json!({"repository": REPO_URL, "base": "main..feature", "head": "feature"}),
            "base: revision `main..feature` is a range",
        ),
        (
            "/v1/issue-analyses",
            json!({"repository": REPO_URL, "revision": "main@{1}", "issue": {"title": "Crash"}}),
            "revision: revision `main@{1}` contains `@`",
        ),
    ];
    for (path, body, expected) in cases {
        let r = srv.post_json(path, &body.to_string()).send().await.unwrap();
        let (code, message) = error_of(r, StatusCode::BAD_REQUEST).await;
        assert_eq!(code, "invalid_request");
        assert!(message.starts_with(expected), "{path}: {message}");
        assert!(
            message.contains("name a commit SHA, a branch or a tag"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_task_shows_the_revision_given_and_the_commit_it_resolved_to() {
    let srv = serve_scheduler().await;
    let body = json!({"repository": REPO_URL, "revision": "HEAD"}).to_string();
    let r = srv.post_json("/v1/scans", &body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = document_when(&srv, &id, |d| d["repository"]["commit"].is_string()).await;
    assert_eq!(
        doc["repository"],
        json!({
            "url": "https://git.example.com/shop.git",
            "revision": "HEAD",
            "commit": HEAD_COMMIT,
        })
    );
    assert_eq!(doc["state"], "running");
    assert!(doc.get("failure_kind").is_none(), "{doc}");

    let body = json!({"repository": REPO_URL, "revision": "no-such-branch"}).to_string();
    let r = srv.post_json("/v1/scans", &body).send().await.unwrap();
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = document_when(&srv, &id, |d| d["state"] == "incomplete").await;
    assert_eq!(doc["failure_kind"], "not_found");
    let reason = doc["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "revision `no-such-branch` was not found in repository https://git.example.com/shop.git"
        ),
        "{reason}"
    );
    assert_eq!(doc["repository"]["revision"], "no-such-branch");
    assert!(doc["repository"].get("commit").is_none(), "{doc}");
}

/// Issue 8, item 5: hostile sources are refused at the API with a 400 naming the rule, and
/// nothing is stored. Checked by the allowlist alone: nothing here could fetch (the scheduler's
/// repositories are in memory).
#[tokio::test]
async fn repositories_the_allowlist_refuses_are_a_400_naming_the_rule() {
    let srv = serve_scheduler().await;
    let cases = [
        ("/etc", "repositories.allow_local_paths"),
        ("file:///etc/passwd", "repositories.allow_local_paths"),
        ("ext::sh -c touch% /tmp/pwned", "whitespace"),
        ("ext::git-remote-x", "never allowed"),
        ("fd::17", "never allowed"),
        (
            "http://git.example.com/shop.git",
            "repositories.allow_schemes",
        ),
        (
            "ssh://git@git.example.com/shop.git",
            "repositories.allow_schemes",
        ),
        (
            "git://git.example.com/shop.git",
            "repositories.allow_schemes",
        ),
        ("https://169.254.169.254/latest", "repositories.allow_hosts"),
        ("https://127.0.0.1/shop.git", "repositories.allow_hosts"),
        ("https://localhost/shop.git", "repositories.allow_hosts"),
        ("https://internal.corp/shop.git", "repositories.allow_hosts"),
        ("https://2130706433/shop.git", "four decimal numbers"),
        (
            "https://x-access-token:s3cret@git.example.com/shop.git",
            "carries credentials",
        ),
    ];
    for (repository, rule) in cases {
        for (path, body) in [
            (
                "/v1/scans",
                json!({"repository": repository, "revision": "HEAD"}),
            ),
            (
                "/v1/reviews",
                json!({"repository": repository, "base": "main", "head": "feature"}),
            ),
            (
                "/v1/issue-analyses",
                json!({"repository": repository, "issue": {"title": "Crash"}}),
            ),
        ] {
            let r = srv.post_json(path, &body.to_string()).send().await.unwrap();
            let (code, message) = error_of(r, StatusCode::BAD_REQUEST).await;
            assert_eq!(code, "invalid_request", "{repository}");
            assert!(
                message.contains("is not allowed") && message.contains(rule),
                "{path} {repository}: {message}"
            );
            assert!(!message.contains("s3cret"), "{message}");
        }
    }
}

/// Issue 8, item 4: a title the pool could never carry is a 413 naming the field, its size and
/// the limit, before anything is stored.
#[tokio::test]
async fn a_title_larger_than_a_stage_request_carries_is_a_413() {
    let srv = serve_scheduler().await;
    let body = json!({"repository": REPO_URL, "base": "main", "head": "feature",
        "title": "t".repeat(512 * 1024)})
    .to_string();
    let r = srv.post_json("/v1/reviews", &body).send().await.unwrap();
    let (code, message) = error_of(r, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(code, "payload_too_large");
    assert!(
        message.starts_with("title is 524288 bytes, above its limit of 16384 bytes (1/64 of broker.message_max_bytes = 1048576"),
        "{message}"
    );
    let body = json!({"repository": REPO_URL, "base": "main", "head": "feature",
        "title": "Coupons"})
    .to_string();
    let r = srv.post_json("/v1/reviews", &body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED, "a normal review after it");
}

#[tokio::test]
async fn an_unknown_task_is_a_404_json_error() {
    let srv = serve().await;
    for r in [
        srv.get("/v1/tasks/t-404").send().await.unwrap(),
        srv.get("/v1/tasks/t-404/events").send().await.unwrap(),
        srv.post_json("/v1/tasks/t-404/cancel", "")
            .send()
            .await
            .unwrap(),
    ] {
        let (code, message) = error_of(r, StatusCode::NOT_FOUND).await;
        assert_eq!(code, "not_found");
        assert!(message.contains("t-404"), "{message}");
    }
}

#[tokio::test]
async fn malformed_json_and_unknown_fields_are_400s_that_name_them() {
    let srv = serve().await;
    let r = srv
        .post_json("/v1/reviews", "{\"repository\": \"r\",\n\"base\": }")
        .send()
        .await
        .unwrap();
    let (code, message) = error_of(r, StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "invalid_request");
    assert!(message.contains("not valid JSON"), "{message}");
    assert!(message.contains("line 2"), "{message}");

    let body = r#"{"repository":"r","base":"a","head":"b","options":{"langauge":"en"}}"#;
    let r = srv.post_json("/v1/reviews", body).send().await.unwrap();
    let (code, message) = error_of(r, StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "invalid_request");
    assert!(message.contains("`options.langauge`"), "{message}");
    assert!(message.contains("unknown field `langauge`"), "{message}");

    let body = r#"{"issue":{"title":"t","titel":"x"}}"#;
    let r = srv
        .post_json("/v1/issue-analyses", body)
        .send()
        .await
        .unwrap();
    let (_, message) = error_of(r, StatusCode::BAD_REQUEST).await;
    assert!(message.contains("`issue.titel`"), "{message}");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_415() {
    let srv = serve().await;
    let r = srv
        .http
        .post(srv.url("/v1/reviews"))
        .bearer_auth(TOKEN)
        .header(CONTENT_TYPE, "text/plain")
        .body(REVIEW)
        .send()
        .await
        .unwrap();
    let (code, message) = error_of(r, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
    assert_eq!(code, "unsupported_media_type");
    assert!(message.contains("application/json"), "{message}");
}

#[tokio::test]
async fn an_oversize_body_is_a_413() {
    let srv = serve().await;
    let title = "x".repeat(MAX_BODY_BYTES);
    let body = json!({"repository": "r", "base": "a", "head": "b", "title": title}).to_string();
    let r = srv.post_json("/v1/reviews", &body).send().await.unwrap();
    let (code, message) = error_of(r, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(code, "payload_too_large");
    assert!(message.contains(&MAX_BODY_BYTES.to_string()), "{message}");
    assert!(srv.fake.state.lock().unwrap().submissions.is_empty());
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_are_json_errors() {
    let srv = serve().await;
    let (code, message) = error_of(
        srv.get("/v1/nothing-here").send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(code, "not_found");
    assert!(message.contains("/v1/nothing-here"), "{message}");

    let (code, _) = error_of(
        srv.http.get(srv.url("/nothing")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(code, "not_found");

    let r = srv.get("/v1/reviews").send().await.unwrap();
    assert_eq!(r.headers()[ALLOW], "POST");
    let (code, message) = error_of(r, StatusCode::METHOD_NOT_ALLOWED).await;
    assert_eq!(code, "method_not_allowed");
    assert!(
        message.contains("GET is not allowed on /v1/reviews"),
        "{message}"
    );
}

#[tokio::test]
async fn cancel_is_202_while_running_and_409_once_terminal() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.fake.set_state(&id, TaskState::Running);
    let r = srv
        .post_json(&format!("/v1/tasks/{id}/cancel"), "")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let doc: TaskDocument = r.json().await.unwrap();
    assert_eq!(doc.state, TaskState::Aborted);

    let r = srv
        .post_json(&format!("/v1/tasks/{id}/cancel"), "")
        .send()
        .await
        .unwrap();
    let (code, message) = error_of(r, StatusCode::CONFLICT).await;
    assert_eq!(code, "conflict");
    assert!(message.contains("already ended"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Readiness and metrics

#[tokio::test]
async fn readiness_is_503_with_the_problems() {
    let srv = serve().await;
    srv.fake.state.lock().unwrap().not_ready =
        vec!["redis: connection refused".into(), "shutting down".into()];
    let r = srv.http.get(srv.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(
        body["problems"],
        json!(["redis: connection refused", "shutting down"])
    );
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("redis: connection refused")
    );
    // Liveness does not depend on readiness.
    let r = srv.http.get(srv.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn metrics_count_requests_by_route_template() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    assert_eq!(
        srv.get(&format!("/v1/tasks/{id}"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        srv.get("/v1/tasks/t-missing")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    let _ = srv.get("/v1/no/such/route").send().await.unwrap();
    let r = srv.http.get(srv.url("/metrics")).send().await.unwrap();
    assert!(
        r.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = r.text().await.unwrap();
    assert!(text.contains("verdict_test_marker_total 1"), "{text}");
    for line in [
        r#"verdict_http_requests_total{method="GET",route="/v1/tasks/{id}",status="200"} 1"#,
        r#"verdict_http_requests_total{method="GET",route="/v1/tasks/{id}",status="404"} 1"#,
        r#"verdict_http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"verdict_http_request_duration_seconds_count{method="GET",route="/v1/tasks/{id}"} 2"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    assert!(!text.contains(&id), "no raw ids in labels");
    assert!(!text.contains("t-missing"));
}

// ---------------------------------------------------------------------------------------------
// Server-Sent Events over the wire

/// One SSE message as the test reads it off the wire.
#[derive(Debug, Default, PartialEq)]
struct Message {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

/// Reads raw SSE messages off a response (keep-alive comments skipped).
struct Wire {
    response: reqwest::Response,
    text: String,
}

impl Wire {
    async fn open(srv: &Server, path: &str, last_event_id: Option<&str>) -> Wire {
        let mut req = srv.get(path);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let response = req.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers()[CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Wire {
            response,
            text: String::new(),
        }
    }

    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let mut m = Message::default();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        m.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        m.event = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        m.data.push_str(v);
                    }
                }
                if m.event.is_none() && m.data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(m);
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[tokio::test]
async fn sse_replays_then_follows_live_then_ends() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.fake.append(&id, EventType::TaskQueued, None, "Queued");
    srv.fake.append(
        &id,
        EventType::TriageFallback,
        Some("triage"),
        "Triage did not return structured output; continuing with review by default.",
    );
    let mut wire = Wire::open(&srv, &format!("/v1/tasks/{id}/events"), None).await;

    let first = wire.next().await.unwrap();
    assert_eq!(first.id.as_deref(), Some("1-0"));
    assert_eq!(first.event.as_deref(), Some("task-queued"));
    let second = wire.next().await.unwrap();
    assert_eq!(second.id.as_deref(), Some("2-0"));
    assert_eq!(second.event.as_deref(), Some("triage-fallback"));
    let event: ProgressEvent = serde_json::from_str(&second.data).unwrap();
    assert_eq!(event.kind, EventType::TriageFallback);
    assert_eq!(event.stage_id.as_deref(), Some("triage"));

    // Live: appended while the stream waits.
    srv.fake.append(
        &id,
        EventType::StageStarted,
        Some("summary"),
        "Summary started",
    );
    let live = wire.next().await.unwrap();
    assert_eq!(live.id.as_deref(), Some("3-0"));
    assert_eq!(live.event.as_deref(), Some("stage-started"));

    srv.fake.set_state(&id, TaskState::Completed);
    let end = wire.next().await.unwrap();
    assert_eq!(end.event.as_deref(), Some("end"));
    assert_eq!(end.id, None);
    let end: StreamEnd = serde_json::from_str(&end.data).unwrap();
    assert_eq!(end.state, TaskState::Completed);
    assert_eq!(wire.next().await, None, "the stream closes after `end`");
}

#[tokio::test]
async fn sse_resumes_after_last_event_id_or_after_query() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    for stage in ["triage", "summary", "reviewer-1"] {
        srv.fake
            .append(&id, EventType::StageStarted, Some(stage), "started");
    }
    srv.fake.set_state(&id, TaskState::Degraded);

    for (path, header) in [
        (format!("/v1/tasks/{id}/events"), Some("1-0")),
        (format!("/v1/tasks/{id}/events?after=1-0"), None),
        // The header wins: it is where a reconnecting client puts its newer position.
        (format!("/v1/tasks/{id}/events?after=0-0"), Some("1-0")),
    ] {
        let mut wire = Wire::open(&srv, &path, header).await;
        let mut seen = vec![];
        while let Some(m) = wire.next().await {
            seen.push((m.id, m.event.unwrap()));
        }
        assert_eq!(
            seen,
            vec![
                (Some("2-0".to_owned()), "stage-started".to_owned()),
                (Some("3-0".to_owned()), "stage-started".to_owned()),
                (None, "end".to_owned()),
            ],
            "{path} {header:?}"
        );
    }
}

#[tokio::test]
async fn sse_of_a_finished_task_with_no_events_ends_at_once() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Scan, "scan", Value::Null);
    srv.fake.set_state(&id, TaskState::Incomplete);
    let mut wire = Wire::open(&srv, &format!("/v1/tasks/{id}/events"), None).await;
    let end = wire.next().await.unwrap();
    assert_eq!(end.event.as_deref(), Some("end"));
    assert!(end.data.contains(r#""state":"incomplete""#), "{}", end.data);
    assert_eq!(wire.next().await, None);
}

#[tokio::test]
async fn sse_reports_a_backend_failure_as_an_error_event_and_closes() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.fake.append(&id, EventType::TaskQueued, None, "Queued");
    srv.fake.fail_events_after(Some("1-0"), 1);
    let mut wire = Wire::open(&srv, &format!("/v1/tasks/{id}/events"), None).await;
    assert_eq!(wire.next().await.unwrap().id.as_deref(), Some("1-0"));
    let error = wire.next().await.unwrap();
    assert_eq!(error.event.as_deref(), Some("error"));
    let body: Value = serde_json::from_str(&error.data).unwrap();
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(wire.next().await, None);
}

// ---------------------------------------------------------------------------------------------
// The client

#[tokio::test]
async fn client_submits_gets_and_cancels() {
    let srv = serve().await;
    let client = srv.client();
    let review = ReviewSubmission {
        repository: "https://example.com/r.git".into(),
        base: "main".into(),
        head: "topic".into(),
        pipeline: Some("single".into()),
        title: Some("Add a parser".into()),
        body: None,
        options: SubmissionOptions::default(),
        ..Default::default()
    };
    let submitted = client.submit_review(&review).await.unwrap();
    let doc = client.task(&submitted.id).await.unwrap();
    assert_eq!(doc.kind, TaskKind::Review);
    assert_eq!(doc.pipeline, "single");

    let issue = IssueAnalysisSubmission {
        repository: None,
        revision: None,
        issue: IssueInput {
            number: Some(3),
            title: "Crash".into(),
            body: String::new(),
            labels: vec![],
        },
        categories: None,
        options: SubmissionOptions::default(),
        ..Default::default()
    };
    let issue_id = client.submit_issue_analysis(&issue).await.unwrap().id;
    let scan = ScanSubmission {
        repository: "r".into(),
        revision: "abc".into(),
        options: SubmissionOptions::default(),
    };
    let scan_id = client.submit_scan(&scan).await.unwrap().id;
    assert_eq!(
        client.task(&issue_id).await.unwrap().kind,
        TaskKind::IssueAnalysis
    );
    assert_eq!(client.task(&scan_id).await.unwrap().kind, TaskKind::Scan);

    let cancelled = client.cancel(&submitted.id).await.unwrap();
    assert_eq!(cancelled.state, TaskState::Aborted);
    let e = client.cancel(&submitted.id).await.unwrap_err();
    assert_eq!(e.status(), Some(409));
    assert!(e.to_string().contains(&srv.base), "names the server: {e}");
    assert!(e.to_string().contains("already ended"), "{e}");
}

#[tokio::test]
async fn client_errors_name_server_status_and_message() {
    let srv = serve().await;
    let e = srv.client().task("t-404").await.unwrap_err();
    match &e {
        ClientError::Api {
            server,
            status,
            code,
            message,
        } => {
            assert_eq!(server, &srv.base);
            assert_eq!(*status, 404);
            assert_eq!(code, "not_found");
            assert!(message.contains("t-404"));
        }
        other => panic!("{other:?}"),
    }
    let anonymous = ApiClient::new(&srv.base, None).unwrap();
    let e = anonymous.task("t-1").await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert!(e.to_string().contains("unauthorized"), "{e}");

    let mut events = srv.client().events("t-404", None);
    assert_eq!(events.next().await.unwrap_err().status(), Some(404));

    let nobody = ApiClient::new("http://127.0.0.1:9", Some(TOKEN.into())).unwrap();
    let e = nobody.task("t-1").await.unwrap_err();
    assert!(matches!(e, ClientError::Transport { .. }), "{e:?}");
    assert!(e.to_string().contains("127.0.0.1:9"), "{e}");
}

#[tokio::test]
async fn client_follows_events_until_end() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.fake.append(&id, EventType::TaskQueued, None, "Queued");
    let mut events = srv.client().events(&id, None);

    let StreamItem::Event(first) = events.next().await.unwrap().unwrap() else {
        panic!("expected an event")
    };
    assert_eq!(first.id, "1-0");
    assert_eq!(first.event.kind, EventType::TaskQueued);

    srv.fake.append(
        &id,
        EventType::ProtocolRepair,
        Some("review"),
        "Repair round 1 of 3",
    );
    let StreamItem::Event(live) = events.next().await.unwrap().unwrap() else {
        panic!("expected an event")
    };
    assert_eq!(live.event.kind, EventType::ProtocolRepair);
    assert_eq!(events.last_event_id(), Some("2-0"));

    srv.fake.set_state(&id, TaskState::Completed);
    assert_eq!(
        events.next().await.unwrap(),
        Some(StreamItem::End(StreamEnd {
            state: TaskState::Completed,
            reason: None
        }))
    );
    assert_eq!(events.next().await.unwrap(), None);
}

#[tokio::test]
async fn client_reconnects_with_last_event_id_after_a_dropped_stream() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    srv.fake.append(&id, EventType::TaskQueued, None, "Queued");
    srv.fake.append(
        &id,
        EventType::StageStarted,
        Some("triage"),
        "Triage started",
    );
    srv.fake.set_state(&id, TaskState::Completed);
    // The read after the first event fails: the server sends `error` and closes the stream.
    srv.fake.fail_events_after(Some("1-0"), 1);

    let mut events = srv.client().events(&id, None);
    let mut ids = vec![];
    let end = loop {
        match events.next().await.unwrap().unwrap() {
            StreamItem::Event(e) => ids.push(e.id),
            StreamItem::End(end) => break end,
            StreamItem::Unknown { kind, .. } => panic!("unexpected {kind}"),
        }
    };
    assert_eq!(ids, ["1-0", "2-0"], "each event exactly once");
    assert_eq!(end.state, TaskState::Completed);
    // The second connection resumed from 1-0 (the failed read was at the same position).
    let reads = srv.fake.reads();
    let resumed = reads.iter().filter(|r| r.as_deref() == Some("1-0")).count();
    assert!(resumed >= 2, "{reads:?}");
    assert_eq!(reads[0], None);
}

#[tokio::test]
async fn client_gives_up_after_the_reconnect_budget() {
    let srv = serve().await;
    let id = srv.fake.create(TaskKind::Review, "multi", Value::Null);
    let client = srv.client().with_reconnect(ReconnectPolicy {
        max_reconnects: 2,
        min_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
        idle_timeout: Duration::from_secs(30),
    });
    // Every read from the start fails.
    srv.fake.fail_events_after(None, usize::MAX);
    let mut events = client.events(&id, None);
    let e = events.next().await.unwrap_err();
    // Three connections, each answered with an error event; then the budget is spent.
    assert!(
        matches!(e, ClientError::StreamLost { reconnects: 2, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("event log read timed out"), "{e}");
}

/// Issue 10: an organisation scan over the API — accepted at once, enumerated in the
/// background from the code host, archived repositories, forks, excluded names and hosts the
/// allowlist refuses left out with their reasons, one bulk scan task per remaining repository;
/// the same idempotency key and a resume name the same batch and create no second task.
#[tokio::test]
async fn an_organisation_scan_is_a_batch_of_one_bulk_scan_per_chosen_repository() {
    use verdict_backends::code_host::{HostedRepository, MemoryCodeHost};
    use verdict_backends::repo::MemoryRepositorySource;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let repositories = Arc::new(MemoryRepositorySource::new());
    let code_host = Arc::new(MemoryCodeHost::new());
    let names = [
        ("api", false, false, "git.example.com"),
        ("web", false, false, "git.example.com"),
        ("old", true, false, "git.example.com"),
        ("copy", false, true, "git.example.com"),
        ("web-legacy", false, false, "git.example.com"),
        ("elsewhere", false, false, "evil.example.net"),
    ];
    for (name, archived, fork, host) in names {
        let url = format!("https://{host}/acme/{name}.git");
        repositories.insert_revision(&url, "main", HEAD_COMMIT);
        // A scan lists the commit's files at intake: each repository has one to scan.
        repositories.insert(
            &url,
            HEAD_COMMIT,
            verdict_backends::repo::MemoryTree::new().file("src/lib.rs", "pub fn f() {}\n"),
        );
        code_host.add_repository(HostedRepository {
            full_name: format!("acme/{name}"),
            clone_url: url,
            html_url: format!("https://{host}/acme/{name}"),
            default_branch: "main".to_owned(),
            archived,
            fork,
            size_kib: 3,
            visibility: "private".to_owned(),
        });
    }
    let (scheduler, registry) = support::memory_scheduler_with(
        repositories,
        Some(code_host.clone() as Arc<dyn verdict_backends::code_host::CodeHost>),
    );
    let auth = ApiAuth::new([Secret::new(TOKEN)]).unwrap();
    let router = api::router(scheduler.clone(), auth, registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let srv = Server {
        base: format!("http://{addr}"),
        fake: Arc::new(Fake::default()),
        http: reqwest::Client::new(),
    };

    let body = json!({
        "organisation": "acme",
        "exclude": ["*-legacy"],
        "options": {"idempotency_key": "nightly-1"},
    })
    .to_string();
    let r = srv.post_json("/v1/scans", &body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let location = r.headers()[LOCATION].to_str().unwrap().to_owned();
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(location, format!("/v1/scans/{id}"));

    let batch = batch_when(&srv, &id, |b| {
        b["counts"]["total"] == 2 && b["counts"]["queued"] == 0
    })
    .await;
    assert_eq!(batch["state"], "running", "{batch:#}");
    assert_eq!(batch["organisation"], "acme");
    let members: Vec<&str> = batch["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["repository"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["acme/api", "acme/web"]);
    let skipped: HashMap<&str, &str> = batch["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["repository"].as_str().unwrap(),
                s["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(skipped.len(), 4, "{skipped:#?}");
    assert!(skipped["acme/old"].starts_with("archived"));
    assert!(skipped["acme/copy"].starts_with("a fork"));
    assert!(skipped["acme/web-legacy"].contains("exclude"));
    assert!(skipped["acme/elsewhere"].starts_with("refused by the repository allowlist"));

    // Every member is a scan task (bulk priority: a scan's default) on its default branch.
    let ids: Vec<String> = batch["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["task_id"].as_str().unwrap().to_owned())
        .collect();
    for (task, name) in ids.iter().zip(["api", "web"]) {
        let doc = document_when(&srv, task, |d| d["repository"]["commit"].is_string()).await;
        assert_eq!(doc["kind"], "scan", "{doc:#}");
        assert_eq!(doc["pipeline"], "scan", "{doc:#}");
        assert_eq!(doc["repository"]["revision"], "main");
        assert_eq!(
            doc["repository"]["url"],
            format!("https://git.example.com/acme/{name}.git")
        );
    }

    // The same key is the same batch; a resume re-drives it and creates nothing new.
    let again = srv.post_json("/v1/scans", &body).send().await.unwrap();
    assert_eq!(again.json::<Value>().await.unwrap()["id"], id.as_str());
    let listed_before = code_host.calls();
    let resumed = srv
        .http
        .post(srv.url(&format!("/v1/scans/{id}/resume")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::ACCEPTED);
    let after = batch_when(&srv, &id, |b| b["counts"]["total"] == 2).await;
    let ids_after: Vec<&str> = after["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids_after, ids);
    assert_eq!(
        code_host.calls(),
        listed_before,
        "an enumerated batch is not listed again"
    );

    // A task id is not a batch; a batch needs exactly one source.
    let r = srv
        .get(&format!("/v1/scans/{}", ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let both = json!({"organisation": "acme", "manifest": [{"repository": REPO_URL}]}).to_string();
    let r = srv.post_json("/v1/scans", &both).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let unknown = json!({"organisation": "acme", "forkz": true}).to_string();
    let r = srv.post_json("/v1/scans", &unknown).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let message = r.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("forkz"), "{message}");

    // An organisation the code host does not know fails the batch with the reason.
    let body = json!({"organisation": "nobody"}).to_string();
    let r = srv.post_json("/v1/scans", &body).send().await.unwrap();
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let failed = batch_when(&srv, &id, |b| b["state"] == "failed").await;
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("organisation nobody"),
        "{failed:#}"
    );
}

/// The scan batch's document once `done` holds for it (enumeration runs in the background).
async fn batch_when(srv: &Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let doc: Value = srv
                .get(&format!("/v1/scans/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if done(&doc) {
                return doc;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the batch reaches the state in time")
}
