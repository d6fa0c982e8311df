//! The distributed pool end to end: the scheduler and two workers as separate `verdict`
//! processes on the real RabbitMQ and Redis, the fake provider server in this test process, the
//! sample repository on disk, tasks submitted and followed through the HTTP API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::store::DocumentStore;
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::{EventType, Priority, StageRequest};
use verdict_scheduler::client::ApiClient;
use verdict_scheduler::document::{TaskDocument, TaskState};
use verdict_scheduler::service::{ReviewSubmission, SubmissionOptions};
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

/// Starts `verdict <role> --config <file>` and waits for its first stdout line (it prints one when
/// it is up), returning the process and that line.
fn spawn(role: &str, config: &Path) -> (Proc, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([role, "--config"])
        .arg(config)
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
    let (scheduler, line) = spawn("scheduler", &config);
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    let (w1, l1) = spawn("worker", &config);
    let (w2, l2) = spawn("worker", &config);
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
            if matches!(item, verdict_scheduler::client::StreamItem::End(_)) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_stage_review_completes_across_processes() {
    let pool = pool(happy).await;
    let doc = review(&pool, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    assert_eq!(doc.result.as_ref().unwrap()["decision"], "request_changes");
    let stages: Vec<&str> = doc.stages.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        stages,
        ["triage", "summary", "reviewer-1", "reviewer-2", "validator"]
    );
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
    let scan = verdict_scheduler::service::ScanSubmission {
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
