//! Back-pressure from the backends (issue 14): before a task that can be submitted again is
//! admitted, the state store and the broker are asked whether they have room — Redis near its
//! `maxmemory`, RabbitMQ blocking publishers under a memory or disk alarm. Either refuses the
//! task as overloaded (`503` with `Retry-After`), nothing written, so the tasks already accepted
//! keep the room they need to finish. Both answers come from what the backends last measured
//! (no I/O here), and a loop of its own copies them into `verdict_backend_pressure{backend}`
//! every second, so operators and alerts see intake held back even while nobody submits.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGaugeVec;
use tokio_util::sync::CancellationToken;
use verdict_backends::broker::Broker;
use verdict_backends::store::Capacity;

use crate::service::ServiceError;

/// How often the gauge is brought up to date.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// What a refused client is asked to wait: long enough for an operator's alert to fire, short
/// enough that intake resumes soon after the pressure eases.
pub(crate) const RETRY_AFTER_SECS: u64 = 30;

/// The backends admission asks, and the gauge their answers go to.
#[derive(Debug, Clone)]
pub(super) struct Pressure {
    store: Arc<dyn Capacity>,
    broker: Arc<dyn Broker>,
    gauge: IntGaugeVec,
}

impl Pressure {
    pub(super) fn new(
        store: Arc<dyn Capacity>,
        broker: Arc<dyn Broker>,
        gauge: IntGaugeVec,
    ) -> Self {
        Pressure {
            store,
            broker,
            gauge,
        }
    }

    /// Each backend's pressure now, by its `backend` label.
    fn read(&self) -> [(&'static str, Option<String>); 2] {
        [
            ("redis", self.store.pressure()),
            ("broker", self.broker.pressure()),
        ]
    }

    fn record(&self, readings: &[(&'static str, Option<String>)]) {
        for (backend, reason) in readings {
            self.gauge
                .with_label_values(&[backend])
                .set(i64::from(reason.is_some()));
        }
    }

    /// `Ok` when every backend has room; otherwise the refusal, naming each that has none.
    pub(super) fn check(&self) -> Result<(), ServiceError> {
        let readings = self.read();
        self.record(&readings);
        let reasons: Vec<String> = readings.into_iter().filter_map(|(_, r)| r).collect();
        if reasons.is_empty() {
            return Ok(());
        }
        Err(ServiceError::Overloaded {
            reason: format!(
                "new tasks wait: {}; nothing was created, submit again in {RETRY_AFTER_SECS} s (Retry-After)",
                reasons.join("; ")
            ),
            retry_after_secs: RETRY_AFTER_SECS,
        })
    }

    /// Keeps the gauge current until `stop`, and logs when a backend's pressure begins (with
    /// its reason) and ends.
    pub(super) async fn sample_loop(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(SAMPLE_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut held = [false; 2];
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let readings = self.read();
            self.record(&readings);
            for ((backend, reason), was) in readings.iter().zip(held.iter_mut()) {
                match (reason, *was) {
                    (Some(reason), false) => tracing::warn!(
                        backend,
                        reason = reason.as_str(),
                        "BackendPressureBegan: new submissions are refused as overloaded"
                    ),
                    (None, true) => {
                        tracing::info!(
                            backend,
                            "BackendPressureEnded: new submissions are taken again"
                        );
                    }
                    _ => {}
                }
                *was = reason.is_some();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_backends::broker::memory::MemoryBroker;
    use verdict_backends::store::memory::MemoryStore;

    use super::*;
    use crate::metrics::SchedulerMetrics;

    #[test]
    fn each_backend_out_of_room_refuses_and_is_counted_until_it_has_room() {
        let store = Arc::new(MemoryStore::new());
        let broker = Arc::new(MemoryBroker::new());
        let metrics = SchedulerMetrics::register(&prometheus::Registry::new()).unwrap();
        let pressure = Pressure::new(
            store.clone(),
            broker.clone(),
            metrics.backend_pressure.clone(),
        );
        let gauge = |b: &str| metrics.backend_pressure.with_label_values(&[b]).get();
        assert_eq!(pressure.check(), Ok(()));

        store.set_pressure(Some("Redis at 95 % of its maxmemory".into()));
        broker.set_pressure(Some("RabbitMQ resource alarm: low on memory".into()));
        let Err(ServiceError::Overloaded {
            reason,
            retry_after_secs,
        }) = pressure.check()
        else {
            panic!("expected overloaded");
        };
        assert_eq!(retry_after_secs, RETRY_AFTER_SECS);
        assert!(
            reason.contains("95 % of its maxmemory") && reason.contains("low on memory"),
            "{reason}"
        );
        assert_eq!((gauge("redis"), gauge("broker")), (1, 1));

        store.set_pressure(None);
        assert!(pressure.check().is_err(), "the broker still has no room");
        assert_eq!((gauge("redis"), gauge("broker")), (0, 1));
        broker.set_pressure(None);
        assert_eq!(pressure.check(), Ok(()));
        assert_eq!((gauge("redis"), gauge("broker")), (0, 0));
    }
}
