//! `verdict dev review` as a newcomer runs it: the whole pool in one process, on a configuration
//! pointing at the fake provider, printing the task document with `--json` — the same scenarios
//! as the distributed end-to-end tests (those that can be staged from the command line; the
//! in-process runtime's own tests stage the rest).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::process::Command;

use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

/// Runs `verdict dev review --json` and returns (exit code, task document).
async fn dev_review(
    pipeline: &str,
    script: impl FnOnce(&FakeProvider),
) -> (i32, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let repo = scenario::sample_repo(&dir.path().join("repo")).unwrap();
    let fake = FakeProvider::start().await;
    script(&fake);
    let config = dir.path().join("verdict.toml");
    std::fs::write(
        &config,
        scenario::config_toml(
            &fake.base_url(),
            &Isolation::unique("cli"),
            &dir.path().join("cache"),
        ),
    )
    .unwrap();
    let pipeline = pipeline.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args([
                "dev",
                "review",
                "--json",
                "--pipeline",
                &pipeline,
                "--base",
                "main",
                "--head",
                "feature/coupons",
                "--config",
            ])
            .arg(&config)
            .arg("--repo")
            .arg(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a task document ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), doc)
}

fn happy(fake: &FakeProvider) {
    scenario::script_valid_answers(fake);
}

#[tokio::test]
async fn dev_review_completes_a_multi_stage_review_and_prints_the_document() {
    let (code, doc) = dev_review("multi", happy).await;
    assert_eq!(code, 0);
    assert_eq!(doc["state"], "completed");
    assert_eq!(doc["kind"], "review");
    assert!(doc["id"].is_string());
    assert_eq!(doc["result"]["decision"], "request_changes");
    assert_eq!(doc["stages"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn dev_review_reports_the_triage_fallback_event_and_repair_rounds() {
    let (code, doc) = dev_review("multi", |fake| {
        happy(fake);
        fake.script(
            scenario::TRIAGE,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    assert_eq!(code, 0);
    assert_eq!(doc["state"], "completed");
    let events = doc["events"].as_array().unwrap();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let fallback = types
        .iter()
        .position(|t| *t == "triage-fallback")
        .expect("a triage-fallback event");
    let summary = events
        .iter()
        .position(|e| e["type"] == "stage-started" && e["stage_id"] == "summary")
        .unwrap();
    assert!(fallback < summary);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "protocol-repair" && e["channel"] == "review:protocol_repair")
    );
}

#[tokio::test]
async fn dev_review_of_an_exhausted_envelope_is_degraded_with_no_score() {
    let (code, doc) = dev_review("single", |fake| {
        fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    assert_eq!(code, 0, "degraded is an explained non-decision");
    assert_eq!(doc["state"], "degraded");
    assert!(doc["result"]["score"].is_null());
}

#[tokio::test]
async fn dev_review_with_a_reviewer_in_prose_or_a_401_is_incomplete() {
    let (code, doc) = dev_review("multi", |fake| {
        happy(fake);
        fake.script(
            scenario::REVIEWER,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    assert_eq!((code, doc["state"].as_str()), (1, Some("incomplete")));

    let (code, doc) = dev_review("single", |fake| {
        fake.script(scenario::REVIEW, Script::always(Behaviour::status(401)))
    })
    .await;
    assert_eq!((code, doc["state"].as_str()), (1, Some("incomplete")));
    assert_eq!(doc["stages"][0]["failure_kind"], "auth");
}
