//! A private corner of the shared RabbitMQ on 127.0.0.1:5672: every test gets a fresh name prefix
//! and a guard that deletes that prefix's queues and exchanges when the test ends, even by
//! panicking, so tests run in parallel and leave nothing behind. The shared broker is never
//! restarted.

use std::time::Duration;

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use verdict_backends::broker::amqp::AmqpConfig;

pub(crate) const RABBIT: &str = "127.0.0.1:5672";

pub(crate) fn url(address: &str) -> String {
    format!("amqp://guest:guest@{address}/%2f")
}

/// A config with a fresh prefix, changed by `adjust`; the guard deletes that prefix's topology
/// (including the delay queues `adjust` chose) when it is dropped.
pub(crate) fn config(adjust: impl FnOnce(&mut AmqpConfig)) -> (AmqpConfig, Cleanup) {
    let prefix = format!("test-{:016x}", rand::random::<u64>());
    let mut config = AmqpConfig::new(url(RABBIT));
    config.prefix = prefix.clone();
    config.connection_name = format!("verdict-{prefix}");
    config.reconnect_max_delay = Duration::from_millis(500);
    adjust(&mut config);
    let cleanup = Cleanup {
        prefix,
        buckets_ms: config
            .delay_buckets
            .iter()
            .map(|d| u64::try_from(d.as_millis()).unwrap())
            .collect(),
    };
    (config, cleanup)
}

/// Deletes a prefix's queues and exchanges on drop, from a thread of its own so it also runs
/// while a failed test unwinds (and inside a runtime, which cannot block).
pub(crate) struct Cleanup {
    prefix: String,
    buckets_ms: Vec<u64>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let p = self.prefix.clone();
        let mut queues: Vec<String> = ["stages.interactive", "stages.bulk", "results", "dead"]
            .iter()
            .map(|q| format!("{p}.{q}"))
            .collect();
        queues.extend(self.buckets_ms.iter().map(|ms| format!("{p}.delay.{ms}")));
        let exchanges: Vec<String> = ["stages", "results", "delay", "dlx"]
            .iter()
            .map(|e| format!("{p}.{e}"))
            .collect();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let Ok(connection) = raw_connection().await else {
                    return;
                };
                for queue in queues {
                    // One channel each: a failed delete closes its channel.
                    if let Ok(channel) = connection.create_channel().await {
                        let _ = channel
                            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                            .await;
                    }
                }
                for exchange in exchanges {
                    if let Ok(channel) = connection.create_channel().await {
                        let _ = channel
                            .exchange_delete(exchange.as_str().into(), Default::default())
                            .await;
                    }
                }
                let _ = connection.close(200, "cleaned up".into()).await;
            });
        })
        .join();
    }
}

/// A plain lapin connection, for looking behind the broker's back.
pub(crate) async fn raw_connection() -> lapin::Result<Connection> {
    Connection::connect(&url(RABBIT), ConnectionProperties::default()).await
}

/// Messages ready (not handed out) in `queue`.
pub(crate) async fn ready_count(queue: &str) -> u32 {
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "done".into()).await;
    declared.message_count()
}
