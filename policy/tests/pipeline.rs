//! The pipelines as a state machine (SPEC S1–S7), without I/O: each transition's new state, the
//! stages it plans and the events it emits, in order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::BTreeMap;

use serde_json::json;
use verdict_api::document::TaskState;
use verdict_policy::pipeline::{self, Effects, MergedFindings, PipelineSettings, StageSettings};
use verdict_policy::task::{DiffFile, PipelineKind, StageStatus, TaskInputs, TaskRecord};
use verdict_proto::Language;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{
    EventType, InputContent, InputRef, Priority, RepairPolicy, RepositoryRef, StageKind,
    StageResult, Tool, Usage, WIRE_VERSION,
};

fn settings(triage: bool, reviewers: u8) -> PipelineSettings {
    let mut stages = BTreeMap::new();
    for kind in StageKind::ALL {
        stages.insert(
            kind,
            StageSettings {
                provider: None,
                model: None,
                tools: if kind == StageKind::Review {
                    Tool::READ_ONLY.to_vec()
                } else {
                    vec![]
                },
                repair: RepairPolicy {
                    mode: RepairMode::default_for(kind.default_protocol()),
                    max_attempts: 3,
                },
                structured_output: None,
            },
        );
    }
    PipelineSettings {
        triage,
        reviewers,
        max_diff_bytes_per_reviewer: 1_000,
        max_diff_bytes: 10_000,
        stages,
        issue_categories: None,
        ignore_paths: Vec::new(),
        scan: Default::default(),
    }
}

fn file(path: &str, bytes: usize, excluded: Option<&str>) -> DiffFile {
    DiffFile {
        path: path.into(),
        bytes,
        input: InputRef {
            name: "diff".into(),
            content: InputContent::Stored {
                sha256: format!("{path:0>64}"),
                bytes: bytes as u64,
            },
        },
        excluded: excluded.map(str::to_owned),
    }
}

fn task(pipeline: PipelineKind, triage: bool, reviewers: u8) -> TaskRecord {
    TaskRecord {
        id: "t1".into(),
        pipeline,
        state: TaskState::Queued,
        reason: None,
        failure_kind: None,
        language: Language::En,
        priority: Priority::Interactive,
        repository: Some(RepositoryRef {
            url: "repo".into(),
            commit: "head".into(),
            base: Some("base".into()),
        }),
        revisions: None,
        inputs: TaskInputs {
            title: Some("Add tokens()".into()),
            diff_files: vec![
                file("src/a.rs", 400, None),
                file("src/b.rs", 300, None),
                file("logo.png", 10, Some("binary file")),
            ],
            diffstat: Some("src/a.rs (+3 -1)\n".into()),
            ..TaskInputs::default()
        },
        settings: settings(triage, reviewers),
        stages: vec![],
        result: None,
        coverage: Default::default(),
        created_unix_ms: 0,
        intake_started_unix_ms: None,
        intake_owner: None,
        started_unix_ms: None,
        finished_unix_ms: None,
        deadline_unix_ms: 600_000,
        triage_fallback: false,
        github: None,
        publication: None,
        budget: None,
        organisation: None,
        trace: Default::default(),
    }
}

fn result(stage: &str, kind: StageKind, outcome: StageOutcome) -> StageResult {
    StageResult {
        version: WIRE_VERSION,
        task_id: "t1".into(),
        stage_id: stage.into(),
        stage: kind,
        attempt: 1,
        outcome,
        usage: Usage::default(),
        started_unix_ms: 0,
        finished_unix_ms: 1,
        model: None,
        evidence_cut: None,
    }
}

fn ok(value: serde_json::Value) -> StageOutcome {
    StageOutcome::Ok {
        value,
        repaired: false,
        attempts: 1,
    }
}

fn invalid() -> StageOutcome {
    StageOutcome::InvalidOutput {
        stage: "x".into(),
        error: "- line 1, $: not JSON".into(),
        diagnostics: verdict_proto::Diagnostics::one(
            verdict_proto::Diagnostic::new(
                verdict_proto::DiagnosticCode::TextAroundJson,
                "not JSON",
            )
            .at_line(1)
            .in_field("$"),
        ),
        preview: "prose".into(),
        attempts: 4,
    }
}

fn failure(kind: FailureKind) -> StageOutcome {
    StageOutcome::ExecutionFailure {
        kind,
        retryable: false,
        message: format!("{kind}"),
    }
}

fn kinds(fx: &Effects) -> Vec<EventType> {
    fx.events.iter().map(|e| e.kind).collect()
}

fn summary() -> serde_json::Value {
    json!({"summary": "Adds a tokens helper.", "change_type": "feature", "risk": "low", "files": [], "focus_areas": []})
}

fn reviewer(findings: serde_json::Value) -> serde_json::Value {
    json!({"findings": findings, "files_reviewed": ["src/a.rs"]})
}

fn finding(sev: &str) -> serde_json::Value {
    finding_at(sev, 2, "Unchecked index")
}

fn finding_at(sev: &str, line: u32, title: &str) -> serde_json::Value {
    json!({"severity": sev, "file": "src/a.rs", "start_line": line, "end_line": line, "quote": "    let t = tokens[i];", "title": title, "description": "d", "suggestion": null, "confidence": 0.9})
}

fn answered_by(mut r: StageResult, model: &str) -> StageResult {
    r.model = Some(model.into());
    r
}

/// The text of the validator's input that lists the candidates.
fn candidate_input(t: &TaskRecord) -> serde_json::Value {
    let inputs = &t.stage("validator").unwrap().request.inputs;
    let listed = inputs
        .iter()
        .find(|i| i.name.starts_with("candidate"))
        .unwrap();
    let InputContent::Inline { text } = &listed.content else {
        panic!("candidates are inline")
    };
    serde_json::from_str(text).unwrap()
}

#[test]
fn multi_stage_review_runs_triage_summary_reviewers_validator_to_completion() {
    let mut t = task(PipelineKind::Multi, true, 2);
    let fx = pipeline::start(&mut t, 1);
    assert_eq!(fx.planned, ["triage"]);
    assert_eq!(t.state, TaskState::Running);
    assert!(!t.stage("triage").unwrap().required, "triage is optional");

    let fx = pipeline::on_result(
        &mut t,
        &result(
            "triage",
            StageKind::Triage,
            ok(json!({"review": true, "reason": "code change"})),
        ),
        2,
    );
    assert_eq!(fx.planned, ["summary"]);

    let fx = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        3,
    );
    assert_eq!(
        fx.planned,
        ["reviewer-1", "reviewer-2"],
        "two reviewers share the two reviewable files"
    );
    let r1 = &t.stage("reviewer-1").unwrap().request;
    assert!(r1.inputs.iter().any(|i| i.name == "diff of src/a.rs"));
    assert!(
        !r1.inputs.iter().any(|i| i.name.contains("logo.png")),
        "binary files are not sent"
    );
    assert!(r1.inputs.iter().any(|i| i.name.starts_with("summary")));

    let fx = pipeline::on_result(
        &mut t,
        &result(
            "reviewer-1",
            StageKind::Reviewer,
            ok(reviewer(json!([finding("major")]))),
        ),
        4,
    );
    assert!(
        fx.planned.is_empty(),
        "the validator waits for every reviewer"
    );
    let fx = pipeline::on_result(
        &mut t,
        &result(
            "reviewer-2",
            StageKind::Reviewer,
            ok(reviewer(json!([finding_at(
                "minor",
                9,
                "Leaked file handle"
            )]))),
        ),
        5,
    );
    assert_eq!(fx.planned, ["validator"]);
    let candidates = &t.stage("validator").unwrap().request.inputs;
    let listed = candidates
        .iter()
        .find(|i| i.name.starts_with("candidate"))
        .unwrap();
    let InputContent::Inline { text } = &listed.content else {
        panic!()
    };
    assert!(text.contains("\"F1\"") && text.contains("\"F2\""));

    let verdicts = json!({"verdicts": [
        {"id": "F1", "verdict": "confirmed", "severity": null, "reason": "real"},
        {"id": "F2", "verdict": "rejected", "severity": null, "reason": "handled"}]});
    let fx = pipeline::on_result(
        &mut t,
        &result("validator", StageKind::Validator, ok(verdicts)),
        6,
    );
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(kinds(&fx).last(), Some(&EventType::TaskFinished));
    let r = t.result.as_ref().unwrap();
    assert_eq!(r["decision"], "request_changes");
    assert_eq!(r["score"], 6);
    assert_eq!(r["findings"].as_array().unwrap().len(), 1);
    assert_eq!(r["summary"], "Adds a tokens helper.");
    assert_eq!(r["degraded"], false);
}

/// A multi-stage task whose summary is done and whose two reviewers are planned.
fn reviewing() -> TaskRecord {
    let mut t = task(PipelineKind::Multi, false, 2);
    pipeline::start(&mut t, 1);
    let fx = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        2,
    );
    assert_eq!(fx.planned, ["reviewer-1", "reviewer-2"]);
    t
}

/// Issue 15's three findings as a grounded reviewer value carries them: one real, one on a file
/// that does not exist, one past the end of its file (both unlocated, their location kept only
/// as reported).
fn three_grounded_findings() -> serde_json::Value {
    let unlocated = |file: &str, line: u32, title: &str, reason: &str| {
        json!({"severity": "major", "file": null, "start_line": null, "end_line": null,
               "quote": "    return total / count", "title": title, "description": "d",
               "suggestion": null, "confidence": 0.7,
               "grounding": {"status": "unlocated", "in_change": false, "reason": reason,
                             "reported": {"file": file, "start_line": line, "end_line": line}}})
    };
    let mut real = finding_at("major", 2, "Division by zero on an empty cart");
    real["grounding"] = json!({"status": "located", "in_change": true});
    json!([
        real,
        unlocated(
            "src/ghost.rs",
            4,
            "Unvalidated coupon code",
            "the file does not exist"
        ),
        unlocated(
            "src/a.rs",
            900,
            "Overflow in the total",
            "the file has 40 lines"
        ),
    ])
}

#[test]
fn two_reviewers_with_the_same_findings_give_one_merged_finding_each() {
    let mut t = reviewing();
    pipeline::on_result(
        &mut t,
        &answered_by(
            result(
                "reviewer-1",
                StageKind::Reviewer,
                ok(reviewer(three_grounded_findings())),
            ),
            "m-one",
        ),
        3,
    );
    let fx = pipeline::on_result(
        &mut t,
        &answered_by(
            result(
                "reviewer-2",
                StageKind::Reviewer,
                ok(reviewer(three_grounded_findings())),
            ),
            "m-two",
        ),
        4,
    );
    assert_eq!(fx.planned, ["validator"]);
    assert_eq!(
        t.stage("reviewer-2").unwrap().model.as_deref(),
        Some("m-two")
    );
    assert_eq!(
        fx.merged,
        [MergedFindings {
            stage: StageKind::Reviewer,
            model: "m-two".into(),
            findings: 3
        }],
        "each of reviewer-2's findings went into reviewer-1's"
    );

    let candidates = candidate_input(&t);
    let ids: Vec<&str> = candidates
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["F1", "F2", "F3"],
        "the validator sees the merged findings"
    );
    for c in candidates.as_array().unwrap() {
        assert_eq!(c["raised_by"], json!(["reviewer-1", "reviewer-2"]));
    }
    assert!(
        candidates[0].get("location").is_none(),
        "located: nothing to say"
    );
    assert!(
        candidates[1]["location"]
            .as_str()
            .unwrap()
            .starts_with("not found in the repository: the reviewer named src/ghost.rs line 4"),
        "{}",
        candidates[1]
    );
    assert_eq!(candidates[2]["grounding"]["reported"]["start_line"], 900);

    let verdicts = json!({"verdicts": [
        {"id": "F1", "verdict": "confirmed", "severity": null, "reason": "real"},
        {"id": "F2", "verdict": "confirmed", "severity": "minor", "reason": "plausible"},
        {"id": "F3", "verdict": "confirmed", "severity": null, "reason": "plausible"}]});
    let fx = pipeline::on_result(
        &mut t,
        &result("validator", StageKind::Validator, ok(verdicts)),
        5,
    );
    assert!(
        fx.merged.is_empty(),
        "counted once, when the validator was planned"
    );
    assert!(
        !fx.events.iter().any(|e| e.data.get("missing").is_some()),
        "every merged id was answered"
    );
    assert_eq!(t.state, TaskState::Completed);
    let findings = t.result.as_ref().unwrap()["findings"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(findings.len(), 3, "three findings, not six: {findings:#?}");
    for f in &findings {
        assert_eq!(f["raised_by"], json!(["reviewer-1", "reviewer-2"]));
        assert!(f["confidence"].is_number(), "{f}");
    }
    let by_title = |title: &str| findings.iter().find(|f| f["title"] == title).unwrap();
    assert_eq!(
        by_title("Unvalidated coupon code")["severity"],
        "minor",
        "the validator's correction applies to the merged id"
    );
    let past_end = by_title("Overflow in the total");
    assert!(past_end["file"].is_null(), "never shown as located");
    assert_eq!(past_end["grounding"]["status"], "unlocated");
    assert_eq!(past_end["grounding"]["reported"]["file"], "src/a.rs");
    assert_eq!(
        by_title("Division by zero on an empty cart")["grounding"]["status"],
        "located",
        "notes survive into the result"
    );
}

#[test]
fn a_validator_rejecting_a_merged_id_drops_every_member() {
    let mut t = reviewing();
    for (stage, title) in [
        ("reviewer-1", "Unchecked index"),
        ("reviewer-2", "unchecked index!"),
    ] {
        pipeline::on_result(
            &mut t,
            &result(
                stage,
                StageKind::Reviewer,
                ok(reviewer(json!([finding_at("major", 2, title)]))),
            ),
            3,
        );
    }
    let fx = pipeline::on_result(
        &mut t,
        &result(
            "validator",
            StageKind::Validator,
            ok(
                json!({"verdicts": [{"id": "F1", "verdict": "rejected", "severity": null, "reason": "bounds checked above"}]}),
            ),
        ),
        4,
    );
    assert_eq!(kinds(&fx).last(), Some(&EventType::TaskFinished));
    let r = t.result.as_ref().unwrap();
    assert_eq!(r["findings"], json!([]));
    assert_eq!(r["decision"], "approve");
    assert!(
        r["decision_reason"]
            .as_str()
            .unwrap()
            .contains("1 candidate(s) rejected")
    );
}

#[test]
fn a_single_review_that_repeats_a_finding_lists_it_once_with_its_note() {
    let mut t = task(PipelineKind::Single, false, 1);
    pipeline::start(&mut t, 1);
    let finding = "<FINDING>\n<SEVERITY>major</SEVERITY>\n<FILE>src/a.rs</FILE>\n<START_LINE>2</START_LINE>\n<END_LINE>2</END_LINE>\n<TITLE>Unchecked index</TITLE>\n<DESCRIPTION>\nd\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n";
    let envelope = format!(
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>6</SCORE>\n<DECISION>request_changes</DECISION>\n<DECISION_REASON>r</DECISION_REASON>\n<SUMMARY>s</SUMMARY>\n<FINDINGS>\n{finding}{finding}</FINDINGS>\n</SAKURA_REVIEW>"
    );
    let mut review = verdict_proto::validate(
        verdict_proto::ProtocolId::Review,
        &Default::default(),
        &envelope,
    )
    .unwrap();
    assert_eq!(review["findings"].as_array().unwrap().len(), 2);
    review["findings"][0]["grounding"] = json!({"status": "located", "in_change": true});
    review["findings"][1]["grounding"] = json!({"status": "located", "in_change": true});
    let fx = pipeline::on_result(
        &mut t,
        &answered_by(result("review", StageKind::Review, ok(review)), "m-review"),
        2,
    );
    assert_eq!(t.state, TaskState::Completed);
    let findings = t.result.as_ref().unwrap()["findings"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0]["grounding"]["in_change"], true);
    assert!(
        findings[0].get("raised_by").is_none(),
        "one stage: nothing to list"
    );
    assert_eq!(
        fx.merged,
        [MergedFindings {
            stage: StageKind::Review,
            model: "m-review".into(),
            findings: 1
        }]
    );
}

#[test]
fn a_scan_that_repeats_a_finding_lists_it_once_with_its_note() {
    let mut t = task(PipelineKind::Scan, false, 1);
    pipeline::start(&mut t, 1);
    let scan_finding = |severity: &str, confidence: u8, status: &str| {
        json!({"severity": severity, "category": "bug", "file": "src/a.rs", "start_line": 5,
               "end_line": 6, "title": "Panic on empty input", "description": "d",
               "suggestion": null, "confidence": confidence,
               "grounding": {"status": status}})
    };
    let scan = json!({"version": 1, "overall_score": 70, "summary": "s", "findings": [
        scan_finding("minor", 90, "located"),
        scan_finding("major", 40, "corrected"),
    ]});
    let fx = pipeline::on_result(&mut t, &result("scan", StageKind::Scan, ok(scan)), 2);
    assert_eq!(t.state, TaskState::Completed);
    let r = t.result.as_ref().unwrap();
    let findings = r["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0]["severity"], "major", "the most severe member");
    assert_eq!(findings[0]["confidence"], 90, "the highest confidence");
    assert_eq!(findings[0]["grounding"]["status"], "corrected", "its note");
    assert_eq!(r["overall_score"], 70, "the rest passes through");
    assert_eq!(r["degraded"], false);
    assert_eq!(
        fx.merged,
        [MergedFindings {
            stage: StageKind::Scan,
            model: "unknown".into(),
            findings: 1
        }],
        "no model in the result: unknown"
    );
}

#[test]
fn triage_saying_no_review_skips_the_task() {
    let mut t = task(PipelineKind::Multi, true, 2);
    pipeline::start(&mut t, 1);
    let fx = pipeline::on_result(
        &mut t,
        &result(
            "triage",
            StageKind::Triage,
            ok(json!({"review": false, "reason": "dependency bump by a bot"})),
        ),
        2,
    );
    assert_eq!(t.state, TaskState::Skipped);
    assert!(fx.planned.is_empty());
    assert_eq!(
        t.result.as_ref().unwrap()["reason"],
        "dependency bump by a bot"
    );
}

#[test]
fn invalid_triage_falls_back_with_an_event_before_the_summary_starts() {
    let mut t = task(PipelineKind::Multi, true, 2);
    pipeline::start(&mut t, 1);
    let fx = pipeline::on_result(&mut t, &result("triage", StageKind::Triage, invalid()), 2);
    assert_eq!(fx.planned, ["summary"]);
    let k = kinds(&fx);
    let fallback = k
        .iter()
        .position(|e| *e == EventType::TriageFallback)
        .unwrap();
    let started = k
        .iter()
        .position(|e| *e == EventType::StageStarted)
        .unwrap();
    assert!(
        fallback < started,
        "the fallback event precedes the summary stage: {k:?}"
    );
    assert_eq!(
        fx.events[fallback].message,
        "Triage did not return structured output; continuing with review by default."
    );
    assert!(t.triage_fallback);
}

#[test]
fn triage_execution_failure_is_incomplete_and_cancellation_aborts() {
    let mut t = task(PipelineKind::Multi, true, 2);
    pipeline::start(&mut t, 1);
    pipeline::on_result(
        &mut t,
        &result(
            "triage",
            StageKind::Triage,
            failure(FailureKind::ProcessExit),
        ),
        2,
    );
    assert_eq!(t.state, TaskState::Incomplete);
    assert!(t.result.is_none(), "nothing publishable");
    assert_eq!(t.failure_kind, Some(FailureKind::ProcessExit));
    assert_eq!(
        t.document(vec![]).failure_kind,
        Some(FailureKind::ProcessExit),
        "the task says why it could not run"
    );

    let mut t = task(PipelineKind::Multi, true, 2);
    pipeline::start(&mut t, 1);
    pipeline::on_result(
        &mut t,
        &result("triage", StageKind::Triage, failure(FailureKind::Cancelled)),
        2,
    );
    assert_eq!(t.state, TaskState::Aborted);
    assert_eq!(t.failure_kind, Some(FailureKind::Cancelled));
}

#[test]
fn a_failed_intake_is_incomplete_with_its_kind() {
    let mut t = task(PipelineKind::Scan, false, 1);
    pipeline::fail_intake(
        &mut t,
        "revision `x` was not found".into(),
        FailureKind::NotFound,
        5,
    );
    assert_eq!(t.state, TaskState::Incomplete);
    assert_eq!(t.failure_kind, Some(FailureKind::NotFound));
    assert_eq!(t.reason.as_deref(), Some("revision `x` was not found"));
}

#[test]
fn required_stages_with_invalid_output_make_the_task_incomplete() {
    for failing in ["summary", "reviewer", "validator"] {
        let mut t = task(PipelineKind::Multi, false, 1);
        pipeline::start(&mut t, 1);
        if failing == "summary" {
            pipeline::on_result(&mut t, &result("summary", StageKind::Summary, invalid()), 2);
        } else {
            pipeline::on_result(
                &mut t,
                &result("summary", StageKind::Summary, ok(summary())),
                2,
            );
            if failing == "reviewer" {
                pipeline::on_result(
                    &mut t,
                    &result("reviewer-1", StageKind::Reviewer, invalid()),
                    3,
                );
            } else {
                pipeline::on_result(
                    &mut t,
                    &result(
                        "reviewer-1",
                        StageKind::Reviewer,
                        ok(reviewer(json!([finding("minor")]))),
                    ),
                    3,
                );
                pipeline::on_result(
                    &mut t,
                    &result("validator", StageKind::Validator, invalid()),
                    4,
                );
            }
        }
        assert_eq!(t.state, TaskState::Incomplete, "{failing}");
        assert!(t.result.is_none(), "{failing}: nothing is published");
        assert!(
            t.reason.as_ref().unwrap().contains(failing),
            "{failing}: {:?}",
            t.reason
        );
    }
}

#[test]
fn no_candidate_findings_approve_without_a_validator() {
    let mut t = task(PipelineKind::Multi, false, 1);
    pipeline::start(&mut t, 1);
    pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        2,
    );
    let fx = pipeline::on_result(
        &mut t,
        &result("reviewer-1", StageKind::Reviewer, ok(reviewer(json!([])))),
        3,
    );
    assert!(fx.planned.is_empty());
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.result.as_ref().unwrap()["decision"], "approve");
    assert_eq!(t.result.as_ref().unwrap()["score"], 10);
}

#[test]
fn an_exhausted_review_envelope_degrades_to_a_comment_without_score() {
    let mut t = task(PipelineKind::Single, false, 1);
    let fx = pipeline::start(&mut t, 1);
    assert_eq!(fx.planned, ["review"]);
    assert_eq!(
        t.stage("review").unwrap().request.tools,
        Tool::READ_ONLY.to_vec()
    );
    let fx = pipeline::on_result(&mut t, &result("review", StageKind::Review, invalid()), 2);
    assert_eq!(t.state, TaskState::Degraded);
    assert!(kinds(&fx).contains(&EventType::Degraded));
    let r = t.result.as_ref().unwrap();
    assert_eq!(r["decision"], "comment");
    assert!(r["score"].is_null());
    assert_eq!(r["findings"], json!([]));
    assert_eq!(r["degraded"], true);
}

#[test]
fn a_valid_single_review_completes_with_the_envelope_result() {
    let mut t = task(PipelineKind::Single, false, 1);
    pipeline::start(&mut t, 1);
    let review = verdict_proto::validate(verdict_proto::ProtocolId::Review, &Default::default(),
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>9</SCORE>\n<DECISION>approve</DECISION>\n<DECISION_REASON>ok</DECISION_REASON>\n<SUMMARY>s</SUMMARY>\n<FINDINGS></FINDINGS>\n</SAKURA_REVIEW>").unwrap();
    pipeline::on_result(&mut t, &result("review", StageKind::Review, ok(review)), 2);
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.result.as_ref().unwrap()["score"], 9);
}

#[test]
fn files_a_review_model_was_not_shown_in_full_are_listed_as_not_reviewed_with_the_window() {
    let mut t = task(PipelineKind::Single, false, 1);
    t.coverage.files_reviewed = vec!["src/a.rs".into(), "src/b.rs".into(), "src/c.rs".into()];
    pipeline::start(&mut t, 1);
    let review = verdict_proto::validate(verdict_proto::ProtocolId::Review, &Default::default(),
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>9</SCORE>\n<DECISION>approve</DECISION>\n<DECISION_REASON>ok</DECISION_REASON>\n<SUMMARY>s</SUMMARY>\n<FINDINGS></FINDINGS>\n</SAKURA_REVIEW>").unwrap();
    let mut r = result("review", StageKind::Review, ok(review));
    r.evidence_cut = Some(verdict_proto::wire::EvidenceCut {
        context_window: 8192,
        inputs: vec![verdict_proto::wire::CutInput {
            name: "diff".into(),
            shown_bytes: 9000,
            total_bytes: 30_000,
            files_not_shown: vec!["src/c.rs".into()],
            files_partly_shown: vec!["src/b.rs".into()],
        }],
    });
    pipeline::on_result(&mut t, &r, 2);
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.coverage.files_reviewed, ["src/a.rs"]);
    let reasons: Vec<(&str, &str)> = t
        .coverage
        .files_not_reviewed
        .iter()
        .map(|n| (n.path.as_str(), n.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, "src/c.rs");
    assert!(reasons[0].1.starts_with("not reviewed: the evidence of review was cut to fit the model's context window of 8192 tokens"), "{reasons:?}");
    assert_eq!(reasons[1].0, "src/b.rs");
    assert!(reasons[1].1.starts_with("partly reviewed"), "{reasons:?}");
}

#[test]
fn issue_analysis_and_scan_degrade_safely() {
    let mut t = task(PipelineKind::IssueAnalysis, false, 1);
    pipeline::start(&mut t, 1);
    pipeline::on_result(
        &mut t,
        &result("issue-analysis", StageKind::IssueAnalysis, invalid()),
        2,
    );
    assert_eq!(t.state, TaskState::Degraded);
    let r = t.result.as_ref().unwrap();
    assert_eq!(
        (r["category"].as_str(), r["priority"].as_str()),
        (Some("other"), Some("medium"))
    );
    assert_eq!(r["feasibility"], "cannot be assessed");
    assert_eq!(r["degraded"], true);

    let mut t = task(PipelineKind::Scan, false, 1);
    pipeline::start(&mut t, 1);
    pipeline::on_result(&mut t, &result("scan", StageKind::Scan, invalid()), 2);
    assert_eq!(t.state, TaskState::Degraded);
    assert!(t.result.as_ref().unwrap()["overall_score"].is_null());
}

#[test]
fn cancel_aborts_and_late_results_change_nothing() {
    let mut t = task(PipelineKind::Multi, false, 2);
    pipeline::start(&mut t, 1);
    let fx = pipeline::cancel(&mut t, "cancelled on request", 2);
    assert_eq!(t.state, TaskState::Aborted);
    assert!(kinds(&fx).contains(&EventType::Cancelled));
    let before = t.clone();
    let fx = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        3,
    );
    assert_eq!(t, before);
    assert!(fx.events.is_empty() && fx.planned.is_empty());
    assert!(
        pipeline::cancel(&mut t, "again", 4).events.is_empty(),
        "cancelling twice is a no-op"
    );
}

#[test]
fn a_duplicate_result_is_applied_once() {
    let mut t = task(PipelineKind::Multi, false, 2);
    pipeline::start(&mut t, 1);
    let first = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        2,
    );
    assert_eq!(first.planned.len(), 2);
    let again = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        3,
    );
    assert!(again.planned.is_empty() && again.events.is_empty());
    assert_eq!(
        t.stages
            .iter()
            .filter(|s| s.status == StageStatus::Planned)
            .count(),
        2
    );
}

#[test]
fn large_diffs_get_more_reviewers_up_to_the_budget() {
    let mut t = task(PipelineKind::Multi, false, 1);
    t.inputs.diff_files = (0..6)
        .map(|i| file(&format!("src/f{i}.rs"), 600, None))
        .collect();
    pipeline::start(&mut t, 1);
    let fx = pipeline::on_result(
        &mut t,
        &result("summary", StageKind::Summary, ok(summary())),
        2,
    );
    // 3600 bytes over a 1000-byte budget per reviewer: four reviewers although one is configured.
    assert_eq!(fx.planned.len(), 4, "{:?}", fx.planned);
    let files: usize = t
        .stages
        .iter()
        .filter(|s| s.kind == StageKind::Reviewer)
        .map(|s| {
            s.request
                .inputs
                .iter()
                .filter(|i| i.name.starts_with("diff of"))
                .count()
        })
        .sum();
    assert_eq!(files, 6, "every file goes to exactly one reviewer");
}
