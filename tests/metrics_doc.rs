//! The metric contract held against the real processes (SPEC O1, K2): a `verdict scheduler` and a
//! `verdict worker` run a review on RabbitMQ and Redis against the fake provider, their
//! `/metrics` are scraped, and the scrape must match `docs/metrics.md` table by table (every
//! documented metric exported with its type, every exported `verdict_*` metric documented), and
//! every metric `ops/grafana/verdict.json` and `ops/prometheus/verdict-rules.yaml` use must be one
//! the scrape shows. Expressions are read with `promql-parser`, not patterns.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use verdict_api::document::TaskState;
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_client::client::{ApiClient, StreamItem};
use verdict_testkit::FakeProvider;
use verdict_testkit::scenario::{self, Isolation};

const TOKEN: &str = "metrics-doc-token-52c1";

/// The metric families of one scrape: name → type (`counter`, `gauge`, `histogram`, …).
type Families = BTreeMap<String, String>;

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The queues and keys of this test, deleted when it ends (after the processes stopped).
struct Cleanup(Isolation);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let isolation = self.0.clone();
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

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Starts `verdict <role> --config <file>` with `env` and returns it with its first stdout line.
fn spawn(role: &str, config: &Path, env: &[(&str, &str)]) -> (Proc, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([role, "--config"])
        .arg(config)
        .env("VERDICT_API_TOKEN", TOKEN)
        .env("VERDICT_LOG", "warn")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let stdout = proc.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
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

async fn scrape(url: &str) -> String {
    let response = reqwest::get(url).await.unwrap();
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.text().await.unwrap()
}

/// The families of an exposition, from its `# TYPE` lines; every sample must belong to one.
fn families(text: &str) -> Families {
    let mut out = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.insert(name.to_owned(), kind.to_owned());
        }
    }
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(
            out.contains_key(base_name(name)) || out.contains_key(name),
            "sample {name} has no # TYPE line"
        );
    }
    out
}

/// A histogram's series name without its `_bucket`/`_sum`/`_count` suffix.
fn base_name(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// The value of the one sample of `text` that is exactly `series` (name and labels as printed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `docs/metrics.md`'s tables: section heading → metric name → type.
fn documented() -> BTreeMap<String, Families> {
    let doc = std::fs::read_to_string(repo_file("docs/metrics.md")).unwrap();
    let mut tables: BTreeMap<String, Families> = BTreeMap::new();
    let mut section = String::new();
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `name` | type | labels | meaning |
        if cells.len() >= 5
            && let Some(name) = cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`'))
            && name.starts_with("verdict_")
        {
            let previous = tables
                .entry(section.clone())
                .or_default()
                .insert(name.to_owned(), cells[2].to_owned());
            assert!(previous.is_none(), "{name} twice in ## {section}");
        }
    }
    tables
}

/// Every `verdict_*` family of a scrape against its table: nothing missing, nothing extra,
/// the same types.
fn check_against_table(process: &str, scraped: &Families, table: &Families) {
    let exported: Families = scraped
        .iter()
        .filter(|(name, _)| name.starts_with("verdict_"))
        .map(|(n, t)| (n.clone(), t.clone()))
        .collect();
    let missing: Vec<&String> = table
        .keys()
        .filter(|n| !exported.contains_key(*n))
        .collect();
    let undocumented: Vec<&String> = exported
        .keys()
        .filter(|n| !table.contains_key(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "documented in docs/metrics.md ## {process} but not exported: {missing:?}"
    );
    assert!(
        undocumented.is_empty(),
        "exported by the {process} but not in docs/metrics.md ## {process}: {undocumented:?}"
    );
    for (name, kind) in &exported {
        assert_eq!(&table[name], kind, "{name}: documented type vs exported");
    }
}

/// Grafana's variables as concrete values, so the expression parses as plain PromQL (the same
/// substitution `ops/bin/check-observability` makes for promtool).
fn concrete(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("$namespace", ".*")
        .replace("$job", ".*")
}

/// The metric names an expression selects.
fn metric_names(expr: &str) -> BTreeSet<String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = String;
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
            let selector = match expr {
                Expr::VectorSelector(vs) => vs,
                Expr::MatrixSelector(ms) => &ms.vs,
                _ => return Ok(true),
            };
            let name = selector.name.clone().ok_or_else(|| {
                format!("a selector without a metric name: {selector}; name every metric")
            })?;
            self.0.insert(name);
            Ok(true)
        }
    }
    let parsed = parser::parse(&concrete(expr)).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &parsed).unwrap_or_else(|e| panic!("{expr}: {e}"));
    names.0
}

/// Every expression of the dashboard's panels, with the panel's title.
fn dashboard_expressions() -> Vec<(String, String)> {
    fn walk(panels: &[serde_json::Value], out: &mut Vec<(String, String)>) {
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((
                        p["title"].as_str().unwrap_or("").to_owned(),
                        expr.to_owned(),
                    ));
                }
            }
            walk(p["panels"].as_array().map_or(&[], Vec::as_slice), out);
        }
    }
    let text = std::fs::read_to_string(repo_file("ops/grafana/verdict.json")).unwrap();
    let model: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    walk(model["panels"].as_array().unwrap(), &mut out);
    assert!(
        out.len() >= 20,
        "the dashboard has {} expressions",
        out.len()
    );
    out
}

/// Every alert rule of the rules file: (alert name, expression, runbook URL).
fn alert_rules() -> Vec<(String, String, String)> {
    use yaml_rust2::YamlLoader;
    let text = std::fs::read_to_string(repo_file("ops/prometheus/verdict-rules.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    let mut out = Vec::new();
    for group in docs[0]["groups"].as_vec().unwrap() {
        for rule in group["rules"].as_vec().unwrap() {
            let alert = rule["alert"].as_str().unwrap().to_owned();
            let expr = rule["expr"].as_str().unwrap().to_owned();
            let runbook = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert} has no runbook_url"))
                .to_owned();
            assert!(
                rule["labels"]["severity"].as_str().is_some(),
                "{alert} has no severity"
            );
            assert!(rule["for"].as_str().is_some(), "{alert} has no for:");
            for annotation in ["summary", "description"] {
                assert!(
                    rule["annotations"][annotation].as_str().is_some(),
                    "{alert} has no {annotation}"
                );
            }
            out.push((alert, expr, runbook));
        }
    }
    out
}

/// The dashboard and the rules are read without any process: each alert's runbook entry exists,
/// and every expression parses and names its metrics.
#[test]
fn every_alert_has_its_runbook_entry_and_every_expression_names_its_metrics() {
    let runbook = std::fs::read_to_string(repo_file("docs/runbook.md")).unwrap();
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let rules = alert_rules();
    assert_eq!(rules.len(), 7, "{rules:?}");
    for (alert, expr, runbook_url) in &rules {
        let anchor = runbook_url
            .strip_prefix("docs/runbook.md#")
            .unwrap_or_else(|| {
                panic!("{alert}: runbook_url {runbook_url} is not docs/runbook.md#…")
            });
        assert!(
            anchors.contains(anchor),
            "{alert}: no ## heading for #{anchor} in docs/runbook.md"
        );
        assert!(!metric_names(expr).is_empty(), "{alert}");
    }
    for (title, expr) in dashboard_expressions() {
        assert!(!metric_names(&expr).is_empty(), "{title}: {expr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_metrics_match_the_documentation_the_dashboard_and_the_alerts() {
    // reqwest is built without a default crypto provider (the scrapes use it directly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let repo = scenario::sample_repo(&dir.path().join("repo")).unwrap();
    let fake = FakeProvider::start().await;
    scenario::script_valid_answers(&fake);
    let isolation = Isolation::unique("metrics-doc");
    let _cleanup = Cleanup(isolation.clone());
    let config = dir.path().join("verdict.toml");
    std::fs::write(
        &config,
        scenario::config_toml(&fake.base_url(), &isolation, &dir.path().join("cache")),
    )
    .unwrap();
    let env = [
        ("VERDICT_SCHEDULER__QUEUE_STATS_INTERVAL_SECONDS", "1"),
        ("VERDICT_PROVIDERS__FAKE__INPUT_USD_PER_MILLION_TOKENS", "3"),
        (
            "VERDICT_PROVIDERS__FAKE__OUTPUT_USD_PER_MILLION_TOKENS",
            "15",
        ),
    ];
    let (scheduler, line) = spawn("scheduler", &config, &env);
    let api = line.trim().rsplit(' ').next().unwrap().to_owned();
    let (worker, line) = spawn("worker", &config, &env);
    let worker_metrics = format!(
        "http://{}/metrics",
        line.trim().rsplit("http://").next().unwrap()
    );
    let scheduler_metrics = format!("{api}/metrics");
    let _processes = [scheduler, worker];

    // A small workload: one multi-stage review to its end.
    let client = ApiClient::new(&api, Some(TOKEN.to_owned())).unwrap();
    let submission = ReviewSubmission {
        repository: repo.display().to_string(),
        base: "main".into(),
        head: "feature/coupons".into(),
        pipeline: Some("multi".into()),
        title: Some("Add percentage coupons".into()),
        options: SubmissionOptions::default(),
        ..Default::default()
    };
    let id = client.submit_review(&submission).await.unwrap().id;
    let mut stream = client.events(&id, None);
    tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(item) = stream.next().await.unwrap() {
            if matches!(item, StreamItem::End(_)) {
                break;
            }
        }
    })
    .await
    .expect("the review ends within 90 s");
    assert_eq!(client.task(&id).await.unwrap().state, TaskState::Completed);

    // The scheduler's poll sees the worker consuming (its gauge is set by a poll, not at 0).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let scheduler_text = loop {
        let text = scrape(&scheduler_metrics).await;
        if sample(&text, r#"verdict_queue_consumers{queue="interactive"}"#) >= Some(1.0) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no poll reported the worker's consumer:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let worker_text = scrape(&worker_metrics).await;

    // What the workload must have moved, on the process that counts it.
    let reviewer = scenario::REVIEWER;
    for (text, series) in [
        (
            &scheduler_text,
            r#"verdict_tasks_total{kind="review",state="completed"}"#,
        ),
        (
            &scheduler_text,
            r#"verdict_stage_results_total{outcome="ok",stage="reviewer"}"#,
        ),
        (
            &worker_text,
            r#"verdict_worker_prefetch_limit{queue="interactive"}"#,
        ),
        (
            &worker_text,
            &format!(
                r#"verdict_provider_tokens_total{{direction="input",model="{reviewer}",provider="fake"}}"#
            ),
        ),
        (
            &worker_text,
            &format!(r#"verdict_provider_cost_usd_total{{model="{reviewer}",provider="fake"}}"#),
        ),
    ] {
        let value = sample(text, series).unwrap_or_else(|| panic!("{series} missing"));
        assert!(value > 0.0, "{series} = {value}");
    }
    // Known label sets exist before their first event.
    assert_eq!(
        sample(
            &worker_text,
            r#"verdict_stage_outcomes_total{kind="timeout",model="none",outcome="execution_failure",stage="scan"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &worker_text,
            r#"verdict_worker_prefetch_in_use{queue="interactive"}"#
        ),
        Some(0.0)
    );

    let scheduler_families = families(&scheduler_text);
    let worker_families = families(&worker_text);
    let tables = documented();
    check_against_table("Scheduler", &scheduler_families, &tables["Scheduler"]);
    check_against_table("Worker", &worker_families, &tables["Worker"]);

    // Every metric the dashboard and the alerts use is one the processes export.
    let live: BTreeSet<&str> = scheduler_families
        .keys()
        .chain(worker_families.keys())
        .map(String::as_str)
        .collect();
    let mut used = Vec::new();
    for (title, expr) in dashboard_expressions() {
        used.extend(
            metric_names(&expr)
                .into_iter()
                .map(|n| (format!("panel {title:?}"), n)),
        );
    }
    for (alert, expr, _) in alert_rules() {
        used.extend(
            metric_names(&expr)
                .into_iter()
                .map(|n| (format!("alert {alert}"), n)),
        );
    }
    let unknown: Vec<&(String, String)> = used
        .iter()
        .filter(|(_, name)| !live.contains(base_name(name)) && !live.contains(name.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "metrics no process exports: {unknown:?}"
    );
}

/// The chart ships the dashboard and the alert rules of `ops/` (Helm reads only files inside the
/// chart, so they are copies): a change to one that is not copied fails here.
#[test]
fn the_chart_ships_the_dashboard_and_the_rules_of_ops() {
    for (source, copy) in [
        (
            "ops/grafana/verdict.json",
            "helm/verdict/files/grafana/verdict.json",
        ),
        (
            "ops/prometheus/verdict-rules.yaml",
            "helm/verdict/files/prometheus/verdict-rules.yaml",
        ),
    ] {
        let (a, b) = (
            std::fs::read(repo_file(source)).unwrap(),
            std::fs::read(repo_file(copy)).unwrap(),
        );
        assert!(a == b, "{copy} differs from {source}: cp {source} {copy}");
    }
}
