//! The RabbitMQ broker against the real RabbitMQ on 127.0.0.1:5672 (SPEC Q1, Q4, Q5): topology,
//! confirmed publishing, prefetch, redelivery, dead-lettering, delays, unroutable messages,
//! recovery from a cut connection, and shutdown.
//!
//! Every test uses its own name prefix, so the tests run in parallel against the shared broker,
//! and deletes its queues and exchanges when it ends, even by panicking. Connection loss is made
//! with an in-test TCP proxy that the test cuts and restores: the shared RabbitMQ is never
//! restarted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{
    AckStatus, Broker, BrokerError, DEAD_LETTER_REASON_HEADER, Deliveries, Delivery, Message, Route,
};
use verdict_proto::wire::Priority;

const RABBIT: &str = "127.0.0.1:5672";
const INTERACTIVE: Route = Route::Stages(Priority::Interactive);
const BULK: Route = Route::Stages(Priority::Bulk);
/// Generous: the machine runs several builds at once.
const DEADLINE: Duration = Duration::from_secs(20);

fn url(address: &str) -> String {
    format!("amqp://guest:guest@{address}/%2f")
}

/// A config with a fresh prefix; the guard deletes that prefix's topology when the test ends.
fn config() -> (AmqpConfig, Cleanup) {
    let prefix = format!("test-{:016x}", rand::random::<u64>());
    let mut config = AmqpConfig::new(url(RABBIT));
    config.prefix = prefix.clone();
    config.connection_name = format!("verdict-{prefix}");
    config.reconnect_max_delay = Duration::from_millis(500);
    let cleanup = Cleanup {
        prefix,
        buckets_ms: config
            .delay_buckets
            .iter()
            .map(|d| d.as_millis() as u64)
            .collect(),
    };
    (config, cleanup)
}

/// Deletes a prefix's queues and exchanges on drop, from a thread of its own so it also runs
/// while a failed test unwinds.
struct Cleanup {
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

async fn raw_connection() -> lapin::Result<Connection> {
    Connection::connect(&url(RABBIT), ConnectionProperties::default()).await
}

fn message(body: &str) -> Message {
    Message {
        body: format!("{{\"n\":\"{body}\"}}").into_bytes(),
        headers: BTreeMap::from([
            (
                "traceparent".to_owned(),
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
            ),
            ("x-verdict-task".to_owned(), format!("task-{body}")),
        ]),
    }
}

fn body(delivery: &Delivery) -> String {
    String::from_utf8(delivery.message.body.clone()).unwrap()
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn next(deliveries: &mut Deliveries) -> Delivery {
    within("a delivery", deliveries.next())
        .await
        .expect("the subscription ended")
}

/// Awaits `condition`, checking it every few milliseconds until the deadline.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that nothing arrives within `window` (for "only N arrive" checks).
async fn quiet(deliveries: &mut Deliveries, window: Duration) {
    if let Ok(delivery) = tokio::time::timeout(window, deliveries.next()).await {
        panic!("expected no delivery, got {delivery:?}");
    }
}

/// Polls `queue` with `basic.get` (auto-ack) until a message is there.
async fn get_one(queue: &str) -> lapin::message::BasicGetMessage {
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let got = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap();
        if let Some(message) = got {
            let _ = connection.close(200, "done".into()).await;
            return message;
        }
        assert!(Instant::now() < deadline, "nothing arrived in {queue}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ready_count(queue: &str) -> u32 {
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

async fn delete_queue(queue: &str) {
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    let _ = connection.close(200, "done".into()).await;
}

fn header(properties: &lapin::BasicProperties, name: &str) -> Option<AMQPValue> {
    properties.headers().as_ref()?.inner().get(name).cloned()
}

fn text(value: Option<AMQPValue>) -> String {
    match value {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("expected a string header, got {other:?}"),
    }
}

#[tokio::test]
async fn topology_declares_twice_and_a_mismatch_names_the_queue() {
    let (config, _cleanup) = config();
    let first = AmqpBroker::connect(config.clone()).await.unwrap();
    let second = AmqpBroker::connect(config.clone()).await.unwrap();
    assert!(second.health().connected);
    second.close().await;

    let mut other_limit = config.clone();
    other_limit.delivery_limit = 3;
    let error = AmqpBroker::connect(other_limit).await.unwrap_err();
    let BrokerError::Topology(text) = &error else {
        panic!("expected a topology error, got {error:?}");
    };
    let interactive = format!("{}.stages.interactive", config.prefix);
    assert!(text.contains(&interactive), "{text}");
    assert!(text.contains("x-delivery-limit"), "{text}");
    assert!(text.contains("delete"), "{text}");
    assert!(first.health().connected);
    first.close().await;
}

#[tokio::test]
async fn a_classic_queue_in_the_way_is_a_clear_topology_error() {
    let (config, _cleanup) = config();
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let results = format!("{}.results", config.prefix);
    channel
        .queue_declare(
            results.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "done".into()).await;
    let error = AmqpBroker::connect(config).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, BrokerError::Topology(_)), "{message}");
    assert!(message.contains(&format!("queue `{results}`")), "{message}");
    assert!(message.contains("rabbitmqctl delete_queue"), "{message}");
}

#[tokio::test]
async fn a_wrong_password_is_a_connect_error_without_the_password() {
    let (mut config, _cleanup) = config();
    config.url = format!("amqp://guest:not-the-password@{RABBIT}/%2f");
    let error = AmqpBroker::connect(config).await.unwrap_err();
    assert!(matches!(error, BrokerError::Connect { .. }), "{error}");
    assert!(!error.to_string().contains("not-the-password"), "{error}");
    assert!(
        !format!("{error:?}").contains("not-the-password"),
        "{error:?}"
    );
}

#[tokio::test]
async fn round_trip_keeps_body_and_headers_and_publishes_persistent_json() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let sent = message("round-trip");

    // Read raw first: the AMQP properties the broker stored.
    broker.publish(BULK, &sent).await.unwrap();
    let raw = get_one(&format!("{}.stages.bulk", config.prefix)).await;
    assert_eq!(raw.delivery.properties.delivery_mode(), &Some(2));
    assert_eq!(
        raw.delivery
            .properties
            .content_type()
            .as_ref()
            .map(|c| c.as_str()),
        Some("application/json")
    );
    assert_eq!(
        text(header(&raw.delivery.properties, "traceparent")),
        sent.headers["traceparent"]
    );

    let mut deliveries = broker.consume(INTERACTIVE, 4).await.unwrap();
    broker.publish(INTERACTIVE, &sent).await.unwrap();
    let delivery = next(&mut deliveries).await;
    assert_eq!(delivery.message, sent);
    assert!(!delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(0));
    assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    assert!(matches!(
        delivery.acker.ack().await,
        Err(BrokerError::Other(_))
    ));

    let mut results = broker.consume(Route::Results, 1).await.unwrap();
    broker.publish(Route::Results, &sent).await.unwrap();
    let result = next(&mut results).await;
    assert_eq!(result.message, sent);
    result.acker.ack().await.unwrap();
    broker.close().await;
}

#[tokio::test]
async fn many_tasks_publish_at_once() {
    let (config, _cleanup) = config();
    let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
    let mut deliveries = broker.consume(BULK, 100).await.unwrap();
    let publishers: Vec<_> = (0..40)
        .map(|n| {
            let broker = Arc::clone(&broker);
            tokio::spawn(async move { broker.publish(BULK, &message(&n.to_string())).await })
        })
        .collect();
    for publisher in publishers {
        within("a publish", publisher).await.unwrap().unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let delivery = next(&mut deliveries).await;
        seen.insert(body(&delivery));
        delivery.acker.ack().await.unwrap();
    }
    assert_eq!(seen.len(), 40);
    broker.close().await;
}

#[tokio::test]
async fn prefetch_caps_unacked_deliveries() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config).await.unwrap();
    for n in 0..5 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
    }
    let mut deliveries = broker.consume(INTERACTIVE, 2).await.unwrap();
    let first = next(&mut deliveries).await;
    let second = next(&mut deliveries).await;
    quiet(&mut deliveries, Duration::from_millis(400)).await;
    first.acker.ack().await.unwrap();
    let third = next(&mut deliveries).await;
    quiet(&mut deliveries, Duration::from_millis(200)).await;
    for delivery in [second, third] {
        delivery.acker.ack().await.unwrap();
    }
    for _ in 0..2 {
        next(&mut deliveries).await.acker.ack().await.unwrap();
    }
    broker.close().await;
}

#[tokio::test]
async fn requeue_redelivers_and_the_delivery_limit_dead_letters() {
    let (mut config, _cleanup) = config();
    config.delivery_limit = 2;
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    broker
        .publish(INTERACTIVE, &message("poison"))
        .await
        .unwrap();
    // RabbitMQ delivers it delivery_limit + 1 times, then dead-letters it.
    for count in 0..=2 {
        let delivery = next(&mut deliveries).await;
        assert_eq!(delivery.delivery_count, Some(count));
        assert_eq!(delivery.redelivered, count > 0);
        assert_eq!(delivery.message, message("poison"));
        assert_eq!(delivery.acker.requeue().await.unwrap(), AckStatus::Done);
    }
    let dead = get_one(&format!("{}.dead", config.prefix)).await;
    let properties = &dead.delivery.properties;
    assert_eq!(
        text(header(properties, "x-first-death-reason")),
        "delivery_limit"
    );
    assert!(matches!(
        header(properties, "x-death"),
        Some(AMQPValue::FieldArray(_))
    ));
    assert_eq!(text(header(properties, "x-verdict-task")), "task-poison");
    quiet(&mut deliveries, Duration::from_millis(200)).await;
    broker.close().await;
}

#[tokio::test]
async fn dead_letter_records_the_reason_and_keeps_the_headers() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    broker
        .dead_letter(&message("bad"), "wire version 9 is not supported")
        .await
        .unwrap();
    let dead = get_one(&format!("{}.dead", config.prefix)).await;
    let properties = &dead.delivery.properties;
    assert_eq!(
        text(header(properties, DEAD_LETTER_REASON_HEADER)),
        "wire version 9 is not supported"
    );
    assert_eq!(text(header(properties, "x-verdict-task")), "task-bad");
    assert_eq!(properties.delivery_mode(), &Some(2));
    assert_eq!(dead.delivery.data, message("bad").body);
    broker.close().await;
}

#[tokio::test]
async fn delayed_messages_come_back_after_the_bucket_delay() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config).await.unwrap();
    let mut stages = broker.consume(INTERACTIVE, 1).await.unwrap();
    let mut results = broker.consume(Route::Results, 1).await.unwrap();
    let start = Instant::now();
    broker
        .publish_delayed(INTERACTIVE, &message("later"), Duration::from_millis(700))
        .await
        .unwrap();
    broker
        .publish_delayed(Route::Results, &message("result"), Duration::from_millis(1))
        .await
        .unwrap();
    quiet(
        &mut stages,
        Duration::from_millis(900).saturating_sub(start.elapsed()),
    )
    .await;
    let delivery = next(&mut stages).await;
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert_eq!(delivery.message, message("later"));
    assert!(!delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(0));
    delivery.acker.ack().await.unwrap();
    let result = next(&mut results).await;
    assert_eq!(result.message, message("result"));
    result.acker.ack().await.unwrap();
    broker.close().await;
}

#[tokio::test]
async fn a_message_no_queue_takes_is_unroutable_not_confirmed() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    delete_queue(&format!("{}.stages.bulk", config.prefix)).await;
    let error = broker.publish(BULK, &message("lost")).await.unwrap_err();
    let BrokerError::Unroutable {
        reply_code, route, ..
    } = &error
    else {
        panic!("expected Unroutable, got {error:?}");
    };
    assert_eq!(*reply_code, 312);
    assert_eq!(route, &format!("{}.stages.bulk", config.prefix));
    // The publisher channel is still usable.
    broker.publish(INTERACTIVE, &message("fine")).await.unwrap();
    broker.close().await;
}

#[tokio::test]
async fn a_consumer_whose_queue_is_deleted_consumes_again() {
    let (config, _cleanup) = config();
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    delete_queue(&format!("{}.stages.interactive", config.prefix)).await;
    // The consumer task re-declares the queue; until then a publish is unroutable.
    let deadline = Instant::now() + DEADLINE;
    loop {
        match broker.publish(INTERACTIVE, &message("after")).await {
            Ok(()) => break,
            Err(BrokerError::Unroutable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("publish failed: {error}"),
        }
    }
    let delivery = next(&mut deliveries).await;
    assert_eq!(delivery.message, message("after"));
    delivery.acker.ack().await.unwrap();
    eventually("the consumer to be healthy", || {
        broker.health().consumers_alive
    })
    .await;
    broker.close().await;
}

/// A TCP proxy to RabbitMQ that the test can cut (every connection dropped, new ones refused)
/// and restore.
struct Proxy {
    address: String,
    up: Arc<AtomicBool>,
    generation: Arc<std::sync::Mutex<CancellationToken>>,
    _listener: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let generation = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let accept = {
            let up = Arc::clone(&up);
            let generation = Arc::clone(&generation);
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        continue; // dropped: connection refused in effect
                    }
                    let cut = generation.lock().unwrap().clone();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(RABBIT).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cut.cancelled() => {}
                        }
                    });
                }
            })
        };
        Proxy {
            address,
            up,
            generation,
            _listener: accept,
        }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        let mut generation = self.generation.lock().unwrap();
        generation.cancel();
        *generation = CancellationToken::new();
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_cut_connection_recovers_and_old_acks_are_stale() {
    let (mut config, _cleanup) = config();
    let proxy = Proxy::start().await;
    config.url = url(&proxy.address);
    let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
    let mut deliveries = broker.consume(INTERACTIVE, 5).await.unwrap();
    broker.publish(INTERACTIVE, &message("held")).await.unwrap();
    let held = next(&mut deliveries).await;
    assert!(broker.health().connected && broker.health().consumers_alive);

    proxy.cut();
    eventually("the loss to be noticed", || !broker.health().connected).await;
    assert_eq!(held.acker.ack().await.unwrap(), AckStatus::Stale);

    // A publish during the outage waits for the connection instead of failing or vanishing.
    let publishing = {
        let broker = Arc::clone(&broker);
        tokio::spawn(async move { broker.publish(INTERACTIVE, &message("during")).await })
    };
    proxy.restore();
    within("the publish after recovery", publishing)
        .await
        .unwrap()
        .unwrap();

    let mut bodies = Vec::new();
    for _ in 0..2 {
        let delivery = next(&mut deliveries).await;
        if delivery.message == message("held") {
            assert!(delivery.redelivered, "the stale-acked message comes back");
        }
        bodies.push(body(&delivery));
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    bodies.sort();
    assert_eq!(bodies, [body_of("during"), body_of("held")]);
    eventually("health to recover", || {
        let health = broker.health();
        health.connected && health.consumers_alive
    })
    .await;
    broker.publish(BULK, &message("after")).await.unwrap();
    broker.close().await;
}

fn body_of(name: &str) -> String {
    String::from_utf8(message(name).body).unwrap()
}

#[tokio::test]
async fn publishing_gives_up_after_the_publish_timeout() {
    let (mut config, _cleanup) = config();
    let proxy = Proxy::start().await;
    config.url = url(&proxy.address);
    config.publish_timeout = Duration::from_millis(500);
    let broker = AmqpBroker::connect(config).await.unwrap();
    proxy.cut();
    eventually("the loss to be noticed", || !broker.health().connected).await;
    let error = broker
        .publish(INTERACTIVE, &message("nowhere"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, BrokerError::Connect { .. } | BrokerError::Closed(_)),
        "{error:?}"
    );
    assert!(!error.to_string().contains("guest:guest"), "{error}");
    proxy.restore();
    broker.close().await;
}

#[tokio::test]
async fn shutdown_stops_deliveries_and_waits_for_held_ones() {
    let (config, _cleanup) = config();
    let broker = Arc::new(AmqpBroker::connect(config.clone()).await.unwrap());
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
        tokio::spawn(async move { broker.shutdown(DEADLINE).await })
    };
    // What was already handed out still arrives; then the subscription ends.
    let mut rest = Vec::new();
    while let Some(delivery) = within("the subscription to end", deliveries.next()).await {
        rest.push(delivery);
    }
    assert!(rest.len() <= 1, "prefetch 2 with one held: {rest:?}");
    assert!(!broker.health().consumers_alive);
    // Publishing still works while held deliveries drain (results go out before acks).
    broker.publish(BULK, &message("result")).await.unwrap();
    for delivery in rest {
        assert_eq!(delivery.acker.requeue().await.unwrap(), AckStatus::Done);
    }
    assert!(!shutting_down.is_finished());
    assert_eq!(held.acker.ack().await.unwrap(), AckStatus::Done);
    let unsettled = within("shutdown", shutting_down).await.unwrap();
    assert_eq!(unsettled, 0);

    assert!(matches!(
        broker.publish(INTERACTIVE, &message("late")).await,
        Err(BrokerError::Closed(_))
    ));
    assert!(!broker.health().connected);
    // The two unprocessed messages stay queued (the requeue settles asynchronously).
    let queue = format!("{}.stages.interactive", config.prefix);
    let deadline = Instant::now() + DEADLINE;
    while ready_count(&queue).await != 2 {
        assert!(
            Instant::now() < deadline,
            "expected 2 messages left in {queue}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
