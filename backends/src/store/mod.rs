//! Shared state behind small traits (SPEC E7, O3, O4): stage claims and results, progress event
//! streams, cancellation signals and versioned documents (task records), content-addressed stage
//! inputs, the response journal, the response cache, transcripts and the budget ledger. [`redis::RedisStore`] implements every one of
//! them on Redis; [`memory::MemoryStore`] in process, for `verdict dev` and tests.
//!
//! **Invariant:** only `store::redis` knows Redis; everything else speaks these traits.

use std::time::Duration;
pub use verdict_proto::wire::StoredEvent;

use verdict_proto::wire::{ProgressEvent, StageResult};

use crate::BoxFuture;

mod archive;
mod budget;
mod cache;
mod capacity;
mod events;
mod inputs;
mod journal;
mod liveness;
pub mod memory;
pub mod redis;
mod transcripts;

pub use archive::{Sealing, TaskArchive};
pub use budget::{Account, BudgetLedger, Reservation, Standing};
pub use cache::{CacheError, CachedAnswer, ResponseCache};
pub use capacity::Capacity;
pub use events::{EventSink, event};
pub use inputs::{InputError, InputStore, ResolvedInput, content_hash, resolve};
pub use journal::{CallKey, JournalError, ResponseJournal};
pub use liveness::Liveness;
pub use transcripts::{TranscriptError, TranscriptStore};
use transcripts::{reading_order, same_attempt};

/// A store failure. `Unavailable` is transient (reconnecting, timed out): callers retry or leave
/// the message unacknowledged; `Corrupt` is data that cannot be decoded; `Config` is a setting
/// that can never work (a malformed URL) and is reported at start-up instead of retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The store is out of memory and refuses writes until memory is freed or added; reads
    /// still work. Retryable, but not at once.
    #[error("state store full: {0}")]
    Full(String),
    #[error("state store holds invalid data at {key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("invalid state store configuration: {0}")]
    Config(String),
}

impl StoreError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Full(_))
    }
}

/// The answer to "may I run this stage?".
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Yours until the claim's TTL; renew it for long stages.
    Acquired,
    /// The stage already has a recorded result: do not run it again (E7); republish this.
    Done(Box<StageResult>),
    /// Another live worker is running it: its claim (a lease it renews while it runs) lasts
    /// `expires_in` more unless renewed. A redelivery that finds it comes back after that, and
    /// takes the stage over if the holder stopped renewing (it died).
    HeldBy { owner: String, expires_in: Duration },
}

impl Claim {
    /// The holder of a live claim, if another worker holds one.
    pub fn holder(&self) -> Option<&str> {
        match self {
            Claim::HeldBy { owner, .. } => Some(owner),
            _ => None,
        }
    }
}

/// Where a stage stands, as [`ResultStore::inspect`] reads it without changing anything.
#[derive(Debug, Clone, PartialEq)]
pub enum StageState {
    /// Its result is recorded.
    Done(Box<StageResult>),
    /// A worker holds a live claim on it for `expires_in` more.
    Held { owner: String, expires_in: Duration },
    /// Nobody runs it and it has no result: waiting in a queue, or lost.
    Free,
}

/// Stage claims and results: what makes at-least-once delivery effectively once (SPEC E7).
pub trait ResultStore: Send + Sync + std::fmt::Debug {
    /// Claims `(task, stage)` for `owner` for `ttl`, unless a result is recorded or another owner
    /// holds a live claim. Re-claiming by the same owner succeeds (renewal).
    fn claim<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Drops `owner`'s claim (after recording a result, or when giving the stage back).
    fn release<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Records a result once: the first write wins and is kept for the retention period; returns
    /// the stored result (this one, or the one recorded earlier).
    fn record<'a>(
        &'a self,
        result: &'a StageResult,
    ) -> BoxFuture<'a, Result<StageResult, StoreError>>;

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StageResult>, StoreError>>;

    /// Whether `(task, stage)` has a result, a live claim, or neither; changes nothing (the
    /// scheduler's sweeper reads it to find stages that were published and then lost).
    fn inspect<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<StageState, StoreError>>;
}

/// A task's progress stream: appended by workers and the scheduler, replayed and followed live
/// by the API (SSE) and `verdict tail` (SPEC O3).
pub trait EventLog: EventSink {
    /// Appends and returns the event's position. Unlike [`EventSink::emit`], failures surface.
    fn append<'a>(&'a self, event: &'a ProgressEvent) -> BoxFuture<'a, Result<String, StoreError>>;

    /// Appends `events` in order, all or none, and returns their positions: one round trip for
    /// the several events one transition makes, instead of one each.
    fn append_all<'a>(
        &'a self,
        events: &'a [ProgressEvent],
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;

    /// Events of `task_id` after position `after` (exclusive; `None` = from the beginning), in
    /// order. When there are none yet, waits up to `wait` for new ones (zero: do not wait).
    fn read<'a>(
        &'a self,
        task_id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>>;
}

/// Task cancellation requests, visible to every worker.
pub trait CancelSignals: Send + Sync + std::fmt::Debug {
    /// Marks the task cancelled and notifies subscribers.
    fn request_cancel<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    fn is_cancelled<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Task ids as they are cancelled from now on. Notifications can be missed across
    /// reconnects, so consumers also check [`CancelSignals::is_cancelled`] before starting work.
    fn subscribe(
        &self,
    ) -> BoxFuture<'_, Result<tokio::sync::broadcast::Receiver<String>, StoreError>>;
}

/// A document with the version it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub version: u64,
    pub body: String,
}

/// Versioned JSON documents with compare-and-set, plus named sets of ids: task records and the
/// index of active tasks. Compare-and-set is what lets several scheduler replicas run without
/// double-advancing a task.
pub trait DocumentStore: Send + Sync + std::fmt::Debug {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>>;

    /// Writes `body` if the stored version is `expected` (`None`: only if the key does not exist).
    /// Returns the new version, or `None` when someone else wrote first (reload and retry).
    fn put<'a>(
        &'a self,
        key: &'a str,
        body: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>>;

    /// Deletes the document if its stored version is `expected`; `false` when it is missing or
    /// at another version (someone wrote it since). How a failed creation is undone.
    fn delete<'a>(&'a self, key: &'a str, expected: u64)
    -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Adds `member` to `set`. A set may be spread over the store's nodes, so that an add
    /// succeeds while any of the nodes it may use takes writes (decision 200): no single node's
    /// outage refuses every add.
    fn set_add<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Removes `member` from `set`, wherever the set holds it.
    fn set_remove<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Every member of `set`, sorted, each once; an error unless every part of the set answered.
    fn set_members<'a>(&'a self, set: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;
}

/// Every store trait at once: what a process is given when one backend holds all of its state
/// (Redis in production, [`memory::MemoryStore`] in `verdict dev`). Each part is taken from it by
/// upcasting (`Arc<dyn StateStore>` → `Arc<dyn EventLog>`), so no component sees more than the
/// trait it needs.
pub trait StateStore:
    ResultStore
    + EventLog
    + CancelSignals
    + DocumentStore
    + InputStore
    + ResponseJournal
    + ResponseCache
    + TranscriptStore
    + BudgetLedger
    + Liveness
    + TaskArchive
    + Capacity
{
}

impl<T> StateStore for T where
    T: ResultStore
        + EventLog
        + CancelSignals
        + DocumentStore
        + InputStore
        + ResponseJournal
        + ResponseCache
        + TranscriptStore
        + BudgetLedger
        + Liveness
        + TaskArchive
        + Capacity
{
}
