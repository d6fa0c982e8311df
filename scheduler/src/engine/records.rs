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
