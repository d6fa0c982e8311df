//! Intake: a queued task's inputs prepared, then the task started. Every revision a task names is
//! resolved here, once, to a full commit id through the repository source (a scan's or issue
//! analysis's revision; a review's base and head together with its change, whose diff is stored
//! in per-file pieces by [`crate::diff_pieces`]). The task keeps the revisions as given beside
//! the commits, and every stage works on the commits. A task that cannot be prepared ends
//! `incomplete` with the reason and a failure kind: a revision or repository that does not exist
//! is the request's mistake (`not_found`), never `internal`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use verdict_backends::clock::Clock;
use verdict_backends::repo::{RepoError, RepositorySource};
use verdict_backends::store::InputStore;
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::RepositoryRef;

use super::SchedulerDeps;
use super::records::TaskRecords;
use super::transition::Transitions;
use crate::diff_pieces::{self, PreparedDiff};
use crate::document::TaskState;
use crate::pipeline;
use crate::task::{GivenRevisions, PipelineKind, TaskRecord};

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
    /// The repository with its revisions resolved to full commit ids.
    repository: RepositoryRef,
    /// The revisions as the request gave them.
    revisions: GivenRevisions,
    /// A review's diff, stored.
    diff: Option<PreparedDiff>,
}

impl Prepared {
    fn write_to(&self, task: &mut TaskRecord) {
        task.repository = Some(self.repository.clone());
        task.revisions = Some(self.revisions.clone());
        if let Some(d) = &self.diff {
            task.inputs.diff_files = d.files.clone();
            task.inputs.diffstat = Some(d.diffstat.clone());
            task.coverage = d.coverage.clone();
        }
    }
}

/// Why a task could not be taken in: in words for its reason, and classified.
#[derive(Debug, Clone)]
struct Refused {
    kind: FailureKind,
    reason: String,
}

impl Refused {
    /// A repository error, classified the one way workers classify it too.
    fn repository(context: Option<String>, error: &RepoError) -> Refused {
        Refused {
            kind: error.failure_kind(),
            reason: match context {
                Some(context) => format!("{context}: {error}"),
                None => error.to_string(),
            },
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
                        // Another intake (a sweeper's restart) may have started it meanwhile.
                        if let Some(p) = &prepared
                            && t.state == TaskState::Queued
                        {
                            p.write_to(t);
                        }
                        pipeline::start(t, now)
                    })
                    .await
            }
            Err(refused) => {
                self.transitions
                    .apply(id, |t| {
                        pipeline::fail_intake(t, refused.reason.clone(), refused.kind, now)
                    })
                    .await
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, task = %id, "intake not recorded; the sweeper will retry");
        }
    }

    /// The task's inputs, or why they cannot be had.
    async fn prepare(&self, task: &TaskRecord) -> Result<Option<Prepared>, Refused> {
        match task.pipeline {
            PipelineKind::Multi | PipelineKind::Single => self.prepare_review(task).await.map(Some),
            PipelineKind::IssueAnalysis | PipelineKind::Scan => match &task.repository {
                Some(repo) => self.resolve(repo).await.map(Some),
                None => Ok(None),
            },
        }
    }

    /// A scan's or issue analysis's repository with its revision resolved.
    async fn resolve(&self, repo: &RepositoryRef) -> Result<Prepared, Refused> {
        let cancel = CancellationToken::new();
        let commit = self
            .repositories
            .resolve(&repo.url, &repo.commit, &cancel)
            .await
            .map_err(|e| Refused::repository(None, &e))?;
        Ok(Prepared {
            repository: RepositoryRef {
                url: repo.url.clone(),
                commit,
                base: None,
            },
            revisions: GivenRevisions {
                head: repo.commit.clone(),
                base: None,
            },
            diff: None,
        })
    }

    async fn prepare_review(&self, task: &TaskRecord) -> Result<Prepared, Refused> {
        let Some(repo) = &task.repository else {
            return Err(Refused {
                kind: FailureKind::InvalidRequest,
                reason: "the review names no repository".to_owned(),
            });
        };
        let base = repo.base.clone().unwrap_or_default();
        let cancel = CancellationToken::new();
        let change = self
            .repositories
            .change(&repo.url, &base, &repo.commit, &cancel)
            .await
            .map_err(|e| {
                let context = format!("cannot read the change from `{base}` to `{}`", repo.commit);
                Refused::repository(Some(context), &e)
            })?;
        let diff = diff_pieces::prepare(
            self.inputs.as_ref(),
            &change.diff,
            task.settings.max_diff_bytes,
        )
        .await
        .map_err(|e| Refused {
            kind: FailureKind::Internal,
            reason: format!("cannot store the diff: {e}"),
        })?;
        Ok(Prepared {
            repository: RepositoryRef {
                url: repo.url.clone(),
                commit: change.head,
                base: Some(change.base),
            },
            revisions: GivenRevisions {
                head: repo.commit.clone(),
                base: repo.base.clone(),
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
    use crate::engine::fixture::{DIFF, Fixture, REPO, V1};
    use crate::task::StageStatus;

    const MAIN: &str = "0000000000000000000000000000000000000a11";
    const FEATURE: &str = "00000000000000000000000000000000000fea70";

    #[tokio::test(start_paused = true)]
    async fn a_review_starts_with_its_change_stored_in_pieces() {
        let fx = Fixture::new();
        fx.repositories.insert_revision(REPO, "main", MAIN);
        fx.repositories.insert_revision(REPO, "feature", FEATURE);
        fx.repositories.insert_change(REPO, MAIN, FEATURE, DIFF);
        let task = fx.queued_review().await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        let repository = started.repository.as_ref().unwrap();
        assert_eq!(
            (repository.commit.as_str(), repository.base.as_deref()),
            (FEATURE, Some(MAIN)),
            "stages work on the commits"
        );
        assert_eq!(
            started.revisions,
            Some(GivenRevisions {
                head: "feature".to_owned(),
                base: Some("main".to_owned())
            }),
            "the revisions as given are kept"
        );
        let request = &started.stage("summary").unwrap().request;
        assert_eq!(request.repository.as_ref().unwrap().commit, FEATURE);
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
        assert_eq!(ended.failure_kind, Some(FailureKind::NotFound));
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with(
                "cannot read the change from `main` to `feature`: revision `main` was not found in repository https://example.test/shop.git; check the branch, tag or commit name"
            ),
            "{reason}"
        );
        assert!(fx.parts.records.active().await.unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_scan_works_on_the_commit_its_revision_names_at_intake() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        let queued = task.document(Vec::new()).repository.unwrap();
        assert_eq!((queued.revision.as_str(), queued.commit), ("v1", None));

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        assert_eq!(started.repository.as_ref().unwrap().commit, V1);
        let request = &started.stage("scan").unwrap().request;
        assert_eq!(request.repository.as_ref().unwrap().commit, V1);
        let shown = started.document(Vec::new()).repository.unwrap();
        assert_eq!(
            (shown.revision.as_str(), shown.commit.as_deref()),
            ("v1", Some(V1))
        );
        assert_eq!(started.failure_kind, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revision_that_does_not_exist_is_the_requests_mistake() {
        let fx = Fixture::new();
        let task = fx.queued_scan().await;
        fx.parts
            .records
            .update(&task.id, |t| {
                t.repository.as_mut().unwrap().commit = "no-such-branch".to_owned();
                pipeline::Effects::default()
            })
            .await
            .unwrap();

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::NotFound));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "revision `no-such-branch` was not found in repository https://example.test/shop.git; check the branch, tag or commit name, that it was pushed, and that the request names the right repository"
            )
        );
        let doc = ended.document(Vec::new());
        assert_eq!(doc.failure_kind, Some(FailureKind::NotFound));
        let shown = doc.repository.unwrap();
        assert_eq!(
            (shown.revision.as_str(), shown.commit),
            ("no-such-branch", None)
        );
        assert_eq!(fx.broker.depth(Route::Stages(Priority::Bulk)), 0);
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
