//! Result models and the deterministic result policy of the multi-stage review (SPEC S1, S7,
//! 2a): what a task hands to the user, including its safe non-decisions. Findings are merged
//! (`crate::merge`) before anyone sees them, so a result never lists the same finding twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use verdict_proto::Language;
use verdict_proto::contracts::reviewer::{Finding as CandidateFinding, ReviewerReport};
use verdict_proto::contracts::validator::{ValidatorReport, VerdictKind};
use verdict_proto::grounding::{self, LocationNote, LocationStatus};
use verdict_proto::review::{Decision, Finding, Review};
use verdict_proto::severity::Severity;

use crate::merge::{self, MergeKey};

/// A review's result: the P1 result model, plus what a reader must know about how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewResult {
    pub decision: Decision,
    /// 1–10; `None` for a degraded review (never a guessed score).
    pub score: Option<u8>,
    pub score_capped: bool,
    pub decision_reason: String,
    pub summary: String,
    pub findings: Vec<ResultFinding>,
    /// The review is a safe non-decision (S7): no score, no findings.
    pub degraded: bool,
    /// Triage did not answer in its format and the review went ahead by default (S5).
    pub triage_fallback: bool,
}

/// One finding as a result lists it: the P1 finding, plus (each only when known) where grounding
/// found it, which reviewer stages raised it and how sure they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFinding {
    #[serde(flatten)]
    pub finding: Finding,
    /// Whether the location was found, corrected or not found (with what the model wrote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<LocationNote>,
    /// The reviewer stages that raised it (multi-stage reviews), in reviewer order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raised_by: Vec<String>,
    /// The highest confidence any of them gave, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

impl ReviewResult {
    /// A single-pass review (S2) whose envelope parsed, with the grounding notes taken out of its
    /// value by finding index ([`grounding::take_notes`]). Findings the answer repeats are merged
    /// into one (the most severe, then the first, with its note).
    pub fn from_review(
        review: Review,
        notes: Vec<Option<LocationNote>>,
        triage_fallback: bool,
    ) -> ReviewResult {
        let keys: Vec<MergeKey> = review
            .findings
            .iter()
            .enumerate()
            .map(|(i, f)| {
                MergeKey::of_parts(
                    f.file.as_deref(),
                    f.start_line,
                    f.end_line,
                    &f.title,
                    notes.get(i).and_then(Option::as_ref),
                )
            })
            .collect();
        let findings = merge::groups(&keys)
            .iter()
            .filter_map(|group| merge::lead(group, |i| review.findings[i].severity))
            .map(|lead| ResultFinding {
                finding: review.findings[lead].clone(),
                grounding: notes.get(lead).cloned().flatten(),
                raised_by: Vec::new(),
                confidence: None,
            })
            .collect();
        ReviewResult {
            decision: review.decision,
            score: Some(review.score),
            score_capped: review.score_capped,
            decision_reason: review.decision_reason,
            summary: review.summary,
            findings,
            degraded: false,
            triage_fallback,
        }
    }

    /// S7: the review envelope is still invalid after the last repair — a neutral comment, no
    /// score, no findings; never an approval and never a low-score rejection.
    pub fn degraded(language: Language, rounds: u32) -> ReviewResult {
        let reason = match language {
            Language::En => format!(
                "The automated review could not produce a result in the required format (after {rounds} attempts), so no score and no findings are given. This is not an approval; please review the change manually."
            ),
            Language::ZhCn => format!(
                "自动评审未能按要求的格式给出结果（共尝试 {rounds} 次），因此不给出评分和问题列表。这不代表批准，请人工评审此变更。"
            ),
        };
        ReviewResult {
            decision: Decision::Comment,
            score: None,
            score_capped: false,
            decision_reason: reason,
            summary: String::new(),
            findings: Vec::new(),
            degraded: true,
            triage_fallback: false,
        }
    }
}

/// One reviewer stage's answer: its report, and the grounding notes taken out of its value by
/// finding index.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewerAnswer {
    /// The stage id (`reviewer-1`, …).
    pub stage: String,
    pub report: ReviewerReport,
    pub notes: Vec<Option<LocationNote>>,
}

impl ReviewerAnswer {
    /// Reads a reviewer stage's canonical value. The notes are taken out first: the contract type
    /// does not know them and would refuse the value. `None` when the value is not a report.
    pub fn read(stage: &str, value: &Value) -> Option<ReviewerAnswer> {
        let mut value = value.clone();
        let notes = grounding::take_notes(&mut value);
        let report = serde_json::from_value(value).ok()?;
        Some(ReviewerAnswer {
            stage: stage.to_owned(),
            report,
            notes,
        })
    }
}

/// A merged candidate finding with the id the validator sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: String,
    /// The most severe member's finding (then the first's), with the group's highest confidence.
    pub finding: CandidateFinding,
    /// Every reviewer stage that raised it, in reviewer order.
    pub raised_by: Vec<String>,
    /// The lead member's grounding note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<LocationNote>,
    /// For a finding whose location could not be found, that fact in plain words, so the
    /// validator judges the description instead of a line that does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// The reviewers' findings merged: the candidates, and per reviewer stage how many of its
/// findings were merged into another.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Merged {
    pub candidates: Vec<Candidate>,
    pub absorbed: BTreeMap<String, usize>,
}

/// Merges the reviewers' findings (`crate::merge`) and numbers the merged ones `F1`, `F2`, … in
/// the order of their first members (reviewer order). Deterministic: the same outcomes always
/// give the same ids, so nothing needs storing.
pub fn merge_candidates(answers: &[ReviewerAnswer]) -> Merged {
    let members: Vec<(&ReviewerAnswer, usize)> = answers
        .iter()
        .flat_map(|a| (0..a.report.findings.len()).map(move |i| (a, i)))
        .collect();
    let finding = |m: usize| &members[m].0.report.findings[members[m].1];
    let note = |m: usize| {
        members[m]
            .0
            .notes
            .get(members[m].1)
            .and_then(Option::as_ref)
    };
    let keys: Vec<MergeKey> = (0..members.len())
        .map(|m| {
            let f = finding(m);
            MergeKey::of_parts(
                f.file.as_deref(),
                f.start_line.map(|n| n.get()),
                f.end_line.map(|n| n.get()),
                f.title.as_str(),
                note(m),
            )
        })
        .collect();
    let mut merged = Merged::default();
    for group in merge::groups(&keys) {
        let Some(lead) = merge::lead(&group, |m| finding(m).severity) else {
            continue;
        };
        for &m in &group[1..] {
            *merged
                .absorbed
                .entry(members[m].0.stage.clone())
                .or_default() += 1;
        }
        let mut best = finding(lead).clone();
        for &m in &group {
            if finding(m).confidence > best.confidence {
                best.confidence = finding(m).confidence;
            }
        }
        let mut raised_by: Vec<String> = Vec::new();
        for &m in &group {
            let stage = &members[m].0.stage;
            if !raised_by.contains(stage) {
                raised_by.push(stage.clone());
            }
        }
        let grounding = note(lead).cloned();
        let location = grounding.as_ref().and_then(unlocated_words);
        merged.candidates.push(Candidate {
            id: format!("F{}", merged.candidates.len() + 1),
            finding: best,
            raised_by,
            grounding,
            location,
        });
    }
    merged
}

/// The merged candidates alone (see [`merge_candidates`]).
pub fn candidates(answers: &[ReviewerAnswer]) -> Vec<Candidate> {
    merge_candidates(answers).candidates
}

/// "not found in the repository: …" for an unlocated note, `None` otherwise.
fn unlocated_words(note: &LocationNote) -> Option<String> {
    if note.status != LocationStatus::Unlocated {
        return None;
    }
    let reported = note
        .reported
        .as_ref()
        .map(|r| match (r.start_line, r.end_line) {
            (Some(s), Some(e)) if s != e => format!("{} lines {s}-{e}", r.file),
            (Some(s), _) | (None, Some(s)) => format!("{} line {s}", r.file),
            (None, None) => r.file.clone(),
        });
    let mut words = match reported {
        Some(place) => format!("not found in the repository: the reviewer named {place}"),
        None => "not found in the repository".to_owned(),
    };
    if let Some(reason) = note.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        words.push_str(&format!(" ({reason})"));
    }
    words.push_str("; judge the finding by its description, there is no line to confirm");
    Some(words)
}

/// The result policy of S1, applied to the validated candidates:
/// - a candidate the validator confirmed is kept (with its severity correction); one it rejected
///   is dropped; one it did not answer is kept as the reviewer wrote it — silence must not
///   delete a finding;
/// - score: 10, minus 1 per minor finding (at most 3), then capped at 6 by a major and at 3 by a
///   critical finding (the P1 caps);
/// - decision: `request_changes` with a critical or major finding, `comment` with only minor or
///   suggestion findings, `approve` with none.
pub fn assemble(
    candidates: &[Candidate],
    verdicts: Option<&ValidatorReport>,
    summary: &str,
    language: Language,
    triage_fallback: bool,
) -> ReviewResult {
    let mut findings = Vec::new();
    let mut rejected = 0;
    for c in candidates {
        let verdict = verdicts.and_then(|v| v.verdicts.iter().find(|x| x.id.as_str() == c.id));
        let severity = match verdict {
            Some(v) if v.verdict == VerdictKind::Rejected => {
                rejected += 1;
                continue;
            }
            Some(v) => v.severity.unwrap_or(c.finding.severity),
            None => c.finding.severity,
        };
        findings.push(ResultFinding {
            finding: Finding {
                severity,
                file: c.finding.file.as_ref().map(|f| f.as_str().to_owned()),
                start_line: c.finding.start_line.map(|n| n.get()),
                end_line: c.finding.end_line.map(|n| n.get()),
                title: c.finding.title.as_str().to_owned(),
                description: c.finding.description.as_str().to_owned(),
                suggestion: c.finding.suggestion.as_ref().map(|s| s.as_str().to_owned()),
            },
            grounding: c.grounding.clone(),
            raised_by: c.raised_by.clone(),
            confidence: Some(c.finding.confidence.get()),
        });
    }
    findings.sort_by_key(|f| f.finding.severity);
    let count = |s: Severity| findings.iter().filter(|f| f.finding.severity == s).count();
    let (critical, major, minor, suggestion) = (
        count(Severity::Critical),
        count(Severity::Major),
        count(Severity::Minor),
        count(Severity::Suggestion),
    );
    let uncapped = 10 - u8::try_from(minor.min(3)).unwrap_or(3);
    let score = findings
        .iter()
        .map(|f| f.finding.severity.score_cap())
        .fold(uncapped, u8::min);
    let decision = if critical + major > 0 {
        Decision::RequestChanges
    } else if minor + suggestion > 0 {
        Decision::Comment
    } else {
        Decision::Approve
    };
    let decision_reason = match language {
        Language::En => format!(
            "{} finding(s) confirmed by validation ({critical} critical, {major} major, {minor} minor, {suggestion} suggestion); {rejected} candidate(s) rejected.",
            findings.len()
        ),
        Language::ZhCn => format!(
            "经验证确认 {} 个问题（critical {critical} 个，major {major} 个，minor {minor} 个，suggestion {suggestion} 个）；{rejected} 个候选问题被否定。",
            findings.len()
        ),
    };
    ReviewResult {
        decision,
        score: Some(score),
        score_capped: score < uncapped,
        decision_reason,
        summary: summary.to_owned(),
        findings,
        degraded: false,
        triage_fallback,
    }
}

/// Which candidate ids a validator report missed or invented (checked by the scheduler, since the
/// validator contract cannot know the candidates).
pub fn verdict_coverage(
    candidates: &[Candidate],
    report: &ValidatorReport,
) -> (Vec<String>, Vec<String>) {
    let missing = candidates
        .iter()
        .filter(|c| !report.verdicts.iter().any(|v| v.id.as_str() == c.id))
        .map(|c| c.id.clone())
        .collect();
    let unknown = report
        .verdicts
        .iter()
        .filter(|v| !candidates.iter().any(|c| c.id == v.id.as_str()))
        .map(|v| v.id.as_str().to_owned())
        .collect();
    (missing, unknown)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer(stage: &str, findings: Value) -> ReviewerAnswer {
        let value = json!({"findings": findings, "files_reviewed": ["src/a.rs"]});
        ReviewerAnswer::read(stage, &value).unwrap()
    }

    fn finding(sev: &str, line: u32, title: &str, confidence: f64) -> Value {
        json!({"severity": sev, "file": "src/a.rs", "start_line": line, "end_line": line + 1,
               "quote": "let x = v[i];", "title": title, "description": "d", "suggestion": null,
               "confidence": confidence})
    }

    #[test]
    fn policy_scores_caps_and_decides() {
        let r1 = answer(
            "reviewer-1",
            json!([
                finding("minor", 3, "Unchecked index", 0.9),
                finding("major", 10, "Leaked file handle", 0.9)
            ]),
        );
        let r2 = answer(
            "reviewer-2",
            json!([finding("critical", 20, "SQL injection", 0.9)]),
        );
        let c = candidates(&[r1, r2]);
        assert_eq!(
            c.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["F1", "F2", "F3"]
        );

        let verdicts = verdict_proto::contracts::validator::parse(
            r#"{"verdicts": [{"id": "F1", "verdict": "confirmed", "severity": null, "reason": "r"}, {"id": "F2", "verdict": "confirmed", "severity": "minor", "reason": "r"}, {"id": "F3", "verdict": "rejected", "severity": null, "reason": "r"}]}"#,
        )
        .unwrap();
        let r = assemble(&c, Some(&verdicts), "sum", Language::En, false);
        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.score, Some(8), "two minor findings: 10 - 2");
        assert_eq!(r.decision, Decision::Comment);

        let none = assemble(&c, None, "sum", Language::En, false);
        assert_eq!(none.findings.len(), 3, "unanswered candidates are kept");
        assert_eq!(none.score, Some(3), "critical caps at 3");
        assert!(none.score_capped);
        assert_eq!(none.decision, Decision::RequestChanges);

        let clean = assemble(&[], None, "sum", Language::En, false);
        assert_eq!((clean.score, clean.decision), (Some(10), Decision::Approve));
    }

    #[test]
    fn reviewers_findings_are_merged_into_one_candidate_naming_every_reviewer() {
        let r1 = answer(
            "reviewer-1",
            json!([
                finding("minor", 3, "Unchecked index", 0.6),
                finding("minor", 30, "Leaked file handle", 0.5)
            ]),
        );
        let r2 = answer(
            "reviewer-2",
            json!([
                finding("major", 4, "Unchecked index into v", 0.7),
                finding("minor", 3, "unchecked INDEX", 0.95)
            ]),
        );
        let merged = merge_candidates(&[r1, r2]);
        let c = &merged.candidates;
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].id.as_str(), c[1].id.as_str()), ("F1", "F2"));
        assert_eq!(c[0].raised_by, ["reviewer-1", "reviewer-2"]);
        assert_eq!(
            c[0].finding.severity,
            Severity::Major,
            "the highest severity"
        );
        assert_eq!(
            c[0].finding.title.as_str(),
            "Unchecked index into v",
            "text from the most severe member"
        );
        assert_eq!(c[0].finding.start_line.unwrap().get(), 4);
        assert_eq!(
            c[0].finding.confidence.get(),
            0.95,
            "the highest confidence"
        );
        assert_eq!(c[1].raised_by, ["reviewer-1"]);
        assert_eq!(
            merged.absorbed,
            BTreeMap::from([("reviewer-2".to_owned(), 2)]),
            "both of reviewer-2's findings went into reviewer-1's first"
        );

        let r = assemble(c, None, "sum", Language::En, false);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["findings"][0]["raised_by"],
            json!(["reviewer-1", "reviewer-2"])
        );
        assert_eq!(v["findings"][0]["confidence"], 0.95);
        assert_eq!(v["findings"][0]["title"], "Unchecked index into v");
        assert!(
            v["findings"][0].get("grounding").is_none(),
            "no note, no key"
        );
    }

    #[test]
    fn an_unlocated_candidate_tells_the_validator_there_is_no_line_to_confirm() {
        let unlocated = |stage: &str| {
            answer(
                stage,
                json!([{"severity": "major", "file": null, "start_line": null, "end_line": null,
                        "quote": "x", "title": "Race in cache", "description": "d", "suggestion": null,
                        "confidence": 0.8,
                        "grounding": {"status": "unlocated", "reason": "the file does not exist",
                                      "reported": {"file": "src/cache.rs", "start_line": 7, "end_line": 9}}}]),
            )
        };
        let c = candidates(&[unlocated("reviewer-1"), unlocated("reviewer-2")]);
        assert_eq!(c.len(), 1, "merged by the reported location");
        let note = c[0].grounding.as_ref().unwrap();
        assert_eq!(note.status, LocationStatus::Unlocated);
        assert_eq!(
            c[0].location.as_deref(),
            Some(
                "not found in the repository: the reviewer named src/cache.rs lines 7-9 (the file does not exist); judge the finding by its description, there is no line to confirm"
            )
        );
        let shown = serde_json::to_value(&c).unwrap();
        assert_eq!(shown[0]["raised_by"], json!(["reviewer-1", "reviewer-2"]));
        assert_eq!(shown[0]["grounding"]["status"], "unlocated");

        let r = serde_json::to_value(assemble(&c, None, "s", Language::En, false)).unwrap();
        assert_eq!(r["findings"][0]["file"], Value::Null);
        assert_eq!(
            r["findings"][0]["grounding"]["reported"]["file"],
            "src/cache.rs"
        );
    }

    #[test]
    fn a_single_review_keeps_its_notes_and_lists_a_repeated_finding_once() {
        let mut value = json!({"version": 1, "score": 6, "model_score": 6, "score_capped": false,
            "decision": "request_changes", "decision_reason": "r", "summary": "s", "findings": [
            {"severity": "minor", "file": "src/a.rs", "start_line": 3, "end_line": 3, "title": "Unchecked index",
             "description": "d", "suggestion": null,
             "grounding": {"status": "corrected", "reported": {"file": "a.rs", "start_line": 3, "end_line": 3}}},
            {"severity": "major", "file": "src/a.rs", "start_line": 3, "end_line": 4, "title": "Unchecked index!",
             "description": "d2", "suggestion": null, "grounding": {"status": "located"}},
            {"severity": "minor", "file": null, "start_line": null, "end_line": null, "title": "No tests",
             "description": "d3", "suggestion": null}]});
        let notes = grounding::take_notes(&mut value);
        let review: Review = serde_json::from_value(value).unwrap();
        let r = ReviewResult::from_review(review, notes, false);
        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.findings[0].finding.severity, Severity::Major);
        assert_eq!(r.findings[0].finding.description, "d2");
        assert_eq!(
            r.findings[0].grounding.as_ref().unwrap().status,
            LocationStatus::Located,
            "the note of the member the text came from"
        );
        assert!(r.findings[1].grounding.is_none());
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["findings"][1].get("raised_by").is_none());
        assert!(v["findings"][1].get("confidence").is_none());
        let back: ReviewResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r, "the result reads back");
    }

    #[test]
    fn degraded_review_has_no_score_no_findings_and_comments() {
        let r = ReviewResult::degraded(Language::En, 4);
        assert_eq!(r.decision, Decision::Comment);
        assert_eq!(r.score, None);
        assert!(r.findings.is_empty() && r.degraded);
        assert!(r.decision_reason.contains("not an approval"));
    }
}
