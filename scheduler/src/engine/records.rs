//! Task records in the document store, and the index of active tasks: the only code that writes
//! either. Every change is a compare-and-set of the whole record (`DocumentStore::put` with the
//! version read), so several replicas never double-advance a task (decision 32).

use std::sync::Arc;

use prometheus::IntCounter;
use verdict_backends::store::{DocumentStore, StoreError};

use super::{SchedulerDeps, unavailable};
use crate::pipeline::Effects;
use crate::service::ServiceError;
use crate::task::TaskRecord;

/// The set of task ids that are not terminal.
const ACTIVE: &str = "tasks:active";

/// A compare-and-set that keeps losing gives up after this many tries.
const MAX_TRIES: usize = 64;

fn task_key(id: &str) -> String {
    format!("task:{id}")
}

/// The task records; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct TaskRecords {
    documents: Arc<dyn DocumentStore>,
    conflicts: IntCounter,
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
    pub fn new(deps: &SchedulerDeps) -> TaskRecords {
        TaskRecords {
            documents: deps.documents.clone(),
            conflicts: deps.metrics.conflicts.clone(),
        }
    }

    pub async fn load(&self, id: &str) -> Result<TaskRecord, ServiceError> {
        self.read(id).await.map(|(_, task)| task)
    }

    /// Stores a new task and lists it as active; a task with the same id is a conflict.
    pub async fn create(&self, task: &TaskRecord) -> Result<(), ServiceError> {
        let id = &task.id;
        let body =
            serde_json::to_string(task).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        if self
            .documents
            .put(&task_key(id), &body, None)
            .await
            .map_err(unavailable)?
            .is_none()
        {
            return Err(ServiceError::Conflict(format!("task {id} already exists")));
        }
        self.documents
            .set_add(ACTIVE, id)
            .await
            .map_err(unavailable)
    }

    /// Loads, changes and stores a task with compare-and-set, retrying on conflict. Returns the
    /// stored task with the effects of the change that won. Nothing is written when the change
    /// changes nothing.
    pub async fn update(
        &self,
        id: &str,
        change: impl Fn(&mut TaskRecord) -> Effects,
    ) -> Result<Updated, ServiceError> {
        let key = task_key(id);
        for _ in 0..MAX_TRIES {
            let (version, mut task) = self.read(id).await?;
            let was_terminal = task.state.is_terminal();
            let before = task.clone();
            let effects = change(&mut task);
            let updated = Updated {
                task,
                effects,
                was_terminal,
            };
            if updated.task == before
                && updated.effects.events.is_empty()
                && updated.effects.planned.is_empty()
            {
                return Ok(updated);
            }
            let body = serde_json::to_string(&updated.task)
                .map_err(|e| ServiceError::Unavailable(format!("encode task {id}: {e}")))?;
            match self
                .documents
                .put(&key, &body, Some(version))
                .await
                .map_err(unavailable)?
            {
                Some(_) => return Ok(updated),
                None => self.conflicts.inc(),
            }
        }
        Err(ServiceError::Unavailable(format!(
            "task {id} keeps changing under concurrent updates"
        )))
    }

    /// The ids of tasks not known to have ended.
    pub async fn active(&self) -> Result<Vec<String>, StoreError> {
        self.documents.set_members(ACTIVE).await
    }

    /// Takes an ended task off the active index.
    pub async fn retire(&self, id: &str) -> Result<(), StoreError> {
        self.documents.set_remove(ACTIVE, id).await
    }

    /// Whether the store answers (readiness).
    pub async fn probe(&self) -> Result<(), StoreError> {
        self.documents.get("readiness-probe").await.map(|_| ())
    }

    async fn read(&self, id: &str) -> Result<(u64, TaskRecord), ServiceError> {
        let stored = self
            .documents
            .get(&task_key(id))
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ServiceError::NotFound(id.to_owned()))?;
        let task = serde_json::from_str(&stored.body).map_err(|e| {
            ServiceError::Unavailable(format!("task {id} record is unreadable: {e}"))
        })?;
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
    use crate::engine::fixture::Fixture;

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
        records.retire(&task.id).await.unwrap();
        assert!(records.active().await.unwrap().is_empty());
    }
}
