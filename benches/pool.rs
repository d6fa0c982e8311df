//! The pool's benchmark (issue 11): how close verdict gets to the physical limit of a pool whose
//! stages wait on a provider. Every stage waits `L` seconds at a fake provider, so one worker
//! with `C` stages in flight can finish at most `C / L` stages per second (Little's law); this
//! harness reports the ratio to that bound, in one run, on the real RabbitMQ and Redis with the
//! real `verdict scheduler` and `verdict worker` processes and load submitted through the HTTP
//! API. A benchmark, not a test: it asserts nothing and is never run by `cargo test`.
//!
//! ```text
//! cargo bench --bench pool -- [--latency-ms 500] [--concurrency 64,256,512] [--workers 1,2,4]
//!                             [--scaling-concurrency 256] [--out target/bench] [--celery]
//!                             [--by-name]
//! ```
//!
//! Per concurrency `C` (a fresh scheduler and worker each, `worker.concurrency = C`):
//! - **end to end**: `5·C` single-stage reviews submitted through the API at once. Throughput is
//!   stages per second from the first request at the provider to the last one plus `L` (the
//!   provider sees a stage start; a pool at the bound starts `C` every `L`); the makespan ratio
//!   is the same from the first submission to the last task's end, against `(N / C) · L`.
//!   Intake rate is measured between the tasks' start times (ramp-up and tail left out); task
//!   overhead is each task's end-to-end time (created to finished) minus `L`.
//! - **worker alone**: the same number of reviews submitted with no worker running, every stage
//!   waiting in the queue; then the worker starts and drains them.
//! - **unsaturated**: on the same pool, reviews submitted one at a time at half the bound (at
//!   most 64 a second) for 8 s, so overhead is the pool's own and not queueing behind others.
//! - CPU time per stage of each process (`/proc/<pid>/stat`), and peak RSS (`VmHWM`) idle and
//!   after the run.
//!
//! Reviews name their base and head by commit, as webhook deliveries and CI do; `--by-name`
//! names the branches instead, which costs intake a fetch per generation of requests.
//!
//! Scaling: 1, 2, 4 worker processes of `--scaling-concurrency` each, worker alone.
//!
//! With `--celery`, the same stages as Celery 5.7 tasks on the same broker and provider
//! (`benches/celery/bench_celery.py`; threads and gevent pools, `acks_late`, prefetch 1, on a
//! classic queue as Celery declares by default, and the threads pool once more on a quorum queue
//! like verdict's), worker alone, in the same run; the virtual environment is made once under
//! `--out`.
//!
//! Writes `pool.md` (one Markdown table per part) and `pool.json` into `--out`, and prints the
//! Markdown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a harness: a failure is a failed run
#![allow(clippy::cast_precision_loss)] // counts and milliseconds far below 2^52
#![allow(clippy::print_stdout)] // the report is what a benchmark prints

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_api::document::TaskDocument;
use verdict_testkit::scenario;
use verdict_testkit::{Behaviour, Script};

mod harness;

use harness::{Env, Pool, Proc, unix_ms};

/// What to run.
#[derive(Debug, Clone)]
struct Args {
    latency: Duration,
    concurrency: Vec<usize>,
    workers: Vec<usize>,
    scaling_concurrency: usize,
    /// Tasks per slot: `N = per_slot · C`.
    per_slot: usize,
    out: PathBuf,
    /// Run the Celery side too (`--celery`).
    celery: bool,
    /// Name the reviews' base and head by branch (`--by-name`), costing a fetch per request
    /// generation, instead of by commit as webhook deliveries and CI do.
    by_name: bool,
}

impl Args {
    fn parse() -> Args {
        let mut args = Args {
            latency: Duration::from_millis(500),
            concurrency: vec![64, 256, 512],
            workers: vec![1, 2, 4],
            scaling_concurrency: 256,
            per_slot: 5,
            out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench"),
            celery: false,
            by_name: false,
        };
        let list =
            |v: &str| -> Vec<usize> { v.split(',').map(|n| n.trim().parse().unwrap()).collect() };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--latency-ms" => {
                    args.latency = Duration::from_millis(it.next().unwrap().parse().unwrap())
                }
                "--concurrency" => args.concurrency = list(&it.next().unwrap()),
                "--workers" => args.workers = list(&it.next().unwrap()),
                "--scaling-concurrency" => {
                    args.scaling_concurrency = it.next().unwrap().parse().unwrap()
                }
                "--per-slot" => args.per_slot = it.next().unwrap().parse().unwrap(),
                "--out" => args.out = PathBuf::from(it.next().unwrap()),
                "--celery" => args.celery = true,
                "--by-name" => args.by_name = true,
                // What `cargo bench` passes to every bench target.
                "--bench" => {}
                other => panic!("unknown argument {other}; see the header of benches/pool.rs"),
            }
        }
        args
    }
}

/// A rate measured between the `skip`-th and the `(n − skip)`-th of `times` (unix ms, any
/// order): events per second in the steady part.
fn steady_rate(times: &mut [u64], skip: usize) -> f64 {
    times.sort_unstable();
    let n = times.len();
    if n < 2 {
        return 0.0;
    }
    let a = skip.min(n - 2);
    let b = (n - 1).saturating_sub(skip).max(a + 1);
    let span = times[b].saturating_sub(times[a]).max(1) as f64 / 1000.0;
    (b - a) as f64 / span
}

/// Stages per second over a run whose provider arrivals are `arrivals` (ms since the first):
/// the last stage ends `latency` after it arrived, so the run took from the first arrival to
/// the last plus `latency`. A pool at the bound starts `C` stages every `L` and so reaches
/// exactly `C / L`; a steady-state window would be fooled by the waves a full queue makes.
fn run_rate(arrivals: &[u64], latency: f64) -> f64 {
    let Some(last) = arrivals.iter().max() else {
        return 0.0;
    };
    arrivals.len() as f64 / (*last as f64 / 1000.0 + latency)
}

/// The arrival times at the provider, in ms since the first, of the requests from the
/// `from`-th on: a stage starts when its request arrives, and in a steady state starts happen
/// exactly as fast as stages end, so the arrival rate is the pool's stage throughput, measured
/// where no batching of results can distort it.
fn arrivals(env: &Env, from: usize) -> Vec<u64> {
    let requests = env.llm.requests();
    let Some(first) = requests.get(from).map(|r| r.at) else {
        return Vec::new();
    };
    requests[from..]
        .iter()
        .map(|r| u64::try_from(r.at.duration_since(first).as_millis()).unwrap_or(u64::MAX))
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Each ended task's time from creation to its end minus the provider's `latency` (seconds), in
/// milliseconds, sorted.
fn overhead_ms(docs: &[TaskDocument], latency: f64) -> Vec<f64> {
    let mut overhead: Vec<f64> = docs
        .iter()
        .filter_map(|d| {
            let total = d.timings.finished_unix_ms? as f64 - d.timings.created_unix_ms as f64;
            Some(total - latency * 1000.0)
        })
        .collect();
    overhead.sort_by(f64::total_cmp);
    overhead
}

/// p50, p95 and p99 of `sorted`.
fn percentiles(sorted: &[f64]) -> Value {
    json!({
        "p50": percentile(sorted, 50.0),
        "p95": percentile(sorted, 95.0),
        "p99": percentile(sorted, 99.0),
    })
}

/// One concurrency's end-to-end and worker-alone runs.
async fn at_concurrency(env: &Env, args: &Args, c: usize) -> Value {
    let l = args.latency.as_secs_f64();
    let n = args.per_slot * c;
    let bound = c as f64 / l;
    // Generous: the pool may be far below its bound (ten tasks a second is allowed for).
    let within = Duration::from_secs_f64(120.0 + 4.0 * n as f64 * l / c as f64 + n as f64 / 10.0);

    // End to end: submitted through the API to a running worker.
    let pool = Pool::start(env, c, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = (
        pool.scheduler.peak_rss_mib(),
        pool.workers[0].peak_rss_mib(),
    );
    let cpu_before = (pool.scheduler.cpu(), pool.workers[0].cpu());
    let seen = env.llm.request_count();
    let submitted_at = unix_ms();
    let ids = pool.submit(n).await;
    let docs = pool.await_all(&ids, within).await;
    let e2e_starts = arrivals(env, seen);
    let calls_per_stage = e2e_starts.len() as f64 / n as f64;
    let cpu = (
        pool.scheduler.cpu() - cpu_before.0,
        pool.workers[0].cpu() - cpu_before.1,
    );
    let rss = (
        pool.scheduler.peak_rss_mib(),
        pool.workers[0].peak_rss_mib(),
    );
    let completed = docs
        .iter()
        .filter(|d| d.state.as_str() == "completed")
        .count();
    let finished: Vec<u64> = docs
        .iter()
        .filter_map(|d| d.timings.finished_unix_ms)
        .collect();
    let mut started: Vec<u64> = docs
        .iter()
        .filter_map(|d| d.timings.started_unix_ms)
        .collect();
    let e2e = run_rate(&e2e_starts, l);
    let makespan = finished
        .iter()
        .max()
        .copied()
        .unwrap_or(submitted_at)
        .saturating_sub(submitted_at) as f64
        / 1000.0;
    let intake = steady_rate(&mut started, c.min(n / 4));
    let overhead = overhead_ms(&docs, l);

    // Unsaturated: the same pool, reviews submitted one by one at half its bound (at most 64
    // a second), so each task's overhead is the pool's own, not time spent queued behind others.
    let rate = (bound / 2.0).min(64.0);
    let ids = pool.open_loop(rate, Duration::from_secs(8)).await;
    let docs = pool.await_all(&ids, within).await;
    let unsaturated = overhead_ms(&docs, l);
    pool.cleanup().await;

    // Worker alone: every stage queued before the worker starts.
    let mut pool = Pool::start(env, c, 0);
    let ids = pool.submit(n).await;
    pool.await_queued(n as u64, within).await;
    let seen = env.llm.request_count();
    pool.add_worker();
    pool.await_all(&ids, within).await;
    let alone_rss = pool.workers[0].peak_rss_mib();
    let alone_cpu = pool.workers[0].cpu();
    let alone = run_rate(&arrivals(env, seen), l);
    pool.cleanup().await;

    json!({
        "concurrency": c,
        "tasks": n,
        "completed": completed,
        "provider_calls_per_stage": calls_per_stage,
        "bound_stages_per_s": bound,
        "end_to_end_stages_per_s": e2e,
        "end_to_end_ratio": e2e / bound,
        "end_to_end_makespan_s": makespan,
        "end_to_end_makespan_ratio": (n as f64 / c as f64) * l / makespan,
        "worker_alone_stages_per_s": alone,
        "worker_alone_ratio": alone / bound,
        "intake_tasks_per_s": intake,
        "overhead_ms": percentiles(&overhead),
        "unsaturated": {
            "tasks_per_s": rate,
            "tasks": unsaturated.len(),
            "overhead_ms": percentiles(&unsaturated),
        },
        "cpu_ms_per_stage": {
            "scheduler": cpu.0.as_secs_f64() * 1000.0 / n as f64,
            "worker": cpu.1.as_secs_f64() * 1000.0 / n as f64,
        },
        "rss_mib": {
            "scheduler_idle": idle_rss.0,
            "worker_idle": idle_rss.1,
            "scheduler_peak": rss.0,
            "worker_peak": rss.1,
            "worker_alone_peak": alone_rss,
        },
        "worker_alone_cpu_ms_per_stage": alone_cpu.as_secs_f64() * 1000.0 / n as f64,
    })
}

/// Worker alone with `w` worker processes of `c` slots each.
async fn scaling(env: &Env, args: &Args, w: usize) -> Value {
    let c = args.scaling_concurrency;
    let l = args.latency.as_secs_f64();
    let n = args.per_slot * c * w;
    let within =
        Duration::from_secs_f64(120.0 + 4.0 * n as f64 * l / (c * w) as f64 + n as f64 / 10.0);
    let mut pool = Pool::start(env, c, 0);
    let ids = pool.submit(n).await;
    pool.await_queued(n as u64, within).await;
    let seen = env.llm.request_count();
    for _ in 0..w {
        pool.add_worker();
    }
    pool.await_all(&ids, within).await;
    let rate = run_rate(&arrivals(env, seen), l);
    pool.cleanup().await;
    json!({
        "workers": w,
        "concurrency_each": c,
        "tasks": n,
        "stages_per_s": rate,
        "ratio": rate / ((c * w) as f64 / l),
    })
}

/// The Celery runs, as (pool, queue type): both pools on Celery's own default, a classic queue,
/// and the threads pool on a quorum queue, the kind verdict's queues are (decision 173).
const CELERY_VARIANTS: [(&str, &str); 3] = [
    ("threads", "classic"),
    ("gevent", "classic"),
    ("threads", "quorum"),
];

/// The Python of a virtual environment with Celery and gevent (made once, in the output
/// directory, from PyPI).
fn celery_python(out: &Path) -> PathBuf {
    let venv = out.join("celery-venv");
    let python = venv.join("bin/python");
    if !venv.join("bin/celery").is_file() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "celery==5.7.0", "gevent"])
            .status()
            .unwrap();
        assert!(installed.success(), "pip install celery gevent");
    }
    python
}

/// The same stages as Celery 5 tasks (`benches/celery/bench_celery.py`: one call to the same
/// fake provider each) on the same RabbitMQ, worker alone: `per_slot · C` tasks queued, then one
/// worker of `pool` (`threads` or `gevent`) with `-c C`, `acks_late` and a prefetch of 1.
async fn celery(env: &Env, args: &Args, (pool, queue_type): (&str, &str), c: usize) -> Value {
    let l = args.latency.as_secs_f64();
    let n = args.per_slot * c;
    let python = celery_python(&args.out);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/celery");
    let queue = format!(
        "bench-celery-{pool}-{queue_type}-{c}-{}",
        std::process::id()
    );
    let provider = format!("{}/v1/chat/completions", env.llm.base_url());
    let python_env = |cmd: &mut Command| {
        cmd.current_dir(&dir)
            .env("PROVIDER_URL", &provider)
            .env("PROVIDER_MODEL", scenario::REVIEW)
            .env("CELERY_QUEUE", &queue)
            .env("CELERY_QUEUE_TYPE", queue_type)
            .env("PYTHONDONTWRITEBYTECODE", "1");
    };
    let mut produce = Command::new(&python);
    produce.args(["bench_celery.py", "produce", &queue, &n.to_string()]);
    python_env(&mut produce);
    assert!(
        produce.status().unwrap().success(),
        "enqueue the Celery tasks"
    );
    let seen = env.llm.request_count();
    let mut worker = Command::new(python.with_file_name("celery"));
    worker
        .args([
            "-A",
            "bench_celery",
            "worker",
            "-Q",
            &queue,
            "-P",
            pool,
            "-c",
        ])
        .arg(c.to_string())
        .args([
            "--prefetch-multiplier",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "WARNING",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    python_env(&mut worker);
    let worker = Proc {
        child: worker.spawn().unwrap(),
        line: String::new(),
    };
    let within = Duration::from_secs_f64(120.0 + 4.0 * n as f64 * l / c as f64 + n as f64 / 10.0);
    let deadline = Instant::now() + within;
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    while env.llm.request_count() < seen + n {
        ticks.tick().await;
        assert!(
            Instant::now() < deadline,
            "Celery did not run its tasks in time"
        );
    }
    // The last answers arrive `L` after the last requests.
    tokio::time::sleep(args.latency + Duration::from_millis(200)).await;
    let rate = run_rate(&arrivals(env, seen), l);
    let cpu = worker.cpu();
    let rss = worker.peak_rss_mib();
    drop(worker);
    let mut delete = Command::new(&python);
    delete.args(["bench_celery.py", "delete", &queue]);
    python_env(&mut delete);
    let _ = delete.status();
    json!({
        "pool": pool,
        "queue_type": queue_type,
        "concurrency": c,
        "tasks": n,
        "stages_per_s": rate,
        "ratio": rate / (c as f64 / l),
        "cpu_ms_per_stage": cpu.as_secs_f64() * 1000.0 / n as f64,
        "rss_mib_peak": rss,
    })
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = mem
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    json!({"cpu": model, "cores": cores, "memory_gib": (mem_gib * 10.0).round() / 10.0})
}

fn markdown(report: &Value) -> String {
    let mut md = String::new();
    let m = &report["machine"];
    md.push_str(&format!(
        "Machine: {} ({} cores, {} GiB); fake provider latency L = {} ms; `{}`.\n\n",
        m["cpu"].as_str().unwrap_or(""),
        m["cores"],
        m["memory_gib"],
        report["latency_ms"],
        report["command"].as_str().unwrap_or("")
    ));
    md.push_str("| C | C/L (stages/s) | end to end, through the API | ratio | makespan ratio | worker alone | ratio | intake tasks/s | overhead p50 / p95 / p99 (ms), saturated | overhead p50 / p95 / p99 (ms) at tasks/s, unsaturated | CPU ms/stage scheduler / worker | RSS MiB worker idle / peak |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in report["concurrency"].as_array().unwrap() {
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} at {:.0} | {:.2} / {:.2} | {:.0} / {:.0} |\n",
            r["concurrency"],
            r["bound_stages_per_s"].as_f64().unwrap(),
            r["end_to_end_stages_per_s"].as_f64().unwrap(),
            r["end_to_end_ratio"].as_f64().unwrap(),
            r["end_to_end_makespan_ratio"].as_f64().unwrap(),
            r["worker_alone_stages_per_s"].as_f64().unwrap(),
            r["worker_alone_ratio"].as_f64().unwrap(),
            r["intake_tasks_per_s"].as_f64().unwrap(),
            r["overhead_ms"]["p50"].as_f64().unwrap(),
            r["overhead_ms"]["p95"].as_f64().unwrap(),
            r["overhead_ms"]["p99"].as_f64().unwrap(),
            r["unsaturated"]["overhead_ms"]["p50"].as_f64().unwrap(),
            r["unsaturated"]["overhead_ms"]["p95"].as_f64().unwrap(),
            r["unsaturated"]["overhead_ms"]["p99"].as_f64().unwrap(),
            r["unsaturated"]["tasks_per_s"].as_f64().unwrap(),
            r["cpu_ms_per_stage"]["scheduler"].as_f64().unwrap(),
            r["cpu_ms_per_stage"]["worker"].as_f64().unwrap(),
            r["rss_mib"]["worker_idle"].as_f64().unwrap(),
            r["rss_mib"]["worker_peak"].as_f64().unwrap(),
        ));
    }
    let celery = report["celery"].as_array().cloned().unwrap_or_default();
    if !celery.is_empty() {
        md.push_str("\n| C | worker alone: verdict stages/s (ratio) · RSS MiB · CPU ms/stage | Celery threads | Celery gevent | Celery threads, quorum queue |\n|---|---|---|---|---|\n");
        for r in report["concurrency"].as_array().unwrap() {
            let c = &r["concurrency"];
            let cell = |(pool, queue_type): (&str, &str)| {
                celery
                    .iter()
                    .find(|x| {
                        x["pool"] == pool && x["queue_type"] == queue_type && &x["concurrency"] == c
                    })
                    .map_or("—".to_owned(), |x| {
                        format!(
                            "{:.0} ({:.2}) · {:.0} · {:.2}",
                            x["stages_per_s"].as_f64().unwrap(),
                            x["ratio"].as_f64().unwrap(),
                            x["rss_mib_peak"].as_f64().unwrap(),
                            x["cpu_ms_per_stage"].as_f64().unwrap()
                        )
                    })
            };
            md.push_str(&format!(
                "| {c} | {:.0} ({:.2}) · {:.0} · {:.2} | {} | {} | {} |\n",
                r["worker_alone_stages_per_s"].as_f64().unwrap(),
                r["worker_alone_ratio"].as_f64().unwrap(),
                r["rss_mib"]["worker_alone_peak"].as_f64().unwrap(),
                r["worker_alone_cpu_ms_per_stage"].as_f64().unwrap(),
                cell(CELERY_VARIANTS[0]),
                cell(CELERY_VARIANTS[1]),
                cell(CELERY_VARIANTS[2]),
            ));
        }
    }
    md.push_str("\n| worker processes | C each | stages/s (worker alone) | ratio to W·C/L | × one |\n|---|---|---|---|---|\n");
    let scaling = report["scaling"].as_array().unwrap();
    let one = scaling
        .first()
        .and_then(|s| s["stages_per_s"].as_f64())
        .unwrap_or(f64::NAN);
    for s in scaling {
        let rate = s["stages_per_s"].as_f64().unwrap();
        md.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
            s["workers"],
            s["concurrency_each"],
            rate,
            s["ratio"].as_f64().unwrap(),
            rate / one
        ));
    }
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
        let env = Env::start(args.by_name).await;
        env.llm.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::REVIEW_OK).after(args.latency)),
        );
        let mut concurrency = Vec::new();
        for &c in &args.concurrency {
            eprintln!("bench: C = {c} …");
            concurrency.push(at_concurrency(&env, &args, c).await);
        }
        let mut celery_runs = Vec::new();
        if args.celery {
            for variant in CELERY_VARIANTS {
                for &c in &args.concurrency {
                    eprintln!("bench: Celery, {} pool on a {} queue, C = {c} …", variant.0, variant.1);
                    celery_runs.push(celery(&env, &args, variant, c).await);
                }
            }
        }
        let mut scaled = Vec::new();
        for &w in &args.workers {
            eprintln!("bench: {w} worker(s) of C = {} …", args.scaling_concurrency);
            scaled.push(scaling(&env, &args, w).await);
        }
        let report = json!({
            "machine": machine(),
            "latency_ms": args.latency.as_millis() as u64,
            "command": format!("cargo bench --bench pool -- {}", std::env::args().skip(1).filter(|a| a != "--bench").collect::<Vec<_>>().join(" ")),
            "concurrency": concurrency,
            "celery": celery_runs,
            "scaling": scaled,
        });
        let md = markdown(&report);
        std::fs::create_dir_all(&args.out).unwrap();
        std::fs::write(args.out.join("pool.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
        std::fs::write(args.out.join("pool.md"), &md).unwrap();
        print!("{md}");
    });
}
