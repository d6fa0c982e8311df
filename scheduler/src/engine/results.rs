//! Stage results coming back from workers: each delivery decoded and applied to its task as a
//! transition, and acknowledged only once the task record holds it. A result that cannot be
//! decoded, or names no known task, is dead-lettered (marked as a stage result, for the dead
//! letter consumer that ends its task); one that could not be applied is given back for a later
//! try.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use tracing::Instrument as _;
use verdict_backends::broker::{Broker, Delivery};
use verdict_backends::clock::Clock;
use verdict_proto::wire::{self, StageResult};

use super::dead_letters::{FROM_RESULTS, ORIGIN_HEADER};
use super::transition::Transitions;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::service::ServiceError;
use verdict_policy::pipeline;

/// How long a result that could not be applied is held before it is requeued, so a store outage
/// is not a busy loop.
const REQUEUE_PAUSE: Duration = Duration::from_millis(500);

/// Applies stage results; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Results {
    transitions: Transitions,
    broker: Arc<dyn Broker>,
    clock: Arc<dyn Clock>,
    /// Largest stage-result message accepted.
    message_max_bytes: usize,
    applied: IntCounterVec,
    dead_letters: IntCounterVec,
}

impl Results {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        parts: &Parts,
    ) -> Results {
        Results {
            transitions: parts.transitions.clone(),
            broker: deps.broker.clone(),
            clock: deps.clock.clone(),
            message_max_bytes: settings.message_max_bytes,
            applied: deps.metrics.results.clone(),
            dead_letters: deps.metrics.dead_letters.clone(),
        }
    }

    /// Applies one stage result and settles its delivery.
    pub(super) async fn handle(&self, delivery: Delivery) {
        let result =
            match wire::decode::<StageResult>(&delivery.message.body, self.message_max_bytes) {
                Ok(r) => r,
                Err(e) => {
                    self.dead_letters.with_label_values(&["results"]).inc();
                    tracing::warn!(error = %e, "dead-lettering a poison stage result");
                    self.dead_letter(&delivery, &e.to_string()).await;
                    return;
                }
            };
        let now = self.clock.now_unix_ms();
        // A child of the worker's span that published the result, in the task's trace.
        let span = tracing::info_span!(
            "apply_result",
            task_id = %result.task_id,
            stage_id = %result.stage_id,
            outcome = result.outcome.label(),
        );
        verdict_backends::trace::set_parent(&span, &delivery.message.headers);
        match self
            .transitions
            .apply(&result.task_id, |t| pipeline::on_result(t, &result, now))
            .instrument(span)
            .await
        {
            Ok(_) => {
                self.applied
                    .with_label_values(&[result.stage.as_str(), result.outcome.label()])
                    .inc();
                let _ = delivery.acker.ack().await;
            }
            Err(ServiceError::NotFound(id)) => {
                self.dead_letter(&delivery, &format!("stage result for unknown task {id}"))
                    .await;
            }
            Err(e) => {
                tracing::warn!(error = %e, task = %result.task_id, "stage result not applied; requeueing");
                tokio::time::sleep(REQUEUE_PAUSE).await;
                let _ = delivery.acker.requeue().await;
            }
        }
    }

    /// Moves the delivery's message to the dead-letter queue, marked as a stage result (the dead
    /// letter consumer ends its task by it), then acknowledges it; when the broker refuses the
    /// dead letter, the delivery is left unsettled rather than lost.
    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        let mut message = delivery.message.clone();
        message
            .headers
            .insert(ORIGIN_HEADER.to_owned(), FROM_RESULTS.to_owned());
        if self.broker.dead_letter(&message, reason).await.is_ok() {
            let _ = delivery.acker.ack().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use verdict_backends::broker::Route;
    use verdict_backends::store::memory::MemoryStore;
    use verdict_proto::outcome::{FailureKind, StageOutcome};
    use verdict_proto::wire::{StageKind, Usage, WIRE_VERSION};

    use super::*;
    use crate::engine::fixture::{Fixture, Unreachable};
    use verdict_api::document::TaskState;

    fn failed_scan(task_id: &str) -> Vec<u8> {
        wire::encode(&StageResult {
            version: WIRE_VERSION,
            task_id: task_id.to_owned(),
            stage_id: "scan".to_owned(),
            stage: StageKind::Scan,
            attempt: 1,
            outcome: StageOutcome::ExecutionFailure {
                kind: FailureKind::Auth,
                retryable: false,
                message: "HTTP 401".to_owned(),
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        })
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_is_applied_then_acknowledged() {
        let fx = Fixture::new();
        let task = fx.started_unpublished_scan().await;
        let results = Results::new(&fx.deps, &fx.settings, &fx.parts);

        results
            .handle(fx.result_delivery(failed_scan(&task.id)).await)
            .await;

        assert_eq!(fx.load(&task.id).await.state, TaskState::Incomplete);
        let applied = fx
            .metrics()
            .results
            .with_label_values(&["scan", "execution_failure"]);
        assert_eq!(applied.get(), 1);
        assert_eq!(fx.broker.depth(Route::Results), 0);
        assert!(fx.broker.dead_letters().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_poison_result_is_dead_lettered_and_acknowledged() {
        let fx = Fixture::new();
        let results = Results::new(&fx.deps, &fx.settings, &fx.parts);

        results
            .handle(fx.result_delivery(b"not json".to_vec()).await)
            .await;

        let dead = fx.broker.dead_letters();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].0.body, b"not json");
        assert!(dead[0].1.contains("stage result"), "{}", dead[0].1);
        assert_eq!(
            fx.metrics()
                .dead_letters
                .with_label_values(&["results"])
                .get(),
            1
        );
        assert_eq!(fx.broker.depth(Route::Results), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_for_an_unknown_task_is_dead_lettered_with_the_task_named() {
        let fx = Fixture::new();
        let results = Results::new(&fx.deps, &fx.settings, &fx.parts);

        results
            .handle(fx.result_delivery(failed_scan("gone")).await)
            .await;

        let dead = fx.broker.dead_letters();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].1, "stage result for unknown task gone");
        assert_eq!(fx.broker.depth(Route::Results), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_that_cannot_be_stored_is_requeued_after_a_pause() {
        let fx = Fixture::with_documents(Arc::new(Unreachable), Arc::new(MemoryStore::new()));
        let results = Results::new(&fx.deps, &fx.settings, &fx.parts);
        let delivery = fx.result_delivery(failed_scan("t1")).await;
        let start = tokio::time::Instant::now();

        results.handle(delivery).await;

        assert_eq!(start.elapsed(), REQUEUE_PAUSE);
        assert_eq!(fx.broker.depth(Route::Results), 1);
        assert!(fx.broker.dead_letters().is_empty());
    }
}
