//! Seeing a RabbitMQ resource alarm before anything needs publishing (issue 14). RabbitMQ tells
//! a connection it is blocked (`connection.blocked`) only once that connection publishes under
//! the alarm, so a scheduler whose publishes wait for results that the alarm also holds back
//! would never learn of it, and would go on admitting tasks. Once asked about pressure, the
//! broker sends a tiny transient message every two seconds on the publishing connection, to a
//! routing key no queue is bound to (RabbitMQ drops it): under an alarm that publish makes the
//! connection blocked, and the notification names the alarm.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel};

use super::Shared;

/// Between two probes.
const EVERY: Duration = Duration::from_secs(2);

/// The longest a probe may take to leave: under an alarm lapin holds it back, and the next
/// probe starts afresh rather than waiting.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes until the broker closes. Started once, by the first question about pressure.
pub(super) async fn run(shared: Arc<Shared>) {
    let routing_key = format!("{}.alarm-probe", shared.config.prefix);
    // The channel of the publishing connection's current generation.
    let mut channel: Option<(u64, Channel)> = None;
    loop {
        tokio::select! {
            () = shared.closing.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let Some(link) = shared.publishing.current() else {
            continue;
        };
        if !link.is_connected() || link.connection.status().blocked() {
            // Not connected: nothing to learn. Blocked: already known, and unblocked is sent
            // without asking.
            continue;
        }
        let reusable = channel.as_ref().is_some_and(|(generation, c)| {
            *generation == link.generation && c.status().connected()
        });
        if !reusable {
            match tokio::time::timeout(SEND_TIMEOUT, link.connection.create_channel()).await {
                Ok(Ok(opened)) => channel = Some((link.generation, opened)),
                _ => continue,
            }
        }
        let Some((_, probe)) = channel.as_ref() else {
            continue;
        };
        let send = probe.basic_publish(
            "".into(),
            routing_key.as_str().into(),
            BasicPublishOptions::default(),
            &[],
            BasicProperties::default().with_delivery_mode(1),
        );
        if !matches!(tokio::time::timeout(SEND_TIMEOUT, send).await, Ok(Ok(_))) {
            channel = None;
        }
    }
}
