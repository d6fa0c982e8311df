//! Organisation scans end to end (issue 10, item 1): `verdict scheduler` and two `verdict worker`
//! processes on RabbitMQ and Redis, the fake GitHub listing an organisation of 50 small real git
//! repositories (plus archived ones and forks that the default filters leave out), the fake
//! provider answering every scan. `verdict scan --org` drives and follows the batch; killing the
//! command or the scheduler halfway and resuming finishes the batch with every repository
//! scanned exactly once — the fake provider's request count shows it. A scheduler killed while
//! it lists the organisation leaves the batch to the restarted scheduler's batch pass, which
//! lists it again once the dead driver's lease lapses and finishes it without being asked.
//! With the response cache on, a second identical organisation scan is answered without one
//! request to the provider (SPEC X3). With a budget (SPEC X5), a scan whose estimate does not
//! fit is refused with the estimate before any repository is scanned, and one that reaches the
//! budget while it runs stops cleanly: the repositories not yet taken in are refused, never
//! started, and the report says it is partial.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use verdict_api::document::TaskState;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_client::client::ApiClient;
use verdict_testkit::github::{FakeGitHub, FakeRepoTraits};
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

const TOKEN: &str = "orgscan-token-5c2e";
const GH_TOKEN: &str = "ghp_orgscanFakeToken0123456789abcdefgh";
const ORG: &str = "acme";
const MEMBERS: usize = 50;

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Rig {
    llm: FakeProvider,
    github: FakeGitHub,
    config: PathBuf,
    isolation: Isolation,
    scheduler: Option<Proc>,
    api: String,
    workers: Vec<Proc>,
    _dir: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Stop the processes first: a live worker re-declares queues deleted under it.
        self.scheduler.take();
        self.workers.clear();
        let isolation = self.isolation.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Runtime::new() else {
                return;
            };
            rt.block_on(async {
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
            });
        })
        .join();
    }
}

/// Starts `verdict <role> --config <file>` and waits for its first stdout line (it prints one
/// when it is up).
fn spawn(role: &str, config: &Path) -> (Proc, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([role, "--config"])
        .arg(config)
        .env("VERDICT_API_TOKEN", TOKEN)
        .env("GH_TOKEN", GH_TOKEN)
        .env("VERDICT_LOG", "warn")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let stdout = proc.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("verdict {role} did not start within 60 s"));
    assert!(!line.is_empty(), "verdict {role} exited before starting");
    (proc, line)
}

/// An organisation of [`MEMBERS`] repositories `repo-00`… plus two archived ones and two forks,
/// a pool to scan them, each scan answered after `latency`.
async fn rig(latency: Duration) -> Rig {
    rig_with(latency, 30, |_| {}).await
}

/// [`rig`] with the intake time limit (also a batch driver's lease) and a set-up of the fake
/// GitHub before the pool starts.
async fn rig_with(latency: Duration, intake_timeout: u64, setup: impl FnOnce(&FakeGitHub)) -> Rig {
    rig_configured(
        Behaviour::text(scenario::SCAN_OK).after(latency),
        intake_timeout,
        setup,
        |_| {},
    )
    .await
}

/// [`rig_with`] answering every scan with `answer` and with the pool's configuration changed
/// by `configure` before it starts.
async fn rig_configured(
    answer: Behaviour,
    intake_timeout: u64,
    setup: impl FnOnce(&FakeGitHub),
    configure: impl FnOnce(&mut String),
) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let github = FakeGitHub::start().await;
    github.accept_token(GH_TOKEN);
    let extra = [
        ("old-a", true, false),
        ("old-b", true, false),
        ("fork-a", false, true),
        ("fork-b", false, true),
    ];
    let names = (0..MEMBERS)
        .map(|i| (format!("repo-{i:02}"), false, false))
        .chain(extra.iter().map(|(n, a, f)| ((*n).to_owned(), *a, *f)));
    for (name, archived, fork) in names {
        let path =
            scenario::small_repo(&dir.path().join("repos").join(ORG).join(&name), &name).unwrap();
        github.add_repository(ORG, &name, &path.display().to_string());
        github.describe_repository(
            ORG,
            &name,
            FakeRepoTraits {
                archived,
                fork,
                ..FakeRepoTraits::default()
            },
        );
    }
    setup(&github);
    let llm = FakeProvider::start().await;
    llm.script(scenario::DEFAULT, Script::always(answer));
    let isolation = Isolation::unique("org");
    let mut toml = scenario::config_toml(&llm.base_url(), &isolation, &dir.path().join("cache"));
    toml = toml.replace(
        "[repositories]\nallow_local_paths = true\n",
        &format!("[repositories]\nallow_local_paths = true\nfetch_timeout_seconds = {0}\nlocal_timeout_seconds = {0}\n", intake_timeout - 1),
    );
    toml.push_str(&format!(
        "\n[scheduler]\nsweep_interval_seconds = 1\nstall_after_seconds = 2\nintake_timeout_seconds = {intake_timeout}\n\n[github]\napi_url = \"{}\"\nweb_url = \"{}\"\ntoken_env = \"GH_TOKEN\"\n",
        github.api_url(),
        github.web_url()
    ));
    configure(&mut toml);
    let config = dir.path().join("verdict.toml");
    std::fs::write(&config, toml).unwrap();
    let (scheduler, line) = spawn("scheduler", &config);
    let api = line.trim().rsplit(' ').next().unwrap().to_owned();
    let workers = vec![spawn("worker", &config).0, spawn("worker", &config).0];
    Rig {
        llm,
        github,
        config,
        isolation,
        scheduler: Some(scheduler),
        api,
        workers,
        _dir: dir,
    }
}

/// A running `verdict scan … --json`, its events arriving on a channel.
struct ScanCommand {
    proc: Proc,
    events: mpsc::Receiver<Value>,
}

impl Rig {
    fn scan(&self, args: &[&str]) -> ScanCommand {
        let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .arg("scan")
            .args(args)
            .args(["--json", "--poll-ms", "100", "--server", &self.api])
            .env("VERDICT_API_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let event: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("`{line}` is not one JSON event: {e}"));
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        ScanCommand {
            proc: Proc(child),
            events: rx,
        }
    }

    /// Runs `verdict scan ARGS` on a pseudo-terminal (util-linux `script`), as a person would,
    /// and returns what the terminal showed, escape sequences removed.
    fn scan_on_a_terminal(&self, args: &[&str]) -> String {
        let (code, screen) = self.scan_on_a_terminal_exiting(args);
        assert_eq!(code, 0, "{screen}");
        screen
    }

    /// [`Rig::scan_on_a_terminal`] of a scan that may fail: its exit code too.
    fn scan_on_a_terminal_exiting(&self, args: &[&str]) -> (i32, String) {
        let mut command = vec![env!("CARGO_BIN_EXE_verdict").to_owned(), "scan".to_owned()];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        command.extend(["--poll-ms", "100", "--server", &self.api].map(str::to_owned));
        let output = Command::new("script")
            .args(["--quiet", "--return", "--command"])
            .arg(command.join(" "))
            .arg("/dev/null")
            .env("VERDICT_API_TOKEN", TOKEN)
            .env("COLUMNS", "120")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            screen_text(&String::from_utf8_lossy(&output.stdout)),
        )
    }

    fn client(&self) -> ApiClient {
        ApiClient::new(&self.api, Some(TOKEN.to_owned())).unwrap()
    }

    /// Scans the fake provider answered so far.
    fn scans_paid(&self) -> usize {
        self.llm.requests_for(scenario::DEFAULT).len()
    }
}

impl ScanCommand {
    /// The next event, within `within`.
    fn next(&self, within: Duration) -> Value {
        self.events
            .recv_timeout(within)
            .expect("the scan command prints its next event in time")
    }

    /// Events until one satisfies `stop` (returned last), within `within` in all.
    fn until(&self, within: Duration, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no awaited event in time; saw {seen:#?}"));
            let done = stop(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// Waits for the command to exit, within `within`; its exit code.
    fn exit(mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.proc.0.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the scan command did not exit in time"
            );
            // The command's own exit is the condition; its stdout has already closed.
            let _ = self.events.recv_timeout(Duration::from_millis(50));
        }
    }
}

fn done_at_least(n: u64) -> impl Fn(&Value) -> bool {
    move |e| e["event"] == "progress" && e["counts"]["done"].as_u64().is_some_and(|d| d >= n)
}

fn is_finished(e: &Value) -> bool {
    e["event"] == "finished"
}

/// Every member of the batch ended completed; the finished event's counts say so.
async fn assert_all_completed(rig: &Rig, finished: &Value, id: &str) {
    assert_eq!(finished["state"], "finished", "{finished:#}");
    assert_eq!(finished["counts"]["total"], MEMBERS, "{finished:#}");
    assert_eq!(finished["counts"]["done"], MEMBERS, "{finished:#}");
    assert_eq!(finished["counts"]["failed"], 0, "{finished:#}");
    let batch = rig.client().scan_batch(id).await.unwrap();
    assert_eq!(batch.task_ids().len(), MEMBERS);
    let mut distinct: Vec<&str> = batch.task_ids();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), MEMBERS, "one task per repository");
    for m in &batch.members {
        assert_eq!(m.task_state, Some(TaskState::Completed), "{m:?}");
    }
    let task_ids: Vec<&str> = finished["task_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(task_ids, batch.task_ids(), "the member task ids, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_repository_organisation_scan_survives_its_command_being_killed_and_resumed() {
    let rig = rig(Duration::from_millis(100)).await;
    let first = rig.scan(&["--org", ORG]);
    let batch = first.next(Duration::from_secs(30));
    assert_eq!(batch["event"], "batch", "the batch id comes first: {batch}");
    let id = batch["id"].as_str().unwrap().to_owned();
    let seen = first.until(Duration::from_secs(120), done_at_least(10));
    let enumerated = seen.iter().find(|e| e["event"] == "enumerated").unwrap();
    assert_eq!(enumerated["total"], MEMBERS);
    let mut skipped: Vec<(String, String)> = enumerated["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["repository"].as_str().unwrap().to_owned(),
                s["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    skipped.sort();
    let skipped_names: Vec<&str> = skipped.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        skipped_names,
        ["acme/fork-a", "acme/fork-b", "acme/old-a", "acme/old-b"]
    );
    assert!(skipped[0].1.starts_with("a fork"), "{skipped:?}");
    assert!(skipped[2].1.starts_with("archived"), "{skipped:?}");
    // Killed halfway (SIGKILL, like a closed terminal): the batch goes on in the scheduler.
    drop(first);

    let resumed = rig.scan(&["--resume", &id]);
    let again = resumed.next(Duration::from_secs(30));
    assert_eq!(again["id"], id.as_str());
    let events = resumed.until(Duration::from_secs(180), is_finished);
    let finished = events.last().unwrap().clone();
    assert_eq!(resumed.exit(Duration::from_secs(10)), 0);
    assert_all_completed(&rig, &finished, &id).await;
    assert_eq!(
        rig.scans_paid(),
        MEMBERS,
        "every repository was scanned exactly once"
    );

    // A second resume of the finished batch scans nothing, and writes the batch's report.
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let third = rig.scan(&["--resume", &id, "--report", dir]);
    let events = third.until(Duration::from_secs(30), is_finished);
    assert_eq!(events.last().unwrap()["counts"]["done"], MEMBERS);
    assert_eq!(third.exit(Duration::from_secs(10)), 0);
    assert_eq!(rig.scans_paid(), MEMBERS);
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["organisation"], ORG);
    assert_eq!(report["totals"]["repositories"], MEMBERS);
    let names: Vec<&str> = report["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), MEMBERS);
    assert!(names.iter().all(|n| n.starts_with("acme/")), "{names:?}");
    assert!(
        report["repositories"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "completed"),
        "every repository completed in the report"
    );
    let page = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    // The page escapes every value (`/` too): look for the repository part of each name.
    for name in &names {
        let repo = name.rsplit('/').next().unwrap();
        assert!(page.contains(repo), "the page lists {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_mid_batch_and_restarted_finishes_it_scanning_no_repository_twice() {
    let mut rig = rig(Duration::from_millis(150)).await;
    let first = rig.scan(&["--org", ORG]);
    let id = first.next(Duration::from_secs(30))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.until(Duration::from_secs(120), done_at_least(10));
    // The scheduler dies (SIGKILL: no shutdown, leases and intakes left as they were).
    rig.scheduler.take();
    drop(first);
    let paid_at_kill = rig.scans_paid();
    assert!(
        paid_at_kill < MEMBERS,
        "killed halfway: {paid_at_kill} scans paid"
    );

    let (scheduler, line) = spawn("scheduler", &rig.config);
    rig.scheduler = Some(scheduler);
    rig.api = line.trim().rsplit(' ').next().unwrap().to_owned();
    let resumed = rig.scan(&["--resume", &id]);
    let events = resumed.until(Duration::from_secs(240), is_finished);
    let finished = events.last().unwrap().clone();
    assert_eq!(resumed.exit(Duration::from_secs(10)), 0);
    assert_all_completed(&rig, &finished, &id).await;
    assert_eq!(
        rig.scans_paid(),
        MEMBERS,
        "no repository was scanned twice across the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_while_listing_the_organisation_is_relieved_by_the_restarted_ones_batch_pass()
 {
    const LISTING: &str = "/orgs/acme/repos";
    let mut rig = rig_with(Duration::ZERO, 6, |gh| gh.hang("GET", LISTING)).await;
    let client = rig.client();
    let submission = verdict_api::submission::ScanBatchSubmission {
        organisation: Some(ORG.to_owned()),
        ..Default::default()
    };
    let before = rig.github.requests().len();
    let id = client.submit_scan_batch(&submission).await.unwrap().id;
    let seen = rig
        .github
        .wait_for_requests(before + 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        seen.last().unwrap().path,
        LISTING,
        "the listing is asked for"
    );
    let batch = client.scan_batch(&id).await.unwrap();
    assert_eq!(batch.state.as_str(), "enumerating");
    // Killed mid-listing: its lease on the batch stays on the record until it lapses.
    rig.scheduler.take();
    rig.github.stop_hanging("GET", LISTING);

    let (scheduler, line) = spawn("scheduler", &rig.config);
    rig.scheduler = Some(scheduler);
    rig.api = line.trim().rsplit(' ').next().unwrap().to_owned();
    // Nobody resumes it: the restarted scheduler's batch pass lists the organisation again
    // once the lease lapsed (6 s)...
    let listed = rig.github.requests().len() + 1;
    let seen = rig
        .github
        .wait_for_requests(listed, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(seen.last().unwrap().path, LISTING);
    let client = rig.client();
    let batch = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let batch = client.scan_batch(&id).await.unwrap();
            if batch.counts.total == MEMBERS && batch.members.iter().all(|m| m.task_state.is_some())
            {
                return batch;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the members are created");
    // ...and every member task runs to its end (followed on its event stream).
    for task in batch.task_ids() {
        let mut events = client.events(task, None);
        tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(item) = events.next().await.unwrap() {
                if matches!(item, verdict_client::client::StreamItem::End(_)) {
                    break;
                }
            }
        })
        .await
        .expect("the member task ends");
    }
    let batch = client.scan_batch(&id).await.unwrap();
    let finished = serde_json::json!({
        "state": batch.state,
        "counts": batch.counts,
        "task_ids": batch.task_ids(),
    });
    assert_all_completed(&rig, &finished, &id).await;
    let listings = rig
        .github
        .requests()
        .into_iter()
        .filter(|r| r.path == LISTING)
        .count();
    assert_eq!(
        listings, 2,
        "listed by the killed scheduler, then once by the restarted one"
    );
    assert_eq!(rig.scans_paid(), MEMBERS);
}

/// Every repository again, as a new batch (a new id, new tasks): with the response cache on,
/// nothing is paid for twice (SPEC X3), and the second report's tokens are 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_identical_organisation_scan_is_answered_from_the_cache() {
    let rig = rig_configured(
        Behaviour::text(scenario::SCAN_OK),
        30,
        |_| {},
        |toml| *toml = toml.replace("response_cache = false", "response_cache = true"),
    )
    .await;
    let first = rig.scan(&["--org", ORG]);
    let first_id = first.next(Duration::from_secs(30))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let finished = first.until(Duration::from_secs(180), is_finished);
    assert_eq!(first.exit(Duration::from_secs(10)), 0);
    assert_all_completed(&rig, finished.last().unwrap(), &first_id).await;
    assert_eq!(
        rig.scans_paid(),
        MEMBERS,
        "the first scan pays for each repository"
    );

    let out = tempfile::tempdir().unwrap();
    let second = rig.scan(&["--org", ORG, "--report", out.path().to_str().unwrap()]);
    let second_id = second.next(Duration::from_secs(30))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(second_id, first_id, "a new batch");
    let finished = second.until(Duration::from_secs(180), is_finished);
    assert_eq!(second.exit(Duration::from_secs(10)), 0);
    assert_all_completed(&rig, finished.last().unwrap(), &second_id).await;
    let first_tasks = rig.client().scan_batch(&first_id).await.unwrap();
    let second_tasks = rig.client().scan_batch(&second_id).await.unwrap();
    for (a, b) in first_tasks.task_ids().iter().zip(second_tasks.task_ids()) {
        assert_ne!(*a, b, "the second scan has tasks of its own");
    }
    assert_eq!(
        rig.scans_paid(),
        MEMBERS,
        "the second scan asked the provider nothing: every answer came from the cache"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["totals"]["repositories"], MEMBERS);
    assert_eq!(report["totals"]["tokens"], 0, "cached answers cost nothing");

    // The same once more as a person runs it, on a terminal: the progress bar, then the summary.
    let screen = rig.scan_on_a_terminal(&["--org", ORG]);
    eprintln!("--- verdict scan --org {ORG}, as the terminal showed it ---\n{screen}\n---");
    assert!(
        screen.contains("(resume with `verdict scan --resume "),
        "{screen}"
    );
    assert!(screen.contains("ETA"), "the bar shows an ETA: {screen}");
    assert!(
        screen.contains("done 50 · running 0 · failed 0 · queued 0")
            || screen.contains("finished: 50 repositories, 50 done"),
        "{screen}"
    );
    assert!(
        screen.contains(" finished: 50 repositories, 50 done, 0 failed, 4 skipped"),
        "{screen}"
    );
    assert_eq!(rig.scans_paid(), MEMBERS);
}

/// What a terminal shows of escape sequences and carriage returns: the text of each line as
/// last drawn.
fn screen_text(raw: &str) -> String {
    let mut text = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        if c == '\r' {
            // The bar redraws its line: keep what came before as a line of its own.
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            continue;
        }
        text.push(c);
    }
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tokens the budget ledger holds for `acme` this month: `(spent, held)`.
async fn ledger(rig: &Rig) -> (u64, u64) {
    use verdict_backends::store::{Account, BudgetLedger};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let (period, _) = verdict_policy::budget::Period::Month.at(u64::try_from(now).unwrap());
    let mut config = RedisConfig::new("redis://127.0.0.1:6379/");
    config.prefix = rig.isolation.redis_prefix.clone();
    let store = RedisStore::connect(config).await.unwrap();
    let account = Account {
        organisation: ORG.to_owned(),
        period,
        keep_until_unix_ms: 0,
    };
    let standing = store.standing(&account).await.unwrap();
    (standing.spent.tokens, standing.held.tokens)
}

/// SPEC X5 with a budget of 5,000 tokens a month for acme, estimates of 100 tokens per stage
/// call around the content, and scans that each really spend 125 tokens:
/// - while GitHub says each repository is 1 KiB (256 tokens of content), the organisation scan
///   is estimated at 50 × 356 = 17,800 tokens and refused with that estimate, before any task
///   exists or any request is made;
/// - once GitHub says 0 KiB the estimate is 5,000 and the scan starts; each repository's real
///   files (≈ 32 tokens) make its intake estimate larger, so the budget runs out partway: the
///   repositories not yet taken in are refused one by one and never started, the rest finish,
///   the ledger never passes the budget, and the report says it is partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_over_budget_is_refused_with_its_estimate_and_one_reaching_it_stops_cleanly() {
    const BUDGET: u64 = 5_000;
    let rig = rig_configured(
        Behaviour::text(scenario::SCAN_OK).usage(100, 25),
        30,
        |_| {},
        |toml| {
            toml.push_str(&format!(
                "\n[budgets]\nprompt_tokens_per_stage = 0\noutput_tokens_per_stage = 100\n\n[organisations.{ORG}]\nbudget_tokens = {BUDGET}\n"
            ));
        },
    )
    .await;

    let refused = rig.scan(&["--org", ORG]);
    let id = refused.next(Duration::from_secs(30))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = refused.until(Duration::from_secs(60), is_finished);
    assert_eq!(
        refused.exit(Duration::from_secs(10)),
        1,
        "a refused scan fails"
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["state"], "refused", "{finished:#}");
    assert_eq!(finished["estimate"]["tokens"], 17_800, "{finished:#}");
    let reason = finished["reason"].as_str().unwrap();
    assert!(
        reason.contains("this scan of 50 repositories is estimated at 17,800 tokens"),
        "{reason}"
    );
    assert!(
        reason.contains("has 5,000 tokens left of its budget of 5,000 tokens"),
        "{reason}"
    );
    assert_eq!(finished["counts"]["total"], 0, "no task was created");
    let batch = rig.client().scan_batch(&id).await.unwrap();
    assert_eq!(batch.state.as_str(), "refused");
    assert_eq!(rig.scans_paid(), 0);
    assert_eq!(ledger(&rig).await, (0, 0));

    for i in 0..MEMBERS {
        rig.github.describe_repository(
            ORG,
            &format!("repo-{i:02}"),
            FakeRepoTraits {
                size_kib: 0,
                ..FakeRepoTraits::default()
            },
        );
    }
    let out = tempfile::tempdir().unwrap();
    let second = rig.scan(&["--org", ORG, "--report", out.path().to_str().unwrap()]);
    let id = second.next(Duration::from_secs(30))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = second.until(Duration::from_secs(180), is_finished);

    assert_eq!(
        second.exit(Duration::from_secs(10)),
        1,
        "a partial scan is not clean"
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["state"], "finished", "{finished:#}");
    assert_eq!(finished["estimate"]["tokens"], BUDGET, "{finished:#}");
    let over = finished["over_budget"].as_u64().unwrap();
    let done = finished["counts"]["done"].as_u64().unwrap();
    assert_eq!(done + over, MEMBERS as u64, "{finished:#}");
    assert!(
        over >= 5 && done >= 30,
        "stopped partway: {done} done, {over} refused"
    );
    eprintln!("stopped at the budget: {done} scanned, {over} refused");
    assert_eq!(
        rig.scans_paid(),
        usize::try_from(done).unwrap(),
        "a refused repository never reached the provider"
    );
    let batch = rig.client().scan_batch(&id).await.unwrap();
    for m in &batch.members {
        match m.task_state {
            Some(TaskState::Completed) => {}
            Some(TaskState::Incomplete) => {
                let reason = m.reason.as_deref().unwrap_or_default();
                assert!(
                    reason.starts_with("refused by the budget: this scan is estimated at"),
                    "{m:?}"
                );
            }
            other => panic!("{} ended {other:?}", m.repository),
        }
    }
    let (spent, held) = ledger(&rig).await;
    assert_eq!(held, 0, "every hold was settled");
    assert_eq!(spent, done * 125, "what the scans really spent");
    assert!(spent <= BUDGET, "never overspent: {spent} of {BUDGET}");

    let report: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["over_budget"], over);
    assert!(
        report["budget_note"]
            .as_str()
            .unwrap()
            .contains("refused by the budget"),
        "{report:#}"
    );
    // Spent 38 × 125 of 5,000: the next organisation scan (estimated at 5,000) does not fit.
    let (code, screen) = rig.scan_on_a_terminal_exiting(&["--org", ORG]);
    eprintln!(
        "--- verdict scan --org {ORG} over budget, as the terminal showed it ---\n{screen}\n---"
    );
    assert_eq!(code, 1, "{screen}");
    assert!(
        screen.contains(" refused before anything was scanned: "),
        "{screen}"
    );
    assert!(
        screen.contains(
            "refused by the budget: this scan of 50 repositories is estimated at 5,000 tokens"
        ),
        "{screen}"
    );
    let page = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(
        page.contains(&format!(
            "This report is partial: the scan stopped at its budget, and {over} of {MEMBERS} repositories were not scanned."
        )),
        "the page says it is partial"
    );
}
