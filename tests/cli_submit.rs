//! `verdict submit` and `verdict tail` against a real API server in the test process, backed by
//! an in-memory `TaskService` whose tasks finish at once with scripted events: what the user
//! sees on stdout/stderr and the exit codes scripts rely on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::HashMap;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use verdict_api::document::{Coverage, TaskDocument, TaskKind, TaskState, Timings};
use verdict_api::submission::{
    IssueAnalysisSubmission, Readiness, ReviewSubmission, ScanSubmission, Submitted,
};
use verdict_backends::BoxFuture;
use verdict_backends::secret::Secret;
use verdict_backends::store::StoredEvent;
use verdict_proto::transcript::Transcript;
use verdict_proto::wire::{EventType, ProgressEvent, Usage, WIRE_VERSION};
use verdict_scheduler::api::{self, ApiAuth};
use verdict_scheduler::service::{ServiceError, TaskService};

const TOKEN: &str = "cli-test-token";
const FALLBACK: &str =
    "Triage did not return structured output; continuing with review by default.";
/// 12:03:04 UTC on a day in 2022.
const AT: u64 = (19_000 * 86_400 + 12 * 3600 + 3 * 60 + 4) * 1000;

/// Tasks that are already over when submitted: the CLI's follow, result and exit code paths
/// are what is under test, not the scheduler.
#[derive(Debug, Default)]
struct Finished {
    tasks: Mutex<HashMap<String, (TaskDocument, Vec<StoredEvent>)>>,
    submissions: Mutex<Vec<Value>>,
    /// Transcripts by task, as a store would hold them.
    transcripts: Mutex<HashMap<String, Vec<Transcript>>>,
}

fn event(task: &str, at: u64, kind: EventType, stage: Option<&str>, msg: &str) -> ProgressEvent {
    ProgressEvent {
        version: WIRE_VERSION,
        task_id: task.to_owned(),
        at_unix_ms: at,
        kind,
        channel: None,
        stage_id: stage.map(str::to_owned),
        message: msg.to_owned(),
        data: Value::Null,
    }
}

impl Finished {
    fn add(
        &self,
        kind: TaskKind,
        state: TaskState,
        reason: Option<&str>,
        result: Option<Value>,
    ) -> String {
        let mut tasks = self.tasks.lock().unwrap();
        let id = format!("t-{}", tasks.len() + 1);
        let events = vec![
            event(&id, AT - 2000, EventType::TaskQueued, None, "Queued"),
            event(&id, AT - 1000, EventType::StageStarted, Some("triage"), ""),
            event(&id, AT, EventType::TriageFallback, Some("triage"), FALLBACK),
            event(
                &id,
                AT + 1000,
                EventType::StageFinished,
                Some("reviewer-1"),
                "ok",
            ),
        ];
        let doc = TaskDocument {
            id: id.clone(),
            kind,
            pipeline: "multi".into(),
            state,
            reason: reason.map(str::to_owned),
            failure_kind: None,
            github: None,
            publication: None,
            trace_id: None,
            repository: None,
            result,
            stages: vec![],
            events: events.clone(),
            coverage: Coverage::default(),
            timings: Timings::default(),
            usage: Usage::default(),
            cost_usd: None,
        };
        let stored = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| StoredEvent {
                id: format!("{}-0", i + 1),
                event,
            })
            .collect();
        tasks.insert(id.clone(), (doc, stored));
        id
    }

    fn record(&self, submission: Value) {
        self.submissions.lock().unwrap().push(submission);
    }
}

impl TaskService for Finished {
    fn submit_review(&self, s: ReviewSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            let id = if s.title.as_deref() == Some("breaks the summary") {
                self.add(
                    TaskKind::Review,
                    TaskState::Incomplete,
                    Some("The summary stage returned invalid output; nothing is published."),
                    None,
                )
            } else {
                let result = json!({
                    "score": 8, "decision": "approve", "decision_reason": "Small and tested.",
                    "summary": "Adds a flag.", "findings": []
                });
                self.add(TaskKind::Review, TaskState::Completed, None, Some(result))
            };
            self.record(serde_json::to_value(&s).unwrap());
            Ok(Submitted { id })
        })
    }

    fn submit_issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            self.record(serde_json::to_value(&s).unwrap());
            let id = self.add(TaskKind::IssueAnalysis, TaskState::Degraded, None, None);
            Ok(Submitted { id })
        })
    }

    fn submit_scan(&self, s: ScanSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>> {
        Box::pin(async move {
            self.record(serde_json::to_value(&s).unwrap());
            let id = self.add(TaskKind::Scan, TaskState::Aborted, Some("cancelled"), None);
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
            let tasks = self.tasks.lock().unwrap();
            tasks
                .get(id)
                .map(|(doc, _)| doc.clone())
                .ok_or_else(|| ServiceError::NotFound(id.to_owned()))
        })
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>> {
        Box::pin(async move { Err(ServiceError::Conflict(format!("task {id} already ended"))) })
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        after: Option<&'a str>,
        _wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, ServiceError>> {
        Box::pin(async move {
            let tasks = self.tasks.lock().unwrap();
            let (_, events) = tasks
                .get(id)
                .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
            let from = events
                .iter()
                .position(|e| Some(e.id.as_str()) == after)
                .map_or(0, |i| i + 1);
            Ok(events[from..].to_vec())
        })
    }

    fn transcripts<'a>(
        &'a self,
        id: &'a str,
        stage: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, ServiceError>> {
        Box::pin(async move {
            if !self.tasks.lock().unwrap().contains_key(id) {
                return Err(ServiceError::NotFound(id.to_owned()));
            }
            let mut all = self
                .transcripts
                .lock()
                .unwrap()
                .get(id)
                .cloned()
                .unwrap_or_default();
            all.retain(|t| stage.is_none_or(|s| t.stage_id == s));
            Ok(all)
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async {
            Readiness {
                ready: true,
                problems: vec![],
            }
        })
    }
}

async fn serve() -> (String, Arc<Finished>) {
    let service = Arc::new(Finished::default());
    let auth = ApiAuth::new([Secret::new(TOKEN)]).unwrap();
    let router = api::router(service.clone(), auth, prometheus::Registry::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}"), service)
}

/// Runs `verdict` with the server in `VERDICT_SERVER` and `token` (if any) in
/// `VERDICT_API_TOKEN`.
async fn verdict(server: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_verdict"));
    cmd.args(args)
        .env("VERDICT_SERVER", server)
        .env_remove("VERDICT_API_TOKEN")
        .env_remove("MY_TOKEN");
    if let Some(token) = token {
        cmd.env("VERDICT_API_TOKEN", token);
    }
    cmd.output().await.unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

const REVIEW: &[&str] = &[
    "submit",
    "review",
    "--repo",
    "https://example.com/r.git",
    "--base",
    "main",
    "--head",
    "topic",
];

#[tokio::test]
async fn submit_review_wait_json_prints_the_document_and_exits_0() {
    let (server, service) = serve().await;
    let args = [
        REVIEW,
        &[
            "--pipeline",
            "single",
            "--language",
            "en",
            "--wait",
            "--json",
        ],
    ]
    .concat();
    let out = verdict(&server, Some(TOKEN), &args).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: TaskDocument = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc.id, "t-1");
    assert_eq!(doc.state, TaskState::Completed);
    assert_eq!(doc.result.unwrap()["decision"], "approve");
    // Milestones go to stderr, so stdout stays one JSON document.
    let err = stderr(&out);
    assert!(err.contains("Submitted task t-1"), "{err}");
    assert!(
        err.contains(&format!("12:03:04 Triage fallback — {FALLBACK}")),
        "{err}"
    );
    let submitted = &service.submissions.lock().unwrap()[0];
    assert_eq!(submitted["pipeline"], "single");
    assert_eq!(submitted["options"]["language"], "en");
    assert_eq!(submitted["head"], "topic");
}

#[tokio::test]
async fn submit_review_wait_prints_a_summary_and_exits_1_when_incomplete() {
    let (server, _) = serve().await;
    let args = [REVIEW, &["--title", "breaks the summary", "--wait"]].concat();
    let out = verdict(&server, Some(TOKEN), &args).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "Task t-1: incomplete (multi)\n\
         Reason: The summary stage returned invalid output; nothing is published.\n"
    );
}

#[tokio::test]
async fn submit_without_wait_prints_the_id() {
    let (server, _) = serve().await;
    let out = verdict(&server, Some(TOKEN), REVIEW).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "t-1\n");

    let out = verdict(&server, Some(TOKEN), &[REVIEW, &["--json"]].concat()).await;
    let id: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(id, json!({"id": "t-2"}));
}

#[tokio::test]
async fn issue_analysis_and_scan_submissions_and_their_exit_codes() {
    let (server, service) = serve().await;
    let out = verdict(
        &server,
        Some(TOKEN),
        &[
            "submit",
            "issue-analysis",
            "--title",
            "Crash on start",
            "--number",
            "42",
            "--categories",
            "bug,feature",
            "--repo",
            "r",
            "--wait",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "degraded is an explained non-decision"
    );
    assert!(
        stdout(&out).starts_with("Task t-1: degraded"),
        "{}",
        stdout(&out)
    );

    let out = verdict(
        &server,
        Some(TOKEN),
        &[
            "submit",
            "scan",
            "--repo",
            "r",
            "--revision",
            "abc",
            "--priority",
            "bulk",
            "--wait",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "aborted");

    let submissions = service.submissions.lock().unwrap();
    assert_eq!(submissions[0]["issue"]["number"], 42);
    assert_eq!(submissions[0]["categories"], json!(["bug", "feature"]));
    assert_eq!(submissions[1]["options"]["priority"], "bulk");
}

#[tokio::test]
async fn tail_prints_one_milestone_line_per_event_and_exits_by_state() {
    let (server, service) = serve().await;
    let id = service.add(TaskKind::Review, TaskState::Completed, None, None);
    let out = verdict(&server, Some(TOKEN), &["tail", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "12:03:02 Queued — Queued\n\
             12:03:03 Triage started\n\
             12:03:04 Triage fallback — {FALLBACK}\n\
             12:03:05 Reviewer 1 finished — ok\n\
             Task {id} completed\n"
        )
    );

    // Resuming after an event id prints only what follows.
    let out = verdict(&server, Some(TOKEN), &["tail", &id, "--after", "3-0"]).await;
    assert_eq!(
        stdout(&out),
        format!("12:03:05 Reviewer 1 finished — ok\nTask {id} completed\n")
    );

    let id = service.add(
        TaskKind::Review,
        TaskState::Aborted,
        Some("superseded"),
        None,
    );
    let out = verdict(&server, Some(TOKEN), &["tail", &id]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).ends_with(&format!("Task {id} aborted — superseded\n")),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn a_missing_token_is_a_usage_error_naming_the_variable() {
    let (server, service) = serve().await;
    let out = verdict(&server, None, REVIEW).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("VERDICT_API_TOKEN is not set"),
        "{}",
        stderr(&out)
    );

    let out = verdict(
        &server,
        None,
        &[REVIEW, &["--token-env", "MY_TOKEN"]].concat(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("MY_TOKEN is not set"),
        "{}",
        stderr(&out)
    );

    let out = verdict(&server, None, &["tail", "t-1"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("VERDICT_API_TOKEN"),
        "{}",
        stderr(&out)
    );
    assert!(service.submissions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_refused_token_or_unknown_task_names_the_server_and_the_api_message() {
    let (server, _) = serve().await;
    let out = verdict(&server, Some("wrong"), REVIEW).await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains(&server), "{err}");
    assert!(err.contains("401"), "{err}");
    assert!(err.contains("the bearer token is not accepted"), "{err}");
    assert!(!err.contains("wrong"), "the token is not echoed: {err}");

    let out = verdict(&server, Some(TOKEN), &["tail", "t-404"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("task t-404 does not exist"),
        "{}",
        stderr(&out)
    );
}

/// `verdict transcript TASK [STAGE]` prints every message and raw response of the task's
/// attempts as text, `--json` the API's document; an unknown task names the task.
#[tokio::test]
async fn transcript_prints_every_message_of_the_attempts_and_json_on_request() {
    use verdict_proto::chat::{ChatResponse, FinishReason, Message, TokenUsage};
    use verdict_proto::transcript::{CallPurpose, TranscriptEntry};
    let (server, service) = serve().await;
    let id = service.add(
        TaskKind::Review,
        TaskState::Incomplete,
        Some("summary invalid"),
        None,
    );
    let attempt = |stage: &str, answer: &str| Transcript {
        task_id: id.clone(),
        stage_id: stage.to_owned(),
        stage: verdict_proto::wire::StageKind::Summary,
        attempt: 1,
        started_unix_ms: AT,
        finished_unix_ms: AT + 1500,
        tools_offered: vec![],
        entries: vec![TranscriptEntry::Call {
            seq: 1,
            purpose: CallPurpose::Turn,
            provider: "local".into(),
            model: "smollm2".into(),
            new_messages: vec![
                Message::system("You summarise pull requests."),
                Message::user("the diff of src/cart.py"),
            ],
            tools: vec![],
            temperature: None,
            response: Some(ChatResponse {
                content: answer.to_owned(),
                tool_calls: vec![],
                finish: FinishReason::Stop,
                usage: TokenUsage {
                    input_tokens: 12,
                    output_tokens: 5,
                },
                raw: format!("{{\"choices\":[{{\"message\":{{\"content\":\"{answer}\"}}}}]}}"),
            }),
            error: None,
            latency_ms: 1500,
            reused: false,
        }],
        usage: TokenUsage::default(),
        outcome: None,
        boundary_tokens: Vec::new(),
    };
    service.transcripts.lock().unwrap().insert(
        id.clone(),
        vec![
            attempt("summary", "It adds coupons."),
            attempt("triage", "review"),
        ],
    );

    let out = verdict(&server, Some(TOKEN), &["transcript", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "=== task t-1 stage summary (summary) attempt 1",
        "[system]\nYou summarise pull requests.",
        "[user]\nthe diff of src/cart.py",
        "It adds coupons.",
        "[raw response]",
        "stage triage",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }

    let out = verdict(
        &server,
        Some(TOKEN),
        &["transcript", &id, "triage", "--json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["task_id"], id.as_str());
    assert_eq!(doc["transcripts"].as_array().unwrap().len(), 1);
    assert_eq!(doc["transcripts"][0]["stage_id"], "triage");

    let out = verdict(&server, Some(TOKEN), &["transcript", "t-404"]).await;
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("t-404"), "{}", stderr(&out));
}
