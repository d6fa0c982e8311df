//! The state benchmark (issue 14): how much Redis memory, how many keys and how many Redis
//! commands one finished multi-stage review leaves and costs, measured on a private
//! `redis-server` so nothing else is counted. A benchmark, not a test: it asserts only that the
//! run itself worked (every task ended, the queues drained) and is never run by `cargo test`.
//!
//! ```text
//! cargo bench --bench state -- [--reviews 300] [--latency-ms 50] [--concurrency 64]
//!                              [--response-cache] [--distinct] [--dump DIR] [--out target/bench]
//! ```
//!
//! One `verdict scheduler` and one `verdict worker` on the scenario configuration (every stage of
//! the default pipeline: triage, summary, one reviewer per file, validator, review) and the fake
//! provider answering each call validly after `--latency-ms`; `--reviews` reviews of the sample
//! repository's two-file change submitted through the API. When every task has ended the
//! harness reads every key (`SCAN`, `TYPE`, `MEMORY USAGE … SAMPLES 0`, `PTTL`), groups them by
//! kind (the key's first segment after the prefix) and divides by the number of reviews; keys
//! shared by many reviews (the shared transcript texts) are so counted once, as Redis holds them.
//! The response cache is off as in the scenarios (identical reviews would otherwise answer from
//! it); `--response-cache` turns it on to show what it adds per review. `--distinct` gives every
//! review a change of its own (one commit each over the sample change, adding a line), as real
//! traffic has: identical reviews share every text, which flatters what is stored once.
//! `--dump DIR` writes the first review's keys, and the shared texts, one file each, as stored.
//!
//! The harness waits for every task's records to be sealed (`archive:` keys, or a minute) before
//! reading. Also reported: Redis commands per review (`INFO commandstats` before and after) and the
//! server's `used_memory` growth, and the broker's stage and result queues empty at the end.
//! Writes `state.md` and `state.json` into `--out`, and prints the Markdown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a harness: a failure is a failed run
#![allow(clippy::cast_precision_loss)] // counts far below 2^52
#![allow(clippy::print_stdout)] // the report is what a benchmark prints

mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::broker::{Broker, Route};
use verdict_proto::wire::Priority;
use verdict_testkit::scenario;
use verdict_testkit::{Behaviour, Script};

use harness::{Env, Pool};

#[derive(Debug, Clone)]
struct Args {
    reviews: usize,
    latency: Duration,
    concurrency: usize,
    response_cache: bool,
    distinct: bool,
    dump: Option<PathBuf>,
    out: PathBuf,
}

impl Args {
    fn parse() -> Args {
        let mut args = Args {
            reviews: 300,
            latency: Duration::from_millis(50),
            concurrency: 64,
            response_cache: false,
            distinct: false,
            dump: None,
            out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench"),
        };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--reviews" => args.reviews = it.next().unwrap().parse().unwrap(),
                "--latency-ms" => {
                    args.latency = Duration::from_millis(it.next().unwrap().parse().unwrap())
                }
                "--concurrency" => args.concurrency = it.next().unwrap().parse().unwrap(),
                "--response-cache" => args.response_cache = true,
                "--distinct" => args.distinct = true,
                "--dump" => args.dump = Some(PathBuf::from(it.next().unwrap())),
                "--out" => args.out = PathBuf::from(it.next().unwrap()),
                "--bench" => {}
                other => panic!("unknown argument {other}; see the header of benches/state.rs"),
            }
        }
        args
    }
}

/// A `redis-server` of the benchmark's own on a free loopback port, killed when dropped.
struct PrivateRedis {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PrivateRedis {
    async fn start() -> PrivateRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let redis = PrivateRedis {
            child,
            url: format!("redis://127.0.0.1:{port}/"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while redis.connection().await.is_none() {
            assert!(
                Instant::now() < deadline,
                "the private redis-server did not answer"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        redis
    }

    async fn connection(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url.as_str()).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()?;
        Some(conn)
    }
}

/// Total commands Redis has run (`INFO commandstats`), by command.
async fn command_counts(conn: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Per kind of key: how many, their bytes (`MEMORY USAGE`), how many never expire.
#[derive(Debug, Default, Clone, Copy)]
struct Kind {
    keys: u64,
    bytes: u64,
    without_ttl: u64,
}

async fn keys_by_kind(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> BTreeMap<String, Kind> {
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        for key in keys {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(conn)
                .await
                .unwrap();
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(conn)
                .await
                .unwrap();
            let rest = key.strip_prefix(prefix).unwrap_or(&key);
            let kind = rest.split(':').next().unwrap_or(rest).to_owned();
            let entry = kinds.entry(kind).or_default();
            entry.keys += 1;
            entry.bytes += bytes.unwrap_or(0);
            entry.without_ttl += u64::from(pttl == -1);
        }
        if next == 0 {
            return kinds;
        }
        cursor = next;
    }
}

/// A hash or stream entry's field and value.
type Field = (Vec<u8>, Vec<u8>);

/// Every key of the prefix naming `task`, and every shared text, into `dir`, one file each: a
/// string as stored, a hash or stream as its fields and values, a set as its members.
async fn dump(conn: &mut redis::aio::MultiplexedConnection, prefix: &str, task: &str, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(conn)
        .await
        .unwrap();
    for key in keys {
        let rest = key.strip_prefix(prefix).unwrap_or(&key).to_owned();
        if !rest.contains(task) && !rest.starts_with("text:") {
            continue;
        }
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let bytes: Vec<u8> = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).query_async(conn).await.unwrap(),
            "hash" => {
                let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(conn)
                    .await
                    .unwrap();
                pairs
                    .into_iter()
                    .flat_map(|(f, v)| [f, b"\n".to_vec(), v, b"\n".to_vec()].concat())
                    .collect()
            }
            "set" => {
                let members: Vec<Vec<u8>> = redis::cmd("SMEMBERS")
                    .arg(&key)
                    .query_async(conn)
                    .await
                    .unwrap();
                members.join(&b'\n')
            }
            "stream" => {
                let entries: Vec<(String, Vec<Field>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(conn)
                    .await
                    .unwrap();
                entries
                    .into_iter()
                    .flat_map(|(_, fields)| {
                        fields
                            .into_iter()
                            .flat_map(|(f, v)| [f, b" ".to_vec(), v, b"\n".to_vec()].concat())
                    })
                    .collect()
            }
            _ => continue,
        };
        std::fs::write(dir.join(rest.replace(['/', ':'], "_")), bytes).unwrap();
    }
}

/// How many `archive:` keys there are once there are `want`, or after `within`.
async fn await_archives(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    want: usize,
    within: Duration,
) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}archive:*"))
            .query_async(conn)
            .await
            .unwrap();
        if keys.len() >= want || Instant::now() >= deadline {
            return keys.len();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Ready messages left on the stage and result queues.
async fn messages_left(pool: &Pool) -> u64 {
    let mut amqp = AmqpConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
    amqp.prefix = pool.isolation.broker_prefix.clone();
    amqp.delivery_limit = 3;
    let broker = AmqpBroker::connect(amqp).await.unwrap();
    let mut left = 0;
    for route in [
        Route::Stages(Priority::Interactive),
        Route::Stages(Priority::Bulk),
        Route::Results,
        Route::DeadLetters,
    ] {
        left += broker.queue_stats(route).await.unwrap().messages;
    }
    broker.close().await;
    left
}

fn markdown(report: &Value) -> String {
    let n = report["reviews"].as_f64().unwrap();
    let mut md = String::new();
    md.push_str(&format!(
        "Command: `{}`\n\n{} reviews ({}), {} completed, {} sealed, {} stages each, provider at {} ms; messages left on the queues: {}.\n\n",
        report["command"].as_str().unwrap(),
        report["reviews"],
        if report["distinct"].as_bool().unwrap() { "each its own change" } else { "all of one change" },
        report["completed"],
        report["sealed"],
        report["stages_per_review"],
        report["latency_ms"],
        report["messages_left"],
    ));
    md.push_str("| kind | keys | keys per review | bytes per review | without TTL |\n|---|---:|---:|---:|---:|\n");
    for (kind, k) in report["kinds"].as_object().unwrap() {
        md.push_str(&format!(
            "| `{kind}` | {} | {:.2} | {:.0} | {} |\n",
            k["keys"],
            k["keys"].as_f64().unwrap() / n,
            k["bytes"].as_f64().unwrap() / n,
            k["without_ttl"],
        ));
    }
    md.push_str(&format!(
        "| **all** | {} | {:.2} | **{:.0}** ({:.1} KiB) | {} |\n\n",
        report["keys"],
        report["keys"].as_f64().unwrap() / n,
        report["bytes_per_review"].as_f64().unwrap(),
        report["bytes_per_review"].as_f64().unwrap() / 1024.0,
        report["keys_without_ttl"],
    ));
    md.push_str(&format!(
        "Per review: {:.1} provider calls, {:.1} stage requests published and {:.1} results consumed on the broker; CPU {:.1} ms in the scheduler and {:.1} ms in the worker (both processes, the whole run, divided by the reviews).\n\n",
        report["provider_calls_per_review"].as_f64().unwrap(),
        report["stage_requests_per_review"].as_f64().unwrap(),
        report["results_per_review"].as_f64().unwrap(),
        report["scheduler_cpu_ms_per_review"].as_f64().unwrap(),
        report["worker_cpu_ms_per_review"].as_f64().unwrap(),
    ));
    md.push_str(&format!(
        "Redis `used_memory` grew by {:.0} bytes per review; {:.1} Redis commands per review ({}).\n",
        report["used_memory_growth_per_review"].as_f64().unwrap(),
        report["commands_per_review"].as_f64().unwrap(),
        report["top_commands"].as_str().unwrap(),
    ));
    md
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let redis = PrivateRedis::start().await;
        let mut conn = redis.connection().await.unwrap();
        let env = Env::start(false).await;
        for (model, answer) in [
            (scenario::TRIAGE, scenario::TRIAGE_OK),
            (scenario::SUMMARY, scenario::SUMMARY_OK),
            (scenario::REVIEWER, scenario::REVIEWER_OK),
            (scenario::VALIDATOR, scenario::VALIDATOR_OK),
            (scenario::REVIEW, scenario::REVIEW_OK),
        ] {
            env.llm
                .script(model, Script::always(Behaviour::text(answer).after(args.latency)));
        }
        let url = redis.url.clone();
        let cache = args.response_cache;
        let pool = Pool::start_with(&env, args.concurrency, 1, None, move |toml| {
            let toml = toml
                .replace("url = \"redis://127.0.0.1:6379/\"", &format!("url = \"{url}\""))
                .replace("review_timeout_seconds = 120", "review_timeout_seconds = 3600");
            if cache {
                toml.replace("response_cache = false", "response_cache = true")
            } else {
                toml
            }
        });
        let prefix = pool.isolation.redis_prefix.clone();
        let memory_before = used_memory(&mut conn).await;
        let commands_before = command_counts(&mut conn).await;
        let seen = env.llm.request_count();
        let cpu_before = (pool.scheduler.cpu(), pool.workers[0].cpu());
        let dispatched_before = pool.scheduler_metric("verdict_stage_dispatches_total").await;
        let results_before = pool.scheduler_metric("verdict_stage_results_total").await;
        let ids = if args.distinct {
            pool.submit_heads(&env.distinct_heads(args.reviews)).await
        } else {
            pool.submit(args.reviews).await
        };
        let within = Duration::from_secs(600 + args.reviews as u64);
        let docs = pool.await_all(&ids, within).await;
        let calls = env.llm.request_count() - seen;
        let completed = docs
            .iter()
            .filter(|d| d.state.as_str() == "completed")
            .count();
        // The scheduler records a task's end before its last clean-ups and seals its records a
        // moment after retiring it: wait for the archives (or a minute), then a moment more.
        let sealed = await_archives(&mut conn, &prefix, args.reviews, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cpu = (
            pool.scheduler.cpu() - cpu_before.0,
            pool.workers[0].cpu() - cpu_before.1,
        );
        // Every stage request the scheduler published and every result it consumed: the
        // broker messages a review costs (besides deferrals and dead letters, counted apart).
        let dispatched = pool.scheduler_metric("verdict_stage_dispatches_total").await - dispatched_before;
        let results = pool.scheduler_metric("verdict_stage_results_total").await - results_before;
        let commands_after = command_counts(&mut conn).await;
        let memory_after = used_memory(&mut conn).await;
        let kinds = keys_by_kind(&mut conn, &prefix).await;
        if let (Some(dir), Some(first)) = (&args.dump, ids.first()) {
            dump(&mut conn, &prefix, first, dir).await;
        }
        let left = messages_left(&pool).await;
        pool.cleanup().await;

        let n = args.reviews as f64;
        let mut commands: Vec<(String, u64)> = commands_after
            .iter()
            .map(|(name, after)| {
                let before = commands_before.get(name).copied().unwrap_or(0);
                (name.clone(), after - before)
            })
            .filter(|(name, delta)| *delta > 0 && !matches!(name.as_str(), "info" | "scan" | "memory|usage" | "pttl"))
            .collect();
        commands.sort_by_key(|c| std::cmp::Reverse(c.1));
        let total_commands: u64 = commands.iter().map(|c| c.1).sum();
        let top = commands
            .iter()
            .take(8)
            .map(|(name, count)| format!("{name} {:.1}", *count as f64 / n))
            .collect::<Vec<_>>()
            .join(", ");
        let keys: u64 = kinds.values().map(|k| k.keys).sum();
        let bytes: u64 = kinds.values().map(|k| k.bytes).sum();
        let without_ttl: u64 = kinds.values().map(|k| k.without_ttl).sum();
        let report = json!({
            "command": format!("cargo bench --bench state -- {}", std::env::args().skip(1).filter(|a| a != "--bench").collect::<Vec<_>>().join(" ")),
            "reviews": args.reviews,
            "completed": completed,
            "latency_ms": args.latency.as_millis() as u64,
            "response_cache": args.response_cache,
            "distinct": args.distinct,
            "provider_calls": calls,
            "provider_calls_per_review": calls as f64 / n,
            "stage_requests_per_review": dispatched / n,
            "results_per_review": results / n,
            "scheduler_cpu_ms_per_review": cpu.0.as_secs_f64() * 1000.0 / n,
            "worker_cpu_ms_per_review": cpu.1.as_secs_f64() * 1000.0 / n,
            "stages_per_review": docs.first().map_or(0, |d| d.stages.len()),
            "messages_left": left,
            "sealed": sealed,
            "keys": keys,
            "keys_without_ttl": without_ttl,
            "bytes_per_review": bytes as f64 / n,
            "used_memory_growth_per_review": memory_after.saturating_sub(memory_before) as f64 / n,
            "commands_per_review": total_commands as f64 / n,
            "top_commands": top,
            "commands": commands.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "kinds": kinds.iter().map(|(k, v)| (k.clone(), json!({"keys": v.keys, "bytes": v.bytes, "without_ttl": v.without_ttl}))).collect::<serde_json::Map<_, _>>(),
        });
        let md = markdown(&report);
        std::fs::create_dir_all(&args.out).unwrap();
        std::fs::write(args.out.join("state.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
        std::fs::write(args.out.join("state.md"), &md).unwrap();
        print!("{md}");
    });
}
