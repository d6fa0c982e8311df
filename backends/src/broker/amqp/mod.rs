//! RabbitMQ behind the [`Broker`] trait (SPEC Q1, Q4, Q5), with lapin.
//!
//! # Layout
//! - `config`: settings, validated once; the URL's nodes; its password never leaves it
//!   unredacted.
//! - `topology`: every exchange, queue and binding, declared idempotently.
//! - `link`: the publishing and the consuming connection, each with its supervisor (reconnect
//!   with backoff through the nodes in turn, re-declare), and RabbitMQ's blocking of publishers.
//! - `publish`: confirmed, `mandatory`, persistent publishing within a deadline; returned
//!   messages are failures; a blocked connection is waited out, then a failure.
//! - `probe`: a message to nowhere every two seconds once pressure is asked about, so an alarm
//!   is known before anything needs publishing.
//! - `consume`: subscriptions that survive reconnects and broker-side cancellations; ackers that
//!   report stale acknowledgements.
//! - `message`: the mapping between [`Message`] and AMQP properties and headers.

mod config;
mod consume;
mod link;
mod message;
mod probe;
mod publish;
mod topology;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{AmqpConfig, url_problem};

use self::config::Node;
use self::link::{LinkCell, Role};
use self::publish::{CodeHost, Target};
use self::topology::{DELAY_HEADER, Topology};
use super::{
    Broker, BrokerError, BrokerHealth, DEAD_LETTER_REASON_HEADER, Deliveries, Message,
    QUEUE_STATS_TIMEOUT, QueueStats, Route, no_delayed_dead_letters,
};
use crate::BoxFuture;

/// The longest wait for a courtesy to an unresponsive broker (cancelling a consumer, closing a
/// channel or the connection): closing must not hang until a heartbeat timeout.
const GOODBYE_TIMEOUT: Duration = Duration::from_secs(5);

/// The RabbitMQ broker: a publishing connection with a pool of confirm-mode publisher channels,
/// and a consuming connection with one channel per subscription, each to one node of the URL's
/// list at a time. Share it behind an `Arc`; every method takes `&self`.
pub struct AmqpBroker {
    shared: Arc<Shared>,
}

/// What the broker's tasks share.
struct Shared {
    config: AmqpConfig,
    /// The URL's nodes, in the order written.
    nodes: Vec<Node>,
    topology: Topology,
    /// CodeHost channels, delayed publishes, declaring and deleting the topology.
    publishing: LinkCell,
    /// Subscriptions and their acknowledgements, dead letters taken, queue counts.
    consuming: LinkCell,
    /// Confirm-mode channels, each with at most one unconfirmed publish (see `publish`).
    publishers: Vec<tokio::sync::Mutex<Option<CodeHost>>>,
    /// Where the next publish starts looking for a free channel.
    next_publisher: AtomicUsize,
    subscriptions: Mutex<Vec<Arc<consume::Subscription>>>,
    /// Subscription tasks, joined on shutdown.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Channels whose consumers were cancelled by shutdown, kept open so the application can
    /// still settle what it holds.
    parked: Mutex<Vec<lapin::Channel>>,
    /// Deliveries handed out and not yet settled or dropped.
    outstanding: Arc<watch::Sender<usize>>,
    /// Shutdown, step 1: consumers stop.
    stop_consuming: CancellationToken,
    /// Shutdown, step 2: no more reconnecting; waiting publishes fail.
    closing: CancellationToken,
    /// Set by the first question about pressure, which starts the alarm probe.
    probing: std::sync::Once,
}

impl AmqpBroker {
    /// Connects (publishing, then consuming), declares the topology and starts the connections'
    /// supervisors. Each connection tries the URL's nodes in turn, starting with a node chosen at
    /// random so a pool's processes spread over the cluster; start-up fails when no node accepts
    /// one of them. Fails fast otherwise (no retries) so a wrong URL, wrong credentials or a
    /// conflicting topology surface at start-up; once connected, connection losses are recovered
    /// in the background.
    pub async fn connect(config: AmqpConfig) -> Result<AmqpBroker, BrokerError> {
        let nodes = config.validate()?;
        let publishers = (0..config.publish_channels)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        let first_node = usize::try_from(rand::random::<u32>()).unwrap_or(0) % nodes.len().max(1);
        let shared = Arc::new(Shared {
            topology: Topology::new(&config),
            config,
            nodes,
            publishing: LinkCell::new(Role::Publishing, first_node),
            consuming: LinkCell::new(Role::Consuming, first_node),
            publishers,
            next_publisher: AtomicUsize::new(0),
            subscriptions: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            parked: Mutex::new(Vec::new()),
            outstanding: Arc::new(watch::Sender::new(0)),
            stop_consuming: CancellationToken::new(),
            closing: CancellationToken::new(),
            probing: std::sync::Once::new(),
        });
        let broker = AmqpBroker { shared };
        let shared = &broker.shared;
        let publishing = link::start(shared, Role::Publishing).await?;
        // Both on the node that answered: a node that refused publishing is not asked again.
        shared.consuming.start_with(publishing.node_index);
        if let Err(error) = link::start(shared, Role::Consuming).await {
            broker.close().await;
            return Err(error);
        }
        tracing::info!(
            url = %shared.config.redacted_url(),
            node = publishing.node,
            nodes = shared.nodes.len(),
            prefix = shared.config.prefix,
            "connected to RabbitMQ"
        );
        Ok(broker)
    }

    /// The nodes the publishing and the consuming connection are connected to now (`host:port`
    /// as the URL lists them), `None` for one that is not connected: for operators and tests.
    pub fn connected_nodes(&self) -> (Option<String>, Option<String>) {
        let node = |cell: &LinkCell| {
            cell.current()
                .filter(|link| link.is_connected())
                .map(|link| link.node.clone())
        };
        (node(&self.shared.publishing), node(&self.shared.consuming))
    }

    pub fn config(&self) -> &AmqpConfig {
        &self.shared.config
    }

    /// Graceful shutdown (SPEC Q4): cancels every consumer so no new deliveries arrive (each
    /// [`Deliveries`] yields what it already buffered, then `None`), waits up to `grace` for the
    /// application to settle the deliveries it holds — publishing keeps working meanwhile — then
    /// closes the connection; RabbitMQ requeues whatever is still unsettled. Deliveries still
    /// buffered in a [`Deliveries`] count as held until received and settled, or until that
    /// `Deliveries` is dropped. Returns how many deliveries were left unsettled.
    async fn drain_and_close(&self, grace: Duration) -> usize {
        self.shared.stop_consuming.cancel();
        let subscription_tasks: Vec<_> = self.shared.lock_tasks().drain(..).collect();
        for task in subscription_tasks {
            let _ = task.await;
        }
        let mut outstanding = self.shared.outstanding.subscribe();
        let _ = tokio::time::timeout(grace, outstanding.wait_for(|n| *n == 0)).await;
        let unsettled = *outstanding.borrow();
        self.close().await;
        unsettled
    }

    /// Takes up to `max` messages off the dead-letter queue (`{prefix}.dead`) with their reason:
    /// verdict's own `x-verdict-dead-letter-reason`, or RabbitMQ's reason of the latest
    /// dead-lettering (e.g. `delivery_limit`). For operators draining the queue and for tests;
    /// the messages are removed. A scheduler consumes the same queue ([`Route::DeadLetters`]).
    pub async fn take_dead_letters(
        &self,
        max: usize,
    ) -> Result<Vec<(Message, String)>, BrokerError> {
        let deadline = tokio::time::Instant::now() + self.shared.config.publish_timeout;
        let link = self
            .shared
            .wait_link(Role::Consuming, Some(deadline))
            .await?;
        let channel = link
            .connection
            .create_channel()
            .await
            .map_err(|e| BrokerError::Closed(format!("open a channel: {e}")))?;
        let queue = self.shared.topology.dead_letter_queue();
        let mut out = Vec::new();
        while out.len() < max {
            let got = channel
                .basic_get(
                    queue.as_str().into(),
                    lapin::options::BasicGetOptions { no_ack: true },
                )
                .await
                .map_err(|e| BrokerError::Other(format!("read {queue}: {e}")))?;
            let Some(got) = got else { break };
            let mut headers = message::dead_letter_headers(&got.delivery.properties);
            let reason = headers
                .remove(DEAD_LETTER_REASON_HEADER)
                .unwrap_or_default();
            out.push((
                Message {
                    body: got.delivery.data.clone(),
                    headers,
                },
                reason,
            ));
        }
        let _ = channel.close(200, "done".into()).await;
        Ok(out)
    }

    /// A passive `queue.declare` of `route`'s queue on a channel of its own (a failed passive
    /// declare closes its channel), closed afterwards: ready messages and consumers as RabbitMQ
    /// counts them. The caller bounds the whole exchange with [`QUEUE_STATS_TIMEOUT`].
    async fn declare_passively(&self, route: Route) -> Result<QueueStats, BrokerError> {
        let link = self
            .shared
            .wait_link(
                Role::Consuming,
                Some(tokio::time::Instant::now() + QUEUE_STATS_TIMEOUT),
            )
            .await?;
        let channel = link
            .connection
            .create_channel()
            .await
            .map_err(|e| BrokerError::Closed(format!("open a channel: {e}")))?;
        let queue = self.shared.topology.queue(route);
        let declared = channel
            .queue_declare(
                queue.as_str().into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..lapin::options::QueueDeclareOptions::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .map_err(|e| BrokerError::Other(format!("read the counts of {queue}: {e}")));
        if channel.status().connected() {
            let _ = channel.close(200, "done".into()).await;
        }
        let declared = declared?;
        Ok(QueueStats {
            messages: u64::from(declared.message_count()),
            consumers: declared.consumer_count(),
        })
    }

    /// Deletes every queue and exchange of this broker's prefix, messages included. For tearing
    /// down a test or a decommissioned deployment; destructive by design. Best effort: what is
    /// already gone is skipped.
    pub async fn delete_topology(&self) -> Result<(), BrokerError> {
        let deadline = tokio::time::Instant::now() + self.shared.config.publish_timeout;
        let link = self
            .shared
            .wait_link(Role::Publishing, Some(deadline))
            .await?;
        let t = &self.shared.topology;
        let mut queues = vec![
            t.queue(Route::Stages(verdict_proto::wire::Priority::Interactive)),
            t.queue(Route::Stages(verdict_proto::wire::Priority::Bulk)),
            t.queue(Route::Results),
            t.dead_letter_queue(),
        ];
        queues.extend(t.delay_queues());
        let exchanges = [
            t.stages_exchange(),
            t.results_exchange(),
            t.delay_exchange(),
            t.dead_letter_exchange(),
        ];
        for queue in queues {
            // One channel each: a failed delete closes its channel.
            if let Ok(channel) = link.connection.create_channel().await {
                let _ = channel
                    .queue_delete(
                        queue.as_str().into(),
                        lapin::options::QueueDeleteOptions::default(),
                    )
                    .await;
            }
        }
        for exchange in exchanges {
            if let Ok(channel) = link.connection.create_channel().await {
                let _ = channel
                    .exchange_delete(
                        exchange.as_str().into(),
                        lapin::options::ExchangeDeleteOptions::default(),
                    )
                    .await;
            }
        }
        Ok(())
    }

    /// Closes both connections at once: consumers stop, waiting publishes fail with
    /// [`BrokerError::Closed`], unsettled deliveries go back to their queues.
    pub async fn close(&self) {
        self.shared.stop_consuming.cancel();
        self.shared.closing.cancel();
        let tasks: Vec<_> = self.shared.lock_tasks().drain(..).collect();
        for task in tasks {
            let _ = task.await;
        }
        let mut channels: Vec<lapin::Channel> = self
            .shared
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for slot in &self.shared.publishers {
            channels.extend(slot.lock().await.take().map(CodeHost::into_channel));
        }
        // Each channel closed while the connection is still up: a channel merely dropped closes
        // itself later in lapin's background, and that close, failing against the closing
        // connection, was logged as a connection error at every shutdown.
        let mut closes = tokio::task::JoinSet::new();
        for channel in channels {
            closes.spawn(async move {
                let _ = channel.close(200, "verdict shutting down".into()).await;
            });
        }
        let _ = tokio::time::timeout(GOODBYE_TIMEOUT, closes.join_all()).await;
        // Together: a publishing connection that RabbitMQ blocks cannot send its close and
        // takes the whole goodbye timeout.
        tokio::join!(
            self.shared.consuming.close(GOODBYE_TIMEOUT),
            self.shared.publishing.close(GOODBYE_TIMEOUT),
        );
    }

    async fn publish_message(
        &self,
        exchange: &str,
        routing_key: &str,
        label: &str,
        message: &Message,
        extra_headers: &[(&str, String)],
    ) -> Result<(), BrokerError> {
        let properties = message::properties(message, extra_headers)?;
        let target = Target {
            exchange,
            routing_key,
            label,
        };
        self.shared
            .publish_to(target, &message.body, properties)
            .await
    }
}

impl Shared {
    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The routing key of a route on its exchange.
fn routing_key(route: Route) -> &'static str {
    match route {
        Route::Stages(verdict_proto::wire::Priority::Interactive) => "interactive",
        Route::Stages(verdict_proto::wire::Priority::Bulk) => "bulk",
        Route::Results => "results",
        // The dead-letter exchange is a fanout; the key only names what it is.
        Route::DeadLetters => "dead-letter",
    }
}

impl Broker for AmqpBroker {
    fn publish<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            let topology = &self.shared.topology;
            let label = topology.queue(route);
            self.publish_message(
                &topology.exchange(route),
                routing_key(route),
                &label,
                message,
                &[],
            )
            .await
        })
    }

    /// A zero delay publishes directly; any other goes to the smallest delay bucket at least as
    /// long (or the longest bucket, when the delay exceeds them all).
    fn publish_delayed<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
        delay: Duration,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            if route == Route::DeadLetters {
                return Err(no_delayed_dead_letters());
            }
            if delay.is_zero() {
                return self.publish(route, message).await;
            }
            let topology = &self.shared.topology;
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX).max(1);
            let bucket = topology.bucket_for(delay_ms);
            let label = topology.delay_queue(bucket);
            self.publish_message(
                &topology.delay_exchange(),
                routing_key(route),
                &label,
                message,
                &[(DELAY_HEADER, bucket.to_string())],
            )
            .await
        })
    }

    fn delay_within(&self, limit: Duration) -> Duration {
        let limit_ms = crate::broker::millis(limit);
        Duration::from_millis(self.shared.topology.bucket_within(limit_ms))
    }

    fn dead_letter<'a>(
        &'a self,
        message: &'a Message,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            let topology = &self.shared.topology;
            self.publish_message(
                &topology.dead_letter_exchange(),
                "dead-letter",
                &topology.dead_letter_queue(),
                message,
                &[(DEAD_LETTER_REASON_HEADER, reason.to_owned())],
            )
            .await
        })
    }

    fn consume(
        &self,
        route: Route,
        prefetch: u16,
    ) -> BoxFuture<'_, Result<Deliveries, BrokerError>> {
        Box::pin(consume::subscribe(&self.shared, route, prefetch))
    }

    /// Connected means both connections are.
    fn health(&self) -> BrokerHealth {
        let connected =
            self.shared.publishing.is_connected() && self.shared.consuming.is_connected();
        let consumers_alive = self
            .shared
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|s| !s.finished.load(Ordering::SeqCst))
            .all(|s| s.alive.load(Ordering::SeqCst));
        BrokerHealth {
            connected,
            consumers_alive,
        }
    }

    /// What RabbitMQ said when it blocked the publishing connection, while it does. The first
    /// call starts the alarm probe (`probe`), so an alarm is seen within a few seconds even when
    /// nothing else is published.
    fn pressure(&self) -> Option<String> {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.shared
                .probing
                .call_once(|| drop(runtime.spawn(probe::run(Arc::clone(&self.shared)))));
        }
        self.shared.publishing.blocked_reason()
    }

    fn queue_stats(&self, route: Route) -> BoxFuture<'_, Result<QueueStats, BrokerError>> {
        Box::pin(async move {
            tokio::time::timeout(QUEUE_STATS_TIMEOUT, self.declare_passively(route))
                .await
                .unwrap_or_else(|_| {
                    Err(BrokerError::Other(format!(
                        "RabbitMQ did not report the counts of {} within {QUEUE_STATS_TIMEOUT:?}",
                        self.shared.topology.queue(route)
                    )))
                })
        })
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, usize> {
        Box::pin(self.drain_and_close(grace))
    }
}

impl fmt::Debug for AmqpBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpBroker")
            .field("config", &self.shared.config)
            .field("health", &self.health())
            .finish()
    }
}

impl Drop for AmqpBroker {
    /// Without `shutdown`/`close`, the background tasks still stop; lapin closes the connection
    /// when its last handle goes.
    fn drop(&mut self) {
        self.shared.stop_consuming.cancel();
        self.shared.closing.cancel();
    }
}
