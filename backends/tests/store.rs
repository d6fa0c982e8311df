//! One conformance suite for the state stores: each behaviour is one check function over a store
//! trait, run on `MemoryStore` and on `RedisStore` against the real Redis (127.0.0.1:6379), so
//! `verdict dev` and the unit tests see what production sees. On both: claims and their expiry,
//! first-write-wins results, ordered event streams that wake followers and are capped, cancel
//! marks and notices, compare-and-set documents and id sets, content-addressed inputs, the
//! response journal, and transcripts read back per task. Redis-only checks cover TTLs,
//! stored-data corruption and outage recovery (on a private `redis-server` that the test kills
//! and restarts). The whole suite runs again on a private Redis Cluster (three primaries, three
//! replicas) and a private Sentinel deployment, each with a primary killed under a store in use.
//!
//! Every Redis test uses its own key prefix and deletes it afterwards, so tests run in parallel.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};
use verdict_backends::store::memory::MemoryStore;
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_backends::store::{
    Account, BudgetLedger, CachedAnswer, CallKey, CancelSignals, Capacity, Claim, DocumentStore,
    EventLog, EventSink, InputError, InputStore, Liveness, Reservation, ResponseCache,
    ResponseJournal, ResultStore, Sealing, StageState, Standing, StoreError, TaskArchive,
    TranscriptStore, content_hash, event, resolve,
};
use verdict_proto::budget::{Amount, Limit};
use verdict_proto::chat::{ChatResponse, FinishReason, TokenUsage};
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::transcript::Transcript;
use verdict_proto::wire::{EventType, InputContent, InputRef, StageKind, StageResult, Usage};

use support::redis::{PrivateRedis, free_port};
use support::wait::{PROMPTLY, eventually};
use verdict_testkit::services::redis::{RedisCluster, RedisSentinel};

const REDIS_URL: &str = "redis://127.0.0.1:6379";

// ---------------------------------------------------------------------------------------------
// Fixtures

/// A store on the shared Redis under a prefix of its own, removed again on drop (even when the
/// test fails).
struct RedisFixture {
    store: RedisStore,
    prefix: String,
    raw: MultiplexedConnection,
}

impl RedisFixture {
    async fn new() -> RedisFixture {
        RedisFixture::with(|_| {}).await
    }

    async fn with(adjust: impl FnOnce(&mut RedisConfig)) -> RedisFixture {
        let prefix = format!("test:{:016x}:", rand::random::<u64>());
        let mut config = RedisConfig::new(REDIS_URL);
        config.prefix = prefix.clone();
        adjust(&mut config);
        let store = RedisStore::connect(config).await.unwrap();
        let raw = redis::Client::open(REDIS_URL)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        RedisFixture { store, prefix, raw }
    }

    /// The remaining TTL of a key in milliseconds (`-1` none, `-2` missing).
    async fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(format!("{}{key}", self.prefix))
            .query_async(&mut self.raw.clone())
            .await
            .unwrap()
    }

    async fn raw_get(&self, key: &str) -> Vec<u8> {
        redis::cmd("GET")
            .arg(format!("{}{key}", self.prefix))
            .query_async(&mut self.raw.clone())
            .await
            .unwrap()
    }

    async fn raw_set(&self, key: &str, value: &str) {
        let () = redis::cmd("SET")
            .arg(format!("{}{key}", self.prefix))
            .arg(value)
            .query_async(&mut self.raw.clone())
            .await
            .unwrap();
    }
}

impl Drop for RedisFixture {
    fn drop(&mut self) {
        delete_prefix(REDIS_URL, &self.prefix);
    }
}

/// Best-effort cleanup: `SCAN` + `DEL` of everything under `prefix`, on a blocking connection
/// because it runs in `Drop`.
fn delete_prefix(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
        return;
    };
    let mut cursor = 0u64;
    loop {
        let Ok((next, keys)): Result<(u64, Vec<String>), _> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
        else {
            return;
        };
        if !keys.is_empty() {
            let _: Result<i64, _> = redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

fn stage_result(task: &str, stage: &str, finished: u64) -> StageResult {
    StageResult {
        version: verdict_proto::wire::WIRE_VERSION,
        task_id: task.into(),
        stage_id: stage.into(),
        stage: StageKind::Review,
        attempt: 1,
        outcome: StageOutcome::ExecutionFailure {
            kind: FailureKind::RateLimited,
            retryable: true,
            message: format!("finished at {finished}"),
        },
        usage: Usage::default(),
        started_unix_ms: 1,
        finished_unix_ms: finished,
        model: None,
        evidence_cut: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Behavioural checks, one per concern, for any backend

async fn check_claims(store: &dyn ResultStore) {
    let ttl = Duration::from_secs(60);
    assert_eq!(
        store.claim("t1", "s", "a", ttl).await.unwrap(),
        Claim::Acquired
    );
    assert_eq!(
        store.claim("t1", "s", "b", ttl).await.unwrap().holder(),
        Some("a")
    );
    // A holder's claim says how long it lasts, so a redelivery knows when to come back.
    match store.claim("t1", "s", "b", ttl).await.unwrap() {
        Claim::HeldBy { expires_in, .. } => {
            assert!(expires_in <= ttl && expires_in > ttl / 2, "{expires_in:?}");
        }
        other => panic!("{other:?}"),
    }
    // Renewal by the holder.
    assert_eq!(
        store.claim("t1", "s", "a", ttl).await.unwrap(),
        Claim::Acquired
    );
    // Another stage of the same task is independent.
    assert_eq!(
        store.claim("t1", "s2", "b", ttl).await.unwrap(),
        Claim::Acquired
    );
    // Only the owner releases.
    store.release("t1", "s", "b").await.unwrap();
    assert_eq!(
        store.claim("t1", "s", "b", ttl).await.unwrap().holder(),
        Some("a")
    );
    store.release("t1", "s", "a").await.unwrap();
    assert_eq!(
        store.claim("t1", "s", "b", ttl).await.unwrap(),
        Claim::Acquired
    );
    // Once a result is recorded, the stage is done for everyone, the holder included.
    let done = stage_result("t1", "s", 7);
    store.record(&done).await.unwrap();
    for owner in ["b", "c"] {
        assert_eq!(
            store.claim("t1", "s", owner, ttl).await.unwrap(),
            Claim::Done(Box::new(done.clone()))
        );
    }
}

async fn check_claim_expiry(store: &dyn ResultStore) {
    let ttl = Duration::from_millis(200);
    assert_eq!(
        store.claim("t2", "s", "a", ttl).await.unwrap(),
        Claim::Acquired
    );
    assert_eq!(
        store.claim("t2", "s", "b", ttl).await.unwrap().holder(),
        Some("a")
    );
    eventually("the claim to expire", || async {
        store.claim("t2", "s", "b", ttl).await.unwrap() == Claim::Acquired
    })
    .await;
}

async fn check_inspect(store: &dyn ResultStore) {
    let ttl = Duration::from_secs(60);
    assert_eq!(store.inspect("t4", "s").await.unwrap(), StageState::Free);
    store.claim("t4", "s", "a", ttl).await.unwrap();
    match store.inspect("t4", "s").await.unwrap() {
        StageState::Held { owner, expires_in } => {
            assert_eq!(owner, "a");
            assert!(expires_in <= ttl && expires_in > ttl / 2, "{expires_in:?}");
        }
        other => panic!("{other:?}"),
    }
    // Reading changes nothing: the holder keeps its claim, nobody else gets one.
    assert_eq!(
        store.claim("t4", "s", "b", ttl).await.unwrap().holder(),
        Some("a")
    );
    store.release("t4", "s", "a").await.unwrap();
    assert_eq!(store.inspect("t4", "s").await.unwrap(), StageState::Free);
    let done = stage_result("t4", "s", 9);
    store.record(&done).await.unwrap();
    assert_eq!(
        store.inspect("t4", "s").await.unwrap(),
        StageState::Done(Box::new(done))
    );
}

async fn check_record_first_wins(store: &dyn ResultStore) {
    assert_eq!(store.get("t3", "s").await.unwrap(), None);
    let first = stage_result("t3", "s", 10);
    let second = stage_result("t3", "s", 20);
    assert_eq!(store.record(&first).await.unwrap(), first);
    assert_eq!(store.record(&second).await.unwrap(), first);
    assert_eq!(store.get("t3", "s").await.unwrap(), Some(first));
    assert_eq!(store.get("t3", "other").await.unwrap(), None);
}

async fn check_event_order(log: &dyn EventLog) {
    assert!(
        log.read("t4", None, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let mut ids = Vec::new();
    for i in 0..5u64 {
        let e = event("t4", Some("s"), i, EventType::StageStarted, format!("m{i}"));
        ids.push(log.append(&e).await.unwrap());
    }
    let all = log.read("t4", None, Duration::ZERO).await.unwrap();
    let messages: Vec<_> = all.iter().map(|e| e.event.message.as_str()).collect();
    assert_eq!(messages, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(all.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), ids);
    let after = log.read("t4", Some(&ids[2]), Duration::ZERO).await.unwrap();
    assert_eq!(
        after
            .iter()
            .map(|e| e.event.message.as_str())
            .collect::<Vec<_>>(),
        ["m3", "m4"]
    );
    assert!(
        log.read("t4", Some(&ids[4]), Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    // A batch lands in order after what was there, with its positions, in one call; an empty
    // batch appends nothing.
    let batch: Vec<_> = (5..8u64)
        .map(|i| {
            event(
                "t4",
                Some("s"),
                i,
                EventType::StageFinished,
                format!("m{i}"),
            )
        })
        .collect();
    let batch_ids = log.append_all(&batch).await.unwrap();
    assert_eq!(batch_ids.len(), 3);
    assert!(log.append_all(&[]).await.unwrap().is_empty());
    let tail = log.read("t4", Some(&ids[4]), Duration::ZERO).await.unwrap();
    assert_eq!(
        tail.iter()
            .map(|e| (e.id.clone(), e.event.message.clone()))
            .collect::<Vec<_>>(),
        batch_ids
            .iter()
            .cloned()
            .zip(["m5", "m6", "m7"].map(String::from))
            .collect::<Vec<_>>()
    );
    // Another task's stream is separate; the sink path lands in the same stream.
    log.emit(event("t4b", None, 9, EventType::TaskQueued, "queued"))
        .await;
    let other = log.read("t4b", None, Duration::ZERO).await.unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].event.kind, EventType::TaskQueued);
}

/// A follower waiting on an empty stream wakes as soon as another task appends.
/// `until_parked` returns once the follower is waiting inside the store.
async fn check_wait_wakes(log: Arc<dyn EventLog>, until_parked: impl AsyncFn()) {
    let first = log
        .append(&event("t5", None, 1, EventType::TaskStarted, "first"))
        .await
        .unwrap();
    let wait = Duration::from_secs(30);
    let follower = {
        let log = log.clone();
        let after = first.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let events = log.read("t5", Some(&after), wait).await.unwrap();
            (events, started.elapsed())
        })
    };
    until_parked().await;
    log.append(&event("t5", None, 2, EventType::StageStarted, "second"))
        .await
        .unwrap();
    let (events, waited) = timeout(PROMPTLY, follower).await.unwrap().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.message, "second");
    assert!(waited < wait, "the follower slept through the append");
    // With nothing new, a bounded wait comes back empty.
    let quiet = log
        .read("t5", Some(&events[0].id), Duration::from_millis(50))
        .await
        .unwrap();
    assert!(quiet.is_empty());
}

/// With a cap of 10 events per stream, 300 appends leave the newest ones, contiguous and in
/// order (Redis trims approximately, memory exactly).
async fn check_maxlen(log: &dyn EventLog) {
    for i in 0..300u64 {
        log.append(&event("t6", None, i, EventType::StageRetry, format!("{i}")))
            .await
            .unwrap();
    }
    let kept = log.read("t6", None, Duration::ZERO).await.unwrap();
    assert!(
        (10..300).contains(&kept.len()),
        "kept {} of 300 events with maxlen 10",
        kept.len()
    );
    let numbers: Vec<u64> = kept
        .iter()
        .map(|e| e.event.message.parse().unwrap())
        .collect();
    let expected: Vec<u64> = (300 - kept.len() as u64..300).collect();
    assert_eq!(numbers, expected);
}

async fn check_cancel(signals: &dyn CancelSignals) {
    let mut notices = signals.subscribe().await.unwrap();
    assert!(!signals.is_cancelled("t7").await.unwrap());
    signals.request_cancel("t7").await.unwrap();
    assert!(signals.is_cancelled("t7").await.unwrap());
    assert!(!signals.is_cancelled("t7-other").await.unwrap());
    let notice = timeout(PROMPTLY, notices.recv()).await.unwrap().unwrap();
    assert_eq!(notice, "t7");
    // Cancelling again is harmless.
    signals.request_cancel("t7").await.unwrap();
    assert!(signals.is_cancelled("t7").await.unwrap());
}

async fn check_documents(docs: &dyn DocumentStore) {
    assert_eq!(docs.get("task:1").await.unwrap(), None);
    assert_eq!(
        docs.put("task:1", "{\"v\":1}", None).await.unwrap(),
        Some(1)
    );
    // Create-only refuses an existing document.
    assert_eq!(docs.put("task:1", "{\"v\":0}", None).await.unwrap(), None);
    let stored = docs.get("task:1").await.unwrap().unwrap();
    assert_eq!((stored.version, stored.body.as_str()), (1, "{\"v\":1}"));
    assert_eq!(
        docs.put("task:1", "{\"v\":2}", Some(1)).await.unwrap(),
        Some(2)
    );
    // A writer still at version 1 loses.
    assert_eq!(
        docs.put("task:1", "{\"v\":9}", Some(1)).await.unwrap(),
        None
    );
    // An expected version on a missing document is a conflict too.
    assert_eq!(docs.put("task:2", "{}", Some(1)).await.unwrap(), None);
    assert_eq!(docs.get("task:2").await.unwrap(), None);
    let stored = docs.get("task:1").await.unwrap().unwrap();
    assert_eq!((stored.version, stored.body.as_str()), (2, "{\"v\":2}"));
    // A document is deleted only at the version expected: how a creation is undone.
    assert!(!docs.delete("task:1", 1).await.unwrap(), "a stale version");
    assert!(docs.delete("task:1", 2).await.unwrap());
    assert_eq!(docs.get("task:1").await.unwrap(), None);
    assert!(!docs.delete("task:1", 2).await.unwrap(), "already gone");
    assert_eq!(docs.put("task:1", "{}", None).await.unwrap(), Some(1));
}

/// Ten writers increment one counter by compare-and-set, retrying on conflict: exactly ten
/// increments land.
async fn check_concurrent_cas(docs: Arc<dyn DocumentStore>) {
    assert_eq!(docs.put("counter", "0", None).await.unwrap(), Some(1));
    let writers: Vec<_> = (0..10)
        .map(|_| {
            let docs = docs.clone();
            tokio::spawn(async move {
                let mut conflicts = 0u32;
                loop {
                    let current = docs.get("counter").await.unwrap().unwrap();
                    let n: u64 = current.body.parse().unwrap();
                    let next = (n + 1).to_string();
                    if docs
                        .put("counter", &next, Some(current.version))
                        .await
                        .unwrap()
                        .is_some()
                    {
                        return conflicts;
                    }
                    conflicts += 1;
                    assert!(conflicts < 1000, "live-locked");
                }
            })
        })
        .collect();
    for writer in writers {
        timeout(PROMPTLY, writer).await.unwrap().unwrap();
    }
    let counter = docs.get("counter").await.unwrap().unwrap();
    assert_eq!(counter.body, "10");
    assert_eq!(counter.version, 11);
}

async fn check_sets(docs: &dyn DocumentStore) {
    assert!(docs.set_members("active").await.unwrap().is_empty());
    for member in ["t-b", "t-a", "t-b"] {
        docs.set_add("active", member).await.unwrap();
    }
    assert_eq!(docs.set_members("active").await.unwrap(), ["t-a", "t-b"]);
    docs.set_remove("active", "t-a").await.unwrap();
    docs.set_remove("active", "never-there").await.unwrap();
    assert_eq!(docs.set_members("active").await.unwrap(), ["t-b"]);
    assert!(docs.set_members("other").await.unwrap().is_empty());
}

async fn check_inputs(store: &dyn InputStore) {
    let diff = b"diff --git a/x b/x\n+hello\n";
    let sha = store.put(diff).await.unwrap();
    assert_eq!(sha, content_hash(diff));
    assert_eq!(store.get(&sha).await.unwrap().as_deref(), Some(&diff[..]));
    // Content-addressed: the same bytes again are the same input.
    assert_eq!(store.put(diff).await.unwrap(), sha);
    assert_eq!(store.get(&"00".repeat(32)).await.unwrap(), None);
    let binary = store.put(&[0xff, 0xfe]).await.unwrap();
    let stored = |name: &str, sha256: &str, bytes: u64| InputRef {
        name: name.into(),
        content: InputContent::Stored {
            sha256: sha256.into(),
            bytes,
        },
    };
    // Through the executor's resolver, verified by hash, in order, inline inputs as they are.
    let inputs = [
        InputRef {
            name: "title".into(),
            content: InputContent::Inline {
                text: "Fix it".into(),
            },
        },
        stored("diff", &sha, diff.len() as u64),
    ];
    let resolved = resolve(store, &inputs).await.unwrap();
    let texts: Vec<_> = resolved
        .iter()
        .map(|r| (r.name.as_str(), r.text.as_bytes()))
        .collect();
    assert_eq!(texts, [("title", &b"Fix it"[..]), ("diff", &diff[..])]);
    let missing = resolve(store, &[stored("diff", &"00".repeat(32), 1)]).await;
    assert!(
        matches!(&missing, Err(InputError::Missing { name, .. }) if name == "diff"),
        "{missing:?}"
    );
    let not_text = resolve(store, &[stored("blob", &binary, 2)]).await;
    assert!(
        matches!(&not_text, Err(InputError::NotText { name }) if name == "blob"),
        "{not_text:?}"
    );
}

fn chat_response(content: &str) -> ChatResponse {
    ChatResponse {
        content: content.into(),
        tool_calls: vec![],
        finish: FinishReason::Stop,
        usage: TokenUsage {
            input_tokens: 12,
            output_tokens: 34,
        },
        raw: "{}".into(),
    }
}

fn call_key(task: &str, stage: &str, call: &str) -> CallKey {
    CallKey {
        task_id: task.into(),
        stage_id: stage.into(),
        call: call.into(),
    }
}

/// Answers kept per call; recording a stage's result drops that stage's answers and no other's.
/// Leaves one answer of stage `t/open` behind.
async fn check_journal<S: ResponseJournal + ResultStore>(store: &S) {
    let key = call_key("t", "s", "p/abc");
    assert_eq!(ResponseJournal::get(store, &key).await.unwrap(), None);
    let first = chat_response("<SAKURA_REVIEW>…");
    store.put(&key, &first).await.unwrap();
    assert_eq!(
        ResponseJournal::get(store, &key).await.unwrap(),
        Some(first)
    );
    // A later answer for the same call replaces the earlier one.
    let second = chat_response("<SAKURA_REVIEW>again");
    store.put(&key, &second).await.unwrap();
    assert_eq!(
        ResponseJournal::get(store, &key).await.unwrap(),
        Some(second.clone())
    );
    let other_call = call_key("t", "s", "p/other");
    assert_eq!(
        ResponseJournal::get(store, &other_call).await.unwrap(),
        None
    );
    store.put(&other_call, &second).await.unwrap();
    let other_stage = call_key("t", "open", "p/abc");
    store.put(&other_stage, &second).await.unwrap();
    // A task id may hold the separator the keys use; it names another stage all the same.
    let look_alike = call_key("t:s", "x", "p/abc");
    store.put(&look_alike, &second).await.unwrap();

    store.record(&stage_result("t", "s", 10)).await.unwrap();
    for gone in [&key, &other_call] {
        assert_eq!(
            ResponseJournal::get(store, gone).await.unwrap(),
            None,
            "{gone:?} dropped with its stage's result"
        );
    }
    for kept in [&other_stage, &look_alike] {
        assert_eq!(
            ResponseJournal::get(store, kept).await.unwrap(),
            Some(second.clone()),
            "{kept:?} is another stage's"
        );
    }
}

async fn check_response_cache(cache: &dyn ResponseCache) {
    let key = "scan/p3/v1/abc";
    assert_eq!(cache.get_answer(key).await.unwrap(), None);
    let answer = |score: u64| CachedAnswer {
        value: serde_json::json!({"OVERALL_SCORE": score}),
        model: "m".into(),
        repaired: false,
        attempts: 1,
        input_tokens: 120,
        output_tokens: 30,
        stored_unix_ms: 1_000,
    };
    cache.put_answer(key, &answer(80)).await.unwrap();
    assert_eq!(cache.get_answer(key).await.unwrap(), Some(answer(80)));
    // The first answer paid for stays: a second identical stage finishing later changes nothing.
    cache.put_answer(key, &answer(10)).await.unwrap();
    assert_eq!(cache.get_answer(key).await.unwrap(), Some(answer(80)));
    assert_eq!(cache.get_answer("scan/p3/v1/other").await.unwrap(), None);
}

fn budget_account(organisation: &str) -> Account {
    Account {
        organisation: organisation.into(),
        period: "2026-12".into(),
        keep_until_unix_ms: 4_102_444_800_000,
    }
}

/// The ledger's contract (SPEC X5): reservations that would pass a limit are refused without
/// change, each holder is counted once however often it reserves or settles, and settling
/// swaps a hold for what was really spent.
async fn check_budget_ledger(ledger: Arc<dyn BudgetLedger>) {
    let acme = budget_account("acme");
    let limit = Limit {
        tokens: Some(1_000),
        micro_usd: Some(50),
    };
    assert_eq!(ledger.standing(&acme).await.unwrap(), Standing::default());
    let granted = ledger
        .reserve(&acme, "t1", Amount::new(600, 20), limit)
        .await
        .unwrap();
    let held = Standing {
        spent: Amount::default(),
        held: Amount::new(600, 20),
    };
    assert_eq!(granted, Reservation::Granted(held));
    // The same holder again (a second intake) is granted and counted once.
    assert_eq!(
        ledger
            .reserve(&acme, "t1", Amount::new(600, 20), limit)
            .await
            .unwrap(),
        Reservation::Granted(held)
    );
    // 600 held + 500 would pass 1,000 tokens; the µ$ ceiling alone would also refuse.
    assert_eq!(
        ledger
            .reserve(&acme, "t2", Amount::new(500, 1), limit)
            .await
            .unwrap(),
        Reservation::Refused(held)
    );
    assert_eq!(
        ledger
            .reserve(&acme, "t2", Amount::new(10, 31), limit)
            .await
            .unwrap(),
        Reservation::Refused(held)
    );
    // Exactly at the limit is within it.
    assert_eq!(
        ledger
            .reserve(&acme, "t3", Amount::new(400, 30), limit)
            .await
            .unwrap(),
        Reservation::Granted(Standing {
            spent: Amount::default(),
            held: Amount::new(1_000, 50),
        })
    );
    // t1 cost less than it held: the difference is free again, once.
    assert!(
        ledger
            .settle(&acme, "t1", Amount::new(250, 7))
            .await
            .unwrap()
    );
    assert!(
        !ledger
            .settle(&acme, "t1", Amount::new(250, 7))
            .await
            .unwrap()
    );
    assert!(
        !ledger
            .settle(&acme, "never", Amount::new(9, 9))
            .await
            .unwrap()
    );
    let after = Standing {
        spent: Amount::new(250, 7),
        held: Amount::new(400, 30),
    };
    assert_eq!(ledger.standing(&acme).await.unwrap(), after);
    // A settled holder reserving again (a replayed intake) changes nothing.
    assert_eq!(
        ledger
            .reserve(&acme, "t1", Amount::new(600, 20), limit)
            .await
            .unwrap(),
        Reservation::Granted(after)
    );
    // Nothing priced: zero dollars held and settled (a script must not choke on `-0`).
    let free = budget_account("free");
    ledger
        .reserve(&free, "z", Amount::new(5, 0), limit)
        .await
        .unwrap();
    assert!(ledger.settle(&free, "z", Amount::new(4, 0)).await.unwrap());
    assert_eq!(
        ledger.standing(&free).await.unwrap(),
        Standing {
            spent: Amount::new(4, 0),
            held: Amount::default(),
        }
    );
    // Without a ceiling anything is granted; other accounts are apart.
    let open = Limit::default();
    assert!(matches!(
        ledger
            .reserve(&acme, "t4", Amount::new(u64::from(u32::MAX), 0), open)
            .await
            .unwrap(),
        Reservation::Granted(_)
    ));
    assert_eq!(
        ledger.standing(&budget_account("other")).await.unwrap(),
        Standing::default()
    );
    let spent_later = Account {
        period: "2027-01".into(),
        ..acme.clone()
    };
    assert_eq!(
        ledger.standing(&spent_later).await.unwrap(),
        Standing::default()
    );

    // Replicas racing for the last room: exactly one of them gets it.
    let race = budget_account("race");
    let tight = Limit {
        tokens: Some(100),
        micro_usd: None,
    };
    let tries = (0..16).map(|i| {
        let ledger = ledger.clone();
        let race = race.clone();
        tokio::spawn(async move {
            ledger
                .reserve(&race, &format!("r{i}"), Amount::new(60, 0), tight)
                .await
                .unwrap()
        })
    });
    let mut granted = 0;
    for answer in futures_util::future::join_all(tries).await {
        if matches!(answer.unwrap(), Reservation::Granted(_)) {
            granted += 1;
        }
    }
    assert_eq!(granted, 1);
}

fn transcript(task: &str, stage: &str, attempt: u32, started: u64) -> Transcript {
    Transcript {
        task_id: task.into(),
        stage_id: stage.into(),
        stage: StageKind::Reviewer,
        attempt,
        started_unix_ms: started,
        finished_unix_ms: started + 1,
        tools_offered: vec![],
        entries: vec![],
        usage: TokenUsage::default(),
        outcome: None,
        boundary_tokens: Vec::new(),
    }
}

/// Transcripts are read back per task, oldest attempt first, one per attempt (a redelivered
/// attempt's transcript replaces the earlier one).
async fn check_transcripts(store: &dyn TranscriptStore) {
    let read = async |task: &str| store.of_task(task).await.unwrap();
    assert!(read("t8").await.is_empty());
    for (stage, attempt, started) in [
        ("reviewer-1", 2, 30),
        ("reviewer-1", 1, 10),
        ("summary", 1, 5),
    ] {
        store
            .put(transcript("t8", stage, attempt, started))
            .await
            .unwrap();
    }
    store
        .put(transcript("t8-other", "summary", 1, 1))
        .await
        .unwrap();
    let order = |transcripts: &[Transcript]| -> Vec<(String, u32, u64)> {
        transcripts
            .iter()
            .map(|t| (t.stage_id.clone(), t.attempt, t.finished_unix_ms))
            .collect()
    };
    assert_eq!(
        order(&read("t8").await),
        [
            ("summary".into(), 1, 6),
            ("reviewer-1".into(), 1, 11),
            ("reviewer-1".into(), 2, 31)
        ]
    );
    let mut again = transcript("t8", "reviewer-1", 1, 10);
    again.finished_unix_ms = 99;
    store.put(again).await.unwrap();
    assert_eq!(
        order(&read("t8").await),
        [
            ("summary".into(), 1, 6),
            ("reviewer-1".into(), 1, 99),
            ("reviewer-1".into(), 2, 31)
        ]
    );
    assert_eq!(read("t8-other").await.len(), 1);
    assert!(read("t8-none").await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The checks on both backends

/// A sealed task reads exactly as before: results, claims and inspections of redelivered
/// stages, a second record of a result, transcripts, events after any position; what is written
/// after sealing is read beside what was sealed, and sealing again gathers it. Returns what the
/// first sealing did.
async fn check_sealing<S>(store: &S) -> Sealing
where
    S: ResultStore + EventLog + TranscriptStore + TaskArchive,
{
    let task = "t-sealed";
    let stages: Vec<String> = ["triage", "review", "never-ran"].map(String::from).to_vec();
    let mut ids = Vec::new();
    for i in 0..3u64 {
        let e = event(
            task,
            Some("review"),
            i,
            EventType::StageStarted,
            format!("m{i}"),
        );
        ids.push(store.append(&e).await.unwrap());
    }
    store.put(transcript(task, "triage", 1, 10)).await.unwrap();
    store.put(transcript(task, "review", 1, 20)).await.unwrap();
    store.put(transcript(task, "review", 2, 30)).await.unwrap();
    let triage = stage_result(task, "triage", 11);
    let review = stage_result(task, "review", 31);
    store.record(&triage).await.unwrap();
    store.record(&review).await.unwrap();
    let transcripts = store.of_task(task).await.unwrap();
    let events = store.read(task, None, Duration::ZERO).await.unwrap();

    let first = store.seal(task, &stages).await.unwrap();

    assert_eq!(
        ResultStore::get(store, task, "triage").await.unwrap(),
        Some(triage.clone())
    );
    assert_eq!(
        ResultStore::get(store, task, "never-ran").await.unwrap(),
        None
    );
    match store
        .claim(task, "review", "w2", Duration::from_secs(30))
        .await
        .unwrap()
    {
        Claim::Done(r) => assert_eq!(*r, review, "a redelivery finds the sealed result"),
        other => panic!("{other:?}"),
    }
    match store.inspect(task, "triage").await.unwrap() {
        StageState::Done(r) => assert_eq!(*r, triage),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.inspect(task, "never-ran").await.unwrap(),
        StageState::Free
    );
    let mut later = stage_result(task, "review", 99);
    later.attempt = 7;
    assert_eq!(
        store.record(&later).await.unwrap(),
        review,
        "the first write still wins"
    );
    assert_eq!(store.of_task(task).await.unwrap(), transcripts);
    assert_eq!(
        store.read(task, None, Duration::ZERO).await.unwrap(),
        events
    );
    let after = store
        .read(task, Some(&ids[0]), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(after, events[1..].to_vec());

    // Written after sealing: a stage that had not run, a late event, a stale attempt.
    assert_eq!(
        store
            .claim(task, "never-ran", "w2", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Acquired
    );
    let late_result = stage_result(task, "never-ran", 40);
    assert_eq!(store.record(&late_result).await.unwrap(), late_result);
    store.release(task, "never-ran", "w2").await.unwrap();
    let late = event(task, None, 9, EventType::TaskFinished, "late");
    let late_id = store.append(&late).await.unwrap();
    let mut stale = transcript(task, "review", 2, 30);
    stale.finished_unix_ms = 77;
    store.put(stale.clone()).await.unwrap();
    let expected_transcripts = vec![transcripts[0].clone(), transcripts[1].clone(), stale];
    let read_all = async || {
        let events = store.read(task, None, Duration::ZERO).await.unwrap();
        let after_sealed = store
            .read(task, ids.last().map(String::as_str), Duration::ZERO)
            .await
            .unwrap();
        (events, after_sealed)
    };
    let check_late = async || {
        assert_eq!(
            store.of_task(task).await.unwrap(),
            expected_transcripts,
            "the later attempt replaces the sealed one"
        );
        let (all, after_sealed) = read_all().await;
        assert_eq!(all.len(), 4);
        assert_eq!(all[3].id, late_id);
        assert_eq!(
            after_sealed
                .iter()
                .map(|e| e.event.message.as_str())
                .collect::<Vec<_>>(),
            ["late"]
        );
        assert!(
            store
                .read(task, Some(&late_id), Duration::ZERO)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            ResultStore::get(store, task, "never-ran").await.unwrap(),
            Some(late_result.clone())
        );
        assert_eq!(
            ResultStore::get(store, task, "review").await.unwrap(),
            Some(review.clone())
        );
    };
    check_late().await;
    let again = store.seal(task, &stages).await.unwrap();
    assert_eq!(again, first, "sealing again does what the first did");
    check_late().await;
    first
}

#[tokio::test]
async fn memory_claims() {
    let store = MemoryStore::new();
    check_claims(&store).await;
    check_claim_expiry(&store).await;
    check_inspect(&store).await;
    check_record_first_wins(&store).await;
}

#[tokio::test]
async fn redis_claims() {
    let f = RedisFixture::new().await;
    check_claims(&f.store).await;
    check_claim_expiry(&f.store).await;
    check_inspect(&f.store).await;
    check_record_first_wins(&f.store).await;
    let ttl = f.pttl("result:{t3}:s").await;
    assert!(ttl > 0, "result TTL {ttl}");
    assert!(f.pttl("claim:{t1}:s2").await > 0);
}

#[tokio::test]
async fn memory_events() {
    let store = Arc::new(MemoryStore::new());
    check_event_order(store.as_ref()).await;
    let parked = store.clone();
    check_wait_wakes(store, async || {
        eventually("the follower to park", || async {
            parked.waiting_readers() > 0
        })
        .await;
    })
    .await;
    check_maxlen(&MemoryStore::new().with_event_maxlen(10)).await;
}

#[tokio::test]
async fn redis_events() {
    let f = RedisFixture::new().await;
    check_event_order(&f.store).await;
    let ttl = f.pttl("events:{t4}").await;
    assert!(ttl > 0, "event stream TTL {ttl}");
    let raw = f.raw.clone();
    check_wait_wakes(Arc::new(f.store.clone()), async || {
        // Some client blocked in XREAD: ours, or at worst another test's, which only makes the
        // check weaker, never wrong.
        eventually("the follower to block in XREAD", || {
            let mut raw = raw.clone();
            async move {
                let clients: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                clients.contains("cmd=xread")
            }
        })
        .await;
    })
    .await;

    let capped = RedisFixture::with(|c| c.event_stream_maxlen = 10).await;
    check_maxlen(&capped.store).await;
}

#[tokio::test]
async fn memory_cancel() {
    check_cancel(&MemoryStore::new()).await;
}

#[tokio::test]
async fn redis_cancel() {
    let f = RedisFixture::new().await;
    check_cancel(&f.store).await;
    assert!(f.pttl("cancel:{t7}").await > 0);
    // A second subscriber on the same store shares the live subscription.
    let mut again = f.store.subscribe().await.unwrap();
    f.store.request_cancel("t7-late").await.unwrap();
    assert_eq!(
        timeout(PROMPTLY, again.recv()).await.unwrap().unwrap(),
        "t7-late"
    );
}

#[tokio::test]
async fn memory_documents() {
    let store = Arc::new(MemoryStore::new());
    check_documents(store.as_ref()).await;
    check_sets(store.as_ref()).await;
    check_concurrent_cas(store).await;
}

#[tokio::test]
async fn redis_documents() {
    let f = RedisFixture::new().await;
    check_documents(&f.store).await;
    check_sets(&f.store).await;
    check_concurrent_cas(Arc::new(f.store.clone())).await;
    assert!(
        f.pttl("doc:task:{1}").await > 0,
        "a task's record carries its tag"
    );
    // A set is spread over keys of its own; its name from before is never written, but what
    // it holds is still listed and removed.
    assert_eq!(f.pttl("set:active").await, -2);
    let () = redis::cmd("SADD")
        .arg(format!("{}set:active", f.prefix))
        .arg("t-old")
        .query_async(&mut f.raw.clone())
        .await
        .unwrap();
    assert_eq!(
        f.store.set_members("active").await.unwrap(),
        ["t-b", "t-old"]
    );
    f.store.set_remove("active", "t-old").await.unwrap();
    assert_eq!(f.store.set_members("active").await.unwrap(), ["t-b"]);
    assert_eq!(f.pttl("set:active").await, -2);

    // A record written before hash tags reads on, and its next write moves it.
    let () = redis::cmd("HSET")
        .arg(format!("{}doc:task:old", f.prefix))
        .arg("v")
        .arg("3")
        .arg("body")
        .arg("{\"state\":\"running\"}")
        .query_async(&mut f.raw.clone())
        .await
        .unwrap();
    let old = DocumentStore::get(&f.store, "task:old")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (old.version, old.body.as_str()),
        (3, "{\"state\":\"running\"}")
    );
    assert_eq!(
        DocumentStore::put(&f.store, "task:old", "{}", None)
            .await
            .unwrap(),
        None,
        "it exists"
    );
    assert_eq!(
        DocumentStore::put(&f.store, "task:old", "{}", Some(2))
            .await
            .unwrap(),
        None,
        "stale"
    );
    assert_eq!(
        DocumentStore::put(&f.store, "task:old", "{}", Some(3))
            .await
            .unwrap(),
        Some(4)
    );
    assert_eq!(f.pttl("doc:task:old").await, -2, "moved to its tagged name");
    assert_eq!(
        DocumentStore::get(&f.store, "task:old")
            .await
            .unwrap()
            .unwrap()
            .version,
        4
    );
}

#[tokio::test]
async fn memory_sealing_changes_nothing() {
    assert_eq!(check_sealing(&MemoryStore::new()).await, Sealing::Nothing);
}

#[tokio::test]
async fn redis_sealing_gathers_a_task_into_one_key() {
    let f = RedisFixture::new().await;
    assert_eq!(check_sealing(&f.store).await, Sealing::Sealed);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*t-sealed*", f.prefix))
        .query_async(&mut f.raw.clone())
        .await
        .unwrap();
    let mut keys: Vec<&str> = keys
        .iter()
        .map(|k| k.trim_start_matches(&f.prefix))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["archive:{t-sealed}"], "every record gathered");
    assert!(
        f.pttl("archive:{t-sealed}").await > 0,
        "the archive expires"
    );
    let stored = f.raw_get("archive:{t-sealed}").await;
    assert_eq!(&stored[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
}

#[tokio::test]
async fn memory_executor_stores() {
    let store = MemoryStore::new();
    check_inputs(&store).await;
    check_journal(&store).await;
    check_response_cache(&store).await;
    check_transcripts(&store).await;
}

/// Heartbeat leases: alive while beaten, a lapsed or left lease is nobody's, holders apart.
async fn check_liveness(leases: Arc<dyn Liveness>) {
    assert!(!leases.alive("replica-a").await.unwrap());
    leases
        .beat("replica-a", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(leases.alive("replica-a").await.unwrap());
    assert!(!leases.alive("replica-b").await.unwrap(), "holders apart");
    leases.leave("replica-a").await.unwrap();
    assert!(!leases.alive("replica-a").await.unwrap(), "left");

    // Beats stop: the lease lapses by itself.
    leases
        .beat("replica-b", Duration::from_millis(150))
        .await
        .unwrap();
    assert!(leases.alive("replica-b").await.unwrap());
    eventually("the lease to lapse", || {
        let leases = leases.clone();
        async move { !leases.alive("replica-b").await.unwrap() }
    })
    .await;
    // A later beat brings it back.
    leases
        .beat("replica-b", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(leases.alive("replica-b").await.unwrap());
}

#[tokio::test]
async fn memory_liveness() {
    check_liveness(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn redis_liveness() {
    let f = RedisFixture::new().await;
    check_liveness(Arc::new(f.store.clone())).await;
    let ttl = f.pttl("alive:replica-b").await;
    assert!(ttl > 0, "a lease expires, TTL {ttl}");
}

#[tokio::test]
async fn memory_budget_ledger() {
    check_budget_ledger(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn redis_budget_ledger() {
    let f = RedisFixture::new().await;
    check_budget_ledger(Arc::new(f.store.clone())).await;
    let ttl = f.pttl("budget:acme:2026-12").await;
    assert!(ttl > 0, "a budget account expires, TTL {ttl}");
}

#[tokio::test]
async fn redis_executor_stores() {
    let f = RedisFixture::new().await;
    check_inputs(&f.store).await;
    check_journal(&f.store).await;
    check_response_cache(&f.store).await;
    assert!(
        f.pttl("cache:scan/p3/v1/abc").await > 0,
        "cached answers expire"
    );
    check_transcripts(&f.store).await;
    let diff = content_hash(b"diff --git a/x b/x\n+hello\n");
    for key in [
        format!("input:{diff}"),
        "journal:{t}:open".to_owned(),
        "transcript:{t8}:reviewer-1:2".to_owned(),
        "transcripts:{t8}".to_owned(),
    ] {
        let ttl = f.pttl(&key).await;
        assert!(ttl > 0, "{key} TTL {ttl}");
    }
}

// ---------------------------------------------------------------------------------------------
// Redis only: stored garbage, an unreachable server

/// A transcript is stored compressed, its long texts once by content hash for every transcript
/// that holds them (with the transcripts' TTL); one stored as plain JSON (before compression)
/// still reads.
#[tokio::test]
async fn redis_transcripts_share_long_texts_are_compressed_and_plain_ones_still_read() {
    let f = RedisFixture::new().await;
    // Each attempt's prompt names its own random boundary token (P7); the rest is the same.
    let contract = |token: &str| {
        format!("Untrusted text is fenced by {token}. ")
            + &"Answer with exactly one JSON object that follows the contract. ".repeat(200)
            + &format!("<<<UNTRUSTED diff {token}>>>")
    };
    let with_prompt = |task: &str, token: &str| {
        let mut t = transcript(task, "summary", 1, 5);
        t.boundary_tokens = vec![token.to_owned()];
        // Every attempt of a stage kind offers the same tools, described at length.
        t.tools_offered = ["read_file", "search", "list_dir"]
            .map(|name| verdict_proto::chat::ToolDefinition {
                name: name.into(),
                description: format!("{name}: ").repeat(60),
                parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            })
            .to_vec();
        t.entries = vec![verdict_proto::transcript::TranscriptEntry::Call {
            seq: 1,
            purpose: verdict_proto::transcript::CallPurpose::Turn,
            provider: "local".into(),
            model: "m".into(),
            new_messages: vec![
                verdict_proto::chat::Message::system(contract(token)),
                verdict_proto::chat::Message::user(format!("the diff of {task}")),
            ],
            tools: vec![],
            temperature: None,
            response: Some(chat_response("{}")),
            error: None,
            latency_ms: 3,
            reused: false,
        }];
        t
    };
    let t = with_prompt("t9", "AAAAAAAAAAAAAAAAAAAAAAAA");
    let other = with_prompt("t10", "BBBBBBBBBBBBBBBBBBBBBBBB");
    TranscriptStore::put(&f.store, t.clone()).await.unwrap();
    TranscriptStore::put(&f.store, other.clone()).await.unwrap();
    let stored = f.raw_get("transcript:{t9}:summary:1").await;
    assert_eq!(&stored[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    assert!(
        stored.len() < 600,
        "the contract is not in it: {} bytes",
        stored.len()
    );
    let shared_keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}text:*", f.prefix))
        .query_async(&mut f.raw.clone())
        .await
        .unwrap();
    assert_eq!(
        shared_keys.len(),
        2,
        "the contract and the tools, one copy for both tasks whatever their tokens: {shared_keys:?}"
    );
    for key in &shared_keys {
        let text_key = key.trim_start_matches(&f.prefix).to_owned();
        let text = f.raw_get(&text_key).await;
        assert!(
            !text.is_empty() && text.len() < contract("").len() / 10,
            "{}",
            text.len()
        );
        assert!(f.pttl(&text_key).await > 0, "shared texts expire");
    }
    assert_eq!(f.store.of_task("t9").await.unwrap(), vec![t.clone()]);
    assert_eq!(f.store.of_task("t10").await.unwrap(), vec![other]);

    let mut legacy = transcript("t9", "reviewer-1", 1, 7);
    legacy.finished_unix_ms = 42;
    f.raw_set(
        "transcript:{t9}:reviewer-1:1",
        &serde_json::to_string(&legacy).unwrap(),
    )
    .await;
    let () = redis::cmd("SADD")
        .arg(format!("{}transcripts:{{t9}}", f.prefix))
        .arg(format!("{}transcript:{{t9}}:reviewer-1:1", f.prefix))
        .query_async(&mut f.raw.clone())
        .await
        .unwrap();
    assert_eq!(f.store.of_task("t9").await.unwrap(), vec![t, legacy]);
}

#[tokio::test]
async fn redis_garbage_is_reported_as_corrupt_not_unavailable() {
    let f = RedisFixture::new().await;
    f.raw_set("result:{t9}:s", "not json").await;
    let e = ResultStore::get(&f.store, "t9", "s").await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { key, .. } if key.ends_with("result:{t9}:s")),
        "{e}"
    );
    assert!(!e.is_retryable());
    // A recorded-but-unreadable result must not let a claim through.
    let claim = f
        .store
        .claim("t9", "s", "a", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(claim, StoreError::Corrupt { .. }), "{claim}");
    // A key of the wrong type.
    f.raw_set("events:{t9}", "not a stream").await;
    let e = f.store.read("t9", None, Duration::ZERO).await.unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    let e = f
        .store
        .read("t9", Some("$"), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
}

#[tokio::test]
async fn redis_unreachable_at_start_is_unavailable_promptly() {
    let port = free_port();
    let mut config = RedisConfig::new(format!("redis://:hunter2@127.0.0.1:{port}"));
    config.command_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let e = RedisStore::connect(config).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(started.elapsed() < PROMPTLY);
}

// ---------------------------------------------------------------------------------------------
// Outage: a private redis-server killed and restarted under a live store

/// Runs `op`, asserting it fails as `Unavailable` (not a panic, not a hang) within `PROMPTLY`.
async fn assert_unavailable<T: std::fmt::Debug>(
    what: &str,
    op: impl Future<Output = Result<T, StoreError>>,
) {
    let started = Instant::now();
    let outcome = timeout(PROMPTLY, op).await;
    let Ok(result) = outcome else {
        panic!("{what} hung during the outage");
    };
    match result {
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("{what} during the outage: expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < PROMPTLY);
}

#[tokio::test]
async fn redis_outage_is_survived_without_recreating_the_store() {
    let port = free_port();
    let server = PrivateRedis::start(port).await;
    let mut config = RedisConfig::new(format!("redis://127.0.0.1:{port}"));
    config.prefix = "outage:".into();
    config.command_timeout = Duration::from_millis(500);
    let store = RedisStore::connect(config).await.unwrap();
    let ttl = Duration::from_secs(60);

    let mut notices = store.subscribe().await.unwrap();
    assert_eq!(
        store.claim("t", "s", "a", ttl).await.unwrap(),
        Claim::Acquired
    );
    store
        .append(&event("t", None, 1, EventType::TaskStarted, "before"))
        .await
        .unwrap();
    // A follower parked in XREAD when the server dies.
    let follower = {
        let store = store.clone();
        tokio::spawn(async move { store.read("t-follow", None, Duration::from_secs(60)).await })
    };

    server.kill();

    // All at once: they share one reconnecting connection and must all fail cleanly.
    let result = stage_result("t", "s", 1);
    let during = event("t", None, 2, EventType::StageStarted, "during");
    tokio::join!(
        assert_unavailable("ping", store.ping()),
        assert_unavailable("claim", store.claim("t", "s", "a", ttl)),
        assert_unavailable("record", store.record(&result)),
        assert_unavailable("get", ResultStore::get(&store, "t", "s")),
        assert_unavailable("append", store.append(&during)),
        assert_unavailable("read", store.read("t", None, Duration::ZERO)),
        assert_unavailable("follow", store.read("t", None, Duration::from_secs(1))),
        assert_unavailable("put", DocumentStore::put(&store, "doc", "{}", None)),
        assert_unavailable("cancel", store.request_cancel("t")),
    );
    let parked = timeout(PROMPTLY, follower).await.unwrap().unwrap();
    assert!(
        matches!(parked, Err(StoreError::Unavailable(_))),
        "{parked:?}"
    );
    // The best-effort sink neither panics nor hangs.
    timeout(
        PROMPTLY,
        store.emit(event("t", None, 3, EventType::StageRetry, "lost")),
    )
    .await
    .unwrap();

    let _server = PrivateRedis::start(port).await;

    eventually("the store to reconnect", || async {
        store.ping().await.is_ok()
    })
    .await;
    // The restarted server has no data (no persistence): everything starts over, and works.
    assert_eq!(
        store.claim("t", "s", "b", ttl).await.unwrap(),
        Claim::Acquired
    );
    let id = store
        .append(&event("t", None, 4, EventType::StageStarted, "after"))
        .await
        .unwrap();
    let events = store.read("t", None, Duration::ZERO).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, id);
    assert_eq!(
        DocumentStore::put(&store, "doc", "{}", None).await.unwrap(),
        Some(1)
    );
    // The subscription from before the outage is re-established in the background.
    // Notices published before it is back are missed by design (the mark is what counts), so
    // keep cancelling until one arrives.
    let deadline = Instant::now() + PROMPTLY;
    loop {
        store.request_cancel("t-after").await.unwrap();
        if let Ok(Ok(id)) = timeout(Duration::from_millis(200), notices.recv()).await {
            assert_eq!(id, "t-after");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancel subscription did not come back"
        );
    }
}

/// A Redis near its `maxmemory` reports pressure (new work should wait) before it refuses
/// writes; at the limit a write is `Full`, naming the fix, not an outage; with room again both
/// clear. On a private server whose limit the test sets.
#[tokio::test]
async fn redis_near_and_at_maxmemory_is_pressure_then_full_then_clear() {
    let port = free_port();
    let _server = PrivateRedis::start(port).await;
    let url = format!("redis://127.0.0.1:{port}");
    let mut config = RedisConfig::new(url.clone());
    config.prefix = "full:".into();
    config.intake_memory_percent = 80;
    let store = RedisStore::connect(config).await.unwrap();
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let used = |info: String| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await
        .unwrap();
    let limit = used(info) + 4 * 1024 * 1024;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store.pressure(),
        None,
        "nothing measured yet, nothing held back"
    );

    // Fill it with distinct stage inputs (incompressible) until a write is refused.
    let mut full = None;
    for _ in 0..4096 {
        let bytes: Vec<u8> = (0..64 * 1024).map(|_| rand::random::<u8>()).collect();
        if let Err(e) = InputStore::put(&store, &bytes).await {
            full = Some(e.to_string());
            break;
        }
    }
    let full = full.expect("a write refused at maxmemory");
    assert!(
        full.contains("maxmemory") && full.contains("noeviction"),
        "{full}"
    );
    eventually("the store to report pressure", || async {
        store.pressure().is_some()
    })
    .await;
    let pressure = store.pressure().unwrap();
    assert!(
        pressure.contains("redis.intake_memory_percent"),
        "{pressure}"
    );
    // Reads still work when full.
    assert!(ResultStore::get(&store, "t", "s").await.unwrap().is_none());

    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    eventually("the pressure to clear", || async {
        store.pressure().is_none()
    })
    .await;
    store.record(&stage_result("t", "s", 1)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster and Sentinel: the same checks on deployments of their own, and a primary killed
// under a store in use

/// Every conformance check on `store`: claims, results, events (ordered, capped, followers
/// woken), cancels, documents and sets, inputs, the journal, the cache, transcripts, leases,
/// budgets and sealing.
async fn check_everything_on(store: &RedisStore, until_parked: impl AsyncFn()) {
    check_claims(store).await;
    check_claim_expiry(store).await;
    check_inspect(store).await;
    check_record_first_wins(store).await;
    check_event_order(store).await;
    check_wait_wakes(Arc::new(store.clone()), until_parked).await;
    check_cancel(store).await;
    check_documents(store).await;
    check_sets(store).await;
    check_concurrent_cas(Arc::new(store.clone())).await;
    check_inputs(store).await;
    check_journal(store).await;
    check_response_cache(store).await;
    check_transcripts(store).await;
    check_liveness(Arc::new(store.clone())).await;
    check_budget_ledger(Arc::new(store.clone())).await;
    assert_eq!(check_sealing(store).await, Sealing::Sealed);
    let mut capped = store.config().clone();
    capped.event_stream_maxlen = 10;
    check_maxlen(&RedisStore::connect(capped).await.unwrap()).await;
}

/// Waits until some client on one of `ports` is blocked in `XREAD` (the follower of
/// `check_wait_wakes`; the deployment is this test's alone).
async fn until_xread_on(ports: &[u16]) {
    eventually("the follower to block in XREAD", || async {
        for port in ports {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
                continue;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                continue;
            };
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if clients.contains("cmd=xread") {
                return true;
            }
        }
        false
    })
    .await;
}

/// Records a result for task after task until `stop` says so, and returns the tasks whose
/// record was acknowledged and how many were refused (a primary down) on the way.
async fn record_until(
    store: &RedisStore,
    phase: &str,
    stop: impl Fn(usize) -> bool,
) -> (Vec<String>, usize) {
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    let mut i = 0u64;
    while !stop(acknowledged.len()) {
        let task = format!("{phase}-{i}");
        match store.record(&stage_result(&task, "s", i)).await {
            Ok(_) => acknowledged.push(task),
            Err(e) => {
                assert!(e.is_retryable(), "a failover is an outage, not {e}");
                refused += 1;
            }
        }
        i += 1;
    }
    (acknowledged, refused)
}

/// Waits until every replica of the primary on `port` has acknowledged all it was sent
/// (`INFO replication`: each replica's `offset=` equals `master_repl_offset`).
async fn await_replicated(port: u16) {
    eventually("the replicas to catch up", || async {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
            return false;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return false;
        };
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let field = |line: &str, name: &str| {
            line.split([',', ':'])
                .find_map(|part| part.strip_prefix(name).map(str::to_owned))
        };
        let primary = info.lines().find_map(|l| {
            l.strip_prefix("master_repl_offset:")
                .map(str::trim)
                .map(str::to_owned)
        });
        let replicas: Vec<String> = info
            .lines()
            .filter(|l| l.starts_with("slave"))
            .filter_map(|l| field(l, "offset="))
            .collect();
        !replicas.is_empty() && replicas.iter().all(|r| Some(r) == primary.as_ref())
    })
    .await;
}

/// Every acknowledged result reads back.
async fn assert_all_recorded(store: &RedisStore, tasks: &[String]) {
    for task in tasks {
        let state = store.inspect(task, "s").await.unwrap();
        assert!(matches!(state, StageState::Done(_)), "{task}: {state:?}");
    }
}

/// A private Redis Cluster in `dir`, and a store on it with `prefix`. As docs/deploy.md asks,
/// the other primaries serve their slots while one fails over.
async fn cluster_store(dir: &std::path::Path, prefix: &str) -> (RedisCluster, RedisStore) {
    let cluster = RedisCluster::start_with(
        &dir.join("data"),
        &dir.join("logs"),
        &["--cluster-require-full-coverage", "no"],
    )
    .await;
    let mut config = RedisConfig::new(cluster.url());
    config.prefix = prefix.to_owned();
    let store = RedisStore::connect(config).await.unwrap();
    (cluster, store)
}

#[tokio::test]
async fn redis_cluster_conformance_and_a_killed_primary() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, store) = cluster_store(dir.path(), "cluster-test:").await;
    let ports = cluster.node_ports();
    check_everything_on(&store, async || until_xread_on(&ports).await).await;

    // Every key the store writes for one task, its record included, is in one slot.
    let task = "t-slot";
    store
        .claim(task, "s", "w", Duration::from_secs(60))
        .await
        .unwrap();
    store.record(&stage_result(task, "s", 1)).await.unwrap();
    store
        .append(&event(task, None, 1, EventType::TaskStarted, "started"))
        .await
        .unwrap();
    TranscriptStore::put(&store, transcript(task, "s", 1, 1))
        .await
        .unwrap();
    DocumentStore::put(&store, &format!("task:{task}"), "{}", None)
        .await
        .unwrap();
    let mut slots = std::collections::BTreeMap::new();
    for port in cluster.primaries().await {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{task}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        for key in keys {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            slots.insert(key, slot);
        }
    }
    assert!(
        slots.keys().any(|k| k.contains(":doc:task:")) && slots.len() >= 5,
        "{slots:?}"
    );
    let distinct: std::collections::BTreeSet<u16> = slots.values().copied().collect();
    assert_eq!(distinct.len(), 1, "one slot for the task's keys: {slots:?}");

    // A primary killed while results are being recorded: the store answers "unavailable" while
    // its slots have no primary, then carries on with the same connections once a replica took
    // over, and nothing it acknowledged is gone.
    let (before, _) = record_until(&store, "before", |n| n >= 50).await;
    let victim = cluster
        .primary_for_key("cluster-test:result:{before-0}:s")
        .await;
    // Replication is asynchronous: what the primary acknowledged a moment before dying may be
    // lost with it (the sweeper's to recover). Here the kill waits for the replica to have it.
    await_replicated(victim).await;
    cluster.kill(victim).await;
    let (during, _) = record_until(&store, "during", |n| n >= 50).await;
    // A set is spread over every primary: while one is down, every add still lands, those
    // whose own shard is on it in another.
    let members: Vec<String> = (0..40).map(|i| format!("m-{i:02}")).collect();
    for member in &members {
        store.set_add("during-failover", member).await.unwrap();
    }
    cluster.await_failover(victim).await;
    assert_eq!(store.set_members("during-failover").await.unwrap(), members);
    for member in &members {
        store.set_remove("during-failover", member).await.unwrap();
    }
    assert!(
        store
            .set_members("during-failover")
            .await
            .unwrap()
            .is_empty()
    );
    let (after, refused) = record_until(&store, "after", |n| n >= 50).await;
    assert_eq!(refused, 0, "every primary serves again after the failover");
    assert_all_recorded(&store, &before).await;
    assert_all_recorded(&store, &during).await;
    assert_all_recorded(&store, &after).await;
    // The cancellation feed follows too: a notice published now reaches a subscriber.
    let mut notices = store.subscribe().await.unwrap();
    store.request_cancel("after-failover").await.unwrap();
    assert_eq!(
        timeout(PROMPTLY, notices.recv()).await.unwrap().unwrap(),
        "after-failover"
    );
    assert!(store.purge().await.unwrap() >= 150);
    for port in cluster.primaries().await {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let left: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(left, 0, "purge reaches every primary, 127.0.0.1:{port} too");
    }
}

/// A primary that hangs — its connections open, nothing answered, as a stuck host or a cut-off
/// network leaves it — gets no reply from the store, whose shared connection still routes its
/// slots there; once the cluster has failed it over, the store writes those slots again on the
/// promoted replica, with the same store (the connection is replaced after a command got no
/// answer), and nothing it acknowledged is gone.
#[tokio::test]
async fn redis_cluster_a_hung_primary_is_failed_over_under_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, store) = cluster_store(dir.path(), "hung-test:").await;
    let (before, _) = record_until(&store, "before", |n| n >= 30).await;
    let victim = cluster
        .primary_for_key("hung-test:result:{before-0}:s")
        .await;
    await_replicated(victim).await;

    cluster.hang(victim).await;
    let on_victim = stage_result("before-0", "after-hang", 2);
    cluster.await_failover(victim).await;

    eventually(
        "the store to write the hung primary's slots again",
        || async { store.record(&on_victim).await.is_ok() },
    )
    .await;
    let (after, refused) = record_until(&store, "after", |n| n >= 30).await;
    assert_eq!(refused, 0, "every primary serves again after the failover");
    assert_all_recorded(&store, &before).await;
    assert_all_recorded(&store, &after).await;
    cluster.resume(victim).await;
}

#[tokio::test]
async fn redis_sentinel_conformance_and_a_failover() {
    let dir = tempfile::tempdir().unwrap();
    let mut sentinel =
        RedisSentinel::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    let mut config = RedisConfig::new(sentinel.url());
    config.prefix = "sentinel-test:".to_owned();
    let store = RedisStore::connect(config).await.unwrap();
    let ports = sentinel.data_ports();
    check_everything_on(&store, async || until_xread_on(&ports).await).await;

    let (before, _) = record_until(&store, "before", |n| n >= 50).await;
    await_replicated(sentinel.primary_port().await).await;
    sentinel.kill_primary().await;
    let (during, _) = record_until(&store, "during", |n| n >= 20).await;
    sentinel.await_failover().await;
    let (after, refused) = record_until(&store, "after", |n| n >= 50).await;
    assert_eq!(refused, 0, "the new primary serves every command");
    assert_all_recorded(&store, &before).await;
    assert_all_recorded(&store, &during).await;
    assert_all_recorded(&store, &after).await;
}
