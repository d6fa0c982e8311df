//! The distributed pool end to end: the scheduler and two workers as separate `verdict`
//! processes on the real RabbitMQ and Redis, the fake provider server in this test process, the
//! sample repository on disk, tasks submitted and followed through the HTTP API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use verdict_api::document::{TaskDocument, TaskState};
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::store::DocumentStore;
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_client::client::ApiClient;
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::{EventType, Priority, StageRequest};
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

const TOKEN: &str = "e2e-token-7d1f";

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Pool {
    fake: FakeProvider,
    client: ApiClient,
    /// The scheduler's API root, for its unauthenticated `/metrics`.
    scheduler_url: String,
    /// The workers' metrics addresses (`host:port`).
    worker_metrics: Vec<String>,
    repo: String,
    isolation: Isolation,
    _processes: Vec<Proc>,
    _dir: tempfile::TempDir,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Stop the processes first: a live worker re-declares queues deleted under it.
        drop(std::mem::take(&mut self._processes));
        // Leave nothing behind on the shared RabbitMQ and Redis.
        let isolation = self.isolation.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Runtime::new() else {
                return;
            };
            rt.block_on(async {
                if let Ok(b) = AmqpBroker::connect(amqp(&isolation)).await {
                    let _ = b.delete_topology().await;
                    b.close().await;
                }
                if let Ok(s) = RedisStore::connect(redis(&isolation)).await {
                    let _ = s.purge().await;
                }
            });
        })
        .join();
    }
}

fn amqp(i: &Isolation) -> AmqpConfig {
    let mut c = AmqpConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
    c.prefix = i.broker_prefix.clone();
    c.delivery_limit = 3;
    c
}

fn redis(i: &Isolation) -> RedisConfig {
    let mut c = RedisConfig::new("redis://127.0.0.1:6379/");
    c.prefix = i.redis_prefix.clone();
    c
}

/// Starts `verdict <role> --config <file>` with the extra environment `env` and waits for its first
/// stdout line (it prints one when it is up), returning the process and that line.
fn spawn(role: &str, config: &Path, env: &[(&str, String)]) -> (Proc, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([role, "--config"])
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("VERDICT_API_TOKEN", TOKEN)
        .env("VERDICT_LOG", "warn")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Owned by a `Proc` at once, so a failure below still kills it.
    let mut proc = Proc(child);
    let stdout = proc.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("verdict {role} did not start within 60 s"));
    assert!(!line.is_empty(), "verdict {role} exited before starting");
    (proc, line)
}

async fn pool(script: impl FnOnce(&FakeProvider)) -> Pool {
    pool_with(script, &[], &[]).await
}

/// [`pool`] with extra environment for the scheduler and for the workers.
async fn pool_with(
    script: impl FnOnce(&FakeProvider),
    scheduler_env: &[(&str, String)],
    worker_env: &[(&str, String)],
) -> Pool {
    let dir = tempfile::tempdir().unwrap();
    let repo = scenario::sample_repo(&dir.path().join("repo")).unwrap();
    let fake = FakeProvider::start().await;
    script(&fake);
    let isolation = Isolation::unique("mp");
    let config: PathBuf = dir.path().join("verdict.toml");
    std::fs::write(
        &config,
        scenario::config_toml(&fake.base_url(), &isolation, &dir.path().join("cache")),
    )
    .unwrap();
    let (scheduler, line) = spawn("scheduler", &config, scheduler_env);
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    let (w1, l1) = spawn("worker", &config, worker_env);
    let (w2, l2) = spawn("worker", &config, worker_env);
    let metrics_addr = |line: &str| line.trim().rsplit("http://").next().unwrap().to_owned();
    let client = ApiClient::new(&url, Some(TOKEN.to_owned())).unwrap();
    Pool {
        fake,
        client,
        scheduler_url: url.clone(),
        worker_metrics: vec![metrics_addr(&l1), metrics_addr(&l2)],
        repo: repo.display().to_string(),
        isolation,
        _processes: vec![scheduler, w1, w2],
        _dir: dir,
    }
}

/// The sum over all workers of `verdict_stage_deliveries_total{result="<result>"}`.
async fn deliveries(pool: &Pool, result: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let needle = format!("verdict_stage_deliveries_total{{result=\"{result}\"}} ");
    let mut total = 0;
    for addr in &pool.worker_metrics {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        conn.read_to_string(&mut body).await.unwrap();
        total += body
            .lines()
            .filter_map(|l| l.strip_prefix(needle.as_str()))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

fn submission(pool: &Pool, pipeline: &str) -> ReviewSubmission {
    ReviewSubmission {
        repository: pool.repo.clone(),
        base: "main".into(),
        head: "feature/coupons".into(),
        pipeline: Some(pipeline.into()),
        title: Some("Add percentage coupons".into()),
        body: None,
        options: SubmissionOptions::default(),
        ..Default::default()
    }
}

/// Follows the task's SSE stream to its end, then returns the document.
async fn finish(pool: &Pool, id: &str) -> TaskDocument {
    let mut stream = pool.client.events(id, None);
    let follow = async {
        while let Some(item) = stream.next().await.unwrap() {
            if matches!(item, verdict_client::client::StreamItem::End(_)) {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(90), follow)
        .await
        .expect("the task ends within 90 s");
    pool.client.task(id).await.unwrap()
}

async fn review(pool: &Pool, pipeline: &str) -> TaskDocument {
    let id = pool
        .client
        .submit_review(&submission(pool, pipeline))
        .await
        .unwrap()
        .id;
    finish(pool, &id).await
}

fn happy(fake: &FakeProvider) {
    scenario::script_valid_answers(fake);
}

/// A multi-stage review across processes; once retired, its records are sealed into one key
/// (issue 14) and read back in full: every stage's transcript through the API and the CLI, its
/// events replayed to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_stage_review_completes_across_processes_and_reads_back_sealed() {
    let pool = pool(happy).await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    assert_eq!(doc.result.as_ref().unwrap()["decision"], "request_changes");
    let stages: Vec<&str> = doc.stages.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        stages,
        ["triage", "summary", "reviewer-1", "reviewer-2", "validator"]
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let sealed = "verdict_tasks_sealed_total{outcome=\"sealed\"}";
    while scheduler_metric(&pool, sealed).await < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task was not sealed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut raw = redis::Client::open("redis://127.0.0.1:6379/")
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let prefix = &pool.isolation.redis_prefix;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*{}*", doc.id))
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut kinds: Vec<&str> = keys
        .iter()
        .map(|k| {
            k.trim_start_matches(prefix.as_str())
                .split(':')
                .next()
                .unwrap()
        })
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["archive", "doc"], "{keys:?}");

    let read = pool.client.transcripts(&doc.id, None).await.unwrap();
    for stage in &stages {
        let of_stage: Vec<_> = read
            .transcripts
            .iter()
            .filter(|t| t.stage_id == *stage)
            .collect();
        assert!(!of_stage.is_empty(), "no transcript of {stage}");
        for t in of_stage {
            let texts: Vec<&str> = t
                .entries
                .iter()
                .filter_map(|e| match e {
                    verdict_proto::transcript::TranscriptEntry::Call { new_messages, .. } => {
                        Some(new_messages.iter().map(|m| m.content.as_str()))
                    }
                    _ => None,
                })
                .flatten()
                .collect();
            let system = texts.first().copied().unwrap_or_default();
            assert!(system.len() > 1024, "{stage}: the system prompt in full");
            for text in &texts {
                assert!(
                    !text.contains('\u{ab}') && !text.starts_with("[shared text"),
                    "{stage}: a text restored: {text}"
                );
            }
            let token = t.boundary_tokens.first().expect("the attempt's token");
            assert!(
                texts.iter().any(|text| text.contains(token.as_str())),
                "{stage}: the boundary token put back"
            );
        }
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["transcript", &doc.id])
        .env("VERDICT_SERVER", &pool.scheduler_url)
        .env("VERDICT_API_TOKEN", TOKEN)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for stage in &stages {
        assert!(
            text.contains(&format!("stage {stage} (")),
            "{stage} in\n{text}"
        );
    }
    assert!(text.contains("[system]") && text.contains("[raw response]"));
    // The events, now in the archive, replay to the end.
    assert_eq!(finish(&pool, &doc.id).await.state, TaskState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triage_prose_falls_back_before_the_summary_and_completes() {
    let pool = pool(|fake| {
        happy(fake);
        fake.script(
            scenario::TRIAGE,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    let fallback = doc
        .events
        .iter()
        .position(|e| e.kind == EventType::TriageFallback)
        .unwrap();
    let summary = doc
        .events
        .iter()
        .position(|e| e.kind == EventType::StageStarted && e.stage_id.as_deref() == Some("summary"))
        .unwrap();
    assert!(fallback < summary);
    assert!(
        doc.events
            .iter()
            .any(|e| e.channel.as_deref() == Some("review:protocol_repair"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_answering_prose_is_incomplete() {
    let pool = pool(|fake| {
        happy(fake);
        fake.script(
            scenario::REVIEWER,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert!(doc.result.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_envelope_is_degraded_without_score() {
    let pool = pool(|fake| {
        fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::PROSE)),
        )
    })
    .await;
    let doc = review(&pool, "single").await;
    assert_eq!(doc.state, TaskState::Degraded, "{doc:#?}");
    assert!(doc.result.as_ref().unwrap()["score"].is_null());
    assert_eq!(doc.result.as_ref().unwrap()["decision"], "comment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorised_provider_is_incomplete_with_kind_auth() {
    let pool =
        pool(|fake| fake.script(scenario::REVIEW, Script::always(Behaviour::status(401)))).await;
    let doc = review(&pool, "single").await;
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert_eq!(doc.stages[0].failure_kind, Some(FailureKind::Auth));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts_across_processes() {
    let pool = pool(|fake| fake.script(scenario::REVIEW, Script::always(Behaviour::hang()))).await;
    let id = pool
        .client
        .submit_review(&submission(&pool, "single"))
        .await
        .unwrap()
        .id;
    pool.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .await
        .unwrap();
    pool.client.cancel(&id).await.unwrap();
    let doc = finish(&pool, &id).await;
    assert_eq!(doc.state, TaskState::Aborted);
    assert!(doc.result.is_none());
}

/// The value of the scheduler's metric line `series` (e.g. `name{label="x"}`), 0 when absent.
async fn scheduler_metric(pool: &Pool, series: &str) -> u64 {
    let body = reqwest::get(format!("{}/metrics", pool.scheduler_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.lines()
        .filter_map(|l| l.strip_prefix(&format!("{series} ")))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// Poison on RabbitMQ: a worker dead-letters it with the reason, the scheduler consumes the dead
/// letter and ends the task it belongs to with that reason (issue 8, item 4), or counts it when
/// it names no task, and the pool carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_and_ends_its_task_while_the_pool_carries_on() {
    let pool = pool(|fake| {
        happy(fake);
        // Scans stay running at the provider until the dead letter ends them.
        fake.script(scenario::DEFAULT, Script::always(Behaviour::hang()));
    })
    .await;
    let scan = verdict_api::submission::ScanSubmission {
        repository: pool.repo.clone(),
        revision: "main".to_owned(),
        options: SubmissionOptions::default(),
    };
    let scan = pool.client.submit_scan(&scan).await.unwrap().id;
    pool.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .await
        .unwrap();
    let broker = AmqpBroker::connect(amqp(&pool.isolation)).await.unwrap();
    let poison = Message {
        body: b"this is not a stage request".to_vec(),
        headers: [
            ("x-verdict-task".to_owned(), scan.clone()),
            ("x-verdict-stage".to_owned(), "scan".to_owned()),
        ]
        .into(),
    };
    let anonymous = Message {
        body: b"nor is this".to_vec(),
        headers: Default::default(),
    };
    for message in [&poison, &anonymous] {
        broker
            .publish(Route::Stages(Priority::Interactive), message)
            .await
            .unwrap();
    }

    let doc = review(&pool, "single").await;
    assert_eq!(
        doc.state,
        TaskState::Completed,
        "the pool carries on: {doc:#?}"
    );
    let ended = finish(&pool, &scan).await;
    assert_eq!(ended.state, TaskState::Incomplete, "{ended:#?}");
    assert_eq!(ended.failure_kind, Some(FailureKind::InvalidRequest));
    let reason = ended.reason.unwrap();
    assert!(
        reason.starts_with("stage scan could not run (invalid_request): its request was dead-lettered (stage request is not a JSON object"),
        "the worker's reason reaches the task: {reason}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let unidentified = "verdict_dead_letters_total{queue=\"unidentified\"}";
    while scheduler_metric(&pool, unidentified).await < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the anonymous dead letter was not counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(deliveries(&pool, "poison").await, 2);
    assert!(
        broker.take_dead_letters(10).await.unwrap().is_empty(),
        "the scheduler took every dead letter off the queue"
    );
    broker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_stage_delivered_twice_calls_the_provider_once() {
    let pool = pool(|fake| {
        fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::REVIEW_OK).after(Duration::from_millis(500))),
        );
    })
    .await;
    let id = pool
        .client
        .submit_review(&submission(&pool, "single"))
        .await
        .unwrap()
        .id;
    pool.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .await
        .unwrap();
    let store = RedisStore::connect(redis(&pool.isolation)).await.unwrap();
    let record = store.get(&format!("task:{id}")).await.unwrap().unwrap();
    let task: serde_json::Value = serde_json::from_str(&record.body).unwrap();
    let request: StageRequest =
        serde_json::from_value(task["stages"][0]["request"].clone()).unwrap();
    let duplicate = Message {
        body: verdict_proto::wire::encode(&request).unwrap(),
        headers: Default::default(),
    };
    let broker = AmqpBroker::connect(amqp(&pool.isolation)).await.unwrap();
    broker
        .publish(Route::Stages(Priority::Interactive), &duplicate)
        .await
        .unwrap();
    let doc = finish(&pool, &id).await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    // And again after the result is recorded: republished, not re-run. Wait until a worker says
    // it handled a delivery of a stage already done.
    let before = deliveries(&pool, "already_done").await;
    broker
        .publish(Route::Stages(Priority::Interactive), &duplicate)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while deliveries(&pool, "already_done").await == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the duplicate was not handled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first duplicate arrived while the stage ran: deferred until the claim would lapse
    // (never dropped); the second found the result.
    let recognised = deliveries(&pool, "already_done").await + deliveries(&pool, "deferred").await;
    assert!(
        recognised >= 2,
        "both duplicates were recognised: {recognised}"
    );
    assert_eq!(deliveries(&pool, "executed").await, 1);
    assert_eq!(
        pool.fake.requests_for(scenario::REVIEW).len(),
        1,
        "the provider is called once"
    );
    broker.close().await;
}

// ---- Traces across the queue (SPEC O2) ----

/// A free loopback port (bound, then released for a process to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real OpenTelemetry collector — rotel, installed by `ops/bin/otel-collector` — printing every
/// span it receives; what it printed is kept for the test to read.
struct Collector {
    /// The OTLP/HTTP endpoint, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    endpoint: String,
    printed: std::sync::Arc<std::sync::Mutex<String>>,
    _process: Proc,
}

impl Collector {
    async fn start() -> Collector {
        let installer = concat!(env!("CARGO_MANIFEST_DIR"), "/ops/bin/otel-collector");
        let out = Command::new(installer).arg("path").output().unwrap();
        assert!(
            out.status.success(),
            "ops/bin/otel-collector path failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let agent = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let (grpc, http) = (free_port(), free_port());
        let mut child = Command::new(agent)
            .args(["start", "--otlp-grpc-endpoint"])
            .arg(format!("127.0.0.1:{grpc}"))
            .arg("--otlp-http-endpoint")
            .arg(format!("127.0.0.1:{http}"))
            .args(["--exporter", "blackhole", "--debug-log", "traces"])
            .args(["--debug-log-verbosity", "detailed"])
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for stream in streams {
            let printed = printed.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut p = printed.lock().unwrap();
                    p.push_str(&strip_ansi(&line));
                    p.push('\n');
                }
            });
        }
        let process = Proc(child);
        let address = format!("127.0.0.1:{http}");
        let up = async {
            while tokio::net::TcpStream::connect(&address).await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), up)
            .await
            .expect("the collector listens within 30 s");
        Collector {
            endpoint: format!("http://{address}"),
            printed,
            _process: process,
        }
    }

    /// The spans of trace `trace_id` the collector has printed, once `enough` holds of them
    /// (within 30 s; the collector's whole output is in the panic otherwise).
    async fn trace(&self, trace_id: &str, enough: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let printed = self.printed.lock().unwrap().clone();
            let spans: Vec<Span> = parse_spans(&printed)
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect();
            if enough(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "trace {trace_id} incomplete after 30 s; the collector printed:\n{printed}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC '[' parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One span as the collector printed it.
#[derive(Debug, Clone, Default)]
struct Span {
    service: String,
    trace_id: String,
    parent_id: String,
    id: String,
    name: String,
    start: String,
    attributes: std::collections::BTreeMap<String, String>,
    /// The lines the collector printed for it.
    printed: String,
}

/// The spans in the collector's detailed debug log: a resource's `service.name`, then per span its
/// `Trace ID`, `Parent ID`, `ID` and `Name` lines and its `-> key: Type(value)` attributes.
fn parse_spans(printed: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut service = String::new();
    let mut in_span = false;
    for line in printed.lines() {
        let line = line.trim();
        let header = ["ResourceSpans #", "ScopeSpans #", "Span #"]
            .iter()
            .any(|h| line.starts_with(h));
        if in_span
            && !header
            && let Some(span) = spans.last_mut()
        {
            span.printed.push_str(line);
            span.printed.push('\n');
        }
        if line.starts_with("ResourceSpans #") || line.starts_with("ScopeSpans #") {
            in_span = false;
            continue;
        }
        if line.starts_with("Span #") {
            spans.push(Span {
                service: service.clone(),
                ..Span::default()
            });
            in_span = true;
            continue;
        }
        if let Some(attribute) = line.strip_prefix("-> ") {
            let Some((key, value)) = attribute.split_once(": ") else {
                continue;
            };
            // `Str(verdict-worker)` → `verdict-worker`.
            let value = value
                .split_once('(')
                .and_then(|(_, v)| v.strip_suffix(')'))
                .unwrap_or(value)
                .to_owned();
            match spans.last_mut() {
                Some(span) if in_span => {
                    span.attributes.insert(key.to_owned(), value);
                }
                _ if key == "service.name" => service = value,
                _ => {}
            }
            continue;
        }
        let (Some(span), Some((key, value))) = (spans.last_mut(), line.split_once(':')) else {
            continue;
        };
        if !in_span {
            continue;
        }
        let value = value.trim().to_owned();
        match key.trim() {
            "Trace ID" => span.trace_id = value,
            "Parent ID" => span.parent_id = value,
            "ID" => span.id = value,
            "Name" => span.name = value,
            "Start time" => span.start = value,
            _ => {}
        }
    }
    spans
}

/// The trace as an indented tree, each span with its process, for the eye.
fn tree(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: &str, depth: usize, out: &mut String) {
        let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent_id == parent).collect();
        children.sort_by(|a, b| a.start.cmp(&b.start));
        for span in children {
            let stage = span
                .attributes
                .get("stage")
                .map(|s| format!(" stage={s}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "{}{} [{}]{stage}\n",
                "  ".repeat(depth),
                span.name,
                span.service
            ));
            walk(spans, &span.id, depth + 1, out);
        }
    }
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.id.as_str()).collect();
    let mut out = String::new();
    // Roots: no parent, or a parent the collector never got.
    let mut roots: Vec<&str> = spans
        .iter()
        .filter(|s| !ids.contains(s.parent_id.as_str()))
        .map(|s| s.parent_id.as_str())
        .collect();
    roots.dedup();
    for root in roots {
        walk(spans, root, 0, &mut out);
    }
    out
}

fn tracing_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        // Export within a fraction of a second, so the test waits little.
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]
}

/// Issue 9: with the standard `OTEL_*` variables set, the real scheduler and worker processes
/// export one trace per task — the scheduler's task span at its root, each worker's stage span its
/// child through the context carried by the stage message, the AI calls under the stage, and the
/// scheduler applying each result under the worker span that sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tasks_spans_from_the_scheduler_and_the_workers_form_one_trace() {
    let collector = Collector::start().await;
    let env = tracing_env(&collector.endpoint);
    // A summary repaired once and a reviewer reading a file: every kind of span appears.
    let script = |fake: &FakeProvider| {
        happy(fake);
        let summary = Script::new([Behaviour::text(scenario::PROSE)]);
        fake.script(
            scenario::SUMMARY,
            summary.then(Behaviour::text(scenario::SUMMARY_OK)),
        );
        let read = Behaviour::tool_call("read", serde_json::json!({"path": "src/cart.py"}));
        let reviewer = Script::new([read]).then(Behaviour::text(scenario::REVIEWER_OK));
        fake.script(scenario::REVIEWER, reviewer);
    };
    let pool = pool_with(script, &env, &env).await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:?}");
    let trace_id = doc.trace_id.clone().expect("the document names its trace");
    let stages = doc.stages.len();
    let spans = collector
        .trace(&trace_id, |spans| {
            let count = |name: &str| spans.iter().filter(|s| s.name == name).count();
            count("task") == 1
                && count("apply_result") >= stages
                && count("stage") >= stages
                // A stage's delivery span ends after its stage span (the result is recorded
                // and acknowledged after the stage), so it may arrive later.
                && count("consume_stage") >= stages
                && count("repair_round") >= 1
                && count("tool_call") >= 1
        })
        .await;
    println!(
        "trace {trace_id} as the collector printed it:\n{}",
        tree(&spans)
    );
    for name in ["task", "consume_stage"] {
        if let Some(span) = spans.iter().find(|s| s.name == name) {
            println!("[{}]\n{}", span.service, span.printed);
        }
    }

    let by_id = |id: &str| spans.iter().find(|s| s.id == id);
    let named = |name: &'static str| spans.iter().filter(move |s| s.name == name);
    let task = named("task").next().unwrap();
    assert_eq!(task.service, "verdict-scheduler");
    assert!(
        by_id(&task.parent_id).is_none() && task.parent_id.trim_matches('0').is_empty(),
        "the task span is the root: {task:?}"
    );
    assert_eq!(
        task.attributes.get("state").map(String::as_str),
        Some("completed")
    );
    for name in ["admit", "intake"] {
        let span = named(name)
            .next()
            .unwrap_or_else(|| panic!("no {name} span"));
        assert_eq!(
            (span.service.as_str(), span.parent_id.as_str()),
            ("verdict-scheduler", task.id.as_str())
        );
    }
    let consumed: Vec<&Span> = named("consume_stage").collect();
    assert!(consumed.len() >= stages, "{consumed:?}");
    for span in &consumed {
        assert_eq!(span.service, "verdict-worker");
        assert_eq!(
            span.parent_id, task.id,
            "a worker's span is the task span's child: {span:?}"
        );
    }
    for stage in named("stage") {
        let parent = by_id(&stage.parent_id).unwrap();
        assert_eq!(
            (stage.service.as_str(), parent.name.as_str()),
            ("verdict-worker", "consume_stage")
        );
    }
    let calls: Vec<&Span> = named("ai_call").collect();
    assert!(calls.len() >= stages, "an AI call per stage: {calls:?}");
    for call in calls {
        let mut up = by_id(&call.parent_id);
        while let Some(span) = up.filter(|s| s.name != "stage") {
            up = by_id(&span.parent_id);
        }
        assert!(up.is_some(), "an AI call hangs under its stage: {call:?}");
    }
    for (name, under) in [("repair_round", "stage"), ("tool_call", "stage")] {
        let span = named(name).next().unwrap();
        let parent = by_id(&span.parent_id).unwrap();
        assert_eq!(
            (span.service.as_str(), parent.name.as_str()),
            ("verdict-worker", under),
            "{span:?}"
        );
    }
    for applied in named("apply_result") {
        let parent = by_id(&applied.parent_id).unwrap();
        assert_eq!(
            (applied.service.as_str(), parent.name.as_str()),
            ("verdict-scheduler", "consume_stage")
        );
    }
}

/// Asks the process to stop (SIGTERM) and waits, within `within`, for it to exit; its status.
async fn terminate(proc: &mut Proc, within: Duration) -> std::process::ExitStatus {
    let pid = proc.0.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = proc.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pid {pid} still running {} s after SIGTERM",
            within.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 9: a collector that is down (nothing listening) or hung (accepts, never answers) costs
/// spans, never work: the review completes and every process stops promptly when asked, its
/// exit flush bounded (telemetry's `FLUSH_AT_EXIT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_hung_neither_stops_a_review_nor_holds_up_a_shutdown() {
    // Hung: accepts every connection and holds it without a byte in answer.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_endpoint = format!("http://{}", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            open.push(socket);
        }
    });
    let down_endpoint = format!("http://127.0.0.1:{}", free_port());
    let mut pool = pool_with(
        happy,
        &tracing_env(&hung_endpoint),
        &tracing_env(&down_endpoint),
    )
    .await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:?}");
    // Exports are now pending on the hung connection and failing against the down one.
    for mut proc in std::mem::take(&mut pool._processes) {
        let status = terminate(&mut proc, Duration::from_secs(15)).await;
        assert!(
            status.success(),
            "a clean exit despite the collector: {status}"
        );
    }
    held.abort();
}

/// The worker's metric line `series` summed over the pool's workers, 0 when absent.
async fn worker_metric(pool: &Pool, series: &str) -> u64 {
    let mut total = 0;
    for addr in &pool.worker_metrics {
        let body = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        total += body
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{series} ")))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// Issue 10 (SPEC X3): identical work in a second task — the same change reviewed again — is
/// answered from the pool's response cache in Redis: the provider is not asked again, the result
/// is the same, and the hits are counted per stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_work_in_a_second_task_is_answered_from_the_response_cache() {
    let cache_on = [("VERDICT_WORKER__RESPONSE_CACHE", "true".to_owned())];
    let pool = pool_with(happy, &[], &cache_on).await;
    let first = review(&pool, "multi").await;
    assert_eq!(first.state, TaskState::Completed, "{first:?}");
    let paid = pool.fake.request_count();
    assert_eq!(
        paid,
        first.stages.len(),
        "one call per stage the first time"
    );

    let second = review(&pool, "multi").await;
    assert_eq!(second.state, TaskState::Completed, "{second:?}");
    assert_ne!(first.id, second.id);
    assert_eq!(
        pool.fake.request_count(),
        paid,
        "the second, identical review asked the provider nothing"
    );
    let score = |d: &TaskDocument| d.result.as_ref().map(|r| r["score"].clone());
    assert_eq!(score(&second), score(&first), "the same answer");
    let hits = worker_metric(
        &pool,
        "verdict_response_cache_total{result=\"hit\",stage=\"reviewer\"}",
    )
    .await;
    assert_eq!(hits, 2, "both reviewers answered from the cache");
    for stage in ["triage", "summary", "validator"] {
        let series = format!("verdict_response_cache_total{{result=\"hit\",stage=\"{stage}\"}}");
        assert_eq!(worker_metric(&pool, &series).await, 1, "{stage}");
    }
}
