//! Private RabbitMQ and Redis services for tests that stop, kill and restart them, never the
//! machine's shared ones: a single node of each, a Redis Cluster, a Redis Sentinel group and a
//! RabbitMQ cluster. Each lives on free loopback ports with its state in a folder the test passes
//! in, and is killed when its guard drops, however the test ends. Used by the chaos suite and by
//! the backends' tests.
//!
//! - [`redis`]: [`PrivateRedis`], [`RedisCluster`], [`RedisSentinel`], driven through
//!   `redis-cli` subprocesses (only `verdict-backends` links a Redis client).
//! - [`rabbit`]: [`PrivateRabbit`], [`RabbitCluster`], driven through `rabbitmqctl` and
//!   `rabbitmq-diagnostics`.
//!
//! They need `redis-server`, `redis-cli`, `rabbitmq-server` and `epmd` installed (Debian's
//! packages `redis-server` and `rabbitmq-server`), and panic naming the package when one is not:
//! they are test infrastructure, with nothing better to do.

pub mod rabbit;
pub mod redis;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout};

pub use rabbit::{PrivateRabbit, RabbitCluster};
pub use redis::{PrivateRedis, RedisCluster, RedisSentinel};

/// How long a service may take to come up (a RabbitMQ boot takes 5–20 s on a busy machine).
const STARTUP: Duration = Duration::from_secs(120);
/// How long a graceful broker stop may take.
const STOP: Duration = Duration::from_secs(60);
/// How long a failover or an alarm may take to show: seconds when things work, so a minute
/// means they do not.
const SETTLE: Duration = Duration::from_secs(60);
/// How long one command-line call may take (`rabbitmqctl` boots an Erlang VM for each).
const COMMAND: Duration = Duration::from_secs(60);
/// Between two looks at a port or a process that is not there yet.
const POLL: Duration = Duration::from_millis(100);

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

/// A free loopback port whose companion `port + offset` is free too (a Redis Cluster node's bus
/// port is its port + 10000), neither of them in `taken` nor companion to one in it.
fn free_port_with_companion(offset: u16, taken: &[u16]) -> u16 {
    let clashes = |port: u16, companion: u16| {
        taken
            .iter()
            .any(|&t| t == port || t == companion || t.checked_add(offset) == Some(port))
    };
    for _ in 0..1000 {
        let port = free_port();
        let Some(companion) = port.checked_add(offset) else {
            continue;
        };
        if !clashes(port, companion)
            && std::net::TcpListener::bind(("127.0.0.1", companion)).is_ok()
        {
            return port;
        }
    }
    panic!("found no free loopback port whose port + {offset} is free too in 1000 tries");
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

/// Waits until 127.0.0.1:`port` accepts connections, failing with `what` after two minutes.
pub async fn await_port(port: u16, what: &str) {
    let deadline = Instant::now() + STARTUP;
    while !port_open(port).await {
        assert!(
            Instant::now() < deadline,
            "{what} did not open 127.0.0.1:{port} within {STARTUP:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until 127.0.0.1:`port` refuses connections (its process is gone), failing with `what`
/// after a minute.
pub async fn await_port_closed(port: u16, what: &str) {
    let deadline = Instant::now() + STOP;
    while port_open(port).await {
        assert!(
            Instant::now() < deadline,
            "{what} still accepts connections on 127.0.0.1:{port} after {STOP:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Calls `look` until it returns a value, and returns it; after `within`, panics with `what` and
/// the last thing `look` reported as missing.
async fn poll_until<T>(
    what: &str,
    within: Duration,
    mut look: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match look().await {
            Ok(value) => return value,
            Err(missing) => assert!(
                Instant::now() < deadline,
                "{what} did not happen within {within:?}; last seen: {missing}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `command` to its end within `within`: its standard output when it succeeded, else what
/// it printed (or why it could not run).
async fn run(command: &mut Command, what: &str, within: Duration) -> Result<String, String> {
    let out = match timeout(within, command.kill_on_drop(true).output()).await {
        Err(_) => return Err(format!("{what} did not end within {within:?}")),
        Ok(Err(e)) => return Err(format!("cannot run {what}: {e}")),
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{what} failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Sends `kill -<signal> <pid>` to one process this kit started.
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

/// Kills a script's children (by id) and the script itself: a RabbitMQ server script's VM would
/// outlive a kill of the script alone.
fn kill_tree(script: &mut Child) {
    if let Some(pid) = script.id() {
        for child in children_of(pid) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &child.to_string()])
                .status();
        }
    }
    let _ = script.start_kill();
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open the log file {}: {e}", path.display()))
}

/// The path of `program` on `PATH`, else a panic naming the Debian `package` that has it.
fn which(program: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{program}` is not installed; these tests need it: apt-get install -y --no-install-recommends {package}"
            )
        })
}

fn create_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}
