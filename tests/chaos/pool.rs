//! The pool under test: one `verdict scheduler` and several `verdict worker` processes (the
//! binary, spawned as `tests/e2e.rs` does), on the private services; workers can be killed with
//! SIGKILL and replaced mid-run. Each process's output goes to its own log file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub(crate) const TOKEN: &str = "chaos-token-5c2e";

/// How long a process may take to print its first line (it prints it once it is up).
const STARTUP: Duration = Duration::from_secs(60);

/// One `verdict` process, killed when dropped.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    /// The line it printed when it came up.
    pub first_line: String,
}

impl Proc {
    /// Starts `verdict <role> --config <config>` with `env`, stdout and stderr appended to `log`,
    /// and waits for its first stdout line.
    async fn spawn(role: &str, config: &Path, env: &[(String, String)], log: &Path) -> Proc {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args([role, "--config"])
            .arg(config)
            .env("VERDICT_API_TOKEN", TOKEN)
            .env("VERDICT_LOG", "warn")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start verdict {role}: {e}"));
        let Some(stdout) = child.stdout.take() else {
            panic!("verdict {role} has no stdout pipe")
        };
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "verdict {role} did not start within {STARTUP:?}; see {}",
                    log.display()
                )
            });
        let Ok(Some(first_line)) = first else {
            panic!(
                "verdict {role} exited before starting; see {}",
                log.display()
            )
        };
        // Keep reading, so a later line never meets a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Proc { child, first_line }
    }

    /// `kill -9`, and waits until it is gone.
    async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(STARTUP, self.child.wait()).await;
    }
}

/// A worker process and where its metrics are.
#[derive(Debug)]
pub(crate) struct Worker {
    /// Its worker id, as it printed it.
    pub id: String,
    /// `127.0.0.1:PORT` of `/metrics`.
    metrics: String,
    proc: Proc,
}

#[derive(Debug)]
pub(crate) struct Pool {
    pub api_url: String,
    /// Field order is drop order: workers stop before the scheduler.
    workers: Vec<Worker>,
    scheduler: Proc,
    config: PathBuf,
    env: Vec<(String, String)>,
    logs: PathBuf,
    started: usize,
}

impl Pool {
    /// The scheduler and `workers` workers, all up.
    pub(crate) async fn start(
        config: &Path,
        env: Vec<(String, String)>,
        logs: &Path,
        workers: usize,
    ) -> Pool {
        let scheduler = Proc::spawn("scheduler", config, &env, &logs.join("scheduler.log")).await;
        let api_url = scheduler
            .first_line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut pool = Pool {
            api_url,
            workers: Vec::new(),
            scheduler,
            config: config.to_path_buf(),
            env,
            logs: logs.to_path_buf(),
            started: 0,
        };
        for _ in 0..workers {
            pool.start_worker().await;
        }
        pool
    }

    /// Starts one more worker; returns its id.
    pub(crate) async fn start_worker(&mut self) -> String {
        self.started += 1;
        let log = self.logs.join(format!("worker-{}.log", self.started));
        let proc = Proc::spawn("worker", &self.config, &self.env, &log).await;
        // "verdict worker <id> metrics on http://<addr>"
        let words: Vec<&str> = proc.first_line.split_whitespace().collect();
        let id = words.get(2).copied().unwrap_or("?").to_owned();
        let metrics = words
            .last()
            .and_then(|w| w.strip_prefix("http://"))
            .unwrap_or_default()
            .to_owned();
        self.workers.push(Worker {
            id: id.clone(),
            metrics,
            proc,
        });
        id
    }

    /// Each live worker's id and `verdict_stages_in_flight`.
    pub(crate) async fn in_flight(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for w in &self.workers {
            let value = metric(&w.metrics, "verdict_stages_in_flight")
                .await
                .values()
                .sum();
            out.push((w.id.clone(), value));
        }
        out
    }

    /// `kill -9` the worker with this id; returns whether there was one.
    pub(crate) async fn kill_worker(&mut self, id: &str) -> bool {
        let Some(i) = self.workers.iter().position(|w| w.id == id) else {
            return false;
        };
        self.workers.remove(i).proc.kill().await;
        true
    }

    /// `verdict_stage_deliveries_total` by `result`, summed over the live workers (a killed
    /// worker's counts die with it).
    pub(crate) async fn deliveries(&self) -> BTreeMap<String, f64> {
        let mut total = BTreeMap::new();
        for w in &self.workers {
            for (labels, v) in metric(&w.metrics, "verdict_stage_deliveries_total").await {
                let result = labels
                    .strip_prefix("result=\"")
                    .and_then(|l| l.strip_suffix('"'))
                    .unwrap_or(&labels)
                    .to_owned();
                *total.entry(result).or_insert(0.0) += v;
            }
        }
        total
    }

    /// The sum of a scheduler metric's series (0 when it cannot be read).
    pub(crate) async fn scheduler_metric(&self, name: &str) -> f64 {
        let addr = self.api_url.trim_start_matches("http://");
        metric(addr, name).await.values().sum()
    }

    /// One series of a scheduler metric, by its label text (`backend="redis"`); `None` when it
    /// cannot be read.
    pub(crate) async fn scheduler_series(&self, name: &str, labels: &str) -> Option<f64> {
        let addr = self.api_url.trim_start_matches("http://");
        metric(addr, name).await.get(labels).copied()
    }

    /// Whether the scheduler process is still running.
    pub(crate) fn scheduler_alive(&mut self) -> bool {
        matches!(self.scheduler.child.try_wait(), Ok(None))
    }
}

/// The samples of one metric from a `/metrics` endpoint, by their label text (`a="b",c="d"`,
/// empty without labels). Empty when the endpoint cannot be read.
async fn metric(addr: &str, name: &str) -> BTreeMap<String, f64> {
    let read = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: chaos\r\n\r\n")
            .await?;
        let mut body = String::new();
        conn.read_to_string(&mut body).await?;
        std::io::Result::Ok(body)
    };
    let Ok(Ok(body)) = tokio::time::timeout(Duration::from_secs(5), read).await else {
        return BTreeMap::new();
    };
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let labels = match series.strip_prefix(name)? {
                "" => "",
                rest => rest.strip_prefix('{')?.strip_suffix('}')?,
            };
            Some((labels.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}
