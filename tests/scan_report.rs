//! Sharded scans end to end, and `verdict report` over them (issue 10, items 2 and 3): two git
//! repositories scanned by the in-process pool against the fake provider, each cut into several
//! shards (one provider call per shard), a finding every shard reports listed once, the
//! vendored and binary files in the coverage; then the `verdict` binary fetches both task
//! documents through the real API and writes `report.json` and `report.html`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use verdict::config::Config;
use verdict::dev::DevPool;
use verdict::runtime;
use verdict_api::document::{SkipReason, TaskState};
use verdict_api::submission::{ScanSubmission, SubmissionOptions};
use verdict_backends::repo::{GitRepositorySource, GitSourceConfig};
use verdict_backends::secret::Secret;
use verdict_scheduler::api::{self, ApiAuth};
use verdict_scheduler::service::TaskService;
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

const TOKEN: &str = "scan-report-token";
const SCAN_MODEL: &str = "m-default";

const ANSWER: &str = "<SAKURA_SCAN>\n<VERSION>1</VERSION>\n<OVERALL_SCORE>70</OVERALL_SCORE>\n<SUMMARY>\nSmall functions.\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>major</SEVERITY>\n<CATEGORY>reliability</CATEGORY>\n<FILE>src/f00.rs</FILE>\n<START_LINE>1</START_LINE>\n<END_LINE>1</END_LINE>\n<TITLE>Magic number returned</TITLE>\n<DESCRIPTION>\nThe value is hard-coded.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n<CONFIDENCE>80</CONFIDENCE>\n</FINDING>\n</FINDINGS>\n</SAKURA_SCAN>\n";

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository of `sources` Rust files of about 400 bytes (100 tokens), one vendored file and
/// one binary.
fn repository(dir: &Path, sources: usize) -> String {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("vendor/dep")).unwrap();
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    for i in 0..sources {
        let body = format!("pub fn f{i}() -> u32 {{\n    {i}\n}}\n").repeat(16);
        std::fs::write(dir.join(format!("src/f{i:02}.rs")), &body[..400]).unwrap();
    }
    std::fs::write(dir.join("vendor/dep/lib.rs"), "pub fn dep() {}\n").unwrap();
    std::fs::write(dir.join("logo.png"), [0x89, b'P', 0, 0, 1]).unwrap();
    git(dir, &["add", "--all"]);
    git(dir, &["commit", "--quiet", "-m", "init"]);
    dir.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_scans_are_merged_and_verdict_report_writes_their_report() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    scenario::script_valid_answers(&fake);
    fake.script(SCAN_MODEL, Script::always(Behaviour::text(ANSWER)));
    let cache = dir.path().join("cache");
    // 250 tokens a shard: two 100-token files each.
    let toml = scenario::config_toml(&fake.base_url(), &Isolation::unique("scanrep"), &cache)
        + "\n[scan]\nshard_tokens = 250\n";
    let path = dir.path().join("verdict.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load(Some(&path), &[]).unwrap();
    assert_eq!(config.scan.shard_tokens, 250);
    let mut source = GitSourceConfig::new(&cache);
    source.env = vec![("GIT_CONFIG_GLOBAL".into(), "/dev/null".into())];
    let repositories = Arc::new(GitRepositorySource::open(source).unwrap());
    let providers = runtime::provider_registry(&config).unwrap();
    let pool = DevPool::start(&config, providers, repositories, None, 2).unwrap();

    let mut ids = Vec::new();
    for (name, sources) in [("api", 6), ("web", 3)] {
        let url = repository(&dir.path().join(name), sources);
        let submitted = pool
            .scheduler
            .submit_scan(ScanSubmission {
                repository: url,
                revision: "main".into(),
                options: SubmissionOptions::default(),
            })
            .await
            .unwrap();
        ids.push((submitted.id, sources));
    }
    for (id, sources) in &ids {
        let doc = pool.wait(id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(doc.state, TaskState::Completed, "{:?}", doc.reason);
        let shards = sources.div_ceil(2);
        let scan_stages: Vec<&str> = doc.stages.iter().map(|s| s.id.as_str()).collect();
        let expected: Vec<String> = (1..=shards).map(|k| format!("scan-{k}")).collect();
        assert_eq!(scan_stages, expected);
        let result = doc.result.as_ref().unwrap();
        assert_eq!(
            result["findings"].as_array().unwrap().len(),
            1,
            "every shard reported it; it is listed once"
        );
        assert_eq!(result["overall_score"], 70);
        assert_eq!(doc.coverage.files_total, sources + 2);
        assert_eq!(doc.coverage.files_reviewed.len(), *sources);
        let skipped: Vec<(&str, Option<SkipReason>)> = doc
            .coverage
            .files_not_reviewed
            .iter()
            .map(|n| (n.path.as_str(), n.kind))
            .collect();
        assert_eq!(
            skipped,
            [
                ("logo.png", Some(SkipReason::Binary)),
                ("vendor/dep/lib.rs", Some(SkipReason::Vendored)),
            ]
        );
    }
    assert_eq!(
        fake.requests_for(SCAN_MODEL).len(),
        3 + 2,
        "one provider call per shard"
    );

    // The report, through the API and the binary.
    let auth = ApiAuth::new([Secret::new(TOKEN)]).unwrap();
    let router = api::router(pool.service(), auth, prometheus::Registry::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let out_dir = dir.path().join("report");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_verdict"));
    cmd.arg("report")
        .args(["--organisation", "acme", "--out"])
        .arg(&out_dir)
        .env("VERDICT_SERVER", format!("http://{addr}"))
        .env("VERDICT_API_TOKEN", TOKEN);
    for (id, _) in &ids {
        cmd.args(["--task", id]);
    }
    let out = cmd.output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("2 repositories, 2 findings: "),
        "{stdout}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["organisation"], "acme");
    let repos = report["repositories"].as_array().unwrap();
    assert_eq!(repos.len(), 2);
    for (r, (id, sources)) in repos.iter().zip(&ids) {
        assert_eq!(r["task_id"], id.as_str());
        assert_eq!(r["score"], 70);
        assert_eq!(r["findings_total"], 1);
        assert_eq!(r["by_severity"]["major"], 1);
        assert_eq!(r["by_category"]["reliability"], 1);
        assert_eq!(r["coverage"]["files_scanned"], *sources);
        assert_eq!(r["coverage"]["skipped_by_reason"]["binary"], 1);
        assert_eq!(r["coverage"]["skipped_by_reason"]["vendored"], 1);
        assert_eq!(r["findings"][0]["file"], "src/f00.rs");
    }
    let page = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(page.contains("Magic number returned"));
    pool.stop().await;
}
