//! Stage claims and results on Redis (SPEC E7): each decision ("is it done? who holds it?") is
//! one Lua script, so two workers given the same redelivered stage cannot both run it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use verdict_proto::wire::StageResult;

use super::{RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::{Claim, ResultStore, StoreError};

/// KEYS: result, claim. ARGV: owner, claim TTL (ms).
/// A recorded result wins; then a live claim of another owner; otherwise set or renew ours.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local result = redis.call('GET', KEYS[1])
if result then return {'done', result} end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return {'held', holder} end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {'acquired'}
",
    )
});

/// KEYS: result. ARGV: result JSON, TTL (ms). First write wins; returns what is stored.
static RECORD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end
return redis.call('GET', KEYS[1])
",
    )
});

/// KEYS: claim. ARGV: owner. Deletes the claim only if `owner` holds it.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
",
    )
});

impl RedisStore {
    fn stage_key(&self, kind: &str, task_id: &str, stage_id: &str) -> String {
        self.key(kind, &format!("{task_id}:{stage_id}"))
    }

    async fn claim_stage(
        &self,
        task_id: &str,
        stage_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let result_key = self.stage_key("result", task_id, stage_id);
        let claim_key = self.stage_key("claim", task_id, stage_id);
        let ttl = millis(ttl);
        // Renewing our own claim twice is harmless, so a lost reply may be retried.
        let reply: Vec<Vec<u8>> = self
            .run("claim stage", &claim_key, Replay::Safe, |mut conn| {
                let mut invocation = CLAIM.key(&result_key);
                invocation.key(&claim_key).arg(owner).arg(ttl);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        match reply.as_slice() {
            [tag] if tag == b"acquired" => Ok(Claim::Acquired),
            [tag, result] if tag == b"done" => {
                Ok(Claim::Done(Box::new(decode(&result_key, result)?)))
            }
            [tag, holder] if tag == b"held" => {
                Ok(Claim::HeldBy(String::from_utf8_lossy(holder).into_owned()))
            }
            _ => Err(StoreError::Corrupt {
                key: claim_key,
                reason: "the claim script returned an unexpected reply".into(),
            }),
        }
    }

    async fn release_stage(
        &self,
        task_id: &str,
        stage_id: &str,
        owner: &str,
    ) -> Result<(), StoreError> {
        let claim_key = self.stage_key("claim", task_id, stage_id);
        let _: i64 = self
            .run("release stage", &claim_key, Replay::Safe, |mut conn| {
                let mut invocation = RELEASE.key(&claim_key);
                invocation.arg(owner);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(())
    }

    async fn record_result(&self, result: &StageResult) -> Result<StageResult, StoreError> {
        let key = self.stage_key("result", &result.task_id, &result.stage_id);
        let json = encode(&key, result)?;
        let ttl = millis(self.inner.config.result_ttl);
        // SET NX makes a replay return the stored result, ours or an earlier one.
        let stored: Vec<u8> = self
            .run("record result", &key, Replay::Safe, |mut conn| {
                let mut invocation = RECORD.key(&key);
                invocation.arg(&json).arg(ttl);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        decode(&key, &stored)
    }

    async fn get_result(
        &self,
        task_id: &str,
        stage_id: &str,
    ) -> Result<Option<StageResult>, StoreError> {
        let key = self.stage_key("result", task_id, stage_id);
        let stored: Option<Vec<u8>> = self
            .query(
                "get result",
                &key,
                Replay::Safe,
                redis::cmd("GET").arg(&key),
            )
            .await?;
        stored.map(|bytes| decode(&key, &bytes)).transpose()
    }
}

impl ResultStore for RedisStore {
    fn claim<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.claim_stage(task_id, stage_id, owner, ttl))
    }

    fn release<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.release_stage(task_id, stage_id, owner))
    }

    fn record<'a>(
        &'a self,
        result: &'a StageResult,
    ) -> BoxFuture<'a, Result<StageResult, StoreError>> {
        Box::pin(self.record_result(result))
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StageResult>, StoreError>> {
        Box::pin(self.get_result(task_id, stage_id))
    }
}
