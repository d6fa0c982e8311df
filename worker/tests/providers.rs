//! The providers against real servers: both HTTP wire formats against the fake provider (request
//! shapes as the server received them, responses, every E4 failure kind, timeouts, cancellation,
//! no leaked key), and `exec` against `/bin/sh` scripts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;
use verdict_testkit::{Behaviour, FakeProvider, RecordedRequest, Script};
use verdict_worker::provider::{
    ChatRequest, ChatResponse, FinishReason, Message, Provider, ProviderError, ProviderKind,
    ProviderSettings, Secret, StructuredOutput, TokenUsage, ToolCall, ToolChoice, ToolDefinition,
    build,
};

/// A key no redaction pattern recognises, so only the providers' own scrubbing keeps it out.
const KEY: &str = "verdict-fake-key-7f3a9c2e";
const MODEL: &str = "model-a";
const DEADLINE: Duration = Duration::from_secs(5);
const HTTP_KINDS: [ProviderKind; 2] = [ProviderKind::Openai, ProviderKind::Anthropic];

fn settings(kind: ProviderKind, base_url: &str) -> ProviderSettings {
    ProviderSettings {
        name: format!("{kind:?}").to_lowercase(),
        kind,
        base_url: base_url.to_owned(),
        api_key: Some(Secret::new(KEY)),
        model: MODEL.to_owned(),
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(2),
        max_tokens: Some(777),
        temperature: Some(0.25),
        command: Vec::new(),
        no_tools_flag: None,
        tools_flag: None,
        structured_output: StructuredOutput::Off,
        structured_bounds: Default::default(),
        context_window: None,
    }
}

/// A fake provider with `model-a` scripted, and a client of `kind` pointed at it.
async fn serve(kind: ProviderKind, script: Script) -> (FakeProvider, Arc<dyn Provider>) {
    let fake = FakeProvider::start().await;
    fake.script(MODEL, script);
    let provider = build(settings(kind, &fake.base_url())).unwrap();
    (fake, provider)
}

fn chat(messages: Vec<Message>, tools: Vec<ToolDefinition>) -> ChatRequest {
    ChatRequest {
        model: MODEL.to_owned(),
        messages,
        tools,
        tool_choice: ToolChoice::Auto,
        temperature: None,
        max_tokens: None,
        constraint: None,
    }
}

fn simple() -> ChatRequest {
    chat(
        vec![
            Message::system("You review code."),
            Message::user("Review this diff."),
        ],
        vec![],
    )
}

fn read_tool() -> ToolDefinition {
    ToolDefinition {
        name: "read".into(),
        description: "Read a file of the snapshot".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

async fn call(
    provider: &dyn Provider,
    request: &ChatRequest,
) -> Result<ChatResponse, ProviderError> {
    let cancel = CancellationToken::new();
    tokio::time::timeout(DEADLINE, provider.complete(request, None, &cancel))
        .await
        .expect("the call should end within the test deadline")
}

async fn failure(kind: ProviderKind, behaviour: Behaviour) -> ProviderError {
    let (_fake, provider) = serve(kind, Script::new([behaviour])).await;
    call(provider.as_ref(), &simple()).await.unwrap_err()
}

fn only_request(fake: &FakeProvider) -> RecordedRequest {
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    requests.into_iter().next().unwrap()
}

#[tokio::test]
async fn plain_text_answers_and_the_request_on_the_wire() {
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(
            kind,
            Script::new([Behaviour::text("Looks good.").usage(42, 7)]),
        )
        .await;
        let mut request = simple();
        request.tool_choice = ToolChoice::None;
        let response = call(provider.as_ref(), &request).await.unwrap();
        assert_eq!(response.content, "Looks good.");
        assert_eq!(response.finish, FinishReason::Stop);
        assert!(response.tool_calls.is_empty());
        assert_eq!(
            response.usage,
            TokenUsage {
                input_tokens: 42,
                output_tokens: 7
            }
        );
        assert!(response.raw.contains("Looks good."));

        let seen = only_request(&fake);
        assert_eq!(seen.rejection, None, "{kind:?}");
        assert_eq!(seen.model.as_deref(), Some(MODEL));
        let body = &seen.body;
        assert!(body.get("tools").is_none(), "{kind:?}: {body}");
        assert!(body.get("tool_choice").is_none(), "{kind:?}: {body}");
        assert_eq!(body["temperature"], 0.25, "settings' temperature");
        assert_eq!(body["max_tokens"], 777, "settings' max_tokens");
        match kind {
            ProviderKind::Openai => {
                assert_eq!(seen.path, "/v1/chat/completions");
                assert_eq!(seen.bearer_token(), Some(KEY));
                assert_eq!(
                    body["messages"],
                    json!([
                        {"role": "system", "content": "You review code."},
                        {"role": "user", "content": "Review this diff."},
                    ])
                );
            }
            _ => {
                assert_eq!(seen.path, "/v1/messages");
                assert_eq!(seen.header("x-api-key"), Some(KEY));
                assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(seen.header("authorization"), None);
                assert_eq!(body["system"], "You review code.");
                assert_eq!(
                    body["messages"],
                    json!([{"role": "user", "content": [{"type": "text", "text": "Review this diff."}]}])
                );
            }
        }
    }
}

#[tokio::test]
async fn request_values_override_settings_and_anthropic_defaults_max_tokens() {
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(kind, Script::always(Behaviour::text("ok"))).await;
        let mut request = simple();
        request.temperature = Some(0.0);
        request.max_tokens = Some(64);
        call(provider.as_ref(), &request).await.unwrap();
        let body = &only_request(&fake).body;
        assert_eq!(
            (body["temperature"].clone(), body["max_tokens"].clone()),
            (json!(0.0), json!(64))
        );
    }
    let fake = FakeProvider::start().await;
    fake.script(MODEL, Script::always(Behaviour::text("ok")));
    let mut s = settings(ProviderKind::Anthropic, &fake.base_url());
    (s.max_tokens, s.temperature, s.api_key) = (None, None, None);
    call(build(s).unwrap().as_ref(), &simple()).await.unwrap();
    let seen = only_request(&fake);
    assert_eq!(seen.body["max_tokens"], 4096);
    assert!(seen.body.get("temperature").is_none());
    assert_eq!(seen.header("x-api-key"), None);
}

#[tokio::test]
async fn a_tool_round_is_parsed_and_its_follow_up_accepted() {
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(
            kind,
            Script::new([
                Behaviour::tool_call("read", json!({"path": "src/lib.rs"}))
                    .with_text("Let me read it.")
                    .usage(100, 20),
                Behaviour::text("Done: no findings."),
            ]),
        )
        .await;
        let mut request = chat(
            vec![Message::system("policy"), Message::user("Review.")],
            vec![read_tool()],
        );
        let first = call(provider.as_ref(), &request).await.unwrap();
        assert_eq!(first.finish, FinishReason::ToolCalls, "{kind:?}");
        assert_eq!(first.content, "Let me read it.");
        assert_eq!(
            first.usage,
            TokenUsage {
                input_tokens: 100,
                output_tokens: 20
            }
        );
        let [tool_call] = first.tool_calls.as_slice() else {
            panic!("one tool call expected: {first:?}")
        };
        assert_eq!(tool_call.name, "read");
        let args: Value = serde_json::from_str(&tool_call.arguments).unwrap();
        assert_eq!(args, json!({"path": "src/lib.rs"}));

        request.messages.push(Message::assistant(
            first.content.clone(),
            first.tool_calls.clone(),
        ));
        request
            .messages
            .push(Message::tool_result(tool_call.id.clone(), "pub fn f() {}"));
        let second = call(provider.as_ref(), &request).await.unwrap();
        assert_eq!(second.content, "Done: no findings.");

        let seen = fake.requests_for(MODEL);
        assert_eq!(seen.len(), 2);
        assert!(seen.iter().all(|r| r.rejection.is_none()), "{seen:#?}");
        let (first_body, follow_up) = (&seen[0].body, &seen[1].body);
        match kind {
            ProviderKind::Openai => {
                assert_eq!(
                    first_body["tools"],
                    json!([{"type": "function", "function": {
                        "name": "read",
                        "description": "Read a file of the snapshot",
                        "parameters": read_tool().parameters,
                    }}])
                );
                assert_eq!(first_body["tool_choice"], "auto");
                assert_eq!(
                    follow_up["messages"][2],
                    json!({"role": "assistant", "content": "Let me read it.", "tool_calls": [
                        {"id": tool_call.id, "type": "function", "function": {"name": "read", "arguments": tool_call.arguments}}
                    ]})
                );
                assert_eq!(
                    follow_up["messages"][3],
                    json!({"role": "tool", "tool_call_id": tool_call.id, "content": "pub fn f() {}"})
                );
            }
            _ => {
                assert_eq!(
                    first_body["tools"],
                    json!([{"name": "read", "description": "Read a file of the snapshot", "input_schema": read_tool().parameters}])
                );
                assert_eq!(first_body["tool_choice"], json!({"type": "auto"}));
                assert_eq!(
                    follow_up["messages"][1],
                    json!({"role": "assistant", "content": [
                        {"type": "text", "text": "Let me read it."},
                        {"type": "tool_use", "id": tool_call.id, "name": "read", "input": {"path": "src/lib.rs"}},
                    ]})
                );
                assert_eq!(
                    follow_up["messages"][2],
                    json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": tool_call.id, "content": "pub fn f() {}"},
                    ]})
                );
            }
        }
    }
}

#[tokio::test]
async fn after_the_deadline_tools_are_off_and_late_calls_answered() {
    // E2: the finalise call carries no tools (so no tool_choice either), and the tool calls of
    // the last turn are answered with "not executed" results before the finalise message.
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(kind, Script::new([Behaviour::text("final")])).await;
        let calls = vec![
            ToolCall {
                id: "c1".into(),
                name: "read".into(),
                arguments: "{\"path\":\"a\"}".into(),
            },
            ToolCall {
                id: "c2".into(),
                name: "grep".into(),
                arguments: "{not json".into(),
            },
        ];
        let mut request = chat(
            vec![
                Message::system("policy"),
                Message::user("Review."),
                Message::assistant("", calls),
                Message::tool_result("c1", "deadline reached; not executed"),
                Message::tool_result("c2", "deadline reached; not executed"),
                Message::user("Give your final answer now."),
            ],
            vec![],
        );
        request.tool_choice = ToolChoice::None;
        let response = call(provider.as_ref(), &request).await.unwrap();
        assert_eq!(response.content, "final");
        let seen = only_request(&fake);
        assert_eq!(seen.rejection, None, "{kind:?}");
        assert!(seen.body.get("tools").is_none() && seen.body.get("tool_choice").is_none());
    }
}

#[tokio::test]
async fn truncated_answers_finish_with_length() {
    for kind in HTTP_KINDS {
        let (_fake, provider) =
            serve(kind, Script::new([Behaviour::truncated("<REVIEW>half")])).await;
        let response = call(provider.as_ref(), &simple()).await.unwrap();
        assert_eq!(
            (response.content.as_str(), response.finish),
            ("<REVIEW>half", FinishReason::Length)
        );
    }
}

#[tokio::test]
async fn rate_limits_carry_the_wait() {
    for kind in HTTP_KINDS {
        let e = failure(kind, Behaviour::status(429).retry_after("2")).await;
        assert_eq!(e.kind, FailureKind::RateLimited, "{e}");
        assert!(e.kind.is_retryable());
        assert_eq!(e.status, Some(429));
        assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
        assert!(e.message.contains("HTTP 429"), "{e}");
    }
    let e = failure(
        ProviderKind::Openai,
        Behaviour::status(429)
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "1m30s"),
    )
    .await;
    assert_eq!(e.retry_after, Some(Duration::from_secs(90)));
    let e = failure(ProviderKind::Anthropic, Behaviour::status(529)).await;
    assert_eq!((e.kind, e.retry_after), (FailureKind::RateLimited, None));
    let e = failure(ProviderKind::Openai, Behaviour::status(529)).await;
    assert_eq!(e.kind, FailureKind::ProviderUnavailable);
}

#[tokio::test]
async fn statuses_map_to_failure_kinds() {
    let cases = [
        (503, FailureKind::ProviderUnavailable),
        (500, FailureKind::ProviderUnavailable),
        (401, FailureKind::Auth),
        (403, FailureKind::Auth),
        (400, FailureKind::BadRequest),
        (422, FailureKind::BadRequest),
    ];
    for kind in HTTP_KINDS {
        for (status, want) in cases {
            let e = failure(kind, Behaviour::status(status)).await;
            assert_eq!(
                (e.kind, e.status),
                (want, Some(status)),
                "{kind:?} {status}: {e}"
            );
            assert!(
                e.message.contains("scripted"),
                "the excerpt of the error body: {e}"
            );
        }
        // An unknown model is the server's 404: the request is wrong, not the provider down.
        let (_fake, provider) = serve(kind, Script::new([])).await;
        let mut request = simple();
        request.model = "no-such-model".into();
        let e = call(provider.as_ref(), &request).await.unwrap_err();
        assert_eq!(
            (e.kind, e.status),
            (FailureKind::BadRequest, Some(404)),
            "{e}"
        );
        assert!(e.message.contains("no-such-model"), "{e}");
    }
}

#[tokio::test]
async fn a_malformed_200_is_a_retryable_provider_fault() {
    for kind in HTTP_KINDS {
        let e = failure(kind, Behaviour::malformed()).await;
        assert_eq!(
            (e.kind, e.status),
            (FailureKind::ProviderUnavailable, Some(200)),
            "{e}"
        );
        assert!(e.kind.is_retryable());
        assert!(e.message.contains("not a valid response"), "{e}");
        assert!(
            e.message.contains("{\"id\": \"broken\""),
            "a preview of the body: {e}"
        );
        let e = failure(
            kind,
            Behaviour::malformed_body("<html>gateway says hi</html>"),
        )
        .await;
        assert_eq!(e.kind, FailureKind::ProviderUnavailable);
        assert!(e.message.contains("gateway says hi"), "{e}");
    }
}

#[tokio::test]
async fn a_hang_past_the_transport_timeout_is_a_timeout() {
    for kind in HTTP_KINDS {
        let fake = FakeProvider::start().await;
        fake.script(MODEL, Script::new([Behaviour::hang()]));
        let mut s = settings(kind, &fake.base_url());
        s.timeout = Duration::from_millis(300);
        let provider = build(s).unwrap();
        let started = std::time::Instant::now();
        let e = call(provider.as_ref(), &simple()).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::Timeout, "{e}");
        assert!(e.kind.is_retryable());
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(e.message.contains("300ms"), "{e}");
        // Slow but within the timeout is fine.
        fake.script(
            MODEL,
            Script::new([Behaviour::text("slow").after(Duration::from_millis(50))]),
        );
        assert_eq!(
            call(provider.as_ref(), &simple()).await.unwrap().content,
            "slow"
        );
    }
}

#[tokio::test]
async fn cancelling_a_hanging_call_returns_promptly() {
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(kind, Script::new([Behaviour::hang()])).await;
        let request = simple();
        let cancel = CancellationToken::new();
        let cancel_once_in_flight = async {
            fake.wait_for_requests(1, DEADLINE).await.unwrap();
            cancel.cancel();
        };
        let (result, ()) = tokio::time::timeout(Duration::from_secs(2), async {
            tokio::join!(
                provider.complete(&request, None, &cancel),
                cancel_once_in_flight
            )
        })
        .await
        .expect("cancellation should end the call within 2 s");
        let e = result.unwrap_err();
        assert_eq!(e.kind, FailureKind::Cancelled, "{e}");
        assert!(!e.kind.is_retryable());
    }
}

#[tokio::test]
async fn an_unreachable_provider_is_unavailable() {
    // A port that was just free: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for kind in HTTP_KINDS {
        let provider = build(settings(kind, &format!("http://127.0.0.1:{port}"))).unwrap();
        let e = call(provider.as_ref(), &simple()).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::ProviderUnavailable, "{e}");
        assert_eq!(e.status, None);
        assert!(e.message.contains("cannot connect"), "{e}");
    }
}

#[tokio::test]
async fn the_api_key_appears_in_no_error_and_no_debug_output() {
    let echo = format!(
        "{{\"error\": {{\"message\": \"Incorrect API key provided: {KEY}. You passed: {KEY}\", \"type\": \"invalid_request_error\"}}}}"
    );
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(
            kind,
            Script::new([
                Behaviour::status(401).body(echo.clone()),
                Behaviour::status(500).body(format!("upstream said x-api-key: {KEY}")),
                Behaviour::malformed_body(format!("<html>{KEY}</html>")),
                Behaviour::hang(),
            ]),
        )
        .await;
        let mut errors = Vec::new();
        for _ in 0..3 {
            errors.push(call(provider.as_ref(), &simple()).await.unwrap_err());
        }
        let mut s = settings(kind, &fake.base_url());
        s.timeout = Duration::from_millis(100);
        let impatient = build(s).unwrap();
        errors.push(call(impatient.as_ref(), &simple()).await.unwrap_err());
        assert_eq!(
            errors.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [
                FailureKind::Auth,
                FailureKind::ProviderUnavailable,
                FailureKind::ProviderUnavailable,
                FailureKind::Timeout
            ]
        );
        assert!(
            errors[0].message.contains("Incorrect API key provided"),
            "{}",
            errors[0]
        );
        for e in &errors {
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(!shown.contains(KEY), "{kind:?} leaked the key: {shown}");
            }
        }
        for shown in [
            format!("{provider:?}"),
            format!("{impatient:?}"),
            format!("{:?}", settings(kind, "x")),
        ] {
            assert!(!shown.contains(KEY), "{kind:?} leaked the key: {shown}");
        }
        // The key did go on the wire.
        assert!(
            fake.requests()[0]
                .headers
                .iter()
                .any(|(_, v)| v.contains(KEY))
        );
    }
}

#[test]
fn build_refuses_unusable_settings() {
    let mut s = settings(ProviderKind::Openai, "not a url");
    let e = build(s.clone()).unwrap_err().to_string();
    assert!(
        e.contains("provider `openai`") && e.contains("providers.openai.base_url"),
        "{e}"
    );
    s.base_url = "http://127.0.0.1:1".into();
    s.timeout = Duration::ZERO;
    assert!(
        build(s)
            .unwrap_err()
            .to_string()
            .contains("providers.openai.timeout")
    );
    let e = build(settings(ProviderKind::Exec, ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("providers.exec.command"), "{e}");
}

// --- exec ---------------------------------------------------------------------------------------

/// A temporary directory with a shell script `agent.sh` and an `exec` provider running it.
struct Agent {
    dir: tempfile::TempDir,
    provider: Arc<dyn Provider>,
}

impl Agent {
    fn new(script: &str, configure: impl FnOnce(&mut ProviderSettings)) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sh");
        std::fs::write(&path, format!("OUT='{}'\n{script}\n", dir.path().display())).unwrap();
        let mut s = settings(ProviderKind::Exec, "");
        s.api_key = None;
        s.command = vec!["/bin/sh".into(), path.display().to_string()];
        configure(&mut s);
        Agent {
            dir,
            provider: build(s).unwrap(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap()
    }

    async fn run(
        &self,
        request: &ChatRequest,
        workdir: Option<&Path>,
    ) -> Result<ChatResponse, ProviderError> {
        let cancel = CancellationToken::new();
        tokio::time::timeout(DEADLINE, self.provider.complete(request, workdir, &cancel))
            .await
            .expect("the call should end within the test deadline")
    }
}

fn process_exists(pid: &str) -> bool {
    Path::new(&format!("/proc/{}", pid.trim())).exists()
}

#[tokio::test]
async fn exec_answers_on_stdout_with_the_conversation_on_stdin() {
    let agent = Agent::new(
        r#"cat > "$OUT/stdin.txt"; pwd > "$OUT/pwd.txt"; printf '%s\n' "$@" > "$OUT/args.txt"; printf 'the answer\n'"#,
        |_| {},
    );
    let repo = agent.dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let response = agent.run(&simple(), Some(&repo)).await.unwrap();
    assert_eq!(response.content, "the answer\n");
    assert_eq!(response.finish, FinishReason::Stop);
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.usage, TokenUsage::default());
    assert_eq!(
        agent.read("stdin.txt"),
        "[system]\nYou review code.\n\n[user]\nReview this diff.\n"
    );
    assert_eq!(
        Path::new(agent.read("pwd.txt").trim())
            .canonicalize()
            .unwrap(),
        repo.canonicalize().unwrap()
    );
    assert_eq!(
        agent.read("args.txt"),
        "\n",
        "no flags configured: no arguments"
    );
}

#[tokio::test]
async fn exec_passes_the_no_tools_flag_or_the_tool_list() {
    let agent = Agent::new(r#"printf '%s\n' "$@" > "$OUT/args.txt"; echo ok"#, |s| {
        s.command.push("--print".into());
        s.no_tools_flag = Some("--no-tools".into());
        s.tools_flag = Some("--allowed-tools={tools}".into());
    });
    agent.run(&simple(), None).await.unwrap();
    assert_eq!(agent.read("args.txt"), "--print\n--no-tools\n");
    let grep = ToolDefinition {
        name: "grep".into(),
        ..read_tool()
    };
    let with_tools = chat(vec![Message::user("go")], vec![read_tool(), grep]);
    agent.run(&with_tools, None).await.unwrap();
    assert_eq!(
        agent.read("args.txt"),
        "--print\n--allowed-tools=read,grep\n"
    );
}

#[tokio::test]
async fn exec_missing_binary_is_a_start_failure() {
    let mut s = settings(ProviderKind::Exec, "");
    s.command = vec!["/nonexistent/verdict-agent".into()];
    let provider = build(s).unwrap();
    let e = provider
        .complete(&simple(), None, &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::ProcessStart, "{e}");
    assert!(e.message.contains("/nonexistent/verdict-agent"), "{e}");
    assert!(!e.kind.is_retryable());
}

#[tokio::test]
async fn exec_non_zero_exit_quotes_the_redacted_stderr_tail() {
    let agent = Agent::new(
        r#"cat > /dev/null
i=1; while [ $i -le 30 ]; do echo "progress $i" >&2; i=$((i+1)); done
echo "fatal: OPENAI_API_KEY=abc123secret rejected" >&2
exit 3"#,
        |_| {},
    );
    let e = agent.run(&simple(), None).await.unwrap_err();
    assert_eq!(e.kind, FailureKind::ProcessExit, "{e}");
    assert!(e.message.contains("exited with code 3"), "{e}");
    assert!(
        e.message
            .contains("fatal: OPENAI_API_KEY=[REDACTED] rejected"),
        "{e}"
    );
    assert!(
        e.message.contains("progress 30") && e.message.contains("progress 12"),
        "{e}"
    );
    assert!(
        !e.message.contains("progress 11\n"),
        "only the last 20 lines: {e}"
    );
    assert!(!e.message.contains("abc123secret"), "{e}");
}

#[tokio::test]
async fn exec_over_its_timeout_is_killed_and_reaped() {
    let agent = Agent::new(r#"echo $$ > "$OUT/pid"; exec sleep 30"#, |s| {
        s.timeout = Duration::from_millis(300);
    });
    let started = std::time::Instant::now();
    let e = agent.run(&simple(), None).await.unwrap_err();
    assert_eq!(e.kind, FailureKind::Timeout, "{e}");
    assert!(started.elapsed() < DEADLINE);
    let pid = agent.read("pid");
    assert!(
        !process_exists(&pid),
        "process {pid} is still there (or a zombie)"
    );
}

#[tokio::test]
async fn exec_cancellation_kills_the_child_promptly() {
    let agent = Agent::new(r#"echo $$ > "$OUT/pid.fifo"; exec sleep 30"#, |_| {});
    let fifo = agent.file("pid.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let request = simple();
    let cancel = CancellationToken::new();
    // Reading the FIFO completes once the script has written its pid: the child is running.
    let cancel_once_running = async {
        let pid = tokio::fs::read_to_string(&fifo).await.unwrap();
        cancel.cancel();
        pid
    };
    let (result, pid) = tokio::time::timeout(Duration::from_secs(2), async {
        tokio::join!(
            agent.provider.complete(&request, None, &cancel),
            cancel_once_running
        )
    })
    .await
    .expect("cancellation should end the call within 2 s");
    let e = result.unwrap_err();
    assert_eq!(e.kind, FailureKind::Cancelled, "{e}");
    assert!(
        !process_exists(&pid),
        "process {pid} is still there (or a zombie)"
    );
}

#[tokio::test]
async fn exec_a_chatty_child_does_not_deadlock_and_huge_output_is_refused() {
    // 1 MiB on each pipe, far beyond a pipe buffer, before reading stdin.
    let agent = Agent::new(
        "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero | tr '\\0' a; cat > /dev/null",
        |_| {},
    );
    let response = agent.run(&simple(), None).await.unwrap();
    assert_eq!(response.content.len(), 1_048_576);
    assert!(response.content.bytes().all(|b| b == b'a'));

    let flood = Agent::new("head -c 9000000 /dev/zero", |_| {});
    let e = flood.run(&simple(), None).await.unwrap_err();
    assert_eq!(e.kind, FailureKind::ProcessExit, "{e}");
    assert!(e.message.contains("more than 8388608 bytes"), "{e}");
}

/// The contract of `protocol` as `mode` expresses it, as the executor builds it.
fn contract(
    protocol: verdict_proto::ProtocolId,
    mode: StructuredOutput,
) -> verdict_worker::provider::OutputConstraint {
    verdict_proto::structured::constraint(protocol, mode, Default::default(), Default::default())
        .expect("this mode expresses this protocol")
}

#[tokio::test]
async fn openai_sends_a_json_constraint_as_a_strict_response_format_and_a_grammar_as_grammar() {
    let (fake, provider) = serve(ProviderKind::Openai, Script::always(Behaviour::text("{}"))).await;
    let mut request = simple();
    request.tool_choice = ToolChoice::None;
    request.constraint = Some(contract(
        verdict_proto::ProtocolId::Reviewer,
        StructuredOutput::JsonSchema,
    ));
    call(provider.as_ref(), &request).await.unwrap();
    let seen = only_request(&fake);
    assert_eq!(seen.rejection, None);
    let format = &seen.body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "verdict_reviewer");
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["findings", "files_reviewed"]));
    assert!(
        schema.get("$defs").is_none(),
        "references are inlined: {schema}"
    );
    let at_file = &schema["properties"]["findings"]["items"]["anyOf"][0];
    assert_eq!(
        at_file["properties"]["severity"]["enum"],
        json!(["critical", "major", "minor", "suggestion"])
    );
    // Sent in reading order: a grammar-based server makes the model write properties in the
    // order they arrive, so severity comes before confidence, not alphabetically after it.
    let raw = &seen.raw_body;
    let at = |key: &str| raw.find(&format!("\"{key}\":{{")).unwrap_or(usize::MAX);
    assert!(at("severity") < at("confidence"), "{raw}");
    assert!(at("title") < at("description"), "{raw}");
    assert!(seen.body.get("grammar").is_none());
    assert!(seen.body.get("tools").is_none());

    let (fake, provider) = serve(ProviderKind::Openai, Script::always(Behaviour::text("x"))).await;
    request.constraint = Some(contract(
        verdict_proto::ProtocolId::Review,
        StructuredOutput::Grammar,
    ));
    call(provider.as_ref(), &request).await.unwrap();
    let seen = only_request(&fake);
    assert_eq!(seen.rejection, None);
    let grammar = seen.body["grammar"].as_str().unwrap();
    assert!(
        grammar.starts_with("root ::= \"<SAKURA_REVIEW>\\n\""),
        "{grammar}"
    );
    assert!(seen.body.get("response_format").is_none());
}

#[tokio::test]
async fn anthropic_forces_one_tool_whose_input_schema_is_the_contract_and_its_input_is_the_answer()
{
    let answer = json!({"findings": [], "files_reviewed": ["src/lib.rs"]});
    let (fake, provider) = serve(
        ProviderKind::Anthropic,
        Script::new([Behaviour::tool_call("verdict_reviewer", answer.clone())]),
    )
    .await;
    let mut request = simple();
    request.tool_choice = ToolChoice::None;
    request.constraint = Some(contract(
        verdict_proto::ProtocolId::Reviewer,
        StructuredOutput::Tool,
    ));
    let response = call(provider.as_ref(), &request).await.unwrap();
    let seen = only_request(&fake);
    assert_eq!(seen.rejection, None);
    let tools = seen.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "verdict_reviewer");
    assert_eq!(tools[0]["input_schema"]["type"], "object");
    // The input schema goes out in the contract's reading order too, as OpenAI's schema does.
    let raw = &seen.raw_body;
    let at = |key: &str| raw.find(&format!("\"{key}\":{{")).unwrap_or(usize::MAX);
    assert!(at("severity") < at("confidence"), "{raw}");
    assert!(at("title") < at("description"), "{raw}");
    assert_eq!(
        seen.body["tool_choice"],
        json!({"type": "tool", "name": "verdict_reviewer"})
    );
    assert!(response.tool_calls.is_empty(), "{response:?}");
    assert_eq!(response.finish, FinishReason::Stop);
    assert_eq!(
        serde_json::from_str::<Value>(&response.content).unwrap(),
        answer
    );
}

#[tokio::test]
async fn a_constraint_beside_tools_is_refused_before_anything_is_sent() {
    for kind in HTTP_KINDS {
        let (fake, provider) = serve(kind, Script::always(Behaviour::text("x"))).await;
        let mut request = chat(vec![Message::user("Review.")], vec![read_tool()]);
        request.constraint = Some(contract(
            verdict_proto::ProtocolId::Reviewer,
            StructuredOutput::JsonSchema,
        ));
        let error = call(provider.as_ref(), &request).await.unwrap_err();
        assert_eq!(error.kind, FailureKind::Internal, "{kind:?}: {error}");
        assert_eq!(fake.request_count(), 0);
    }
}

#[tokio::test]
async fn auto_is_what_the_kind_supports_and_llama_cpp_is_discovered_once_from_props() {
    let cancel = CancellationToken::new();
    let auto = |kind, url: &str| {
        let mut s = settings(kind, url);
        s.structured_output = StructuredOutput::Auto;
        build(s).unwrap()
    };
    let fake = FakeProvider::start().await;
    let plain = auto(ProviderKind::Openai, &fake.base_url());
    assert_eq!(
        plain.structured_output(&cancel).await,
        StructuredOutput::JsonSchema
    );
    assert_eq!(fake.props_requests(), 1);

    let llama = FakeProvider::start().await;
    llama.serve_llama_cpp_props(8192);
    // A base URL with the version segment finds /props beside it.
    let provider = auto(ProviderKind::Openai, &format!("{}/v1", llama.base_url()));
    for _ in 0..3 {
        assert_eq!(
            provider.structured_output(&cancel).await,
            StructuredOutput::Grammar
        );
    }
    assert_eq!(llama.props_requests(), 1, "discovered once");

    let anthropic = auto(ProviderKind::Anthropic, &fake.base_url());
    assert_eq!(
        anthropic.structured_output(&cancel).await,
        StructuredOutput::Tool
    );
    // A configured mode is used as it is, without asking.
    let mut s = settings(ProviderKind::Openai, &llama.base_url());
    s.structured_output = StructuredOutput::JsonSchema;
    assert_eq!(
        build(s).unwrap().structured_output(&cancel).await,
        StructuredOutput::JsonSchema
    );
    assert_eq!(llama.props_requests(), 1);
}
