//! The clustered scenario's faults (issue 14), each timed by a condition, never by sleeping: the
//! Redis primary that holds the active-task index killed (`kill -9`; a replica takes over, then
//! the old primary rejoins as a replica), a RabbitMQ node stopped while stages run (its clients
//! move to the other nodes; the quorum queues keep their majority) and started again, Redis
//! brought near its `maxmemory` and a RabbitMQ memory alarm raised. While each backend is out of
//! room, one submission made through the API must be answered `503 overloaded` with
//! `Retry-After` — nothing created — and the tasks already accepted must go on.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use verdict_scheduler::service::{ReviewSubmission, SubmissionOptions};
use verdict_testkit::FakeProvider;

use crate::faults::{Chaos, Clock, Fault, Injected, all_answered, calls_in_flight, reach};
use crate::pool::{Pool, TOKEN};
use crate::services::{RabbitCluster, RedisCluster};

/// Provider requests received before each fault (a run of 60 reviews makes about 210).
const REDIS_AT: usize = 30;
const RABBIT_AT: usize = 70;
const REDIS_FULL_AT: usize = 110;
const ALARM_AT: usize = 150;

/// The RabbitMQ node stopped: every process tries the nodes from a random one, so some are on
/// each node.
const STOPPED_NODE: usize = 0;
/// The node stays stopped until this many provider calls were answered meanwhile (stages
/// finishing on the other nodes), at most `NODE_DOWN_MAX`.
const ANSWERED_WHILE_DOWN: usize = 15;
const NODE_DOWN_MAX: Duration = Duration::from_secs(40);
/// Redis is brought to this share of `maxmemory`: over the scheduler's 90 % intake limit, with
/// room left for the accepted tasks.
const FULL_PERCENT: u64 = 94;
/// How long a backend's pressure may take to show in `verdict_backend_pressure`, and to clear.
const PRESSURE_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

/// The clustered scenario's services.
#[derive(Debug)]
pub struct Clustered {
    pub redis: RedisCluster,
    pub rabbit: RabbitCluster,
}

/// What a probe submission made while a backend had no room was answered.
struct Probe {
    status: u16,
    code: String,
    retry_after: Option<String>,
    message: String,
}

impl Probe {
    /// `Ok` with a description when the API refused it as overloaded with a wait, naming why.
    fn verdict(&self, names: &str) -> Result<String, String> {
        if self.status == 503
            && self.code == "overloaded"
            && self.retry_after.is_some()
            && self.message.contains(names)
        {
            Ok(format!(
                "a submission was answered 503 overloaded, Retry-After {}",
                self.retry_after.as_deref().unwrap_or("")
            ))
        } else {
            Err(format!(
                "a submission was answered {} {:?} (Retry-After {:?}): {}",
                self.status, self.code, self.retry_after, self.message
            ))
        }
    }
}

/// Injects every fault in turn, then returns the services and what happened. `done` is dropped
/// when it returns (or panics): the workload then knows the faults are over.
pub async fn inject(
    mut chaos: Chaos<Clustered>,
    fake: Arc<FakeProvider>,
    repository: String,
    redis_prefix: String,
    started: Instant,
    done: watch::Sender<()>,
) -> Injected<Clustered> {
    let clock = Clock::new(started);
    let mut faults: Vec<Fault> = Vec::new();
    let mut missed = Vec::new();
    let mut stalled = None;

    // 1. kill -9 the Redis primary holding the active-task index; a replica takes over.
    match reach(&fake, REDIS_AT, &mut stalled).await {
        Err(e) => missed.push(format!("kill a Redis primary: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let redis = &mut chaos.services.redis;
            let victim = redis
                .primary_for_key(&format!("{redis_prefix}set:active"))
                .await;
            let in_flight = calls_in_flight(&fake).len();
            let answered = fake.answer_count();
            let killed = Instant::now();
            redis.kill(victim).await;
            redis.await_failover(victim).await;
            let failover = killed.elapsed();
            let during = fake.answer_count() - answered;
            redis.restart(victim).await;
            faults.push(clock.record(
                "kill -9 a Redis primary",
                format!(
                    "127.0.0.1:{victim} (the active-task index's), {in_flight} provider call(s) in flight; a replica took over in {:.1} s while {during} call(s) were answered; rejoined as a replica",
                    failover.as_secs_f64()
                ),
                begun,
            ));
        }
    }

    // 2. stop a RabbitMQ node while stages run on the others, then start it again.
    match reach(&fake, RABBIT_AT, &mut stalled).await {
        Err(e) => missed.push(format!("stop a RabbitMQ node: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let in_flight = calls_in_flight(&fake);
            let answered = fake.answer_count();
            let stopped = Instant::now();
            chaos.services.rabbit.stop_node(STOPPED_NODE).await;
            while (fake.answer_count() - answered < ANSWERED_WHILE_DOWN
                || !all_answered(&fake, &in_flight))
                && stopped.elapsed() < NODE_DOWN_MAX
            {
                tokio::time::sleep(POLL).await;
            }
            let down = stopped.elapsed();
            let during = fake.answer_count() - answered;
            chaos.services.rabbit.start_node(STOPPED_NODE).await;
            faults.push(clock.record(
                "stop a RabbitMQ node",
                format!(
                    "node {STOPPED_NODE} of 3 stopped (SIGTERM) for {:.1} s while {during} provider call(s) were answered; started again and rejoined",
                    down.as_secs_f64()
                ),
                begun,
            ));
        }
    }

    // 3. Redis near its maxmemory: intake held back, then room again.
    match reach(&fake, REDIS_FULL_AT, &mut stalled).await {
        Err(e) => missed.push(format!("Redis near its maxmemory: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let primaries = chaos.services.redis.primaries().await;
            for &port in &primaries {
                let used = used_memory(port).await;
                set_maxmemory(port, used * 100 / FULL_PERCENT).await;
            }
            let outcome = held_back(&chaos.pool, &repository, "redis", "maxmemory").await;
            for &port in &primaries {
                set_maxmemory(port, 0).await;
            }
            let cleared = await_pressure(&chaos.pool, "redis", false).await;
            let detail = outcome.and_then(|probe| cleared.map(|()| {
                format!(
                    "every primary's maxmemory set to {FULL_PERCENT} % full; {probe}; maxmemory lifted and intake resumed"
                )
            }));
            conclude(
                &clock,
                &mut faults,
                &mut missed,
                "Redis near its maxmemory",
                detail,
                begun,
            );
        }
    }

    // 4. a RabbitMQ memory alarm: publishers blocked, intake held back, then cleared.
    match reach(&fake, ALARM_AT, &mut stalled).await {
        Err(e) => missed.push(format!("a RabbitMQ memory alarm: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let rabbit = &chaos.services.rabbit;
            rabbit.set_memory_alarm(true).await;
            rabbit.await_alarm(true).await;
            let outcome = held_back(&chaos.pool, &repository, "broker", "alarm").await;
            rabbit.set_memory_alarm(false).await;
            rabbit.await_alarm(false).await;
            let cleared = await_pressure(&chaos.pool, "broker", false).await;
            let detail = outcome.and_then(|probe| cleared.map(|()| {
                format!("publishers blocked on every node; {probe}; alarm cleared and intake resumed")
            }));
            conclude(
                &clock,
                &mut faults,
                &mut missed,
                "RabbitMQ memory alarm",
                detail,
                begun,
            );
        }
    }

    drop(done);
    Injected {
        chaos,
        faults,
        missed,
        poison: None,
    }
}

/// A fault that was injected as `detail` says, or missed for the reason it gives.
fn conclude(
    clock: &Clock,
    faults: &mut Vec<Fault>,
    missed: &mut Vec<String>,
    name: &'static str,
    detail: Result<String, String>,
    begun: (Duration, usize),
) {
    match detail {
        Ok(detail) => faults.push(clock.record(name, detail, begun)),
        Err(why) => missed.push(format!("{name}: {why}")),
    }
}

/// Once the scheduler reports `backend` out of room, one submission through the API: refused as
/// overloaded with a wait, its message naming `names`.
async fn held_back(
    pool: &Pool,
    repository: &str,
    backend: &str,
    names: &str,
) -> Result<String, String> {
    await_pressure(pool, backend, true).await?;
    probe(&pool.api_url, repository, backend)
        .await?
        .verdict(names)
}

/// Waits until `verdict_backend_pressure{backend}` is 1 (`on`) or 0.
async fn await_pressure(pool: &Pool, backend: &str, on: bool) -> Result<(), String> {
    let deadline = Instant::now() + PRESSURE_WAIT;
    let want = if on { 1.0 } else { 0.0 };
    loop {
        let value = pool
            .scheduler_series(
                "verdict_backend_pressure",
                &format!("backend=\"{backend}\""),
            )
            .await;
        if value == Some(want) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "verdict_backend_pressure{{backend=\"{backend}\"}} was {value:?}, not {want}, after {PRESSURE_WAIT:?}"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One review submission straight over HTTP, to read its status, code and `Retry-After`.
async fn probe(api_url: &str, repository: &str, backend: &str) -> Result<Probe, String> {
    let submission = ReviewSubmission {
        repository: repository.to_owned(),
        base: "main".into(),
        head: "feature/coupons".into(),
        title: Some(format!("chaos probe while {backend} is out of room")),
        options: SubmissionOptions {
            idempotency_key: Some(format!("chaos-probe-{backend}")),
            ..SubmissionOptions::default()
        },
        ..ReviewSubmission::default()
    };
    let response = reqwest::Client::new()
        .post(format!("{api_url}/v1/reviews"))
        .bearer_auth(TOKEN)
        .json(&submission)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| format!("the probe submission failed: {e}"))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    Ok(Probe {
        status,
        code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
        message: body["error"]["message"].as_str().unwrap_or("").to_owned(),
        retry_after,
    })
}

async fn redis_on(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap_or_else(|e| panic!("a client for 127.0.0.1:{port}: {e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to the Redis primary 127.0.0.1:{port}: {e}"))
}

async fn used_memory(port: u16) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut redis_on(port).await)
        .await
        .unwrap_or_else(|e| panic!("INFO memory on 127.0.0.1:{port}: {e}"));
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in 127.0.0.1:{port}'s INFO memory"))
}

async fn set_maxmemory(port: u16, bytes: u64) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut redis_on(port).await)
        .await
        .unwrap_or_else(|e| panic!("CONFIG SET maxmemory on 127.0.0.1:{port}: {e}"));
}
