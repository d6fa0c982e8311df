//! What only the RabbitMQ broker does, against the real RabbitMQ on 127.0.0.1:5672 (SPEC Q1, Q5):
//! its topology and the errors naming it, credentials kept out of errors, messages and dead letters
//! as AMQP sees them, delay buckets, unroutable messages, a consumer whose queue is deleted,
//! recovery from a cut connection with stale acks, the publish timeout during an outage, a node
//! list (start-up and reconnection move through it), and resource alarms.
//! Everything the in-memory broker promises too is in the conformance suite, `broker.rs`.
//!
//! Every test uses its own name prefix and deletes its queues and exchanges when it ends (see
//! `support::rabbitmq`). Connection loss is made with an in-test TCP proxy that the test cuts and
//! restores, a broker URL's node list with several proxies: the shared RabbitMQ is never
//! restarted. What needs a node to stop or to raise a resource alarm runs on private RabbitMQ
//! deployments of its own (`verdict_testkit::services`): a three-node cluster losing the node
//! the broker is connected to under load, and a single node's memory alarm.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{
    AckStatus, Broker, BrokerError, DEAD_LETTER_REASON_HEADER, DELIVERY_LIMIT_REASON, Deliveries,
    Delivery, Message, Route,
};
use verdict_proto::wire::Priority;
use verdict_testkit::services::{PrivateRabbit, RabbitCluster};

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

// ---------------------------------------------------------------------------------------------
// Private RabbitMQ deployments: a cluster losing a node, a node raising a resource alarm. Slow
// (a node boots in 5–20 s), so one deployment per test.

/// The settings of a broker on a private deployment at `url`.
fn private_config(url: String) -> AmqpConfig {
    let mut config = AmqpConfig::new(url);
    config.prefix = format!("test-{:016x}", rand::random::<u64>());
    config.connection_name = format!("verdict-{}", config.prefix);
    config.reconnect_max_delay = Duration::from_millis(500);
    config
}

/// The number in a [`message`] made from a number.
fn number(delivery: &Delivery) -> u64 {
    let body: serde_json::Value = serde_json::from_slice(&delivery.message.body).unwrap();
    body["n"].as_str().unwrap().parse().unwrap()
}

/// Publishes numbered messages one after another until `stop`, from `first` up, recording the
/// ones the broker confirmed; a failed publish (the node going away under it) is noted and the
/// next number published.
fn publish_numbers(
    broker: Arc<AmqpBroker>,
    first: u64,
    confirmed: Arc<std::sync::Mutex<BTreeSet<u64>>>,
    failed: Arc<std::sync::Mutex<Vec<String>>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut n = first;
        while !stop.is_cancelled() {
            match broker.publish(INTERACTIVE, &message(&n.to_string())).await {
                Ok(()) => {
                    confirmed.lock().unwrap().insert(n);
                }
                Err(error) => failed.lock().unwrap().push(format!("{n}: {error}")),
            }
            n += 1;
        }
    })
}

/// A three-node cluster under load loses the node the broker is connected to: both connections
/// move to another node, consumers consume again, publishing goes on, every confirmed message
/// is delivered at least once, and the quorum queue keeps its majority.
#[tokio::test]
async fn a_cluster_node_lost_under_load_loses_no_confirmed_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster =
        RabbitCluster::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    let mut config = private_config(cluster.url());
    config.publish_channels = 4;
    let broker = Arc::new(AmqpBroker::connect(config).await.unwrap());
    let (Some(node), Some(consuming)) = broker.connected_nodes() else {
        panic!("not connected: {:?}", broker.connected_nodes());
    };
    assert_eq!(node, consuming);
    let lost = cluster
        .node_urls()
        .iter()
        .position(|url| url.contains(&format!("@{node}/")))
        .unwrap_or_else(|| panic!("{node} is none of {:?}", cluster.node_urls()));

    // Everything received, acknowledged as it comes (a stale ack is redelivered: received again).
    let received = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let mut deliveries = broker.consume(INTERACTIVE, 50).await.unwrap();
    let consumer = {
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            while let Some(delivery) = deliveries.next().await {
                received.lock().unwrap().insert(number(&delivery));
                let _ = delivery.acker.ack().await;
            }
        })
    };
    let confirmed = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            publish_numbers(
                Arc::clone(&broker),
                p * 1_000_000,
                Arc::clone(&confirmed),
                Arc::clone(&failed),
                stop.clone(),
            )
        })
        .collect();
    let confirmed_count = || confirmed.lock().unwrap().len();
    // What a failure needs explaining: the progress every half second (shown when it fails).
    let progress = {
        let (confirmed, received, failed) = (
            Arc::clone(&confirmed),
            Arc::clone(&received),
            Arc::clone(&failed),
        );
        let broker = Arc::clone(&broker);
        tokio::spawn(async move {
            let start = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (count, last) = {
                    let failed = failed.lock().unwrap();
                    (failed.len(), failed.last().cloned())
                };
                eprintln!(
                    "{:?}: confirmed {} received {} failed {count} ({last:?}) nodes {:?} health {:?}",
                    start.elapsed(),
                    confirmed.lock().unwrap().len(),
                    received.lock().unwrap().len(),
                    broker.connected_nodes(),
                    broker.health()
                );
            }
        })
    };
    eventually("messages to flow before the loss", || async {
        confirmed_count() >= 200 && received.lock().unwrap().len() >= 100
    })
    .await;

    // The node goes away; a watcher times the outage as the broker sees it.
    let watcher = {
        let broker = Arc::clone(&broker);
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut lost_at = None;
            loop {
                let connected = broker.health().connected;
                match (lost_at, connected) {
                    (None, false) => lost_at = Some(Instant::now()),
                    (Some(at), true) => return Instant::now() - at,
                    _ => {}
                }
                assert!(Instant::now() < deadline, "the broker never reconnected");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    eprintln!("stopping node {lost} ({node}) of {:?}", cluster.node_urls());
    let stopping = Instant::now();
    cluster.stop_node(lost).await;
    let stopped_in = stopping.elapsed();
    let outage = within("the reconnection", watcher).await.unwrap();
    let (Some(now_on), Some(consuming)) = broker.connected_nodes() else {
        panic!("not reconnected: {:?}", broker.connected_nodes());
    };
    assert_ne!(now_on, node, "publishing is still on the stopped node");
    assert_ne!(consuming, node, "consuming is still on the stopped node");
    let (confirmed_at_loss, received_at_loss) = (confirmed_count(), received.lock().unwrap().len());
    eventually(
        "publishing and consuming to go on after the loss",
        || async {
            confirmed_count() >= confirmed_at_loss + 200
                && received.lock().unwrap().len() >= received_at_loss + 200
        },
    )
    .await;
    stop.cancel();
    for publisher in publishers {
        within("a publisher to stop", publisher).await.unwrap();
    }

    let confirmed = confirmed.lock().unwrap().clone();
    eventually("every confirmed message to be delivered", || async {
        confirmed.is_subset(&received.lock().unwrap())
    })
    .await;
    eventually("health to recover", || async {
        let health = broker.health();
        health.connected && health.consumers_alive
    })
    .await;
    // The queue kept its majority: two of three nodes run and it answers.
    assert_eq!(cluster.running_nodes().await.len(), 2);
    broker.queue_stats(INTERACTIVE).await.unwrap();
    let failed = failed.lock().unwrap().clone();
    eprintln!(
        "node {node} stopped in {stopped_in:?}; the broker was disconnected for {outage:?} and \
         moved to {now_on}; {} messages confirmed, {} publishes failed: {:?}",
        confirmed.len(),
        failed.len(),
        failed.iter().take(5).collect::<Vec<_>>()
    );
    progress.abort();
    broker.close().await;
    consumer.abort();
}

/// A memory alarm blocks the publishing connection only: `pressure` names the alarm before
/// anything of ours is published (the broker's probe), publishing fails with `Blocked` after
/// `publish_timeout`, while deliveries published before it are still received and acknowledged. Once it clears, publishing goes on and nothing is lost.
#[tokio::test]
async fn a_resource_alarm_holds_publishing_back_while_acks_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let rabbit = PrivateRabbit::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    let mut config = private_config(rabbit.url());
    config.publish_timeout = Duration::from_secs(2);
    let broker = AmqpBroker::connect(config.clone()).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 10).await.unwrap();
    let mut confirmed = BTreeSet::new();
    for n in 0..6 {
        broker
            .publish(INTERACTIVE, &message(&n.to_string()))
            .await
            .unwrap();
        confirmed.insert(n);
    }
    // Three received and held before the alarm, three waiting in the prefetch buffer.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut deliveries).await);
    }

    rabbit.set_memory_alarm(true).await;
    rabbit.await_alarm(true).await;
    // Nothing of ours published yet during the alarm: the broker's own probe makes it known.
    let alarm_on = Instant::now();
    eventually("the alarm probe to see the alarm", || async {
        broker.pressure().is_some()
    })
    .await;
    let probed_in = alarm_on.elapsed();
    // RabbitMQ 3.10 tells a connection that it is blocked when it publishes during the alarm,
    // and may still take that publish; the next one finds the connection blocked.
    // Timed from the first publish during the alarm until `pressure` reports it.
    let publishing_started = Instant::now();
    let pressure_known = async {
        while broker.pressure().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        publishing_started.elapsed()
    };
    let publishing = async {
        let mut taken = Vec::new();
        for n in 100..105u64 {
            let started = Instant::now();
            match broker.publish(INTERACTIVE, &message(&n.to_string())).await {
                Ok(()) => taken.push(n),
                Err(error) => return (taken, Some((error, started.elapsed()))),
            }
        }
        (taken, None)
    };
    let (detected, (taken, blocked)) = within("a publish to be held back", async {
        tokio::join!(pressure_known, publishing)
    })
    .await;
    confirmed.extend(taken);
    let (error, waited) = blocked.expect("a publish during the alarm went through every time");
    let BrokerError::Blocked { reason, .. } = &error else {
        panic!("expected Blocked, got {error:?}");
    };
    assert!(reason.contains("low on memory"), "{reason}");
    assert!(error.is_retryable());
    assert!(
        error.to_string().contains("vm_memory_high_watermark"),
        "{error}"
    );
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(10),
        "failed after {waited:?}, publish_timeout is 2 s"
    );
    let pressure = broker.pressure().expect("pressure during the alarm");
    assert!(pressure.contains("low on memory"), "{pressure}");

    // Consuming goes on: what was held is acknowledged, what waited is received and acked.
    for delivery in held.drain(..) {
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    for _ in 0..3 {
        let delivery = next(&mut deliveries).await;
        assert!(number(&delivery) < 6, "{}", body(&delivery));
        assert_eq!(delivery.acker.ack().await.unwrap(), AckStatus::Done);
    }
    assert!(broker.health().connected);

    rabbit.set_memory_alarm(false).await;
    let cleared = Instant::now();
    eventually("the pressure to lift", || async {
        broker.pressure().is_none()
    })
    .await;
    let lifted_in = cleared.elapsed();
    rabbit.await_alarm(false).await;
    broker.publish(INTERACTIVE, &message("200")).await.unwrap();
    confirmed.insert(200);

    // Nothing confirmed is lost, and the acks sent during the alarm arrived: a new broker on the
    // queue finds none of 0–5 again.
    broker.close().await;
    let broker = AmqpBroker::connect(config).await.unwrap();
    let mut deliveries = broker.consume(INTERACTIVE, 50).await.unwrap();
    let mut after = BTreeSet::new();
    while !confirmed
        .iter()
        .filter(|n| **n >= 6)
        .all(|n| after.contains(n))
    {
        let delivery = next(&mut deliveries).await;
        after.insert(number(&delivery));
        delivery.acker.ack().await.unwrap();
    }
    assert!(
        after.iter().all(|n| *n >= 6),
        "acked during the alarm, delivered again: {after:?}"
    );
    eprintln!(
        "alarm: seen by the probe {probed_in:?} after the alarm was raised; pressure known \
         {detected:?} after the first publish during the alarm began; a \
         publish failed Blocked after {waited:?}; the pressure lifted {lifted_in:?} after \
         the watermark was put back"
    );
    broker.close().await;
}
