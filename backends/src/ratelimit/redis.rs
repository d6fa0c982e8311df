//! The pool's rate limiter on Redis (SPEC Q3, X6), on the [`RedisStore`]'s own connection: each
//! operation is one Lua script, so every worker sees one bucket, and time is Redis's `TIME`, so
//! the workers' clocks never matter.
//!
//! # Keys (`P` = the store's prefix)
//! | key | type | TTL |
//! |---|---|---|
//! | `P limit:{key}:requests`, `P limit:{key}:tokens` | string: the bucket's TAT, µs since the epoch | until the TAT passes (an idle bucket holds no key) |
//! | `P pause:{key}` | string `1` | the pause |

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::{Demand, LimitError, Permit, RateLimiter, check, wait_from_nanos};
use crate::BoxFuture;
use crate::store::redis::{RedisStore, Replay};

/// KEYS: the pause, then one bucket per demand. ARGV: per demand, four numbers — the period
/// (µs), count, burst and cost. Returns 0 when every demand was taken, else the wait in µs
/// (nothing taken).
///
/// `TIME` before a write needs effects replication, the default since Redis 5 (asked for on
/// older servers). Numbers are Lua doubles: µs since the epoch (~1.8e15) are exact below 2^53, and the TAT is
/// written with 17 significant digits so it reads back as the same double.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.replicate_commands then redis.replicate_commands() end
local paused = redis.call('PTTL', KEYS[1])
if paused > 0 then return paused * 1000 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local tats = {}
for i = 2, #KEYS do
  local a = (i - 2) * 4
  local unit = tonumber(ARGV[a + 1]) / tonumber(ARGV[a + 2])
  local burst = tonumber(ARGV[a + 3])
  local cost = tonumber(ARGV[a + 4])
  -- A missing key (or one that does not parse) is an idle bucket.
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local new_tat = tat + cost * unit
  local early = new_tat - burst * unit - now
  if early > wait then wait = early end
  tats[i] = new_tat
end
if wait > 0 then return math.ceil(wait) end
for i = 2, #KEYS do
  local ttl = math.max(1, math.ceil((tats[i] - now) / 1000))
  redis.call('SET', KEYS[i], string.format('%.17g', tats[i]), 'PX', ttl)
end
return 0
",
    )
});

/// KEYS: the pause. ARGV: its length (ms). Extends the pause, never shortens it.
static PAUSE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 0
",
    )
});

impl RedisStore {
    async fn acquire_permit(&self, key: &str, demands: &[Demand]) -> Result<Permit, LimitError> {
        check(key, demands)?;
        let pause_key = self.tagged_key("pause", key, None);
        let buckets: Vec<String> = demands
            .iter()
            .map(|d| self.tagged_key("limit", key, Some(d.bucket.as_str())))
            .collect();
        let args: Vec<u64> = demands
            .iter()
            .flat_map(|d| {
                let period_us = u64::try_from(d.limit.period.as_micros()).unwrap_or(u64::MAX);
                [period_us.max(1), d.limit.count, d.limit.burst, d.cost]
            })
            .collect();
        // Not replayed after a lost reply: the script may have taken the units, and taking them
        // twice would waste a grant. Refused connections are retried (nothing was sent).
        let wait_us: u64 = self
            .run(
                "acquire rate limit",
                &pause_key,
                Replay::IfUnsent,
                |mut conn| {
                    let mut invocation = ACQUIRE.key(&pause_key);
                    invocation.key(&buckets).arg(&args);
                    async move { invocation.invoke_async(&mut conn).await }
                },
            )
            .await?;
        Ok(if wait_us == 0 {
            Permit::Granted
        } else {
            Permit::Wait(wait_from_nanos(wait_us as f64 * 1_000.0))
        })
    }

    async fn pause_key(&self, key: &str, duration: Duration) -> Result<(), LimitError> {
        let pause_key = self.tagged_key("pause", key, None);
        let ms = u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // Extending to the same end twice is harmless.
        let _: i64 = self
            .run("pause rate limit", &pause_key, Replay::Safe, |mut conn| {
                let mut invocation = PAUSE.key(&pause_key);
                invocation.arg(ms);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(())
    }
}

impl RateLimiter for RedisStore {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        demands: &'a [Demand],
    ) -> BoxFuture<'a, Result<Permit, LimitError>> {
        Box::pin(self.acquire_permit(key, demands))
    }

    fn pause<'a>(
        &'a self,
        key: &'a str,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), LimitError>> {
        Box::pin(self.pause_key(key, duration))
    }
}
