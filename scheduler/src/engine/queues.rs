//! What the broker says of its queues (SPEC O1): a loop of its own polls each queue's ready
//! messages and consumers every `scheduler.queue_stats_interval_seconds` into
//! `verdict_queue_messages{queue}` and `verdict_queue_consumers{queue}`. Each poll is bounded by
//! the broker's own timeout and runs beside the scheduler's other loops, so a broker that does
//! not answer only leaves the gauges at their last values (and counts
//! `verdict_queue_stats_failures_total{queue}`).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verdict_backends::broker::{Broker, Route};
use verdict_proto::wire::Priority;

use crate::metrics::SchedulerMetrics;

/// Every queue polled, with its `queue` label.
const QUEUES: [(Route, &str); 4] = [
    (Route::Stages(Priority::Interactive), "interactive"),
    (Route::Stages(Priority::Bulk), "bulk"),
    (Route::Results, "results"),
    (Route::DeadLetters, "dead"),
];

/// Polls every `interval` until `stop`; a poll that has begun finishes first.
pub(super) async fn poll_loop(
    broker: Arc<dyn Broker>,
    metrics: SchedulerMetrics,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        failing = poll(broker.as_ref(), &metrics, failing).await;
    }
}

/// One poll of every queue; returns whether any failed, and warns only when that begins.
async fn poll(broker: &dyn Broker, metrics: &SchedulerMetrics, was_failing: bool) -> bool {
    let mut failing = false;
    for (route, queue) in QUEUES {
        match broker.queue_stats(route).await {
            Ok(stats) => {
                metrics
                    .queue_messages
                    .with_label_values(&[queue])
                    .set(i64::try_from(stats.messages).unwrap_or(i64::MAX));
                metrics
                    .queue_consumers
                    .with_label_values(&[queue])
                    .set(i64::from(stats.consumers));
            }
            Err(e) => {
                metrics
                    .queue_stats_failures
                    .with_label_values(&[queue])
                    .inc();
                if !was_failing && !failing {
                    tracing::warn!(queue, error = %e, "QueueStatsFailed: the broker did not report a queue's counts; the gauges keep their last values");
                }
                failing = true;
            }
        }
    }
    failing
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_backends::broker::Message;
    use verdict_backends::broker::memory::MemoryBroker;

    use super::*;

    #[tokio::test]
    async fn a_poll_sets_each_queue_s_gauges_and_counts_failures() {
        let broker = MemoryBroker::new();
        let metrics = SchedulerMetrics::register(&prometheus::Registry::new()).unwrap();
        for _ in 0..3 {
            broker
                .publish(Route::Stages(Priority::Bulk), &Message::default())
                .await
                .unwrap();
        }
        let _results = broker.consume(Route::Results, 1).await.unwrap();
        assert!(!poll(&broker, &metrics, false).await);
        let gauge = |g: &prometheus::IntGaugeVec, q: &str| g.with_label_values(&[q]).get();
        assert_eq!(gauge(&metrics.queue_messages, "bulk"), 3);
        assert_eq!(gauge(&metrics.queue_messages, "interactive"), 0);
        assert_eq!(gauge(&metrics.queue_consumers, "results"), 1);

        broker.shutdown(Duration::ZERO).await;
        assert!(
            poll(&broker, &metrics, false).await,
            "a closed broker fails"
        );
        assert_eq!(gauge(&metrics.queue_messages, "bulk"), 3, "last value kept");
        let failures = metrics
            .queue_stats_failures
            .with_label_values(&["dead"])
            .get();
        assert_eq!(failures, 1);
    }
}
