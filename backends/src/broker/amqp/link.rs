//! The connection to RabbitMQ and its recovery (SPEC Q5): one supervisor task owns the current
//! connection, notices its loss, reconnects with backoff forever (until close), re-declares the
//! topology and publishes the new [`Link`] to everyone waiting for it.
//!
//! An explicit loop rather than lapin's `enable_auto_recover`: lapin gives up after a fixed number
//! of attempts and replays only what this connection declared, while a consumer cancelled by the
//! broker (queue deleted) needs the same re-declare-and-consume path anyway. Every channel of a
//! lost connection is dead, so ackers from before the loss report themselves stale (their `ack`
//! returns `Ok(false)`) and the broker redelivers those messages.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::StreamExt;
use lapin::types::LongString;
use lapin::{Connection, ConnectionProperties};
use tokio::time::Instant;

use super::Shared;
use crate::broker::BrokerError;

/// How often the supervisor looks at the connection state even without an event: a safety net
/// under lapin's error events, cheap because it reads local state only.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The first pause between reconnection attempts.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(100);

/// One established connection. A new connection is a new `Link` with a higher generation, so
/// holders of the old one can tell they must reopen their channels.
pub(super) struct Link {
    pub(super) generation: u64,
    pub(super) connection: Connection,
}

impl Link {
    pub(super) fn is_connected(&self) -> bool {
        self.connection.status().connected()
    }
}

/// Connects and declares the topology: what start-up and every reconnection do.
pub(super) async fn establish(shared: &Shared) -> Result<Connection, BrokerError> {
    let config = &shared.config;
    let properties = ConnectionProperties::default()
        .with_connection_name(LongString::from(config.connection_name.as_str()));
    let connection = Connection::connect(&config.url, properties)
        .await
        .map_err(|e| BrokerError::Connect {
            url: config.redacted_url(),
            reason: config.scrub(&e.to_string()),
        })?;
    if let Err(error) = shared.topology.declare(&connection, config).await {
        let _ = connection.close(200, "topology refused".into()).await;
        return Err(error);
    }
    Ok(connection)
}

impl Shared {
    /// The current link once it is connected; waits through an outage until `deadline` (or for
    /// as long as it takes, without one).
    pub(super) async fn wait_link(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Arc<Link>, BrokerError> {
        let mut changes = self.link.subscribe();
        loop {
            if self.closing.is_cancelled() {
                return Err(BrokerError::Closed(
                    "the broker connection was shut down".to_owned(),
                ));
            }
            let current = changes.borrow_and_update().clone();
            if let Some(link) = current
                && link.is_connected()
            {
                return Ok(link);
            }
            tokio::select! {
                _ = changes.changed() => {}
                // Polled as well: a dead connection may not have been replaced yet.
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = self.closing.cancelled() => {}
                _ = until(deadline) => {
                    return Err(BrokerError::Connect {
                        url: self.config.redacted_url(),
                        reason: format!(
                            "not reconnected within {:?} (publish_timeout); the broker is \
                             unreachable or refusing the connection",
                            self.config.publish_timeout
                        ),
                    });
                }
            }
        }
    }

    /// Asks the supervisor to look at the connection now (a caller saw an error).
    pub(super) fn nudge(&self) {
        self.nudge.notify_one();
    }
}

/// Runs until [`Shared::closing`]: watches the current connection and replaces it when it dies.
pub(super) async fn supervise(shared: Arc<Shared>) {
    loop {
        let Some(link) = shared.link.borrow().clone() else {
            return;
        };
        if !wait_for_loss(&shared, &link).await {
            return;
        }
        shared.link.send_replace(None);
        tracing::warn!(
            url = %shared.config.redacted_url(),
            generation = link.generation,
            "AMQP connection lost; reconnecting"
        );
        drop(link);
        let Some(link) = reconnect(&shared).await else {
            return;
        };
        tracing::info!(
            url = %shared.config.redacted_url(),
            generation = link.generation,
            "AMQP connection re-established"
        );
        shared.link.send_replace(Some(link));
    }
}

/// `true` when the connection is gone, `false` when closing was requested first.
async fn wait_for_loss(shared: &Shared, link: &Link) -> bool {
    let mut events = link.connection.events_listener();
    let mut events_open = true;
    loop {
        if !link.is_connected() {
            return true;
        }
        tokio::select! {
            _ = shared.closing.cancelled() => return false,
            _ = shared.nudge.notified() => {}
            event = events.next(), if events_open => events_open = event.is_some(),
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
    }
}

async fn reconnect(shared: &Shared) -> Option<Arc<Link>> {
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(RECONNECT_MIN_DELAY)
        .with_max_delay(shared.config.reconnect_max_delay)
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        if shared.closing.is_cancelled() {
            return None;
        }
        let attempt = tokio::select! {
            attempt = establish(shared) => attempt,
            // A connect attempt can hang on an unreachable host; close must not wait for it.
            _ = shared.closing.cancelled() => return None,
        };
        match attempt {
            Ok(connection) => {
                let generation = shared
                    .generation
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1;
                return Some(Arc::new(Link {
                    generation,
                    connection,
                }));
            }
            Err(error) => {
                tracing::warn!(%error, "AMQP reconnection attempt failed");
                let delay = delays.next().unwrap_or(shared.config.reconnect_max_delay);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shared.closing.cancelled() => return None,
                }
            }
        }
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
