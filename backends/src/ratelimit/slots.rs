//! Concurrency caps the whole pool shares (SPEC Q6): at most `capacity` holders of a key at once —
//! one organisation's bulk stages, so one organisation's scan cannot take every worker. A slot is
//! a lease like a stage claim: taken with a TTL, renewed while its stage runs, given back at the
//! end, and lapsing on its own when its worker dies, so a killed worker never leaks a slot.
//!
//! [`SlotLimiter`] is the one small trait; `RedisStore` keeps each key as a sorted set of holders
//! scored by their lease's end on Redis server time (one Lua script per operation),
//! [`MemorySlots`] in process on tokio time.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::LimitError;
use crate::BoxFuture;
use crate::store::redis::{RedisStore, Replay};

/// Leased slots of capped keys.
pub trait SlotLimiter: Send + Sync + fmt::Debug {
    /// Takes (or renews) `holder`'s slot of `key` for `ttl` when fewer than `capacity` other live
    /// holders have one: `true` when it holds a slot now. Renewing a held slot always succeeds.
    fn acquire_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        capacity: u32,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LimitError>>;

    /// Gives `holder`'s slot of `key` back (nothing when it holds none).
    fn release_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LimitError>>;
}

/// KEYS: the key's set. ARGV: holder, capacity, TTL (ms). Lapsed leases are dropped first; a
/// holder renews, or joins while there is room. The set itself expires with its last lease.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
local ends = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], ends, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])))
return 1
",
    )
});

impl SlotLimiter for RedisStore {
    fn acquire_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        capacity: u32,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LimitError>> {
        Box::pin(async move {
            let set = self.key("slots", key);
            let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            // Renewing or taking the same slot twice is the same slot: a lost reply may be
            // replayed.
            let taken: i64 = self
                .run("acquire slot", &set, Replay::Safe, |mut conn| {
                    let mut invocation = ACQUIRE.key(&set);
                    invocation.arg(holder).arg(capacity).arg(ttl_ms);
                    async move { invocation.invoke_async(&mut conn).await }
                })
                .await?;
            Ok(taken == 1)
        })
    }

    fn release_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LimitError>> {
        Box::pin(async move {
            let set = self.key("slots", key);
            let _: i64 = self
                .run("release slot", &set, Replay::Safe, |mut conn| {
                    let cmd = redis::cmd("ZREM").arg(&set).arg(holder).clone();
                    async move { cmd.query_async(&mut conn).await }
                })
                .await?;
            Ok(())
        })
    }
}

/// Slots in process, on tokio time (virtual in paused tests).
#[derive(Debug, Default)]
pub struct MemorySlots {
    leases: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

impl MemorySlots {
    pub fn new() -> MemorySlots {
        MemorySlots::default()
    }

    /// The live holders of `key`.
    pub fn holders(&self, key: &str) -> usize {
        let now = Instant::now();
        let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases
            .get(key)
            .map_or(0, |h| h.values().filter(|ends| **ends > now).count())
    }
}

impl SlotLimiter for MemorySlots {
    fn acquire_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        capacity: u32,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LimitError>> {
        let now = Instant::now();
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let holders = leases.entry(key.to_owned()).or_default();
        holders.retain(|_, ends| *ends > now);
        let room = holders.contains_key(holder)
            || holders.len() < usize::try_from(capacity).unwrap_or(usize::MAX);
        if room {
            holders.insert(holder.to_owned(), now + ttl);
        }
        Box::pin(async move { Ok(room) })
    }

    fn release_slot<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), LimitError>> {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(holders) = leases.get_mut(key) {
            holders.remove(holder);
        }
        Box::pin(async { Ok(()) })
    }
}
