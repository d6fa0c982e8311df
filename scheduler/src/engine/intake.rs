//! Intake: a queued task's inputs prepared, then the task started. For a review that is reading
//! the change through the repository source and storing its diff in per-file pieces
//! ([`crate::diff_pieces`]); issue analyses and scans start with the repository as given. A task that
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
use crate::diff_pieces::{self, PreparedDiff};
use crate::document::TaskState;
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
        let diff = diff_pieces::prepare(
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

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::{DIFF, Fixture, REPO};
    use crate::task::StageStatus;

    #[tokio::test(start_paused = true)]
    async fn a_review_starts_with_its_change_stored_in_pieces() {
        let fx = Fixture::new();
        fx.repositories.insert_change(REPO, "main", "feature", DIFF);
        let task = fx.queued_review().await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        assert_eq!(
            started.repository.as_ref().unwrap().base.as_deref(),
            Some("main")
        );
        assert_eq!(started.inputs.diff_files.len(), 1);
        assert_eq!(
            started.inputs.diffstat.as_deref(),
            Some("src/cart.rs (+1 -0)\n")
        );
        assert_eq!(started.coverage.files_reviewed, vec!["src/cart.rs"]);
        assert_eq!(
            started.stage("summary").unwrap().status,
            StageStatus::Dispatched
        );
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Interactive)), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_cannot_be_read_ends_the_review_incomplete() {
        let fx = Fixture::new();
        let task = fx.queued_review().await;

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with("cannot read the change main..feature: "),
            "{reason}"
        );
        assert!(fx.parts.records.active().await.unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_already_taken_in_is_left_alone() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;

        fx.parts.intake.start(&task.id).await;
        fx.parts.intake.start(&task.id).await;

        assert_eq!(fx.load(&task.id).await.stages.len(), 1);
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 1);
    }
}
