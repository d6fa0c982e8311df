//! The outbox: stages are written `planned` in the update that decides them; this part publishes
//! them and marks them `dispatched`. A failure in between leaves them `planned` for the sweeper,
//! and workers deduplicate a stage published twice (SPEC E7).

use std::sync::Arc;

use prometheus::IntCounterVec;
use verdict_backends::broker::{Broker, Message, Route};
use verdict_proto::wire::{self, WireError};

use super::SchedulerDeps;
use super::records::TaskRecords;
use crate::pipeline::Effects;
use crate::task::{StageRecord, StageStatus};

/// Publishes planned stages; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Outbox {
    records: TaskRecords,
    broker: Arc<dyn Broker>,
    dispatches: IntCounterVec,
}

impl Outbox {
    pub fn new(deps: &SchedulerDeps, records: &TaskRecords) -> Outbox {
        Outbox {
            records: records.clone(),
            broker: deps.broker.clone(),
            dispatches: deps.metrics.dispatches.clone(),
        }
    }

    /// Publishes those of `stage_ids` that are still planned, unless the task has ended, then
    /// marks the published ones dispatched.
    pub async fn dispatch(&self, task_id: &str, stage_ids: &[String]) {
        let Ok(task) = self.records.load(task_id).await else {
            return;
        };
        if task.state.is_terminal() {
            return;
        }
        let mut published = Vec::new();
        for id in stage_ids {
            let Some(stage) = task.stage(id) else {
                continue;
            };
            if stage.status == StageStatus::Planned && self.publish(&task.id, stage).await {
                published.push(id.clone());
            }
        }
        if !published.is_empty() {
            self.mark_dispatched(task_id, &published).await;
        }
    }

    /// Publishes one stage request; whether the broker took it.
    async fn publish(&self, task_id: &str, stage: &StageRecord) -> bool {
        let message = match message(task_id, stage) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "stage request not encodable");
                return false;
            }
        };
        match self
            .broker
            .publish(Route::Stages(stage.request.priority), &message)
            .await
        {
            Ok(()) => {
                self.dispatches
                    .with_label_values(&[stage.kind.as_str()])
                    .inc();
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, task = %task_id, stage = %stage.id, "stage not published; the sweeper will retry");
                false
            }
        }
    }

    /// Moves published stages from `planned` to `dispatched`. Not written: the sweeper publishes
    /// them again later, which workers tolerate.
    async fn mark_dispatched(&self, task_id: &str, published: &[String]) {
        let _ = self
            .records
            .update(task_id, |t| {
                for id in published {
                    if let Some(s) = t.stage_mut(id)
                        && s.status == StageStatus::Planned
                    {
                        s.status = StageStatus::Dispatched;
                    }
                }
                Effects::default()
            })
            .await;
    }
}

/// A stage request as a message, with the task and stage in headers and the trace context.
fn message(task_id: &str, stage: &StageRecord) -> Result<Message, WireError> {
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
    verdict_backends::trace::inject(&mut message.headers);
    Ok(message)
}

#[cfg(test)]
mod tests {
    use verdict_proto::wire::Priority;

    use super::*;
    use crate::engine::fixture::Fixture;
    use crate::pipeline;

    const BULK: Route = Route::Stages(Priority::Bulk);

    #[tokio::test(start_paused = true)]
    async fn a_planned_stage_is_published_once_with_its_headers() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        let stages = ["scan".to_owned()];

        fx.parts.outbox.dispatch(&task.id, &stages).await;
        fx.parts.outbox.dispatch(&task.id, &stages).await;

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

        fx.parts
            .outbox
            .dispatch(&task.id, &["scan".to_owned()])
            .await;

        assert_eq!(
            fx.load(&task.id).await.stage("scan").unwrap().status,
            StageStatus::Planned
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

        fx.parts
            .outbox
            .dispatch(&task.id, &["scan".to_owned()])
            .await;

        assert_eq!(fx.broker.depth(BULK), 0);
    }
}
