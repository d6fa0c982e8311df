//! The chaos suite's own RabbitMQ node and Redis server, never the shared ones: the suite stops,
//! kills and restarts them mid-run. Each lives on free loopback ports with its state in the run's
//! temporary folder, and is killed when its guard drops, however the test ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout};

/// How long a service may take to come up (a RabbitMQ boot takes 5–20 s on a busy machine).
const STARTUP: Duration = Duration::from_secs(120);
/// How long a graceful broker stop may take.
const STOP: Duration = Duration::from_secs(60);
/// Between two looks at a port or a process that is not there yet.
const POLL: Duration = Duration::from_millis(100);

/// Where Debian's packages put the real RabbitMQ scripts (`/usr/sbin/rabbitmq-server` is a
/// wrapper that switches to the `rabbitmq` user and Debian's own node).
const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A loopback port nobody listens on now. Another process could take it before the service
/// binds it; on this machine's small set of services that has not happened, and a clash fails
/// the start-up loudly.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap_or_else(|e| panic!("bind a loopback port to find a free one: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("read the bound port: {e}"))
        .port()
}

async fn port_open(port: u16) -> bool {
    matches!(
        timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(("127.0.0.1", port))
        )
        .await,
        Ok(Ok(_))
    )
}

/// Waits until `port` accepts connections, failing with `what` after `STARTUP`.
async fn await_port(port: u16, what: &str) {
    let deadline = Instant::now() + STARTUP;
    while !port_open(port).await {
        assert!(
            Instant::now() < deadline,
            "{what} did not open 127.0.0.1:{port} within {STARTUP:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Sends `kill -<signal> <pid>` to one process this suite started.
async fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .await;
}

/// The processes whose parent is `pid` (Linux's `/proc/<pid>/task/<pid>/children`).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open the log file {}: {e}", path.display()))
}

fn which(program: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{program}` is not installed; the chaos suite needs it: apt-get install -y --no-install-recommends {package}"
            )
        })
}

/// A `redis-server` with an append-only file synced on every write, so a kill loses nothing it
/// acknowledged.
#[derive(Debug)]
pub struct PrivateRedis {
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts it with its data in `dir` and its log at `log`, and waits until it answers `PING`.
    pub async fn start(dir: &Path, log: &Path) -> PrivateRedis {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut redis = PrivateRedis {
            port: free_port(),
            dir: dir.to_path_buf(),
            log: log.to_path_buf(),
            child: None,
        };
        redis.spawn().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn spawn(&mut self) {
        let port = self.port.to_string();
        let child = Command::new(which("redis-server", "redis-server"))
            .args(["--bind", "127.0.0.1", "--port", &port, "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .stdin(Stdio::null())
            .stdout(log_file(&self.log))
            .stderr(log_file(&self.log))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start redis-server: {e}"));
        self.child = Some(child);
        self.await_pong().await;
    }

    /// Waits until Redis answers `PING` with `PONG` (not `LOADING` while it replays its AOF).
    async fn await_pong(&self) {
        let deadline = Instant::now() + STARTUP;
        loop {
            if self.pong().await {
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

    async fn pong(&self) -> bool {
        let exchange = async {
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
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

    /// `kill -9`, and waits until the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = timeout(STOP, child.wait()).await;
        }
    }

    /// Starts it again on the same port and data (the AOF replayed).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }
}

/// A RabbitMQ node of its own: its node name, ports (AMQP, distribution, a private epmd), data
/// and log folders, pid file, configuration files and `HOME` with its own Erlang cookie, so
/// neither it nor `rabbitmqctl` ever talks to the machine's shared node.
#[derive(Debug)]
pub struct PrivateRabbit {
    amqp_port: u16,
    sbin: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The `rabbitmq-server` script: a shell that runs the Erlang VM as its child and stops it
    /// gracefully on SIGTERM.
    server: Option<Child>,
    /// Field order is drop order: the node goes before its epmd.
    epmd: Child,
}

impl PrivateRabbit {
    /// Writes the node's files under `dir`, starts its epmd and the node, and waits until it has
    /// booted.
    pub async fn start(dir: &Path, logs: &Path) -> PrivateRabbit {
        let script = Path::new(RABBITMQ_BIN).join("rabbitmq-server");
        let real = std::fs::canonicalize(&script).unwrap_or_else(|_| {
            panic!(
                "{} is missing; the chaos suite needs RabbitMQ: apt-get install -y --no-install-recommends rabbitmq-server",
                script.display()
            )
        });
        let sbin = real
            .parent()
            .unwrap_or_else(|| panic!("{} has no folder", real.display()))
            .to_path_buf();
        let (amqp_port, dist_port, epmd_port) = (free_port(), free_port(), free_port());
        let path = |name: &str| dir.join(name).display().to_string();
        for folder in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(dir.join(folder))
                .unwrap_or_else(|e| panic!("create {}: {e}", path(folder)));
        }
        let cookie = dir.join("home/.erlang.cookie");
        // Only this run's processes read it; distribution listens on loopback alone.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        write(
            &cookie,
            &format!("CHAOS{nanos:X}{:X}{amqp_port:X}", std::process::id()),
        );
        set_mode(&cookie, 0o400);
        write(
            &dir.join("rabbitmq.conf"),
            &format!(
                "listeners.tcp.default = 127.0.0.1:{amqp_port}\nloopback_users.guest = true\n"
            ),
        );
        write(&dir.join("advanced.config"), "[].\n");
        write(&dir.join("enabled_plugins"), "[].\n");
        write(&dir.join("rabbitmq-env.conf"), "");
        let env: Vec<(String, String)> = [
            ("HOME", path("home")),
            ("RABBITMQ_NODENAME", format!("chaos{amqp_port}@localhost")),
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
        let log = logs.join("rabbitmq.log");
        // Our own epmd in the foreground, so it is our child and dies with the guard (an epmd
        // the node started itself would daemonize and outlive the run).
        let epmd = Command::new(which("epmd", "erlang-base"))
            .args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start epmd: {e}"));
        await_port(epmd_port, "the private epmd").await;
        let mut rabbit = PrivateRabbit {
            amqp_port,
            sbin,
            env,
            log,
            server: None,
            epmd,
        };
        rabbit.spawn().await;
        rabbit
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

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
                .unwrap_or_else(|e| panic!("start the private RabbitMQ node: {e}")),
        );
        await_port(self.amqp_port, "the private RabbitMQ node").await;
        self.rabbitmqctl(&["await_startup", "--timeout", "60"])
            .await;
    }

    /// Runs `rabbitmqctl` against this node (its own env: node name, cookie, epmd).
    async fn rabbitmqctl(&self, args: &[&str]) {
        let run = Command::new(self.sbin.join("rabbitmqctl"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .output();
        let out = timeout(STARTUP, run)
            .await
            .unwrap_or_else(|_| panic!("rabbitmqctl {args:?} did not end within {STARTUP:?}"))
            .unwrap_or_else(|e| panic!("run rabbitmqctl: {e}"));
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops the node gracefully (SIGTERM to the server script, which stops the VM) and waits
    /// until it is gone.
    pub async fn stop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        if let Some(pid) = server.id() {
            signal(pid, "TERM").await;
        }
        if timeout(STOP, server.wait()).await.is_err() {
            kill_tree(&mut server);
            panic!(
                "the private RabbitMQ node did not stop within {STOP:?}; see {}",
                self.log.display()
            );
        }
    }

    /// Starts the stopped node again on the same data (durable queues and their messages kept)
    /// and waits until it has booted.
    pub async fn start_again(&mut self) {
        self.stop().await;
        self.spawn().await;
    }
}

/// Kills the server script's VM (its child, by id) and the script itself.
fn kill_tree(server: &mut Child) {
    if let Some(pid) = server.id() {
        for child in children_of(pid) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &child.to_string()])
                .status();
        }
    }
    let _ = server.start_kill();
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        if let Some(server) = self.server.as_mut() {
            kill_tree(server);
        }
        let _ = self.epmd.start_kill();
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}
