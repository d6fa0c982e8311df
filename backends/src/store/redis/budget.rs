//! The budget ledger on Redis (SPEC X5): one hash per organisation and period holding the
//! spending, the total held, and each task's hold (`"settled"` once settled), changed only by
//! Lua scripts so two scheduler replicas reserving at once cannot both pass the limit.

use std::sync::LazyLock;

use redis::Script;
use verdict_proto::budget::{Amount, Limit};

use super::{RedisStore, Replay};
use crate::BoxFuture;
use crate::store::{Account, BudgetLedger, Reservation, Standing, StoreError};

/// KEYS: the account hash. ARGV: holder field, estimate tokens, estimate µ$, token limit, µ$
/// limit (`-1`: none), keep-until (unix ms). Returns `{granted, spent tokens, spent µ$, held
/// tokens, held µ$}`; a holder seen before is granted without change.
static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local function standing(granted)
  local v = redis.call('HMGET', KEYS[1], 'spent_tokens', 'spent_micro_usd', 'held_tokens', 'held_micro_usd')
  return {granted, tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return standing(1) end
local now = standing(0)
local tokens = now[2] + now[4] + tonumber(ARGV[2])
local micro = now[3] + now[5] + tonumber(ARGV[3])
if (tonumber(ARGV[4]) >= 0 and tokens > tonumber(ARGV[4])) or
   (tonumber(ARGV[5]) >= 0 and micro > tonumber(ARGV[5])) then
  return now
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
redis.call('HINCRBY', KEYS[1], 'held_tokens', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'held_micro_usd', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
return standing(1)
",
    )
});

/// KEYS: the account hash. ARGV: holder field, actual tokens, actual µ$. Drops the hold, adds
/// the actual spending, marks the holder settled; 0 when there was no open hold.
static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local hold = redis.call('HGET', KEYS[1], ARGV[1])
if not hold or hold == 'settled' then return 0 end
local tokens, micro = string.match(hold, '^(%d+) (%d+)$')
-- '0 - n', not '-n': Lua's -0 is sent as '-0', which HINCRBY refuses.
redis.call('HINCRBY', KEYS[1], 'held_tokens', 0 - tonumber(tokens))
redis.call('HINCRBY', KEYS[1], 'held_micro_usd', 0 - tonumber(micro))
redis.call('HINCRBY', KEYS[1], 'spent_tokens', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'spent_micro_usd', ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], 'settled')
return 1
",
    )
});

/// An unset ceiling, as the script reads it.
fn ceiling(limit: Option<u64>) -> i64 {
    limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX))
}

/// Redis integers are signed; amounts beyond `i64::MAX` are not money anybody budgets.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn amount(tokens: i64, micro: i64) -> Amount {
    Amount::new(
        u64::try_from(tokens).unwrap_or(0),
        u64::try_from(micro).unwrap_or(0),
    )
}

impl RedisStore {
    fn account_key(&self, account: &Account) -> String {
        self.key(
            "budget",
            &format!("{}:{}", account.organisation, account.period),
        )
    }

    async fn reserve_budget(
        &self,
        account: &Account,
        holder: &str,
        estimate: Amount,
        limit: Limit,
    ) -> Result<Reservation, StoreError> {
        let key = self.account_key(account);
        let field = format!("hold:{holder}");
        // A replay finds the holder's field and is granted without change.
        let reply: Vec<i64> = self
            .run("reserve budget", &key, Replay::Safe, |mut conn| {
                let mut invocation = RESERVE.key(&key);
                invocation
                    .arg(&field)
                    .arg(int(estimate.tokens))
                    .arg(int(estimate.micro_usd))
                    .arg(ceiling(limit.tokens))
                    .arg(ceiling(limit.micro_usd))
                    .arg(int(account.keep_until_unix_ms));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let [granted, spent_tokens, spent_micro, held_tokens, held_micro] = reply[..] else {
            return Err(StoreError::Corrupt {
                key,
                reason: format!("budget reservation answered {reply:?}"),
            });
        };
        let standing = Standing {
            spent: amount(spent_tokens, spent_micro),
            held: amount(held_tokens, held_micro),
        };
        Ok(if granted == 1 {
            Reservation::Granted(standing)
        } else {
            Reservation::Refused(standing)
        })
    }

    async fn settle_budget(
        &self,
        account: &Account,
        holder: &str,
        actual: Amount,
    ) -> Result<bool, StoreError> {
        let key = self.account_key(account);
        let field = format!("hold:{holder}");
        // A replay finds the holder settled and changes nothing.
        let settled: i64 = self
            .run("settle budget", &key, Replay::Safe, |mut conn| {
                let mut invocation = SETTLE.key(&key);
                invocation
                    .arg(&field)
                    .arg(int(actual.tokens))
                    .arg(int(actual.micro_usd));
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(settled == 1)
    }

    async fn budget_standing(&self, account: &Account) -> Result<Standing, StoreError> {
        let key = self.account_key(account);
        let values: Vec<Option<i64>> = self
            .query(
                "read budget",
                &key,
                Replay::Safe,
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("spent_tokens")
                    .arg("spent_micro_usd")
                    .arg("held_tokens")
                    .arg("held_micro_usd"),
            )
            .await?;
        let at = |i: usize| values.get(i).copied().flatten().unwrap_or(0);
        Ok(Standing {
            spent: amount(at(0), at(1)),
            held: amount(at(2), at(3)),
        })
    }
}

impl BudgetLedger for RedisStore {
    fn reserve<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        estimate: Amount,
        limit: Limit,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        Box::pin(self.reserve_budget(account, holder, estimate, limit))
    }

    fn settle<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        actual: Amount,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.settle_budget(account, holder, actual))
    }

    fn standing<'a>(&'a self, account: &'a Account) -> BoxFuture<'a, Result<Standing, StoreError>> {
        Box::pin(self.budget_standing(account))
    }
}
