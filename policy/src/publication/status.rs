//! The commit status a pull request's head shows for its review task: pending while it runs, its
//! outcome at the end. A branch protection rule may require the status, so only a review that
//! decided can pass it: a degraded, incomplete or aborted review is an `error`, never a success,
//! because a required status must not let through a change nobody judged. A skipped review
//! passes (triage judged that there was nothing to review) and says why.

use verdict_proto::Language;
use verdict_proto::publication::{CommitState, ReviewEvent, StatusDraft};
use verdict_proto::severity::Severity;

use super::markdown::one_line;
use super::{PublishSettings, review_event};
use crate::result::ReviewResult;
use verdict_api::document::TaskState;

/// The most characters a status description holds on GitHub.
pub const STATUS_DESCRIPTION_MAX: usize = 140;

/// The commit status for a task in `state` (running: pending; the end: its outcome).
pub fn status(
    task_id: &str,
    head_sha: &str,
    state: TaskState,
    result: Option<&ReviewResult>,
    reason: Option<&str>,
    settings: &PublishSettings,
) -> StatusDraft {
    let lang = settings.language;
    let reason = reason.map(one_line).filter(|r| !r.is_empty());
    let (state, description) = match state {
        TaskState::Queued | TaskState::Running => (
            CommitState::Pending,
            lang.pick("Review in progress", "评审进行中").to_owned(),
        ),
        TaskState::Completed => match result.filter(|r| !r.degraded) {
            Some(r) => decided(r, settings),
            None => (CommitState::Error, no_decision(lang).to_owned()),
        },
        TaskState::Skipped => {
            let reason =
                reason.unwrap_or_else(|| lang.pick("no review needed", "无需评审").to_owned());
            let text = match lang {
                Language::En => format!("Not reviewed: {reason}"),
                Language::ZhCn => format!("未评审：{reason}"),
            };
            (CommitState::Success, text)
        }
        TaskState::Degraded => (CommitState::Error, no_decision(lang).to_owned()),
        TaskState::Incomplete => {
            let text = match (lang, reason) {
                (Language::En, Some(r)) => format!("Review incomplete: {r}"),
                (Language::En, None) => "Review incomplete".to_owned(),
                (Language::ZhCn, Some(r)) => format!("评审未完成：{r}"),
                (Language::ZhCn, None) => "评审未完成".to_owned(),
            };
            (CommitState::Error, text)
        }
        TaskState::Aborted => {
            let superseded = reason
                .as_deref()
                .is_some_and(|r| r.starts_with("superseded"));
            let text = if superseded {
                lang.pick(
                    "Review superseded by a newer commit",
                    "评审已被更新的提交取代",
                )
            } else {
                lang.pick("Review cancelled", "评审已取消")
            };
            (CommitState::Error, text.to_owned())
        }
    };
    StatusDraft {
        sha: head_sha.to_owned(),
        state,
        description: cut_chars(&description, STATUS_DESCRIPTION_MAX),
        context: settings.status_context.clone(),
        target_url: settings
            .details_url
            .as_ref()
            .map(|url| url.replace("{id}", task_id)),
    }
}

fn no_decision(lang: Language) -> &'static str {
    lang.pick(
        "No decision: the review could not be completed in the required format; review manually",
        "无结论：评审未能按要求的格式完成，请人工评审",
    )
}

/// `failure` exactly when the review is posted as REQUEST_CHANGES (so the critical-finding guard
/// holds here too), `success` otherwise; the description says the event, score and findings.
fn decided(result: &ReviewResult, settings: &PublishSettings) -> (CommitState, String) {
    let lang = settings.language;
    let event = review_event(result, settings);
    let (state, said) = match event {
        ReviewEvent::RequestChanges => (
            CommitState::Failure,
            lang.pick("Changes requested", "需要修改"),
        ),
        ReviewEvent::Approve => (CommitState::Success, lang.pick("Approved", "已批准")),
        ReviewEvent::Comment => (CommitState::Success, lang.pick("Reviewed", "已评审")),
    };
    let score = result.score.map(|s| match lang {
        Language::En => format!(" · score {s}/10"),
        Language::ZhCn => format!(" · 评分 {s}/10"),
    });
    let counts: Vec<String> = [
        Severity::Critical,
        Severity::Major,
        Severity::Minor,
        Severity::Suggestion,
    ]
    .iter()
    .filter_map(|&sev| {
        let n = result
            .findings
            .iter()
            .filter(|f| f.finding.severity == sev)
            .count();
        (n > 0).then(|| format!("{n} {}", sev.as_str()))
    })
    .collect();
    let total = result.findings.len();
    let findings = match (lang, total) {
        (Language::En, 0) => " · no findings".to_owned(),
        (Language::En, 1) => format!(" · 1 finding ({})", counts.join(", ")),
        (Language::En, n) => format!(" · {n} findings ({})", counts.join(", ")),
        (Language::ZhCn, 0) => " · 无问题".to_owned(),
        (Language::ZhCn, n) => format!(" · {n} 个问题（{}）", counts.join("，")),
    };
    (
        state,
        format!("{said}{}{findings}", score.unwrap_or_default()),
    )
}

/// `text` cut to at most `max` characters on a character boundary, ending in `…` when cut.
fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_proto::review::{Decision, Finding};

    use super::*;
    use crate::result::ResultFinding;

    fn settings(lang: Language) -> PublishSettings {
        PublishSettings {
            language: lang,
            approve: true,
            degraded_comment: false,
            status_context: "verdict/review".to_owned(),
            details_url: Some("https://verdict.example/v1/tasks/{id}".to_owned()),
            label_min_confidence: 0.5,
        }
    }

    fn result(decision: Decision, severities: &[Severity]) -> ReviewResult {
        ReviewResult {
            decision,
            score: Some(7),
            score_capped: false,
            decision_reason: "r".to_owned(),
            summary: "s".to_owned(),
            findings: severities
                .iter()
                .map(|&severity| ResultFinding {
                    finding: Finding {
                        severity,
                        file: None,
                        start_line: None,
                        end_line: None,
                        title: "t".to_owned(),
                        description: "d".to_owned(),
                        suggestion: None,
                    },
                    grounding: None,
                    raised_by: Vec::new(),
                    confidence: None,
                })
                .collect(),
            degraded: false,
            triage_fallback: false,
        }
    }

    fn of(state: TaskState, r: Option<&ReviewResult>, reason: Option<&str>) -> StatusDraft {
        status("t-1", "abc", state, r, reason, &settings(Language::En))
    }

    #[test]
    fn running_is_pending_and_links_to_the_task() {
        for state in [TaskState::Queued, TaskState::Running] {
            let s = of(state, None, None);
            assert_eq!(s.state, CommitState::Pending);
            assert_eq!(s.description, "Review in progress");
            assert_eq!(s.sha, "abc");
            assert_eq!(s.context, "verdict/review");
            assert_eq!(
                s.target_url.as_deref(),
                Some("https://verdict.example/v1/tasks/t-1")
            );
        }
        let mut no_link = settings(Language::En);
        no_link.details_url = None;
        let s = status("t", "abc", TaskState::Running, None, None, &no_link);
        assert_eq!(s.target_url, None);
    }

    #[test]
    fn a_decision_passes_or_fails_with_its_score_and_counts() {
        let approve = result(Decision::Approve, &[]);
        let s = of(TaskState::Completed, Some(&approve), None);
        assert_eq!(
            (s.state, s.description.as_str()),
            (CommitState::Success, "Approved · score 7/10 · no findings")
        );
        let comment = result(Decision::Comment, &[Severity::Minor]);
        let s = of(TaskState::Completed, Some(&comment), None);
        assert_eq!(
            (s.state, s.description.as_str()),
            (
                CommitState::Success,
                "Reviewed · score 7/10 · 1 finding (1 minor)"
            )
        );
        let changes = result(
            Decision::RequestChanges,
            &[Severity::Critical, Severity::Major, Severity::Major],
        );
        let s = of(TaskState::Completed, Some(&changes), None);
        assert_eq!(
            (s.state, s.description.as_str()),
            (
                CommitState::Failure,
                "Changes requested · score 7/10 · 3 findings (1 critical, 2 major)"
            )
        );
        let guarded = result(Decision::Approve, &[Severity::Critical]);
        let s = of(TaskState::Completed, Some(&guarded), None);
        assert_eq!(
            s.state,
            CommitState::Failure,
            "an approve with a critical finding fails, as its review requests changes"
        );
    }

    #[test]
    fn no_decision_is_never_a_success() {
        let s = of(TaskState::Degraded, None, Some("protocol repair exhausted"));
        assert_eq!(s.state, CommitState::Error);
        assert!(
            s.description.starts_with("No decision"),
            "{}",
            s.description
        );
        let mut degraded = result(Decision::Comment, &[]);
        degraded.degraded = true;
        assert_eq!(
            of(TaskState::Completed, Some(&degraded), None).state,
            CommitState::Error
        );
        assert_eq!(
            of(TaskState::Completed, None, None).state,
            CommitState::Error
        );

        let s = of(
            TaskState::Incomplete,
            None,
            Some("the summary stage did not answer"),
        );
        assert_eq!(
            (s.state, s.description.as_str()),
            (
                CommitState::Error,
                "Review incomplete: the summary stage did not answer"
            )
        );
        let s = of(
            TaskState::Aborted,
            None,
            Some("superseded: acme/shop #4 has a new head 1234567890ab (task x)"),
        );
        assert_eq!(
            (s.state, s.description.as_str()),
            (CommitState::Error, "Review superseded by a newer commit")
        );
        let s = of(TaskState::Aborted, None, Some("cancelled by the API"));
        assert_eq!(s.description, "Review cancelled");
    }

    #[test]
    fn a_skip_passes_and_says_why_within_140_characters() {
        let s = of(TaskState::Skipped, None, Some("triage: documentation only"));
        assert_eq!(
            (s.state, s.description.as_str()),
            (
                CommitState::Success,
                "Not reviewed: triage: documentation only"
            )
        );
        let long = format!("triage: {}", "仅文档变更，".repeat(40));
        let s = status(
            "t",
            "abc",
            TaskState::Skipped,
            None,
            Some(&long),
            &settings(Language::ZhCn),
        );
        assert_eq!(s.description.chars().count(), 140);
        assert!(s.description.starts_with("未评审：triage: 仅文档变更"));
        assert!(s.description.ends_with('…'));
    }

    #[test]
    fn statuses_speak_chinese() {
        let zh = settings(Language::ZhCn);
        let changes = result(Decision::RequestChanges, &[Severity::Major]);
        let s = status("t", "abc", TaskState::Completed, Some(&changes), None, &zh);
        assert_eq!(s.description, "需要修改 · 评分 7/10 · 1 个问题（1 major）");
        let s = status("t", "abc", TaskState::Running, None, None, &zh);
        assert_eq!(s.description, "评审进行中");
    }
}
