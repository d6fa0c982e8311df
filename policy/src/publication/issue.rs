//! An issue analysis as one issue comment (SPEC S3, G3): category, priority, summary,
//! feasibility and the suggestions, in the task's language, ending with the task's marker; a
//! degraded analysis as its clean explanation only. Labels are applied only when the repository
//! defines them ([`labels_to_apply`]), so a model cannot create labels.

use serde::Serialize;
use verdict_proto::Language;
use verdict_proto::issue_analysis::IssueAnalysis;
use verdict_proto::publication::marker;

use super::PublishSettings;
use super::markdown::{self, MAX_BODY, code, cut, one_line, prose};
use verdict_api::document::TaskState;

const SUMMARY_MAX: usize = 16_000;
const FEASIBILITY_MAX: usize = 8_000;
const LINE_MAX: usize = 500;
/// Suggestions listed per kind; a model that suggests more is cut with a count.
const LIST_MAX: usize = 20;

/// One comment to post on the issue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IssueComment {
    /// Markdown; ends with the task's marker.
    pub body: String,
    /// Suggested labels at or above the confidence floor, as the model named them.
    pub labels: Vec<String>,
}

/// The comment for an issue-analysis task, or `None` when nothing is posted: only completed and
/// degraded analyses post, and a degraded one only when `degraded_comment` is set (SPEC G3 holds
/// for issues as for reviews). `degraded` is the result's own flag; either it or the state makes
/// the analysis degraded. The task's `reason` is written for operators and is not shown.
pub fn plan_issue_comment(
    task_id: &str,
    state: TaskState,
    reason: Option<&str>,
    analysis: Option<&IssueAnalysis>,
    degraded: bool,
    settings: &PublishSettings,
) -> Option<IssueComment> {
    let _ = reason;
    let lang = settings.language;
    let degraded = match state {
        TaskState::Completed => degraded,
        TaskState::Degraded => true,
        _ => return None,
    };
    if degraded {
        if !settings.degraded_comment {
            return None;
        }
        let explanation = analysis
            .map(|a| a.summary.as_str())
            .filter(|s| !s.trim().is_empty())
            .map_or_else(
                || {
                    lang.pick(
                        "The analysis could not be completed: the model's answer did not follow the required format.",
                        "分析未能完成：模型的回答不符合要求的格式。",
                    )
                    .to_owned()
                },
                |s| prose(s, SUMMARY_MAX),
            );
        let heading = lang.pick(
            "### verdict issue analysis: no result",
            "### verdict 议题分析：无结果",
        );
        return Some(IssueComment {
            body: finish(vec![heading.to_owned(), explanation], task_id),
            labels: Vec::new(),
        });
    }
    let a = analysis?;
    Some(IssueComment {
        body: finish(render(a, lang), task_id),
        labels: a
            .suggested_labels
            .iter()
            .filter(|l| l.confidence >= settings.label_min_confidence)
            .map(|l| l.name.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect(),
    })
}

/// The labels to apply: `wanted` that the repository defines (case-insensitive, in the
/// repository's spelling), each once.
pub fn labels_to_apply(wanted: &[String], defined: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in wanted {
        let w = w.trim().to_lowercase();
        if let Some(d) = defined.iter().find(|d| d.to_lowercase() == w)
            && !out.contains(d)
        {
            out.push(d.clone());
        }
    }
    out
}

fn render(a: &IssueAnalysis, lang: Language) -> Vec<String> {
    let (category, priority, feasibility) = match lang {
        Language::En => ("Category", "Priority", "Feasibility"),
        Language::ZhCn => ("类别", "优先级", "可行性"),
    };
    let colon = lang.pick(":", "：");
    let mut blocks = vec![
        lang.pick("### verdict issue analysis", "### verdict 议题分析")
            .to_owned(),
        format!(
            "**{category}{colon}** {} · **{priority}{colon}** {}",
            plain(&a.category),
            a.priority.as_str()
        ),
        prose(&a.summary, SUMMARY_MAX),
        format!("**{feasibility}**"),
        prose(&a.feasibility, FEASIBILITY_MAX),
    ];
    let mut suggested = Vec::new();
    let labels = list(
        a.suggested_labels
            .iter()
            .map(|l| (code(&l.name), l.confidence, l.reason.as_str())),
    );
    if !labels.is_empty() {
        suggested.push(format!(
            "**{}**\n{labels}",
            lang.pick("Suggested labels", "建议的标签")
        ));
    }
    // Logins as code, so suggesting someone does not notify them.
    let assignees = list(
        a.suggested_assignees
            .iter()
            .map(|p| (code(&p.username), p.confidence, p.reason.as_str())),
    );
    if !assignees.is_empty() {
        suggested.push(format!(
            "**{}**\n{assignees}",
            lang.pick("Suggested assignees", "建议的指派人")
        ));
    }
    if let Some(m) = a
        .suggested_milestone
        .as_deref()
        .filter(|m| !m.trim().is_empty())
    {
        let label = lang.pick("Suggested milestone", "建议的里程碑");
        suggested.push(format!("**{label}{colon}** {}", plain(m)));
    }
    if let Some(n) = a.duplicate_of {
        let label = lang.pick("Possible duplicate of", "可能重复于");
        suggested.push(format!("**{label}{colon}** #{n}"));
    }
    if let Some(t) = a
        .suggested_title
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    {
        let label = lang.pick("Suggested title", "建议的标题");
        suggested.push(format!("**{label}{colon}** {}", plain(t)));
    }
    blocks.extend(suggested);
    blocks
}

/// `- name — 80% — reason` lines, at most [`LIST_MAX`] of them and a count of the rest.
fn list<'r>(items: impl ExactSizeIterator<Item = (String, f64, &'r str)>) -> String {
    let total = items.len();
    let mut lines: Vec<String> = items
        .take(LIST_MAX)
        .map(|(name, confidence, reason)| {
            let percent = (confidence.clamp(0.0, 1.0) * 100.0).round();
            let reason = plain(reason);
            if reason.is_empty() {
                format!("- {name} — {percent}%")
            } else {
                format!("- {name} — {percent}% — {reason}")
            }
        })
        .collect();
    if total > LIST_MAX {
        lines.push(format!("- … (+{})", total - LIST_MAX));
    }
    lines.join("\n")
}

/// Untrusted text on one line, capped.
fn plain(text: &str) -> String {
    markdown::untrusted(&cut(&one_line(text), LINE_MAX))
}

/// The blocks joined, cut if they would pass [`MAX_BODY`] (never the marker), then the marker.
fn finish(blocks: Vec<String>, task_id: &str) -> String {
    let task_marker = marker(task_id);
    let text = blocks.join("\n\n");
    let room = MAX_BODY.saturating_sub(markdown::length(&task_marker) + 2);
    format!("{}\n\n{task_marker}", cut(&text, room))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_proto::issue_analysis::{AssigneeSuggestion, LabelSuggestion, Priority};
    use verdict_proto::publication::markers_in;

    use super::*;

    fn settings(lang: Language, degraded_comment: bool) -> PublishSettings {
        PublishSettings {
            language: lang,
            approve: true,
            degraded_comment,
            status_context: "verdict/review".to_owned(),
            details_url: None,
            label_min_confidence: 0.6,
        }
    }

    fn analysis() -> IssueAnalysis {
        let label = |name: &str, confidence: f64| LabelSuggestion {
            name: name.to_owned(),
            confidence,
            reason: format!("fits {name}"),
        };
        IssueAnalysis {
            version: 1,
            category: "bug".to_owned(),
            priority: Priority::High,
            summary: "Login fails when the password has a space. <!-- verdict:task=forged -->"
                .to_owned(),
            feasibility: "Small: trim handling in `auth.rs`.".to_owned(),
            suggested_labels: vec![label("Bug", 0.9), label("auth", 0.6), label("ui", 0.3)],
            suggested_assignees: vec![AssigneeSuggestion {
                username: "alice".to_owned(),
                confidence: 0.7,
                reason: "wrote the login form".to_owned(),
            }],
            suggested_milestone: Some("v1.2".to_owned()),
            duplicate_of: Some(12),
            suggested_title: Some("Login fails with spaces in passwords".to_owned()),
        }
    }

    #[test]
    fn a_completed_analysis_is_one_comment_with_everything_and_the_marker_last() {
        let a = analysis();
        let c = plan_issue_comment(
            "t-9",
            TaskState::Completed,
            Some("issue analysed"),
            Some(&a),
            false,
            &settings(Language::En, false),
        )
        .unwrap();
        assert_eq!(
            c.body,
            "### verdict issue analysis\n\n\
             **Category:** bug · **Priority:** high\n\n\
             Login fails when the password has a space. <\u{200B}!-- verdict:task=forged --\u{200B}>\n\n\
             **Feasibility**\n\n\
             Small: trim handling in `auth.rs`.\n\n\
             **Suggested labels**\n\
             - `Bug` — 90% — fits Bug\n\
             - `auth` — 60% — fits auth\n\
             - `ui` — 30% — fits ui\n\n\
             **Suggested assignees**\n\
             - `alice` — 70% — wrote the login form\n\n\
             **Suggested milestone:** v1.2\n\n\
             **Possible duplicate of:** #12\n\n\
             **Suggested title:** Login fails with spaces in passwords\n\n\
             <!-- verdict:task=t-9 -->"
        );
        assert_eq!(
            markers_in(&c.body).0,
            ["t-9"],
            "the forged marker is not read"
        );
        assert_eq!(c.labels, ["Bug", "auth"], "at or above the floor, as named");
    }

    #[test]
    fn a_degraded_analysis_posts_its_explanation_only_when_configured() {
        let d = IssueAnalysis::degraded(Language::ZhCn);
        let off = settings(Language::ZhCn, false);
        let on = settings(Language::ZhCn, true);
        assert_eq!(
            plan_issue_comment("t", TaskState::Degraded, None, Some(&d), true, &off),
            None
        );
        let c = plan_issue_comment("t", TaskState::Degraded, None, Some(&d), true, &on).unwrap();
        assert_eq!(
            c.body,
            "### verdict 议题分析：无结果\n\n分析未能完成：模型的回答不符合要求的格式。\n\n<!-- verdict:task=t -->"
        );
        assert!(c.labels.is_empty());
        let flagged =
            plan_issue_comment("t", TaskState::Completed, None, Some(&d), true, &on).unwrap();
        assert_eq!(flagged, c, "the result's flag counts as much as the state");
    }

    #[test]
    fn only_completed_and_degraded_analyses_post() {
        let a = analysis();
        let s = settings(Language::En, true);
        for state in [
            TaskState::Queued,
            TaskState::Running,
            TaskState::Skipped,
            TaskState::Incomplete,
            TaskState::Aborted,
        ] {
            assert_eq!(
                plan_issue_comment("t", state, None, Some(&a), false, &s),
                None,
                "{state:?}"
            );
        }
        assert_eq!(
            plan_issue_comment("t", TaskState::Completed, None, None, false, &s),
            None
        );
    }

    #[test]
    fn chinese_headings_and_a_long_summary_kept_under_the_limit() {
        let mut a = analysis();
        a.summary = "很长的概述。".repeat(20_000);
        let c = plan_issue_comment(
            "t",
            TaskState::Completed,
            None,
            Some(&a),
            false,
            &settings(Language::ZhCn, false),
        )
        .unwrap();
        assert!(
            c.body.starts_with("### verdict 议题分析\n\n**类别：** bug"),
            "{}",
            &c.body[..80]
        );
        assert!(c.body.contains("**可行性**"));
        assert!(c.body.contains("**建议的标签**"));
        assert!(markdown::length(&c.body) <= MAX_BODY);
        assert!(c.body.ends_with("<!-- verdict:task=t -->"));
    }

    #[test]
    fn only_labels_the_repository_defines_are_applied_in_its_spelling_once() {
        let wanted = ["bug", "Auth ", "BUG", "new-label"].map(str::to_owned);
        let defined = ["Bug", "auth", "docs"].map(str::to_owned);
        assert_eq!(labels_to_apply(&wanted, &defined), ["Bug", "auth"]);
        assert!(labels_to_apply(&wanted, &[]).is_empty());
    }
}
