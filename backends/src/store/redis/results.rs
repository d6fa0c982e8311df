//! Stage claims and results on Redis (SPEC E7): each decision ("is it done? who holds it?") is
//! one Lua script, so two workers given the same redelivered stage cannot both run it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use verdict_proto::wire::StageResult;

use super::archive::Archive;
use super::{RedisStore, Replay, decode, encode_packed, millis};
use crate::BoxFuture;
use crate::store::{Claim, ResultStore, StageState, StoreError};

/// KEYS: result, claim, the task's archive. ARGV: owner, claim TTL (ms), `1` to look in the
/// archive. A recorded result wins; then, when asked, a sealed task (`sealed`: the caller reads
/// the archive, and asks again without looking if the stage is not in it); then a live claim of
/// another owner (with the milliseconds it has left); otherwise set or renew ours.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local result = redis.call('GET', KEYS[1])
if result then return {'done', result} end
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then return {'sealed'} end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  return {'held', holder, tostring(redis.call('PTTL', KEYS[2]))}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {'acquired'}
",
    )
});

/// KEYS: result, claim, the task's archive. ARGV: `1` to look in the archive. The same decision
/// as [`CLAIM`], read only.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local result = redis.call('GET', KEYS[1])
if result then return {'done', result} end
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then return {'sealed'} end
local holder = redis.call('GET', KEYS[2])
if holder then return {'held', holder, tostring(redis.call('PTTL', KEYS[2]))} end
return {'free'}
",
    )
});

/// KEYS: result, the stage's response journal, the task's archive. ARGV: packed result, TTL
/// (ms), `1` to look in the archive. First write wins; returns `stored` and what is stored, or,
/// when asked and the task is sealed without this result's key, `sealed` (the caller reads the
/// archive, and asks again without looking if the stage is not in it). Either way the journal
/// goes: with a result stored no delivery calls the stage's provider again (E7), so its answers
/// would only wait out their TTL.
static RECORD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('DEL', KEYS[2])
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  return {'sealed'}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'stored', ARGV[1]} end
return {'stored', redis.call('GET', KEYS[1])}
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
    pub(super) fn stage_key(&self, kind: &str, task_id: &str, stage_id: &str) -> String {
        self.tagged_key(kind, task_id, Some(stage_id))
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
        let archive_key = self.archive_key(task_id);
        let ttl = millis(ttl);
        // Renewing our own claim twice is harmless, so a lost reply may be retried.
        let state = self
            .decide_stage(task_id, stage_id, &result_key, &claim_key, |look| {
                let keys = (&result_key, &claim_key, &archive_key);
                self.run("claim stage", &claim_key, Replay::Safe, move |mut conn| {
                    let mut invocation = CLAIM.key(keys.0);
                    invocation
                        .key(keys.1)
                        .key(keys.2)
                        .arg(owner)
                        .arg(ttl)
                        .arg(look_arg(look));
                    async move { invocation.invoke_async(&mut conn).await }
                })
            })
            .await?;
        Ok(match state {
            StageState::Done(result) => Claim::Done(result),
            StageState::Held { owner, expires_in } => Claim::HeldBy { owner, expires_in },
            StageState::Free => Claim::Acquired,
        })
    }

    async fn inspect_stage(&self, task_id: &str, stage_id: &str) -> Result<StageState, StoreError> {
        let result_key = self.stage_key("result", task_id, stage_id);
        let claim_key = self.stage_key("claim", task_id, stage_id);
        let archive_key = self.archive_key(task_id);
        self.decide_stage(task_id, stage_id, &result_key, &claim_key, |look| {
            let keys = (&result_key, &claim_key, &archive_key);
            self.run(
                "inspect stage",
                &claim_key,
                Replay::Safe,
                move |mut conn| {
                    let mut invocation = INSPECT.key(keys.0);
                    invocation.key(keys.1).key(keys.2).arg(look_arg(look));
                    async move { invocation.invoke_async(&mut conn).await }
                },
            )
        })
        .await
    }

    /// A stage's state from [`CLAIM`] or [`INSPECT`] (`script`, told whether to look in the
    /// archive): a sealed task's result comes from its archive, and a stage not in it is decided
    /// again without looking.
    async fn decide_stage<F, Fut>(
        &self,
        task_id: &str,
        stage_id: &str,
        result_key: &str,
        claim_key: &str,
        script: F,
    ) -> Result<StageState, StoreError>
    where
        F: Fn(bool) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Vec<u8>>, StoreError>>,
    {
        for look in [true, false] {
            match read_state(result_key, claim_key, &script(look).await?)? {
                Read::State(state) => return Ok(state),
                Read::Sealed => {
                    if let Some(result) = self.archived_result(task_id, stage_id).await? {
                        return Ok(StageState::Done(Box::new(result)));
                    }
                }
            }
        }
        Err(not_looking(claim_key))
    }

    /// The stage's result in its task's archive, if the task was sealed with it.
    async fn archived_result(
        &self,
        task_id: &str,
        stage_id: &str,
    ) -> Result<Option<StageResult>, StoreError> {
        Ok(self.archive_of(task_id).await?.result(stage_id).cloned())
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
        let stored_form = encode_packed(&key, result)?;
        let journal_key = self.journal_key(&result.task_id, &result.stage_id);
        let archive_key = self.archive_key(&result.task_id);
        let ttl = millis(self.inner.config.result_ttl);
        for look in [true, false] {
            // SET NX makes a replay return the stored result, ours or an earlier one.
            let reply: Vec<Vec<u8>> = self
                .run("record result", &key, Replay::Safe, |mut conn| {
                    let mut invocation = RECORD.key(&key);
                    invocation
                        .key(&journal_key)
                        .key(&archive_key)
                        .arg(&stored_form)
                        .arg(ttl)
                        .arg(look_arg(look));
                    async move { invocation.invoke_async(&mut conn).await }
                })
                .await?;
            match reply.as_slice() {
                [tag, stored] if tag == b"stored" => return decode(&key, stored),
                [tag] if tag == b"sealed" => {
                    // The first write won before the task was sealed; it is in the archive.
                    if let Some(first) = self
                        .archived_result(&result.task_id, &result.stage_id)
                        .await?
                    {
                        return Ok(first);
                    }
                }
                _ => {
                    return Err(StoreError::Corrupt {
                        key,
                        reason: "unexpected reply from the record script".into(),
                    });
                }
            }
        }
        Err(not_looking(&key))
    }

    async fn get_result(
        &self,
        task_id: &str,
        stage_id: &str,
    ) -> Result<Option<StageResult>, StoreError> {
        let key = self.stage_key("result", task_id, stage_id);
        let archive_key = self.archive_key(task_id);
        // Both at once: a sealed task's results are in its archive.
        let (stored, archived): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .query(
                "get result",
                &key,
                Replay::Safe,
                redis::cmd("MGET").arg(&key).arg(&archive_key),
            )
            .await?;
        if let Some(bytes) = stored {
            return decode(&key, &bytes).map(Some);
        }
        Ok(Archive::read(&archive_key, archived.as_deref())?
            .result(stage_id)
            .cloned())
    }
}

/// The scripts' last argument: whether to look in the task's archive.
fn look_arg(look: bool) -> &'static str {
    if look { "1" } else { "0" }
}

/// A script answered `sealed` when told not to look in the archive: it is not the script this
/// code sent.
fn not_looking(key: &str) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        reason: "the script answered `sealed` when told not to look in the archive".into(),
    }
}

/// What [`CLAIM`] or [`INSPECT`] answered.
enum Read {
    State(StageState),
    /// The task is sealed and the stage's result key is gone: look in the archive.
    Sealed,
}

/// The reply of [`CLAIM`] or [`INSPECT`]: `acquired`/`free`, `done` with the result, or `held`
/// with the holder and its claim's remaining milliseconds.
fn read_state(result_key: &str, claim_key: &str, reply: &[Vec<u8>]) -> Result<Read, StoreError> {
    match reply {
        [tag] if tag == b"sealed" => Ok(Read::Sealed),
        [tag] if tag == b"acquired" || tag == b"free" => Ok(Read::State(StageState::Free)),
        [tag, result] if tag == b"done" => Ok(Read::State(StageState::Done(Box::new(decode(
            result_key, result,
        )?)))),
        [tag, holder, pttl] if tag == b"held" => {
            // PTTL is -1 for a key without expiry (never written so) and -2 for one just gone.
            let ms = String::from_utf8_lossy(pttl)
                .parse::<i64>()
                .unwrap_or(0)
                .max(0);
            Ok(Read::State(StageState::Held {
                owner: String::from_utf8_lossy(holder).into_owned(),
                expires_in: Duration::from_millis(ms.unsigned_abs()),
            }))
        }
        _ => Err(StoreError::Corrupt {
            key: claim_key.to_owned(),
            reason: "the claim script returned an unexpected reply".into(),
        }),
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

    fn inspect<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<StageState, StoreError>> {
        Box::pin(self.inspect_stage(task_id, stage_id))
    }
}
