//! Result models and the deterministic result policy of the multi-stage review (SPEC S1, S7,
//! 2a): what a task hands to the user, including its safe non-decisions.

use serde::{Deserialize, Serialize};
use verdict_proto::Language;
use verdict_proto::contracts::reviewer::{Finding as CandidateFinding, ReviewerReport};
use verdict_proto::contracts::validator::{ValidatorReport, VerdictKind};
use verdict_proto::review::{Decision, Finding, Review};
use verdict_proto::severity::Severity;

/// A review's result: the P1 result model, plus what a reader must know about how it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewResult {
    pub decision: Decision,
    /// 1–10; `None` for a degraded review (never a guessed score).
    pub score: Option<u8>,
    pub score_capped: bool,
    pub decision_reason: String,
    pub summary: String,
    pub findings: Vec<Finding>,
    /// The review is a safe non-decision (S7): no score, no findings.
    pub degraded: bool,
    /// Triage did not answer in its format and the review went ahead by default (S5).
    pub triage_fallback: bool,
}

impl ReviewResult {
    /// A single-pass review (S2) whose envelope parsed.
    pub fn from_review(review: Review, triage_fallback: bool) -> ReviewResult {
        ReviewResult {
            decision: review.decision,
            score: Some(review.score),
            score_capped: review.score_capped,
            decision_reason: review.decision_reason,
            summary: review.summary,
            findings: review.findings,
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

/// A reviewer's candidate finding with the id the validator sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: String,
    pub finding: CandidateFinding,
}

/// Numbers the reviewers' findings `F1`, `F2`, … in reviewer order. Deterministic: the same
/// outcomes always give the same ids, so nothing needs storing.
pub fn candidates(reports: &[ReviewerReport]) -> Vec<Candidate> {
    reports
        .iter()
        .flat_map(|r| r.findings.iter().cloned())
        .enumerate()
        .map(|(i, finding)| Candidate {
            id: format!("F{}", i + 1),
            finding,
        })
        .collect()
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
        findings.push(Finding {
            severity,
            file: c.finding.file.as_ref().map(|f| f.as_str().to_owned()),
            start_line: c.finding.start_line.map(|n| n.get()),
            end_line: c.finding.end_line.map(|n| n.get()),
            title: c.finding.title.as_str().to_owned(),
            description: c.finding.description.as_str().to_owned(),
            suggestion: c.finding.suggestion.as_ref().map(|s| s.as_str().to_owned()),
        });
    }
    findings.sort_by_key(|f| f.severity);
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let (critical, major, minor, suggestion) = (
        count(Severity::Critical),
        count(Severity::Major),
        count(Severity::Minor),
        count(Severity::Suggestion),
    );
    let uncapped = 10 - u8::try_from(minor.min(3)).unwrap_or(3);
    let score = findings
        .iter()
        .map(|f| f.severity.score_cap())
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
    use super::*;

    fn report(json: &str) -> ReviewerReport {
        verdict_proto::contracts::reviewer::parse(json).unwrap()
    }

    fn finding(sev: &str, title: &str) -> String {
        format!(
            r#"{{"severity": "{sev}", "file": "src/a.rs", "start_line": 3, "end_line": 4, "title": "{title}", "description": "d", "suggestion": null, "confidence": 0.9}}"#
        )
    }

    #[test]
    fn policy_scores_caps_and_decides() {
        let r1 = report(&format!(
            r#"{{"findings": [{}, {}], "files_reviewed": ["src/a.rs"]}}"#,
            finding("minor", "a"),
            finding("major", "b")
        ));
        let r2 = report(&format!(
            r#"{{"findings": [{}], "files_reviewed": ["src/b.rs"]}}"#,
            finding("critical", "c")
        ));
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
    fn degraded_review_has_no_score_no_findings_and_comments() {
        let r = ReviewResult::degraded(Language::En, 4);
        assert_eq!(r.decision, Decision::Comment);
        assert_eq!(r.score, None);
        assert!(r.findings.is_empty() && r.degraded);
        assert!(r.decision_reason.contains("not an approval"));
    }
}
