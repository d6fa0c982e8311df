//! Every state store on Redis (SPEC E7, O3, O4, Q5), so that workers and scheduler replicas share
//! claims, results, progress streams, cancellations, task documents, inputs, the response journal,
//! the response cache, transcripts and budgets, and survive a Redis outage by reconnecting
//! instead of crashing.
//!
//! # Connections
//! - `redis.url` names one server, a Redis Cluster or a Sentinel-watched primary ([`link`]).
//! - Commands share one multiplexed connection (reconnected in the background). A command that
//!   was in flight when the link dropped fails; idempotent commands are retried a couple of
//!   times with a short backoff, others only when they certainly never ran (the connection was
//!   refused, or a cluster redirected them). Persistent failures become
//!   [`StoreError::Unavailable`], always within a bounded time (`command_timeout` per attempt);
//!   a Redis out of memory (`maxmemory` with `noeviction`) is [`StoreError::Full`].
//! - Blocking stream reads (`XREAD BLOCK`) take a connection of their own from a small pool:
//!   a blocked command stalls every other command on its connection.
//! - The cancellation subscription has its own pub/sub connection, re-established (and
//!   resubscribed) in the background after any disconnect.
//!
//! # Key layout (`P` = `prefix`, default `verdict:`)
//! `{task}` below is literal braces around the task id: a Redis Cluster hash tag, so every key
//! of one task lives in one slot and a script or transaction over them runs on one node. Keys
//! shared across tasks (inputs, texts, cache, sets) carry no tag and spread over the cluster; a
//! task's record (`doc:task:{task}`) carries its task's tag too.
//!
//! | key | type | TTL |
//! |---|---|---|
//! | `P claim:{task}:<stage>` | string: owner | the claim's TTL |
//! | `P result:{task}:<stage>` | string: packed JSON `StageResult` (a zstd frame from 128 bytes) | `result_ttl` |
//! | `P events:{task}` | stream, field `event`: JSON `ProgressEvent` | `event_ttl`, `MAXLEN ~` |
//! | `P cancel:{task}` | string `1` | `cancel_ttl` |
//! | `P cancel` | pub/sub channel, payload: task id | — |
//! | `P doc:<kind>:{id}` (a key `<kind>:<id>`, e.g. `task:{T}`), else `P doc:<key>` | hash `v` (version), `body` (packed); one under its untagged name `P doc:<kind>:<id>` is still read on a single primary and moved by its next write | `document_ttl`, renewed on write |
//! | `P set:<name>` | set | none |
//! | `P input:<sha256>` | string: packed bytes | `input_ttl` |
//! | `P journal:{task}:<stage>` | hash: a field per call (`<provider>/<sha256>`), JSON `ChatResponse`; deleted when the stage's result is recorded | `journal_ttl`, renewed by each call |
//! | `P cache:<cache key>` | string: packed JSON `CachedAnswer` | `response_cache_ttl` |
//! | `P archive:{task}` | string: zstd frame of a sealed task's results, transcripts (long texts as references) and events with their stream ids; those keys deleted | the longest of `result_ttl`, `transcript_ttl`, `event_ttl` |
//! | `P transcript:{task}:<stage>:<attempt>` | string: zstd frame of the JSON `Transcript`, long texts as references | `transcript_ttl` |
//! | `P text:<sha256>` | string: zstd frame of one long transcript text, its boundary tokens as placeholders, shared by every transcript holding it | `transcript_ttl`, renewed by each |
//! | `P transcripts:{task}` | set of transcript keys (the read-back index) | `transcript_ttl` |
//! | `P budget:<organisation>:<period>` | hash: spent and held totals, `hold:<task>` per task | 35 days after the period |
//! | `P alive:<holder>` | string `1`: a scheduler replica's heartbeat | its lease |
//!
//! The rate limiter's keys (`P pause:{key}`, `P limit:{key}:<bucket>`) carry their limit's key
//! as the tag, for the same reason.

mod archive;
mod budget;
mod cache;
mod cancel;
mod capacity;
mod documents;
mod events;
mod inputs;
mod journal;
mod link;
mod liveness;
mod packed;
mod results;
mod transcripts;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RetryMethod};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use self::link::{Conn, Deployment, Links};
use super::StoreError;

/// How to reach Redis and how long each kind of record lives.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` (`rediss://…` for TLS) for one server,
    /// `redis+cluster://[user:password@]host:port,host:port,…` for a Redis Cluster, or
    /// `redis+sentinel://[user:password@]host:port,…/service[/db]` for the primary Sentinels
    /// report. The password never appears in errors or logs.
    pub url: String,
    /// Prepended to every key and channel, so several deployments can share one Redis.
    /// Default `verdict:`.
    pub prefix: String,
    /// How long a recorded stage result is kept; must outlive any redelivery (E7). Default 7 days.
    pub result_ttl: Duration,
    /// The claim TTL callers should pass to `ResultStore::claim` (and renew well before it
    /// ends). Default 5 minutes.
    pub claim_ttl: Duration,
    /// Retention of per-attempt transcripts (O4). Default 14 days.
    pub transcript_ttl: Duration,
    /// Retention of provider responses for reuse on redelivery (E7). Default 2 days.
    pub journal_ttl: Duration,
    /// Retention of accepted stage answers for identical work (X3). Default 7 days.
    pub response_cache_ttl: Duration,
    /// Retention of content-addressed stage inputs. Default 7 days.
    pub input_ttl: Duration,
    /// How long a cancellation mark is kept. Default 7 days.
    pub cancel_ttl: Duration,
    /// Retention of a versioned document after its last write; `None` keeps documents until
    /// deleted. Default 30 days.
    pub document_ttl: Option<Duration>,
    /// Approximate cap on events per task stream (`XADD … MAXLEN ~`). Default 10 000.
    pub event_stream_maxlen: usize,
    /// Retention of a task's event stream after its last event. Default 14 days.
    pub event_ttl: Duration,
    /// Upper bound on one command attempt, including waiting for a reconnect. Default 2 s.
    pub command_timeout: Duration,
    /// Above this share of `maxmemory` on any primary (1–100 %), the store reports pressure
    /// and new tasks wait, so the accepted ones keep room to finish. Default 90.
    pub intake_memory_percent: u8,
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            prefix: "verdict:".into(),
            result_ttl: 7 * DAY,
            claim_ttl: Duration::from_secs(5 * 60),
            transcript_ttl: 14 * DAY,
            journal_ttl: 2 * DAY,
            response_cache_ttl: 7 * DAY,
            input_ttl: 7 * DAY,
            cancel_ttl: 7 * DAY,
            document_ttl: Some(30 * DAY),
            event_stream_maxlen: 10_000,
            event_ttl: 14 * DAY,
            command_timeout: Duration::from_secs(2),
            intake_memory_percent: 90,
        }
    }
}

impl RedisConfig {
    /// The defaults with this URL.
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            ..RedisConfig::default()
        }
    }

    /// The URL with its password hidden, for errors and logs.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Rejects settings that can never work, naming the setting.
    pub fn validate(&self) -> Result<(), StoreError> {
        let durations = [
            ("result_ttl", self.result_ttl),
            ("claim_ttl", self.claim_ttl),
            ("transcript_ttl", self.transcript_ttl),
            ("journal_ttl", self.journal_ttl),
            ("response_cache_ttl", self.response_cache_ttl),
            ("input_ttl", self.input_ttl),
            ("cancel_ttl", self.cancel_ttl),
            ("event_ttl", self.event_ttl),
            ("command_timeout", self.command_timeout),
        ];
        for (name, value) in durations {
            if value < Duration::from_millis(1) {
                return Err(StoreError::Config(format!(
                    "redis.{name} must be at least 1 ms"
                )));
            }
        }
        if self
            .document_ttl
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            return Err(StoreError::Config(
                "redis.document_ttl must be at least 1 ms, or unset to keep documents".into(),
            ));
        }
        if self.event_stream_maxlen == 0 {
            return Err(StoreError::Config(
                "redis.event_stream_maxlen must be at least 1".into(),
            ));
        }
        if !(1..=100).contains(&self.intake_memory_percent) {
            return Err(StoreError::Config(format!(
                "redis.intake_memory_percent = {} must be 1-100 (the share of maxmemory above \
                 which new tasks wait)",
                self.intake_memory_percent
            )));
        }
        if self.prefix.contains(['{', '}']) {
            // A brace in the prefix would become every key's hash tag: the whole deployment in
            // one cluster slot.
            return Err(StoreError::Config(format!(
                "redis.prefix `{}` must not contain `{{` or `}}`: verdict puts each task's hash \
                 tag in its keys itself",
                self.prefix
            )));
        }
        Deployment::parse(&self.url).map_err(|reason| {
            StoreError::Config(format!("redis.url `{}`: {reason}", self.redacted_url()))
        })?;
        Ok(())
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("prefix", &self.prefix)
            .field("result_ttl", &self.result_ttl)
            .field("claim_ttl", &self.claim_ttl)
            .field("transcript_ttl", &self.transcript_ttl)
            .field("journal_ttl", &self.journal_ttl)
            .field("response_cache_ttl", &self.response_cache_ttl)
            .field("input_ttl", &self.input_ttl)
            .field("cancel_ttl", &self.cancel_ttl)
            .field("document_ttl", &self.document_ttl)
            .field("event_stream_maxlen", &self.event_stream_maxlen)
            .field("event_ttl", &self.event_ttl)
            .field("command_timeout", &self.command_timeout)
            .field("intake_memory_percent", &self.intake_memory_percent)
            .finish()
    }
}

/// What is wrong with `url` as a `redis.url` (a node list without ports, a Sentinel form that
/// names no service, …), in words that name the fix; `None` when it reads.
pub fn url_problem(url: &str) -> Option<String> {
    Deployment::parse(url).err()
}

/// The URL with its password (userinfo, as every URL in verdict, or a `pass`/`password` query
/// parameter) hidden.
pub fn redact_url(url: &str) -> String {
    let mut out = verdict_proto::redact::redact_urls(url);
    for secret in url_secrets(url) {
        out = out.replace(&secret, verdict_proto::redact::REDACTED);
    }
    out
}

/// The secret parts of a Redis URL, as written in it.
fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
        && !password.is_empty()
    {
        secrets.push(password.to_owned());
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=')
                && name.to_ascii_lowercase().contains("pass")
                && !value.is_empty()
            {
                secrets.push(value.to_owned());
            }
        }
    }
    secrets
}

/// All Redis-backed stores behind one set of connections. Cheap to clone; clones share them.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: RedisConfig,
    links: Arc<Links>,
    /// Idle connections for blocking reads, reused so a follower does not connect per poll.
    blocking: Mutex<Vec<Conn>>,
    cancel_feed: Mutex<Option<cancel::Feed>>,
    /// The memory watch, started by the first [`crate::store::Capacity::pressure`] question.
    memory_watch: Mutex<Option<capacity::Reading>>,
    /// Stops background tasks (the cancellation subscription) when the last clone is dropped.
    shutdown: CancellationToken,
    secrets: Vec<String>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.config.redacted_url())
            .field("prefix", &self.inner.config.prefix)
            .finish_non_exhaustive()
    }
}

/// Idle blocking-read connections kept for reuse; more concurrent followers connect on demand.
const MAX_IDLE_BLOCKING: usize = 8;

/// Whether a failed command may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Repeating it has the same effect as running it once (reads, `SET NX`, owner-checked
    /// scripts).
    Safe,
    /// Only when it certainly never reached Redis (connection refused): appends and
    /// compare-and-set writes, which a lost reply would otherwise apply twice.
    IfUnsent,
}

#[derive(Debug)]
enum Failure {
    Redis(RedisError),
    /// No connection to send it on (a Sentinel or cluster node not answering): never sent.
    Connect(RedisError),
    TimedOut(Duration),
}

impl Failure {
    fn may_retry(&self, replay: Replay) -> bool {
        match (self, replay) {
            (Failure::Redis(e), _) if is_out_of_memory(e) => false,
            (Failure::Redis(e), Replay::Safe) => is_transient(e) || never_ran(e),
            (Failure::Redis(e), Replay::IfUnsent) => never_ran(e),
            (Failure::Connect(e), _) => is_transient(e) || e.is_connection_refusal(),
            (Failure::TimedOut(_), Replay::Safe) => true,
            (Failure::TimedOut(_), Replay::IfUnsent) => false,
        }
    }
}

/// Errors that say the command was not carried out: the connection was refused, or a cluster
/// node answered that another node serves the slot, that the slot is not served right now, that
/// it is a replica, or that it has too few replicas to take writes (`min-replicas-to-write`,
/// checked before a command or a script's first write runs) — so sending it again cannot apply
/// it twice.
fn never_ran(e: &RedisError) -> bool {
    e.is_connection_refusal()
        || matches!(
            e.code(),
            Some(
                "MOVED"
                    | "ASK"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "READONLY"
                    | "LOADING"
                    | "NOREPLICAS"
            )
        )
}

/// How many redirects one attempt follows before it counts as failed.
const MAX_REDIRECTS: u32 = 5;

/// A cluster node's answer that the key's slot is served elsewhere (`MOVED`, `ASK`).
fn is_redirect(e: &RedisError) -> bool {
    matches!(e.code(), Some("MOVED" | "ASK"))
}

/// Redis refused a write because it reached `maxmemory` (with the `noeviction` policy verdict
/// needs): retrying at once would only be refused again.
fn is_out_of_memory(e: &RedisError) -> bool {
    e.code() == Some("OOM")
        || e.clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, s)| s.code() == "OOM"))
}

/// Link and failover trouble that a reconnect or a short wait can cure (as opposed to a
/// command error such as `WRONGTYPE`).
fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.retry_method(),
            RetryMethod::Reconnect
                | RetryMethod::ReconnectFromInitialConnections
                | RetryMethod::RetryImmediately
                | RetryMethod::WaitAndRetry
                | RetryMethod::RefreshSlotsAndRetry
        )
}

impl RedisStore {
    /// Validates `config`, creates the connections and checks that Redis answers. A malformed
    /// URL is [`StoreError::Config`]; an unreachable Redis is [`StoreError::Unavailable`].
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, StoreError> {
        config.validate()?;
        let deployment = Deployment::parse(&config.url).map_err(|reason| {
            StoreError::Config(format!("redis.url `{}`: {reason}", config.redacted_url()))
        })?;
        if deployment.uses_tls() {
            // redis-rs builds its rustls config from the process default; ring is the provider
            // the rest of verdict uses. Already installed is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let secrets = url_secrets(&config.url);
        let links = Links::new(&deployment, config.command_timeout).map_err(|e| {
            StoreError::Config(scrub(
                &secrets,
                format!("redis.url `{}`: {e}", config.redacted_url()),
            ))
        })?;
        let store = RedisStore {
            inner: Arc::new(Inner {
                config,
                links: Arc::new(links),
                blocking: Mutex::new(Vec::new()),
                cancel_feed: Mutex::new(None),
                memory_watch: Mutex::new(None),
                shutdown: CancellationToken::new(),
                secrets,
            }),
        };
        store.ping().await?;
        Ok(store)
    }

    /// Readiness: Redis answers a `PING` within the command timeout (after the usual retries).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let reply: String = self
            .query("ping", "-", Replay::Safe, &redis::cmd("PING"))
            .await?;
        if reply == "PONG" {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "ping: unexpected reply `{reply}`"
            )))
        }
    }

    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// Deletes every key under this store's prefix (`SCAN` + `DEL` on every primary) and
    /// returns how many. For tearing down a test or a decommissioned deployment; destructive by
    /// design.
    pub async fn purge(&self) -> Result<usize, StoreError> {
        let pattern = format!("{}*", self.inner.config.prefix);
        let timeout = self.inner.config.command_timeout;
        let primaries = bounded(timeout, self.inner.links.primaries(), Failure::Connect)
            .await
            .map_err(|f| self.store_error("list primaries", &pattern, &f))?;
        let mut deleted = 0;
        let settings = link::timed(timeout);
        for primary in primaries {
            let connect = primary.get_multiplexed_async_connection_with_config(&settings);
            let mut conn = bounded(timeout, connect, Failure::Connect)
                .await
                .map_err(|f| self.store_error("scan", &pattern, &f))?;
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(500);
                let (next, keys) = bounded(
                    timeout,
                    scan.query_async::<(u64, Vec<String>)>(&mut conn),
                    Failure::Redis,
                )
                .await
                .map_err(|f| self.store_error("scan", &pattern, &f))?;
                // One key at a time: in a cluster the keys of one node span many slots.
                for key in &keys {
                    let mut del = redis::cmd("DEL");
                    del.arg(key);
                    deleted +=
                        bounded(timeout, del.query_async::<usize>(&mut conn), Failure::Redis)
                            .await
                            .map_err(|f| self.store_error("del", key, &f))?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(deleted)
    }

    /// `{prefix}{kind}:{rest}`: a key shared across tasks, with no hash tag.
    pub(crate) fn key(&self, kind: &str, rest: &str) -> String {
        format!("{}{kind}:{rest}", self.inner.config.prefix)
    }

    /// `{prefix}{kind}:{{tag}}` and `:{rest}` when given: a key in `tag`'s cluster slot (a task
    /// id, a rate limit's key), beside every other key with that tag.
    pub(crate) fn tagged_key(&self, kind: &str, tag: &str, rest: Option<&str>) -> String {
        match rest {
            Some(rest) => format!("{}{kind}:{{{tag}}}:{rest}", self.inner.config.prefix),
            None => format!("{}{kind}:{{{tag}}}", self.inner.config.prefix),
        }
    }

    /// Runs one command (or script, or pipeline) on the shared connection: each attempt bounded
    /// by the command timeout, retried per `replay`, failures mapped to [`StoreError`].
    pub(crate) async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        key: &str,
        replay: Replay,
        command: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let timeout = self.inner.config.command_timeout;
        let attempt = || async {
            // The connection the command went out on, for a timeout to name.
            let sent_on = Mutex::new(None);
            let exchange = async {
                let mut redirects = 0;
                loop {
                    let conn = self
                        .inner
                        .links
                        .commands()
                        .await
                        .map_err(Failure::Connect)?;
                    *sent_on.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
                    match command(conn.clone()).await {
                        Ok(value) => return Ok(value),
                        // A cluster node answered that another serves the slot: the command
                        // did not run, and the connection refreshes its slot map before it
                        // sends the next one, so follow at once (after a failover a stale map
                        // takes a few tries), within this attempt's time.
                        Err(e) if is_redirect(&e) && redirects < MAX_REDIRECTS => redirects += 1,
                        Err(e) => {
                            self.inner.links.failed(&conn, &e);
                            return Err(Failure::Redis(e));
                        }
                    }
                }
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(result) => result,
                Err(_) => {
                    let sent_on = sent_on
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take();
                    if let Some(conn) = sent_on {
                        self.inner.links.stalled(&conn);
                    }
                    Err(Failure::TimedOut(timeout))
                }
            }
        };
        attempt
            .retry(retry_schedule())
            .sleep(tokio::time::sleep)
            .when(|failure| failure.may_retry(replay))
            .notify(|failure, wait| {
                tracing::debug!(
                    op,
                    key,
                    error = %self.describe(failure),
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "redis command failed; retrying"
                );
            })
            .await
            .map_err(|failure| self.store_error(op, key, &failure))
    }

    /// [`RedisStore::run`] for one command.
    async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        key: &str,
        replay: Replay,
        cmd: &Cmd,
    ) -> Result<T, StoreError> {
        self.run(op, key, replay, |mut conn| {
            let cmd = cmd.clone();
            async move { cmd.query_async(&mut conn).await }
        })
        .await
    }

    /// [`RedisStore::run`] for a pipeline (atomic ones are `MULTI`/`EXEC`).
    async fn query_pipeline<T: FromRedisValue>(
        &self,
        op: &'static str,
        key: &str,
        replay: Replay,
        pipe: &Pipeline,
    ) -> Result<T, StoreError> {
        self.run(op, key, replay, |mut conn| {
            let pipe = pipe.clone();
            async move { pipe.query_async(&mut conn).await }
        })
        .await
    }

    fn describe(&self, failure: &Failure) -> String {
        match failure {
            Failure::Redis(e) => scrub(&self.inner.secrets, e.to_string()),
            Failure::Connect(e) => scrub(&self.inner.secrets, format!("cannot connect: {e}")),
            Failure::TimedOut(t) => format!("no reply within {t:?}"),
        }
    }

    fn store_error(&self, op: &str, key: &str, failure: &Failure) -> StoreError {
        if let Failure::Redis(e) = failure
            && is_out_of_memory(e)
        {
            return StoreError::Full(format!(
                "{op} `{key}` on {}: Redis reached its maxmemory and refuses writes; raise \
                 maxmemory, lower the retention settings (redis.*_ttl) or add memory, and keep \
                 maxmemory-policy noeviction so nothing verdict needs is evicted",
                self.inner.config.redacted_url()
            ));
        }
        // A pipeline reports its commands' errors inside its own.
        if let Failure::Redis(e) = failure
            && (e.code() == Some("WRONGTYPE")
                || e.clone()
                    .into_server_errors()
                    .is_some_and(|errors| errors.iter().any(|(_, s)| s.code() == "WRONGTYPE")))
        {
            return StoreError::Corrupt {
                key: key.to_owned(),
                reason: format!("{op}: the key holds another type of value"),
            };
        }
        StoreError::Unavailable(format!(
            "{op} `{key}` on {}: {}",
            self.inner.config.redacted_url(),
            self.describe(failure)
        ))
    }

    /// A connection of its own for a blocking command, and whether it came from the pool (a
    /// pooled one may have died since; the caller retries once on a fresh one).
    async fn blocking_connection(&self) -> Result<(Conn, bool), StoreError> {
        let pooled = self
            .inner
            .blocking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(conn) = pooled {
            return Ok((conn, true));
        }
        let timeout = self.inner.config.command_timeout;
        bounded(timeout, self.inner.links.dedicated(), Failure::Connect)
            .await
            .map(|conn| (conn, false))
            .map_err(|f| self.store_error("connect", "-", &f))
    }

    fn return_blocking_connection(&self, conn: Conn) {
        let mut idle = self
            .inner
            .blocking
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE_BLOCKING {
            idle.push(conn);
        }
    }
}

/// `future` within `timeout`; its error as `failure` says (a command's, or a connection's).
async fn bounded<T>(
    timeout: Duration,
    future: impl Future<Output = redis::RedisResult<T>>,
    failure: fn(RedisError) -> Failure,
) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(failure(e)),
        Err(_) => Err(Failure::TimedOut(timeout)),
    }
}

/// Retries of one command: two more attempts, 50–500 ms apart with jitter. Short on purpose: a
/// longer outage is the caller's to handle (leave the message unacknowledged, fail readiness).
fn retry_schedule() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_millis(500))
        .with_max_times(2)
        .with_jitter()
}

/// Removes every secret from a message (redis-rs errors may quote connection details).
fn scrub(secrets: &[String], mut message: String) -> String {
    for secret in secrets {
        message = message.replace(secret, verdict_proto::redact::REDACTED);
    }
    message
}

/// Milliseconds for `PX`/`PEXPIRE`, at least 1 (0 is an error to Redis).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Parses a stored JSON value, packed ([`packed::pack`]) or not; anything else is reported as
/// corrupt data at `key`.
fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(&packed::unpack(key, bytes)?).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// Serialises one of our own types; failure is reported against the key it was meant for.
fn encode<T: serde::Serialize>(key: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("cannot serialise: {e}"),
    })
}

/// [`encode`], packed for storing ([`packed::pack`]).
fn encode_packed<T: serde::Serialize>(key: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    packed::pack(key, encode(key, value)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_the_redacted_url() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/0"),
            "redis://user:[REDACTED]@host:6379/0"
        );
        assert_eq!(
            redact_url("rediss://:s3cret@host"),
            "rediss://:[REDACTED]@host"
        );
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/r.sock?db=1&pass=[REDACTED]"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        let config = RedisConfig::new("redis://u:s3cret@h");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn settings_that_cannot_work_are_named() {
        let mut config = RedisConfig::default();
        assert_eq!(config.validate(), Ok(()));
        config.command_timeout = Duration::ZERO;
        let e = config.validate().unwrap_err();
        assert!(e.to_string().contains("redis.command_timeout"), "{e}");
        assert!(!e.is_retryable());
    }

    #[tokio::test]
    async fn a_malformed_url_is_a_configuration_error() {
        let e = RedisStore::connect(RedisConfig::new("http://user:s3cret@host"))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Config(_)), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
}
