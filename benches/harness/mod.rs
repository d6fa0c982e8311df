//! What the pool's benchmarks share: `verdict scheduler` and `verdict worker` as real processes
//! on the scenario configuration (the fake provider, the sample repository, the shared RabbitMQ
//! and Redis under private names), load submitted through the HTTP API, and their CPU and memory
//! read from `/proc`.

#![allow(dead_code)] // each benchmark uses its own part of the harness

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use verdict_api::document::TaskDocument;
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{Broker, Route};
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_client::client::ApiClient;
use verdict_proto::wire::Priority;
use verdict_testkit::FakeProvider;
use verdict_testkit::scenario::{self, Isolation};

pub(crate) const TOKEN: &str = "bench-token-7d1a";

/// A child process, killed when dropped.
pub(crate) struct Proc {
    pub child: Child,
    /// Its first stdout line (the address it serves).
    pub line: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub(crate) fn start(role: &str, config: &Path) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args([role, "--config"])
            .arg(config)
            .env("VERDICT_API_TOKEN", TOKEN)
            .env("VERDICT_LOG", "error")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok).unwrap_or_default();
            let _ = tx.send(first);
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("verdict {role} did not start within 60 s"));
        Proc { child, line }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User plus system CPU time so far, of the process and of its children that ended (the
    /// git processes a scheduler's intake runs).
    pub(crate) fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // The fields after the command name, which is in parentheses and may hold spaces:
        // utime, stime, cutime, cstime are the 12th to 15th of them.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 = fields[11..15]
            .iter()
            .map(|f| f.parse::<u64>().unwrap())
            .sum();
        Duration::from_millis(ticks * 1000 / clock_ticks())
    }

    /// Peak resident memory so far, in MiB.
    pub(crate) fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib / 1024.0
    }
}

pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    })
}

/// One pool: its configuration, the scheduler, its workers.
pub(crate) struct Pool {
    pub config: PathBuf,
    pub isolation: Isolation,
    pub scheduler: Proc,
    pub workers: Vec<Proc>,
    pub client: ApiClient,
    repo: String,
    /// The base and head the reviews name.
    revisions: (String, String),
    /// The pipeline the reviews name; `None` is the configured default (every stage).
    pipeline: Option<String>,
}

impl Pool {
    /// A pool of single-stage reviews (the `single` pipeline) on the scenario configuration.
    pub(crate) fn start(env: &Env, concurrency: usize, workers: usize) -> Pool {
        Pool::start_with(env, concurrency, workers, Some("single"), |toml| toml)
    }

    /// A pool whose reviews name `pipeline`, on the scenario configuration as `edit` changes it.
    pub(crate) fn start_with(
        env: &Env,
        concurrency: usize,
        workers: usize,
        pipeline: Option<&str>,
        edit: impl FnOnce(String) -> String,
    ) -> Pool {
        let isolation = Isolation::unique("bench");
        let mut toml = edit(scenario::config_toml(
            &env.llm.base_url(),
            &isolation,
            &env.dir.join("cache"),
        ));
        toml = toml.replace(
            "concurrency = 4\n",
            &format!("concurrency = {concurrency}\n"),
        );
        toml = toml.replace(
            "review_timeout_seconds = 120",
            "review_timeout_seconds = 3600",
        );
        let config = env
            .dir
            .join(format!("{}.toml", isolation.redis_prefix.replace(':', "-")));
        std::fs::write(&config, toml).unwrap();
        let scheduler = Proc::start("scheduler", &config);
        let api = scheduler.line.trim().rsplit(' ').next().unwrap().to_owned();
        let client = ApiClient::new(&api, Some(TOKEN.to_owned())).unwrap();
        let mut pool = Pool {
            config,
            isolation,
            scheduler,
            workers: Vec::new(),
            client,
            repo: env.repo.clone(),
            revisions: env.revisions.clone(),
            pipeline: pipeline.map(str::to_owned),
        };
        for _ in 0..workers {
            pool.add_worker();
        }
        pool
    }

    pub(crate) fn add_worker(&mut self) {
        self.workers.push(Proc::start("worker", &self.config));
    }

    pub(crate) fn submission(&self) -> ReviewSubmission {
        ReviewSubmission {
            repository: self.repo.clone(),
            base: self.revisions.0.clone(),
            head: self.revisions.1.clone(),
            pipeline: self.pipeline.clone(),
            title: Some("Add percentage coupons".into()),
            options: SubmissionOptions::default(),
            ..Default::default()
        }
    }

    /// Submits `n` reviews through the API, at most 64 requests at once; their ids.
    pub(crate) async fn submit(&self, n: usize) -> Vec<String> {
        self.submit_all(vec![self.submission(); n]).await
    }

    /// Submits one review of each of `heads` (over the pool's base) through the API, at most 64
    /// requests at once; their ids.
    pub(crate) async fn submit_heads(&self, heads: &[String]) -> Vec<String> {
        let submissions = heads
            .iter()
            .map(|head| ReviewSubmission {
                head: head.clone(),
                ..self.submission()
            })
            .collect();
        self.submit_all(submissions).await
    }

    async fn submit_all(&self, submissions: Vec<ReviewSubmission>) -> Vec<String> {
        let client = Arc::new(self.client.clone());
        let gate = Arc::new(tokio::sync::Semaphore::new(64));
        let mut handles = Vec::with_capacity(submissions.len());
        for submission in submissions {
            let (client, gate) = (client.clone(), gate.clone());
            handles.push(tokio::spawn(async move {
                let _permit = gate.acquire().await.unwrap();
                client.submit_review(&submission).await.unwrap().id
            }));
        }
        let mut ids = Vec::with_capacity(handles.len());
        for h in handles {
            ids.push(h.await.unwrap());
        }
        ids
    }

    /// Submits reviews at `rate` a second for `duration`, each on its own schedule whether or
    /// not earlier ones were answered (an open loop); their ids.
    pub(crate) async fn open_loop(&self, rate: f64, duration: Duration) -> Vec<String> {
        let client = Arc::new(self.client.clone());
        let submission = Arc::new(self.submission());
        let count = (rate * duration.as_secs_f64()).round() as usize;
        let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut handles = Vec::with_capacity(count);
        for _ in 0..count {
            ticks.tick().await;
            let (client, submission) = (client.clone(), submission.clone());
            handles.push(tokio::spawn(async move {
                client.submit_review(&submission).await.unwrap().id
            }));
        }
        let mut ids = Vec::with_capacity(count);
        for h in handles {
            ids.push(h.await.unwrap());
        }
        ids
    }

    /// The documents of `ids` once every one has ended (checked twice a second).
    pub(crate) async fn await_all(&self, ids: &[String], within: Duration) -> Vec<TaskDocument> {
        let deadline = Instant::now() + within;
        let mut ticks = tokio::time::interval(Duration::from_millis(500));
        loop {
            ticks.tick().await;
            let ended = self.finished_count().await;
            if ended >= ids.len() as u64 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{ended} of {} tasks ended in time",
                ids.len()
            );
        }
        let mut docs = Vec::with_capacity(ids.len());
        for id in ids {
            docs.push(self.client.task(id).await.unwrap());
        }
        docs
    }

    /// `verdict_tasks_total` summed, from the scheduler's `/metrics`.
    pub(crate) async fn finished_count(&self) -> u64 {
        self.scheduler_metric("verdict_tasks_total").await as u64
    }

    /// Every series of the scheduler's metric `name` summed, from its `/metrics`.
    pub(crate) async fn scheduler_metric(&self, name: &str) -> f64 {
        let api = self.scheduler.line.trim().rsplit(' ').next().unwrap();
        let body = reqwest::get(format!("{api}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        body.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    }

    /// Waits until `n` stage requests wait in the interactive queue.
    pub(crate) async fn await_queued(&self, n: u64, within: Duration) {
        let mut amqp = AmqpConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
        amqp.prefix = self.isolation.broker_prefix.clone();
        amqp.delivery_limit = 3;
        let broker = AmqpBroker::connect(amqp).await.unwrap();
        let deadline = Instant::now() + within;
        let mut ticks = tokio::time::interval(Duration::from_millis(250));
        loop {
            ticks.tick().await;
            let stats = broker
                .queue_stats(Route::Stages(Priority::Interactive))
                .await
                .unwrap();
            if stats.messages >= n {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} stages queued in time",
                stats.messages
            );
        }
        broker.close().await;
    }

    pub(crate) async fn cleanup(self) {
        let isolation = self.isolation.clone();
        drop(self);
        let mut amqp = AmqpConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
        amqp.prefix = isolation.broker_prefix.clone();
        amqp.delivery_limit = 3;
        if let Ok(b) = AmqpBroker::connect(amqp).await {
            let _ = b.delete_topology().await;
            b.close().await;
        }
        let mut redis = RedisConfig::new("redis://127.0.0.1:6379/");
        redis.prefix = isolation.redis_prefix.clone();
        if let Ok(s) = RedisStore::connect(redis).await {
            let _ = s.purge().await;
        }
    }
}

/// What every pool shares: the fake provider, the repository, a scratch directory.
pub(crate) struct Env {
    pub llm: FakeProvider,
    pub repo: String,
    /// What the reviews name as base and head: the branches, or their commits.
    pub revisions: (String, String),
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Env {
    /// The sample repository and an unscripted fake provider; reviews name base and head by
    /// branch when `by_name`, else by commit.
    pub(crate) async fn start(by_name: bool) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let repo = scenario::sample_repo(&tmp.path().join("repo")).unwrap();
        let llm = FakeProvider::start().await;
        let commit = |name: &str| {
            let out = Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["rev-parse", name])
                .output()
                .unwrap();
            assert!(out.status.success(), "git rev-parse {name}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let revisions = if by_name {
            ("main".to_owned(), "feature/coupons".to_owned())
        } else {
            (commit("main"), commit("feature/coupons"))
        };
        Env {
            llm,
            repo: repo.display().to_string(),
            revisions,
            dir: tmp.path().to_path_buf(),
            _tmp: tmp,
        }
    }

    /// `n` commits of their own over the sample change's head, each adding one line of its own
    /// to the changed module, so no two reviews of them share their diff; their ids. One
    /// `git fast-import`, so hundreds take a second.
    pub(crate) fn distinct_heads(&self, n: usize) -> Vec<String> {
        use std::io::Write as _;
        const PATH: &str = "src/shopcart/cart.py";
        let git = |args: &[&str]| {
            let mut c = Command::new("git");
            c.arg("-C")
                .arg(&self.repo)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1");
            c
        };
        let show = git(&["show", &format!("feature/coupons:{PATH}")])
            .output()
            .unwrap();
        assert!(show.status.success(), "git show {PATH}");
        let module = String::from_utf8(show.stdout).unwrap();
        let mut stream = String::new();
        for i in 0..n {
            let content = format!("{module}\n\ndef review_{i}_marker():\n    return {i}\n");
            let message = format!("distinct change {i}");
            stream.push_str(&format!(
                "commit refs/heads/distinct/{i}\nmark :{}\ncommitter Ada Example <ada@example.com> 1767713400 +0000\ndata {}\n{message}\nfrom refs/heads/feature/coupons\nM 100644 inline {PATH}\ndata {}\n{content}\n",
                i + 1,
                message.len(),
                content.len(),
            ));
        }
        let mut child = git(&["fast-import", "--quiet"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stream.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "git fast-import");
        (0..n)
            .map(|i| {
                let out = git(&["rev-parse", &format!("distinct/{i}")])
                    .output()
                    .unwrap();
                String::from_utf8(out.stdout).unwrap().trim().to_owned()
            })
            .collect()
    }
}
