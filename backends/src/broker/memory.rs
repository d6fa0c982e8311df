//! The in-process broker of `verdict dev` and unit tests: the semantics callers rely on, without
//! a RabbitMQ. Per-route FIFO queues; `prefetch` unsettled deliveries per subscription; several
//! subscriptions on one route share its messages round-robin; ack, requeue, the redelivered flag
//! and delivery count; poison messages dead-lettered after `delivery_limit` redeliveries with
//! reason `"delivery limit"`; delays on tokio's clock, so paused-time tests run instantly.
//!
//! Where RabbitMQ leaves a choice, this broker decides:
//! - A requeued message goes back to the **front** of its queue, ahead of newer messages, so
//!   retries keep their place; the delivery limit bounds how often it can come back.
//! - A delivery dropped without being settled is requeued at once, like RabbitMQ does when the
//!   channel of an unacked delivery closes (and it counts toward the delivery limit, as there).
//! - `publish_delayed` waits exactly `delay` (no buckets).
//! - Prefetch 0 (AMQP's "unlimited") is capped at 256 unsettled deliveries.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};

use super::{
    AckStatus, Acknowledge, Broker, BrokerError, BrokerHealth, DEAD_LETTER_REASON_HEADER,
    Deliveries, Delivery, Message, Route,
};
use crate::BoxFuture;

/// The reason recorded for a message that exceeded the delivery limit.
pub const DELIVERY_LIMIT_REASON: &str = "delivery limit";

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
    shut_down: bool,
    /// Deliveries handed out and not settled, over all routes; shutdown waits on it.
    outstanding: watch::Sender<usize>,
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
    /// Deliveries so far that came back (requeued or dropped).
    returns: u32,
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
                shut_down: false,
                outstanding: watch::Sender::new(0),
            })),
        }
    }

    /// Dead-lettered messages with their reasons, oldest first.
    pub fn dead_letters(&self) -> Vec<(Message, String)> {
        self.lock().dead.clone()
    }

    /// Messages waiting on `route`, not counting unsettled deliveries.
    pub fn depth(&self, route: Route) -> usize {
        self.lock().routes.get(&route).map_or(0, |r| r.ready.len())
    }

    /// Deliveries on `route` handed out and not yet settled.
    pub fn unsettled(&self, route: Route) -> usize {
        self.lock()
            .routes
            .get(&route)
            .map_or(0, |r| r.subscribers.iter().map(|s| s.unsettled).sum())
    }

    /// Stops every subscription: each [`Deliveries`] yields what it already holds, then `None`.
    /// Held deliveries can still be settled; publishing is refused from now on.
    pub fn stop(&self) {
        let mut state = self.lock();
        state.shut_down = true;
        for route in state.routes.values_mut() {
            route.subscribers.clear();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn enqueue(&self, route: Route, message: Message) -> Result<(), BrokerError> {
        let mut state = self.lock();
        if state.shut_down {
            return Err(BrokerError::Closed(
                "the in-memory broker was shut down".to_owned(),
            ));
        }
        state
            .routes
            .entry(route)
            .or_default()
            .ready
            .push_back(Queued {
                message,
                returns: 0,
            });
        dispatch(&self.state, &mut state, route);
        Ok(())
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
            .field("dead_letters", &state.dead.len())
            .field("shut_down", &state.shut_down)
            .finish()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every critical section leaves the state consistent, so a panic elsewhere does not taint it.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands ready messages to subscribers with room, round-robin, until one side runs out.
fn dispatch(shared: &Arc<Mutex<State>>, state: &mut State, route: Route) {
    let Some(queue) = state.routes.get_mut(&route) else {
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
        let armed = Arc::new(AtomicBool::new(true));
        let delivery = Delivery {
            message: queued.message.clone(),
            redelivered: queued.returns > 0,
            delivery_count: Some(queued.returns),
            acker: Box::new(MemoryAcker {
                state: Arc::downgrade(shared),
                route,
                subscriber: subscriber.id,
                queued: Mutex::new(Some(Queued {
                    message: queued.message.clone(),
                    returns: queued.returns,
                })),
                armed: Arc::clone(&armed),
            }),
        };
        match subscriber.tx.try_send(delivery) {
            Ok(()) => {
                subscriber.unsettled += 1;
                queue.cursor = (index + 1) % count;
                state.outstanding.send_modify(|n| *n += 1);
            }
            Err(TrySendError::Full(delivery) | TrySendError::Closed(delivery)) => {
                // Never delivered: neither a return nor a requeue from the acker's drop (which
                // would also deadlock on this lock).
                armed.store(false, Ordering::SeqCst);
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
    route: Route,
    subscriber: u64,
    /// Taken by the first settlement.
    queued: Mutex<Option<Queued>>,
    /// Cleared when the delivery never reached the subscriber.
    armed: Arc<AtomicBool>,
}

impl MemoryAcker {
    fn settle(&self, action: &str, requeue: bool) -> Result<AckStatus, BrokerError> {
        let queued = self
            .queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| {
                BrokerError::Other(format!(
                    "{action} of a delivery that was already acknowledged or requeued; settle \
                     each delivery exactly once"
                ))
            })?;
        let Some(shared) = self.state.upgrade() else {
            return Ok(AckStatus::Stale);
        };
        let mut state = lock(&shared);
        settle(
            &shared,
            &mut state,
            self.route,
            self.subscriber,
            queued,
            requeue,
        );
        Ok(AckStatus::Done)
    }
}

fn settle(
    shared: &Arc<Mutex<State>>,
    state: &mut State,
    route: Route,
    subscriber: u64,
    mut queued: Queued,
    requeue: bool,
) {
    let limit = state.delivery_limit;
    state.outstanding.send_modify(|n| *n = n.saturating_sub(1));
    let queue = state.routes.entry(route).or_default();
    if let Some(s) = queue.subscribers.iter_mut().find(|s| s.id == subscriber) {
        s.unsettled = s.unsettled.saturating_sub(1);
    }
    if requeue {
        queued.returns += 1;
        if queued.returns > limit {
            state
                .dead
                .push((queued.message, DELIVERY_LIMIT_REASON.to_owned()));
        } else {
            queue.ready.push_front(queued);
        }
    }
    dispatch(shared, state, route);
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
    fn drop(&mut self) {
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let queued = self
            .queued
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(queued), Some(shared)) = (queued, self.state.upgrade()) {
            let mut state = lock(&shared);
            settle(
                &shared,
                &mut state,
                self.route,
                self.subscriber,
                queued,
                true,
            );
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
            if self.lock().shut_down {
                return Err(BrokerError::Closed(
                    "the in-memory broker was shut down".to_owned(),
                ));
            }
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

    fn dead_letter<'a>(
        &'a self,
        message: &'a Message,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            let mut message = message.clone();
            message
                .headers
                .insert(DEAD_LETTER_REASON_HEADER.to_owned(), reason.to_owned());
            self.lock().dead.push((message, reason.to_owned()));
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
            if state.shut_down {
                return Err(BrokerError::Closed(
                    "the in-memory broker was shut down".to_owned(),
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
        let up = !self.lock().shut_down;
        BrokerHealth {
            connected: up,
            consumers_alive: up,
        }
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, usize> {
        Box::pin(async move {
            self.stop();
            let mut outstanding = self.lock().outstanding.subscribe();
            let _ = tokio::time::timeout(grace, outstanding.wait_for(|n| *n == 0)).await;
            *outstanding.borrow()
        })
    }
}

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
    async fn fifo_with_headers_and_first_delivery_counts() {
        let broker = MemoryBroker::new();
        for b in ["a", "b", "c"] {
            broker.publish(INTERACTIVE, &message(b)).await.unwrap();
        }
        assert_eq!(broker.depth(INTERACTIVE), 3);
        let mut deliveries = broker.consume(INTERACTIVE, 10).await.unwrap();
        for b in ["a", "b", "c"] {
            let d = ready(&mut deliveries);
            assert_eq!(body(&d), b);
            assert_eq!(d.message, message(b));
            assert!(!d.redelivered);
            assert_eq!(d.delivery_count, Some(0));
            assert_eq!(d.acker.ack().await.unwrap(), AckStatus::Done);
        }
        assert_eq!(broker.depth(INTERACTIVE), 0);
        assert_eq!(broker.unsettled(INTERACTIVE), 0);
    }

    #[tokio::test]
    async fn routes_are_separate_queues() {
        let broker = MemoryBroker::new();
        broker
            .publish(Route::Stages(Priority::Bulk), &message("bulk"))
            .await
            .unwrap();
        broker
            .publish(Route::Results, &message("result"))
            .await
            .unwrap();
        let mut interactive = broker.consume(INTERACTIVE, 1).await.unwrap();
        assert!(nothing(&mut interactive));
        let mut results = broker.consume(Route::Results, 1).await.unwrap();
        assert_eq!(body(&ready(&mut results)), "result");
        assert_eq!(broker.depth(Route::Stages(Priority::Bulk)), 1);
    }

    #[tokio::test]
    async fn prefetch_limits_unsettled_deliveries() {
        let broker = MemoryBroker::new();
        for n in 0..5 {
            broker
                .publish(INTERACTIVE, &message(&n.to_string()))
                .await
                .unwrap();
        }
        let mut deliveries = broker.consume(INTERACTIVE, 2).await.unwrap();
        let first = ready(&mut deliveries);
        let _second = ready(&mut deliveries);
        assert!(nothing(&mut deliveries));
        assert_eq!(broker.unsettled(INTERACTIVE), 2);
        first.acker.ack().await.unwrap();
        let third = ready(&mut deliveries);
        assert_eq!(body(&third), "2");
        assert!(nothing(&mut deliveries));
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
        assert_eq!(again.message, message("a"));
    }

    #[tokio::test]
    async fn settling_twice_is_an_error() {
        let broker = MemoryBroker::new();
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let d = ready(&mut deliveries);
        d.acker.ack().await.unwrap();
        assert!(matches!(d.acker.ack().await, Err(BrokerError::Other(_))));
        assert!(matches!(
            d.acker.requeue().await,
            Err(BrokerError::Other(_))
        ));
    }

    #[tokio::test]
    async fn poison_is_dead_lettered_after_the_delivery_limit() {
        let broker = MemoryBroker::with_delivery_limit(2);
        broker
            .publish(INTERACTIVE, &message("poison"))
            .await
            .unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        for count in 0..=2 {
            let d = ready(&mut deliveries);
            assert_eq!(d.delivery_count, Some(count));
            d.acker.requeue().await.unwrap();
        }
        assert!(nothing(&mut deliveries));
        assert_eq!(broker.depth(INTERACTIVE), 0);
        assert_eq!(
            broker.dead_letters(),
            vec![(message("poison"), DELIVERY_LIMIT_REASON.to_owned())]
        );
    }

    #[tokio::test]
    async fn explicit_dead_letter_keeps_headers_and_reason() {
        let broker = MemoryBroker::new();
        broker
            .dead_letter(&message("bad"), "wire version 9 is not supported")
            .await
            .unwrap();
        let dead = broker.dead_letters();
        assert_eq!(dead.len(), 1);
        let (dead_message, reason) = &dead[0];
        assert_eq!(reason, "wire version 9 is not supported");
        assert_eq!(dead_message.body, b"bad");
        assert_eq!(
            dead_message.headers.get("traceparent").map(String::as_str),
            Some("tp-bad")
        );
        assert_eq!(
            dead_message
                .headers
                .get(DEAD_LETTER_REASON_HEADER)
                .map(String::as_str),
            Some("wire version 9 is not supported")
        );
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

    #[tokio::test]
    async fn a_dropped_delivery_comes_back() {
        let broker = MemoryBroker::new();
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        drop(ready(&mut deliveries));
        let again = ready(&mut deliveries);
        assert_eq!(body(&again), "a");
        assert!(again.redelivered);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_messages_arrive_after_the_delay_on_tokio_time() {
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
    async fn shutdown_ends_subscriptions_but_held_deliveries_settle() {
        let broker = MemoryBroker::new();
        broker.publish(INTERACTIVE, &message("a")).await.unwrap();
        broker.publish(INTERACTIVE, &message("b")).await.unwrap();
        let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
        let a = deliveries.next().await.unwrap();
        assert!(broker.health().connected);
        broker.stop();
        assert!(deliveries.next().await.is_none());
        assert_eq!(a.acker.ack().await.unwrap(), AckStatus::Done);
        assert_eq!(broker.depth(INTERACTIVE), 1);
        assert!(broker.publish(INTERACTIVE, &message("c")).await.is_err());
        assert!(broker.consume(INTERACTIVE, 1).await.is_err());
        assert!(!broker.health().connected);
    }
}
