//! Grounding in the executor, on the scripted provider over an in-memory repository: a final
//! answer's findings are checked against the snapshot; conversation-mode stages get a repair round
//! to correct what does not resolve, isolated-mode stages are demoted without one, and an answer
//! that followed the contract is never lost to a later round that broke it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use std::sync::Arc;

use common::{Rig, counter, far_future, request, rig_over};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use verdict_backends::repo::{MemoryRepositorySource, MemoryTree};
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::grounding::{LocationNote, LocationStatus};
use verdict_proto::outcome::StageOutcome;
use verdict_proto::repair::RepairMode;
use verdict_proto::transcript::TranscriptEntry;
use verdict_proto::wire::{EventType, RepositoryRef, StageKind, StageRequest};
use verdict_worker::executor::ExecutorSettings;
use verdict_worker::provider::scripted::{ScriptedProvider, Step};

const URL: &str = "https://git.example.test/calc.git";
const COMMIT: &str = "4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39";
const CALC: &str = "# Arithmetic for reports.\n\"\"\"Small arithmetic helpers.\"\"\"\n\n\ndef add(a, b):\n    return a + b\n\n\ndef mean(values):\n    \"\"\"The arithmetic mean of values.\"\"\"\n    total = sum(values)\n    count = len(values)\n    # An empty list divides by zero here.\n    return total / count\n";

fn grounded_rig(steps: Vec<Step>) -> Rig {
    let repositories = MemoryRepositorySource::new().with(
        URL,
        COMMIT,
        MemoryTree::new()
            .file("src/calc.py", CALC)
            .file("README.md", "# calc\n"),
    );
    rig_over(
        Arc::new(ScriptedProvider::new("scripted", "model-a", steps)),
        ExecutorSettings::default(),
        Arc::new(MemoryStore::new()),
        repositories,
    )
}

fn on_repository(mut req: StageRequest) -> StageRequest {
    req.repository = Some(RepositoryRef {
        url: URL.into(),
        commit: COMMIT.into(),
        base: None,
    });
    req
}

/// A scan envelope with one finding per `(file, start, end)`.
fn scan(findings: &[(&str, u32, u32)]) -> String {
    let mut s = String::from(
        "<SAKURA_SCAN>\n<VERSION>1</VERSION>\n<OVERALL_SCORE>70</OVERALL_SCORE>\n<SUMMARY>\nA small library.\n</SUMMARY>\n<FINDINGS>\n",
    );
    for (file, start, end) in findings {
        s.push_str(&format!(
            "<FINDING>\n<SEVERITY>major</SEVERITY>\n<CATEGORY>reliability</CATEGORY>\n<FILE>{file}</FILE>\n<START_LINE>{start}</START_LINE>\n<END_LINE>{end}</END_LINE>\n<TITLE>Division by zero in mean</TITLE>\n<DESCRIPTION>\nlen(values) is 0 for an empty list.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n<CONFIDENCE>80</CONFIDENCE>\n</FINDING>\n"
        ));
    }
    s.push_str("</FINDINGS>\n</SAKURA_SCAN>\n");
    s
}

fn ok_value(outcome: &StageOutcome) -> (&Value, bool, u32) {
    match outcome {
        StageOutcome::Ok {
            value,
            repaired,
            attempts,
        } => (value, *repaired, *attempts),
        other => panic!("expected ok, got {other:?}"),
    }
}

fn notes(value: &Value) -> Vec<Option<LocationNote>> {
    value["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(LocationNote::of)
        .collect()
}

fn grounding_entry(r: &Rig) -> (u32, u32, u32, Vec<String>) {
    r.store.transcripts()[0]
        .entries
        .iter()
        .find_map(|e| match e {
            TranscriptEntry::Grounding {
                located,
                corrected,
                unlocated,
                notes,
            } => Some((*located, *corrected, *unlocated, notes.clone())),
            _ => None,
        })
        .expect("a grounding entry in the transcript")
}

#[tokio::test(start_paused = true)]
async fn a_scan_that_corrects_its_location_in_a_grounding_round_is_located() {
    let r = grounded_rig(vec![
        Step::text(&scan(&[("src/calc.py", 12, 14), ("src/calc.py", 400, 410)])),
        Step::text(&scan(&[("src/calc.py", 12, 14), ("src/calc.py", 13, 14)])),
    ]);
    let req = on_repository(request(
        StageKind::Scan,
        RepairMode::Conversation,
        2,
        far_future(&r),
    ));
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    let (value, repaired, attempts) = ok_value(&e.result.outcome);
    assert!(repaired);
    assert_eq!(attempts, 2);
    assert!(
        notes(value)
            .iter()
            .all(|n| n.as_ref().unwrap().status == LocationStatus::Located)
    );
    assert_eq!(value["findings"][1]["start_line"], 13);

    let sent = r.provider.requests();
    assert_eq!(sent.len(), 2);
    let ask = &sent[1].messages.last().unwrap().content;
    assert!(
        ask.contains("point at code that is not in the repository"),
        "{ask}"
    );
    assert!(
        ask.contains(
            "`src/calc.py` has 14 lines at commit 4f2a9c1e8b7d, so lines 400–410 are past its end"
        ),
        "{ask}"
    );
    assert!(sent[1].tools.is_empty());
    let rounds = r.store.events_of_type(EventType::ProtocolRepair);
    assert_eq!(rounds[0].data["reason"], "grounding");
    assert_eq!(rounds[0].data["outcome"], "repaired");
    assert_eq!(grounding_entry(&r), (2, 0, 0, vec![]));
    assert_eq!(e.result.model.as_deref(), Some("model-a"));
    assert_eq!(
        counter(
            &r.registry,
            "verdict_findings_grounded_total",
            &[
                ("stage", "scan"),
                ("model", "model-a"),
                ("outcome", "located")
            ]
        ),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn what_the_budget_cannot_fix_is_kept_unlocated_and_corrections_are_recorded() {
    let answer = scan(&[
        ("src/calc.py", 12, 14),
        ("config/settings.py", 3, 5),
        ("repo/src/calc.py", 12, 14),
    ]);
    let r = grounded_rig(vec![Step::text(&answer), Step::text(&answer)]);
    let req = on_repository(request(
        StageKind::Scan,
        RepairMode::Conversation,
        1,
        far_future(&r),
    ));
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    let (value, repaired, attempts) = ok_value(&e.result.outcome);
    assert!(repaired);
    assert_eq!(attempts, 2);
    let notes = notes(value);
    assert_eq!(notes[0].as_ref().unwrap().status, LocationStatus::Located);
    let missing = notes[1].as_ref().unwrap();
    assert_eq!(missing.status, LocationStatus::Unlocated);
    assert_eq!(
        missing.reported.as_ref().unwrap().file,
        "config/settings.py"
    );
    assert_eq!(value["findings"][1]["file"], Value::Null);
    assert_eq!(value["findings"][1]["start_line"], Value::Null);
    let corrected = notes[2].as_ref().unwrap();
    assert_eq!(corrected.status, LocationStatus::Corrected);
    assert_eq!(value["findings"][2]["file"], "src/calc.py");
    assert_eq!(
        corrected.reported.as_ref().unwrap().file,
        "repo/src/calc.py"
    );

    let rounds = r.store.events_of_type(EventType::ProtocolRepair);
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].data["outcome"], "ungrounded");
    let (located, corrected, unlocated, entry_notes) = grounding_entry(&r);
    assert_eq!((located, corrected, unlocated), (1, 1, 1));
    assert!(
        entry_notes[0].starts_with("finding 2: unlocated: `config/settings.py` does not exist")
    );
    for (outcome, n) in [("located", 1.0), ("corrected", 1.0), ("unlocated", 1.0)] {
        assert_eq!(
            counter(
                &r.registry,
                "verdict_findings_grounded_total",
                &[("stage", "scan"), ("outcome", outcome)]
            ),
            n,
            "{outcome}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_valid_answer_is_not_lost_to_a_grounding_round_that_breaks_the_contract() {
    let r = grounded_rig(vec![
        Step::text(&scan(&[("config/settings.py", 3, 5)])),
        Step::text("I cannot find that file, sorry."),
    ]);
    let req = on_repository(request(
        StageKind::Scan,
        RepairMode::Conversation,
        1,
        far_future(&r),
    ));
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    let (value, _, attempts) = ok_value(&e.result.outcome);
    assert_eq!(attempts, 2);
    assert_eq!(
        LocationNote::of(&value["findings"][0]).unwrap().status,
        LocationStatus::Unlocated
    );
}

#[tokio::test(start_paused = true)]
async fn an_isolated_stage_is_demoted_without_a_round() {
    let reviewer = r#"{"findings": [{"severity": "major", "file": "calc.py", "start_line": 14, "end_line": 14, "quote": "return total / count", "title": "Division by zero", "description": "count is 0 for an empty list.", "suggestion": null, "confidence": 0.9}, {"severity": "minor", "file": "lib/stats.py", "start_line": 1, "end_line": 2, "quote": "import statistics", "title": "Unused import", "description": "d", "suggestion": null, "confidence": 0.5}], "files_reviewed": ["src/calc.py"]}"#;
    let r = grounded_rig(vec![Step::text(reviewer)]);
    let mut req = on_repository(request(
        StageKind::Reviewer,
        RepairMode::Isolated,
        3,
        far_future(&r),
    ));
    req.changed_files = Some(vec!["src/calc.py".into()]);
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    let (value, repaired, attempts) = ok_value(&e.result.outcome);
    assert!(!repaired);
    assert_eq!(attempts, 1);
    assert_eq!(
        r.provider.requests().len(),
        1,
        "no repair call for grounding"
    );
    let notes = notes(value);
    let first = notes[0].as_ref().unwrap();
    assert_eq!(first.status, LocationStatus::Corrected);
    assert_eq!(first.in_change, Some(true));
    assert_eq!(value["findings"][0]["file"], "src/calc.py");
    assert_eq!(notes[1].as_ref().unwrap().status, LocationStatus::Unlocated);
}

#[tokio::test(start_paused = true)]
async fn a_stage_without_a_repository_is_not_grounded() {
    let r = grounded_rig(vec![Step::text(&scan(&[("nowhere.py", 1, 1)]))]);
    let req = request(StageKind::Scan, RepairMode::Conversation, 1, far_future(&r));
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    let (value, repaired, _) = ok_value(&e.result.outcome);
    assert!(!repaired);
    assert_eq!(value["findings"][0]["file"], "nowhere.py");
    assert!(LocationNote::of(&value["findings"][0]).is_none());
}
