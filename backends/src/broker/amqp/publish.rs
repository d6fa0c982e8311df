//! Confirmed publishing (SPEC Q1): persistent, `mandatory`, a pool of publisher channels in confirm
//! mode, and a returned message treated as the failure it is even though RabbitMQ confirms it with
//! an ack. Everything a publish waits for has one deadline, `publish_timeout` (SPEC Q5): the
//! connection through an outage, RabbitMQ lifting a resource alarm that blocks the publishing
//! connection, the confirm. A publish either succeeds or returns an error, it is never dropped
//! and never hangs; one that timed out waiting for its confirm may still arrive (at-least-once).
//!
//! Publishes are serialised per channel (one unconfirmed message on each): lapin hands a returned
//! message to whichever confirm of that channel resolves next, and RabbitMQ may ack several
//! publishes at once, so only one outstanding publish makes "this confirm carried a return" mean
//! "this message was unroutable". Throughput comes from the pool instead (decision 167): a publish
//! takes the first free channel, so `publish_channels` confirms are in flight per process, where
//! one channel held one message per quorum-queue confirm round trip (a few milliseconds) and
//! capped a worker near 300 messages per second.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::AMQPErrorKind;
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Confirmation};
use tokio::time::Instant;

use super::Shared;
use super::link::Role;
use crate::broker::BrokerError;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The pause before publishing again after a connection-level failure.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause before sending a nacked message again.
const NACK_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How long a channel set aside after a publish timed out may take to close: long enough for a
/// resource alarm to clear, after which lapin sends the close.
const DISCARD_TIMEOUT: Duration = Duration::from_secs(600);

/// The publisher channel of one connection generation.
pub(super) struct CodeHost {
    generation: u64,
    channel: Channel,
}

impl CodeHost {
    /// The channel, for closing it.
    pub(super) fn into_channel(self) -> Channel {
        self.channel
    }
}

/// Where one message goes, and how to name it in errors.
pub(super) struct Target<'a> {
    pub(super) exchange: &'a str,
    pub(super) routing_key: &'a str,
    /// The destination as an operator would name it (`verdict.stages.interactive`, …).
    pub(super) label: &'a str,
}

impl Shared {
    /// Publishes on the publishing connection and waits for the confirm, all within
    /// `publish_timeout`: an outage is waited out ([`BrokerError::Connect`] at the deadline), so
    /// is RabbitMQ blocking the connection ([`BrokerError::Blocked`]) or refusing the message
    /// ([`BrokerError::Nacked`]: sent again on a new channel until then), and a confirm that
    /// does not come in time is [`BrokerError::Unconfirmed`] — the message may still arrive.
    pub(super) async fn publish_to(
        &self,
        target: Target<'_>,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), BrokerError> {
        let deadline = Instant::now() + self.config.publish_timeout;
        let exchange = short(target.exchange)?;
        let routing_key = short(target.routing_key)?;
        let mut nack_pause = RETRY_PAUSE;
        loop {
            let link = self.wait_link(Role::Publishing, Some(deadline)).await?;
            // Nothing is sent while RabbitMQ blocks the connection: lapin would hold it (and
            // every channel open) unwritten until the alarm clears.
            self.wait_unblocked(&link, target.label, deadline).await?;
            let mut slot = self.free_publisher().await;
            let reuse = match slot.as_ref() {
                Some(p) if p.generation == link.generation && p.channel.status().connected() => {
                    Some(p.channel.clone())
                }
                _ => None,
            };
            let send = async {
                let channel = match reuse {
                    Some(channel) => channel,
                    None => {
                        let channel = open(&link.connection).await?;
                        *slot = Some(CodeHost {
                            generation: link.generation,
                            channel: channel.clone(),
                        });
                        channel
                    }
                };
                let options = BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                };
                channel
                    .basic_publish(
                        exchange.clone(),
                        routing_key.clone(),
                        options,
                        body,
                        properties.clone(),
                    )
                    .await?
                    .await
            };
            let Ok(confirmation) = tokio::time::timeout_at(deadline, send).await else {
                // The channel may still get this message's confirm or return, which would then
                // be taken for the next publish's: it is not used again.
                if let Some(publisher) = slot.take() {
                    discard(publisher.channel);
                }
                if link.connection.status().blocked() {
                    return Err(self.blocked(target.label));
                }
                return Err(BrokerError::Unconfirmed {
                    route: target.label.to_owned(),
                    waited: self.config.publish_timeout,
                });
            };
            match confirmation {
                Ok(Confirmation::Ack(None)) => return Ok(()),
                Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                    return Err(BrokerError::Unroutable {
                        route: target.label.to_owned(),
                        reply_code: returned.reply_code,
                        reply_text: returned.reply_text.to_string(),
                    });
                }
                Ok(Confirmation::Nack(None)) => {
                    // RabbitMQ 3.10 lets a channel's quorum-queue client ask the node of the
                    // leader it first learnt of, and nack every publish while that node is down,
                    // even after another leader took over: only a new channel asks the queue
                    // again. A nack is rare otherwise (the queues have no length limit), so the
                    // channel is replaced and the message sent again until the deadline.
                    if let Some(publisher) = slot.take() {
                        discard(publisher.channel);
                    }
                    drop(slot);
                    if Instant::now() + nack_pause >= deadline {
                        return Err(BrokerError::Nacked {
                            route: target.label.to_owned(),
                        });
                    }
                    tracing::debug!(
                        destination = target.label,
                        "publish nacked; sending it again"
                    );
                    tokio::time::sleep(nack_pause).await;
                    nack_pause = (nack_pause * 2).min(NACK_PAUSE_MAX);
                }
                Ok(Confirmation::NotRequested) => {
                    *slot = None;
                    return Err(BrokerError::Other(format!(
                        "publishing to {}: the channel was not in confirm mode; this is a bug in \
                         verdict's broker, please report it",
                        target.label
                    )));
                }
                Err(error) => {
                    *slot = None;
                    drop(slot);
                    if let lapin::ErrorKind::ProtocolError(amqp) = error.kind()
                        && matches!(amqp.kind(), AMQPErrorKind::Soft(_))
                    {
                        // The broker closed the channel over this message (e.g. a deleted
                        // exchange): retrying would fail the same way.
                        return Err(BrokerError::Closed(format!(
                            "publishing to {}: the broker refused it: {}; the topology is \
                             re-declared on reconnect, or restart the process",
                            target.label,
                            amqp.get_message()
                        )));
                    }
                    // The message may or may not have arrived: publish again on the next
                    // connection (at-least-once; consumers are idempotent, SPEC E7).
                    self.retry_or_fail(&target, &error, deadline).await?;
                }
            }
        }
    }

    /// The first publisher channel no publish holds, starting after the last one handed out so
    /// the channels are used evenly; when all are busy, the next in turn.
    async fn free_publisher(&self) -> tokio::sync::MutexGuard<'_, Option<CodeHost>> {
        let count = self.publishers.len();
        let start = self.next_publisher.fetch_add(1, Ordering::Relaxed) % count;
        for offset in 0..count {
            if let Ok(slot) = self.publishers[(start + offset) % count].try_lock() {
                return slot;
            }
        }
        self.publishers[start].lock().await
    }

    /// After a connection-level failure: wake the supervisor and try again, unless the deadline
    /// has passed.
    async fn retry_or_fail(
        &self,
        target: &Target<'_>,
        error: &lapin::Error,
        deadline: Instant,
    ) -> Result<(), BrokerError> {
        self.publishing.nudge();
        if Instant::now() >= deadline {
            return Err(BrokerError::Closed(self.config.scrub(&format!(
                "publishing to {}: {error}; the connection did not recover within {:?}",
                target.label, self.config.publish_timeout
            ))));
        }
        tracing::debug!(%error, destination = target.label, "publish interrupted; retrying");
        // lapin may not have marked the connection dead yet; do not spin on it.
        tokio::time::sleep_until(deadline.min(Instant::now() + RETRY_PAUSE)).await;
        Ok(())
    }
}

/// Closes a publisher channel in the background: while RabbitMQ blocks the connection the close
/// cannot be sent, and no publish waits for it.
fn discard(channel: Channel) {
    tokio::spawn(async move {
        let close = channel.close(200, "publish timed out".into());
        let _ = tokio::time::timeout(DISCARD_TIMEOUT, close).await;
    });
}

async fn open(connection: &lapin::Connection) -> Result<Channel, lapin::Error> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

fn short(value: &str) -> Result<ShortString, BrokerError> {
    ShortString::try_new(value).map_err(|e| {
        BrokerError::Other(format!(
            "name {value:?} is not a valid AMQP exchange or routing key: {e}"
        ))
    })
}
