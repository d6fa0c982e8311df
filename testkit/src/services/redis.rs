//! Private Redis deployments for tests that kill servers: one server with an append-only file, a
//! six-node Redis Cluster and a Sentinel group. They are driven through `redis-cli` subprocesses,
//! so that only `verdict-backends` links a Redis client.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout};

use super::{
    COMMAND, POLL, SETTLE, STARTUP, STOP, create_dir, free_port, free_port_with_companion,
    log_file, poll_until, run, which, write,
};

/// How long one `redis-cli` query may take: a live server answers in milliseconds.
const QUERY: Duration = Duration::from_secs(5);
/// Every slot of a Redis Cluster.
const SLOTS: u32 = 16384;
/// A cluster node's bus port is its port + this.
const BUS_OFFSET: u16 = 10000;
/// The name the sentinels monitor the primary under.
const SENTINEL_MASTER: &str = "verdict";

/// One `redis-server` process (a data node or a sentinel) on a fixed port, restartable with the
/// same arguments.
#[derive(Debug)]
struct Server {
    port: u16,
    args: Vec<OsString>,
    log: PathBuf,
    child: Option<Child>,
    /// Stopped with `SIGSTOP`: running, but answering nothing.
    hung: bool,
}

impl Server {
    /// A data server on `port` with its files in `dir`, bound to loopback, with an append-only
    /// file synced on every write (so a kill loses nothing it acknowledged), and `extra`
    /// arguments.
    fn data(port: u16, dir: &Path, log: PathBuf, extra: &[&str]) -> Server {
        create_dir(dir);
        let port_text = port.to_string();
        let mut args: Vec<OsString> = [
            "--bind",
            "127.0.0.1",
            "--port",
            &port_text,
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--dir",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.push(dir.into());
        args.extend(extra.iter().map(OsString::from));
        Server {
            port,
            args,
            log,
            child: None,
            hung: false,
        }
    }

    /// Running and answering.
    fn alive(&self) -> bool {
        self.child.is_some() && !self.hung
    }

    /// Starts it and waits until it answers `PING`.
    async fn spawn(&mut self) {
        let child = Command::new(which("redis-server", "redis-server"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log_file(&self.log))
            .stderr(log_file(&self.log))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start redis-server on port {}: {e}", self.port));
        self.child = Some(child);
        self.hung = false;
        self.await_pong().await;
    }

    /// Waits until Redis answers `PING` with `PONG` (not `LOADING` while it replays its AOF).
    async fn await_pong(&self) {
        let deadline = Instant::now() + STARTUP;
        loop {
            if pong(self.port).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private Redis on 127.0.0.1:{} did not answer PING within {STARTUP:?}; see {}",
                self.port,
                self.log.display()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// `kill -9`, and waits until the process is gone.
    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = timeout(STOP, child.wait()).await;
        }
    }

    /// `kill -STOP` (`hung`) or `kill -CONT`: a server that keeps its connections open and
    /// answers nothing, as a hung host or a cut-off network does, and then resumes.
    async fn signal(&mut self, hung: bool) {
        let Some(pid) = self.child.as_ref().and_then(Child::id) else {
            panic!("127.0.0.1:{} is not running", self.port);
        };
        let signal = if hung { "-STOP" } else { "-CONT" };
        run(
            Command::new("kill").arg(signal).arg(pid.to_string()),
            "kill",
            COMMAND,
        )
        .await
        .unwrap_or_else(|e| panic!("kill {signal} {pid}: {e}"));
        self.hung = hung;
    }
}

async fn pong(port: u16) -> bool {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        conn.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 16];
        let n = conn.read(&mut reply).await?;
        std::io::Result::Ok(reply[..n].starts_with(b"+PONG"))
    };
    matches!(
        timeout(Duration::from_secs(1), exchange).await,
        Ok(Ok(true))
    )
}

/// Runs `redis-cli` against 127.0.0.1:`port`: the reply as `redis-cli` prints it to a pipe (one
/// line per element of a reply, nested arrays flattened), or an error reply, a refused
/// connection or a timeout as the error.
async fn redis_cli(port: u16, args: &[&str]) -> Result<String, String> {
    let port_text = port.to_string();
    run(
        Command::new(which("redis-cli", "redis-tools"))
            .args(["-e", "-h", "127.0.0.1", "-p", &port_text])
            .args(args)
            .stdin(Stdio::null()),
        &format!("redis-cli -p {port} {}", args.join(" ")),
        QUERY,
    )
    .await
}

/// The value of `field` in an `INFO`-style reply (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// A `redis-server` with an append-only file synced on every write, so a kill loses nothing it
/// acknowledged.
#[derive(Debug)]
pub struct PrivateRedis {
    server: Server,
}

impl PrivateRedis {
    /// Starts it with its data in `dir` and its log at `log`, and waits until it answers `PING`.
    pub async fn start(dir: &Path, log: &Path) -> PrivateRedis {
        let mut redis = PrivateRedis {
            server: Server::data(free_port(), dir, log.to_path_buf(), &[]),
        };
        redis.server.spawn().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.server.port)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// `kill -9`, and waits until the process is gone.
    pub async fn kill(&mut self) {
        self.server.kill().await;
    }

    /// Starts it again on the same port and data (the AOF replayed).
    pub async fn restart(&mut self) {
        self.server.kill().await;
        self.server.spawn().await;
    }
}

/// One node as a Redis Cluster node's `CLUSTER NODES` reply describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeView {
    port: u16,
    flags: Vec<String>,
    connected: bool,
    /// Slot ranges it serves, inclusive (ranges being imported or migrated left out).
    slots: Vec<(u32, u32)>,
}

impl NodeView {
    fn flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn primary(&self) -> bool {
        self.flag("master")
    }

    /// Marked failing, by agreement (`fail`) or by this observer alone (`fail?`), or not yet
    /// known (`handshake`, `noaddr`).
    fn unhealthy(&self) -> bool {
        ["fail", "fail?", "handshake", "noaddr"]
            .iter()
            .any(|f| self.flag(f))
    }

    fn serves(&self, slot: u32) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot> ...`.
fn parse_cluster_nodes(text: &str) -> Result<Vec<NodeView>, String> {
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(address), Some(flags), Some(link)) =
            (fields.get(1), fields.get(2), fields.get(7))
        else {
            return Err(format!("a CLUSTER NODES line too short: {line:?}"));
        };
        let port = address
            .split('@')
            .next()
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("no port in CLUSTER NODES line {line:?}"))?;
        let mut slots = Vec::new();
        for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            match (a.parse(), b.parse()) {
                (Ok(a), Ok(b)) => slots.push((a, b)),
                _ => return Err(format!("a bad slot range {range:?} in {line:?}")),
            }
        }
        nodes.push(NodeView {
            port,
            flags: flags.split(',').map(str::to_owned).collect(),
            connected: *link == "connected",
            slots,
        });
    }
    Ok(nodes)
}

/// The ports of the healthy primaries serving slots in `view`, sorted.
fn serving_primaries(view: &[NodeView]) -> Vec<u16> {
    let mut primaries: Vec<u16> = view
        .iter()
        .filter(|n| n.primary() && !n.unhealthy() && !n.slots.is_empty())
        .map(|n| n.port)
        .collect();
    primaries.sort_unstable();
    primaries
}

/// Whether every slot is served by a healthy primary in `view`, other than `except`.
fn covered(view: &[NodeView], except: Option<u16>) -> bool {
    let serving: Vec<&NodeView> = view
        .iter()
        .filter(|n| n.primary() && !n.unhealthy() && Some(n.port) != except)
        .collect();
    (0..SLOTS).all(|slot| serving.iter().any(|n| n.serves(slot)))
}

/// Six `redis-server` processes in cluster mode on loopback, three primaries with one replica
/// each, every one with an append-only file synced on every write and its own folder (its
/// `nodes.conf` in it). Nodes can be killed and restarted; all are killed when it drops.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Server>,
    /// The primaries right after creation: the addresses a client is configured with.
    seeds: Vec<u16>,
}

impl RedisCluster {
    /// Starts six nodes with their data under `dir` and their logs under `logs`, creates the
    /// cluster with `redis-cli --cluster create`, and returns once every node reports
    /// `cluster_state:ok` and sees all six healthy, and every replica has synced with its
    /// primary.
    pub async fn start(dir: &Path, logs: &Path) -> RedisCluster {
        RedisCluster::start_with(dir, logs, &[]).await
    }

    /// [`RedisCluster::start`] with `settings` (`redis-server` arguments, such as
    /// `--cluster-require-full-coverage no`) given to every node.
    pub async fn start_with(dir: &Path, logs: &Path, settings: &[&str]) -> RedisCluster {
        create_dir(logs);
        let mut ports = Vec::new();
        for _ in 0..6 {
            ports.push(free_port_with_companion(BUS_OFFSET, &ports));
        }
        let mut nodes: Vec<Server> = ports
            .iter()
            .map(|&port| {
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--repl-diskless-sync-delay",
                    "0",
                ];
                args.extend_from_slice(settings);
                Server::data(
                    port,
                    &dir.join(format!("node-{port}")),
                    logs.join(format!("redis-cluster-{port}.log")),
                    &args,
                )
            })
            .collect();
        for node in &mut nodes {
            node.spawn().await;
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        run(
            Command::new(which("redis-cli", "redis-tools"))
                .arg("--cluster")
                .arg("create")
                .args(&addresses)
                .args(["--cluster-replicas", "1", "--cluster-yes"])
                .stdin(Stdio::null()),
            "redis-cli --cluster create",
            COMMAND,
        )
        .await
        .unwrap_or_else(|e| panic!("create the Redis Cluster: {e}"));
        let mut cluster = RedisCluster {
            nodes,
            seeds: Vec::new(),
        };
        cluster.await_healthy("the new Redis Cluster").await;
        cluster.seeds = cluster.primaries().await;
        cluster
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`: the primaries at creation.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .seeds
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Every node's port, running or killed.
    pub fn node_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The ports of the primaries serving slots now, as a running node sees them, sorted.
    pub async fn primaries(&self) -> Vec<u16> {
        serving_primaries(&self.view().await)
    }

    /// The port of the primary serving `key`'s slot now.
    pub async fn primary_for_key(&self, key: &str) -> u16 {
        let port = self.live_port();
        let slot: u32 = redis_cli(port, &["CLUSTER", "KEYSLOT", key])
            .await
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key} on 127.0.0.1:{port} failed"));
        self.view()
            .await
            .iter()
            .find(|n| n.primary() && !n.unhealthy() && n.serves(slot))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no healthy primary serves slot {slot} of {key:?}"))
    }

    /// `kill -9` of the node on `port`, and waits until the process is gone.
    pub async fn kill(&mut self, port: u16) {
        self.node(port).kill().await;
    }

    /// Stops the node on `port` without killing it (`SIGSTOP`): its connections stay open and
    /// nothing it is sent is answered, until [`RedisCluster::resume`].
    pub async fn hang(&mut self, port: u16) {
        self.node(port).signal(true).await;
    }

    /// Lets a node stopped by [`RedisCluster::hang`] run again (`SIGCONT`).
    pub async fn resume(&mut self, port: u16) {
        self.node(port).signal(false).await;
    }

    /// Waits until every running node reports `cluster_state:ok`, sees the node on `killed_port`
    /// marked `fail` with no slots left, and sees every slot served by a healthy primary.
    pub async fn await_failover(&self, killed_port: u16) {
        let live: Vec<u16> = self.live_ports();
        poll_until(
            &format!("the failover of the killed primary 127.0.0.1:{killed_port}"),
            SETTLE,
            async || {
                for &port in &live {
                    cluster_state_ok(port).await?;
                    let view = cluster_view(port).await?;
                    let dead = view
                        .iter()
                        .find(|n| n.port == killed_port)
                        .ok_or_else(|| format!("{port} does not know {killed_port}"))?;
                    if !dead.flag("fail") || !dead.slots.is_empty() {
                        return Err(format!("{port} sees {killed_port} as {dead:?}"));
                    }
                    if !covered(&view, Some(killed_port)) {
                        return Err(format!("{port} sees slots without a primary: {view:?}"));
                    }
                }
                Ok(())
            },
        )
        .await;
    }

    /// Starts the killed node on `port` again, on the same port and folder (its `nodes.conf`
    /// and AOF), and waits until it has rejoined (as a replica if its slots moved meanwhile)
    /// and the whole cluster is healthy and synced again.
    pub async fn restart(&mut self, port: u16) {
        let node = self.node(port);
        node.kill().await;
        node.spawn().await;
        self.await_healthy(&format!("the restarted node 127.0.0.1:{port}"))
            .await;
    }

    fn node(&mut self, port: u16) -> &mut Server {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("127.0.0.1:{port} is not a node of this cluster"))
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.alive())
            .map(|n| n.port)
            .collect()
    }

    fn live_port(&self) -> u16 {
        self.live_ports()
            .first()
            .copied()
            .unwrap_or_else(|| panic!("every node of the Redis Cluster is killed"))
    }

    /// `CLUSTER NODES` as the first running node that answers sees it.
    async fn view(&self) -> Vec<NodeView> {
        let mut errors = Vec::new();
        for port in self.live_ports() {
            match cluster_view(port).await {
                Ok(view) => return view,
                Err(e) => errors.push(e),
            }
        }
        panic!("no node of the Redis Cluster answered CLUSTER NODES: {errors:?}");
    }

    /// Waits until every node runs, reports `cluster_state:ok` and sees all six nodes healthy
    /// and connected and every slot served, and every replica's link to its primary is up.
    async fn await_healthy(&self, what: &str) {
        let ports = self.node_ports();
        poll_until(&format!("{what} to be healthy"), STARTUP, async || {
            let mut agreed: Option<Vec<u16>> = None;
            for &port in &ports {
                cluster_state_ok(port).await?;
                let view = cluster_view(port).await?;
                let known: BTreeSet<u16> = view.iter().map(|n| n.port).collect();
                if known != ports.iter().copied().collect() {
                    return Err(format!("{port} knows the nodes {known:?}"));
                }
                if let Some(bad) = view.iter().find(|n| n.unhealthy() || !n.connected) {
                    return Err(format!("{port} sees {bad:?}"));
                }
                if !covered(&view, None) {
                    return Err(format!("{port} sees slots without a primary"));
                }
                // A node restarted after a failover believes it is a primary until it hears
                // of the newer configuration.
                let primaries = serving_primaries(&view);
                match &agreed {
                    Some(seen) if *seen != primaries => {
                        return Err(format!(
                            "{port} sees the primaries {primaries:?}, another node {seen:?}"
                        ));
                    }
                    _ => agreed = Some(primaries),
                }
                replica_synced(port).await?;
            }
            Ok(())
        })
        .await;
    }
}

async fn cluster_state_ok(port: u16) -> Result<(), String> {
    let info = redis_cli(port, &["CLUSTER", "INFO"]).await?;
    match info_field(&info, "cluster_state") {
        Some("ok") => Ok(()),
        state => Err(format!("{port} reports cluster_state {state:?}")),
    }
}

async fn cluster_view(port: u16) -> Result<Vec<NodeView>, String> {
    parse_cluster_nodes(&redis_cli(port, &["CLUSTER", "NODES"]).await?)
}

/// Ok for a primary; for a replica, Ok once its link to its primary is up.
async fn replica_synced(port: u16) -> Result<(), String> {
    let info = redis_cli(port, &["INFO", "replication"]).await?;
    match info_field(&info, "role") {
        Some("master") => Ok(()),
        Some("slave") => match info_field(&info, "master_link_status") {
            Some("up") => Ok(()),
            status => Err(format!("{port}'s link to its primary is {status:?}")),
        },
        role => Err(format!("{port} reports the role {role:?}")),
    }
}

/// One primary, one replica and three sentinels (quorum 2) watching them under the name
/// `verdict`, all on loopback, data with an append-only file synced on every write. The primary
/// can be killed and the failover awaited; all are killed when it drops.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The two data servers: the primary at start, then its replica.
    data: Vec<Server>,
    sentinels: Vec<Server>,
}

impl RedisSentinel {
    /// Starts the primary, its replica and three sentinels with their files under `dir` and
    /// their logs under `logs`, and waits until the replica has synced and every sentinel knows
    /// the other two and the replica.
    pub async fn start(dir: &Path, logs: &Path) -> RedisSentinel {
        create_dir(dir);
        create_dir(logs);
        // Sentinels rewrite their configuration files, which they find by absolute path.
        let dir =
            std::fs::canonicalize(dir).unwrap_or_else(|e| panic!("resolve {}: {e}", dir.display()));
        let (primary, replica) = (free_port(), free_port());
        let primary_text = primary.to_string();
        let sync = ["--repl-diskless-sync-delay", "0"];
        let mut data = vec![
            Server::data(
                primary,
                &dir.join(format!("data-{primary}")),
                logs.join(format!("redis-sentinel-data-{primary}.log")),
                &sync,
            ),
            Server::data(
                replica,
                &dir.join(format!("data-{replica}")),
                logs.join(format!("redis-sentinel-data-{replica}.log")),
                &[sync[0], sync[1], "--replicaof", "127.0.0.1", &primary_text],
            ),
        ];
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let folder = dir.join(format!("sentinel-{port}"));
            create_dir(&folder);
            let conf = folder.join("sentinel.conf");
            write(
                &conf,
                &format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nsentinel resolve-hostnames no\n\
                     sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER} 3000\n",
                    folder.display()
                ),
            );
            sentinels.push(Server {
                port,
                args: vec![conf.into_os_string(), "--sentinel".into()],
                log: logs.join(format!("redis-sentinel-{port}.log")),
                child: None,
                hung: false,
            });
        }
        for server in data.iter_mut().chain(sentinels.iter_mut()) {
            server.spawn().await;
        }
        let group = RedisSentinel { data, sentinels };
        group.await_ready().await;
        group
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/verdict`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", sentinels.join(","))
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The data servers' ports: the primary at start, then the replica.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(|s| s.port).collect()
    }

    /// The primary's port as a sentinel reports it now (`SENTINEL get-master-addr-by-name`).
    pub async fn primary_port(&self) -> u16 {
        let port = self.sentinels[0].port;
        master_addr(port)
            .await
            .unwrap_or_else(|e| panic!("ask the sentinel 127.0.0.1:{port} for the primary: {e}"))
    }

    /// `kill -9` of the current primary, and waits until the process is gone; returns its
    /// port.
    pub async fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port().await;
        let server = self
            .data
            .iter_mut()
            .find(|s| s.port == port)
            .unwrap_or_else(|| panic!("the sentinels name 127.0.0.1:{port}, not ours"));
        server.kill().await;
        port
    }

    /// Waits until every sentinel names the remaining data server as the primary and it answers
    /// `ROLE` as a primary.
    pub async fn await_failover(&self) {
        let Some(survivor) = self.data.iter().find(|s| s.alive()).map(|s| s.port) else {
            panic!("both data servers of the Sentinel group are killed");
        };
        let sentinels = self.sentinel_ports();
        poll_until(
            &format!("the sentinels' failover to 127.0.0.1:{survivor}"),
            SETTLE,
            async || {
                for &sentinel in &sentinels {
                    let named = master_addr(sentinel).await?;
                    if named != survivor {
                        return Err(format!("{sentinel} names {named} as the primary"));
                    }
                }
                let role = redis_cli(survivor, &["ROLE"]).await?;
                match role.lines().next() {
                    Some("master") => Ok(()),
                    first => Err(format!("{survivor} answers ROLE with {first:?}")),
                }
            },
        )
        .await;
    }

    async fn await_ready(&self) {
        let (primary, replica) = (self.data[0].port, self.data[1].port);
        let sentinels = self.sentinel_ports();
        poll_until("the Sentinel group to be ready", STARTUP, async || {
            replica_synced(replica).await?;
            for &sentinel in &sentinels {
                let named = master_addr(sentinel).await?;
                if named != primary {
                    return Err(format!("{sentinel} names {named} as the primary"));
                }
                let others = sentinel_entries(sentinel, "sentinels").await?;
                let mut other_ports: Vec<u16> = others
                    .iter()
                    .filter(|e| entry(e, "flags") == Some("sentinel"))
                    .filter_map(|e| entry(e, "port")?.parse().ok())
                    .collect();
                other_ports.sort_unstable();
                let mut expected: Vec<u16> = sentinels
                    .iter()
                    .copied()
                    .filter(|&p| p != sentinel)
                    .collect();
                expected.sort_unstable();
                if other_ports != expected {
                    return Err(format!("{sentinel} knows the healthy sentinels {others:?}"));
                }
                let replicas = sentinel_entries(sentinel, "replicas").await?;
                let known = replicas.iter().any(|e| {
                    entry(e, "port") == Some(&replica.to_string())
                        && entry(e, "flags") == Some("slave")
                });
                if !known {
                    return Err(format!("{sentinel} knows the replicas {replicas:?}"));
                }
            }
            Ok(())
        })
        .await;
    }
}

/// The primary's port a sentinel names (`SENTINEL get-master-addr-by-name verdict`).
async fn master_addr(sentinel: u16) -> Result<u16, String> {
    let reply = redis_cli(
        sentinel,
        &["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER],
    )
    .await?;
    reply
        .lines()
        .nth(1)
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("{sentinel} answers get-master-addr-by-name with {reply:?}"))
}

/// `SENTINEL <what> verdict` (`sentinels`, `replicas`): one list of field/value pairs per
/// entry, which `redis-cli` prints flattened, each entry starting with its `name`.
async fn sentinel_entries(sentinel: u16, what: &str) -> Result<Vec<Vec<(String, String)>>, String> {
    let reply = redis_cli(sentinel, &["SENTINEL", what, SENTINEL_MASTER]).await?;
    let lines: Vec<&str> = reply.lines().collect();
    let mut entries: Vec<Vec<(String, String)>> = Vec::new();
    for pair in lines.chunks(2) {
        let [field, value] = pair else {
            return Err(format!(
                "SENTINEL {what} printed an odd number of lines: {reply:?}"
            ));
        };
        if *field == "name" || entries.is_empty() {
            entries.push(Vec::new());
        }
        if let Some(last) = entries.last_mut() {
            last.push(((*field).to_owned(), (*value).to_owned()));
        }
    }
    Ok(entries)
}

fn entry<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a failed assertion

    use super::*;

    #[test]
    fn cluster_nodes_are_parsed_with_their_slots_and_flags() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 myself,master - 0 0 3 connected 10923-16383 [1->-e7d1]
e7d1 127.0.0.1:30001@40001 master,fail - 0 1426238316232 1 disconnected 0-5459 5460
";
        let view = parse_cluster_nodes(text).unwrap();
        assert_eq!(view.len(), 4);
        assert_eq!(view[1].port, 30002);
        assert_eq!(view[2].slots, vec![(10923, 16383)]);
        assert_eq!(view[3].slots, vec![(0, 5459), (5460, 5460)]);
        assert!(view[3].unhealthy() && !view[3].connected);
        assert!(view[2].primary() && !view[2].unhealthy());
        assert!(!view[0].primary());
        // The failing primary's slots are served by nobody healthy.
        assert!(!covered(&view, None));
        let mut recovered = view.clone();
        recovered[3].flags = vec!["master".into()];
        assert!(covered(&recovered, None));
        assert!(!covered(&recovered, Some(30001)));
    }

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\n";
        assert_eq!(info_field(info, "role"), Some("slave"));
        assert_eq!(info_field(info, "master_link_status"), Some("up"));
        assert_eq!(info_field(info, "master"), None);
    }
}
