//! The chaos suite (issue 8): a scheduler and several workers as separate `verdict` processes on
//! a private RabbitMQ node and a private Redis with AOF, the fake provider at 0.5–2 s, 100
//! multi-stage reviews; during the run a worker is killed mid-stage, Redis is killed and
//! restarted, the broker is stopped and started, a poison message is published and bursts of 429
//! are answered. The checker then proves, from outside, that every task reached exactly one
//! terminal state, none was lost or duplicated and no stage was paid twice (SPEC R1, E7), and
//! prints the table.
//!
//! It owns its services, so it runs alone: `cargo test --test chaos -- --nocapture`. Each run's
//! process logs are kept in `target/tmp/chaos/` until the next run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

#[path = "chaos/checker.rs"]
mod checker;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/pool.rs"]
mod pool;
#[path = "chaos/services.rs"]
mod services;
#[path = "chaos/workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_proto::wire::StageRequest;
use verdict_scheduler::client::ApiClient;
use verdict_testkit::FakeProvider;
use verdict_testkit::scenario::{self, Isolation, REVIEWER, SUMMARY, TRIAGE, VALIDATOR};

use crate::faults::{Chaos, Injected, valid_behaviour};
use crate::pool::{Pool, TOKEN};
use crate::services::{PrivateRabbit, PrivateRedis};
use crate::workload::Workload;

/// Reviews submitted, and how many may be unfinished at once.
const TASKS: usize = 100;
const MAX_UNFINISHED: usize = 40;
const WORKERS: usize = 4;
/// Once the faults are over, nothing moving for this long means what is left will never end.
/// Generous: a stage recovered from a dead worker waits for its lease and a sweep.
const QUIET: Duration = Duration::from_secs(45);
/// The whole workload ends by then, whatever happens.
const DEADLINE: Duration = Duration::from_secs(300);
/// The broker's delivery limit, as the processes are configured (the topology must match).
const DELIVERY_LIMIT: u32 = 5;

/// What the processes are told beyond the scenario configuration (`VERDICT_*` overrides): the
/// private services, short leases and sweeps so recovery fits the run, and production-like retry
/// budgets.
fn overrides(amqp_url: &str, redis_url: &str) -> Vec<(String, String)> {
    [
        ("VERDICT_BROKER__URL", amqp_url.to_owned()),
        ("VERDICT_REDIS__URL", redis_url.to_owned()),
        ("VERDICT_BROKER__DELIVERY_LIMIT", DELIVERY_LIMIT.to_string()),
        ("VERDICT_BROKER__MAX_REQUEUES", "3".to_owned()),
        ("VERDICT_RETRY__BUDGET", "4".to_owned()),
        ("VERDICT_WORKER__CLAIM_TTL_SECONDS", "6".to_owned()),
        ("VERDICT_SCHEDULER__SWEEP_INTERVAL_SECONDS", "2".to_owned()),
        ("VERDICT_SCHEDULER__STALL_AFTER_SECONDS", "10".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[allow(clippy::print_stdout)] // the table is the suite's output
fn print_table(table: &str) {
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_suite() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();

    // The slow RabbitMQ boot overlaps with everything else the run needs.
    let repo_dir = dir.path().join("repo");
    let (rabbit_dir, redis_dir) = (dir.path().join("rabbitmq"), dir.path().join("redis"));
    let redis_log = logs.join("redis.log");
    let (rabbit, redis, repo, fake) = tokio::join!(
        PrivateRabbit::start(&rabbit_dir, &logs),
        PrivateRedis::start(&redis_dir, &redis_log),
        tokio::task::spawn_blocking(move || scenario::sample_repo(&repo_dir)),
        FakeProvider::start(),
    );
    let repo = repo.unwrap().unwrap();
    for model in [TRIAGE, SUMMARY, REVIEWER, VALIDATOR] {
        fake.script(
            model,
            verdict_testkit::Script::always(valid_behaviour(model)),
        );
    }
    let isolation = Isolation::unique("chaos");
    let config = dir.path().join("verdict.toml");
    std::fs::write(
        &config,
        scenario::config_toml(&fake.base_url(), &isolation, &dir.path().join("cache")),
    )
    .unwrap();
    let env = overrides(&rabbit.url(), &redis.url());
    let pool = Pool::start(&config, env, &logs, WORKERS).await;
    let client = ApiClient::new(&pool.api_url, Some(TOKEN.to_owned())).unwrap();
    let setup = started.elapsed();
    eprintln!(
        "chaos: services and pool up in {:.1} s; logs in {}",
        setup.as_secs_f64(),
        logs.display()
    );

    let mut amqp = AmqpConfig::new(rabbit.url());
    amqp.prefix = isolation.broker_prefix.clone();
    amqp.delivery_limit = DELIVERY_LIMIT;
    let fake = Arc::new(fake);
    let (done, faults_over) = tokio::sync::watch::channel(());
    let injector = tokio::spawn(faults::inject(
        Chaos {
            pool,
            redis,
            rabbit,
        },
        Arc::clone(&fake),
        amqp.clone(),
        started,
        done,
    ));
    let mut workload = Workload::new(
        client.clone(),
        repo.display().to_string(),
        TASKS,
        MAX_UNFINISHED,
    );
    let end = workload
        .run(&fake, &faults_over, started, QUIET, started + DEADLINE)
        .await;
    let Injected {
        chaos,
        faults,
        missed,
        poison,
    } = match injector.await {
        Ok(injected) => injected,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("the fault injector was cancelled: {e}"),
    };

    // Everything the checker reads, from outside.
    let mut documents = BTreeMap::new();
    for t in &workload.tasks {
        let doc = client.task(&t.id).await.map_err(|e| e.to_string());
        documents.insert(t.id.clone(), doc);
    }
    let dead_letters = drain_dead_letters(amqp).await;
    let mut chaos = chaos;
    let deliveries = chaos.pool.deliveries().await;
    let scheduler_alive = chaos.pool.scheduler_alive();
    let report = checker::check(&checker::Evidence {
        tasks: &workload.tasks,
        documents,
        requests: fake.requests(),
        answers: fake.answers(),
        faults: &faults,
        missed_faults: &missed,
        poison: &poison,
        dead_letters,
        deliveries,
        started: started.into_std(),
        end,
        workers: WORKERS,
        scheduler_alive,
        submit_retries: workload.submit_retries,
        took: started.elapsed(),
    });
    print_table(report.table());
    drop(chaos);
    assert!(
        report.failures().is_empty(),
        "the chaos suite failed: {}; the table above says which tasks and faults, the process logs are in {}",
        report.failures().join("; "),
        logs.display()
    );
}

/// Takes what is left on the dead-letter queue: for each, the task and stage when it is a stage
/// request, and the reason.
async fn drain_dead_letters(amqp: AmqpConfig) -> Vec<(Option<(String, String)>, String)> {
    let Ok(Ok(broker)) =
        tokio::time::timeout(Duration::from_secs(30), AmqpBroker::connect(amqp)).await
    else {
        return vec![(None, "the dead-letter queue could not be read".to_owned())];
    };
    let mut out = Vec::new();
    loop {
        let taken = broker.take_dead_letters(100).await.unwrap_or_default();
        if taken.is_empty() {
            break;
        }
        for (message, reason) in taken {
            let about = serde_json::from_slice::<StageRequest>(&message.body)
                .ok()
                .map(|r| (r.task_id, r.stage_id));
            out.push((about, reason));
        }
    }
    broker.close().await;
    out
}
