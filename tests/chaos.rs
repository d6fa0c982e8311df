//! The chaos suite (issues 8 and 14): a scheduler and several workers as separate `verdict`
//! processes on services of their own, the fake provider at 0.5–2 s, multi-stage reviews
//! submitted through the API while faults are injected. Two scenarios:
//! - `chaos_suite`: a private RabbitMQ node and a private Redis with AOF, 100 reviews; a worker
//!   is killed mid-stage, Redis is killed and restarted, the broker is stopped and started, a
//!   poison message is published and bursts of 429 are answered.
//! - `chaos_suite_clustered`: a three-node RabbitMQ cluster and a Redis Cluster (three primaries,
//!   three replicas), 60 reviews; the Redis primary holding the tasks' stage inputs and, later,
//!   the one holding the most of the active-task index are killed while intake probes submit
//!   reviews, a RabbitMQ node is stopped and started again, Redis is brought near its maxmemory
//!   and a RabbitMQ memory alarm is raised, each time with the API answering new submissions 503
//!   overloaded.
//!
//! The checker then proves, from outside, that every task reached exactly one terminal state,
//! none was lost or duplicated, no stage was paid twice (SPEC R1, E7) and the store holds no
//! task record that no client was given, and prints the table.
//!
//! It owns its services, so it runs alone, one scenario at a time: `cargo test --test chaos --
//! --nocapture`. Each run's process logs are kept in `target/tmp/chaos/` (and
//! `target/tmp/chaos-clustered/`) until the next run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

#[path = "chaos/checker.rs"]
mod checker;
#[path = "chaos/clustered.rs"]
mod clustered;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/pool.rs"]
mod pool;
#[path = "chaos/probes.rs"]
mod probes;
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
use verdict_client::client::ApiClient;
use verdict_proto::wire::StageRequest;
use verdict_testkit::FakeProvider;
use verdict_testkit::scenario::{self, Isolation, REVIEWER, SUMMARY, TRIAGE, VALIDATOR};

use crate::clustered::Clustered;
use crate::faults::{Chaos, Injected, RecordedTasks, Single, valid_behaviour};
use crate::pool::{Pool, TOKEN};
use crate::services::{PrivateRabbit, PrivateRedis, RabbitCluster, RedisCluster};
use crate::workload::Workload;

/// Reviews submitted, and how many may be unfinished at once.
const TASKS: usize = 100;
const MAX_UNFINISHED: usize = 40;
const WORKERS: usize = 4;
/// The same for the clustered scenario, smaller: its services take most of the machine.
const CLUSTERED_TASKS: usize = 60;
const CLUSTERED_MAX_UNFINISHED: usize = 30;
const CLUSTERED_WORKERS: usize = 3;
/// How long after the run a record no client was given may still be deleted (a creation undone
/// in the background once the store answers).
const WITHDRAWN_WITHIN: Duration = Duration::from_secs(30);
/// Once the faults are over, nothing moving for this long means what is left will never end.
/// Generous: a stage recovered from a dead worker waits for its lease and a sweep.
const QUIET: Duration = Duration::from_secs(45);
/// The whole workload ends by then, whatever happens.
const DEADLINE: Duration = Duration::from_secs(300);
/// The workers' lease on a stage: short, so a killed worker's stages resume within the run.
const CLAIM_TTL_SECONDS: u64 = 6;
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
        (
            "VERDICT_WORKER__CLAIM_TTL_SECONDS",
            CLAIM_TTL_SECONDS.to_string(),
        ),
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

/// The scenarios own their services and load the machine: one runs at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One scenario's run: its folder, logs, sample repository, fake provider and configuration.
struct Run {
    started: Instant,
    dir: tempfile::TempDir,
    logs: PathBuf,
    repo: PathBuf,
    fake: Arc<FakeProvider>,
    isolation: Isolation,
    config: PathBuf,
}

impl Run {
    /// The run's folders; its logs in `target/tmp/<name>/`, emptied first.
    fn folders(name: &str) -> (Instant, tempfile::TempDir, PathBuf) {
        let started = Instant::now();
        let dir = tempfile::tempdir().unwrap();
        let logs = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        (started, dir, logs)
    }

    /// The sample repository, the fake provider answering every stage validly, and the
    /// configuration file; slow service boots overlap with it.
    async fn prepare(started: Instant, dir: tempfile::TempDir, logs: PathBuf) -> Run {
        let repo_dir = dir.path().join("repo");
        let (repo, fake) = tokio::join!(
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
        Run {
            started,
            dir,
            logs,
            repo,
            fake: Arc::new(fake),
            isolation,
            config,
        }
    }

    /// The scheduler and `workers` workers on the services at these URLs.
    async fn pool(&self, amqp_url: &str, redis_url: &str, workers: usize) -> Pool {
        let env = overrides(amqp_url, redis_url);
        let pool = Pool::start(&self.config, env, &self.logs, workers).await;
        eprintln!(
            "chaos: services and pool up in {:.1} s; logs in {}",
            self.started.elapsed().as_secs_f64(),
            self.logs.display()
        );
        pool
    }

    /// The broker settings the processes use, for the suite's own connections.
    fn amqp(&self, url: String) -> AmqpConfig {
        let mut amqp = AmqpConfig::new(url);
        amqp.prefix = self.isolation.broker_prefix.clone();
        amqp.delivery_limit = DELIVERY_LIMIT;
        amqp
    }

    /// Runs the workload while `injector` injects its faults, then reads everything from
    /// outside, prints the table and fails on what the checker found.
    async fn follow_and_check<S: RecordedTasks>(
        self,
        client: ApiClient,
        injector: impl std::future::Future<Output = Injected<S>>,
        done: tokio::sync::watch::Receiver<()>,
        amqp: AmqpConfig,
        (tasks, max_unfinished, workers): (usize, usize, usize),
    ) {
        let Run {
            started,
            dir,
            logs,
            repo,
            fake,
            isolation,
            ..
        } = self;
        let mut workload = Workload::new(
            client.clone(),
            repo.display().to_string(),
            tasks,
            max_unfinished,
        );
        // Side by side in this task: the injector's futures need not be `Send`.
        let (end, injected) = tokio::join!(
            workload.run(&fake, &done, started, QUIET, started + DEADLINE),
            injector
        );
        let Injected {
            chaos,
            faults,
            missed,
            poison,
            probes,
            problems,
        } = injected;
        let mut tasks = workload.tasks.clone();
        tasks.extend(probes);

        // Everything the checker reads, from outside.
        let mut documents = BTreeMap::new();
        for t in &tasks {
            let doc = client.task(&t.id).await.map_err(|e| e.to_string());
            documents.insert(t.id.clone(), doc);
        }
        let unclaimed = unclaimed_records(&chaos.services, &isolation.redis_prefix, &tasks).await;
        let dead_letters = drain_dead_letters(amqp).await;
        let mut chaos = chaos;
        let deliveries = chaos.pool.deliveries().await;
        let scheduler_alive = chaos.pool.scheduler_alive();
        let report = checker::check(&checker::Evidence {
            tasks: &tasks,
            unclaimed,
            problems: &problems,
            documents,
            requests: fake.requests(),
            answers: fake.answers(),
            faults: &faults,
            missed_faults: &missed,
            poison: poison.as_ref(),
            dead_letters,
            deliveries,
            started: started.into_std(),
            end,
            workers,
            scheduler_alive,
            submit_retries: workload.submit_retries,
            took: started.elapsed(),
            claim_ttl: Duration::from_secs(CLAIM_TTL_SECONDS),
        });
        print_table(report.table());
        drop(chaos);
        drop(dir);
        assert!(
            report.failures().is_empty(),
            "the chaos suite failed: {}; the table above says which tasks and faults, the process logs are in {}",
            report.failures().join("; "),
            logs.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_suite() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (started, dir, logs) = Run::folders("chaos");
    // The slow RabbitMQ boot overlaps with everything else the run needs.
    let (rabbit_dir, redis_dir) = (dir.path().join("rabbitmq"), dir.path().join("redis"));
    let redis_log = logs.join("redis.log");
    let (rabbit, redis, run) = tokio::join!(
        PrivateRabbit::start(&rabbit_dir, &logs),
        PrivateRedis::start(&redis_dir, &redis_log),
        Run::prepare(started, dir, logs.clone()),
    );
    let pool = run.pool(&rabbit.url(), &redis.url(), WORKERS).await;
    let client = ApiClient::new(&pool.api_url, Some(TOKEN.to_owned())).unwrap();
    let amqp = run.amqp(rabbit.url());
    let (done, faults_over) = tokio::sync::watch::channel(());
    let injector = faults::inject(
        Chaos {
            pool,
            services: Single { redis, rabbit },
        },
        Arc::clone(&run.fake),
        amqp.clone(),
        started,
        done,
    );
    run.follow_and_check(
        client,
        injector,
        faults_over,
        amqp,
        (TASKS, MAX_UNFINISHED, WORKERS),
    )
    .await;
}

/// The clustered scenario (issue 14): the pool on a three-node RabbitMQ cluster and a Redis
/// Cluster of three primaries and three replicas, each process given every node; during the run
/// a Redis primary is killed (a replica takes over), a RabbitMQ node is stopped (its clients move
/// to another node; the quorum queues keep their majority) and started again, and both backends
/// run out of room for a while (Redis near its maxmemory, a RabbitMQ memory alarm): the API
/// answers new submissions 503 overloaded with Retry-After while the accepted tasks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_suite_clustered() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (started, dir, logs) = Run::folders("chaos-clustered");
    let (rabbit_dir, redis_dir) = (dir.path().join("rabbitmq"), dir.path().join("redis"));
    let (rabbit, redis, run) = tokio::join!(
        RabbitCluster::start(&rabbit_dir, &logs),
        RedisCluster::start_with(&redis_dir, &logs, &clustered::REDIS_SETTINGS),
        Run::prepare(started, dir, logs.clone()),
    );
    let pool = run
        .pool(&rabbit.url(), &redis.url(), CLUSTERED_WORKERS)
        .await;
    let client = ApiClient::new(&pool.api_url, Some(TOKEN.to_owned())).unwrap();
    let amqp = run.amqp(rabbit.url());
    let (done, faults_over) = tokio::sync::watch::channel(());
    let injector = clustered::inject(
        Chaos {
            pool,
            services: Clustered { redis, rabbit },
        },
        Arc::clone(&run.fake),
        run.repo.display().to_string(),
        run.isolation.redis_prefix.clone(),
        started,
        done,
    );
    // The workload submits again at its next look rather than waiting out a Retry-After: a
    // refusal counts as a retry in the table.
    let workload_client = client.clone().with_busy_patience(Duration::ZERO);
    run.follow_and_check(
        workload_client,
        injector,
        faults_over,
        amqp,
        (CLUSTERED_TASKS, CLUSTERED_MAX_UNFINISHED, CLUSTERED_WORKERS),
    )
    .await;
}

/// The task records in the store that no client was given (issue 34): none once the creations
/// that failed half-way have been undone, which may take a moment after the store answers.
async fn unclaimed_records(
    services: &impl RecordedTasks,
    prefix: &str,
    given: &[workload::Submitted],
) -> Vec<String> {
    let given: std::collections::BTreeSet<&str> = given.iter().map(|t| t.id.as_str()).collect();
    let deadline = Instant::now() + WITHDRAWN_WITHIN;
    loop {
        let mut unclaimed: Vec<String> = services
            .recorded_tasks(prefix)
            .await
            .into_iter()
            .filter(|id| !given.contains(id.as_str()))
            .collect();
        unclaimed.sort();
        if unclaimed.is_empty() || Instant::now() >= deadline {
            return unclaimed;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
