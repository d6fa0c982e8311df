//! The faults the chaos suite injects during the run, each timed by a condition — "after the fake
//! provider has received N requests", "until K stages have finished during the outage" — never by
//! sleeping: kill -9 a worker with stages in flight (and start a replacement), kill and restart
//! Redis, publish a poison message on a stage queue and see it dead-lettered with its reason,
//! answer bursts of 429, stop and restart the broker.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{Broker, Message, Route};
use verdict_proto::wire::Priority;
use verdict_testkit::scenario::{REVIEWER, SUMMARY};
use verdict_testkit::{Behaviour, FakeProvider, Script};

use crate::pool::Pool;
use crate::services::{PrivateRabbit, PrivateRedis};
use crate::workload::Submitted;

/// Provider requests received before each fault (a full run makes about 520).
pub(crate) const KILL_AT: usize = 50;
pub(crate) const REDIS_AT: usize = 120;
pub(crate) const POISON_AT: usize = 170;
pub(crate) const BURST_AT: usize = 200;
pub(crate) const BROKER_AT: usize = 280;

/// How long to wait for a threshold: a run that stalls before it has not earned the next fault.
const REACH: Duration = Duration::from_secs(90);
/// Redis stays down at least this long — longer than the store's own retries (a few seconds), so
/// the workers see the outage — and until every provider call in flight when it died has been
/// answered (stages finishing while Redis is down), at most `REDIS_OUTAGE_MAX`.
const REDIS_OUTAGE_MIN: Duration = Duration::from_secs(8);
const REDIS_OUTAGE_MAX: Duration = Duration::from_secs(20);
/// A provider call of the workload lasts at most 2 s: one that arrived longer ago than this and
/// has no answer was abandoned (by the killed worker), not in flight.
const CALL_MAX: Duration = Duration::from_millis(2500);
/// How long the poison message may take to reach the dead-letter queue.
const DEAD_LETTER_WAIT: Duration = Duration::from_secs(30);
/// 429 answers in a row, per model: the reviewers' burst is longer than one attempt's retry
/// budget across the reviewer calls in flight.
const BURSTS: [(&str, usize); 2] = [(SUMMARY, 20), (REVIEWER, 60)];
const POLL: Duration = Duration::from_millis(50);

pub(crate) const KILL_WORKER: &str = "kill -9 worker";
pub(crate) const POISON: &[u8] = b"chaos: this is not a stage request";
const SCHEDULER_DEAD_LETTERS: &str = "verdict_dead_letters_total";

/// The services and processes the faults act on; dropped (so killed) with it.
#[derive(Debug)]
pub(crate) struct Chaos<S> {
    /// Field order is drop order: the pool before the services it uses.
    pub pool: Pool,
    pub services: S,
}

/// One RabbitMQ node and one Redis: the first scenario's services.
#[derive(Debug)]
pub(crate) struct Single {
    pub redis: PrivateRedis,
    pub rabbit: PrivateRabbit,
}

/// One injected fault.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub name: &'static str,
    pub detail: String,
    /// Since the start of the run.
    pub at: Duration,
    /// When it was over (the service back, the replacement up), since the start of the run.
    pub until: Duration,
    /// Provider requests received when it began.
    pub at_request: usize,
}

/// The poison message's fate.
#[derive(Debug, Clone, Default)]
pub(crate) struct Poison {
    /// The dead-letter reason, once it was found on the dead-letter queue.
    pub reason: Option<String>,
    /// How many deliveries the workers counted as poison meanwhile.
    pub counted_by_workers: f64,
    /// How much the scheduler's `verdict_dead_letters_total` rose meanwhile: a scheduler that
    /// consumes the dead-letter queue may take the message before the suite sees it.
    pub taken_by_scheduler: f64,
    /// Other dead letters met while looking for it (put back on the dead-letter queue).
    pub others_seen: usize,
}

impl Poison {
    /// How the message was shown dead-lettered with its reason, or why it was not.
    pub(crate) fn verdict(&self) -> Result<String, String> {
        match &self.reason {
            Some(reason) if !reason.is_empty() => {
                Ok(format!("dead-lettered, reason {reason:?}"))
            }
            _ if self.counted_by_workers >= 1.0 && self.taken_by_scheduler >= 1.0 => Ok(
                "dead-lettered by a worker as poison and consumed by the scheduler before the suite could read its reason"
                    .to_owned(),
            ),
            Some(_) => Err("dead-lettered without a reason".to_owned()),
            None => Err(format!(
                "not found on the dead-letter queue within {DEAD_LETTER_WAIT:?} (workers counted {} poison deliveries)",
                self.counted_by_workers
            )),
        }
    }
}

/// What the injector did.
#[derive(Debug)]
pub(crate) struct Injected<S> {
    pub chaos: Chaos<S>,
    pub faults: Vec<Fault>,
    /// Faults not injected, and why.
    pub missed: Vec<String>,
    /// The poison message's fate, when the scenario published one.
    pub poison: Option<Poison>,
    /// Reviews the injector itself submitted (intake probes), for the checker to follow too.
    pub probes: Vec<Submitted>,
    /// What the injector saw that fails the run (a refusal without `Retry-After`).
    pub problems: Vec<String>,
}

/// The ids of the task records a scenario's Redis holds (`SCAN` on every primary), to find
/// records no client was given.
pub(crate) trait RecordedTasks {
    fn recorded_tasks(&self, prefix: &str) -> impl std::future::Future<Output = Vec<String>>;
}

/// The task id in a record's key, `{prefix}doc:task:{<id>}`.
pub(crate) fn task_of_record(key: &str) -> Option<String> {
    let (_, rest) = key.split_once("doc:task:{")?;
    rest.strip_suffix('}').map(str::to_owned)
}

impl RecordedTasks for Single {
    async fn recorded_tasks(&self, prefix: &str) -> Vec<String> {
        let port = self.redis.port();
        crate::clustered::keys_on(port, &format!("{prefix}doc:task:*"))
            .await
            .iter()
            .filter_map(|k| task_of_record(k))
            .collect()
    }
}

pub(crate) struct Clock {
    started: Instant,
}

impl Clock {
    pub(crate) fn new(started: Instant) -> Clock {
        Clock { started }
    }

    pub(crate) fn begin(&self, fake: &FakeProvider) -> (Duration, usize) {
        (self.started.elapsed(), fake.request_count())
    }

    pub(crate) fn record(
        &self,
        name: &'static str,
        detail: String,
        (at, at_request): (Duration, usize),
    ) -> Fault {
        let fault = Fault {
            name,
            detail,
            at,
            until: self.started.elapsed(),
            at_request,
        };
        eprintln!(
            "chaos: +{:.1}s {} ({}), over at +{:.1}s",
            fault.at.as_secs_f64(),
            fault.name,
            fault.detail,
            fault.until.as_secs_f64()
        );
        fault
    }
}

/// Injects every fault in turn, then returns the services and what happened. `done` is dropped
/// when it returns (or panics): the workload then knows the faults are over.
pub(crate) async fn inject(
    mut chaos: Chaos<Single>,
    fake: Arc<FakeProvider>,
    amqp: AmqpConfig,
    started: Instant,
    done: watch::Sender<()>,
) -> Injected<Single> {
    let clock = Clock::new(started);
    let mut faults = Vec::new();
    let mut missed = Vec::new();
    let mut poison = Poison::default();
    let mut stalled = None;

    // 1. kill -9 the worker with the most stages in flight, then start a replacement; over
    // once the calls it had in flight were asked again (their leases lapsed), so that no later
    // fault stands in the way of their resuming.
    match reach(&fake, KILL_AT, &mut stalled).await {
        Err(e) => missed.push(format!("kill -9 a worker: {e}")),
        Ok(()) => {
            let (id, in_flight) = busiest_worker(&chaos.pool).await;
            let begun = clock.begin(&fake);
            let calls = calls_in_flight(&fake);
            chaos.pool.kill_worker(&id).await;
            let killed = Instant::now();
            let replacement = chaos.pool.start_worker().await;
            let resumed = await_asked_again(&fake, &calls).await;
            faults.push(clock.record(
                KILL_WORKER,
                format!(
                    "{id} with {in_flight} stage(s) in flight; replacement {replacement}; {}",
                    match resumed {
                        Ok(n) => format!(
                            "its {n} call(s) in flight asked again by {:.1} s after the kill",
                            killed.elapsed().as_secs_f64()
                        ),
                        Err(n) => format!(
                            "{n} of its calls in flight not asked again within {RESUMED_WITHIN:?}"
                        ),
                    }
                ),
                begun,
            ));
        }
    }

    // 2. kill Redis (SIGKILL), keep it down while stages finish, restart it on its AOF.
    match reach(&fake, REDIS_AT, &mut stalled).await {
        Err(e) => missed.push(format!("kill and restart Redis: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            let killed = Instant::now();
            let in_flight = calls_in_flight(&fake);
            let answered = fake.answer_count();
            chaos.services.redis.kill().await;
            while (killed.elapsed() < REDIS_OUTAGE_MIN || !all_answered(&fake, &in_flight))
                && killed.elapsed() < REDIS_OUTAGE_MAX
            {
                tokio::time::sleep(POLL).await;
            }
            let during = fake.answer_count() - answered;
            chaos.services.redis.restart().await;
            faults.push(clock.record(
                "kill -9 Redis",
                format!(
                    "down {:.1} s, while {during} provider call(s) were answered ({} in flight at the kill); restarted on its AOF",
                    killed.elapsed().as_secs_f64(),
                    in_flight.len()
                ),
                begun,
            ));
        }
    }

    // 3. a poison message on the interactive stage queue.
    match reach(&fake, POISON_AT, &mut stalled).await {
        Err(e) => missed.push(format!("poison message: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            poison = publish_poison(amqp, &chaos.pool).await;
            let detail = poison.verdict().unwrap_or_else(|e| e);
            faults.push(clock.record("poison message", detail, begun));
        }
    }

    // 4. bursts of 429 on the summary and reviewer models, then valid answers again.
    match reach(&fake, BURST_AT, &mut stalled).await {
        Err(e) => missed.push(format!("429 bursts: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            for (model, n) in BURSTS {
                let burst = vec![Behaviour::status(429).retry_after("1"); n];
                fake.script(model, Script::new(burst).then(valid_behaviour(model)));
            }
            let detail = BURSTS
                .iter()
                .map(|(model, n)| format!("{n} on {model}"))
                .collect::<Vec<_>>()
                .join(", ");
            faults.push(clock.record(
                "429 bursts",
                format!("answers of 429 (Retry-After: 1) in a row: {detail}"),
                begun,
            ));
        }
    }

    // 5. stop the broker gracefully and start it again.
    match reach(&fake, BROKER_AT, &mut stalled).await {
        Err(e) => missed.push(format!("broker restart: {e}")),
        Ok(()) => {
            let begun = clock.begin(&fake);
            chaos.services.rabbit.stop().await;
            chaos.services.rabbit.start_again().await;
            faults.push(clock.record(
                "broker restart",
                "RabbitMQ stopped (SIGTERM) and started again on its data".to_owned(),
                begun,
            ));
        }
    }

    drop(done);
    Injected {
        chaos,
        faults,
        missed,
        poison: Some(poison),
        probes: Vec::new(),
        problems: Vec::new(),
    }
}

/// The provider calls in flight now: arrived lately, not answered yet.
pub(crate) fn calls_in_flight(fake: &FakeProvider) -> Vec<usize> {
    let answered: std::collections::BTreeSet<usize> =
        fake.answers().iter().map(|a| a.seq).collect();
    fake.requests()
        .iter()
        .filter(|r| r.at.elapsed() < CALL_MAX && !answered.contains(&r.seq))
        .map(|r| r.seq)
        .collect()
}

/// How long a killed worker's calls may take to be asked again, at most.
const RESUMED_WITHIN: Duration = Duration::from_secs(40);

/// Waits until each of the requests `calls` (in flight at a worker's kill) was answered (another
/// worker's) or its call asked again; how many were asked again, or how many were not in time.
async fn await_asked_again(fake: &FakeProvider, calls: &[usize]) -> Result<usize, usize> {
    let deadline = Instant::now() + RESUMED_WITHIN;
    loop {
        let answered: std::collections::BTreeSet<usize> =
            fake.answers().iter().map(|a| a.seq).collect();
        let requests = fake.requests();
        let abandoned: Vec<_> = requests
            .iter()
            .filter(|r| calls.contains(&r.seq) && !answered.contains(&r.seq))
            .filter_map(|r| Some((r.seq, crate::checker::call_of(r)?)))
            .collect();
        let waiting = abandoned
            .iter()
            .filter(|(seq, call)| {
                !requests
                    .iter()
                    .any(|r| r.seq > *seq && crate::checker::call_of(r).as_ref() == Some(call))
            })
            .count();
        if waiting == 0 {
            return Ok(abandoned.len());
        }
        if Instant::now() >= deadline {
            return Err(waiting);
        }
        tokio::time::sleep(POLL).await;
    }
}

pub(crate) fn all_answered(fake: &FakeProvider, calls: &[usize]) -> bool {
    let answered: std::collections::BTreeSet<usize> =
        fake.answers().iter().map(|a| a.seq).collect();
    calls.iter().all(|c| answered.contains(c))
}

/// Waits until the fake provider has received `n` requests. Once one threshold was missed the
/// run has stalled, and the later ones are not waited for.
pub(crate) async fn reach(
    fake: &FakeProvider,
    n: usize,
    stalled: &mut Option<String>,
) -> Result<(), String> {
    if let Some(why) = stalled {
        return Err(format!("not reached either ({why})"));
    }
    fake.wait_for_requests(n, REACH)
        .await
        .map(|_| ())
        .map_err(|e| {
            let why = e.to_string();
            *stalled = Some(why.clone());
            why
        })
}

/// The valid answer of a stage model, at the suite's latency.
pub(crate) fn valid_behaviour(model: &str) -> Behaviour {
    use verdict_testkit::scenario::{
        REVIEWER_OK, SUMMARY_OK, TRIAGE, TRIAGE_OK, VALIDATOR, VALIDATOR_OK,
    };
    let text = match model {
        m if m == TRIAGE => TRIAGE_OK,
        m if m == SUMMARY => SUMMARY_OK,
        m if m == REVIEWER => REVIEWER_OK,
        m if m == VALIDATOR => VALIDATOR_OK,
        other => panic!("no valid answer for model {other}"),
    };
    Behaviour::text(text).after_between(Duration::from_millis(500), Duration::from_secs(2))
}

/// The worker with the most stages in flight: waits up to 10 s for one with two or more, then
/// takes the busiest.
async fn busiest_worker(pool: &Pool) -> (String, f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut counts = pool.in_flight().await;
        counts.sort_by(|a, b| b.1.total_cmp(&a.1));
        if let Some((id, n)) = counts.first().cloned()
            && (n >= 2.0 || (n >= 1.0 && Instant::now() >= deadline))
        {
            return (id, n);
        }
        if Instant::now() >= deadline + Duration::from_secs(20) {
            let (id, n) = counts.first().cloned().unwrap_or_default();
            return (id, n);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Publishes the poison message and waits until it is seen dead-lettered: on the dead-letter
/// queue with its reason, or counted as poison by a worker and taken off the dead-letter queue by
/// the scheduler (which consumes it and may be first). Other dead letters met on the queue are
/// put back with their reason (the scheduler is the one meant to read them).
async fn publish_poison(amqp: AmqpConfig, pool: &Pool) -> Poison {
    let mut poison = Poison::default();
    let poison_before = pool
        .deliveries()
        .await
        .get("poison")
        .copied()
        .unwrap_or(0.0);
    let dead_before = pool.scheduler_metric(SCHEDULER_DEAD_LETTERS).await;
    let broker = match tokio::time::timeout(DEAD_LETTER_WAIT, AmqpBroker::connect(amqp)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => panic!("connect to the private broker to publish the poison message: {e}"),
        Err(_) => panic!("connecting to the private broker took over {DEAD_LETTER_WAIT:?}"),
    };
    let message = Message {
        body: POISON.to_vec(),
        headers: Default::default(),
    };
    broker
        .publish(Route::Stages(Priority::Interactive), &message)
        .await
        .unwrap_or_else(|e| panic!("publish the poison message: {e}"));
    let deadline = Instant::now() + DEAD_LETTER_WAIT;
    while poison.reason.is_none() && Instant::now() < deadline {
        poison.counted_by_workers = pool
            .deliveries()
            .await
            .get("poison")
            .copied()
            .unwrap_or(0.0)
            - poison_before;
        poison.taken_by_scheduler =
            pool.scheduler_metric(SCHEDULER_DEAD_LETTERS).await - dead_before;
        if poison.verdict().is_ok() {
            break;
        }
        let taken = broker.take_dead_letters(20).await.unwrap_or_default();
        for (m, reason) in taken {
            if m.body == POISON {
                poison.reason = Some(reason);
            } else {
                poison.others_seen += 1;
                let _ = broker.dead_letter(&m, &reason).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker.close().await;
    poison
}
