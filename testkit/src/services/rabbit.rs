//! Private RabbitMQ deployments for tests that stop brokers or raise their alarms: one node, or a
//! three-node cluster, each with its own epmd, so neither it nor `rabbitmqctl` ever talks to the
//! machine's shared node.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};
use tokio::time::timeout;

use super::{
    COMMAND, SETTLE, STARTUP, STOP, await_port, create_dir, free_port, kill_tree, log_file,
    poll_until, run, set_mode, signal, which, write,
};

/// Where Debian's packages put the real RabbitMQ scripts (`/usr/sbin/rabbitmq-server` is a
/// wrapper that switches to the `rabbitmq` user and Debian's own node).
const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A memory high watermark (a fraction of the machine's memory) that any node exceeds, and the
/// default it is put back to.
const MEMORY_ALARM_WATERMARK: &str = "0.0000001";
const MEMORY_DEFAULT_WATERMARK: &str = "0.4";
/// A free-disk limit no test machine meets, and the default it is put back to.
const DISK_ALARM_LIMIT: &str = "10000GB";
const DISK_DEFAULT_LIMIT: &str = "50MB";

/// The folder of the real `rabbitmq-server`, `rabbitmqctl` and `rabbitmq-diagnostics` scripts.
fn scripts_folder() -> PathBuf {
    let script = Path::new(RABBITMQ_BIN).join("rabbitmq-server");
    let real = std::fs::canonicalize(&script).unwrap_or_else(|_| {
        panic!(
            "{} is missing; these tests need RabbitMQ: apt-get install -y --no-install-recommends rabbitmq-server",
            script.display()
        )
    });
    real.parent()
        .unwrap_or_else(|| panic!("{} has no folder", real.display()))
        .to_path_buf()
}

/// An Erlang cookie no other run shares: only this run's processes read it, and distribution
/// listens on loopback alone.
fn new_cookie(seed: u16) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("VERDICT{nanos:X}{:X}{seed:X}", std::process::id())
}

/// Our own epmd in the foreground, so it is our child and dies with the guard (an epmd a node
/// started itself would daemonize and outlive the run).
async fn start_epmd(port: u16, log: &Path) -> Child {
    let epmd = Command::new(which("epmd", "erlang-base"))
        .args(["-port", &port.to_string(), "-address", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(log_file(log))
        .stderr(log_file(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start epmd: {e}"));
    await_port(port, "the private epmd").await;
    epmd
}

/// One RabbitMQ node of ours: its node name, AMQP and distribution ports, data and log folders,
/// pid file, configuration files and `HOME` with the Erlang cookie, all under one folder.
#[derive(Debug)]
struct RabbitNode {
    name: String,
    amqp_port: u16,
    sbin: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The `rabbitmq-server` script: a shell that runs the Erlang VM as its child and stops it
    /// gracefully on SIGTERM.
    server: Option<Child>,
}

impl RabbitNode {
    /// Writes the node's files under `dir`; it will log to `log` and register with the epmd on
    /// `epmd_port`.
    fn new(dir: &Path, log: PathBuf, sbin: &Path, cookie: &str, epmd_port: u16) -> RabbitNode {
        let (amqp_port, dist_port) = (free_port(), free_port());
        let path = |name: &str| dir.join(name).display().to_string();
        for folder in ["home", "mnesia", "log"] {
            create_dir(&dir.join(folder));
        }
        let cookie_file = dir.join("home/.erlang.cookie");
        write(&cookie_file, cookie);
        set_mode(&cookie_file, 0o400);
        write(
            &dir.join("rabbitmq.conf"),
            &format!(
                "listeners.tcp.default = 127.0.0.1:{amqp_port}\nloopback_users.guest = true\n"
            ),
        );
        write(&dir.join("advanced.config"), "[].\n");
        write(&dir.join("enabled_plugins"), "[].\n");
        write(&dir.join("rabbitmq-env.conf"), "");
        let name = format!("verdict{amqp_port}@localhost");
        let env: Vec<(String, String)> = [
            ("HOME", path("home")),
            ("RABBITMQ_NODENAME", name.clone()),
            ("RABBITMQ_MNESIA_BASE", path("mnesia")),
            ("RABBITMQ_LOG_BASE", path("log")),
            ("RABBITMQ_PID_FILE", path("rabbit.pid")),
            ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
            ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
            ("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
            ("RABBITMQ_DIST_PORT", dist_port.to_string()),
            ("ERL_EPMD_PORT", epmd_port.to_string()),
            ("ERL_EPMD_ADDRESS", "127.0.0.1".to_owned()),
            (
                "ERL_FLAGS",
                "-kernel inet_dist_use_interface {127,0,0,1}".to_owned(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        RabbitNode {
            name,
            amqp_port,
            sbin: sbin.to_path_buf(),
            env,
            log,
            server: None,
        }
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    fn running(&self) -> bool {
        self.server.is_some()
    }

    /// Starts the node and waits until it has booted.
    async fn spawn(&mut self) {
        let mut command = Command::new(self.sbin.join("rabbitmq-server"));
        command
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log_file(&self.log))
            .stderr(log_file(&self.log))
            .kill_on_drop(true);
        self.server = Some(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("start the private RabbitMQ node {}: {e}", self.name)),
        );
        await_port(
            self.amqp_port,
            &format!("the private RabbitMQ node {}", self.name),
        )
        .await;
        self.rabbitmqctl(&["await_startup", "--timeout", "60"])
            .await;
    }

    /// Runs one of RabbitMQ's command-line tools (`rabbitmqctl`, `rabbitmq-diagnostics`)
    /// against this node, with its env (node name, cookie, epmd): what it printed, or why it
    /// failed.
    async fn tool(&self, tool: &str, args: &[&str]) -> Result<String, String> {
        run(
            Command::new(self.sbin.join(tool))
                .args(args)
                .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdin(Stdio::null()),
            &format!("{tool} {} on {}", args.join(" "), self.name),
            COMMAND,
        )
        .await
    }

    /// Runs `rabbitmqctl` against this node, and panics when it fails.
    async fn rabbitmqctl(&self, args: &[&str]) -> String {
        self.tool("rabbitmqctl", args)
            .await
            .unwrap_or_else(|e| panic!("{e}; see {}", self.log.display()))
    }

    /// The nodes of its cluster that this node reports running.
    async fn running_nodes(&self) -> Result<Vec<String>, String> {
        let out = self
            .tool("rabbitmqctl", &["cluster_status", "--formatter", "json"])
            .await?;
        let status = json_in(&out)?;
        let nodes = status["running_nodes"]
            .as_array()
            .ok_or_else(|| format!("no running_nodes in {out}"))?;
        Ok(nodes
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect())
    }

    /// Whether this node reports a resource alarm of its own in effect. (3.10 has no
    /// `rabbitmqctl list_alarms`. `rabbitmq-diagnostics alarms` prints `{"alarms": [], ...}`
    /// when there is none, else `{"local": [...], "global": [...], ...}`, a sentence per
    /// alarm.)
    async fn alarmed(&self) -> Result<bool, String> {
        let out = self
            .tool("rabbitmq-diagnostics", &["alarms", "--formatter", "json"])
            .await?;
        let report = json_in(&out)?;
        let alarms = report["local"]
            .as_array()
            .or_else(|| report["alarms"].as_array())
            .ok_or_else(|| format!("no list of alarms in {out}"))?;
        Ok(!alarms.is_empty())
    }

    async fn set_memory_alarm(&self, on: bool) {
        let watermark = if on {
            MEMORY_ALARM_WATERMARK
        } else {
            MEMORY_DEFAULT_WATERMARK
        };
        self.rabbitmqctl(&["set_vm_memory_high_watermark", watermark])
            .await;
    }

    async fn set_disk_alarm(&self, on: bool) {
        let limit = if on {
            DISK_ALARM_LIMIT
        } else {
            DISK_DEFAULT_LIMIT
        };
        self.rabbitmqctl(&["set_disk_free_limit", limit]).await;
    }

    /// Stops the node gracefully (SIGTERM to the server script, which stops the VM) and waits
    /// until it is gone.
    async fn stop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        if let Some(pid) = server.id() {
            signal(pid, "TERM").await;
        }
        if timeout(STOP, server.wait()).await.is_err() {
            kill_tree(&mut server);
            panic!(
                "the private RabbitMQ node {} did not stop within {STOP:?}; see {}",
                self.name,
                self.log.display()
            );
        }
    }

    fn kill(&mut self) {
        if let Some(server) = self.server.as_mut() {
            kill_tree(server);
        }
    }
}

/// The JSON value in a tool's output (anything it printed before it skipped).
fn json_in(out: &str) -> Result<serde_json::Value, String> {
    let start = out
        .find(['{', '['])
        .ok_or_else(|| format!("no JSON in {out:?}"))?;
    serde_json::from_str(&out[start..]).map_err(|e| format!("bad JSON ({e}) in {out:?}"))
}

/// Waits until every node in `nodes` that runs reports an alarm of its own (`active`), or none
/// does.
async fn await_alarm(nodes: &[RabbitNode], active: bool) {
    let what = if active {
        "a resource alarm on every running node"
    } else {
        "every resource alarm to clear"
    };
    poll_until(what, SETTLE, async || {
        for node in nodes.iter().filter(|n| n.running()) {
            if node.alarmed().await? != active {
                return Err(format!("{} has alarm: {}", node.name, !active));
            }
        }
        Ok(())
    })
    .await;
}

/// A RabbitMQ node of its own: its node name, ports (AMQP, distribution, a private epmd), data
/// and log folders, pid file, configuration files and `HOME` with its own Erlang cookie, so
/// neither it nor `rabbitmqctl` ever talks to the machine's shared node.
#[derive(Debug)]
pub struct PrivateRabbit {
    /// Field order is drop order: the node goes before its epmd.
    node: RabbitNode,
    epmd: Child,
}

impl PrivateRabbit {
    /// Writes the node's files under `dir`, starts its epmd and the node (both logging to
    /// `logs/rabbitmq.log`), and waits until it has booted.
    pub async fn start(dir: &Path, logs: &Path) -> PrivateRabbit {
        create_dir(logs);
        let sbin = scripts_folder();
        let epmd_port = free_port();
        let log = logs.join("rabbitmq.log");
        let node = RabbitNode::new(dir, log.clone(), &sbin, &new_cookie(epmd_port), epmd_port);
        let epmd = start_epmd(epmd_port, &log).await;
        let mut rabbit = PrivateRabbit { node, epmd };
        rabbit.node.spawn().await;
        rabbit
    }

    pub fn url(&self) -> String {
        self.node.url()
    }

    /// Stops the node gracefully (SIGTERM to the server script, which stops the VM) and waits
    /// until it is gone.
    pub async fn stop(&mut self) {
        self.node.stop().await;
    }

    /// Starts the stopped node again on the same data (durable queues and their messages kept)
    /// and waits until it has booted.
    pub async fn start_again(&mut self) {
        self.node.stop().await;
        self.node.spawn().await;
    }

    /// Raises a memory alarm (a high watermark it exceeds), or puts the default watermark back.
    pub async fn set_memory_alarm(&self, on: bool) {
        self.node.set_memory_alarm(on).await;
    }

    /// Raises a disk alarm (a free-disk limit it does not meet), or puts the default back.
    pub async fn set_disk_alarm(&self, on: bool) {
        self.node.set_disk_alarm(on).await;
    }

    /// Waits until the node reports a resource alarm (`active`), or none.
    pub async fn await_alarm(&self, active: bool) {
        await_alarm(std::slice::from_ref(&self.node), active).await;
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        self.node.kill();
        let _ = self.epmd.start_kill();
    }
}

/// Three RabbitMQ nodes of ours clustered on loopback, sharing one Erlang cookie and one private
/// epmd, each with its own ports, folders and configuration files. Nodes can be stopped and
/// started again, and alarms raised on all of them; all are killed when it drops.
#[derive(Debug)]
pub struct RabbitCluster {
    /// Field order is drop order: the nodes go before their epmd.
    nodes: [RabbitNode; 3],
    epmd: Child,
}

impl RabbitCluster {
    /// Writes each node's files under `dir/node-<i>`, starts the epmd and the three nodes, joins
    /// the second and third to the first, and waits until the first reports all three running.
    /// Logs go to `logs/rabbitmq-<i>.log` and `logs/epmd.log`.
    pub async fn start(dir: &Path, logs: &Path) -> RabbitCluster {
        create_dir(logs);
        let sbin = scripts_folder();
        let epmd_port = free_port();
        let cookie = new_cookie(epmd_port);
        let nodes = std::array::from_fn(|i| {
            RabbitNode::new(
                &dir.join(format!("node-{i}")),
                logs.join(format!("rabbitmq-{i}.log")),
                &sbin,
                &cookie,
                epmd_port,
            )
        });
        let epmd = start_epmd(epmd_port, &logs.join("epmd.log")).await;
        let mut cluster = RabbitCluster { nodes, epmd };
        // They boot in parallel; they join one at a time.
        let [first, second, third] = &mut cluster.nodes;
        tokio::join!(first.spawn(), second.spawn(), third.spawn());
        for node in [&*second, &*third] {
            node.rabbitmqctl(&["stop_app"]).await;
            node.rabbitmqctl(&["join_cluster", &first.name]).await;
            node.rabbitmqctl(&["start_app"]).await;
        }
        cluster.await_running(0).await;
        cluster
    }

    /// `amqp://guest:guest@127.0.0.1:A1,127.0.0.1:A2,127.0.0.1:A3/%2f`: every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.amqp_port))
            .collect();
        format!("amqp://guest:guest@{}/%2f", hosts.join(","))
    }

    /// One URL per node, in node order (the index `stop_node` and `start_node` take).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RabbitNode::url).collect()
    }

    /// The cluster's running nodes as the first running node of ours reports them.
    pub async fn running_nodes(&self) -> Vec<String> {
        let asked = self
            .nodes
            .iter()
            .find(|n| n.running())
            .unwrap_or_else(|| panic!("every node of the RabbitMQ cluster is stopped"));
        asked
            .running_nodes()
            .await
            .unwrap_or_else(|e| panic!("ask {} for the running nodes: {e}", asked.name))
    }

    /// Stops node `i` (0, 1 or 2) gracefully and waits until it is gone.
    pub async fn stop_node(&mut self, i: usize) {
        self.node(i).stop().await;
    }

    /// Starts the stopped node `i` again on its data, and waits until it has rejoined: it
    /// reports every running node of the cluster running.
    pub async fn start_node(&mut self, i: usize) {
        let node = self.node(i);
        node.stop().await;
        node.spawn().await;
        self.await_running(i).await;
    }

    /// Raises a memory alarm on every running node (a high watermark it exceeds), or puts the
    /// default watermark back.
    pub async fn set_memory_alarm(&self, on: bool) {
        for node in self.nodes.iter().filter(|n| n.running()) {
            node.set_memory_alarm(on).await;
        }
    }

    /// Raises a disk alarm on every running node (a free-disk limit it does not meet), or puts
    /// the default back.
    pub async fn set_disk_alarm(&self, on: bool) {
        for node in self.nodes.iter().filter(|n| n.running()) {
            node.set_disk_alarm(on).await;
        }
    }

    /// Waits until every running node reports a resource alarm of its own (`active`), or none
    /// does.
    pub async fn await_alarm(&self, active: bool) {
        await_alarm(&self.nodes, active).await;
    }

    fn node(&mut self, i: usize) -> &mut RabbitNode {
        let count = self.nodes.len();
        self.nodes
            .get_mut(i)
            .unwrap_or_else(|| panic!("node {i} of a RabbitMQ cluster of {count}"))
    }

    /// Waits until node `i` reports every running node of ours running.
    async fn await_running(&self, i: usize) {
        let expected: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| n.name.as_str())
            .collect();
        let asked = &self.nodes[i];
        poll_until(
            &format!("{} to report {expected:?} running", asked.name),
            STARTUP,
            async || {
                let running = asked.running_nodes().await?;
                if expected.iter().all(|e| running.iter().any(|r| r == e)) {
                    Ok(())
                } else {
                    Err(format!("running: {running:?}"))
                }
            },
        )
        .await;
    }
}

impl Drop for RabbitCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = self.epmd.start_kill();
    }
}
