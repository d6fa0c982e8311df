//! The pool's rate limits in the executor (SPEC Q3, X6, E5), on the scripted provider and the
//! in-memory limiter in virtual time: every provider call first takes one request and its
//! estimated tokens from its provider and model's limits, waiting in place (metered), requeueing
//! when the wait is long, ending at the soft deadline as the final call, cancellable, and never
//! going around a limiter it cannot reach; a 429 pauses the model for every caller; a burst of
//! 429s longer than the retry budget requeues the stage — the consumer then runs it again rather
//! than failing the task. Without limits the limiter is never called.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{VALID_REVIEW, counter, request};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::clock::{Clock, TokioClock};
use verdict_backends::ratelimit::memory::MemoryRateLimiter;
use verdict_backends::ratelimit::{Bucket, Demand, LimitError, Permit, RateLimiter};
use verdict_backends::repo::{MemoryRepositorySource, MemoryTree};
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::repair::RepairMode;
use verdict_proto::transcript::TranscriptEntry;
use verdict_proto::wire::{
    self, Priority, RepositoryRef, StageKind, StageRequest, StageResult, Tool,
};
use verdict_worker::consumer::{Consumer, ConsumerSettings};
use verdict_worker::executor::{
    ExecutorDeps, ExecutorSettings, ModelLimits, ProviderRegistry, RateLimits, StageExecutor,
};
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::scripted::{ScriptedProvider, Step};
use verdict_worker::provider::{
    ChatRequest, ChatResponse, Provider, ProviderError, ProviderKind, ToolChoice,
};
use verdict_worker::retry::RetryPolicy;

// ---------------------------------------------------------------------------------------------
// Rig: the scripted provider with call times, a limiter that records what it was asked

/// The scripted provider, noting when (after the rig started) each call arrived.
#[derive(Debug)]
struct Timed {
    inner: ScriptedProvider,
    start: Instant,
    at: Mutex<Vec<Duration>>,
}

impl Timed {
    fn times(&self) -> Vec<Duration> {
        self.at.lock().unwrap().clone()
    }
}

impl Provider for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn kind(&self) -> ProviderKind {
        self.inner.kind()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        workdir: Option<&'a Path>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        self.at.lock().unwrap().push(self.start.elapsed());
        self.inner.complete(request, workdir, cancel)
    }
}

/// The in-memory limiter, recording every acquisition and pause, optionally failing the first
/// `unavailable` acquisitions as an unreachable Redis would.
#[derive(Debug, Default)]
struct Recording {
    inner: MemoryRateLimiter,
    unavailable: AtomicUsize,
    acquired: Mutex<Vec<(String, Vec<Demand>)>>,
    paused: Mutex<Vec<(String, Duration)>>,
}

impl RateLimiter for Recording {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        demands: &'a [Demand],
    ) -> BoxFuture<'a, Result<Permit, LimitError>> {
        self.acquired
            .lock()
            .unwrap()
            .push((key.to_owned(), demands.to_vec()));
        let down = self
            .unavailable
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if down {
            return Box::pin(async { Err(LimitError::Unavailable("connection refused".into())) });
        }
        self.inner.acquire(key, demands)
    }

    fn pause<'a>(
        &'a self,
        key: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), LimitError>> {
        self.paused.lock().unwrap().push((key.to_owned(), duration));
        self.inner.pause(key, duration)
    }
}

struct Rig {
    executor: StageExecutor,
    provider: Arc<Timed>,
    limiter: Arc<Recording>,
    store: Arc<MemoryStore>,
    registry: prometheus::Registry,
    clock: Arc<TokioClock>,
}

const URL: &str = "https://git.example.test/calc.git";
const COMMIT: &str = "4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39";

fn rig(steps: Vec<Step>, settings: ExecutorSettings) -> Rig {
    let provider = Arc::new(Timed {
        inner: ScriptedProvider::new("scripted", "model-a", steps),
        start: Instant::now(),
        at: Mutex::new(Vec::new()),
    });
    let mut providers = ProviderRegistry::new();
    providers.insert(provider.clone());
    let limiter = Arc::new(Recording::default());
    let store = Arc::new(MemoryStore::new());
    let registry = prometheus::Registry::new();
    let clock = Arc::new(TokioClock::new());
    let repositories = MemoryRepositorySource::new().with(
        URL,
        COMMIT,
        MemoryTree::new().file("src/calc.py", "def add(a, b):\n    return a + b\n"),
    );
    let deps = ExecutorDeps {
        providers,
        repositories: Arc::new(repositories),
        inputs: store.clone(),
        journal: store.clone(),
        cache: store.clone(),
        transcripts: store.clone(),
        events: store.clone(),
        limiter: limiter.clone(),
        metrics: WorkerMetrics::register(&registry).unwrap(),
        clock: clock.clone(),
    };
    Rig {
        executor: StageExecutor::new(deps, settings),
        provider,
        limiter,
        store,
        registry,
        clock,
    }
}

/// Settings with `limits` on every model of the scripted provider, whose calls reserve
/// `output_tokens`.
fn limited(limits: ModelLimits, output_tokens: u32) -> ExecutorSettings {
    let mut rate_limits = RateLimits::default();
    rate_limits.set_provider("scripted", limits, output_tokens);
    ExecutorSettings {
        rate_limits,
        ..ExecutorSettings::default()
    }
}

fn rpm(n: u32) -> ModelLimits {
    ModelLimits {
        requests_per_minute: Some(n),
        tokens_per_minute: None,
    }
}

/// A review stage of task `task` (each task its own journal entries).
fn review(r: &Rig, task: &str) -> StageRequest {
    let mut req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future_of(r),
    );
    req.task_id = task.into();
    req
}

fn far_future_of(r: &Rig) -> u64 {
    r.clock.now_unix_ms() + 600_000
}

fn histogram(registry: &prometheus::Registry, name: &str) -> (u64, f64) {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric().to_vec())
        .map(|m| {
            let h = m.get_histogram();
            (h.get_sample_count(), h.get_sample_sum())
        })
        .fold((0, 0.0), |(n, s), (m, t)| (n + m, s + t))
}

fn is_ok(outcome: &StageOutcome) -> bool {
    matches!(outcome, StageOutcome::Ok { .. })
}

fn rate_limited(retry_after: Option<Duration>) -> Step {
    let mut e = ProviderError::new(FailureKind::RateLimited, "HTTP 429 Too Many Requests");
    e.status = Some(429);
    e.retry_after = retry_after;
    Step::Fail(e)
}

// ---------------------------------------------------------------------------------------------
// Waiting for the limit

/// Two requests a minute (bursts of one): three stages at once call at 0, 30 and 60 s, each wait
/// spent in place (30 s is within `max_inline_wait`) and metered.
#[tokio::test(start_paused = true)]
async fn calls_wait_in_place_for_the_pools_limit_and_the_waits_are_metered() {
    let r = Arc::new(rig(vec![Step::text(VALID_REVIEW); 3], limited(rpm(2), 0)));
    let stages: Vec<_> = ["t1", "t2", "t3"]
        .into_iter()
        .map(|task| {
            let r = r.clone();
            tokio::spawn(async move {
                let req = review(&r, task);
                r.executor.execute(&req, &CancellationToken::new()).await
            })
        })
        .collect();
    for stage in stages {
        let e = stage.await.unwrap();
        assert!(is_ok(&e.result.outcome), "{:?}", e.result.outcome);
        assert_eq!(e.requeue_after, None);
    }
    let secs: Vec<u64> = r.provider.times().iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [0, 30, 60]);
    assert_eq!(
        counter(
            &r.registry,
            "verdict_rate_limit_waits_total",
            &[("provider", "scripted"), ("model", "model-a")]
        ),
        2.0
    );
    let (waits, seconds) = histogram(&r.registry, "verdict_rate_limit_wait_seconds");
    assert_eq!(waits, 2);
    assert!((seconds - 90.0).abs() < 0.1, "{seconds}");
}

/// Each call takes one request and its tokens: the prompt's estimate plus the provider's output
/// reservation, from the buckets of its provider and model.
#[tokio::test(start_paused = true)]
async fn a_call_takes_one_request_and_its_estimated_tokens() {
    let limits = ModelLimits {
        requests_per_minute: Some(100),
        tokens_per_minute: Some(100_000),
    };
    let r = rig(vec![Step::text(VALID_REVIEW)], limited(limits, 2_000));
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert!(is_ok(&e.result.outcome), "{:?}", e.result.outcome);
    let acquired = r.limiter.acquired.lock().unwrap().clone();
    assert_eq!(acquired.len(), 1);
    let (key, demands) = &acquired[0];
    assert_eq!(key, "scripted:model-a");
    assert_eq!(demands[0].bucket, Bucket::Requests);
    assert_eq!(demands[0].cost, 1);
    assert_eq!(demands[1].bucket, Bucket::Tokens);
    let sent = &r.provider.inner.requests()[0];
    let prompt_bytes: usize = sent.messages.iter().map(|m| m.content.len()).sum();
    let prompt = demands[1].cost - 2_000;
    // One token per three bytes, four per message of framing.
    assert_eq!(
        prompt,
        (prompt_bytes.div_ceil(3) + 4 * sent.messages.len()) as u64
    );
}

#[tokio::test(start_paused = true)]
async fn without_limits_the_limiter_is_never_called() {
    let mut rate_limits = RateLimits::default();
    rate_limits.set_provider("another", rpm(1), 0);
    rate_limits.set_provider("scripted", ModelLimits::default(), 0);
    rate_limits.set_model("scripted", "model-b", rpm(1));
    let settings = ExecutorSettings {
        rate_limits,
        ..ExecutorSettings::default()
    };
    let r = rig(
        vec![
            rate_limited(Some(Duration::from_secs(1))),
            Step::text(VALID_REVIEW),
        ],
        settings,
    );
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert!(is_ok(&e.result.outcome), "{:?}", e.result.outcome);
    assert!(r.limiter.acquired.lock().unwrap().is_empty());
    assert!(r.limiter.paused.lock().unwrap().is_empty());
}

/// A wait longer than `max_inline_wait` is not spent holding the slot: the attempt ends
/// `rate_limited` with a requeue after that wait, and the provider is not called.
#[tokio::test(start_paused = true)]
async fn a_limiter_wait_longer_than_the_inline_limit_requeues_the_stage() {
    let r = rig(vec![Step::text(VALID_REVIEW); 2], limited(rpm(1), 0));
    let first = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert!(is_ok(&first.result.outcome));
    // The next request is due in 60 s, beyond the 30 s held in place.
    let second = r
        .executor
        .execute(&review(&r, "t2"), &CancellationToken::new())
        .await;
    assert_eq!(second.requeue_after, Some(Duration::from_secs(60)));
    assert!(
        matches!(
            &second.result.outcome,
            StageOutcome::ExecutionFailure { kind: FailureKind::RateLimited, retryable: true, message }
                if message.contains("retry.max_inline_wait_seconds")
        ),
        "{:?}",
        second.result.outcome
    );
    assert_eq!(r.provider.times().len(), 1, "the provider was not called");
    assert_eq!(second.result.usage.calls, 0);
}

#[tokio::test(start_paused = true)]
async fn cancellation_ends_a_limiter_wait() {
    let r = Arc::new(rig(vec![Step::text(VALID_REVIEW); 2], limited(rpm(2), 0)));
    let first = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert!(is_ok(&first.result.outcome));
    let cancel = CancellationToken::new();
    let stage = {
        let (r, cancel) = (r.clone(), cancel.clone());
        tokio::spawn(async move { r.executor.execute(&review(&r, "t2"), &cancel).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    cancel.cancel();
    let e = stage.await.unwrap();
    assert_eq!(
        e.result.outcome.failure_kind(),
        Some(FailureKind::Cancelled)
    );
    assert!(Instant::now() - r.provider.start < Duration::from_secs(6));
    assert_eq!(r.provider.times().len(), 1);
}

/// While the limiter cannot be reached, the call waits with backoff and is made once it answers
/// — the provider is never called around the limit.
#[tokio::test(start_paused = true)]
async fn an_unreachable_limiter_is_waited_for_never_called_around() {
    let r = rig(vec![Step::text(VALID_REVIEW)], limited(rpm(60), 0));
    r.limiter.unavailable.store(8, Ordering::SeqCst);
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert!(is_ok(&e.result.outcome), "{:?}", e.result.outcome);
    assert_eq!(r.limiter.acquired.lock().unwrap().len(), 9);
    let called_at = r.provider.times();
    assert_eq!(called_at.len(), 1);
    assert!(
        called_at[0] >= Duration::from_millis(50),
        "the call waited for the limiter: {called_at:?}"
    );
    assert_eq!(
        counter(
            &r.registry,
            "verdict_rate_limiter_unavailable_total",
            &[("provider", "scripted"), ("model", "model-a")]
        ),
        8.0
    );
    let (waits, _) = histogram(&r.registry, "verdict_rate_limit_wait_seconds");
    assert_eq!(waits, 1);
}

/// A stage with tools whose next turn waits for the limit past the soft deadline: the wait ends
/// at the deadline, the conversation is finalised (the finalise message, no tools), and that
/// final call waits for its own grant (E2: no call offers tools after the deadline).
#[tokio::test(start_paused = true)]
async fn a_wait_that_reaches_the_soft_deadline_makes_the_next_call_the_final_one() {
    let settings = ExecutorSettings {
        retry: RetryPolicy {
            max_inline_wait: Duration::from_secs(120),
            ..RetryPolicy::default()
        },
        ..limited(rpm(1), 0)
    };
    let r = rig(
        vec![
            Step::tool_call("c1", "read", r#"{"path": "src/calc.py"}"#),
            Step::text(VALID_REVIEW),
        ],
        settings,
    );
    let mut req = review(&r, "t1");
    req.tools = vec![Tool::Read];
    req.repository = Some(RepositoryRef {
        url: URL.into(),
        commit: COMMIT.into(),
        base: None,
    });
    req.deadline_unix_ms = r.clock.now_unix_ms() + 10_000;
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(is_ok(&e.result.outcome), "{:?}", e.result.outcome);

    let secs: Vec<u64> = r.provider.times().iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [0, 60], "the final call still waited for the limit");
    let sent = r.provider.inner.requests();
    assert!(!sent[0].tools.is_empty());
    assert!(sent[1].tools.is_empty());
    assert_eq!(sent[1].tool_choice, ToolChoice::None);
    let last = sent[1].messages.last().unwrap();
    assert!(last.content.contains("time budget"), "{}", last.content);
    assert_eq!(
        counter(
            &r.registry,
            "verdict_soft_deadline_finalisations_total",
            &[]
        ),
        1.0
    );
    let transcript = &r.store.transcripts()[0];
    let reached = transcript
        .entries
        .iter()
        .find_map(|entry| match entry {
            TranscriptEntry::DeadlineReached { at_unix_ms } => Some(*at_unix_ms),
            _ => None,
        })
        .unwrap();
    assert!(reached >= req.deadline_unix_ms);
}

// ---------------------------------------------------------------------------------------------
// 429s: the pool pauses, and a long burst is requeued

/// A 429 with `Retry-After: 5` pauses the model for everyone: a stage that starts a second later
/// calls only when the pause ends, not at once.
#[tokio::test(start_paused = true)]
async fn a_429_pauses_the_model_for_every_caller() {
    let r = Arc::new(rig(
        vec![
            rate_limited(Some(Duration::from_secs(5))),
            Step::text(VALID_REVIEW),
            Step::text(VALID_REVIEW),
        ],
        limited(rpm(600), 0),
    ));
    let first = {
        let r = r.clone();
        tokio::spawn(async move {
            r.executor
                .execute(&review(&r, "t1"), &CancellationToken::new())
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = r
        .executor
        .execute(&review(&r, "t2"), &CancellationToken::new())
        .await;
    let first = first.await.unwrap();
    assert!(is_ok(&first.result.outcome), "{:?}", first.result.outcome);
    assert!(is_ok(&second.result.outcome), "{:?}", second.result.outcome);
    let secs: Vec<u64> = r.provider.times().iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [0, 5, 5], "the second stage waited for the pause");
    assert_eq!(
        r.limiter.paused.lock().unwrap().clone(),
        [("scripted:model-a".to_owned(), Duration::from_secs(5))]
    );
    assert_eq!(
        counter(&r.registry, "verdict_rate_limit_pauses_total", &[]),
        1.0
    );
}

fn fast_retries(budget: u32) -> RetryPolicy {
    RetryPolicy {
        budget,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(1),
        max_inline_wait: Duration::from_secs(30),
    }
}

/// The issue's burst: more 429s than the retry budget. The attempt ends with a requeue delay —
/// the next backoff step, as no `Retry-After` was given — instead of a final failure.
#[tokio::test(start_paused = true)]
async fn a_429_burst_longer_than_the_retry_budget_requeues_the_stage() {
    let settings = ExecutorSettings {
        retry: fast_retries(2),
        ..ExecutorSettings::default()
    };
    let r = rig(vec![rate_limited(None); 3], settings);
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert_eq!(r.provider.times().len(), 3, "one call and two retries");
    // Steps of 100 and 200 ms were spent; the next is 400 ms (backon's steps are floats).
    let delay = e.requeue_after.unwrap();
    assert!(
        delay.abs_diff(Duration::from_millis(400)) < Duration::from_millis(1),
        "{delay:?}"
    );
    assert!(
        matches!(
            e.result.outcome,
            StageOutcome::ExecutionFailure {
                kind: FailureKind::RateLimited,
                retryable: true,
                ..
            }
        ),
        "{:?}",
        e.result.outcome
    );

    // With a Retry-After, that is the delay.
    let r = rig(
        vec![rate_limited(Some(Duration::from_secs(3))); 3],
        ExecutorSettings {
            retry: fast_retries(2),
            ..ExecutorSettings::default()
        },
    );
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    assert_eq!(e.requeue_after, Some(Duration::from_secs(3)));
}

/// Fallback models come first (E5): only when they are rate limited too is the stage requeued.
#[tokio::test(start_paused = true)]
async fn a_429_burst_tries_the_fallback_model_before_requeueing() {
    let settings = ExecutorSettings {
        retry: fast_retries(1),
        fallback_models: [(StageKind::Review, vec!["model-b".to_owned()])].into(),
        ..ExecutorSettings::default()
    };
    let r = rig(vec![rate_limited(None); 4], settings);
    let e = r
        .executor
        .execute(&review(&r, "t1"), &CancellationToken::new())
        .await;
    let models: Vec<String> = r
        .provider
        .inner
        .requests()
        .iter()
        .map(|q| q.model.clone())
        .collect();
    assert_eq!(models, ["model-a", "model-a", "model-b", "model-b"]);
    assert!(e.requeue_after.is_some());
}

/// Through the consumer: the rate-limited attempt is requeued with its delay, and the next
/// attempt completes the stage — one `ok` result, never an `execution_failure`.
#[tokio::test(start_paused = true)]
async fn the_consumer_runs_a_requeued_rate_limited_stage_again_and_it_completes() {
    let settings = ExecutorSettings {
        retry: fast_retries(2),
        ..ExecutorSettings::default()
    };
    let mut steps = vec![rate_limited(None); 3];
    steps.push(Step::text(VALID_REVIEW));
    let r = rig(steps, settings);
    let broker = MemoryBroker::new();
    let consumer = Consumer::new(
        r.executor.clone(),
        Arc::new(broker.clone()),
        r.store.clone(),
        r.store.clone(),
        Arc::new(verdict_backends::ratelimit::MemorySlots::new()),
        ConsumerSettings {
            worker_id: "w1".into(),
            concurrency: 2,
            bulk_concurrency: 0,
            max_requeues: 3,
            message_max_bytes: 1 << 20,
            claim_ttl: Duration::from_secs(60),
            record_retry: Duration::from_secs(60),
            bulk_per_organisation: 0,
            shutdown_grace: Duration::from_secs(5),
        },
    );
    let mut results = broker.consume(Route::Results, 1).await.unwrap();
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move { consumer.run(stop).await })
    };
    let req = review(&r, "t1");
    broker
        .publish(
            Route::Stages(Priority::Interactive),
            &Message {
                body: wire::encode(&req).unwrap(),
                headers: Default::default(),
            },
        )
        .await
        .unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(60), results.next())
        .await
        .unwrap()
        .unwrap();
    let result: StageResult = wire::decode(&delivery.message.body, 1 << 20).unwrap();
    assert!(is_ok(&result.outcome), "{:?}", result.outcome);
    assert_eq!(result.attempt, 2);
    assert_eq!(r.provider.times().len(), 4);
    stop.cancel();
    running.await.unwrap().unwrap();
}
