//! The message broker behind one small trait (SPEC Q1): stage requests out to workers, stage
//! results back to the scheduler, delayed retries, and dead letters with their reasons, which the
//! scheduler consumes to end the tasks they belong to (SPEC R5). [`amqp`] is RabbitMQ (lapin);
//! [`memory`] is the in-process broker of `verdict dev` and unit tests. Both pass one conformance
//! suite (`backends/tests/broker.rs`): what the docs here promise, it checks on both.
//!
//! **Invariant:** only `broker::amqp` knows AMQP; everything else speaks [`Broker`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use verdict_proto::wire::Priority;

use crate::BoxFuture;

pub mod amqp;
pub mod memory;

/// Where a message goes: a stage queue (by priority class), the results queue, or the
/// dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Stage requests; interactive and bulk travel on separate queues so bulk never starves
    /// interactive work (quorum queues on RabbitMQ 3.10 have no priorities).
    Stages(Priority),
    /// Stage results, consumed by the scheduler replicas.
    Results,
    /// Dead letters: what [`Broker::dead_letter`] moved there and what the broker dead-lettered
    /// itself (the delivery limit), consumed by the scheduler replicas. Every delivery from here
    /// carries its reason in [`DEAD_LETTER_REASON_HEADER`], the message's other headers as they
    /// were published. The queue has no delivery limit: a dead letter is never lost by being
    /// requeued. Publishing here directly dead-letters without a reason (the header is then
    /// empty); delayed publishing here is refused.
    DeadLetters,
}

/// A message as the application sees it: the encoded body and string headers. Headers carry the
/// W3C trace context (`traceparent`, `tracestate`) and routing hints such as `x-verdict-task`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub body: Vec<u8>,
    pub headers: BTreeMap<String, String>,
}

/// The header a dead-lettered message carries: why it was dead-lettered. Present on every
/// delivery from [`Route::DeadLetters`], whoever dead-lettered the message.
pub const DEAD_LETTER_REASON_HEADER: &str = "x-verdict-dead-letter-reason";

/// The reason of a message dead-lettered because it came back more often than the delivery limit
/// allows: RabbitMQ's own word for it (`x-first-death-reason`), used by every broker.
pub const DELIVERY_LIMIT_REASON: &str = "delivery_limit";

/// What happened to an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// The broker has it.
    Done,
    /// The channel was recovered since the delivery, or shutdown already took the delivery back:
    /// the settlement changed nothing and the broker will redeliver the message (handlers are
    /// idempotent, SPEC E7).
    Stale,
}

/// Settles one delivery. Implemented by each broker.
pub trait Acknowledge: Send + Sync {
    /// Done with it: remove from the queue.
    fn ack(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>>;
    /// Put it back for another consumer (graceful shutdown, SPEC Q4).
    fn requeue(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>>;
}

/// One received message with what is needed to settle it. Settle it exactly once; a delivery
/// dropped unsettled goes back to its queue at once, counted like a requeue.
pub struct Delivery {
    pub message: Message,
    /// The broker says it may have been delivered before (RabbitMQ's `redelivered` flag).
    pub redelivered: bool,
    /// How many times the broker delivered it, when the queue tracks it (quorum queues'
    /// `x-delivery-count`), starting at 0 for the first delivery.
    pub delivery_count: Option<u32>,
    pub acker: Box<dyn Acknowledge>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("message", &self.message)
            .field("redelivered", &self.redelivered)
            .field("delivery_count", &self.delivery_count)
            .finish_non_exhaustive()
    }
}

/// A live subscription: deliveries arrive through a channel fed by the broker's own task, which
/// also survives reconnects. `None` from [`Deliveries::next`] means the subscription ended for
/// good (shutdown), never a transient loss. Dropping it unsubscribes: deliveries not yet received
/// go back to the queue, those received can still be settled.
#[derive(Debug)]
pub struct Deliveries {
    rx: tokio::sync::mpsc::Receiver<Delivery>,
}

impl Deliveries {
    pub fn new(rx: tokio::sync::mpsc::Receiver<Delivery>) -> Deliveries {
        Deliveries { rx }
    }

    pub async fn next(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }
}

/// The refusal of a delayed dead letter, the same on every broker.
pub(crate) fn no_delayed_dead_letters() -> BrokerError {
    BrokerError::Other(
        "dead letters cannot be published with a delay; use dead_letter, or publish to the dead-letter route without one".to_owned(),
    )
}

/// Broker failures, each naming what to check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    #[error(
        "cannot reach the broker at {url}: {reason}; check the broker URL and that RabbitMQ is running"
    )]
    Connect { url: String, reason: String },
    #[error("broker topology: {0}")]
    Topology(String),
    /// Every try within the publish deadline was nacked.
    #[error(
        "the broker refused the message (publisher confirm nack) for {route} until the publish \
         deadline; check that a majority of the RabbitMQ cluster's nodes is running and the \
         queue has a leader (rabbitmq-queues quorum_status), then publish again"
    )]
    Nacked { route: String },
    #[error(
        "the message for {route} was returned as unroutable: no queue is bound (reply {reply_code} {reply_text})"
    )]
    Unroutable {
        route: String,
        reply_code: u16,
        reply_text: String,
    },
    #[error("broker channel closed: {0}")]
    Closed(String),
    /// RabbitMQ holds publishing back (a memory or disk alarm, `connection.blocked`) and did not
    /// let go within the publish deadline. Retryable: publishing resumes once the alarm clears.
    #[error(
        "publishing to {route} was held back by the broker until the publish deadline ({reason}); \
         free memory or disk on the RabbitMQ nodes or raise their watermark \
         (vm_memory_high_watermark, disk_free_limit), then publish again"
    )]
    Blocked { route: String, reason: String },
    /// The broker took the message but confirmed nothing within the publish deadline (a quorum
    /// queue without a majority of its nodes, an overloaded node). The message may still arrive:
    /// publish it again (at-least-once; consumers are idempotent, SPEC E7).
    #[error(
        "the broker did not confirm the message for {route} within {waited:?}; it may still \
         arrive. Check that a majority of the RabbitMQ cluster's nodes is running, then publish \
         again"
    )]
    Unconfirmed { route: String, waited: Duration },
    /// The broker URL cannot be used; `url` is shown without its password.
    #[error("broker URL {url} {problem}")]
    Url { url: String, problem: String },
    #[error("broker: {0}")]
    Other(String),
}

impl BrokerError {
    /// The same call may succeed later with nothing changed on this side: the broker was
    /// unreachable, lost the connection, held publishing back or did not confirm in time. The
    /// rest (topology, refusals, unroutable messages, bad URLs, caller bugs) fail the same way
    /// until someone changes the configuration or the code.
    pub fn is_retryable(&self) -> bool {
        match self {
            BrokerError::Connect { .. }
            | BrokerError::Closed(_)
            | BrokerError::Nacked { .. }
            | BrokerError::Blocked { .. }
            | BrokerError::Unconfirmed { .. } => true,
            BrokerError::Topology(_)
            | BrokerError::Unroutable { .. }
            | BrokerError::Url { .. }
            | BrokerError::Other(_) => false,
        }
    }
}

/// Liveness of the broker connection and its consumers, for readiness probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHealth {
    /// Connected to the broker (RabbitMQ: the publishing and the consuming connection both);
    /// false while reconnecting and once shutdown closed it. A connection RabbitMQ blocks during
    /// a resource alarm is still connected: see [`Broker::pressure`].
    pub connected: bool,
    /// Every subscription has a live consumer on the broker; false from the start of shutdown.
    pub consumers_alive: bool,
}

/// What the broker reports of one route's queue (SPEC O1): the scheduler polls it for
/// `verdict_queue_messages` and `verdict_queue_consumers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Messages ready for delivery: published and not handed to a consumer (deliveries held
    /// unacknowledged are not counted; workers report those).
    pub messages: u64,
    /// Consumers subscribed to the queue, across every process.
    pub consumers: u32,
}

/// The longest a [`Broker::queue_stats`] call waits for the broker: a poller must not hang on
/// an unresponsive one.
pub const QUEUE_STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// A message broker with confirmed, persistent publishing.
pub trait Broker: Send + Sync + fmt::Debug {
    /// Publishes and waits for the broker's confirmation (SPEC Q1: persistent, `mandatory`,
    /// publisher confirm; a returned message is an error, not a success).
    fn publish<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Publishes so that the message reaches `route` after about `delay` (delay queues with a TTL
    /// that dead-letter back), without holding a consumer slot, as a first delivery. Never before
    /// `delay`: RabbitMQ rounds it up to its next delay bucket (only a delay beyond the longest
    /// bucket is cut to it), the memory broker waits exactly. A zero delay publishes at once.
    /// [`Route::DeadLetters`] cannot be delayed: that is refused with [`BrokerError::Other`].
    fn publish_delayed<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
        delay: Duration,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// The longest delay no longer than `limit` that [`Broker::publish_delayed`] carries as
    /// given, not rounded up (the shortest it carries when none is that short): the delay for a
    /// message that must come back by `limit`, such as a stage deferred until another worker's
    /// lease lapses. A broker that waits exactly answers `limit`.
    fn delay_within(&self, limit: Duration) -> Duration {
        limit
    }

    /// Moves a message to the dead-letter queue with `reason` recorded in
    /// [`DEAD_LETTER_REASON_HEADER`] (poison messages, SPEC Q1/R2). The caller acks the original
    /// afterwards. A message requeued more often than the delivery limit allows is dead-lettered
    /// by the broker itself, with reason [`DELIVERY_LIMIT_REASON`]. Either way it can then be
    /// consumed from [`Route::DeadLetters`].
    fn dead_letter<'a>(
        &'a self,
        message: &'a Message,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Subscribes to `route` with `prefetch` unacknowledged deliveries at most (SPEC Q1: prefetch
    /// equals the consumer's concurrency). Messages on one route arrive in publish order;
    /// several subscriptions on one route share its messages, each delivered to one of them.
    fn consume(
        &self,
        route: Route,
        prefetch: u16,
    ) -> BoxFuture<'_, Result<Deliveries, BrokerError>>;

    fn health(&self) -> BrokerHealth;

    /// Why the broker holds publishing back right now (e.g. "RabbitMQ resource alarm: low on
    /// memory"), or `None` while publishes go through. While it is `Some`, a publish waits for
    /// it to clear up to its deadline and then fails with [`BrokerError::Blocked`]; consuming and
    /// settling go on. RabbitMQ tells a connection that it is blocked when it publishes during
    /// an alarm, so a quiet publisher learns of an alarm with its next publish.
    fn pressure(&self) -> Option<String> {
        None
    }

    /// How many messages wait on `route`'s queue and how many consumers it has, as the broker
    /// counts them now (RabbitMQ: a passive `queue.declare`). Gives up after
    /// [`QUEUE_STATS_TIMEOUT`] with [`BrokerError::Other`]; never declares or changes anything.
    fn queue_stats(&self, route: Route) -> BoxFuture<'_, Result<QueueStats, BrokerError>>;

    /// Ends the process's use of the broker (SPEC Q4): every subscription stops and no new one is
    /// taken; for up to `grace`, deliveries already handed out may still be settled and
    /// publishing goes on (results go out before acks); then the broker is closed and refuses
    /// everything. Returns how many deliveries were left unsettled; the broker takes those back
    /// and redelivers them (settling one afterwards is [`AckStatus::Stale`]).
    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, usize>;
}

/// Of delay buckets in milliseconds, sorted: the one a delay of `ms` goes to — the shortest at
/// least as long, or the longest when the delay exceeds them all (the message then comes back
/// early rather than never).
pub(crate) fn bucket_at_least(buckets: &[u64], ms: u64) -> u64 {
    buckets
        .iter()
        .copied()
        .find(|bucket| *bucket >= ms)
        .or_else(|| buckets.last().copied())
        .unwrap_or(ms)
}

/// Of delay buckets in milliseconds, sorted: the longest no longer than `ms`, or the shortest
/// when none is that short.
pub(crate) fn bucket_at_most(buckets: &[u64], ms: u64) -> u64 {
    buckets
        .iter()
        .copied()
        .rev()
        .find(|bucket| *bucket <= ms)
        .or_else(|| buckets.first().copied())
        .unwrap_or(ms)
}

/// `d` in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
