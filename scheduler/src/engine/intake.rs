//! Intake: a queued task's inputs prepared, then the task started. For a review that is reading
//! the change through the repository source and storing its diff in per-file pieces
//! ([`crate::intake`]); issue analyses and scans start with the repository as given. A task that
//! cannot be prepared ends `incomplete` with the reason.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use verdict_backends::clock::Clock;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::InputStore;
use verdict_proto::wire::RepositoryRef;

use super::SchedulerDeps;
use super::records::TaskRecords;
use super::transition::Transitions;
use crate::document::TaskState;
use crate::intake::{self, PreparedDiff};
use crate::pipeline;
use crate::task::{PipelineKind, TaskRecord};

/// Starts queued tasks; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Intake {
    records: TaskRecords,
    transitions: Transitions,
    repositories: Arc<dyn RepositorySource>,
    inputs: Arc<dyn InputStore>,
    clock: Arc<dyn Clock>,
}

/// What intake adds to a task before it starts.
#[derive(Debug, Clone)]
struct Prepared {
    /// The repository with its revisions resolved.
    repository: RepositoryRef,
    /// A review's diff, stored.
    diff: Option<PreparedDiff>,
}

impl Prepared {
    fn write_to(&self, task: &mut TaskRecord) {
        task.repository = Some(self.repository.clone());
        if let Some(d) = &self.diff {
            task.inputs.diff_files = d.files.clone();
            task.inputs.diffstat = Some(d.diffstat.clone());
            task.coverage = d.coverage.clone();
        }
    }
}

impl Intake {
    pub fn new(deps: &SchedulerDeps, records: &TaskRecords, transitions: &Transitions) -> Intake {
        Intake {
            records: records.clone(),
            transitions: transitions.clone(),
            repositories: deps.repositories.clone(),
            inputs: deps.inputs.clone(),
            clock: deps.clock.clone(),
        }
    }

    /// Prepares task `id` and starts it, if it is still queued. Failing to record the outcome is
    /// logged: the task stays queued and the sweeper tries again.
    pub async fn start(&self, id: &str) {
        let Ok(task) = self.records.load(id).await else {
            return;
        };
        if task.state != TaskState::Queued {
            return;
        }
        let prepared = self.prepare(&task).await;
        let now = self.clock.now_unix_ms();
        let outcome = match prepared {
            Ok(prepared) => {
                self.transitions
                    .apply(id, |t| {
                        if let Some(p) = &prepared {
                            p.write_to(t);
                        }
                        pipeline::start(t, now)
                    })
                    .await
            }
            Err(reason) => {
                self.transitions
                    .apply(id, |t| pipeline::fail_intake(t, reason.clone(), now))
                    .await
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, task = %id, "intake not recorded; the sweeper will retry");
        }
    }

    /// The task's inputs, or why they cannot be had (in words, for the task's reason).
    async fn prepare(&self, task: &TaskRecord) -> Result<Option<Prepared>, String> {
        match task.pipeline {
            PipelineKind::Multi | PipelineKind::Single => self.prepare_review(task).await.map(Some),
            // Issue analyses and scans use the repository as given; the snapshot resolves the
            // revision when a stage needs it.
            PipelineKind::IssueAnalysis | PipelineKind::Scan => {
                Ok(task.repository.clone().map(|repository| Prepared {
                    repository,
                    diff: None,
                }))
            }
        }
    }

    async fn prepare_review(&self, task: &TaskRecord) -> Result<Prepared, String> {
        let Some(repo) = &task.repository else {
            return Err("the review names no repository".to_owned());
        };
        let base = repo.base.clone().unwrap_or_default();
        let cancel = CancellationToken::new();
        let change = self
            .repositories
            .change(&repo.url, &base, &repo.commit, &cancel)
            .await
            .map_err(|e| format!("cannot read the change {base}..{}: {e}", repo.commit))?;
        let diff = intake::prepare(
            self.inputs.as_ref(),
            &change.diff,
            task.settings.max_diff_bytes,
        )
        .await
        .map_err(|e| format!("cannot store the diff: {e}"))?;
        Ok(Prepared {
            repository: RepositoryRef {
                url: repo.url.clone(),
                commit: change.head,
                base: Some(change.base),
            },
            diff: Some(diff),
        })
    }
}
