//! One conformance suite for the pool's rate limiter: each behaviour is one check over
//! [`RateLimiter`], run on `MemoryRateLimiter` (in tokio's paused time, so it is exact) and on
//! `RedisStore` against the real Redis (127.0.0.1:6379, real time, so the checks allow for
//! scheduling delays but never for a limit exceeded). On both: a limit holds over a window with
//! many callers on two handles (two processes' views), costs are taken as asked, keys and buckets
//! are independent, a pause blocks every caller until it ends and is never shortened, and a wait
//! spends nothing in any bucket. Redis-only: idle keys expire, and a private `redis-server`
//! killed and restarted under running callers makes them wait, then continue, never exceeding
//! the limit.
//!
//! Every Redis test uses a key prefix of its own; every key the limiter writes expires by itself
//! within seconds, so nothing needs cleaning up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use verdict_backends::ratelimit::memory::MemoryRateLimiter;
use verdict_backends::ratelimit::{
    Bucket, Demand, Limit, LimitError, MemorySlots, Permit, RateLimiter, SlotLimiter,
};
use verdict_backends::store::redis::{RedisConfig, RedisStore};

use support::redis::{PrivateRedis, free_port};
use support::wait::{PROMPTLY, eventually, within};

const REDIS_URL: &str = "redis://127.0.0.1:6379";

// ---------------------------------------------------------------------------------------------
// Fixtures

/// Two handles on the same limits: for memory one value, for Redis two stores with their own
/// connections (two workers' views).
struct Handles {
    a: Arc<dyn RateLimiter>,
    b: Arc<dyn RateLimiter>,
}

fn memory() -> Handles {
    let limiter: Arc<dyn RateLimiter> = Arc::new(MemoryRateLimiter::new());
    Handles {
        a: limiter.clone(),
        b: limiter,
    }
}

async fn redis_store(url: &str, prefix: &str) -> RedisStore {
    let mut config = RedisConfig::new(url);
    config.prefix = prefix.to_owned();
    config.command_timeout = Duration::from_millis(500);
    RedisStore::connect(config).await.unwrap()
}

fn fresh_prefix() -> String {
    format!("test:{:016x}:", rand::random::<u64>())
}

async fn redis() -> Handles {
    let prefix = fresh_prefix();
    Handles {
        a: Arc::new(redis_store(REDIS_URL, &prefix).await),
        b: Arc::new(redis_store(REDIS_URL, &prefix).await),
    }
}

fn requests(limit: Limit, cost: u64) -> Demand {
    Demand {
        bucket: Bucket::Requests,
        limit,
        cost,
    }
}

fn tokens(limit: Limit, cost: u64) -> Demand {
    Demand {
        bucket: Bucket::Tokens,
        limit,
        cost,
    }
}

fn per_second(count: u64, burst: u64) -> Limit {
    Limit {
        count,
        period: Duration::from_secs(1),
        burst,
    }
}

/// Waits as told until the demands are granted; returns when (after `since`) that was.
async fn acquire_waiting(
    limiter: &dyn RateLimiter,
    key: &str,
    demands: &[Demand],
    since: Instant,
) -> Duration {
    loop {
        match limiter.acquire(key, demands).await.unwrap() {
            Permit::Granted => return since.elapsed(),
            Permit::Wait(d) => sleep(d).await,
        }
    }
}

fn wait_of(permit: Permit) -> Duration {
    match permit {
        Permit::Wait(d) => d,
        Permit::Granted => panic!("expected a wait, got a grant"),
    }
}

// ---------------------------------------------------------------------------------------------
// Behavioural checks, one per concern, for any limiter

/// Six callers on two handles demand far more than 20 per second, for 1.5 s: at most
/// 1.5 × 20 + the burst of 2 are granted, and not much fewer (the limit is used, not only held).
async fn check_limit_holds_over_a_window(h: &Handles) {
    let limit = per_second(20, 2);
    let window = Duration::from_millis(1500);
    let start = Instant::now();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut callers = Vec::new();
    for i in 0..6 {
        let limiter = if i % 2 == 0 { &h.a } else { &h.b }.clone();
        let grants = grants.clone();
        callers.push(tokio::spawn(async move {
            while start.elapsed() < window {
                match limiter
                    .acquire("window", &[requests(limit, 1)])
                    .await
                    .unwrap()
                {
                    Permit::Granted => grants.lock().unwrap().push(start.elapsed()),
                    Permit::Wait(d) => sleep(d).await,
                }
            }
        }));
    }
    for c in callers {
        within("the callers", c).await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let allowed = 30 + 2;
    assert!(
        grants.len() <= allowed,
        "{} granted in {window:?}, more than {allowed}: {grants:?}",
        grants.len()
    );
    assert!(
        grants.len() >= 24,
        "only {} granted in {window:?} of a 20/s limit: {grants:?}",
        grants.len()
    );
}

/// A cost takes that many units: 60 of 100, then 60 more must wait for 20 units to come back
/// (0.2 s), yet 40 fit at once — the refused 60 took nothing. A cost above the burst can never
/// be granted and is refused.
async fn check_costs(h: &Handles) {
    let limit = per_second(100, 100);
    let limiter = h.a.as_ref();
    assert_eq!(
        limiter
            .acquire("costs", &[tokens(limit, 60)])
            .await
            .unwrap(),
        Permit::Granted
    );
    let wait = wait_of(
        limiter
            .acquire("costs", &[tokens(limit, 60)])
            .await
            .unwrap(),
    );
    assert!(
        wait > Duration::from_millis(100) && wait <= Duration::from_millis(200),
        "{wait:?}"
    );
    assert_eq!(
        h.b.acquire("costs", &[tokens(limit, 40)]).await.unwrap(),
        Permit::Granted
    );
    // Now empty: a single unit waits its 10 ms.
    let wait = wait_of(limiter.acquire("costs", &[tokens(limit, 1)]).await.unwrap());
    assert!(wait <= Duration::from_millis(10), "{wait:?}");

    let e = limiter
        .acquire("costs", &[tokens(limit, 101)])
        .await
        .unwrap_err();
    assert!(matches!(e, LimitError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("exceeds the burst"), "{e}");
}

/// Another key, or another bucket of the same key, is not touched by a spent one.
async fn check_keys_and_buckets_are_independent(h: &Handles) {
    let slow = Limit {
        count: 1,
        period: Duration::from_secs(10),
        burst: 1,
    };
    let limiter = h.a.as_ref();
    assert_eq!(
        limiter.acquire("k1", &[requests(slow, 1)]).await.unwrap(),
        Permit::Granted
    );
    let wait = wait_of(h.b.acquire("k1", &[requests(slow, 1)]).await.unwrap());
    assert!(
        wait > Duration::from_secs(9) && wait <= Duration::from_secs(10),
        "{wait:?}"
    );
    assert_eq!(
        limiter.acquire("k2", &[requests(slow, 1)]).await.unwrap(),
        Permit::Granted
    );
    assert_eq!(
        limiter.acquire("k1", &[tokens(slow, 1)]).await.unwrap(),
        Permit::Granted
    );
}

/// A pause set through one handle makes every caller, on every handle, wait until it ends; other
/// keys go on; a shorter pause later does not shorten it.
async fn check_pause_blocks_every_caller_until_it_ends(h: &Handles) {
    let limit = per_second(100, 100);
    let pause = Duration::from_millis(400);
    let start = Instant::now();
    h.a.pause("paused", pause).await.unwrap();
    for limiter in [&h.a, &h.b] {
        let wait = wait_of(
            limiter
                .acquire("paused", &[requests(limit, 1)])
                .await
                .unwrap(),
        );
        assert!(
            wait > Duration::from_millis(300) && wait <= pause,
            "{wait:?}"
        );
    }
    assert_eq!(
        h.b.acquire("other", &[requests(limit, 1)]).await.unwrap(),
        Permit::Granted
    );
    h.b.pause("paused", Duration::from_millis(50))
        .await
        .unwrap();
    let wait = wait_of(h.a.acquire("paused", &[requests(limit, 1)]).await.unwrap());
    assert!(wait > Duration::from_millis(250), "shortened to {wait:?}");

    let callers: Vec<_> = (0..4)
        .map(|i| {
            let limiter = if i % 2 == 0 { &h.a } else { &h.b }.clone();
            tokio::spawn(async move {
                acquire_waiting(limiter.as_ref(), "paused", &[requests(limit, 1)], start).await
            })
        })
        .collect();
    for caller in callers {
        let granted_at = within("a paused caller", caller).await.unwrap();
        // 5 ms for the store's millisecond rounding of what is left of the pause.
        assert!(
            granted_at >= pause - Duration::from_millis(5),
            "granted {granted_at:?} after a {pause:?} pause began"
        );
    }
}

/// Demands are taken all or nothing: while the tokens do not fit, the request bucket is not
/// charged either, however often a caller is told to wait.
async fn check_wait_spends_nothing(h: &Handles) {
    let period = Duration::from_secs(10);
    let rpm = Limit {
        count: 10,
        period,
        burst: 10,
    };
    let tpm = Limit {
        count: 100,
        period,
        burst: 100,
    };
    let limiter = h.a.as_ref();
    assert_eq!(
        limiter
            .acquire("all-or-nothing", &[requests(rpm, 1), tokens(tpm, 100)])
            .await
            .unwrap(),
        Permit::Granted
    );
    for _ in 0..5 {
        let permit = limiter
            .acquire("all-or-nothing", &[requests(rpm, 1), tokens(tpm, 50)])
            .await
            .unwrap();
        assert!(
            wait_of(permit) > Duration::from_secs(4),
            "the tokens come back at 1 per 100 ms"
        );
    }
    // Nine requests were left after the first grant, and nine still are.
    assert_eq!(
        h.b.acquire("all-or-nothing", &[requests(rpm, 9)])
            .await
            .unwrap(),
        Permit::Granted
    );
    wait_of(
        limiter
            .acquire("all-or-nothing", &[requests(rpm, 1)])
            .await
            .unwrap(),
    );
}

async fn check_all(h: &Handles) {
    check_limit_holds_over_a_window(h).await;
    check_costs(h).await;
    check_keys_and_buckets_are_independent(h).await;
    check_pause_blocks_every_caller_until_it_ends(h).await;
    check_wait_spends_nothing(h).await;
}

#[tokio::test(start_paused = true)]
async fn memory_limiter() {
    check_all(&memory()).await;
}

#[tokio::test]
async fn redis_limiter() {
    check_all(&redis().await).await;
}

/// Over ten virtual minutes the memory limiter grants exactly the configured rate plus its
/// burst: the arithmetic itself does not drift.
#[tokio::test(start_paused = true)]
async fn memory_limiter_holds_a_per_minute_limit_exactly_over_ten_minutes() {
    let limiter = MemoryRateLimiter::new();
    let limit = Limit::per_minute(7, 1);
    let start = Instant::now();
    let mut granted = 0;
    while acquire_waiting(&limiter, "minutes", &[requests(limit, 1)], start).await
        < Duration::from_secs(600)
    {
        granted += 1;
    }
    // One at 0 s, then one every 60/7 s: the 71st is due at exactly 600 s, past the window.
    assert_eq!(granted, 70);
}

// ---------------------------------------------------------------------------------------------
// Redis only

#[tokio::test]
async fn redis_keys_expire_when_their_buckets_are_idle() {
    let prefix = fresh_prefix();
    let store = redis_store(REDIS_URL, &prefix).await;
    let limit = Limit {
        count: 1,
        period: Duration::from_millis(300),
        burst: 1,
    };
    assert_eq!(
        store.acquire("idle", &[requests(limit, 1)]).await.unwrap(),
        Permit::Granted
    );
    store
        .pause("idle", Duration::from_millis(200))
        .await
        .unwrap();
    let mut raw = redis::Client::open(REDIS_URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for (key, most) in [("limit:{idle}:requests", 300), ("pause:{idle}", 200)] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("{prefix}{key}"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(pttl > 0 && pttl <= most, "{key}: {pttl}");
    }
    eventually("the idle keys to expire", || {
        let mut raw = raw.clone();
        let pattern = format!("{prefix}*");
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut raw)
                .await
                .unwrap();
            keys.is_empty()
        }
    })
    .await;
}

/// What one caller saw, and when.
#[derive(Debug, Clone, Copy)]
enum Seen {
    Granted(Duration),
    Unavailable(Duration),
}

#[tokio::test]
async fn redis_restarted_mid_run_makes_callers_wait_then_continue_within_the_limit() {
    let port = free_port();
    let server = PrivateRedis::start(port).await;
    let url = format!("redis://127.0.0.1:{port}");
    let limit = per_second(20, 1);
    let stores = [
        redis_store(&url, "restart:").await,
        redis_store(&url, "restart:").await,
    ];
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let callers: Vec<_> = (0..4)
        .map(|i| {
            let store = stores[i % 2].clone();
            let (seen, stop) = (seen.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    match store.acquire("restart", &[requests(limit, 1)]).await {
                        Ok(Permit::Granted) => {
                            seen.lock().unwrap().push(Seen::Granted(start.elapsed()));
                        }
                        Ok(Permit::Wait(d)) => sleep(d).await,
                        Err(e) => {
                            assert!(e.is_retryable(), "{e}");
                            seen.lock()
                                .unwrap()
                                .push(Seen::Unavailable(start.elapsed()));
                            // As the worker does: back off, then ask again.
                            sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            })
        })
        .collect();
    let count =
        |pred: &dyn Fn(&Seen) -> bool| seen.lock().unwrap().iter().filter(|s| pred(s)).count();

    eventually("grants before the outage", || async {
        count(&|s| matches!(s, Seen::Granted(_))) >= 10
    })
    .await;
    let killed_at = start.elapsed();
    server.kill();
    eventually("callers to see the outage", || async {
        count(&|s| matches!(s, Seen::Unavailable(t) if *t > killed_at)) >= 8
    })
    .await;
    let restarted_at = start.elapsed();
    let _server = PrivateRedis::start(port).await;
    let granted_before_restart = count(&|s| matches!(s, Seen::Granted(_)));
    eventually("grants after the restart", || async {
        count(&|s| matches!(s, Seen::Granted(_))) >= granted_before_restart + 10
    })
    .await;
    stop.cancel();
    for c in callers {
        tokio::time::timeout(PROMPTLY, c).await.unwrap().unwrap();
    }
    let ended_at = start.elapsed();

    let seen = seen.lock().unwrap().clone();
    let grants: Vec<Duration> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Granted(t) => Some(*t),
            Seen::Unavailable(_) => None,
        })
        .collect();
    // Nothing is granted while the server is down (a caller's last grant may arrive just as
    // it dies, and the first after the restart only once it answers).
    let during = grants
        .iter()
        .filter(|t| **t > killed_at + Duration::from_millis(100) && **t < restarted_at)
        .count();
    assert_eq!(during, 0, "granted while Redis was down: {seen:?}");
    // Each side of the outage holds the limit on its own (the restarted server starts with an
    // empty bucket, so each side has its own burst of 1).
    let within_limit = |from: Duration, to: Duration| {
        let n = grants.iter().filter(|t| **t >= from && **t <= to).count();
        let allowed = ((to - from).as_secs_f64() * 20.0).floor() as usize + 1 + 1;
        assert!(
            n <= allowed,
            "{n} grants in {from:?}..{to:?}, more than {allowed}"
        );
    };
    within_limit(Duration::ZERO, killed_at + Duration::from_millis(100));
    within_limit(restarted_at, ended_at);
}

// ---------------------------------------------------------------------------------------------
// Concurrency slots (SPEC Q6), on both backends

async fn check_slots(a: &dyn SlotLimiter, b: &dyn SlotLimiter) {
    let ttl = Duration::from_millis(400);
    // Two of a capacity of two, from two workers' views; a third waits.
    assert!(a.acquire_slot("org:acme", "w1/s1", 2, ttl).await.unwrap());
    assert!(b.acquire_slot("org:acme", "w2/s2", 2, ttl).await.unwrap());
    assert!(!b.acquire_slot("org:acme", "w2/s3", 2, ttl).await.unwrap());
    // A holder renews its own slot whatever the count; another key is independent.
    assert!(a.acquire_slot("org:acme", "w1/s1", 2, ttl).await.unwrap());
    assert!(b.acquire_slot("org:other", "w2/s3", 2, ttl).await.unwrap());
    // A slot given back is free at once.
    a.release_slot("org:acme", "w1/s1").await.unwrap();
    assert!(b.acquire_slot("org:acme", "w2/s3", 2, ttl).await.unwrap());
    assert!(!a.acquire_slot("org:acme", "w1/s4", 2, ttl).await.unwrap());
    // A holder that stops renewing (its worker died) loses its slot when the lease lapses.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !a.acquire_slot("org:acme", "w1/s4", 2, ttl).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leases never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn memory_slots() {
    let slots = MemorySlots::new();
    check_slots(&slots, &slots).await;
}

#[tokio::test]
async fn redis_slots() {
    let prefix = fresh_prefix();
    let a = redis_store(REDIS_URL, &prefix).await;
    let b = redis_store(REDIS_URL, &prefix).await;
    check_slots(&a, &b).await;
}

/// The limiter and the slots on a Redis Cluster of their own: a key's pause and buckets share
/// the key's hash tag, so each script runs on one node.
#[tokio::test]
async fn redis_cluster_limiter_and_slots() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = verdict_testkit::services::RedisCluster::start(
        &dir.path().join("data"),
        &dir.path().join("logs"),
    )
    .await;
    let prefix = fresh_prefix();
    let handles = Handles {
        a: Arc::new(redis_store(&cluster.url(), &prefix).await),
        b: Arc::new(redis_store(&cluster.url(), &prefix).await),
    };
    check_all(&handles).await;
    let a = redis_store(&cluster.url(), &prefix).await;
    let b = redis_store(&cluster.url(), &prefix).await;
    check_slots(&a, &b).await;
}
