//! The private services against real servers: each kind started once, checked to serve, put
//! through its fault (a killed primary, a stopped node, an alarm) and dropped, after which none
//! of its ports answers. Slow (a RabbitMQ cluster takes half a minute to form); run with
//! `--nocapture` to see the measured times.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::Mutex;
use verdict_testkit::services::{
    PrivateRabbit, PrivateRedis, RabbitCluster, RedisCluster, RedisSentinel, await_port_closed,
};

/// One service at a time: on two cores, a RabbitMQ cluster booting next to a Redis failover
/// would slow both and blur the measured times.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// `redis-cli` against 127.0.0.1:`port` (`-c` follows cluster redirections), its replies trimmed;
/// each command of `script` on its own line, one connection for all.
async fn cli(port: u16, cluster: bool, script: &str) -> String {
    let mut command = Command::new("redis-cli");
    command.args(["-e", "-h", "127.0.0.1", "-p", &port.to_string()]);
    if cluster {
        command.arg("-c");
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "redis-cli -p {port} {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `-c` reports each redirection it followed on its own line.
    let reply: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("-> Redirected"))
        .collect();
    reply.join("\n").trim().to_owned()
}

/// The port of a `scheme://[user@]127.0.0.1:PORT/...` URL.
fn port_of(url: &str) -> u16 {
    let authority = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    let host = authority.rsplit('@').next().unwrap();
    host.rsplit(':').next().unwrap().parse().unwrap()
}

/// Whether 127.0.0.1:`port` speaks AMQP 0-9-1: its answer to the protocol header starts with a
/// method frame (`connection.start`).
async fn speaks_amqp(port: u16) -> bool {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    conn.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut frame = [0u8; 1];
    conn.read_exact(&mut frame).await.is_ok() && frame[0] == 1
}

fn seconds(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

#[tokio::test]
async fn private_redis_keeps_what_it_acknowledged_across_a_kill() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut redis =
        PrivateRedis::start(&dir.path().join("data"), &dir.path().join("redis.log")).await;
    let port = port_of(&redis.url());
    assert_eq!(cli(port, false, "SET kept yes\n").await, "OK");

    redis.kill().await;
    redis.restart().await;
    assert_eq!(cli(port, false, "GET kept\n").await, "yes");

    drop(redis);
    await_port_closed(port, "the dropped Redis").await;
}

#[tokio::test]
async fn redis_cluster_fails_over_a_killed_primary_and_takes_it_back_as_a_replica() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut cluster = RedisCluster::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    eprintln!("redis cluster: started in {}", seconds(started));

    let primaries = cluster.primaries().await;
    assert_eq!(primaries.len(), 3);
    let seeds: Vec<String> = primaries.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", seeds.join(","))
    );
    let nodes = cluster.node_ports();
    assert_eq!(nodes.len(), 6);

    // Any node takes a write, redirecting it to its slot's primary.
    for &port in &nodes {
        assert_eq!(
            cli(port, true, &format!("SET key-{port} {port}\n")).await,
            "OK"
        );
    }
    assert_eq!(
        cli(nodes[5], true, &format!("GET key-{}\n", nodes[0])).await,
        nodes[0].to_string()
    );
    // Written to the primary that will be killed, and replicated before the kill.
    let doomed = cluster.primary_for_key("survivor").await;
    assert!(primaries.contains(&doomed));
    assert_eq!(
        cli(doomed, false, "SET survivor yes\nWAIT 1 5000\n").await,
        "OK\n1"
    );

    cluster.kill(doomed).await;
    let killed = Instant::now();
    cluster.await_failover(doomed).await;
    eprintln!("redis cluster: failover in {}", seconds(killed));
    let promoted = cluster.primary_for_key("survivor").await;
    assert_ne!(promoted, doomed);
    let now = cluster.primaries().await;
    assert_eq!(now.len(), 3);
    assert!(now.contains(&promoted) && !now.contains(&doomed));
    let live = *nodes.iter().find(|&&p| p != doomed).unwrap();
    assert_eq!(cli(live, true, "GET survivor\n").await, "yes");

    let restarting = Instant::now();
    cluster.restart(doomed).await;
    eprintln!(
        "redis cluster: killed node back and synced in {}",
        seconds(restarting)
    );
    assert_eq!(cluster.primaries().await, now, "it came back as a replica");
    assert!(cli(doomed, false, "ROLE\n").await.starts_with("slave"));
    assert_eq!(cli(doomed, true, "GET survivor\n").await, "yes");

    drop(cluster);
    for port in nodes {
        await_port_closed(port, "a dropped Redis Cluster node").await;
    }
}

#[tokio::test]
async fn redis_sentinel_fails_over_a_killed_primary() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut group = RedisSentinel::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    eprintln!("redis sentinel: started in {}", seconds(started));

    let sentinels: Vec<String> = group
        .sentinel_ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    assert_eq!(sentinels.len(), 3);
    assert_eq!(
        group.url(),
        format!("redis+sentinel://{}/verdict", sentinels.join(","))
    );
    let [first, second] = group.data_ports()[..] else {
        panic!("two data servers expected: {:?}", group.data_ports());
    };
    assert_eq!(group.primary_port().await, first);
    assert_eq!(
        cli(first, false, "SET survivor yes\nWAIT 1 5000\n").await,
        "OK\n1"
    );

    assert_eq!(group.kill_primary().await, first);
    let killed = Instant::now();
    group.await_failover().await;
    eprintln!("redis sentinel: failover in {}", seconds(killed));
    assert_eq!(group.primary_port().await, second);
    assert_eq!(cli(second, false, "GET survivor\n").await, "yes");
    assert_eq!(cli(second, false, "SET after yes\n").await, "OK");

    let ports: Vec<u16> = group
        .data_ports()
        .into_iter()
        .chain(group.sentinel_ports())
        .collect();
    drop(group);
    for port in ports {
        await_port_closed(port, "a dropped Sentinel group's server").await;
    }
}

#[tokio::test]
async fn rabbit_cluster_survives_a_stopped_node_and_raises_alarms_everywhere() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut cluster =
        RabbitCluster::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    eprintln!("rabbit cluster: formed in {}", seconds(started));

    let urls = cluster.node_urls();
    assert_eq!(urls.len(), 3);
    let ports: Vec<u16> = urls.iter().map(|u| port_of(u)).collect();
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    assert_eq!(
        cluster.url(),
        format!("amqp://guest:guest@{}/%2f", hosts.join(","))
    );
    assert_eq!(cluster.running_nodes().await.len(), 3);
    for &port in &ports {
        assert!(
            speaks_amqp(port).await,
            "127.0.0.1:{port} does not speak AMQP"
        );
    }

    let stopping = Instant::now();
    cluster.stop_node(2).await;
    eprintln!("rabbit cluster: node stopped in {}", seconds(stopping));
    await_port_closed(ports[2], "the stopped node").await;
    assert_eq!(cluster.running_nodes().await.len(), 2);
    let starting = Instant::now();
    cluster.start_node(2).await;
    eprintln!("rabbit cluster: node back in {}", seconds(starting));
    assert_eq!(cluster.running_nodes().await.len(), 3);
    assert!(speaks_amqp(ports[2]).await);

    let raising = Instant::now();
    cluster.set_memory_alarm(true).await;
    cluster.await_alarm(true).await;
    eprintln!(
        "rabbit cluster: memory alarm on every node in {}",
        seconds(raising)
    );
    let clearing = Instant::now();
    cluster.set_memory_alarm(false).await;
    cluster.await_alarm(false).await;
    eprintln!(
        "rabbit cluster: memory alarm cleared in {}",
        seconds(clearing)
    );

    drop(cluster);
    for port in ports {
        await_port_closed(port, "a dropped RabbitMQ node").await;
    }
}

#[tokio::test]
async fn private_rabbit_raises_and_clears_a_disk_alarm_and_starts_again() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut rabbit = PrivateRabbit::start(&dir.path().join("data"), &dir.path().join("logs")).await;
    eprintln!("private rabbit: booted in {}", seconds(started));
    let port = port_of(&rabbit.url());
    assert!(speaks_amqp(port).await);

    let raising = Instant::now();
    rabbit.set_disk_alarm(true).await;
    rabbit.await_alarm(true).await;
    eprintln!("private rabbit: disk alarm in {}", seconds(raising));
    rabbit.set_disk_alarm(false).await;
    rabbit.await_alarm(false).await;

    rabbit.stop().await;
    await_port_closed(port, "the stopped node").await;
    rabbit.start_again().await;
    assert!(speaks_amqp(port).await);

    drop(rabbit);
    await_port_closed(port, "the dropped RabbitMQ node").await;
}
