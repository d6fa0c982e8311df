//! The worker loop's ownership rules on the in-memory broker and store, on virtual time: a stage
//! held by another worker's live claim is deferred and never acknowledged away, a dead worker's
//! stage is taken over once its lease lapses, and a result the store cannot take yet is held and
//! recorded later without paying the provider again (SPEC E7, R1).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;
use verdict_backends::broker::amqp::AmqpConfig;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::ratelimit::MemorySlots;
use verdict_backends::store::memory::MemoryStore;
use verdict_backends::store::{Claim, ResultStore, StageState, StoreError};
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{self, Priority, StageKind, StageResult};
use verdict_worker::consumer::{Consumer, ConsumerSettings};
use verdict_worker::executor::ExecutorSettings;
use verdict_worker::provider::scripted::Step;

use common::{VALID_REVIEW, counter, far_future, request, rig};

const TTL: Duration = Duration::from_secs(15);

/// The store, with the next `claims` claims and `records` records failing as if Redis were down,
/// and, while `renewals_down` is set, every claim by `worker-b` of a stage it already holds.
#[derive(Debug)]
struct Flaky {
    store: Arc<MemoryStore>,
    claims: AtomicUsize,
    records: AtomicUsize,
    renewals_down: std::sync::atomic::AtomicBool,
}

impl Flaky {
    fn new(store: Arc<MemoryStore>, claims: usize, records: usize) -> Flaky {
        Flaky {
            store,
            claims: AtomicUsize::new(claims),
            records: AtomicUsize::new(records),
            renewals_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn fails(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

fn down<T>() -> Result<T, StoreError> {
    Err(StoreError::Unavailable("connection refused".into()))
}

impl ResultStore for Flaky {
    fn claim<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        if Flaky::fails(&self.claims) {
            return Box::pin(async { down() });
        }
        if self.renewals_down.load(Ordering::SeqCst) && owner == "worker-b" {
            return Box::pin(async { down() });
        }
        self.store.claim(task_id, stage_id, owner, ttl)
    }

    fn release<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.store.release(task_id, stage_id, owner)
    }

    fn record<'a>(
        &'a self,
        result: &'a StageResult,
    ) -> BoxFuture<'a, Result<StageResult, StoreError>> {
        if Flaky::fails(&self.records) {
            return Box::pin(async { down() });
        }
        self.store.record(result)
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StageResult>, StoreError>> {
        self.store.get(task_id, stage_id)
    }

    fn inspect<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<StageState, StoreError>> {
        self.store.inspect(task_id, stage_id)
    }
}

struct Pool {
    rig: common::Rig,
    broker: Arc<MemoryBroker>,
    results: Arc<Flaky>,
    slots: Arc<MemorySlots>,
    shutdown: CancellationToken,
    running: tokio::task::JoinHandle<()>,
}

/// A consumer of one worker (`worker-b`) whose stages answer with a valid review, on a store
/// whose first `claims`/`records` calls fail.
fn pool(claims: usize, records: usize) -> Pool {
    pool_answering(claims, records, Step::text(VALID_REVIEW))
}

/// [`pool`], the stage answering with `answer`.
fn pool_answering(claims: usize, records: usize, answer: Step) -> Pool {
    pool_with(claims, records, vec![answer], 0)
}

/// [`pool`], its stages answering with `answers` in turn, with `cap` bulk stages per
/// organisation (0: no cap), bulk stages consumed too.
fn pool_with(claims: usize, records: usize, answers: Vec<Step>, cap: u32) -> Pool {
    pool_on(MemoryBroker::new(), claims, records, answers, cap)
}

/// [`pool_with`] on `broker`.
fn pool_on(
    broker: MemoryBroker,
    claims: usize,
    records: usize,
    answers: Vec<Step>,
    cap: u32,
) -> Pool {
    let rig = rig(answers, ExecutorSettings::default());
    let broker = Arc::new(broker);
    let results = Arc::new(Flaky::new(rig.store.clone(), claims, records));
    let slots = Arc::new(MemorySlots::new());
    let consumer = Consumer::new(
        rig.executor.clone(),
        broker.clone(),
        results.clone(),
        rig.store.clone(),
        slots.clone(),
        ConsumerSettings {
            worker_id: "worker-b".into(),
            concurrency: 4,
            bulk_concurrency: 4,
            max_requeues: 2,
            message_max_bytes: 1 << 20,
            claim_ttl: TTL,
            record_retry: Duration::from_secs(60),
            bulk_per_organisation: cap,
            shutdown_grace: Duration::from_secs(1),
        },
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let running = tokio::spawn(async move { consumer.run(stop).await.unwrap() });
    Pool {
        rig,
        broker,
        results,
        slots,
        shutdown,
        running,
    }
}

impl Pool {
    async fn publish(&self, request: &verdict_proto::wire::StageRequest) {
        let message = Message {
            body: wire::encode(request).unwrap(),
            headers: Default::default(),
        };
        self.broker
            .publish(Route::Stages(request.priority), &message)
            .await
            .unwrap();
    }

    /// The next stage result the worker publishes.
    async fn next_result(&self) -> StageResult {
        let mut results = self.broker.consume(Route::Results, 1).await.unwrap();
        let delivery = tokio::time::timeout(Duration::from_secs(600), results.next())
            .await
            .expect("a result within ten virtual minutes")
            .unwrap();
        let result = wire::decode(&delivery.message.body, 1 << 20).unwrap();
        delivery.acker.ack().await.unwrap();
        result
    }

    fn deliveries(&self, result: &str) -> f64 {
        counter(
            &self.rig.registry,
            "verdict_stage_deliveries_total",
            &[("result", result)],
        )
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.broker.stop();
        self.running.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_workers_stage_is_deferred_then_taken_over_when_its_lease_lapses() {
    let pool = pool(0, 0);
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    // worker-a claimed the stage and was killed: nobody renews its claim.
    assert_eq!(
        pool.rig
            .store
            .claim(&stage.task_id, &stage.stage_id, "worker-a", TTL)
            .await
            .unwrap(),
        Claim::Acquired
    );
    let claimed_at = tokio::time::Instant::now();
    pool.publish(&stage).await;

    let result = pool.next_result().await;

    assert!(
        tokio::time::Instant::now() - claimed_at >= TTL,
        "run only after the dead worker's lease lapsed"
    );
    assert_eq!(result.stage_id, stage.stage_id);
    assert!(
        matches!(
            result.outcome,
            verdict_proto::outcome::StageOutcome::Ok { .. }
        ),
        "{:?}",
        result.outcome
    );
    assert_eq!(pool.deliveries("deferred"), 1.0, "deferred, never dropped");
    assert_eq!(pool.deliveries("executed"), 1.0);
    assert_eq!(pool.rig.provider.requests().len(), 1);
    assert!(
        pool.rig
            .store
            .get(&stage.task_id, &stage.stage_id)
            .await
            .unwrap()
            .is_some(),
        "recorded"
    );
    pool.stop().await;
}

/// Issue 34: on RabbitMQ's delay queues (1 s, 5 s, 10 s, 30 s, …) a dead worker's stage is taken
/// over within a moment of its lease lapsing, as `worker.claim_ttl_seconds` promises — not when
/// the next longer queue gives its deferred copy back (30 s for a 15 s lease, before).
#[tokio::test(start_paused = true)]
async fn on_rabbitmqs_delay_queues_a_dead_workers_stage_resumes_as_its_lease_lapses() {
    let buckets = AmqpConfig::new("amqp://127.0.0.1").delay_buckets;
    let broker = MemoryBroker::new().with_delay_buckets(&buckets);
    let pool = pool_on(broker, 0, 0, vec![Step::text(VALID_REVIEW)], 0);
    let stage = claimed_by_worker_a(&pool).await;
    let claimed_at = tokio::time::Instant::now();
    pool.publish(&stage).await;

    let result = pool.next_result().await;

    let resumed = tokio::time::Instant::now() - claimed_at;
    assert!(
        resumed >= TTL && resumed <= TTL + Duration::from_secs(2),
        "resumed {resumed:?} after the kill, with a {TTL:?} lease"
    );
    assert_eq!(result.stage_id, stage.stage_id);
    assert_eq!(pool.deliveries("executed"), 1.0);
    pool.stop().await;
}

/// A review stage that `worker-a` has claimed for [`TTL`] (and, unless the test renews it, died
/// holding).
async fn claimed_by_worker_a(pool: &Pool) -> verdict_proto::wire::StageRequest {
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    pool.rig
        .store
        .claim(&stage.task_id, &stage.stage_id, "worker-a", TTL)
        .await
        .unwrap();
    stage
}

#[tokio::test(start_paused = true)]
async fn a_stage_a_live_worker_finishes_is_not_run_again() {
    let pool = pool(0, 0);
    let stage = claimed_by_worker_a(&pool).await;
    pool.publish(&stage).await;
    // worker-a is alive: it finishes and records while the duplicate waits.
    let mut done = pool.next_result_of_worker_a(&stage).await;
    done.model = Some("from worker-a".into());
    pool.rig.store.record(&done).await.unwrap();

    let republished = pool.next_result().await;

    assert_eq!(republished.model.as_deref(), Some("from worker-a"));
    assert_eq!(pool.deliveries("deferred"), 1.0);
    assert_eq!(pool.deliveries("already_done"), 1.0);
    assert!(
        pool.rig.provider.requests().is_empty(),
        "never paid for twice"
    );
    pool.stop().await;
}

impl Pool {
    /// What worker-a (simulated) records for `stage` once the duplicate was deferred.
    async fn next_result_of_worker_a(
        &self,
        stage: &verdict_proto::wire::StageRequest,
    ) -> StageResult {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.deliveries("deferred") < 1.0 {
            assert!(tokio::time::Instant::now() < deadline, "not deferred");
            tokio::task::yield_now().await;
        }
        StageResult {
            version: verdict_proto::wire::WIRE_VERSION,
            task_id: stage.task_id.clone(),
            stage_id: stage.stage_id.clone(),
            stage: stage.stage,
            attempt: stage.attempt,
            outcome: verdict_proto::outcome::StageOutcome::Ok {
                value: serde_json::json!({}),
                repaired: false,
                attempts: 1,
            },
            usage: Default::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_result_the_store_cannot_take_yet_is_held_and_recorded_once_it_returns() {
    let pool = pool(0, 3);
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    pool.publish(&stage).await;

    let result = pool.next_result().await;

    assert_eq!(result.stage_id, stage.stage_id);
    assert_eq!(pool.deliveries("record_retried"), 3.0);
    assert_eq!(pool.deliveries("executed"), 1.0);
    assert_eq!(pool.rig.provider.requests().len(), 1, "paid once");
    assert!(
        pool.results
            .store
            .get(&stage.task_id, &stage.stage_id)
            .await
            .unwrap()
            .is_some()
    );
    pool.stop().await;
}

/// A broker holding publishers back (a resource alarm) when the result is ready: the recorded
/// result's delivery is held and its publication tried again, not given back — every give-back
/// would count towards the queue's delivery limit, and a long alarm would dead-letter stages
/// that are done — and it is published once the alarm is over, the stage run and paid once.
#[tokio::test(start_paused = true)]
async fn a_result_the_broker_holds_back_is_held_and_published_once_it_takes_it() {
    let pool = pool(0, 0);
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    pool.publish(&stage).await;
    pool.broker
        .set_pressure(Some("RabbitMQ resource alarm: low on memory".into()));
    while pool
        .results
        .store
        .get(&stage.task_id, &stage.stage_id)
        .await
        .unwrap()
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few minutes of alarm: the delivery stays with this worker, nothing is redelivered.
    tokio::time::sleep(Duration::from_secs(180)).await;
    assert_eq!(pool.deliveries("already_done"), 0.0, "never given back");

    pool.broker.set_pressure(None);
    let result = pool.next_result().await;
    assert_eq!(result.stage_id, stage.stage_id);
    assert_eq!(pool.deliveries("executed"), 1.0);
    assert_eq!(pool.deliveries("already_done"), 0.0);
    assert_eq!(pool.rig.provider.requests().len(), 1, "paid once");
    pool.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_cannot_be_reached_when_claiming_defers_the_stage() {
    let pool = pool(2, 0);
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    pool.publish(&stage).await;

    let result = pool.next_result().await;

    assert_eq!(result.stage_id, stage.stage_id);
    assert_eq!(pool.deliveries("given_back"), 2.0);
    assert_eq!(pool.deliveries("executed"), 1.0);
    assert_eq!(pool.rig.provider.requests().len(), 1);
    assert!(
        pool.broker.dead_letters().is_empty(),
        "deferrals never count towards the dead-letter limit"
    );
    pool.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_lost_its_lease_stops_and_leaves_the_stage_to_its_new_owner() {
    // A slow answer: the stage runs for a minute.
    let slow = Step::After(Duration::from_secs(60), Box::new(Step::text(VALID_REVIEW)));
    let pool = pool_answering(0, 0, slow);
    let stage = request(
        StageKind::Review,
        RepairMode::Conversation,
        2,
        far_future(&pool.rig),
    );
    pool.publish(&stage).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pool.rig.provider.requests().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stage did not start"
        );
        tokio::task::yield_now().await;
    }
    // worker-b cannot reach the store for longer than its lease; worker-a takes the stage over.
    pool.results.renewals_down.store(true, Ordering::SeqCst);
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    assert_eq!(
        pool.rig
            .store
            .claim(&stage.task_id, &stage.stage_id, "worker-a", TTL)
            .await
            .unwrap(),
        Claim::Acquired
    );
    pool.results.renewals_down.store(false, Ordering::SeqCst);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pool.deliveries("taken_over") < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker-b did not notice"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    assert_eq!(
        pool.deliveries("executed"),
        0.0,
        "worker-b's run was stopped"
    );
    assert!(
        pool.rig
            .store
            .get(&stage.task_id, &stage.stage_id)
            .await
            .unwrap()
            .is_none(),
        "nothing recorded by the worker that lost the stage"
    );
    assert_eq!(
        pool.rig
            .store
            .claim(&stage.task_id, &stage.stage_id, "worker-c", TTL)
            .await
            .unwrap()
            .holder(),
        Some("worker-a"),
        "the new owner keeps it"
    );
    pool.stop().await;
}

/// A bulk triage stage of `task` on a repository of `owner` (triage reads no code).
fn bulk_stage(pool: &Pool, task: &str, owner: &str) -> verdict_proto::wire::StageRequest {
    let mut stage = request(
        StageKind::Triage,
        RepairMode::Isolated,
        2,
        far_future(&pool.rig),
    );
    stage.task_id = task.to_owned();
    stage.priority = Priority::Bulk;
    stage.repository = Some(verdict_proto::wire::RepositoryRef {
        url: format!("https://github.com/{owner}/shop.git"),
        commit: "0123456789012345678901234567890123456789".to_owned(),
        base: None,
    });
    stage
}

#[tokio::test(start_paused = true)]
async fn one_organisations_bulk_stages_wait_their_turn_while_another_organisation_runs() {
    let triage = r#"{"review": true, "reason": "A change to check."}"#;
    let slow = |secs| Step::After(Duration::from_secs(secs), Box::new(Step::text(triage)));
    let pool = pool_with(0, 0, vec![slow(30), slow(1), slow(1)], 1);
    let first = bulk_stage(&pool, "acme-1", "acme");
    let second = bulk_stage(&pool, "acme-2", "acme");
    let other = bulk_stage(&pool, "globex-1", "globex");
    pool.publish(&first).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pool.rig.provider.requests().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first stage did not start"
        );
        tokio::task::yield_now().await;
    }
    pool.publish(&second).await;
    pool.publish(&other).await;

    // The other organisation's stage finishes while acme's second waits for acme's slot.
    let done = pool.next_result().await;
    assert_eq!(done.task_id, "globex-1");
    assert!(
        pool.deliveries("organisation_capped") >= 1.0,
        "acme's second stage was deferred"
    );
    assert_eq!(
        pool.slots.holders("bulk:github.com/acme"),
        1,
        "acme runs one stage at a time"
    );
    let mut rest = vec![
        pool.next_result().await.task_id,
        pool.next_result().await.task_id,
    ];
    rest.sort();
    assert_eq!(rest, ["acme-1", "acme-2"]);
    assert_eq!(pool.rig.provider.requests().len(), 3, "each stage ran once");
    assert_eq!(
        pool.slots.holders("bulk:github.com/acme"),
        0,
        "slots given back"
    );
    pool.stop().await;
}
