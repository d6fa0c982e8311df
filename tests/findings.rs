//! Findings people can trust, end to end: each case under `tests/data/findings/` is a set of
//! findings a model reports on the sample repository (`ops/bin/sample-repo`) through one pipeline
//! — a scan, a single-pass review or a multi-stage review whose two reviewers both report them —
//! and the findings the task's result must show: located as given, corrected to the one real
//! place, or kept unlocated with the model's location in the note; merged across reviewers, never
//! listed twice. The whole pool runs in-process on the real git source and the fake provider.
//!
//! A case is JSON: `about` (what it shows), `pipeline` (`scan`, `single`, `multi`), `reported`
//! (`file`, `start_line`, `end_line`, `title`, optional `quote` — reviewers only) and `expect`
//! (per title: `status`, the final `file`/`start_line`/`end_line`, and `raised_by` for merged
//! reviews). Every expected finding must appear exactly once and nothing else may.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use verdict::config::Config;
use verdict::dev::DevPool;
use verdict::runtime;
use verdict_api::document::{TaskDocument, TaskState};
use verdict_api::submission::{ReviewSubmission, ScanSubmission, SubmissionOptions};
use verdict_backends::repo::{GitRepositorySource, GitSourceConfig};
use verdict_scheduler::service::TaskService;
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    #[allow(dead_code)] // documentation for the reader of the data file
    about: String,
    pipeline: String,
    reported: Vec<Reported>,
    expect: Vec<Expected>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reported {
    file: Option<String>,
    start_line: Option<u32>,
    end_line: Option<u32>,
    title: String,
    #[serde(default)]
    quote: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Expected {
    title: String,
    status: String,
    file: Option<String>,
    start_line: Option<u32>,
    end_line: Option<u32>,
    #[serde(default)]
    raised_by: Option<Vec<String>>,
}

/// The scan stage has no model of its own in the scenario configuration.
const SCAN_MODEL: &str = "m-default";

fn none_or(v: &Option<impl ToString>) -> String {
    v.as_ref().map_or("NONE".to_owned(), ToString::to_string)
}

fn scan_answer(findings: &[Reported]) -> String {
    let mut s = String::from(
        "<SAKURA_SCAN>\n<VERSION>1</VERSION>\n<OVERALL_SCORE>60</OVERALL_SCORE>\n<SUMMARY>\nA shopping cart library.\n</SUMMARY>\n<FINDINGS>\n",
    );
    for f in findings {
        s.push_str(&format!(
            "<FINDING>\n<SEVERITY>major</SEVERITY>\n<CATEGORY>reliability</CATEGORY>\n<FILE>{}</FILE>\n<START_LINE>{}</START_LINE>\n<END_LINE>{}</END_LINE>\n<TITLE>{}</TITLE>\n<DESCRIPTION>\nEvidence for {}.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n<CONFIDENCE>80</CONFIDENCE>\n</FINDING>\n",
            none_or(&f.file), none_or(&f.start_line), none_or(&f.end_line), f.title, f.title
        ));
    }
    s + "</FINDINGS>\n</SAKURA_SCAN>\n"
}

fn review_answer(findings: &[Reported]) -> String {
    let mut s = String::from(
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>5</SCORE>\n<DECISION>request_changes</DECISION>\n<DECISION_REASON>\nAn empty cart crashes.\n</DECISION_REASON>\n<SUMMARY>\nAdds coupons.\n</SUMMARY>\n<FINDINGS>\n",
    );
    for f in findings {
        s.push_str(&format!(
            "<FINDING>\n<SEVERITY>major</SEVERITY>\n<FILE>{}</FILE>\n<START_LINE>{}</START_LINE>\n<END_LINE>{}</END_LINE>\n<TITLE>{}</TITLE>\n<DESCRIPTION>\nEvidence for {}.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n",
            none_or(&f.file), none_or(&f.start_line), none_or(&f.end_line), f.title, f.title
        ));
    }
    s + "</FINDINGS>\n</SAKURA_REVIEW>\n"
}

fn reviewer_answer(findings: &[Reported]) -> String {
    let findings: Vec<Value> = findings
        .iter()
        .map(|f| {
            json!({"severity": "major", "file": f.file, "start_line": f.start_line,
                   "end_line": f.end_line, "quote": f.quote, "title": f.title,
                   "description": format!("Evidence for {}.", f.title), "suggestion": null,
                   "confidence": 0.8})
        })
        .collect();
    json!({"findings": findings, "files_reviewed": ["src/shopcart/cart.py"]}).to_string()
}

fn validator_confirming(n: usize) -> String {
    let verdicts: Vec<Value> = (1..=n)
        .map(|i| json!({"id": format!("F{i}"), "verdict": "confirmed", "severity": null, "reason": "Holds against the code."}))
        .collect();
    json!({ "verdicts": verdicts }).to_string()
}

async fn run(case: &Case, dir: &Path) -> TaskDocument {
    let repo = scenario::sample_repo(&dir.join("repo")).unwrap();
    let fake = FakeProvider::start().await;
    scenario::script_valid_answers(&fake);
    match case.pipeline.as_str() {
        "scan" => fake.script(
            SCAN_MODEL,
            Script::always(Behaviour::text(scan_answer(&case.reported))),
        ),
        "single" => fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(review_answer(&case.reported))),
        ),
        "multi" => {
            fake.script(
                scenario::REVIEWER,
                Script::always(Behaviour::text(reviewer_answer(&case.reported))),
            );
            fake.script(
                scenario::VALIDATOR,
                Script::always(Behaviour::text(validator_confirming(case.expect.len()))),
            );
        }
        other => panic!("unknown pipeline `{other}`"),
    }
    let cache = dir.join("cache");
    let toml = scenario::config_toml(&fake.base_url(), &Isolation::unique("findings"), &cache);
    let path = dir.join("verdict.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load(Some(&path), &[]).unwrap();
    let mut git = GitSourceConfig::new(&cache);
    git.env = vec![("GIT_CONFIG_GLOBAL".into(), "/dev/null".into())];
    let repositories = Arc::new(GitRepositorySource::open(git).unwrap());
    let providers = runtime::provider_registry(&config).unwrap();
    let pool = DevPool::start(&config, providers, repositories, None, 2).unwrap();
    let repository = repo.display().to_string();
    let submitted = match case.pipeline.as_str() {
        "scan" => pool.scheduler.submit_scan(ScanSubmission {
            repository,
            revision: "feature/coupons".into(),
            options: SubmissionOptions::default(),
        }),
        pipeline => pool.scheduler.submit_review(ReviewSubmission {
            repository,
            base: "main".into(),
            head: "feature/coupons".into(),
            pipeline: Some(pipeline.into()),
            title: Some("Add percentage coupons".into()),
            body: None,
            options: SubmissionOptions::default(),
            ..Default::default()
        }),
    };
    let id = submitted.await.unwrap().id;
    pool.wait(&id, Duration::from_secs(60)).await.unwrap()
}

/// What the result shows of one finding, in the shape of [`Expected`].
fn shown(finding: &Value) -> Expected {
    let line = |k: &str| finding[k].as_u64().map(|n| u32::try_from(n).unwrap());
    Expected {
        title: finding["title"].as_str().unwrap().to_owned(),
        status: finding["grounding"]["status"]
            .as_str()
            .unwrap_or("(no note)")
            .to_owned(),
        file: finding["file"].as_str().map(str::to_owned),
        start_line: line("start_line"),
        end_line: line("end_line"),
        raised_by: finding["raised_by"]
            .as_array()
            .map(|a| a.iter().map(|r| r.as_str().unwrap().to_owned()).collect()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_shows_its_findings_grounded_and_merged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/findings");
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    for file in files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let case: Case = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let dir = tempfile::tempdir().unwrap();
        let doc = run(&case, dir.path()).await;
        if doc.state != TaskState::Completed {
            failures.push(format!("{name}: task {:?}: {:?}", doc.state, doc.reason));
            continue;
        }
        let findings = doc.result.as_ref().unwrap()["findings"]
            .as_array()
            .unwrap()
            .clone();
        let mut shown: Vec<Expected> = findings.iter().map(shown).collect();
        for f in &findings {
            // An unlocated finding keeps what the model wrote, and says so.
            if f["grounding"]["status"] == "unlocated"
                && f["grounding"]["reported"]["file"].as_str().is_none()
            {
                failures.push(format!("{name}: unlocated without its reported file: {f}"));
            }
        }
        for want in &case.expect {
            match shown.iter().position(|s| s.title == want.title) {
                Some(i) => {
                    let got = shown.remove(i);
                    let mut want_cmp = Expected {
                        title: want.title.clone(),
                        status: want.status.clone(),
                        file: want.file.clone(),
                        start_line: want.start_line,
                        end_line: want.end_line,
                        raised_by: want.raised_by.clone(),
                    };
                    if want.raised_by.is_none() {
                        want_cmp.raised_by = got.raised_by.clone();
                    }
                    if got != want_cmp {
                        failures.push(format!("{name}: expected {want_cmp:?}\n   got {got:?}"));
                    }
                }
                None => failures.push(format!("{name}: `{}` is missing", want.title)),
            }
        }
        for extra in shown {
            failures.push(format!(
                "{name}: listed more than once or unexpected: {extra:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
