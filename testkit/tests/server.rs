//! The fake provider over real HTTP: both wire formats, every behaviour, recording, waiting and
//! shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_testkit::{Behaviour, FakeProvider, Finish, Script};

const DEADLINE: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn openai_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

fn anthropic_body(model: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(
    fake: &FakeProvider,
    path: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let response = client()
        .post(format!("{}{path}", fake.base_url()))
        .header("authorization", "Bearer test-key-123")
        .json(body)
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test]
async fn text_in_both_formats_with_usage() {
    let fake = FakeProvider::start().await;
    fake.script(
        "m",
        Script::new([
            Behaviour::text("hello").usage(11, 22),
            Behaviour::text("bonjour").usage(3, 4),
        ]),
    );
    let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 200, "{body}");
    let v = json_of(&body);
    assert_eq!(v["choices"][0]["message"]["content"], "hello");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], 11);
    assert_eq!(v["usage"]["completion_tokens"], 22);

    let (status, _, body) = post(&fake, "/v1/messages", &anthropic_body("m")).await;
    assert_eq!(status, 200, "{body}");
    let v = json_of(&body);
    assert_eq!(v["content"], json!([{"type": "text", "text": "bonjour"}]));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"], json!({"input_tokens": 3, "output_tokens": 4}));
}

#[tokio::test]
async fn fenced_truncated_and_tool_calls() {
    let fake = FakeProvider::start().await;
    let calls = || {
        Behaviour::tool_call("read", json!({"path": "src/lib.rs"}))
            .and_tool_call("ls", json!({}))
            .with_text("Looking.")
    };
    fake.script(
        "m",
        Script::new([
            Behaviour::fenced("json", "{\"a\": 1}"),
            Behaviour::truncated("half an ans"),
            calls(),
            Behaviour::truncated("cut"),
            calls(),
            Behaviour::tool_call_raw("grep", "{\"pattern\": "),
            Behaviour::text("x").finish(Finish::Other("content_filter".into())),
        ]),
    );
    let chat = "/v1/chat/completions";
    let (_, _, body) = post(&fake, chat, &openai_body("m")).await;
    assert_eq!(
        json_of(&body)["choices"][0]["message"]["content"],
        "```json\n{\"a\": 1}\n```"
    );
    let (_, _, body) = post(&fake, chat, &openai_body("m")).await;
    assert_eq!(json_of(&body)["choices"][0]["finish_reason"], "length");

    let (_, _, body) = post(&fake, chat, &openai_body("m")).await;
    let v = json_of(&body);
    let message = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(message["content"], "Looking.");
    let calls_json = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls_json.len(), 2);
    assert_eq!(calls_json[0]["type"], "function");
    assert_eq!(calls_json[0]["function"]["name"], "read");
    let args: Value =
        serde_json::from_str(calls_json[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "src/lib.rs"}));
    assert_ne!(calls_json[0]["id"], calls_json[1]["id"]);

    let (_, _, body) = post(&fake, "/v1/messages", &anthropic_body("m")).await;
    assert_eq!(json_of(&body)["stop_reason"], "max_tokens");
    let (_, _, body) = post(&fake, "/v1/messages", &anthropic_body("m")).await;
    let v = json_of(&body);
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][0], json!({"type": "text", "text": "Looking."}));
    assert_eq!(v["content"][1]["type"], "tool_use");
    assert_eq!(v["content"][1]["name"], "read");
    assert_eq!(v["content"][1]["input"], json!({"path": "src/lib.rs"}));
    assert!(
        v["content"][1]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_")
    );

    let (_, _, body) = post(&fake, chat, &openai_body("m")).await;
    let v = json_of(&body);
    assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"pattern\": "
    );
    let (_, _, body) = post(&fake, chat, &openai_body("m")).await;
    assert_eq!(
        json_of(&body)["choices"][0]["finish_reason"],
        "content_filter"
    );
}

#[tokio::test]
async fn statuses_carry_headers_and_format_specific_error_bodies() {
    let fake = FakeProvider::start().await;
    fake.script(
        "m",
        Script::new([
            Behaviour::status(429)
                .retry_after("2")
                .header("x-ratelimit-reset-requests", "6m0s"),
            Behaviour::status(529),
            Behaviour::status(503).body("upstream down"),
        ]),
    );
    let (status, headers, body) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(headers["x-ratelimit-reset-requests"], "6m0s");
    assert_eq!(json_of(&body)["error"]["type"], "rate_limit_error");

    let (status, _, body) = post(&fake, "/v1/messages", &anthropic_body("m")).await;
    assert_eq!(status, 529);
    let v = json_of(&body);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "overloaded_error");

    let (status, headers, body) = post(&fake, "/v1/messages", &anthropic_body("m")).await;
    assert_eq!((status, body.as_str()), (503, "upstream down"));
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
}

#[tokio::test]
async fn malformed_unknown_model_and_exhausted_script() {
    let fake = FakeProvider::start().await;
    fake.script("m", Script::new([Behaviour::malformed()]));
    let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");

    let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 500);
    assert!(body.contains("exhausted"), "{body}");

    let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("nope")).await;
    assert_eq!(status, 404);
    assert_eq!(json_of(&body)["error"]["code"], "model_not_found");
    let (status, _, body) = post(&fake, "/v1/messages", &anthropic_body("nope")).await;
    assert_eq!(status, 404);
    assert_eq!(json_of(&body)["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn then_repeats_forever() {
    let fake = FakeProvider::start().await;
    fake.script(
        "bench",
        Script::new([Behaviour::status(500)]).then(Behaviour::text("again")),
    );
    assert_eq!(
        post(&fake, "/v1/chat/completions", &openai_body("bench"))
            .await
            .0,
        500
    );
    for _ in 0..3 {
        let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("bench")).await;
        assert_eq!(status, 200);
        assert_eq!(json_of(&body)["choices"][0]["message"]["content"], "again");
    }
    assert_eq!(fake.remaining("bench"), 0);
}

#[tokio::test]
async fn invalid_requests_are_rejected_and_recorded_without_consuming_the_script() {
    let fake = FakeProvider::start().await;
    fake.script("m", Script::new([Behaviour::text("ok")]));
    let bad = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "none"});
    let (status, _, body) = post(&fake, "/v1/chat/completions", &bad).await;
    assert_eq!(status, 400);
    assert!(body.contains("tool_choice"), "{body}");
    let no_max_tokens = openai_body("m");
    let (status, _, body) = post(&fake, "/v1/messages", &no_max_tokens).await;
    assert_eq!(status, 400);
    assert_eq!(json_of(&body)["error"]["type"], "invalid_request_error");
    assert_eq!(fake.remaining("m"), 1);
    let seen = fake.requests_for("m");
    assert_eq!(seen.len(), 2);
    assert!(
        seen[0]
            .rejection
            .as_deref()
            .unwrap()
            .contains("tool_choice")
    );
    assert!(seen[1].rejection.as_deref().unwrap().contains("max_tokens"));

    let response = client()
        .post(format!("{}/v1/chat/completions", fake.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(fake.requests().last().unwrap().body, Value::Null);
}

#[tokio::test]
async fn records_headers_bodies_and_order_per_model() {
    let fake = FakeProvider::start().await;
    fake.script("a", Script::always(Behaviour::text("A")));
    fake.script("b", Script::always(Behaviour::text("B")));
    post(&fake, "/v1/chat/completions", &openai_body("a")).await;
    post(&fake, "/v1/messages", &anthropic_body("b")).await;
    post(&fake, "/v1/chat/completions", &openai_body("a")).await;

    let all = fake.wait_for_requests(3, DEADLINE).await.unwrap();
    let order: Vec<_> = all
        .iter()
        .map(|r| (r.seq, r.model.clone().unwrap()))
        .collect();
    assert_eq!(order, [(0, "a".into()), (1, "b".into()), (2, "a".into())]);
    assert_eq!(all[1].path, "/v1/messages");
    assert_eq!(all[0].bearer_token(), Some("test-key-123"));
    assert_eq!(all[0].header("Content-Type"), Some("application/json"));
    assert_eq!(all[0].messages()[0]["content"], "hi");
    let a = fake.requests_for("a");
    assert_eq!(a.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 2]);
}

#[tokio::test]
async fn wait_for_requests_gives_up_at_its_deadline() {
    let fake = FakeProvider::start().await;
    let err = fake
        .wait_for_requests(1, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert_eq!((err.wanted, err.received), (1, 0));
    assert!(err.to_string().contains("received 0"), "{err}");
}

#[tokio::test]
async fn a_hang_blocks_neither_other_requests_nor_shutdown() {
    let fake = FakeProvider::start().await;
    fake.script("slow", Script::always(Behaviour::hang()));
    fake.script("fast", Script::always(Behaviour::text("quick")));
    let url = format!("{}/v1/chat/completions", fake.base_url());

    // A client that gives up: the transport timeout fires, the server keeps serving.
    let gave_up = client()
        .post(&url)
        .json(&openai_body("slow"))
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert!(gave_up.is_timeout(), "{gave_up}");

    // A client that waits forever is released by shutdown.
    let waiting = tokio::spawn(client().post(&url).json(&openai_body("slow")).send());
    fake.wait_for_requests(2, DEADLINE).await.unwrap();
    let (status, _, body) = post(&fake, "/v1/chat/completions", &openai_body("fast")).await;
    assert_eq!(
        (
            status,
            json_of(&body)["choices"][0]["message"]["content"].clone()
        ),
        (200, json!("quick"))
    );

    let started = Instant::now();
    tokio::time::timeout(DEADLINE, fake.shutdown())
        .await
        .unwrap();
    assert!(started.elapsed() < DEADLINE);
    let released = tokio::time::timeout(DEADLINE, waiting)
        .await
        .unwrap()
        .unwrap();
    // Either the 503 the hang turns into, or the connection closing under it.
    if let Ok(response) = released {
        assert_eq!(response.status().as_u16(), 503);
    }
}

#[tokio::test]
async fn latency_is_applied_before_the_behaviour() {
    let fake = FakeProvider::start().await;
    fake.script(
        "m",
        Script::new([
            Behaviour::text("late").after(Duration::from_millis(150)),
            Behaviour::status(503)
                .after_between(Duration::from_millis(40), Duration::from_millis(60)),
            Behaviour::text("later").after(Duration::from_secs(60)),
        ]),
    );
    let started = Instant::now();
    let (status, _, _) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
    let started = Instant::now();
    let (status, _, _) = post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    assert_eq!(status, 503);
    assert!(started.elapsed() >= Duration::from_millis(40));

    // A client with a shorter timeout than the scripted latency times out.
    let err = client()
        .post(format!("{}/v1/chat/completions", fake.base_url()))
        .json(&openai_body("m"))
        .timeout(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
}

#[tokio::test]
async fn health_and_unknown_paths() {
    let fake = FakeProvider::start().await;
    let response = client()
        .get(format!("{}/health", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = client()
        .post(format!("{}/v1/completions", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert!(fake.requests().is_empty());
    assert!(!fake.base_url().ends_with('/'));
}

#[tokio::test]
async fn recording_can_be_turned_off_while_counting_goes_on() {
    let fake = FakeProvider::start().await;
    fake.script("m", Script::always(Behaviour::text("x")));
    post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    fake.set_recording(false);
    post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    fake.set_recording(true);
    post(&fake, "/v1/chat/completions", &openai_body("m")).await;
    let kept = fake.wait_for_requests(3, DEADLINE).await.unwrap();
    assert_eq!(fake.request_count(), 3);
    assert_eq!(kept.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 2]);
}

#[tokio::test]
async fn answers_are_noted_with_their_status_and_an_abandoned_request_has_none() {
    use tokio::io::AsyncWriteExt;
    let fake = FakeProvider::start().await;
    fake.script(
        "slow",
        Script::always(Behaviour::text("late").after(Duration::from_millis(300))),
    );
    fake.script(
        "slower",
        Script::new([
            Behaviour::status(429).retry_after("1"),
            Behaviour::text("later").after(Duration::from_millis(900)),
        ]),
    );
    // A client that sends its request and goes away during the latency, as a killed process does.
    let mut conn = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    let body = openai_body("slow").to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: fake\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    fake.wait_for_requests(1, DEADLINE).await.unwrap();
    drop(conn);
    let (status, _, _) = post(&fake, "/v1/chat/completions", &openai_body("slower")).await;
    assert_eq!(status, 429);
    // When this returns, the abandoned request's 300 ms are long over: had it been answered, the
    // answer would be noted by now.
    let (status, _, _) = post(&fake, "/v1/chat/completions", &openai_body("slower")).await;
    assert_eq!(status, 200);
    let answers = fake.answers();
    let noted: Vec<(usize, u16)> = answers.iter().map(|a| (a.seq, a.status)).collect();
    assert_eq!(
        noted,
        [(1, 429), (2, 200)],
        "the abandoned request 0 has no answer"
    );
    assert_eq!(fake.answer_count(), 2);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].at <= requests[1].at && requests[1].at <= answers[0].at);
    assert!(answers[0].at <= requests[2].at && requests[2].at <= answers[1].at);
}
