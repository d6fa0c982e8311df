//! The clustered scenario's faults (issues 14 and 34), each timed by a condition, never by
//! sleeping: the Redis primary holding the stage inputs of the tasks being taken in killed
//! (`kill -9`; a replica takes over, then the old primary rejoins as a replica, which ends the
//! promoted one's `NOREPLICAS`), a RabbitMQ node stopped while stages run (its clients move to
//! the other nodes; the quorum queues keep their majority) and started again, the Redis primary
//! holding the most of the active-task index killed the same way, Redis brought near its
//! `maxmemory` and a RabbitMQ memory alarm raised. While each Redis primary is down, intake
//! probes ([`crate::probes`]) submit reviews through the API: every refusal must name a
//! `Retry-After`, every probe is accepted once the failover is over, and every accepted one
//! completes. While each backend is out of room, one submission must be answered `503
//! overloaded` with `Retry-After` — nothing created — and the tasks already accepted go on.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_testkit::FakeProvider;

use crate::faults::{
    Chaos, Clock, Fault, Injected, RecordedTasks, all_answered, calls_in_flight, reach,
    task_of_record,
};
use crate::pool::Pool;
use crate::probes::{Probes, Seen, submit_once};
use crate::services::{RabbitCluster, RedisCluster};
use crate::workload::Submitted;

/// Provider requests received before each fault (a run of 60 reviews makes about 300, and the
/// intake probes about as many again).
const REDIS_INPUTS_AT: usize = 30;
const RABBIT_AT: usize = 70;
const REDIS_INDEX_AT: usize = 110;
const REDIS_FULL_AT: usize = 150;
const ALARM_AT: usize = 190;
/// The numbers of the first intake probe of each Redis fault (the workload's are below 100).
const INPUTS_PROBES: usize = 100;
const INDEX_PROBES: usize = 200;
/// Intake must accept a probe before a primary is killed, and again after it rejoined, within
/// this long.
const INTAKE_FLOWING: Duration = Duration::from_secs(60);
/// A killed primary stays down after its replica took over until this many provider calls were
/// answered meanwhile, at most `ALONE_MAX`, as a node being rescheduled does: the promoted replica,
/// with no replica of its own, refuses writes (`NOREPLICAS`) all that time.
const ANSWERED_WHILE_ALONE: usize = 15;
const ALONE_MAX: Duration = Duration::from_secs(20);
/// Every intake probe has ended by then, after the faults.
const PROBES_END: Duration = Duration::from_secs(180);

/// How the scenario's Redis Cluster nodes run, as docs/deploy.md asks: the other primaries
/// serve their slots while one fails over, and a primary takes writes only while a replica
/// follows it (so a promoted replica refuses writes, `NOREPLICAS`, until the old primary has
/// rejoined as its replica).
pub(crate) const REDIS_SETTINGS: [&str; 4] = [
    "--cluster-require-full-coverage",
    "no",
    "--min-replicas-to-write",
    "1",
];

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
pub(crate) struct Clustered {
    pub redis: RedisCluster,
    pub rabbit: RabbitCluster,
}

impl RecordedTasks for Clustered {
    async fn recorded_tasks(&self, prefix: &str) -> Vec<String> {
        let mut ids = Vec::new();
        for port in self.redis.primaries().await {
            let keys = keys_on(port, &format!("{prefix}doc:task:*")).await;
            ids.extend(keys.iter().filter_map(|k| task_of_record(k)));
        }
        ids
    }
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
pub(crate) async fn inject(
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

    let mut probes: Vec<Submitted> = Vec::new();
    let mut problems: Vec<String> = Vec::new();

    // 1. kill -9 the Redis primary holding the diff inputs of the tasks being taken in.
    match reach(&fake, REDIS_INPUTS_AT, &mut stalled).await {
        Err(e) => missed.push(format!("kill the inputs' Redis primary: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let under = Under {
                pattern: format!("{redis_prefix}input:*"),
                what: "stage-input keys",
                first_probe: INPUTS_PROBES,
            };
            let killed = kill_under_intake(&mut chaos, &fake, &repository, &under, started).await;
            conclude_under_intake(
                (&clock, &mut faults, &mut missed),
                (&mut probes, &mut problems),
                "kill -9 the inputs' Redis primary",
                killed,
                begun,
            );
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

    // 3. kill -9 the Redis primary holding the most of the active-task index.
    match reach(&fake, REDIS_INDEX_AT, &mut stalled).await {
        Err(e) => missed.push(format!("kill the index's Redis primary: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let under = Under {
                pattern: format!("{redis_prefix}set:tasks:active:*"),
                what: "active-task index shards",
                first_probe: INDEX_PROBES,
            };
            let killed = kill_under_intake(&mut chaos, &fake, &repository, &under, started).await;
            conclude_under_intake(
                (&clock, &mut faults, &mut missed),
                (&mut probes, &mut problems),
                "kill -9 the index's Redis primary",
                killed,
                begun,
            );
        }
    }

    // 4. Redis near its maxmemory: intake held back, then room again.
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

    // 5. a RabbitMQ memory alarm: publishers blocked, intake held back, then cleared.
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
    if let Err(e) = await_ended(&chaos.pool.api_url, &probes).await {
        problems.push(e);
    }
    Injected {
        chaos,
        faults,
        missed,
        poison: None,
        probes,
        problems,
    }
}

/// What a Redis primary is killed under intake for: the keys matching `pattern` (`what`), and
/// the number of the first intake probe.
struct Under {
    pattern: String,
    what: &'static str,
    first_probe: usize,
}

/// `kill -9` of the Redis primary holding the most keys matching `under.pattern`, while intake
/// probes run: once intake has accepted a probe, the primary is killed, a replica takes over,
/// the old primary is restarted and rejoins as a replica, and intake must accept probes again.
/// The fault's description, and what the probes saw.
async fn kill_under_intake(
    chaos: &mut Chaos<Clustered>,
    fake: &FakeProvider,
    repository: &str,
    under: &Under,
    started: Instant,
) -> Result<(String, Seen), String> {
    let redis = &mut chaos.services.redis;
    let (victim, held, total) = primary_holding_most(redis, &under.pattern).await?;
    let probes = Probes::start(&chaos.pool.api_url, repository, under.first_probe, started);
    if !probes.await_accepted(1, INTAKE_FLOWING).await {
        let seen = probes.stop().await;
        return Err(format!(
            "intake accepted no probe before the kill: {}",
            seen.summary()
        ));
    }
    let in_flight = calls_in_flight(fake).len();
    let killed = Instant::now();
    redis.kill(victim).await;
    redis.await_failover(victim).await;
    let failover = killed.elapsed();
    let answered = fake.answer_count();
    while fake.answer_count() - answered < ANSWERED_WHILE_ALONE
        && killed.elapsed() - failover < ALONE_MAX
    {
        tokio::time::sleep(POLL).await;
    }
    let answered_alone = fake.answer_count() - answered;
    redis.restart(victim).await;
    let rejoined = killed.elapsed();
    let alone = rejoined - failover;
    let again = probes.accepted() + 2;
    let flowing = probes.await_accepted(again, INTAKE_FLOWING).await;
    let seen = probes.stop().await;
    if !flowing {
        return Err(format!(
            "intake did not accept probes again within {INTAKE_FLOWING:?} of the old primary's return: {}",
            seen.summary()
        ));
    }
    Ok((
        format!(
            "127.0.0.1:{victim} holding {held} of the {total} {}, {in_flight} provider call(s) in flight; a replica took over in {:.1} s and took no writes (NOREPLICAS) for {:.1} s, {} call(s) answered meanwhile, until the old primary rejoined as its replica {:.1} s after the kill; {}",
            under.what,
            failover.as_secs_f64(),
            alone.as_secs_f64(),
            answered_alone,
            rejoined.as_secs_f64(),
            seen.summary()
        ),
        seen,
    ))
}

/// A primary killed under intake recorded as a fault (or missed), its probes kept for the
/// checker, and what fails the run: a refusal without `Retry-After`, an answer that was neither
/// an acceptance nor a refusal.
fn conclude_under_intake(
    (clock, faults, missed): (&Clock, &mut Vec<Fault>, &mut Vec<String>),
    (probes, problems): (&mut Vec<Submitted>, &mut Vec<String>),
    name: &'static str,
    killed: Result<(String, Seen), String>,
    begun: (Duration, usize),
) {
    let (detail, seen) = match killed {
        Ok(done) => done,
        Err(why) => return missed.push(format!("{name}: {why}")),
    };
    for refusal in seen.unnamed() {
        problems.push(format!(
            "{name}: a submission at +{:.1}s was answered {} {} without Retry-After: {}",
            refusal.at.as_secs_f64(),
            refusal.answer.status,
            refusal.answer.code,
            refusal.answer.message
        ));
    }
    problems.extend(seen.failures.iter().map(|f| format!("{name}: {f}")));
    probes.extend(seen.accepted);
    faults.push(clock.record(name, detail, begun));
}

/// The primary holding the most keys matching `pattern` now, how many it holds, and how many
/// all primaries hold.
async fn primary_holding_most(
    redis: &RedisCluster,
    pattern: &str,
) -> Result<(u16, usize, usize), String> {
    let mut counts = Vec::new();
    for port in redis.primaries().await {
        counts.push((keys_on(port, pattern).await.len(), port));
    }
    let total = counts.iter().map(|(n, _)| n).sum();
    match counts.into_iter().max() {
        Some((held, port)) if held > 0 => Ok((port, held, total)),
        _ => Err(format!("no primary holds a key matching {pattern}")),
    }
}

/// The keys matching `pattern` on the Redis node on `port`.
pub(crate) async fn keys_on(port: u16, pattern: &str) -> Vec<String> {
    let mut conn = redis_on(port).await;
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("SCAN on 127.0.0.1:{port}: {e}"));
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// Waits until every probe task has ended, as the API shows it.
async fn await_ended(api_url: &str, tasks: &[Submitted]) -> Result<(), String> {
    let client =
        verdict_client::client::ApiClient::new(api_url, Some(crate::pool::TOKEN.to_owned()))
            .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PROBES_END;
    let mut open: Vec<&Submitted> = tasks.iter().collect();
    while !open.is_empty() {
        let mut still = Vec::new();
        for t in open {
            let ended = client
                .task(&t.id)
                .await
                .is_ok_and(|d| d.state.is_terminal());
            if !ended {
                still.push(t);
            }
        }
        open = still;
        if open.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} intake probe task(s) had not ended {PROBES_END:?} after the faults",
                open.len()
            ));
        }
        tokio::time::sleep(POLL * 5).await;
    }
    Ok(())
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
    let answer = submit_once(api_url, &submission).await?;
    Ok(Probe {
        status: answer.status,
        code: answer.code,
        message: answer.message,
        retry_after: answer.retry_after,
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
