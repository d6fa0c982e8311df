//! The stage executor end to end against real HTTP providers — the fake provider server in both
//! wire formats (OpenAI chat completions and Anthropic Messages) — and the `exec` provider:
//! every assertion is on the classified outcome *and* on the requests the server received.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use verdict_backends::clock::{Clock, SystemClock};
use verdict_backends::repo::{MemoryRepositorySource, MemoryTree};
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{
    EventType, InputContent, InputRef, Priority, RepairPolicy, RepositoryRef, StageKind,
    StageRequest, Tool, WIRE_VERSION,
};
use verdict_proto::{Language, ValidateOptions};
use verdict_testkit::{Behaviour, FakeProvider, RecordedRequest, Script};
use verdict_worker::executor::{
    Execution, ExecutorDeps, ExecutorSettings, ProviderRegistry, StageExecutor,
};
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::{ProviderKind, ProviderSettings, Secret, StructuredOutput, build};
use verdict_worker::retry::RetryPolicy;

const MODEL: &str = "model-a";
const KINDS: [ProviderKind; 2] = [ProviderKind::Openai, ProviderKind::Anthropic];
const REPO_URL: &str = "https://git.example.com/acme/parser.git";
const COMMIT: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
const DIFF: &str = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,2 +1,3 @@\n pub fn parse() {}\n+pub fn tokens(i: usize, t: &[u8]) -> u8 { t[i + 1] }\n";

const VALID: &str = "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>5</SCORE>\n<DECISION>request_changes</DECISION>\n<DECISION_REASON>\nAn index can go out of bounds.\n</DECISION_REASON>\n<SUMMARY>\nAdds a tokens helper.\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>major</SEVERITY>\n<FILE>src/lib.rs</FILE>\n<START_LINE>2</START_LINE>\n<END_LINE>2</END_LINE>\n<TITLE>Unchecked index</TITLE>\n<DESCRIPTION>\n`t[i + 1]` panics at the end of the input.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n</FINDINGS>\n</SAKURA_REVIEW>\n";
const PROSE: &str =
    "Looking at the change, the tokens helper indexes past the end. I'd request changes.";
/// Another invalid answer: a round that repeats the one before ends the repair (decision 182).
const PROSE_AGAIN: &str = "As I said: the helper reads past the end, so request changes.";

struct Env {
    fake: FakeProvider,
    executor: StageExecutor,
    /// Events, transcripts, the journal and inputs.
    store: Arc<MemoryStore>,
    /// The executor's metrics.
    registry: prometheus::Registry,
}

fn provider_settings(kind: ProviderKind, base_url: &str, timeout: Duration) -> ProviderSettings {
    ProviderSettings {
        name: "fake".into(),
        kind,
        base_url: base_url.to_owned(),
        api_key: Some(Secret::new("test-key-not-a-secret")),
        model: MODEL.into(),
        timeout,
        connect_timeout: Duration::from_secs(2),
        max_tokens: Some(1024),
        temperature: Some(0.3),
        command: Vec::new(),
        no_tools_flag: None,
        tools_flag: None,
        structured_output: StructuredOutput::Off,
        structured_bounds: Default::default(),
        context_window: None,
    }
}

fn repositories() -> MemoryRepositorySource {
    MemoryRepositorySource::new().with(
        REPO_URL,
        COMMIT,
        MemoryTree::new()
            .file(
                "src/lib.rs",
                "pub fn parse() {}\npub fn tokens(i: usize, t: &[u8]) -> u8 { t[i + 1] }\n",
            )
            .file("README.md", "# parser\n")
            .symlink("escape", "/etc/passwd")
            .symlink("up", "../../outside.txt"),
    )
}

fn settings() -> ExecutorSettings {
    ExecutorSettings {
        retry: RetryPolicy {
            budget: 2,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(50),
            max_inline_wait: Duration::from_secs(5),
        },
        ..ExecutorSettings::default()
    }
}

async fn env_with(
    settings_for: ProviderSettings,
    fake: FakeProvider,
    exec: ExecutorSettings,
) -> Env {
    let mut providers = ProviderRegistry::new();
    providers.insert(build(settings_for).unwrap());
    let store = Arc::new(MemoryStore::new());
    let registry = prometheus::Registry::new();
    let deps = ExecutorDeps {
        providers,
        repositories: Arc::new(repositories()),
        inputs: store.clone(),
        journal: store.clone(),
        cache: store.clone(),
        transcripts: store.clone(),
        events: store.clone(),
        limiter: Arc::new(verdict_backends::ratelimit::memory::MemoryRateLimiter::new()),
        metrics: WorkerMetrics::register(&registry).unwrap(),
        clock: Arc::new(SystemClock),
    };
    Env {
        fake,
        executor: StageExecutor::new(deps, exec),
        store,
        registry,
    }
}

async fn env(kind: ProviderKind, script: Script) -> Env {
    let fake = FakeProvider::start().await;
    fake.script(MODEL, script);
    let s = provider_settings(kind, &fake.base_url(), Duration::from_secs(10));
    env_with(s, fake, settings()).await
}

fn request(stage: StageKind, tools: bool, deadline_in: Duration) -> StageRequest {
    let mode = RepairMode::default_for(stage.default_protocol());
    StageRequest {
        version: WIRE_VERSION,
        task_id: "task-7".into(),
        stage_id: stage.as_str().into(),
        stage,
        protocol: stage.default_protocol(),
        required: true,
        attempt: 1,
        priority: Priority::Interactive,
        deadline_unix_ms: SystemClock.now_unix_ms()
            + u64::try_from(deadline_in.as_millis()).unwrap(),
        language: Language::En,
        repository: Some(RepositoryRef {
            url: REPO_URL.into(),
            commit: COMMIT.into(),
            base: None,
        }),
        inputs: vec![InputRef {
            name: "diff".into(),
            content: InputContent::Inline { text: DIFF.into() },
        }],
        tools: if tools {
            Tool::READ_ONLY.to_vec()
        } else {
            Vec::new()
        },
        provider: None,
        model: None,
        repair: RepairPolicy {
            mode,
            max_attempts: 3,
        },
        structured_output: None,
        validate: ValidateOptions::default(),
        changed_files: None,
    }
}

const LONG: Duration = Duration::from_secs(600);

async fn run(env: &Env, req: &StageRequest) -> Execution {
    tokio::time::timeout(
        Duration::from_secs(30),
        env.executor.execute(req, &CancellationToken::new()),
    )
    .await
    .expect("the stage ends")
}

/// The request body as text: enough to assert what was (not) sent, in either wire format.
fn text(r: &RecordedRequest) -> String {
    r.body.to_string()
}

fn has_tools(r: &RecordedRequest) -> bool {
    r.body
        .get("tools")
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
}

fn last_user_text(r: &RecordedRequest) -> String {
    let msgs = r.body["messages"].as_array().unwrap();
    let last = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
    match &last["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[tokio::test]
async fn valid_first_time_in_both_wire_formats() {
    for kind in KINDS {
        let e = env(kind, Script::new([Behaviour::text(VALID).usage(1200, 300)])).await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        match &x.result.outcome {
            StageOutcome::Ok {
                value,
                repaired: false,
                attempts: 1,
            } => {
                assert_eq!(value["score"], 5);
                assert_eq!(value["findings"][0]["file"], "src/lib.rs");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(x.result.usage.input_tokens, 1200);
        let sent = e.fake.requests_for(MODEL);
        assert_eq!(sent.len(), 1);
        let body = text(&sent[0]);
        assert!(
            body.contains("<SAKURA_REVIEW>"),
            "{kind:?}: the contract is sent"
        );
        assert!(
            body.contains("diff --git a/src/lib.rs"),
            "{kind:?}: the diff is sent"
        );
        assert!(
            body.contains("<<<UNTRUSTED diff "),
            "{kind:?}: fenced as evidence"
        );
        assert!(
            !has_tools(&sent[0]),
            "{kind:?}: no tools for a stage without tools"
        );
        if kind == ProviderKind::Anthropic {
            assert!(
                sent[0].body["system"]
                    .as_str()
                    .unwrap()
                    .contains("<SAKURA_REVIEW>")
            );
        } else {
            assert_eq!(sent[0].messages()[0]["role"], "system");
        }
    }
}

#[tokio::test]
async fn repaired_in_round_one_and_round_three_with_full_history_and_no_tools() {
    for kind in KINDS {
        let e = env(
            kind,
            Script::new([Behaviour::text(PROSE), Behaviour::text(VALID)]),
        )
        .await;
        let x = run(&e, &request(StageKind::Review, true, LONG)).await;
        assert!(
            matches!(
                x.result.outcome,
                StageOutcome::Ok {
                    repaired: true,
                    attempts: 2,
                    ..
                }
            ),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        let sent = e.fake.requests_for(MODEL);
        assert!(
            has_tools(&sent[0]),
            "{kind:?}: the first call offers the read-only tools"
        );
        let repair = &sent[1];
        assert!(
            !has_tools(repair),
            "{kind:?}: repair calls run without tools"
        );
        assert_eq!(repair.body["temperature"], json!(0.0), "{kind:?}");
        let body = text(repair);
        assert!(
            body.contains("diff --git"),
            "{kind:?}: conversation repair keeps the history"
        );
        assert!(body.contains(PROSE), "{kind:?}: and the invalid answer");
        assert!(
            last_user_text(repair).contains("no <SAKURA_REVIEW> envelope found"),
            "{kind:?}"
        );

        let e = env(
            kind,
            Script::new([
                Behaviour::text(PROSE),
                Behaviour::text(PROSE_AGAIN),
                Behaviour::text(VALID.replace("<SCORE>5</SCORE>", "<SCORE>11</SCORE>")),
                Behaviour::text(VALID),
            ]),
        )
        .await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        assert!(
            matches!(
                x.result.outcome,
                StageOutcome::Ok {
                    repaired: true,
                    attempts: 4,
                    ..
                }
            ),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        let rounds = e.store.events_of_type(EventType::ProtocolRepair);
        assert_eq!(rounds.len(), 3);
        assert!(
            rounds
                .iter()
                .all(|r| r.channel.as_deref() == Some("review:protocol_repair"))
        );
        assert_eq!(rounds[2].data["outcome"], "repaired");
        assert!(
            rounds[2].data["error"]
                .as_str()
                .unwrap()
                .contains("SCORE must be an integer from 1 to 10"),
            "{kind:?}: round 3 repairs the error of round 2's answer"
        );
    }
}

#[tokio::test]
async fn invalid_through_every_round_is_invalid_output_with_the_last_error() {
    for kind in KINDS {
        let e = env(
            kind,
            Script::new([
                Behaviour::text(PROSE),
                Behaviour::text(PROSE_AGAIN),
                Behaviour::text(PROSE),
                Behaviour::truncated("<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>5"),
            ]),
        )
        .await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        match &x.result.outcome {
            StageOutcome::InvalidOutput {
                stage,
                error,
                attempts,
                preview,
                ..
            } => {
                assert_eq!(stage, "review");
                assert!(
                    error.contains("never closed"),
                    "{kind:?}: the last error, {error}"
                );
                assert_eq!(*attempts, 4);
                assert!(preview.starts_with("<SAKURA_REVIEW>"));
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(e.fake.requests_for(MODEL).len(), 4);
        assert_eq!(e.store.transcripts().len(), 1);
    }
}

#[tokio::test]
async fn isolated_repair_holds_only_contract_invalid_response_and_error() {
    for kind in KINDS {
        let prose = "I checked the repository at /srv/checkouts/task-7; this needs review.";
        let e = env(
            kind,
            Script::new([
                Behaviour::text(prose),
                Behaviour::text(r#"{"review": true, "reason": "Parser change."}"#),
            ]),
        )
        .await;
        let x = run(&e, &request(StageKind::Triage, true, LONG)).await;
        assert!(
            matches!(&x.result.outcome, StageOutcome::Ok { value, repaired: true, .. } if value["review"] == true),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        let repair = &e.fake.requests_for(MODEL)[1];
        let body = text(repair);
        assert!(
            body.contains("\\\"review\\\"") || body.contains("\"review\""),
            "{kind:?}: the contract"
        );
        assert!(
            body.contains("this needs review"),
            "{kind:?}: the invalid response"
        );
        assert!(
            body.contains("text instead of a JSON object") || body.contains("JSON object"),
            "{kind:?}: the error"
        );
        assert!(
            !body.contains("diff --git"),
            "{kind:?}: not the original task"
        );
        assert!(
            !body.contains(REPO_URL) && !body.contains(COMMIT),
            "{kind:?}: not the repository"
        );
        assert!(!has_tools(repair), "{kind:?}: no tools");
        let roles: Vec<&str> = repair
            .messages()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        let expected: &[&str] = if kind == ProviderKind::Anthropic {
            &["user"]
        } else {
            &["system", "user"]
        };
        assert_eq!(
            roles, expected,
            "{kind:?}: one formatting-only system prompt and one user message"
        );
    }
}

#[tokio::test]
async fn deadline_during_the_tool_loop_finalises_without_tools() {
    for kind in KINDS {
        // The first tool call runs; the second turn is still in flight when the deadline passes,
        // so its tool call is answered as not executed and the next call is asked to finalise.
        let e = env(
            kind,
            Script::new([
                Behaviour::tool_call("read", json!({"path": "src/lib.rs"})),
                Behaviour::tool_call("grep", json!({"pattern": "tokens"}))
                    .after(Duration::from_millis(900)),
                Behaviour::text(VALID),
            ]),
        )
        .await;
        let x = run(
            &e,
            &request(StageKind::Review, true, Duration::from_millis(500)),
        )
        .await;
        assert!(
            matches!(
                x.result.outcome,
                StageOutcome::Ok {
                    repaired: false,
                    ..
                }
            ),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        let sent = e.fake.requests_for(MODEL);
        assert_eq!(sent.len(), 3, "{kind:?}");
        assert!(
            has_tools(&sent[0]) && has_tools(&sent[1]),
            "{kind:?}: tools before the deadline"
        );
        assert!(
            text(&sent[1]).contains("pub fn tokens"),
            "{kind:?}: the first tool call ran"
        );
        let last = &sent[2];
        assert!(!has_tools(last), "{kind:?}: no tools after the deadline");
        let body = text(last);
        assert!(
            body.contains("Not executed: the time budget for this task was reached"),
            "{kind:?}"
        );
        assert!(
            last_user_text(last).contains("time budget for this task has been reached")
                || body.contains("time budget for this task has been reached"),
            "{kind:?}: the finalise message"
        );
        assert_eq!(
            body.matches("time budget for this task has been reached")
                .count(),
            1,
            "{kind:?}: added once"
        );
        assert_eq!(e.store.events_of_type(EventType::DeadlineReached).len(), 1);
    }
}

#[tokio::test]
async fn tool_calls_after_the_finalise_message_are_not_executed_and_the_text_is_judged() {
    for kind in KINDS {
        let e = env(
            kind,
            Script::new([
                Behaviour::tool_call("read", json!({"path": "README.md"}))
                    .after(Duration::from_millis(700)),
                Behaviour::text(VALID).and_tool_call("read", json!({"path": "src/lib.rs"})),
            ]),
        )
        .await;
        let x = run(
            &e,
            &request(StageKind::Review, true, Duration::from_millis(300)),
        )
        .await;
        assert!(
            matches!(x.result.outcome, StageOutcome::Ok { .. }),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        assert_eq!(
            e.fake.requests_for(MODEL).len(),
            2,
            "{kind:?}: the text of the finalised turn is parsed"
        );
        let transcript = &e.store.transcripts()[0];
        let not_run = transcript
            .entries
            .iter()
            .filter(|en| {
                matches!(
                    en,
                    verdict_proto::transcript::TranscriptEntry::ToolCall {
                        executed: false,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(not_run, 2, "{kind:?}");
    }
}

#[tokio::test]
async fn tools_refuse_escapes_through_the_executor() {
    for kind in KINDS {
        let e = env(
            kind,
            Script::new([
                Behaviour::tool_call("read", json!({"path": "../x"})),
                Behaviour::tool_call("read", json!({"path": "/etc/passwd"})),
                Behaviour::tool_call("read", json!({"path": "escape"})),
                Behaviour::tool_call("ls", json!({"path": "up"})),
                Behaviour::text(VALID),
            ]),
        )
        .await;
        let x = run(&e, &request(StageKind::Review, true, LONG)).await;
        assert!(
            matches!(x.result.outcome, StageOutcome::Ok { .. }),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        let last = text(e.fake.requests_for(MODEL).last().unwrap());
        assert!(
            !last.contains("root:x:0:0"),
            "{kind:?}: /etc/passwd never leaks"
        );
        let t = &e.store.transcripts()[0];
        let outputs: Vec<(bool, String)> = t
            .entries
            .iter()
            .filter_map(|en| match en {
                verdict_proto::transcript::TranscriptEntry::ToolCall {
                    is_error, output, ..
                } => Some((*is_error, output.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(outputs.len(), 4);
        assert!(
            outputs.iter().all(|(err, _)| *err),
            "{kind:?}: every escape is refused: {outputs:?}"
        );
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_out_then_succeeds() {
    for kind in KINDS {
        let e = env(
            kind,
            Script::new([
                Behaviour::status(429).retry_after("1"),
                Behaviour::text(VALID),
            ]),
        )
        .await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        assert!(
            matches!(x.result.outcome, StageOutcome::Ok { .. }),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        assert_eq!(e.fake.requests_for(MODEL).len(), 2);
        let waited = e.store.transcripts()[0]
            .entries
            .iter()
            .find_map(|en| match en {
                verdict_proto::transcript::TranscriptEntry::Retry { wait_ms, kind, .. } => {
                    Some((*wait_ms, kind.clone()))
                }
                _ => None,
            });
        assert_eq!(
            waited,
            Some((1000, "rate_limited".to_owned())),
            "{kind:?}: Retry-After honoured"
        );
    }
}

#[tokio::test]
async fn server_errors_until_the_budget_is_spent_are_provider_unavailable() {
    for kind in KINDS {
        let e = env(kind, Script::always(Behaviour::status(503))).await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        assert!(
            matches!(
                x.result.outcome,
                StageOutcome::ExecutionFailure {
                    kind: FailureKind::ProviderUnavailable,
                    ..
                }
            ),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        assert_eq!(
            e.fake.requests_for(MODEL).len(),
            3,
            "{kind:?}: one call and the budget of two retries"
        );
    }
}

#[tokio::test]
async fn unauthorised_is_auth_and_not_retried() {
    for kind in KINDS {
        let e = env(kind, Script::always(Behaviour::status(401))).await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        assert!(
            matches!(
                x.result.outcome,
                StageOutcome::ExecutionFailure {
                    kind: FailureKind::Auth,
                    retryable: false,
                    ..
                }
            ),
            "{kind:?}: {:?}",
            x.result.outcome
        );
        assert_eq!(e.fake.requests_for(MODEL).len(), 1);
    }
}

#[tokio::test]
async fn a_commit_the_repository_lacks_is_not_found_and_no_provider_is_called() {
    let e = env(ProviderKind::Openai, Script::always(Behaviour::text(VALID))).await;
    let mut req = request(StageKind::Review, true, LONG);
    req.repository.as_mut().unwrap().commit = "0".repeat(40);
    let x = run(&e, &req).await;
    match &x.result.outcome {
        StageOutcome::ExecutionFailure {
            kind: FailureKind::NotFound,
            retryable: false,
            message,
        } => assert!(message.contains(&"0".repeat(40)), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(e.fake.requests_for(MODEL).is_empty());
}

#[tokio::test]
async fn transport_timeout_is_timeout() {
    for kind in KINDS {
        let fake = FakeProvider::start().await;
        fake.script(MODEL, Script::always(Behaviour::hang()));
        let s = provider_settings(kind, &fake.base_url(), Duration::from_millis(300));
        let mut exec = settings();
        exec.retry.budget = 0;
        let e = env_with(s, fake, exec).await;
        let x = run(&e, &request(StageKind::Review, false, LONG)).await;
        assert_eq!(
            x.result.outcome.failure_kind(),
            Some(FailureKind::Timeout),
            "{kind:?}: {:?}",
            x.result.outcome
        );
    }
}

#[tokio::test]
async fn cancellation_is_cancelled() {
    for kind in KINDS {
        let e = env(kind, Script::always(Behaviour::hang())).await;
        let req = request(StageKind::Review, false, LONG);
        let cancel = CancellationToken::new();
        let run = e.executor.execute(&req, &cancel);
        let cancel_when_sent = async {
            e.fake
                .wait_for_requests(1, Duration::from_secs(10))
                .await
                .unwrap();
            cancel.cancel();
        };
        let (x, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(run, cancel_when_sent)
        })
        .await
        .expect("cancellation is prompt");
        assert_eq!(
            x.result.outcome.failure_kind(),
            Some(FailureKind::Cancelled),
            "{kind:?}"
        );
    }
}

async fn exec_env(command: Vec<String>) -> Env {
    let fake = FakeProvider::start().await;
    let mut s = provider_settings(
        ProviderKind::Exec,
        "http://unused.invalid",
        Duration::from_secs(10),
    );
    s.command = command;
    s.no_tools_flag = Some("--no-tools".into());
    env_with(s, fake, settings()).await
}

#[tokio::test]
async fn exec_provider_failures_are_process_start_and_process_exit() {
    let e = exec_env(vec!["/nonexistent/verdict-agent".into()]).await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    assert_eq!(
        x.result.outcome.failure_kind(),
        Some(FailureKind::ProcessStart),
        "{:?}",
        x.result.outcome
    );

    let e = exec_env(vec![
        "/bin/sh".into(),
        "-c".into(),
        "echo 'model not found' >&2; exit 1".into(),
    ])
    .await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    match &x.result.outcome {
        StageOutcome::ExecutionFailure {
            kind: FailureKind::ProcessExit,
            message,
            ..
        } => {
            assert!(message.contains("model not found"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn exec_provider_answers_from_stdout_in_the_snapshot() {
    let script = format!("cat > /dev/null; test -f src/lib.rs || exit 3; printf '%s' '{VALID}'");
    let e = exec_env(vec!["/bin/sh".into(), "-c".into(), script]).await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
}

/// A stage under `mode` against an OpenAI-compatible fake answering from `script`.
async fn structured_env(mode: StructuredOutput, script: Script) -> Env {
    let fake = FakeProvider::start().await;
    fake.script(MODEL, script);
    let mut s = provider_settings(
        ProviderKind::Openai,
        &fake.base_url(),
        Duration::from_secs(10),
    );
    s.structured_output = mode;
    env_with(s, fake, settings()).await
}

fn downgrades(e: &Env, mode: &str) -> f64 {
    e.registry
        .gather()
        .iter()
        .filter(|f| f.name() == "verdict_structured_output_downgrades_total")
        .flat_map(|f| f.get_metric().to_vec())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "mode" && l.value() == mode)
        })
        .map(|m| m.get_counter().get_value())
        .sum()
}

const REVIEWER_ANSWER: &str = r#"{"findings": [], "files_reviewed": ["src/lib.rs"]}"#;

#[tokio::test]
async fn a_constraint_the_provider_refuses_is_dropped_once_and_that_model_is_asked_without_it() {
    let refusal = Behaviour::status(400).body(
        r#"{"error": {"message": "Invalid schema for response_format 'verdict_reviewer': 'maxItems' is not permitted.", "type": "invalid_request_error", "param": "response_format"}}"#,
    );
    let e = structured_env(
        StructuredOutput::JsonSchema,
        Script::new([
            refusal,
            Behaviour::text(REVIEWER_ANSWER),
            Behaviour::text(REVIEWER_ANSWER),
        ]),
    )
    .await;
    let reviewer = request(StageKind::Reviewer, false, LONG);
    let x = run(&e, &reviewer).await;
    assert!(
        matches!(
            x.result.outcome,
            StageOutcome::Ok {
                repaired: false,
                ..
            }
        ),
        "a refused constraint is never a failed stage: {:?}",
        x.result.outcome
    );
    let sent = e.fake.requests_for(MODEL);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].body["response_format"]["json_schema"]["name"],
        "verdict_reviewer"
    );
    assert!(
        sent[1].body.get("response_format").is_none(),
        "retried without it"
    );
    assert_eq!(downgrades(&e, "json_schema"), 1.0);

    // Remembered for that provider and model: the next stage is not constrained at all.
    let mut again = reviewer.clone();
    again.stage_id = "reviewer-2".into();
    let x = run(&e, &again).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
    let sent = e.fake.requests_for(MODEL);
    assert_eq!(sent.len(), 3);
    assert!(sent[2].body.get("response_format").is_none());
    assert_eq!(downgrades(&e, "json_schema"), 1.0);
}

/// Decision 182: a list's bound on the wire is what the call's output limit holds.
#[tokio::test]
async fn a_constraints_lists_are_bounded_to_what_the_output_limit_holds() {
    for (max_tokens, findings) in [(1024, 4), (8192, 20)] {
        let fake = FakeProvider::start().await;
        fake.script(MODEL, Script::new([Behaviour::text(REVIEWER_ANSWER)]));
        let mut s = provider_settings(
            ProviderKind::Openai,
            &fake.base_url(),
            Duration::from_secs(10),
        );
        s.structured_output = StructuredOutput::JsonSchema;
        s.max_tokens = Some(max_tokens);
        let e = env_with(s, fake, settings()).await;
        run(&e, &request(StageKind::Reviewer, false, LONG)).await;
        let sent = e.fake.requests_for(MODEL);
        let schema = &sent[0].body["response_format"]["json_schema"]["schema"];
        assert_eq!(
            schema["properties"]["findings"]["maxItems"],
            json!(findings),
            "max_tokens {max_tokens}: {schema}"
        );
    }
}

#[tokio::test]
async fn a_400_that_does_not_name_the_constraint_fails_closed() {
    let e = structured_env(
        StructuredOutput::JsonSchema,
        Script::always(Behaviour::status(400).body(
            r#"{"error": {"message": "The model `model-a` does not exist.", "type": "invalid_request_error"}}"#,
        )),
    )
    .await;
    let x = run(&e, &request(StageKind::Reviewer, false, LONG)).await;
    assert!(
        matches!(
            &x.result.outcome,
            StageOutcome::ExecutionFailure {
                kind: FailureKind::BadRequest,
                ..
            }
        ),
        "{:?}",
        x.result.outcome
    );
    assert_eq!(e.fake.requests_for(MODEL).len(), 1);
    assert_eq!(downgrades(&e, "json_schema"), 0.0);
}

/// The review skeleton's placeholders, in the right format: what a tiny model under a grammar
/// writes.
const ECHO: &str = "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>5</SCORE>\n<DECISION>comment</DECISION>\n<DECISION_REASON>\nnatural-language reason\n</DECISION_REASON>\n<SUMMARY>\nMarkdown summary\n</SUMMARY>\n<FINDINGS>\n</FINDINGS>\n</SAKURA_REVIEW>";

#[tokio::test]
async fn a_grammar_holds_every_call_without_tools_and_an_echo_of_the_contract_is_repaired() {
    let e = structured_env(
        StructuredOutput::Grammar,
        Script::new([Behaviour::text(ECHO), Behaviour::text(VALID)]),
    )
    .await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { repaired: true, .. }),
        "{:?}",
        x.result.outcome
    );
    let sent = e.fake.requests_for(MODEL);
    assert_eq!(sent.len(), 2);
    for (i, r) in sent.iter().enumerate() {
        assert_eq!(r.rejection, None);
        let grammar = r.body["grammar"].as_str().unwrap_or_default();
        assert!(
            grammar.starts_with("root ::= \"<SAKURA_REVIEW>"),
            "call {i}: {}",
            r.body
        );
    }
    let repair = last_user_text(&sent[1]);
    assert!(
        repair.contains("copied from the output contract"),
        "{repair}"
    );
}

#[tokio::test]
async fn an_echo_that_is_never_repaired_is_invalid_output_not_a_completed_review() {
    let e = structured_env(
        StructuredOutput::Grammar,
        Script::always(Behaviour::text(ECHO)),
    )
    .await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    match &x.result.outcome {
        StageOutcome::InvalidOutput { diagnostics, .. } => assert!(
            diagnostics
                .as_slice()
                .iter()
                .all(|d| d.code == verdict_proto::DiagnosticCode::EchoedContract),
            "{diagnostics:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_turn_that_offers_tools_carries_no_constraint() {
    let e = structured_env(
        StructuredOutput::Grammar,
        Script::new([Behaviour::text(VALID)]),
    )
    .await;
    let x = run(&e, &request(StageKind::Review, true, LONG)).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
    let sent = e.fake.requests_for(MODEL);
    assert!(has_tools(&sent[0]));
    assert!(sent[0].body.get("grammar").is_none(), "{}", sent[0].body);
}

#[tokio::test]
async fn auto_on_llama_cpp_takes_the_grammar_and_sizes_every_call_to_the_servers_window() {
    let fake = FakeProvider::start().await;
    fake.serve_llama_cpp_props(4096);
    fake.script(MODEL, Script::new([Behaviour::text(VALID)]));
    let mut s = provider_settings(
        ProviderKind::Openai,
        &fake.base_url(),
        Duration::from_secs(10),
    );
    s.structured_output = StructuredOutput::Auto;
    s.max_tokens = None;
    let e = env_with(s, fake, settings()).await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
    let sent = e.fake.requests_for(MODEL);
    assert!(
        sent[0].body["grammar"].as_str().is_some(),
        "llama.cpp found: {}",
        sent[0].body
    );
    // The default output limit, cut to what the prompt leaves of 4,096 tokens.
    let max_tokens = sent[0].body["max_tokens"].as_u64().unwrap();
    let prompt_bytes = sent[0]
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").len())
        .sum::<usize>() as u64;
    assert!(
        max_tokens <= 2048 && max_tokens + prompt_bytes / 3 <= 4096,
        "{max_tokens} after {prompt_bytes} bytes"
    );
    assert!(max_tokens >= 256);
}

/// Decision 181: a model whose chat template cannot call tools is not offered them, so even a
/// stage that names tools starts with a constrained turn; one whose template can is offered them.
#[tokio::test]
async fn a_llama_cpp_template_without_tool_calls_gets_no_tools_and_a_constrained_first_turn() {
    for supports_tool_calls in [false, true] {
        let fake = FakeProvider::start().await;
        fake.serve_llama_cpp_props_with(8192, supports_tool_calls);
        fake.script(MODEL, Script::new([Behaviour::text(VALID)]));
        let mut s = provider_settings(
            ProviderKind::Openai,
            &fake.base_url(),
            Duration::from_secs(10),
        );
        s.structured_output = StructuredOutput::Auto;
        let e = env_with(s, fake, settings()).await;
        let x = run(&e, &request(StageKind::Review, true, LONG)).await;
        assert!(
            matches!(x.result.outcome, StageOutcome::Ok { .. }),
            "{:?}",
            x.result.outcome
        );
        let sent = e.fake.requests_for(MODEL);
        assert_eq!(has_tools(&sent[0]), supports_tool_calls, "{}", sent[0].body);
        assert_eq!(
            sent[0].body.get("grammar").is_some(),
            !supports_tool_calls,
            "{}",
            sent[0].body
        );
        let system = sent[0].messages()[0]["content"].as_str().unwrap_or("");
        assert_eq!(
            system.contains("read-only tools"),
            supports_tool_calls,
            "the prompt names the tools only when they are offered"
        );
    }
}

#[tokio::test]
async fn evidence_larger_than_the_window_is_cut_by_whole_files_with_a_coverage_note() {
    let fake = FakeProvider::start().await;
    fake.script(MODEL, Script::always(Behaviour::text(VALID)));
    let mut s = provider_settings(
        ProviderKind::Openai,
        &fake.base_url(),
        Duration::from_secs(10),
    );
    s.context_window = Some(8192);
    let e = env_with(s, fake, settings()).await;
    // Ten files of about 6 KB each: far more than 8,192 tokens leave for evidence.
    let diff: String = (0..10)
        .map(|i| {
            let body: String = (0..150).map(|n| format!("+    let v{n} = {n};\n")).collect();
            format!("diff --git a/src/f{i}.rs b/src/f{i}.rs\n--- a/src/f{i}.rs\n+++ b/src/f{i}.rs\n@@ -1,0 +1,150 @@\n{body}")
        })
        .collect();
    let mut req = request(StageKind::Review, false, LONG);
    req.inputs[0].content = InputContent::Inline { text: diff.clone() };
    let x = run(&e, &req).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
    let cut = x
        .result
        .evidence_cut
        .as_ref()
        .expect("the evidence was cut");
    assert_eq!(cut.context_window, 8192);
    let [input] = cut.inputs.as_slice() else {
        panic!("{cut:?}")
    };
    assert_eq!(input.total_bytes as usize, diff.len());
    assert!(
        input.shown_bytes > 0 && input.shown_bytes < input.total_bytes,
        "{input:?}"
    );
    assert!(
        input.files_not_shown.contains(&"src/f9.rs".to_owned()),
        "{input:?}"
    );
    let sent = e.fake.requests_for(MODEL);
    let user = sent[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(user.contains("src/f0.rs") && !user.contains("src/f9.rs b/src/f9.rs"));
    assert!(
        user.contains(
            "Coverage note: the material was cut to fit the model's context window of 8192 tokens"
        ),
        "{user}"
    );
    // The prompt as sent leaves the answer its room: no 400 from the server.
    let prompt_bytes: usize = sent[0]
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").len())
        .sum();
    let max_tokens = sent[0].body["max_tokens"].as_u64().unwrap() as usize;
    assert!(
        prompt_bytes / 3 + max_tokens <= 8192,
        "{prompt_bytes} {max_tokens}"
    );
    assert!(max_tokens >= 1024, "{max_tokens}");
}

#[tokio::test]
async fn a_prompt_that_cannot_fit_the_window_is_not_sent_and_the_failure_names_the_setting() {
    let fake = FakeProvider::start().await;
    fake.script(MODEL, Script::always(Behaviour::text(VALID)));
    let mut s = provider_settings(
        ProviderKind::Openai,
        &fake.base_url(),
        Duration::from_secs(10),
    );
    s.context_window = Some(600);
    let e = env_with(s, fake, settings()).await;
    let x = run(&e, &request(StageKind::Review, false, LONG)).await;
    match &x.result.outcome {
        StageOutcome::ExecutionFailure { kind, message, .. } => {
            assert_eq!(*kind, FailureKind::BadRequest);
            assert!(message.contains("context_window"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.fake.request_count(),
        0,
        "nothing is sent that the server would refuse"
    );
}

#[tokio::test]
async fn constraints_name_only_the_files_of_the_stages_diff() {
    let e = structured_env(
        StructuredOutput::JsonSchema,
        Script::new([Behaviour::text(REVIEWER_ANSWER)]),
    )
    .await;
    let x = run(&e, &request(StageKind::Reviewer, false, LONG)).await;
    assert!(
        matches!(x.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        x.result.outcome
    );
    let schema = &e.fake.requests_for(MODEL)[0].body["response_format"]["json_schema"]["schema"];
    let finding = &schema["properties"]["findings"]["items"]["anyOf"];
    assert_eq!(
        finding[0]["properties"]["file"]["enum"],
        json!(["src/lib.rs"])
    );
    assert_eq!(finding[1]["properties"]["file"], json!({"type": "null"}));
    assert_eq!(
        schema["properties"]["files_reviewed"]["items"]["enum"],
        json!(["src/lib.rs"])
    );
}

/// An input store that cannot be reached, as a Redis primary failing over looks to a worker
/// whose claim landed on a live one.
#[derive(Debug)]
struct UnreachableInputs;

impl verdict_backends::store::InputStore for UnreachableInputs {
    fn get<'a>(
        &'a self,
        _sha256: &'a str,
    ) -> verdict_backends::BoxFuture<'a, Result<Option<Vec<u8>>, verdict_backends::store::InputError>>
    {
        Box::pin(async {
            Err(verdict_backends::store::InputError::Unavailable(
                "state store unavailable: connection refused".into(),
            ))
        })
    }

    fn put<'a>(
        &'a self,
        _bytes: &'a [u8],
    ) -> verdict_backends::BoxFuture<'a, Result<String, verdict_backends::store::InputError>> {
        Box::pin(async {
            Err(verdict_backends::store::InputError::Unavailable(
                "state store unavailable: connection refused".into(),
            ))
        })
    }
}

/// Inputs the store cannot give now make the stage wait and run again (a requeue), not fail:
/// the outage is not the stage's, and no provider is called. An input that is gone for good
/// fails it at once.
#[tokio::test]
async fn inputs_the_store_cannot_give_now_requeue_the_stage_without_calling_the_provider() {
    let mut env = env(ProviderKind::Openai, Script::always(Behaviour::text("{}"))).await;
    let mut req = request(StageKind::Summary, false, LONG);
    req.inputs = vec![InputRef {
        name: "diff".into(),
        content: InputContent::Stored {
            sha256: verdict_backends::store::content_hash(DIFF.as_bytes()),
            bytes: DIFF.len() as u64,
        },
    }];
    let mut deps = env.executor.deps().clone();
    deps.inputs = Arc::new(UnreachableInputs);
    env.executor = StageExecutor::new(deps, settings());
    let outage = run(&env, &req).await;
    assert!(outage.requeue_after.is_some(), "{outage:?}");
    assert!(
        matches!(
            outage.result.outcome,
            StageOutcome::ExecutionFailure {
                kind: FailureKind::Internal,
                retryable: true,
                ..
            }
        ),
        "{:?}",
        outage.result.outcome
    );

    // The store answers, and the input is not in it: final.
    let mut deps = env.executor.deps().clone();
    deps.inputs = env.store.clone();
    env.executor = StageExecutor::new(deps, settings());
    let missing = run(&env, &req).await;
    assert_eq!(missing.requeue_after, None);
    assert!(
        matches!(
            missing.result.outcome,
            StageOutcome::ExecutionFailure {
                retryable: false,
                ..
            }
        ),
        "{:?}",
        missing.result.outcome
    );
    assert!(env.fake.requests().is_empty(), "no provider was called");
}
