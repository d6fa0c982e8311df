//! One conformance suite for the [`Broker`] trait: every behaviour a caller may rely on is one
//! check function, and each check runs on the in-memory broker and on the real RabbitMQ
//! (127.0.0.1:5672), so `verdict dev` and the unit tests see what production sees and the two
//! brokers cannot drift apart. What the trait does not expose (dead letters, messages left on a
//! route) is read through [`Harness`], a small adapter per backend.
//!
//! Proven on both: FIFO per route with body and headers intact; separate routes; prefetch;
//! several subscriptions sharing a route; ack, requeue (redelivered, growing delivery count) and
//! settling exactly once; dropped deliveries and dropped subscriptions; the delivery limit and
//! explicit dead letters with their reasons, and both consumed from the dead-letter route with
//! their reasons; delayed publishing (never early, then delivered);
//! many publishers at once; health and no pressure while publishing flows; graceful shutdown
//! with and without leftovers; the counts of waiting messages and consumers a queue reports.
//!
//! RabbitMQ-only behaviour (topology, AMQP properties on the wire, unroutable messages,
//! reconnects, stale acks after a recovery) is in `broker_amqp.rs`; what only the memory broker
//! promises (virtual time, requeue position) is in its unit tests. Each RabbitMQ run has a name
//! prefix of its own and deletes its queues and exchanges when it ends.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use verdict_backends::broker::amqp::AmqpBroker;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::broker::{
    AckStatus, Broker, BrokerError, DEAD_LETTER_REASON_HEADER, DELIVERY_LIMIT_REASON, Deliveries,
    Delivery, Message, QueueStats, Route,
};
use verdict_proto::wire::Priority;

use support::rabbitmq::{self, Cleanup};
use support::wait::{PROMPTLY, eventually, within};

const INTERACTIVE: Route = Route::Stages(Priority::Interactive);
const BULK: Route = Route::Stages(Priority::Bulk);
const RESULTS: Route = Route::Results;
const ROUTES: [(Route, &str); 3] = [
    (INTERACTIVE, "interactive"),
    (BULK, "bulk"),
    (RESULTS, "results"),
];

/// Small, so poison messages are dead-lettered after three deliveries.
const DELIVERY_LIMIT: u32 = 2;
/// The delay the suite asks for: short, because RabbitMQ runs on real time.
const DELAY: Duration = Duration::from_millis(150);
/// RabbitMQ's smallest delay bucket in this suite, which [`DELAY`] is rounded up to.
const SMALLEST_BUCKET: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------------------------
// The harness: one broker per test, and what the trait leaves to each backend

enum Backend {
    Memory(MemoryBroker),
    RabbitMq {
        broker: Arc<AmqpBroker>,
        prefix: String,
        /// Dead letters taken off the queue so far (reading them removes them).
        taken: Mutex<Vec<(Message, String)>>,
        _cleanup: Cleanup,
    },
}

struct Harness {
    broker: Arc<dyn Broker>,
    backend: Backend,
}

impl Harness {
    fn memory() -> Harness {
        let broker = MemoryBroker::with_delivery_limit(DELIVERY_LIMIT);
        Harness {
            broker: Arc::new(broker.clone()),
            backend: Backend::Memory(broker),
        }
    }

    async fn rabbitmq() -> Harness {
        let (config, cleanup) = rabbitmq::config(|config| {
            config.delivery_limit = DELIVERY_LIMIT;
            config.delay_buckets = vec![SMALLEST_BUCKET, Duration::from_secs(5)];
        });
        let prefix = config.prefix.clone();
        let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
        Harness {
            broker: broker.clone(),
            backend: Backend::RabbitMq {
                broker,
                prefix,
                taken: Mutex::new(Vec::new()),
                _cleanup: cleanup,
            },
        }
    }

    fn broker(&self) -> &dyn Broker {
        self.broker.as_ref()
    }

    /// Waits until exactly `count` messages have been dead-lettered; returns them as they were
    /// published, with their reasons, oldest first.
    async fn dead_letters(&self, count: usize) -> Vec<(Message, String)> {
        let dead = match &self.backend {
            Backend::Memory(broker) => {
                eventually("the dead letters", || async {
                    broker.dead_letters().len() >= count
                })
                .await;
                broker.dead_letters()
            }
            Backend::RabbitMq { broker, taken, .. } => {
                eventually("the dead letters", || async {
                    let more = broker.take_dead_letters(count + 1).await.unwrap();
                    let mut taken = taken.lock().unwrap();
                    taken.extend(more);
                    taken.len() >= count
                })
                .await;
                taken.lock().unwrap().clone()
            }
        };
        assert_eq!(dead.len(), count, "{dead:?}");
        dead
    }

    /// Messages waiting on `route`, not counting deliveries handed out.
    async fn waiting(&self, route: Route) -> usize {
        match &self.backend {
            Backend::Memory(broker) => broker.depth(route),
            Backend::RabbitMq { prefix, .. } => {
                let queue = match route {
                    INTERACTIVE => format!("{prefix}.stages.interactive"),
                    BULK => format!("{prefix}.stages.bulk"),
                    RESULTS => format!("{prefix}.results"),
                    Route::DeadLetters => format!("{prefix}.dead"),
                };
                rabbitmq::ready_count(&queue).await as usize
            }
        }
    }

    async fn finish(self) {
        if let Backend::RabbitMq { broker, .. } = &self.backend {
            broker.close().await;
        }
    }
}

/// Runs each check once per broker, as `<check>::memory` and `<check>::rabbitmq`.
macro_rules! on_both_brokers {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test]
            async fn memory() {
                let harness = super::Harness::memory();
                super::$check(&harness).await;
                harness.finish().await;
            }

            #[tokio::test]
            async fn rabbitmq() {
                let harness = super::Harness::rabbitmq().await;
                super::$check(&harness).await;
                harness.finish().await;
            }
        }
    )*};
}

on_both_brokers!(
    publish_then_consume_in_order_with_body_and_headers,
    routes_are_separate_queues,
    prefetch_bounds_unsettled_deliveries_per_subscription,
    subscriptions_on_one_route_share_its_messages,
    ack_removes_and_a_delivery_is_settled_once,
    requeue_redelivers_with_a_growing_count,
    a_dropped_delivery_comes_back,
    a_dropped_subscription_still_settles_what_it_handed_out,
    the_delivery_limit_dead_letters_with_a_reason,
    dead_letter_records_the_reason,
    dead_letters_are_consumed_with_their_reasons,
    delayed_messages_arrive_not_before_the_delay,
    many_publishers_at_once,
    shutdown_stops_subscriptions_and_waits_for_held_deliveries,
    shutdown_gives_back_what_is_unsettled_after_the_grace,
    queue_stats_count_waiting_messages_and_consumers,
);

// ---------------------------------------------------------------------------------------------
// Helpers

/// A message with the headers a stage request carries: trace context and the task id.
fn message(name: &str) -> Message {
    Message {
        body: format!("{{\"n\":\"{name}\"}}").into_bytes(),
        headers: BTreeMap::from([
            (
                "traceparent".to_owned(),
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
            ),
            ("tracestate".to_owned(), "verdict=1".to_owned()),
            ("x-verdict-task".to_owned(), format!("task-{name}")),
        ]),
    }
}

/// The name a [`message`] was made from.
fn name(delivery: &Delivery) -> String {
    let body: serde_json::Value = serde_json::from_slice(&delivery.message.body).unwrap();
    body["n"].as_str().unwrap().to_owned()
}

async fn next(deliveries: &mut Deliveries) -> Delivery {
    within("a delivery", deliveries.next())
        .await
        .expect("the subscription ended")
}

// ---------------------------------------------------------------------------------------------
// The checks

async fn publish_then_consume_in_order_with_body_and_headers(h: &Harness) {
    let broker = h.broker();
    for n in 0..3 {
        broker
            .publish(INTERACTIVE, &message(&format!("before-{n}")))
            .await
            .unwrap();
    }
    let mut deliveries = broker.consume(INTERACTIVE, 10).await.unwrap();
    for n in 0..3 {
        broker
            .publish(INTERACTIVE, &message(&format!("after-{n}")))
            .await
            .unwrap();
    }
    let expected = (0..3)
        .map(|n| format!("before-{n}"))
        .chain((0..3).map(|n| format!("after-{n}")));
    for name in expected {
        let delivery = next(&mut deliveries).await;
        assert_eq!(delivery.message, message(&name));
        assert!(!delivery.redelivered);
        assert_eq!(delivery.delivery_count, Some(0));
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    // Nothing held publishing back: no pressure to report.
    assert_eq!(broker.pressure(), None);
}

/// Each route receives only its own messages: after its own message comes its own end marker,
/// never another route's message.
async fn routes_are_separate_queues(h: &Harness) {
    let broker = h.broker();
    for suffix in ["", "-end"] {
        for (route, route_name) in ROUTES {
            broker
                .publish(route, &message(&format!("{route_name}{suffix}")))
                .await
                .unwrap();
        }
    }
    for (route, route_name) in ROUTES {
        let mut deliveries = broker.consume(route, 10).await.unwrap();
        for suffix in ["", "-end"] {
            let delivery = next(&mut deliveries).await;
            assert_eq!(name(&delivery), format!("{route_name}{suffix}"));
            delivery.acker.ack().await.unwrap();
        }
    }
}

/// A subscription holds at most `prefetch` unsettled deliveries: while the first one is full,
/// the rest can only go to a second subscription; settling one frees exactly one slot.
async fn prefetch_bounds_unsettled_deliveries_per_subscription(h: &Harness) {
    let broker = h.broker();
    for n in 0..5 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
    }
    let mut first = broker.consume(INTERACTIVE, 2).await.unwrap();
    let zero = next(&mut first).await;
    let one = next(&mut first).await;
    assert_eq!((name(&zero), name(&one)), ("0".into(), "1".into()));
    let mut second = broker.consume(INTERACTIVE, 3).await.unwrap();
    let mut held = Vec::new();
    for n in 2..5 {
        let delivery = next(&mut second).await;
        assert_eq!(name(&delivery), n.to_string());
        held.push(delivery);
    }
    zero.acker.ack().await.unwrap();
    broker.publish(INTERACTIVE, &message("5")).await.unwrap();
    let five = next(&mut first).await;
    assert_eq!(name(&five), "5");
    for delivery in held.into_iter().chain([one, five]) {
        delivery.acker.ack().await.unwrap();
    }
}

/// `queue_stats` counts messages waiting (not those handed out) and live subscriptions, per
/// route, and changes nothing.
async fn queue_stats_count_waiting_messages_and_consumers(h: &Harness) {
    let broker = h.broker();
    let stats = |route| async move { broker.queue_stats(route).await.unwrap() };
    // Declared by connecting, empty: every route answers, with zero of both.
    for (route, _) in ROUTES {
        assert_eq!(stats(route).await, QueueStats::default(), "{route:?}");
    }
    for n in 0..3 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
    }
    eventually("three messages counted", || async {
        stats(INTERACTIVE).await.messages == 3
    })
    .await;
    assert_eq!(stats(BULK).await, QueueStats::default());
    let mut one = broker.consume(INTERACTIVE, 1).await.unwrap();
    let two = broker.consume(INTERACTIVE, 1).await.unwrap();
    let held = next(&mut one).await;
    eventually(
        "two consumers, one message held and one handed out",
        || async {
            stats(INTERACTIVE).await
                == QueueStats {
                    messages: 1,
                    consumers: 2,
                }
        },
    )
    .await;
    // The dropped subscription's prefetched message goes back and waits again.
    drop(two);
    eventually("one consumer left, two messages waiting", || async {
        stats(INTERACTIVE).await
            == QueueStats {
                messages: 2,
                consumers: 1,
            }
    })
    .await;
    assert_eq!(h.waiting(INTERACTIVE).await, 2, "queue_stats took nothing");
    held.acker.ack().await.unwrap();
    drop(one);
}

/// Every message goes to exactly one of the route's subscriptions, and both get work.
async fn subscriptions_on_one_route_share_its_messages(h: &Harness) {
    let broker = h.broker();
    let mut one = broker.consume(INTERACTIVE, 10).await.unwrap();
    let mut two = broker.consume(INTERACTIVE, 10).await.unwrap();
    for n in 0..10 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut per_subscription = [0, 0];
    while seen.len() < 10 {
        let (index, delivery) = within("ten deliveries", async {
            tokio::select! {
                d = one.next() => (0, d.expect("the subscription ended")),
                d = two.next() => (1, d.expect("the subscription ended")),
            }
        })
        .await;
        per_subscription[index] += 1;
        seen.push(name(&delivery));
        delivery.acker.ack().await.unwrap();
    }
    seen.sort_by_key(|n| n.parse::<u32>().unwrap());
    assert_eq!(seen, (0..10).map(|n| n.to_string()).collect::<Vec<_>>());
    assert!(
        per_subscription.iter().all(|n| *n > 0),
        "one subscription got everything: {per_subscription:?}"
    );
}

async fn ack_removes_and_a_delivery_is_settled_once(h: &Harness) {
    let broker = h.broker();
    broker.publish(INTERACTIVE, &message("a")).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    let a = next(&mut deliveries).await;
    assert_eq!(a.acker.ack().await.unwrap(), AckStatus::Done);
    assert!(matches!(a.acker.ack().await, Err(BrokerError::Other(_))));
    assert!(matches!(
        a.acker.requeue().await,
        Err(BrokerError::Other(_))
    ));
    // Acknowledged means gone: the next delivery is the next message.
    broker.publish(INTERACTIVE, &message("b")).await.unwrap();
    let b = next(&mut deliveries).await;
    assert_eq!(name(&b), "b");
    b.acker.ack().await.unwrap();
}

async fn requeue_redelivers_with_a_growing_count(h: &Harness) {
    let broker = h.broker();
    broker.publish(INTERACTIVE, &message("a")).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    for count in 0..=DELIVERY_LIMIT {
        let delivery = next(&mut deliveries).await;
        assert_eq!(delivery.message, message("a"));
        assert_eq!(delivery.redelivered, count > 0);
        assert_eq!(delivery.delivery_count, Some(count));
        let settled = if count < DELIVERY_LIMIT {
            delivery.acker.requeue().await
        } else {
            delivery.acker.ack().await
        };
        assert_eq!(settled.unwrap(), AckStatus::Done);
    }
}

/// A delivery dropped without being settled (a handler that panicked) goes back to the queue at
/// once instead of holding a prefetch slot, and counts as a delivery.
async fn a_dropped_delivery_comes_back(h: &Harness) {
    let broker = h.broker();
    broker.publish(INTERACTIVE, &message("a")).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    drop(next(&mut deliveries).await);
    let again = next(&mut deliveries).await;
    assert_eq!(again.message, message("a"));
    assert!(again.redelivered);
    assert_eq!(again.delivery_count, Some(1));
    again.acker.ack().await.unwrap();
}

/// Dropping a subscription stops its deliveries, but what it handed out can still be settled
/// (a worker drops its subscriptions first and finishes its stages afterwards, SPEC Q4); what
/// it had not handed out yet goes back to the queue.
async fn a_dropped_subscription_still_settles_what_it_handed_out(h: &Harness) {
    let broker = h.broker();
    for name in ["a", "b", "c"] {
        broker.publish(INTERACTIVE, &message(name)).await.unwrap();
    }
    let mut subscription = broker.consume(INTERACTIVE, 3).await.unwrap();
    let a = next(&mut subscription).await;
    drop(subscription);
    eventually("the unreceived messages to be queued again", || async {
        h.waiting(INTERACTIVE).await == 2
    })
    .await;
    // Unsubscribing is not a dead consumer.
    assert!(broker.health().consumers_alive);
    assert_eq!(a.acker.ack().await.unwrap(), AckStatus::Done);
    let mut again = broker.consume(INTERACTIVE, 3).await.unwrap();
    let mut rest = Vec::new();
    for _ in 0..2 {
        let delivery = next(&mut again).await;
        rest.push(name(&delivery));
        delivery.acker.ack().await.unwrap();
    }
    rest.sort();
    assert_eq!(rest, ["b", "c"]);
    // `a` was acknowledged for good: the next delivery is the next message.
    broker.publish(INTERACTIVE, &message("end")).await.unwrap();
    assert_eq!(name(&next(&mut again).await), "end");
}

async fn the_delivery_limit_dead_letters_with_a_reason(h: &Harness) {
    let broker = h.broker();
    broker
        .publish(INTERACTIVE, &message("poison"))
        .await
        .unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    // Delivered `delivery limit + 1` times, then dead-lettered.
    for count in 0..=DELIVERY_LIMIT {
        let delivery = next(&mut deliveries).await;
        assert_eq!(delivery.delivery_count, Some(count));
        assert_eq!(delivery.acker.requeue().await.unwrap(), AckStatus::Done);
    }
    assert_eq!(
        h.dead_letters(1).await,
        [(message("poison"), DELIVERY_LIMIT_REASON.to_owned())]
    );
    broker.publish(INTERACTIVE, &message("next")).await.unwrap();
    let delivery = next(&mut deliveries).await;
    assert_eq!(name(&delivery), "next");
    delivery.acker.ack().await.unwrap();
}

async fn dead_letter_records_the_reason(h: &Harness) {
    let broker = h.broker();
    let reason = "wire version 9 is not supported";
    broker.dead_letter(&message("bad"), reason).await.unwrap();
    broker
        .dead_letter(&message("worse"), "not a JSON object")
        .await
        .unwrap();
    assert_eq!(
        h.dead_letters(2).await,
        [
            (message("bad"), reason.to_owned()),
            (message("worse"), "not a JSON object".to_owned())
        ]
    );
}

/// Every dead letter — moved there by `dead_letter`, or by the broker at the delivery limit — is
/// consumed from the dead-letter route as it was published, its reason in the reason header; a
/// requeued dead letter comes back (the dead letters have no delivery limit), an acknowledged one
/// is gone; dead letters cannot be delayed.
async fn dead_letters_are_consumed_with_their_reasons(h: &Harness) {
    let broker = h.broker();
    broker
        .dead_letter(&message("bad"), "not a JSON object")
        .await
        .unwrap();
    broker
        .publish(INTERACTIVE, &message("poison"))
        .await
        .unwrap();
    let mut stages = broker.consume(INTERACTIVE, 1).await.unwrap();
    for _ in 0..=DELIVERY_LIMIT {
        let delivery = next(&mut stages).await;
        delivery.acker.requeue().await.unwrap();
    }

    let mut dead = broker.consume(Route::DeadLetters, 10).await.unwrap();
    // RabbitMQ dead-letters on its own schedule: the order is not promised.
    let mut held = BTreeMap::new();
    for _ in 0..2 {
        let delivery = next(&mut dead).await;
        held.insert(name(&delivery), delivery);
    }
    let reasons: BTreeMap<&str, (String, Message)> = held
        .iter()
        .map(|(name, d)| {
            let mut published = d.message.clone();
            let reason = published.headers.remove(DEAD_LETTER_REASON_HEADER);
            let reason = reason.expect("every dead letter carries its reason");
            (name.as_str(), (reason, published))
        })
        .collect();
    assert_eq!(
        reasons,
        BTreeMap::from([
            ("bad", ("not a JSON object".to_owned(), message("bad"))),
            (
                "poison",
                (DELIVERY_LIMIT_REASON.to_owned(), message("poison"))
            ),
        ])
    );

    let bad = held.remove("bad").unwrap();
    assert_eq!(bad.acker.requeue().await.unwrap(), AckStatus::Done);
    let again = next(&mut dead).await;
    assert_eq!(name(&again), "bad");
    assert!(again.redelivered);
    for delivery in held.into_values().chain([again]) {
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    drop(dead);
    eventually("the dead letters taken", || async {
        h.waiting(Route::DeadLetters).await == 0
    })
    .await;

    let delayed = broker
        .publish_delayed(Route::DeadLetters, &message("later"), DELAY)
        .await;
    assert!(matches!(delayed, Err(BrokerError::Other(_))), "{delayed:?}");
}

/// A delayed message never arrives before its delay (RabbitMQ rounds it up to a bucket, the
/// memory broker waits exactly), then arrives as a first delivery, on stage and result routes
/// alike; a zero delay publishes at once.
async fn delayed_messages_arrive_not_before_the_delay(h: &Harness) {
    let broker = h.broker();
    let mut stages = broker.consume(INTERACTIVE, 1).await.unwrap();
    let mut results = broker.consume(RESULTS, 1).await.unwrap();
    let start = Instant::now();
    broker
        .publish_delayed(INTERACTIVE, &message("later"), DELAY)
        .await
        .unwrap();
    broker
        .publish_delayed(RESULTS, &message("result"), DELAY)
        .await
        .unwrap();
    for (deliveries, expected) in [(&mut stages, "later"), (&mut results, "result")] {
        let delivery = next(deliveries).await;
        let waited = start.elapsed();
        assert!(waited >= DELAY, "{expected} arrived after {waited:?}");
        assert_eq!(delivery.message, message(expected));
        assert!(!delivery.redelivered);
        assert_eq!(delivery.delivery_count, Some(0));
        delivery.acker.ack().await.unwrap();
    }
    broker
        .publish_delayed(BULK, &message("now"), Duration::ZERO)
        .await
        .unwrap();
    let mut bulk = broker.consume(BULK, 1).await.unwrap();
    let now = next(&mut bulk).await;
    assert_eq!(now.message, message("now"));
    now.acker.ack().await.unwrap();

    // A delay that must be over by a limit is never longer (RabbitMQ: a bucket within it; the
    // memory broker: the limit itself), unless no bucket is that short.
    let limit = Duration::from_secs(1);
    let within = broker.delay_within(limit);
    assert!(!within.is_zero() && within <= limit, "{within:?}");
    assert_eq!(
        broker.delay_within(Duration::ZERO),
        match h.backend {
            Backend::Memory(_) => Duration::ZERO,
            Backend::RabbitMq { .. } => SMALLEST_BUCKET,
        }
    );
}

async fn many_publishers_at_once(h: &Harness) {
    let mut deliveries = h.broker().consume(BULK, 100).await.unwrap();
    let publishers: Vec<_> = (0..40)
        .map(|n| {
            let broker = Arc::clone(&h.broker);
            tokio::spawn(async move { broker.publish(BULK, &message(&n.to_string())).await })
        })
        .collect();
    for publisher in publishers {
        within("a publish", publisher).await.unwrap().unwrap();
    }
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        let delivery = next(&mut deliveries).await;
        seen.insert(name(&delivery));
        delivery.acker.ack().await.unwrap();
    }
    assert_eq!(seen.len(), 40);
}

/// SPEC Q4: consumption stops at once; publishing (results go out before acks) and settling go on
/// during the grace; shutdown returns when nothing is held; then the broker refuses everything,
/// and what was not processed is still queued.
async fn shutdown_stops_subscriptions_and_waits_for_held_deliveries(h: &Harness) {
    let broker = Arc::clone(&h.broker);
    let health = broker.health();
    assert!(health.connected && health.consumers_alive, "{health:?}");
    for n in 0..3 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
    }
    let mut deliveries = broker.consume(INTERACTIVE, 2).await.unwrap();
    let held = next(&mut deliveries).await;
    assert!(broker.health().consumers_alive);

    let shutting_down = {
        let broker = Arc::clone(&broker);
        tokio::spawn(async move { broker.shutdown(PROMPTLY).await })
    };
    // What was already handed to the subscription still arrives; then it ends.
    let mut rest = Vec::new();
    while let Some(delivery) = within("the subscription to end", deliveries.next()).await {
        rest.push(delivery);
    }
    assert!(rest.len() <= 1, "prefetch 2 with one held: {rest:?}");
    let health = broker.health();
    assert!(health.connected && !health.consumers_alive, "{health:?}");
    assert!(matches!(
        broker.consume(BULK, 1).await,
        Err(BrokerError::Closed(_))
    ));
    broker.publish(RESULTS, &message("result")).await.unwrap();
    for delivery in rest {
        assert_eq!(delivery.acker.requeue().await.unwrap(), AckStatus::Done);
    }
    assert!(!shutting_down.is_finished());
    assert_eq!(held.acker.ack().await.unwrap(), AckStatus::Done);
    assert_eq!(within("shutdown", shutting_down).await.unwrap(), 0);

    assert!(!broker.health().connected);
    let late = message("late");
    assert!(matches!(
        broker.publish(INTERACTIVE, &late).await,
        Err(BrokerError::Closed(_))
    ));
    assert!(matches!(
        broker.publish_delayed(INTERACTIVE, &late, DELAY).await,
        Err(BrokerError::Closed(_))
    ));
    assert!(matches!(
        broker.dead_letter(&late, "too late").await,
        Err(BrokerError::Closed(_))
    ));
    assert!(matches!(
        broker.consume(INTERACTIVE, 1).await,
        Err(BrokerError::Closed(_))
    ));
    eventually("the unprocessed messages to be queued", || async {
        h.waiting(INTERACTIVE).await == 2 && h.waiting(RESULTS).await == 1
    })
    .await;
}

/// Deliveries still held when the grace is over are counted and go back to their queue; settling
/// one afterwards is stale, as after a lost connection.
async fn shutdown_gives_back_what_is_unsettled_after_the_grace(h: &Harness) {
    let broker = h.broker();
    broker.publish(INTERACTIVE, &message("a")).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    let held = next(&mut deliveries).await;
    assert_eq!(broker.shutdown(Duration::from_millis(100)).await, 1);
    assert_eq!(held.acker.ack().await.unwrap(), AckStatus::Stale);
    eventually("the unsettled message to be queued again", || async {
        h.waiting(INTERACTIVE).await == 1
    })
    .await;
}
