//! The in-process broker of `verdict dev` and unit tests: the semantics callers rely on, without
//! a RabbitMQ, held to the same conformance suite as RabbitMQ (`backends/tests/broker.rs`).
//! Per-route FIFO queues; `prefetch` unsettled deliveries per subscription; several
//! subscriptions on one route share its messages round-robin; ack, requeue, the redelivered flag
//! and delivery count; poison messages dead-lettered after `delivery_limit` redeliveries with
//! reason [`DELIVERY_LIMIT_REASON`], and every dead letter consumable from
//! [`Route::DeadLetters`] with its reason; delays on tokio's clock, so paused-time tests run
//! instantly; shutdown that takes back whatever is still unsettled after the grace.
//!
//! Where RabbitMQ leaves a choice, this broker decides:
//! - A requeued message goes back to the **front** of its queue, ahead of newer messages, so
//!   retries keep their place; the delivery limit bounds how often it can come back. (RabbitMQ
//!   3.10's quorum queues do the same, but no RabbitMQ version promises it.)
//! - `publish_delayed` waits exactly `delay`, unless the broker was given RabbitMQ's delay
//!   buckets ([`MemoryBroker::with_delay_buckets`]), which it then rounds to as RabbitMQ does.
//! - Prefetch 0 (AMQP's "unlimited") is capped at 256 unsettled deliveries.
//! - Nothing holds publishing back unless a test says so ([`MemoryBroker::set_pressure`]); then
//!   every publish fails at once with [`BrokerError::Blocked`], where RabbitMQ would first wait
//!   for its publish deadline.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};

use super::{
    AckStatus, Acknowledge, Broker, BrokerError, BrokerHealth, DEAD_LETTER_REASON_HEADER,
    DELIVERY_LIMIT_REASON, Deliveries, Delivery, Message, QueueStats, Route,
    no_delayed_dead_letters,
};
use crate::BoxFuture;

/// Unsettled deliveries allowed when a subscription asks for prefetch 0.
const UNLIMITED_PREFETCH: usize = 256;

/// The in-memory broker. Clones share the same queues.
#[derive(Clone)]
pub struct MemoryBroker {
    state: Arc<Mutex<State>>,
}

struct State {
    delivery_limit: u32,
    routes: HashMap<Route, RouteState>,
    dead: Vec<(Message, String)>,
    next_subscriber: u64,
    next_delivery: u64,
    /// Deliveries handed out and not settled, by delivery number: what shutdown takes back.
    held: BTreeMap<u64, Held>,
    phase: Phase,
    /// The number of held deliveries, watched by shutdown.
    outstanding: watch::Sender<usize>,
    /// Why publishing is held back, as [`MemoryBroker::set_pressure`] said.
    pressure: Option<String>,
    /// The delays carried, in milliseconds, sorted; `None`: any delay, exactly.
    delay_buckets_ms: Option<Vec<u64>>,
}

/// Where the broker is in its life; it only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Subscriptions have ended and no new ones are taken; publishing and settling go on (the
    /// shutdown grace).
    Stopped,
    /// Shut down: everything is refused.
    Closed,
}

#[derive(Default)]
struct RouteState {
    ready: VecDeque<Queued>,
    subscribers: Vec<Subscriber>,
    /// Round-robin position: the subscriber tried first for the next message.
    cursor: usize,
}

struct Queued {
    message: Message,
    /// Deliveries so far that came back (requeued, dropped or taken back at shutdown).
    returns: u32,
}

struct Held {
    route: Route,
    subscriber: u64,
    queued: Queued,
}

struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Delivery>,
    limit: usize,
    unsettled: usize,
}

impl MemoryBroker {
    /// A broker with the AMQP default delivery limit (5 redeliveries).
    pub fn new() -> MemoryBroker {
        MemoryBroker::with_delivery_limit(5)
    }

    /// A message that comes back more than `delivery_limit` times is dead-lettered.
    pub fn with_delivery_limit(delivery_limit: u32) -> MemoryBroker {
        MemoryBroker {
            state: Arc::new(Mutex::new(State {
                delivery_limit,
                routes: HashMap::new(),
                dead: Vec::new(),
                next_subscriber: 0,
                next_delivery: 0,
                held: BTreeMap::new(),
                phase: Phase::Open,
                outstanding: watch::Sender::new(0),
                pressure: None,
                delay_buckets_ms: None,
            })),
        }
    }

    /// This broker with delay queues of these lengths, as RabbitMQ's topology has them: a delay
    /// is rounded up to the next one ([`Broker::publish_delayed`]).
    pub fn with_delay_buckets(self, buckets: &[Duration]) -> MemoryBroker {
        let mut ms: Vec<u64> = buckets.iter().map(|d| super::millis(*d)).collect();
        ms.sort_unstable();
        ms.dedup();
        self.lock().delay_buckets_ms = Some(ms);
        self
    }

    /// Every message dead-lettered so far as it was published, with its reason, oldest first
    /// (what `AmqpBroker::take_dead_letters` returns, without removing them): a record kept
    /// beside [`Route::DeadLetters`], whose consumers take them off that queue.
    pub fn dead_letters(&self) -> Vec<(Message, String)> {
        self.lock().dead.clone()
    }

    /// Messages waiting on `route`, not counting unsettled deliveries.
    pub fn depth(&self, route: Route) -> usize {
        self.lock().routes.get(&route).map_or(0, |r| r.ready.len())
    }

    /// Deliveries from `route` handed out and not yet settled.
    pub fn unsettled(&self, route: Route) -> usize {
        self.lock()
            .held
            .values()
            .filter(|held| held.route == route)
            .count()
    }

    /// Stops every subscription: each [`Deliveries`] yields what it already holds, then `None`,
    /// and no new subscription is taken. Held deliveries can still be settled and publishing goes
    /// on, as during [`Broker::shutdown`]'s grace.
    pub fn stop(&self) {
        let mut state = self.lock();
        if state.phase == Phase::Open {
            state.phase = Phase::Stopped;
        }
        for route in state.routes.values_mut() {
            route.subscribers.clear();
        }
    }

    /// Holds publishing back as a RabbitMQ resource alarm does, for tests of what callers do
    /// then: while `reason` is `Some`, [`Broker::pressure`] reports it and every publish, delayed
    /// publish and dead letter fails with [`BrokerError::Blocked`] carrying it; consuming and
    /// settling go on. `None` lifts it. (The memory store's `set_pressure` is its counterpart.)
    pub fn set_pressure(&self, reason: Option<String>) {
        self.lock().pressure = reason;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn enqueue(&self, route: Route, mut message: Message) -> Result<(), BrokerError> {
        let mut state = self.lock();
        state.refuse_when_closed()?;
        state.refuse_when_held_back(route)?;
        if route == Route::DeadLetters {
            let reason = message
                .headers
                .remove(DEAD_LETTER_REASON_HEADER)
                .unwrap_or_default();
            state.bury(message, reason);
        } else {
            state
                .routes
                .entry(route)
                .or_default()
                .ready
                .push_back(Queued {
                    message,
                    returns: 0,
                });
        }
        dispatch(&self.state, &mut state, route);
        Ok(())
    }
}

impl State {
    fn refuse_when_held_back(&self, route: Route) -> Result<(), BrokerError> {
        match &self.pressure {
            Some(reason) => Err(BrokerError::Blocked {
                route: format!("{route:?}"),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn refuse_when_closed(&self) -> Result<(), BrokerError> {
        if self.phase == Phase::Closed {
            return Err(BrokerError::Closed(
                "the in-memory broker was shut down".to_owned(),
            ));
        }
        Ok(())
    }

    /// Records a dead letter (`message` as published) and queues it on [`Route::DeadLetters`]
    /// with its reason in [`DEAD_LETTER_REASON_HEADER`]; the caller dispatches that route.
    fn bury(&mut self, mut message: Message, reason: String) {
        message.headers.remove(DEAD_LETTER_REASON_HEADER);
        let mut queued = message.clone();
        queued
            .headers
            .insert(DEAD_LETTER_REASON_HEADER.to_owned(), reason.clone());
        self.dead.push((message, reason));
        self.routes
            .entry(Route::DeadLetters)
            .or_default()
            .ready
            .push_back(Queued {
                message: queued,
                returns: 0,
            });
    }

    /// A delivery came back: to the front of its queue, or to the dead letters once it came back
    /// more often than the delivery limit allows (the dead letters themselves have no limit).
    fn give_back(&mut self, route: Route, mut queued: Queued) {
        queued.returns += 1;
        if route != Route::DeadLetters && queued.returns > self.delivery_limit {
            self.bury(queued.message, DELIVERY_LIMIT_REASON.to_owned());
        } else {
            self.routes
                .entry(route)
                .or_default()
                .ready
                .push_front(queued);
        }
    }
}

impl Default for MemoryBroker {
    fn default() -> MemoryBroker {
        MemoryBroker::new()
    }
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        let mut depths: Vec<_> = state
            .routes
            .iter()
            .map(|(route, r)| (*route, r.ready.len()))
            .collect();
        depths.sort_by_key(|(route, _)| format!("{route:?}"));
        f.debug_struct("MemoryBroker")
            .field("depths", &depths)
            .field("unsettled", &state.held.len())
            .field("dead_letters", &state.dead.len())
            .field("phase", &state.phase)
            .finish()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every critical section leaves the state consistent, so a panic elsewhere does not taint it.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands ready messages to subscribers with room, round-robin, until one side runs out.
fn dispatch(shared: &Arc<Mutex<State>>, state: &mut State, route: Route) {
    let State {
        routes,
        held,
        next_delivery,
        outstanding,
        ..
    } = state;
    let Some(queue) = routes.get_mut(&route) else {
        return;
    };
    queue.subscribers.retain(|s| !s.tx.is_closed());
    while !queue.ready.is_empty() {
        let count = queue.subscribers.len();
        let Some(index) = (0..count)
            .map(|i| (queue.cursor + i) % count)
            .find(|&i| queue.subscribers[i].unsettled < queue.subscribers[i].limit)
        else {
            return;
        };
        let Some(queued) = queue.ready.pop_front() else {
            return;
        };
        let subscriber = &mut queue.subscribers[index];
        let number = *next_delivery;
        *next_delivery += 1;
        let settled = Arc::new(AtomicBool::new(false));
        let delivery = Delivery {
            message: queued.message.clone(),
            redelivered: queued.returns > 0,
            delivery_count: Some(queued.returns),
            acker: Box::new(MemoryAcker {
                state: Arc::downgrade(shared),
                delivery: number,
                settled: Arc::clone(&settled),
            }),
        };
        match subscriber.tx.try_send(delivery) {
            Ok(()) => {
                subscriber.unsettled += 1;
                queue.cursor = (index + 1) % count;
                held.insert(
                    number,
                    Held {
                        route,
                        subscriber: subscriber.id,
                        queued,
                    },
                );
                outstanding.send_replace(held.len());
            }
            Err(TrySendError::Full(delivery) | TrySendError::Closed(delivery)) => {
                // Never delivered: its acker must not give it back (which would also deadlock
                // on this lock).
                settled.store(true, Ordering::SeqCst);
                drop(delivery);
                queue.ready.push_front(queued);
                if subscriber.tx.is_closed() {
                    queue.subscribers.remove(index);
                    queue.cursor = 0;
                } else {
                    // Buffer full despite the limit: stop until something is settled.
                    return;
                }
            }
        }
    }
}

struct MemoryAcker {
    state: Weak<Mutex<State>>,
    /// The key of this delivery in [`State::held`].
    delivery: u64,
    /// Set by the first settlement, or when the delivery never reached the subscriber.
    settled: Arc<AtomicBool>,
}

impl MemoryAcker {
    fn settle(&self, action: &str, requeue: bool) -> Result<AckStatus, BrokerError> {
        if self.settled.swap(true, Ordering::SeqCst) {
            return Err(BrokerError::Other(format!(
                "{action} of a delivery that was already acknowledged or requeued; settle each \
                 delivery exactly once"
            )));
        }
        Ok(self.finish(requeue))
    }

    /// Stale when shutdown already took the delivery back (or the broker is gone): it is queued
    /// again whatever the caller meant, as on RabbitMQ after the channel closed.
    fn finish(&self, requeue: bool) -> AckStatus {
        let Some(shared) = self.state.upgrade() else {
            return AckStatus::Stale;
        };
        let mut state = lock(&shared);
        let Some(held) = state.held.remove(&self.delivery) else {
            return AckStatus::Stale;
        };
        let left = state.held.len();
        state.outstanding.send_replace(left);
        if let Some(subscriber) = state
            .routes
            .get_mut(&held.route)
            .and_then(|r| r.subscribers.iter_mut().find(|s| s.id == held.subscriber))
        {
            subscriber.unsettled = subscriber.unsettled.saturating_sub(1);
        }
        if requeue {
            state.give_back(held.route, held.queued);
            dispatch(&shared, &mut state, Route::DeadLetters);
        }
        dispatch(&shared, &mut state, held.route);
        AckStatus::Done
    }
}

impl Acknowledge for MemoryAcker {
    fn ack(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>> {
        Box::pin(async move { self.settle("ack", false) })
    }

    fn requeue(&self) -> BoxFuture<'_, Result<AckStatus, BrokerError>> {
        Box::pin(async move { self.settle("requeue", true) })
    }
}

impl Drop for MemoryAcker {
    /// A delivery dropped without being settled goes back at once (and counts toward the delivery
    /// limit), as on RabbitMQ.
    fn drop(&mut self) {
        if !self.settled.swap(true, Ordering::SeqCst) {
            self.finish(true);
        }
    }
}

impl Broker for MemoryBroker {
    fn publish<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move { self.enqueue(route, message.clone()) })
    }

    fn publish_delayed<'a>(
        &'a self,
        route: Route,
        message: &'a Message,
        delay: Duration,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            {
                let state = self.lock();
                state.refuse_when_closed()?;
                state.refuse_when_held_back(route)?;
            }
            if route == Route::DeadLetters {
                return Err(no_delayed_dead_letters());
            }
            let delay = match &self.lock().delay_buckets_ms {
                Some(buckets) if !delay.is_zero() => {
                    Duration::from_millis(super::bucket_at_least(buckets, super::millis(delay)))
                }
                _ => delay,
            };
            let broker = self.clone();
            let message = message.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                // Shut down meanwhile: the process is ending and the message with it, as a
                // message in an in-memory queue would.
                let _ = broker.enqueue(route, message);
            });
            Ok(())
        })
    }

    fn delay_within(&self, limit: Duration) -> Duration {
        match &self.lock().delay_buckets_ms {
            Some(buckets) => {
                Duration::from_millis(super::bucket_at_most(buckets, super::millis(limit)))
            }
            None => limit,
        }
    }

    /// Queues the message on [`Route::DeadLetters`] with `reason` in
    /// [`DEAD_LETTER_REASON_HEADER`], and keeps it as it was published, with `reason` beside it,
    /// for [`MemoryBroker::dead_letters`] (which reads back what `AmqpBroker::take_dead_letters`
    /// does).
    fn dead_letter<'a>(
        &'a self,
        message: &'a Message,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            let mut state = self.lock();
            state.refuse_when_closed()?;
            state.refuse_when_held_back(Route::DeadLetters)?;
            state.bury(message.clone(), reason.to_owned());
            dispatch(&self.state, &mut state, Route::DeadLetters);
            Ok(())
        })
    }

    fn consume(
        &self,
        route: Route,
        prefetch: u16,
    ) -> BoxFuture<'_, Result<Deliveries, BrokerError>> {
        Box::pin(async move {
            let limit = match prefetch {
                0 => UNLIMITED_PREFETCH,
                n => usize::from(n),
            };
            let (tx, rx) = mpsc::channel(limit);
            let mut state = self.lock();
            state.refuse_when_closed()?;
            if state.phase == Phase::Stopped {
                return Err(BrokerError::Closed(
                    "the in-memory broker is shutting down; no new subscriptions".to_owned(),
                ));
            }
            let id = state.next_subscriber;
            state.next_subscriber += 1;
            state
                .routes
                .entry(route)
                .or_default()
                .subscribers
                .push(Subscriber {
                    id,
                    tx,
                    limit,
                    unsettled: 0,
                });
            dispatch(&self.state, &mut state, route);
            Ok(Deliveries::new(rx))
        })
    }

    fn health(&self) -> BrokerHealth {
        let phase = self.lock().phase;
        BrokerHealth {
            connected: phase != Phase::Closed,
            consumers_alive: phase == Phase::Open,
        }
    }

    fn pressure(&self) -> Option<String> {
        self.lock().pressure.clone()
    }

    /// Counts what waits on the route and the subscriptions still open on it.
    fn queue_stats(&self, route: Route) -> BoxFuture<'_, Result<QueueStats, BrokerError>> {
        Box::pin(async move {
            let state = self.lock();
            state.refuse_when_closed()?;
            let Some(queue) = state.routes.get(&route) else {
                return Ok(QueueStats::default());
            };
            let consumers = queue
                .subscribers
                .iter()
                .filter(|s| !s.tx.is_closed())
                .count();
            Ok(QueueStats {
                messages: u64::try_from(queue.ready.len()).unwrap_or(u64::MAX),
                consumers: u32::try_from(consumers).unwrap_or(u32::MAX),
            })
        })
    }

    /// Stops the subscriptions, waits up to `grace` for held deliveries to be settled, then
    /// closes and takes back what is still held (to the front of its queue, counted as a return),
    /// as RabbitMQ does when the connection closes.
    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, usize> {
        Box::pin(async move {
            self.stop();
            let mut outstanding = self.lock().outstanding.subscribe();
            let _ = tokio::time::timeout(grace, outstanding.wait_for(|n| *n == 0)).await;
            let mut state = self.lock();
            state.phase = Phase::Closed;
            let held = std::mem::take(&mut state.held);
            let left = held.len();
            // Newest first, so that the oldest ends up at the front.
            for (_, held) in held.into_iter().rev() {
                state.give_back(held.route, held.queued);
            }
            state.outstanding.send_replace(0);
            left
        })
    }
}

/// What only the memory broker promises; everything both brokers promise is in the conformance
/// suite, `backends/tests/broker.rs`.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use verdict_proto::wire::Priority;

    use super::*;

    const INTERACTIVE: Route = Route::Stages(Priority::Interactive);

    fn message(body: &str) -> Message {
        Message {
            body: body.as_bytes().to_vec(),
            headers: BTreeMap::from([("traceparent".to_owned(), format!("tp-{body}"))]),
        }
    }

    fn body(delivery: &Delivery) -> &str {
        std::str::from_utf8(&delivery.message.body).unwrap()
    }

    /// The next delivery, which must already be there: the memory broker hands messages over
    /// synchronously, so nothing needs waiting for.
    fn ready(deliveries: &mut Deliveries) -> Delivery {
        deliveries
            .rx
            .try_recv()
            .expect("a delivery should be waiting")
    }

    fn nothing(deliveries: &mut Deliveries) -> bool {
        deliveries.rx.is_empty()
    }

    #[tokio::test]
    async fn depth_and_unsettled_count_what_waits_and_what_is_held() {
        let broker = MemoryBroker::new();
        for b in ["a", "b", "c"] {
            broker.publish(INTERACTIVE, &message(b)).await.unwrap();
        }
        assert_eq!(broker.depth(INTERACTIVE), 3);
        let mut deliveries = broker.consume(INTERACTIVE, 2).await.unwrap();
        assert_eq!(
            (broker.depth(INTERACTIVE), broker.unsettled(INTERACTIVE)),
            (1, 2)
        );
        ready(&mut deliveries).acker.ack().await.unwrap();
        assert_eq!(
            (broker.depth(INTERACTIVE), broker.unsettled(INTERACTIVE)),
            (0, 2)
        );
        ready(&mut deliveries).acker.requeue().await.unwrap();
        assert_eq!(
            (broker.depth(INTERACTIVE), broker.unsettled(INTERACTIVE)),
            (0, 2)
        );
    }

    #[tokio::test]
    async fn requeue_goes_to_the_front_and_counts() {
        let broker = MemoryBroker::new();
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        broker.publish(INTERACTIVE, &message("b")).await.unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let a = ready(&mut deliveries);
        assert_eq!(a.acker.requeue().await.unwrap(), AckStatus::Done);
        let again = ready(&mut deliveries);
        assert_eq!(body(&again), "a");
        assert!(again.redelivered);
        assert_eq!(again.delivery_count, Some(1));
    }

    #[tokio::test]
    async fn subscriptions_on_one_route_share_round_robin() {
        let broker = MemoryBroker::new();
        let mut one = broker.consume(INTERACTIVE, 10).await.unwrap();
        let mut two = broker.consume(INTERACTIVE, 10).await.unwrap();
        for n in 0..4 {
            broker
                .publish(INTERACTIVE, &message(&n.to_string()))
                .await
                .unwrap();
        }
        // Held until the end: a dropped delivery would be requeued.
        let held = [
            ready(&mut one),
            ready(&mut two),
            ready(&mut one),
            ready(&mut two),
        ];
        let bodies: Vec<_> = held.iter().map(body).collect();
        assert_eq!(bodies, ["0", "1", "2", "3"]);
        assert!(nothing(&mut one) && nothing(&mut two));
    }

    #[tokio::test]
    async fn a_full_subscriber_is_skipped_and_a_dropped_one_forgotten() {
        let broker = MemoryBroker::new();
        let mut one = broker.consume(INTERACTIVE, 1).await.unwrap();
        let two = broker.consume(INTERACTIVE, 1).await.unwrap();
        drop(two);
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        broker.publish(INTERACTIVE, &message("b")).await.unwrap();
        let a = ready(&mut one);
        assert_eq!(body(&a), "a");
        assert_eq!(broker.depth(INTERACTIVE), 1);
        let mut three = broker.consume(INTERACTIVE, 1).await.unwrap();
        let b = ready(&mut three);
        assert_eq!(body(&b), "b");
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_messages_arrive_after_exactly_the_delay_on_tokio_time() {
        let broker = MemoryBroker::new();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let start = tokio::time::Instant::now();
        broker
            .publish_delayed(INTERACTIVE, &message("later"), Duration::from_secs(30))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(29_999)).await;
        assert!(nothing(&mut deliveries));
        let d = deliveries.next().await.unwrap();
        assert_eq!(body(&d), "later");
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn pressure_refuses_publishing_while_consuming_and_settling_go_on() {
        let broker = MemoryBroker::new();
        assert_eq!(broker.pressure(), None);
        broker
            .publish(INTERACTIVE, &message("before"))
            .await
            .unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let before = ready(&mut deliveries);

        broker.set_pressure(Some("RabbitMQ resource alarm: low on memory".to_owned()));
        assert_eq!(
            broker.pressure().as_deref(),
            Some("RabbitMQ resource alarm: low on memory")
        );
        let refused = broker.publish(INTERACTIVE, &message("during")).await;
        let Err(BrokerError::Blocked { reason, .. }) = &refused else {
            panic!("expected Blocked, got {refused:?}");
        };
        assert_eq!(reason, "RabbitMQ resource alarm: low on memory");
        assert!(refused.unwrap_err().is_retryable());
        let delayed = broker
            .publish_delayed(INTERACTIVE, &message("later"), Duration::from_secs(1))
            .await;
        assert!(
            matches!(delayed, Err(BrokerError::Blocked { .. })),
            "{delayed:?}"
        );
        let buried = broker.dead_letter(&message("bad"), "poison").await;
        assert!(
            matches!(buried, Err(BrokerError::Blocked { .. })),
            "{buried:?}"
        );
        assert_eq!(before.acker.ack().await.unwrap(), AckStatus::Done);

        broker.set_pressure(None);
        assert_eq!(broker.pressure(), None);
        broker
            .publish(INTERACTIVE, &message("after"))
            .await
            .unwrap();
        assert_eq!(body(&ready(&mut deliveries)), "after");
    }

    #[tokio::test]
    async fn stop_ends_subscriptions_while_publishing_and_settling_go_on() {
        let broker = MemoryBroker::new();
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        broker.publish(INTERACTIVE, &message("b")).await.unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let a = deliveries.next().await.unwrap();
        broker.stop();
        assert!(deliveries.next().await.is_none());
        assert!(broker.consume(INTERACTIVE, 1).await.is_err());
        assert_eq!(a.acker.ack().await.unwrap(), AckStatus::Done);
        broker.publish(INTERACTIVE, &message("c")).await.unwrap();
        assert_eq!(broker.depth(INTERACTIVE), 2);
        let health = broker.health();
        assert!(health.connected && !health.consumers_alive);
    }
}
