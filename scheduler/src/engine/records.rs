//! Task records in the document store, and the index of active tasks: the only code that writes
//! either. Every change is a compare-and-set of the whole record (`DocumentStore::put` with the
//! version read), so several replicas never double-advance a task (decision 32). A record whose
//! creation failed half-way is deleted again or adopted ([`create_listed`], decision 200), so no
//! record is left that no client was given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use prometheus::{IntCounter, IntCounterVec};
use verdict_backends::store::{DocumentStore, Sealing, StoreError, TaskArchive};

use super::{SchedulerDeps, unavailable};
use crate::service::ServiceError;
use verdict_policy::pipeline::Effects;
use verdict_policy::task::TaskRecord;

/// The set of task ids that are not terminal.
const ACTIVE: &str = "tasks:active";

/// A compare-and-set that keeps losing gives up after this many tries.
const MAX_TRIES: usize = 64;

/// How many records this replica keeps the last version it read or wrote of. A task's record is
/// about 4 KiB, so this is at most some 20 MiB; a task not held is read first, as it would be
/// without the copies.
const HELD_RECORDS: usize = 4096;

/// How long a retired task's sealing waits before each try: a moment first, for what its last
/// stage stores while its result travels, then longer when the task was found changed.
const SEAL_WAITS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
];

/// How long a record whose creation failed keeps being deleted while the store cannot: longer
/// than a failover and the `NOREPLICAS` window after it (docs/deploy.md).
const WITHDRAW_PATIENCE: Duration = Duration::from_secs(120);

fn task_key(id: &str) -> String {
    format!("task:{id}")
}

/// Stores a new document `body` at `key` and lists `id` in `set`: its version, or `None` when
/// the key exists. When either write fails, the document is deleted again in the background
/// (it may have been written: a reply lost is not a write refused), so that nothing is left
/// that the caller's client was not given — unless `keyed`: a document named by an
/// idempotency key is the answer to the same submission made again, which adopts it (decision
/// 200).
pub(super) async fn create_listed(
    documents: &Arc<dyn DocumentStore>,
    (key, body): (&str, &str),
    (set, id): (&str, &str),
    keyed: bool,
) -> Result<Option<u64>, StoreError> {
    let created = match documents.put(key, body, None).await {
        Ok(None) => return Ok(None),
        Ok(Some(version)) => documents.set_add(set, id).await.map(|()| version),
        Err(e) => Err(e),
    };
    match created {
        Ok(version) => Ok(Some(version)),
        Err(e) => {
            if !keyed {
                withdraw(documents.clone(), key.to_owned(), body.to_owned());
            }
            Err(e)
        }
    }
}

/// Deletes the document at `key` if it holds `body` (ours, and nobody changed it since), in the
/// background, retrying while the store cannot answer, for up to [`WITHDRAW_PATIENCE`].
fn withdraw(documents: Arc<dyn DocumentStore>, key: String, body: String) {
    tokio::spawn(async move {
        let once = || async {
            match documents.get(&key).await? {
                Some(stored) if stored.body == body => documents.delete(&key, stored.version).await,
                _ => Ok(false),
            }
        };
        let withdrawn = once
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(250))
                    .with_max_delay(Duration::from_secs(5))
                    .with_total_delay(Some(WITHDRAW_PATIENCE))
                    .without_max_times()
                    .with_jitter(),
            )
            .sleep(tokio::time::sleep)
            .when(StoreError::is_retryable)
            .await;
        match withdrawn {
            Ok(true) => tracing::info!(%key, "a record whose creation failed was deleted"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%key, error = %e, "a record whose creation failed was not deleted; it is never run and expires with its TTL")
            }
        }
    });
}

/// The task records; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct TaskRecords {
    documents: Arc<dyn DocumentStore>,
    archive: Arc<dyn TaskArchive>,
    sealed: IntCounterVec,
    conflicts: IntCounter,
    held: Arc<Mutex<Held>>,
}

/// The records this replica last read or wrote, each with its version: an update tries its
/// compare-and-set on the copy held instead of reading the record first, which saves a round
/// trip per transition when this replica wrote last (decision 172). A copy is only ever a
/// guess: a write with a stale version fails and the record is read.
#[derive(Debug, Default)]
struct Held {
    records: HashMap<String, HeldRecord>,
    /// Increases with every copy kept, so the oldest are the first dropped when full.
    tick: u64,
    /// This replica's writes whose outcome is unknown, by task.
    unconfirmed: HashMap<String, Unconfirmed>,
}

/// A write whose reply was lost (the store failed as it answered): the record written, and what
/// its change asked to be done. The next update of the task reads the record; if it holds
/// exactly this, the write landed and its effects are still owed — they are carried out with
/// that update's own (decision 205). Without this, a result applied again after the store came
/// back changed nothing, and a task could end without its `task-finished` event.
#[derive(Debug)]
struct Unconfirmed {
    task: TaskRecord,
    effects: Effects,
    was_terminal: bool,
}

#[derive(Debug)]
struct HeldRecord {
    version: u64,
    task: TaskRecord,
    tick: u64,
}

impl Held {
    fn keep(&mut self, id: &str, version: u64, task: &TaskRecord) {
        self.tick += 1;
        let tick = self.tick;
        if self.records.len() >= HELD_RECORDS && !self.records.contains_key(id) {
            // Drop the older half at once, so a full map costs a sort per HELD_RECORDS / 2
            // copies rather than one per copy.
            let mut ticks: Vec<u64> = self.records.values().map(|r| r.tick).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            self.records.retain(|_, r| r.tick > cut);
        }
        self.records.insert(
            id.to_owned(),
            HeldRecord {
                version,
                task: task.clone(),
                tick,
            },
        );
    }
}

/// The outcome of [`TaskRecords::update`].
#[derive(Debug)]
pub(super) struct Updated {
    /// The record as stored now.
    pub task: TaskRecord,
    /// What the change that won asks to be done next.
    pub effects: Effects,
    /// Whether the task had already ended before the change.
    pub was_terminal: bool,
}

impl TaskRecords {
    pub(super) fn new(deps: &SchedulerDeps) -> TaskRecords {
        TaskRecords {
            documents: deps.documents.clone(),
            archive: deps.archive.clone(),
            sealed: deps.metrics.sealed.clone(),
            conflicts: deps.metrics.conflicts.clone(),
            held: Arc::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The copy of task `id` held, with its version.
    fn held_copy(&self, id: &str) -> Option<(u64, TaskRecord)> {
        self.held()
            .records
            .get(id)
            .map(|r| (r.version, r.task.clone()))
    }

    fn forget(&self, id: &str) {
        self.held().records.remove(id);
    }

    pub(super) async fn load(&self, id: &str) -> Result<TaskRecord, ServiceError> {
        self.read(id).await.map(|(_, task)| task)
    }

    /// Stores a new task and lists it as active, or nothing ([`create_listed`]); a task with
    /// the same id is a conflict.
    pub(super) async fn create(&self, task: &TaskRecord) -> Result<(), ServiceError> {
        let id = &task.id;
        let body =
            serde_json::to_string(task).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        let keyed = super::submission::named_by_key(id);
        let created = create_listed(&self.documents, (&task_key(id), &body), (ACTIVE, id), keyed)
            .await
            .map_err(unavailable)?;
        let Some(version) = created else {
            return Err(ServiceError::Conflict(format!("task {id} already exists")));
        };
        self.held().keep(id, version, task);
        Ok(())
    }

    /// Task `id`, which a submission made again with its idempotency key names, listed as
    /// active unless it ended: an earlier try may have stored it and failed to list it.
    pub(super) async fn adopt(&self, id: &str) -> Result<TaskRecord, ServiceError> {
        let task = self.load(id).await?;
        if !task.state.is_terminal() {
            self.documents
                .set_add(ACTIVE, id)
                .await
                .map_err(unavailable)?;
        }
        Ok(task)
    }

    /// Loads, changes and stores a task with compare-and-set, retrying on conflict. Returns the
    /// stored task with the effects of the change that won. Nothing is written when the change
    /// changes nothing.
    ///
    /// The first try changes the copy held, if any, without reading; a change that changes
    /// nothing there is tried again on the record read, since the copy may be older than it.
    pub(super) async fn update(
        &self,
        id: &str,
        change: impl Fn(&mut TaskRecord) -> Effects,
    ) -> Result<Updated, ServiceError> {
        let key = task_key(id);
        // A write of ours may have landed unseen: then the record is read, never guessed at.
        let mut unconfirmed = self.held().unconfirmed.remove(id);
        let mut held = self.held_copy(id).filter(|_| unconfirmed.is_none());
        let mut owed: Option<(Effects, bool)> = None;
        for _ in 0..MAX_TRIES {
            let from_copy = held.is_some();
            let (version, mut task) = match held.take() {
                Some(copy) => copy,
                None => match self.read(id).await {
                    Ok(read) => read,
                    Err(e) => {
                        self.keep_unconfirmed(id, unconfirmed);
                        return Err(e);
                    }
                },
            };
            if let Some(write) = unconfirmed.take().filter(|w| w.task == task) {
                owed = Some((write.effects, write.was_terminal));
            }
            let was_terminal = owed.as_ref().map_or(task.state.is_terminal(), |o| o.1);
            let before = task.clone();
            let fresh = change(&mut task);
            let idle = task == before && fresh.events.is_empty() && fresh.planned.is_empty();
            let mut effects = owed.as_ref().map(|o| o.0.clone()).unwrap_or_default();
            effects.then(fresh);
            let updated = Updated {
                task,
                effects,
                was_terminal,
            };
            if idle {
                if from_copy {
                    continue;
                }
                return Ok(updated);
            }
            let body = serde_json::to_string(&updated.task)
                .map_err(|e| ServiceError::Unavailable(format!("encode task {id}: {e}")))?;
            let written = self.documents.put(&key, &body, Some(version)).await;
            match written {
                Ok(Some(version)) => {
                    self.held().keep(id, version, &updated.task);
                    return Ok(updated);
                }
                Ok(None) => {
                    // Written by someone else since this version: read what won.
                    self.forget(id);
                    self.conflicts.inc();
                }
                Err(e) => {
                    // Unknown whether it was written: the copy cannot be trusted any more, and
                    // the next update finds out.
                    self.forget(id);
                    let write = Unconfirmed {
                        task: updated.task,
                        effects: updated.effects,
                        was_terminal,
                    };
                    self.keep_unconfirmed(id, Some(write));
                    return Err(unavailable(e));
                }
            }
        }
        Err(ServiceError::Unavailable(format!(
            "task {id} keeps changing under concurrent updates"
        )))
    }

    fn keep_unconfirmed(&self, id: &str, write: Option<Unconfirmed>) {
        let Some(write) = write else {
            return;
        };
        let mut held = self.held();
        if held.unconfirmed.len() >= HELD_RECORDS {
            // Only after a long outage; those tasks' owed effects are dropped, as before.
            held.unconfirmed.clear();
        }
        held.unconfirmed.insert(id.to_owned(), write);
    }

    /// The ids of tasks not known to have ended.
    pub(super) async fn active(&self) -> Result<Vec<String>, StoreError> {
        self.documents.set_members(ACTIVE).await
    }

    /// Takes an ended task off the active index, and seals its stages' records
    /// ([`TaskArchive::seal`]) in the background: by now its publication has settled, so nothing
    /// more is expected of it. A seal that fails leaves its records as they were (they expire as
    /// before); one that finds the task changed while reading it (the last attempt's transcript
    /// is stored while its result travels, so it may land just after the end) is tried again a
    /// little later, a few times.
    pub(super) async fn retire(&self, task: &TaskRecord) -> Result<(), StoreError> {
        let id = task.id.clone();
        self.forget(&id);
        self.documents.set_remove(ACTIVE, &id).await?;
        let stages: Vec<String> = task.stages.iter().map(|s| s.id.clone()).collect();
        let (archive, sealed) = (self.archive.clone(), self.sealed.clone());
        tokio::spawn(async move {
            let mut outcome = "changed";
            for wait in SEAL_WAITS {
                tokio::time::sleep(wait).await;
                outcome = match archive.seal(&id, &stages).await {
                    Ok(Sealing::Sealed) => "sealed",
                    Ok(Sealing::Changed) => continue,
                    Ok(Sealing::Nothing) => "nothing",
                    Err(e) => {
                        tracing::warn!(task = %id, error = %e, "task records not sealed");
                        "failed"
                    }
                };
                break;
            }
            sealed.with_label_values(&[outcome]).inc();
        });
        Ok(())
    }

    /// Takes `id` off the active index without sealing anything: for an id listed without a
    /// record.
    pub(super) async fn unlist(&self, id: &str) -> Result<(), StoreError> {
        self.forget(id);
        self.documents.set_remove(ACTIVE, id).await
    }

    /// Whether the store answers (readiness).
    pub(super) async fn probe(&self) -> Result<(), StoreError> {
        self.documents.get("readiness-probe").await.map(|_| ())
    }

    async fn read(&self, id: &str) -> Result<(u64, TaskRecord), ServiceError> {
        let stored = self
            .documents
            .get(&task_key(id))
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
        let task: TaskRecord = serde_json::from_str(&stored.body).map_err(|e| {
            ServiceError::Unavailable(format!("task {id} record is unreadable: {e}"))
        })?;
        self.held().keep(id, stored.version, &task);
        Ok((stored.version, task))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use verdict_backends::BoxFuture;
    use verdict_backends::store::Versioned;
    use verdict_backends::store::memory::MemoryStore;

    use super::*;
    use crate::engine::fixture::{Fixture, Outages};

    /// A store where another replica changes the task between this replica's read and its
    /// first write, as two replicas applying results to one task at once do.
    #[derive(Debug)]
    struct Racing {
        store: Arc<MemoryStore>,
        raced: AtomicBool,
    }

    impl DocumentStore for Racing {
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
            self.store.get(key)
        }

        fn put<'a>(
            &'a self,
            key: &'a str,
            body: &'a str,
            expected: Option<u64>,
        ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
            Box::pin(async move {
                if let Some(version) = expected
                    && !self.raced.swap(true, Ordering::SeqCst)
                {
                    let stored = self.store.get(key).await.unwrap().unwrap();
                    let mut theirs: TaskRecord = serde_json::from_str(&stored.body).unwrap();
                    theirs.reason = Some("written by another replica".to_owned());
                    let theirs = serde_json::to_string(&theirs).unwrap();
                    self.store.put(key, &theirs, Some(version)).await.unwrap();
                }
                self.store.put(key, body, expected).await
            })
        }

        fn delete<'a>(
            &'a self,
            key: &'a str,
            expected: u64,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            self.store.delete(key, expected)
        }

        fn set_add<'a>(
            &'a self,
            set: &'a str,
            member: &'a str,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.store.set_add(set, member)
        }

        fn set_remove<'a>(
            &'a self,
            set: &'a str,
            member: &'a str,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.store.set_remove(set, member)
        }

        fn set_members<'a>(
            &'a self,
            set: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
            self.store.set_members(set)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_compare_and_set_is_retried_on_the_record_that_won() {
        let store = Arc::new(MemoryStore::new());
        let racing = Arc::new(Racing {
            store: store.clone(),
            raced: AtomicBool::new(false),
        });
        let fx = Fixture::with_documents(racing, store);
        let task = fx.queued_scan().await;

        let updated = fx
            .parts
            .records
            .update(&task.id, |t| {
                t.triage_fallback = true;
                Effects::default()
            })
            .await
            .unwrap();

        let stored = fx.load(&task.id).await;
        assert_eq!(stored, updated.task);
        // Both changes hold: the other replica's, and this one applied again on top of it.
        assert_eq!(stored.reason.as_deref(), Some("written by another replica"));
        assert!(stored.triage_fallback);
        assert_eq!(fx.metrics().conflicts.get(), 1);
    }

    /// A store that counts the records read from it.
    #[derive(Debug)]
    struct Counting {
        store: Arc<MemoryStore>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl DocumentStore for Counting {
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.store.get(key)
        }

        fn put<'a>(
            &'a self,
            key: &'a str,
            body: &'a str,
            expected: Option<u64>,
        ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
            self.store.put(key, body, expected)
        }

        fn delete<'a>(
            &'a self,
            key: &'a str,
            expected: u64,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            self.store.delete(key, expected)
        }

        fn set_add<'a>(
            &'a self,
            set: &'a str,
            member: &'a str,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.store.set_add(set, member)
        }

        fn set_remove<'a>(
            &'a self,
            set: &'a str,
            member: &'a str,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.store.set_remove(set, member)
        }

        fn set_members<'a>(
            &'a self,
            set: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
            self.store.set_members(set)
        }
    }

    fn counting() -> (Fixture, Arc<Counting>) {
        let store = Arc::new(MemoryStore::new());
        let counting = Arc::new(Counting {
            store: store.clone(),
            reads: Default::default(),
        });
        (Fixture::with_documents(counting.clone(), store), counting)
    }

    /// Another replica's write of task `id`, behind this replica's back.
    async fn written_elsewhere(fx: &Fixture, id: &str, change: impl FnOnce(&mut TaskRecord)) {
        let stored = fx.store.get(&task_key(id)).await.unwrap().unwrap();
        let mut theirs: TaskRecord = serde_json::from_str(&stored.body).unwrap();
        change(&mut theirs);
        let theirs = serde_json::to_string(&theirs).unwrap();
        let key = task_key(id);
        let put = fx.store.put(&key, &theirs, Some(stored.version));
        assert!(put.await.unwrap().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn updates_after_this_replicas_own_writes_read_nothing() {
        let (fx, counting) = counting();
        let task = fx.queued_scan().await;
        for reason in ["first", "second", "third"] {
            fx.parts
                .records
                .update(&task.id, |t| {
                    t.reason = Some(reason.to_owned());
                    Effects::default()
                })
                .await
                .unwrap();
        }
        assert_eq!(counting.reads.load(Ordering::SeqCst), 0);
        assert_eq!(fx.load(&task.id).await.reason.as_deref(), Some("third"));
        assert_eq!(fx.metrics().conflicts.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_copy_older_than_the_record_is_read_again_before_a_change_applies() {
        let (fx, counting) = counting();
        let task = fx.queued_scan().await;
        // Another replica writes: the copy held is now a version behind.
        written_elsewhere(&fx, &task.id, |t| t.reason = Some("elsewhere".into())).await;

        let updated = fx
            .parts
            .records
            .update(&task.id, |t| {
                t.triage_fallback = true;
                Effects::default()
            })
            .await
            .unwrap();
        // The write from the copy lost; the change was made again on the record that won.
        assert_eq!(updated.task.reason.as_deref(), Some("elsewhere"));
        assert!(updated.task.triage_fallback);
        assert_eq!(fx.load(&task.id).await, updated.task);
        assert_eq!(counting.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_changes_nothing_on_the_copy_is_tried_on_the_record() {
        let (fx, _) = counting();
        let task = fx.queued_scan().await;
        written_elsewhere(&fx, &task.id, |t| t.reason = Some("elsewhere".into())).await;

        // Nothing to do on the copy (no reason yet), something on the record.
        let updated = fx
            .parts
            .records
            .update(&task.id, |t| {
                if t.reason.is_some() {
                    t.triage_fallback = true;
                }
                Effects::default()
            })
            .await
            .unwrap();
        assert!(updated.task.triage_fallback);
        assert!(fx.load(&task.id).await.triage_fallback);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_changes_nothing_is_not_written() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let key = task_key(&task.id);
        let before = fx.store.get(&key).await.unwrap().unwrap().version;

        let updated = fx
            .parts
            .records
            .update(&task.id, |_| Effects::default())
            .await
            .unwrap();

        assert_eq!(updated.task, task);
        assert!(!updated.was_terminal);
        assert_eq!(fx.store.get(&key).await.unwrap().unwrap().version, before);
    }

    #[tokio::test(start_paused = true)]
    async fn created_tasks_are_active_once_and_unknown_ones_are_not_found() {
        let fx = Fixture::new();
        let records = &fx.parts.records;
        let task = fx.queued_scan().await;
        assert_eq!(records.active().await.unwrap(), vec![task.id.clone()]);
        assert_eq!(
            records.create(&task).await,
            Err(ServiceError::Conflict(format!(
                "task {} already exists",
                task.id
            )))
        );
        assert_eq!(
            records
                .update("nope", |_| Effects::default())
                .await
                .unwrap_err(),
            ServiceError::NotFound("nope".to_owned())
        );
        records.retire(&task).await.unwrap();
        assert!(records.active().await.unwrap().is_empty());
    }

    /// Waits (on paused time) until task `id` has no record, for at most a few minutes.
    async fn until_gone(outages: &Outages, id: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while DocumentStore::get(outages.store.as_ref(), &task_key(id))
            .await
            .unwrap()
            .is_some()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} was not deleted"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Issue 34: a record stored but not listed as active (the index's primary failing over)
    /// is deleted again, so no record is left that no client was given.
    #[tokio::test(start_paused = true)]
    async fn a_record_that_cannot_be_listed_is_deleted_again() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        outages.refused_adds.store(1, Ordering::SeqCst);
        let task = fx.queued_scan_unstored();

        let refused = fx.parts.records.create(&task).await.unwrap_err();

        assert!(
            matches!(refused, ServiceError::Unavailable(_)),
            "{refused:?}"
        );
        until_gone(&outages, &task.id).await;
        assert!(fx.parts.records.active().await.unwrap().is_empty());
    }

    /// A write whose reply was lost may have landed: it is deleted once the store answers
    /// again, however long the outage within [`WITHDRAW_PATIENCE`].
    #[tokio::test(start_paused = true)]
    async fn a_record_whose_reply_was_lost_is_deleted_once_the_store_answers() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        outages.lost_replies.store(1, Ordering::SeqCst);
        let task = fx.queued_scan_unstored();

        assert!(fx.parts.records.create(&task).await.is_err());
        outages.documents_down.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(
            DocumentStore::get(outages.store.as_ref(), &task_key(&task.id))
                .await
                .unwrap()
                .is_some(),
            "kept while the store cannot delete it"
        );
        outages.documents_down.store(false, Ordering::SeqCst);

        until_gone(&outages, &task.id).await;
    }

    /// A record an idempotency key names is not deleted: the same submission made again is
    /// answered with it, and lists it.
    #[tokio::test(start_paused = true)]
    async fn a_keyed_record_that_cannot_be_listed_is_adopted_by_its_submission_made_again() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        outages.refused_adds.store(1, Ordering::SeqCst);
        let mut task = fx.queued_scan_unstored();
        task.id = crate::engine::submission::id_for_key("again");

        assert!(fx.parts.records.create(&task).await.is_err());
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(
            matches!(
                fx.parts.records.create(&task).await,
                Err(ServiceError::Conflict(_))
            ),
            "kept"
        );
        let adopted = fx.parts.records.adopt(&task.id).await.unwrap();

        assert_eq!(adopted.id, task.id);
        assert_eq!(fx.parts.records.active().await.unwrap(), [task.id]);
    }

    /// A transition whose write landed but whose reply was lost (a Redis killed as it
    /// answered): made again once the store answers, it changes nothing, yet its effects are
    /// still carried out — the task's `task-finished` event appended once.
    #[tokio::test(start_paused = true)]
    async fn a_transition_whose_reply_was_lost_still_has_its_effects() {
        let outages = Arc::new(Outages::default());
        let fx = Fixture::with_outages(&outages);
        let task = fx.queued_scan().await;
        let now = fx.now();
        let cancel =
            |t: &mut TaskRecord| verdict_policy::pipeline::cancel(t, "cancelled on request", now);
        outages.lost_replies.store(1, Ordering::SeqCst);

        assert!(fx.parts.transitions.apply(&task.id, cancel).await.is_err());
        let key = task_key(&task.id);
        let stored = DocumentStore::get(outages.store.as_ref(), &key).await;
        assert!(
            stored.unwrap().unwrap().body.contains("aborted"),
            "it landed"
        );
        let ended = fx.parts.transitions.apply(&task.id, cancel).await.unwrap();

        assert_eq!(ended.state, verdict_api::document::TaskState::Aborted);
        let events = fx.parts.progress.all(&task.id).await.unwrap();
        let finished = events
            .iter()
            .filter(|e| e.kind == verdict_proto::wire::EventType::TaskFinished)
            .count();
        assert_eq!(finished, 1);
        let more = fx.parts.transitions.apply(&task.id, cancel).await.unwrap();
        assert_eq!(more.state, ended.state);
        assert_eq!(
            fx.parts.progress.all(&task.id).await.unwrap().len(),
            events.len(),
            "owed once"
        );
    }
}
