//! Subscriptions: one channel per subscription with `basic_qos(prefetch)` and manual acks, fed into
//! [`Deliveries`] by a task that outlives connection losses and broker-side cancellations (queue
//! deleted, node failover): it re-declares and consumes again instead of ending the stream, which
//! ends only on shutdown (SPEC Q1, Q4, Q5; lapin issues #389/#420 are why "the stream ended" is
//! never taken as "done").
//!
//! A subscription the application drops stops its consumer but keeps its channel open until every
//! delivery it handed out is settled (a worker drops its subscriptions first and finishes its
//! stages afterwards); a delivery dropped unsettled is rejected back to its queue at once rather
//! than holding a prefetch slot until the channel closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::StreamExt;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions};
use lapin::options::{BasicQosOptions, BasicRejectOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Consumer};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::link::{Link, Role};
use super::{Shared, message};
use crate::BoxFuture;
use crate::broker::{AckStatus, Acknowledge, BrokerError, Deliveries, Delivery, Message, Route};

/// Buffered deliveries when prefetch is 0 (AMQP's "unlimited"): the broker may push more, which
/// then wait in lapin's buffer.
const UNLIMITED_PREFETCH_BUFFER: usize = 256;

/// One subscription as health checks see it.
#[derive(Debug)]
pub(super) struct Subscription {
    pub(super) route: Route,
    /// A consumer is registered on the broker right now.
    pub(super) alive: AtomicBool,
    /// The application dropped its [`Deliveries`]: no longer counted by health.
    pub(super) finished: AtomicBool,
}

/// A live consumer on one connection generation.
struct Live {
    generation: u64,
    channel: Channel,
    consumer: Consumer,
}

/// Why a live consumer stopped.
enum End {
    /// Shutdown: stop consuming, keep the channel so held deliveries can still be settled.
    Stopped,
    /// The application dropped its [`Deliveries`]; the deliveries it holds are still settled on
    /// this channel.
    Unsubscribed,
    /// The broker cancelled the consumer (queue deleted, …).
    Cancelled,
    /// The channel or connection failed.
    Failed(lapin::Error),
}

/// Starts a subscription: the first consumer is opened here, so a broken setup fails the call.
pub(super) async fn subscribe(
    shared: &Arc<Shared>,
    route: Route,
    prefetch: u16,
) -> Result<Deliveries, BrokerError> {
    if shared.stop_consuming.is_cancelled() {
        return Err(BrokerError::Closed(
            "the broker is shutting down; no new subscriptions".to_owned(),
        ));
    }
    let deadline = Instant::now() + shared.config.publish_timeout;
    let link = shared.wait_link(Role::Consuming, Some(deadline)).await?;
    let live = match open(shared, &link, route, prefetch).await {
        Ok(live) => live,
        Err(error) if is_not_found(&error) => {
            shared
                .topology
                .declare(&link.connection, &shared.config)
                .await?;
            open(shared, &link, route, prefetch)
                .await
                .map_err(|e| consume_error(shared, route, &e))?
        }
        Err(error) => return Err(consume_error(shared, route, &error)),
    };
    let capacity = match prefetch {
        0 => UNLIMITED_PREFETCH_BUFFER,
        n => usize::from(n),
    };
    let (tx, rx) = mpsc::channel(capacity);
    let subscription = Arc::new(Subscription {
        route,
        alive: AtomicBool::new(true),
        finished: AtomicBool::new(false),
    });
    {
        let mut subscriptions = shared
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscriptions.retain(|s| !s.finished.load(Ordering::SeqCst));
        subscriptions.push(Arc::clone(&subscription));
    }
    let task = tokio::spawn(run(Arc::clone(shared), subscription, tx, prefetch, live));
    let mut tasks = shared.tasks.lock().unwrap_or_else(PoisonError::into_inner);
    tasks.retain(|t| !t.is_finished());
    tasks.push(task);
    Ok(Deliveries::new(rx))
}

async fn open(
    shared: &Shared,
    link: &Link,
    route: Route,
    prefetch: u16,
) -> Result<Live, lapin::Error> {
    let channel = link.connection.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions { global: false })
        .await?;
    let queue = shared.topology.queue(route);
    let consumer = channel
        .basic_consume(
            ShortString::from(queue.as_str()),
            ShortString::default(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(Live {
        generation: link.generation,
        channel,
        consumer,
    })
}

/// Feeds one subscription until shutdown or until the application unsubscribes.
async fn run(
    shared: Arc<Shared>,
    subscription: Arc<Subscription>,
    tx: mpsc::Sender<Delivery>,
    prefetch: u16,
    first: Live,
) {
    let queue = shared.topology.queue(subscription.route);
    // Deliveries of this subscription handed out and not yet settled or dropped.
    let held = Arc::new(watch::Sender::new(0));
    let mut delays = retry_delays(&shared);
    let mut next = Some(first);
    let mut redeclare = false;
    loop {
        let live = match next.take() {
            Some(live) => live,
            None => match reopen(&shared, &tx, subscription.route, prefetch, redeclare).await {
                Reopen::Live(live) => *live,
                Reopen::Retry { redeclare: again } => {
                    redeclare = again;
                    tokio::select! {
                        _ = tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(1))) => {}
                        _ = shared.stop_consuming.cancelled() => break,
                        _ = tx.closed() => break,
                    }
                    continue;
                }
                Reopen::Stop => break,
            },
        };
        subscription.alive.store(true, Ordering::SeqCst);
        delays = retry_delays(&shared);
        let Live {
            generation,
            channel,
            mut consumer,
        } = live;
        let end = pump(&shared, &mut consumer, &tx, subscription.route, &held).await;
        if matches!(end, End::Unsubscribed) {
            // Health stops counting it first, so it never looks like a dead consumer while the
            // deliveries it handed out are settled.
            subscription.finished.store(true, Ordering::SeqCst);
        }
        subscription.alive.store(false, Ordering::SeqCst);
        match end {
            End::Stopped => {
                let cancel = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
                let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, cancel).await;
                // Held deliveries are settled on this channel; it closes with the connection.
                shared
                    .parked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(channel);
                break;
            }
            End::Unsubscribed => {
                unsubscribe(&shared, channel, consumer, &held).await;
                break;
            }
            End::Cancelled => {
                tracing::warn!(
                    queue,
                    generation,
                    "the broker cancelled the consumer (queue deleted or moved); re-declaring \
                     and consuming again"
                );
                let close = channel.close(200, "consumer cancelled".into());
                let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, close).await;
                redeclare = true;
            }
            End::Failed(error) => {
                tracing::warn!(
                    queue,
                    generation,
                    error = %shared.config.scrub(&error.to_string()),
                    "consumer channel failed; consuming again once connected"
                );
                shared.consuming.nudge();
                redeclare = is_not_found(&error);
            }
        }
    }
    subscription.alive.store(false, Ordering::SeqCst);
    if tx.is_closed() {
        subscription.finished.store(true, Ordering::SeqCst);
    }
}

enum Reopen {
    Live(Box<Live>),
    Retry { redeclare: bool },
    Stop,
}

async fn reopen(
    shared: &Shared,
    tx: &mpsc::Sender<Delivery>,
    route: Route,
    prefetch: u16,
    redeclare: bool,
) -> Reopen {
    let link = tokio::select! {
        link = shared.wait_link(Role::Consuming, None) => match link {
            Ok(link) => link,
            Err(_) => return Reopen::Stop,
        },
        _ = shared.stop_consuming.cancelled() => return Reopen::Stop,
        _ = tx.closed() => return Reopen::Stop,
    };
    if redeclare
        && let Err(error) = shared
            .topology
            .declare(&link.connection, &shared.config)
            .await
    {
        tracing::warn!(%error, "re-declaring the topology failed; retrying");
        return Reopen::Retry { redeclare: true };
    }
    match open(shared, &link, route, prefetch).await {
        Ok(live) => Reopen::Live(Box::new(live)),
        Err(error) => {
            tracing::warn!(
                error = %shared.config.scrub(&error.to_string()),
                queue = shared.topology.queue(route),
                "consuming again failed; retrying"
            );
            shared.consuming.nudge();
            Reopen::Retry {
                redeclare: is_not_found(&error),
            }
        }
    }
}

/// Stops the consumer of a subscription the application dropped: what RabbitMQ sent but the
/// application never received goes back to the queue, and the channel stays open until the
/// deliveries the application holds are settled (or shutdown parks it).
async fn unsubscribe(
    shared: &Shared,
    channel: Channel,
    mut consumer: Consumer,
    held: &watch::Sender<usize>,
) {
    let cancel = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
    let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, cancel).await;
    // After the cancel, the stream yields what was already in lapin's buffer, then ends.
    let give_back = async {
        while let Some(Ok(delivery)) = consumer.next().await {
            let _ = delivery
                .acker
                .reject(BasicRejectOptions { requeue: true })
                .await;
        }
    };
    let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, give_back).await;
    let mut settled = held.subscribe();
    let all_settled = async {
        let _ = settled.wait_for(|n| *n == 0).await;
    };
    let shutting_down = tokio::select! {
        () = all_settled => false,
        () = shared.stop_consuming.cancelled() => true,
    };
    if shutting_down {
        // The held deliveries are settled within the shutdown grace, on this channel.
        shared
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(channel);
    } else {
        let close = channel.close(200, "unsubscribed".into());
        let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, close).await;
    }
}

/// Moves deliveries from the consumer into the application's channel.
async fn pump(
    shared: &Shared,
    consumer: &mut Consumer,
    tx: &mpsc::Sender<Delivery>,
    route: Route,
    held: &Arc<watch::Sender<usize>>,
) -> End {
    let queue = shared.topology.queue(route);
    loop {
        let item = tokio::select! {
            biased;
            _ = shared.stop_consuming.cancelled() => return End::Stopped,
            _ = tx.closed() => return End::Unsubscribed,
            item = consumer.next() => item,
        };
        let delivery = match item {
            None => return End::Cancelled,
            Some(Err(error)) => return End::Failed(error),
            Some(Ok(delivery)) => delivery,
        };
        let delivery = to_delivery(shared, delivery, route, &queue, held);
        tokio::select! {
            sent = tx.send(delivery) => if sent.is_err() { return End::Unsubscribed },
            // The unsent delivery is dropped unacked: the broker redelivers it.
            _ = shared.stop_consuming.cancelled() => return End::Stopped,
        }
    }
}

fn to_delivery(
    shared: &Shared,
    delivery: lapin::message::Delivery,
    route: Route,
    queue: &str,
    held: &Arc<watch::Sender<usize>>,
) -> Delivery {
    let lapin::message::Delivery {
        redelivered,
        properties,
        data,
        acker,
        ..
    } = delivery;
    let headers = if route == Route::DeadLetters {
        message::dead_letter_headers(&properties)
    } else {
        message::headers(&properties)
    };
    Delivery {
        message: Message {
            body: data,
            headers,
        },
        redelivered,
        delivery_count: message::delivery_count(&properties),
        acker: Box::new(AmqpAcker {
            acker,
            queue: queue.to_owned(),
            unsettled: Mutex::new(Some(Unsettled::new([
                Arc::clone(&shared.outstanding),
                Arc::clone(held),
            ]))),
        }),
    }
}

/// Counts a delivery as outstanding, for the broker and for its subscription, until it is settled
/// or dropped, so shutdown and an unsubscribed channel know when the application is done with
/// everything it received.
struct Unsettled([Arc<watch::Sender<usize>>; 2]);

impl Unsettled {
    fn new(counters: [Arc<watch::Sender<usize>>; 2]) -> Unsettled {
        for counter in &counters {
            counter.send_modify(|n| *n += 1);
        }
        Unsettled(counters)
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        for counter in &self.0 {
            counter.send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

struct AmqpAcker {
    acker: lapin::Acker,
    queue: String,
    /// Taken by the first settlement; a second one is a caller bug.
    unsettled: Mutex<Option<Unsettled>>,
}

impl AmqpAcker {
    fn begin(&self, action: &str) -> Result<Unsettled, BrokerError> {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| {
                BrokerError::Other(format!(
                    "{action} of a delivery from {} that was already acknowledged or requeued; \
                     settle each delivery exactly once",
                    self.queue
                ))
            })
    }

    /// `Ok(false)` from lapin means the acker is poisoned: its channel died (connection lost and
    /// recovered since), so the ack never reaches the broker, which redelivers the message. A
    /// channel or connection found closed when sending means the same. Other errors (an I/O
    /// failure while sending) leave it open whether the broker got it.
    fn status(
        &self,
        action: &str,
        result: Result<bool, lapin::Error>,
    ) -> Result<AckStatus, BrokerError> {
        match result {
            Ok(true) => Ok(AckStatus::Done),
            Ok(false) => Ok(AckStatus::Stale),
            Err(error)
                if matches!(
                    error.kind(),
                    lapin::ErrorKind::InvalidChannel(_)
                        | lapin::ErrorKind::InvalidChannelState(..)
                        | lapin::ErrorKind::InvalidConnectionState(_)
                ) =>
            {
                Ok(AckStatus::Stale)
            }
            Err(error) => Err(BrokerError::Closed(format!(
                "{action} of a delivery from {}: {error}; the broker redelivers it if the {action} \
                 did not arrive",
                self.queue
            ))),
        }
    }
}

impl Acknowledge for AmqpAcker {
    fn ack(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>> {
        Box::pin(async move {
            let _unsettled = self.begin("ack")?;
            let result = self.acker.ack(BasicAckOptions::default()).await;
            self.status("ack", result)
        })
    }

    /// `basic.reject` with requeue: RabbitMQ counts it toward the delivery limit on 3.x; 4.3+
    /// may count rejects and nacks differently, which callers must not depend on.
    fn requeue(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>> {
        Box::pin(async move {
            let _unsettled = self.begin("requeue")?;
            let result = self
                .acker
                .reject(BasicRejectOptions { requeue: true })
                .await;
            self.status("requeue", result)
        })
    }
}

impl Drop for AmqpAcker {
    /// A delivery dropped unsettled (a handler that panicked, a subscription dropped with
    /// deliveries still buffered) is rejected back to its queue at once; like a requeue, it counts
    /// toward the delivery limit. Without a runtime to send the reject, closing the channel gives
    /// it back later.
    fn drop(&mut self) {
        let unsettled = self
            .unsettled
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (Some(unsettled), Ok(runtime)) = (unsettled, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let acker = self.acker.clone();
        runtime.spawn(async move {
            let reject = acker.reject(BasicRejectOptions { requeue: true });
            let _ = tokio::time::timeout(super::GOODBYE_TIMEOUT, reject).await;
            // Settled only now, so an unsubscribed channel is not closed under the reject.
            drop(unsettled);
        });
    }
}

fn retry_delays(shared: &Shared) -> impl Iterator<Item = Duration> + use<> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(shared.config.reconnect_max_delay)
        .with_jitter()
        .without_max_times()
        .build()
}

fn is_not_found(error: &lapin::Error) -> bool {
    matches!(error.kind(), lapin::ErrorKind::ProtocolError(amqp)
        if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

fn consume_error(shared: &Shared, route: Route, error: &lapin::Error) -> BrokerError {
    BrokerError::Closed(shared.config.scrub(&format!(
        "consume from {}: {error}",
        shared.topology.queue(route)
    )))
}
