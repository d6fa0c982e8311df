//! The outbox: stages are written `planned` in the update that decides them; this part publishes
//! them and marks them `dispatched`. A failure in between leaves them `planned` for the sweeper,
//! and workers deduplicate a stage published twice (SPEC E7). A request larger than the broker
//! carries (`broker.message_max_bytes`) is never published: it is handed back, and its task fails
//! with the reason (decision 117), rather than being dead-lettered by every worker.

use std::sync::Arc;

use prometheus::IntCounterVec;
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::clock::Clock;
use verdict_proto::wire::{self, WireError};

use super::records::TaskRecords;
use super::{SchedulerDeps, SchedulerSettings};
use verdict_policy::pipeline::Effects;
use verdict_policy::task::{StageRecord, StageStatus, TaskRecord};

/// A planned stage that was not published because no message can carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Uncarried {
    pub stage_id: String,
    /// In words, with the size and the setting.
    pub reason: String,
}

/// Publishes planned stages; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Outbox {
    records: TaskRecords,
    broker: Arc<dyn Broker>,
    /// The largest message the broker takes.
    message_max_bytes: usize,
    clock: Arc<dyn Clock>,
    dispatches: IntCounterVec,
}

/// What publishing one stage came to.
enum Published {
    Yes,
    /// Not now (the broker refused); the sweeper tries again.
    Later,
    Never(String),
}

impl Outbox {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        records: &TaskRecords,
    ) -> Outbox {
        Outbox {
            records: records.clone(),
            broker: deps.broker.clone(),
            message_max_bytes: settings.message_max_bytes,
            clock: deps.clock.clone(),
            dispatches: deps.metrics.dispatches.clone(),
        }
    }

    /// Publishes those of `stage_ids` that are still planned, unless the task has ended, then
    /// marks the published ones dispatched. Returns the stages no message can carry, for the
    /// caller to fail.
    pub(super) async fn dispatch(&self, task_id: &str, stage_ids: &[String]) -> Vec<Uncarried> {
        let Ok(task) = self.records.load(task_id).await else {
            return Vec::new();
        };
        self.dispatch_from(&task, stage_ids).await
    }

    /// [`Outbox::dispatch`] from `task` as it was just stored, without reading it again.
    pub(super) async fn dispatch_from(
        &self,
        task: &TaskRecord,
        stage_ids: &[String],
    ) -> Vec<Uncarried> {
        let task_id = task.id.as_str();
        if task.state.is_terminal() {
            return Vec::new();
        }
        let mut published = Vec::new();
        let mut uncarried = Vec::new();
        for id in stage_ids {
            let Some(stage) = task.stage(id) else {
                continue;
            };
            if stage.status != StageStatus::Planned {
                continue;
            }
            match self.publish(task, stage).await {
                Published::Yes => published.push(id.clone()),
                Published::Later => {}
                Published::Never(reason) => uncarried.push(Uncarried {
                    stage_id: id.clone(),
                    reason,
                }),
            }
        }
        if !published.is_empty() {
            self.mark_dispatched(task_id, &published).await;
        }
        uncarried
    }

    /// Publishes one stage request.
    async fn publish(&self, task: &TaskRecord, stage: &StageRecord) -> Published {
        let task_id = task.id.as_str();
        let message = match message(task, stage) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "stage request not encodable");
                return Published::Never(format!("its request cannot be encoded: {e}"));
            }
        };
        let size = message.body.len();
        if size > self.message_max_bytes {
            tracing::warn!(task = %task_id, stage = %stage.id, size, "stage request too large to publish");
            return Published::Never(format!(
                "its request is {size} bytes, above broker.message_max_bytes = {}, so it was not published; the task's texts (title, description, issue) or the material an earlier stage produced are too large for one message",
                self.message_max_bytes
            ));
        }
        match self
            .broker
            .publish(Route::Stages(stage.request.priority), &message)
            .await
        {
            Ok(()) => {
                self.dispatches
                    .with_label_values(&[stage.kind.as_str()])
                    .inc();
                Published::Yes
            }
            Err(e) => {
                tracing::warn!(error = %e, task = %task_id, stage = %stage.id, "stage not published; the sweeper will retry");
                Published::Later
            }
        }
    }

    /// Moves published stages from `planned` to `dispatched`. Not written: the sweeper publishes
    /// them again later, which workers tolerate.
    async fn mark_dispatched(&self, task_id: &str, published: &[String]) {
        let now = self.clock.now_unix_ms();
        let _ = self
            .records
            .update(task_id, |t| {
                for id in published {
                    if let Some(s) = t.stage_mut(id)
                        && matches!(s.status, StageStatus::Planned | StageStatus::Dispatched)
                    {
                        s.status = StageStatus::Dispatched;
                        s.dispatched_unix_ms = Some(now);
                    }
                }
                Effects::default()
            })
            .await;
    }

    /// Publishes stages already dispatched once more (the sweeper found them lost: neither a
    /// result nor a live claim long after publication), and notes when. Workers deduplicate the
    /// copy if the first one turns up after all (SPEC E7). Returns how many were published.
    pub(super) async fn republish(&self, task_id: &str, stage_ids: &[String]) -> usize {
        let Ok(task) = self.records.load(task_id).await else {
            return 0;
        };
        if task.state.is_terminal() {
            return 0;
        }
        let mut published = Vec::new();
        for id in stage_ids {
            let Some(stage) = task.stage(id) else {
                continue;
            };
            if stage.status == StageStatus::Dispatched
                && matches!(self.publish(&task, stage).await, Published::Yes)
            {
                published.push(id.clone());
            }
        }
        if !published.is_empty() {
            self.mark_dispatched(task_id, &published).await;
        }
        published.len()
    }
}

/// A stage request as a message, with the task and stage in headers and the task's trace
/// context, so the worker's stage span is a child of the task span (SPEC O2).
fn message(task: &TaskRecord, stage: &StageRecord) -> Result<Message, WireError> {
    let task_id = task.id.as_str();
    let mut message = Message {
        body: wire::encode(&stage.request)?,
        headers: Default::default(),
    };
    message
        .headers
        .insert("x-verdict-task".into(), task_id.to_owned());
    message
        .headers
        .insert("x-verdict-stage".into(), stage.id.clone());
    if task.trace.is_empty() {
        verdict_backends::trace::inject(&mut message.headers);
    } else {
        verdict_backends::trace::copy(&task.trace, &mut message.headers);
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::Fixture;
    use verdict_policy::pipeline;

    const BULK: Route = Route::Stages(Priority::Bulk);

    fn outbox(fx: &Fixture) -> Outbox {
        Outbox::new(&fx.deps, &fx.settings, &fx.parts.records)
    }

    #[tokio::test(start_paused = true)]
    async fn a_planned_stage_is_published_once_with_its_headers() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        let stages = ["scan".to_owned()];

        outbox(&fx).dispatch(&task.id, &stages).await;
        outbox(&fx).dispatch(&task.id, &stages).await;

        assert_eq!(fx.broker.depth(BULK), 1);
        assert_eq!(
            fx.load(&task.id).await.stage("scan").unwrap().status,
            StageStatus::Dispatched
        );
        assert_eq!(
            fx.metrics().dispatches.with_label_values(&["scan"]).get(),
            1
        );
        let mut stages = fx.broker.consume(BULK, 1).await.unwrap();
        let published = stages.next().await.unwrap().message;
        assert_eq!(published.headers["x-verdict-task"], task.id);
        assert_eq!(published.headers["x-verdict-stage"], "scan");
        let request: verdict_proto::wire::StageRequest =
            wire::decode(&published.body, usize::MAX).unwrap();
        assert_eq!(request, task.stage("scan").unwrap().request);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_publication_leaves_the_stage_planned() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        fx.broker.shutdown(std::time::Duration::ZERO).await;

        outbox(&fx).dispatch(&task.id, &["scan".to_owned()]).await;

        assert_eq!(
            fx.load(&task.id).await.stage("scan").unwrap().status,
            StageStatus::Planned
        );
        assert_eq!(
            fx.metrics().dispatches.with_label_values(&["scan"]).get(),
            0
        );
    }

    /// Belt and braces for issue 8, item 4: whatever made a request too large for one message,
    /// it is never published (every worker would dead-letter it); its task ends with the reason.
    #[tokio::test(start_paused = true)]
    async fn a_request_larger_than_a_message_fails_its_task_instead_of_being_published() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        fx.parts
            .records
            .update(&task.id, |t| {
                let inputs = &mut t.stage_mut("scan").unwrap().request.inputs;
                inputs.push(verdict_proto::wire::InputRef {
                    name: "summary (from the summary stage)".to_owned(),
                    content: verdict_proto::wire::InputContent::Inline {
                        text: "s".repeat(1 << 20),
                    },
                });
                pipeline::Effects::default()
            })
            .await
            .unwrap();

        fx.parts
            .transitions
            .dispatch(&task.id, &["scan".to_owned()])
            .await;

        assert_eq!(fx.broker.depth(BULK), 0);
        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, verdict_api::document::TaskState::Incomplete);
        assert_eq!(
            ended.failure_kind,
            Some(verdict_proto::outcome::FailureKind::InvalidRequest)
        );
        let reason = ended.reason.unwrap();
        assert!(
            reason.starts_with("stage scan could not run (invalid_request): its request is "),
            "{reason}"
        );
        assert!(
            reason.contains(
                "bytes, above broker.message_max_bytes = 1048576, so it was not published"
            ),
            "{reason}"
        );
        assert_eq!(
            fx.metrics().dispatches.with_label_values(&["scan"]).get(),
            0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_published_for_an_ended_task() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        let now = fx.now();
        fx.parts
            .records
            .update(&task.id, |t| {
                pipeline::cancel(t, "cancelled on request", now)
            })
            .await
            .unwrap();

        outbox(&fx).dispatch(&task.id, &["scan".to_owned()]).await;

        assert_eq!(fx.broker.depth(BULK), 0);
    }
}
