//! What only the RabbitMQ broker does, against the real RabbitMQ on 127.0.0.1:5672 (SPEC Q1, Q5):
//! its topology and the errors naming it, credentials kept out of errors, messages and dead letters
//! as AMQP sees them, delay buckets, unroutable messages, a consumer whose queue is deleted,
//! recovery from a cut connection with stale acks, and the publish timeout during an outage.
//! Everything the in-memory broker promises too is in the conformance suite, `broker.rs`.
//!
//! Every test uses its own name prefix and deletes its queues and exchanges when it ends (see
//! `support::rabbitmq`). Connection loss is made with an in-test TCP proxy that the test cuts and
//! restores: the shared RabbitMQ is never restarted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use verdict_backends::broker::amqp::AmqpBroker;
use verdict_backends::broker::{
    AckStatus, Broker, BrokerError, DEAD_LETTER_REASON_HEADER, DELIVERY_LIMIT_REASON, Deliveries,
    Delivery, Message, Route,
};
use verdict_proto::wire::Priority;

use support::rabbitmq::{RABBIT, config, raw_connection, url};
use support::wait::{PROMPTLY, eventually, within};

const INTERACTIVE: Route = Route::Stages(Priority::Interactive);
const BULK: Route = Route::Stages(Priority::Bulk);

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

async fn next(deliveries: &mut Deliveries) -> Delivery {
    within("a delivery", deliveries.next())
        .await
        .expect("the subscription ended")
}

/// Polls `queue` with `basic.get` (auto-ack) until a message is there.
async fn get_one(queue: &str) -> lapin::message::BasicGetMessage {
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let deadline = Instant::now() + PROMPTLY;
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

async fn delete_queue(queue: &str) {
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    let _ = connection.close(200, "done".into()).await;
}

/// The binding of a delay queue as versions before `verdict-delay-ms` declared it: RabbitMQ
/// ignores `x-` arguments of headers bindings, so it matched every delayed message.
async fn legacy_delay_binding(prefix: &str, bucket: Duration) {
    let millis = bucket.as_millis().to_string();
    let mut arguments = FieldTable::default();
    arguments.insert("x-match".into(), AMQPValue::LongString("all".into()));
    arguments.insert(
        "x-verdict-delay-ms".into(),
        AMQPValue::LongString(millis.as_str().into()),
    );
    let connection = raw_connection().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_bind(
            format!("{prefix}.delay.{millis}").as_str().into(),
            format!("{prefix}.delay").as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            arguments,
        )
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
    let (config, _cleanup) = config(|_| {});
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
    let (config, _cleanup) = config(|_| {});
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
    let (mut config, _cleanup) = config(|_| {});
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
async fn messages_travel_persistent_as_json_with_headers_as_amqp_fields() {
    let (config, _cleanup) = config(|_| {});
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let sent = message("on-the-wire");
    broker.publish(BULK, &sent).await.unwrap();
    let raw = get_one(&format!("{}.stages.bulk", config.prefix)).await;
    let properties = &raw.delivery.properties;
    assert_eq!(properties.delivery_mode(), &Some(2));
    assert_eq!(
        properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    assert_eq!(
        text(header(properties, "traceparent")),
        sent.headers["traceparent"]
    );
    assert_eq!(raw.delivery.data, sent.body);
    broker.close().await;
}

/// The conformance suite reads dead letters back through `take_dead_letters`; this is what they
/// look like on the dead-letter queue itself.
#[tokio::test]
async fn dead_letters_carry_their_reason_in_amqp_headers() {
    let (config, _cleanup) = config(|c| c.delivery_limit = 1);
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let dead_queue = format!("{}.dead", config.prefix);

    broker
        .dead_letter(&message("bad"), "wire version 9 is not supported")
        .await
        .unwrap();
    let dead = get_one(&dead_queue).await;
    let properties = &dead.delivery.properties;
    assert_eq!(
        text(header(properties, DEAD_LETTER_REASON_HEADER)),
        "wire version 9 is not supported"
    );
    assert_eq!(text(header(properties, "x-verdict-task")), "task-bad");
    assert_eq!(properties.delivery_mode(), &Some(2));

    // Beyond the delivery limit, RabbitMQ dead-letters it and records why in its own headers.
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    broker
        .publish(INTERACTIVE, &message("poison"))
        .await
        .unwrap();
    for _ in 0..2 {
        let delivery = next(&mut deliveries).await;
        delivery.acker.requeue().await.unwrap();
    }
    let dead = get_one(&dead_queue).await;
    let properties = &dead.delivery.properties;
    assert_eq!(
        text(header(properties, "x-first-death-reason")),
        DELIVERY_LIMIT_REASON
    );
    assert!(matches!(
        header(properties, "x-death"),
        Some(AMQPValue::FieldArray(_))
    ));
    assert_eq!(text(header(properties, "x-verdict-task")), "task-poison");
    broker.close().await;
}

/// A delay goes to exactly one bucket, the smallest at least as long (the suite only promises
/// "not early"): a delay between two buckets waits for the longer one, and no copy of a message
/// waits in another bucket to arrive a second time — not even where an earlier version left a
/// binding that matched every message.
#[tokio::test]
async fn a_delayed_message_waits_in_one_bucket_the_next_long_enough() {
    let short = Duration::from_millis(100);
    let long = Duration::from_millis(400);
    let (config, _cleanup) = config(|c| c.delay_buckets = vec![short, long]);
    AmqpBroker::connect(config.clone())
        .await
        .unwrap()
        .close()
        .await;
    legacy_delay_binding(&config.prefix, long).await;
    let broker = AmqpBroker::connect(config).await.unwrap();
    let mut stages = broker.consume(INTERACTIVE, 1).await.unwrap();

    let start = Instant::now();
    broker
        .publish_delayed(INTERACTIVE, &message("once"), Duration::from_millis(50))
        .await
        .unwrap();
    let once = next(&mut stages).await;
    assert_eq!(once.message, message("once"));
    assert!(start.elapsed() >= short, "{:?}", start.elapsed());
    once.acker.ack().await.unwrap();

    // Into the long bucket only: a copy of `once` waiting there would arrive before it, and a copy
    // of it in the short bucket would arrive too early.
    let start = Instant::now();
    broker
        .publish_delayed(INTERACTIVE, &message("later"), Duration::from_millis(150))
        .await
        .unwrap();
    let later = next(&mut stages).await;
    assert_eq!(later.message, message("later"));
    assert!(start.elapsed() >= long, "{:?}", start.elapsed());
    later.acker.ack().await.unwrap();
    broker.close().await;
}

#[tokio::test]
async fn a_message_no_queue_takes_is_unroutable_not_confirmed() {
    let (config, _cleanup) = config(|_| {});
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

/// Publishes run concurrently over the pool of confirm channels; a returned message must still be
/// reported against the publish that sent it, never against a neighbour confirmed at the same
/// time.
#[tokio::test]
async fn concurrent_publishes_each_learn_their_own_return() {
    let (config, _cleanup) = config(|c| c.publish_channels = 4);
    let broker = Arc::new(AmqpBroker::connect(config.clone()).await.unwrap());
    delete_queue(&format!("{}.stages.bulk", config.prefix)).await;
    let mut publishes = tokio::task::JoinSet::new();
    for n in 0..64 {
        let broker = Arc::clone(&broker);
        publishes.spawn(async move {
            let route = if n % 2 == 0 { INTERACTIVE } else { BULK };
            (n, broker.publish(route, &message(&format!("m{n}"))).await)
        });
    }
    let mut delivered_expected = Vec::new();
    while let Some(joined) = publishes.join_next().await {
        let (n, outcome) = joined.unwrap();
        if n % 2 == 0 {
            assert!(
                outcome.is_ok(),
                "publish {n} to a bound queue failed: {outcome:?}"
            );
            delivered_expected.push(message(&format!("m{n}")));
        } else {
            assert!(
                matches!(outcome, Err(BrokerError::Unroutable { .. })),
                "publish {n} to the deleted queue: {outcome:?}"
            );
        }
    }
    let mut stages = broker.consume(INTERACTIVE, 64).await.unwrap();
    let mut received = Vec::new();
    for _ in 0..delivered_expected.len() {
        let delivery = next(&mut stages).await;
        received.push(delivery.message.clone());
        delivery.acker.ack().await.unwrap();
    }
    let key = |m: &Message| format!("{m:?}");
    received.sort_by_key(key);
    delivered_expected.sort_by_key(key);
    assert_eq!(received, delivered_expected);
    broker.close().await;
}

#[tokio::test]
async fn a_consumer_whose_queue_is_deleted_consumes_again() {
    let (config, _cleanup) = config(|_| {});
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 1).await.unwrap();
    delete_queue(&format!("{}.stages.interactive", config.prefix)).await;
    // The consumer task re-declares the queue; until then a publish is unroutable.
    let deadline = Instant::now() + PROMPTLY;
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
    eventually("the consumer to be healthy", || async {
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
    let (mut config, _cleanup) = config(|_| {});
    let proxy = Proxy::start().await;
    config.url = url(&proxy.address);
    let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
    let mut deliveries = broker.consume(INTERACTIVE, 5).await.unwrap();
    broker.publish(INTERACTIVE, &message("held")).await.unwrap();
    let held = next(&mut deliveries).await;
    assert!(broker.health().connected && broker.health().consumers_alive);

    proxy.cut();
    eventually("the loss to be noticed", || async {
        !broker.health().connected
    })
    .await;
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
    eventually("health to recover", || async {
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
    let (mut config, _cleanup) = config(|_| {});
    let proxy = Proxy::start().await;
    config.url = url(&proxy.address);
    config.publish_timeout = Duration::from_millis(500);
    let broker = AmqpBroker::connect(config).await.unwrap();
    proxy.cut();
    eventually("the loss to be noticed", || async {
        !broker.health().connected
    })
    .await;
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

/// A broker URL listing `addresses` as the nodes of one cluster.
fn cluster_url(addresses: &[&str]) -> String {
    url(&addresses.join(","))
}

/// Two "nodes" (proxies to the one RabbitMQ): losing the node the broker is connected to moves
/// both connections to the other; consumers consume again, what was held comes back, publishing
/// goes on.
#[tokio::test]
async fn a_lost_node_moves_both_connections_to_the_next_one() {
    let (mut config, _cleanup) = config(|_| {});
    let proxies = [Proxy::start().await, Proxy::start().await];
    config.url = cluster_url(&[&proxies[0].address, &proxies[1].address]);
    let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
    let (Some(publishing), Some(consuming)) = broker.connected_nodes() else {
        panic!("not connected: {:?}", broker.connected_nodes());
    };
    assert_eq!(publishing, consuming, "both connections start on one node");
    let lost = proxies
        .iter()
        .position(|p| p.address == publishing)
        .unwrap();
    let other = proxies[1 - lost].address.clone();

    let mut deliveries = broker.consume(INTERACTIVE, 5).await.unwrap();
    broker.publish(INTERACTIVE, &message("held")).await.unwrap();
    let held = next(&mut deliveries).await;

    let cut_at = Instant::now();
    proxies[lost].cut();
    eventually("both connections to move to the other node", || async {
        broker.connected_nodes() == (Some(other.clone()), Some(other.clone()))
    })
    .await;
    let moved_after = cut_at.elapsed();
    assert_eq!(held.acker.ack().await.unwrap(), AckStatus::Stale);
    broker
        .publish(INTERACTIVE, &message("after"))
        .await
        .unwrap();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let delivery = next(&mut deliveries).await;
        bodies.push(body(&delivery));
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    bodies.sort();
    assert_eq!(bodies, [body_of("after"), body_of("held")]);
    eventually("health to recover", || async {
        let health = broker.health();
        health.connected && health.consumers_alive
    })
    .await;
    eprintln!("moved to the next node {moved_after:?} after the cut");
    broker.close().await;
}

/// Start-up passes over nodes that refuse, whichever node it starts with, and fails only when
/// every node refuses, naming each without the password.
#[tokio::test]
async fn start_up_needs_one_node_of_the_list() {
    let (mut config, _cleanup) = config(|_| {});
    let dead = [
        format!("127.0.0.1:{}", support::redis::free_port()),
        format!("127.0.0.1:{}", support::redis::free_port()),
    ];
    for _ in 0..4 {
        config.url = cluster_url(&[&dead[0], RABBIT, &dead[1]]);
        let broker = AmqpBroker::connect(config.clone()).await.unwrap();
        let rabbit = Some(RABBIT.to_owned());
        assert_eq!(broker.connected_nodes(), (rabbit.clone(), rabbit));
        broker.close().await;
    }

    config.url = format!("amqp://guest:s3cret-pw@{},{}/%2f", dead[0], dead[1]);
    let error = AmqpBroker::connect(config).await.unwrap_err();
    let BrokerError::Connect { reason, .. } = &error else {
        panic!("expected a connect error, got {error:?}");
    };
    assert!(
        reason.contains(&dead[0]) && reason.contains(&dead[1]),
        "{reason}"
    );
    assert!(!error.to_string().contains("s3cret-pw"), "{error}");
}

#[tokio::test]
async fn a_malformed_node_list_is_refused_before_connecting() {
    let (mut config, _cleanup) = config(|_| {});
    config.url = format!("amqp://guest:s3cret-pw@{RABBIT},,{RABBIT}/%2f");
    let error = AmqpBroker::connect(config).await.unwrap_err();
    assert!(matches!(error, BrokerError::Url { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("empty entry in its node list"), "{text}");
    assert!(!text.contains("s3cret-pw"), "{text}");
}
