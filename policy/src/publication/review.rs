//! A finished review as one GitHub review (SPEC G2, G3, X2, X4): the event, the inline comments
//! for findings inside the diff safety zone, and a body that holds everything else — the decision,
//! the summary, every finding not posted inline, the files not reviewed, how many findings an
//! earlier head already has — and ends with the task's marker.
//!
//! Every posted finding carries its fingerprint marker, so a later head of the pull request can
//! leave it out. The body is built within GitHub's length limit: the fixed parts first (the
//! decision and summary, each capped; the coverage list, capped with a count of what is left; the
//! marker), then the findings while they fit, with a note counting the ones cut.

use std::collections::BTreeSet;

use verdict_proto::Language;
use verdict_proto::grounding::{self, ReportedLocation};
use verdict_proto::publication::{
    DraftComment, ReviewDraft, ReviewEvent, fingerprint_marker, marker,
};
use verdict_proto::review::Decision;
use verdict_proto::severity::Severity;

use super::markdown::{self, MAX_BODY, code, cut, one_line, prose};
use super::zone::{Location, Place, Zone};
use super::{PublishSettings, ReviewInput, ReviewPlan, suggestion};
use crate::result::{ResultFinding, ReviewResult};
use verdict_api::document::Coverage;

/// Caps on each piece of model text, in [`markdown::length`] units. They keep any one comment
/// under [`MAX_BODY`] by construction and leave the body room for its findings.
const TITLE_MAX: usize = 300;
const REASON_MAX: usize = 4_000;
const SUMMARY_MAX: usize = 16_000;
const BODY_TEXT_MAX: usize = 8_000;
const INLINE_TEXT_MAX: usize = 16_000;
/// A longer suggestion is shown as (cut) text: a cut suggestion block would commit half a fix.
const BLOCK_MAX: usize = 30_000;
const COVERAGE_MAX: usize = 12_000;
/// Room kept for the note that counts cut findings.
const CUT_NOTE_ROOM: usize = 400;

/// The event a decided review is posted with: the result's decision, except that an approval
/// becomes REQUEST_CHANGES when any finding is critical (the critical-finding guard, SPEC G2) and
/// COMMENT when approving is turned off.
pub fn review_event(result: &ReviewResult, settings: &PublishSettings) -> ReviewEvent {
    match result.decision {
        Decision::Approve if has_critical(result) => ReviewEvent::RequestChanges,
        Decision::Approve if !settings.approve => ReviewEvent::Comment,
        Decision::Approve => ReviewEvent::Approve,
        Decision::RequestChanges => ReviewEvent::RequestChanges,
        Decision::Comment => ReviewEvent::Comment,
    }
}

fn has_critical(result: &ReviewResult) -> bool {
    result
        .findings
        .iter()
        .any(|f| f.finding.severity == Severity::Critical)
}

/// The plan for a decided review; `forced` are findings (by index) that go to the body even when
/// they could be inline (the host refused them).
pub(super) fn decided(
    input: &ReviewInput<'_>,
    settings: &PublishSettings,
    result: &ReviewResult,
    forced: &BTreeSet<usize>,
) -> ReviewPlan {
    let lang = settings.language;
    let zone = Zone::new(input.files);
    let mut plan = ReviewPlan {
        draft: ReviewDraft {
            commit_id: input.head_sha.to_owned(),
            event: review_event(result, settings),
            body: String::new(),
            comments: Vec::new(),
        },
        inline: Vec::new(),
        in_body: Vec::new(),
        repeated: Vec::new(),
    };
    let mut entries = Vec::new();
    for (i, finding) in result.findings.iter().enumerate() {
        let fingerprint = fingerprint_of(finding);
        if input.already_posted.contains(&fingerprint) {
            plan.repeated.push(i);
            continue;
        }
        match zone.place(finding) {
            Place::Inline {
                path,
                piece,
                start,
                end,
            } if !forced.contains(&i) => {
                let replaced = verdict_proto::diff::new_side_text(piece, start, end);
                plan.draft.comments.push(DraftComment {
                    path: path.to_owned(),
                    start_line: (start < end).then_some(start),
                    line: end,
                    body: inline_body(finding, &fingerprint, replaced.as_deref(), lang),
                });
                plan.inline.push(i);
            }
            Place::Inline {
                path, start, end, ..
            } => {
                let location = Location::Lines {
                    path: path.to_owned(),
                    start,
                    end,
                };
                entries.push(body_entry(finding, &fingerprint, &location, lang));
                plan.in_body.push(i);
            }
            Place::Body(location) => {
                entries.push(body_entry(finding, &fingerprint, &location, lang));
                plan.in_body.push(i);
            }
        }
    }
    let mut head = vec![heading(result, lang)];
    head.push(prose(&result.decision_reason, REASON_MAX));
    if let Some(note) = event_note(result, plan.draft.event, lang) {
        head.push(note.to_owned());
    }
    if !result.summary.trim().is_empty() {
        head.push(prose(&result.summary, SUMMARY_MAX));
    }
    if !plan.inline.is_empty() {
        head.push(inline_count(plan.inline.len(), lang));
    }
    let mut tail = coverage_notes(input.coverage, lang);
    if !plan.repeated.is_empty() {
        tail.push(repeated_note(plan.repeated.len(), lang));
    }
    plan.draft.body = assemble(head, entries, tail, input.task_id, lang);
    plan
}

/// The plan for a degraded review (SPEC G3, S7): a neutral COMMENT that explains the
/// non-decision — no score, no findings — and says what was not reviewed.
pub(super) fn degraded(input: &ReviewInput<'_>, settings: &PublishSettings) -> ReviewPlan {
    let lang = settings.language;
    let explanation = input
        .result
        .map(|r| r.decision_reason.as_str())
        .filter(|r| !r.trim().is_empty())
        .map_or_else(
            || degraded_default(lang).to_owned(),
            |r| prose(r, REASON_MAX),
        );
    let head = vec![
        lang.pick(
            "### verdict review: no decision",
            "### verdict 评审：无结论",
        )
        .to_owned(),
        explanation,
    ];
    let tail = coverage_notes(input.coverage, lang);
    ReviewPlan {
        draft: ReviewDraft {
            commit_id: input.head_sha.to_owned(),
            event: ReviewEvent::Comment,
            body: assemble(head, Vec::new(), tail, input.task_id, lang),
            comments: Vec::new(),
        },
        inline: Vec::new(),
        in_body: Vec::new(),
        repeated: Vec::new(),
    }
}

fn degraded_default(lang: Language) -> &'static str {
    lang.pick(
        "The automated review could not produce a result in the required format, so no score and no findings are given. This is not an approval; please review the change manually.",
        "自动评审未能按要求的格式给出结果，因此不给出评分和问题列表。这不代表批准，请人工评审此变更。",
    )
}

/// The finding's stable identity (SPEC X2): its grounding note's fingerprint, or one computed
/// from its file (the reported one when grounding found none) and title. A note's value that is
/// not a plain hex-like token is not trusted into a marker and is computed instead.
pub fn fingerprint_of(finding: &ResultFinding) -> String {
    let note = finding.grounding.as_ref();
    if let Some(fp) = note.and_then(|n| n.fingerprint.as_deref())
        && !fp.is_empty()
        && fp.len() <= 64
        && fp.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return fp.to_owned();
    }
    let file = finding
        .finding
        .file
        .as_deref()
        .or_else(|| note.and_then(|n| n.reported.as_ref().map(|r| r.file.as_str())))
        .unwrap_or("");
    grounding::fingerprint(file, &finding.finding.title, None)
}

/// `### verdict review: request changes · score 3/10`.
fn heading(result: &ReviewResult, lang: Language) -> String {
    let decision = match (result.decision, lang) {
        (Decision::Approve, Language::En) => "approve",
        (Decision::RequestChanges, Language::En) => "request changes",
        (Decision::Comment, Language::En) => "comment",
        (Decision::Approve, Language::ZhCn) => "批准",
        (Decision::RequestChanges, Language::ZhCn) => "需要修改",
        (Decision::Comment, Language::ZhCn) => "评论",
    };
    let score = result.score.map(|s| match (lang, result.score_capped) {
        (Language::En, false) => format!(" · score {s}/10"),
        (Language::En, true) => format!(" · score {s}/10 (capped by the findings' severity)"),
        (Language::ZhCn, false) => format!(" · 评分 {s}/10"),
        (Language::ZhCn, true) => format!(" · 评分 {s}/10（按问题严重程度封顶）"),
    });
    let score = score.unwrap_or_default();
    match lang {
        Language::En => format!("### verdict review: {decision}{score}"),
        Language::ZhCn => format!("### verdict 评审：{decision}{score}"),
    }
}

/// Why the posted event is not the decision, when it is not.
fn event_note(result: &ReviewResult, event: ReviewEvent, lang: Language) -> Option<&'static str> {
    match (result.decision, event) {
        (Decision::Approve, ReviewEvent::RequestChanges) => Some(lang.pick(
            "Posted as a change request, not an approval: there is a critical finding.",
            "存在 critical 级别的问题，因此以“需要修改”发布，而不是批准。",
        )),
        (Decision::Approve, ReviewEvent::Comment) => Some(lang.pick(
            "Posted as a comment: automatic approval is turned off.",
            "以评论发布：自动批准已关闭。",
        )),
        _ => None,
    }
}

fn inline_count(n: usize, lang: Language) -> String {
    match (lang, n) {
        (Language::En, 1) => "1 finding is commented inline on the changed lines.".to_owned(),
        (Language::En, n) => format!("{n} findings are commented inline on the changed lines."),
        (Language::ZhCn, n) => format!("{n} 个问题以行内评论发布在变更的代码行上。"),
    }
}

fn repeated_note(n: usize, lang: Language) -> String {
    match (lang, n) {
        (Language::En, 1) => {
            "1 finding already reported on an earlier commit is not repeated.".to_owned()
        }
        (Language::En, n) => {
            format!("{n} findings already reported on an earlier commit are not repeated.")
        }
        (Language::ZhCn, n) => format!("{n} 个问题已在之前的提交中报告过，不再重复。"),
    }
}

/// `- Not reviewed: path — reason` for every file left out (SPEC X4), within [`COVERAGE_MAX`];
/// the files past it are counted.
fn coverage_notes(coverage: &Coverage, lang: Language) -> Vec<String> {
    let mut lines = Vec::new();
    let mut used = 0;
    let all = &coverage.files_not_reviewed;
    for (k, file) in all.iter().enumerate() {
        let reason = one_line(&markdown::untrusted(&cut(&file.reason, 300)));
        let line = match lang {
            Language::En => format!("- Not reviewed: {} — {reason}", code(&file.path)),
            Language::ZhCn => format!("- 未评审：{} — {reason}", code(&file.path)),
        };
        used += markdown::length(&line) + 1;
        if used > COVERAGE_MAX {
            let left = all.len() - k;
            lines.push(match lang {
                Language::En => format!("- … and {left} more files not reviewed."),
                Language::ZhCn => format!("- …… 另有 {left} 个文件未评审。"),
            });
            break;
        }
        lines.push(line);
    }
    if lines.is_empty() {
        Vec::new()
    } else {
        vec![lines.join("\n")]
    }
}

/// The body: `head` paragraphs, the findings section (as many entries as fit), `tail`
/// paragraphs, then the task marker — never longer than [`MAX_BODY`].
fn assemble(
    head: Vec<String>,
    entries: Vec<String>,
    tail: Vec<String>,
    task_id: &str,
    lang: Language,
) -> String {
    let task_marker = marker(task_id);
    let mut blocks = head;
    let fixed = |blocks: &[String], tail: &[String]| {
        blocks
            .iter()
            .chain(tail)
            .map(|b| markdown::length(b) + 2)
            .sum::<usize>()
            + markdown::length(&task_marker)
    };
    if !entries.is_empty() {
        blocks.push(
            lang.pick(
                "#### Findings not commented inline",
                "#### 未以行内评论发布的问题",
            )
            .to_owned(),
        );
        let mut used = fixed(&blocks, &tail) + CUT_NOTE_ROOM;
        let total = entries.len();
        for (k, entry) in entries.into_iter().enumerate() {
            used += markdown::length(&entry) + 2;
            if used > MAX_BODY {
                let left = total - k;
                blocks.push(match lang {
                    Language::En => format!(
                        "… {left} more finding(s) are not shown: the review would exceed GitHub's limit of {MAX_BODY} characters."
                    ),
                    Language::ZhCn => format!(
                        "…… 另有 {left} 个问题未显示：评审内容将超过 GitHub 的 {MAX_BODY} 字符上限。"
                    ),
                });
                break;
            }
            blocks.push(entry);
        }
    }
    blocks.extend(tail);
    blocks.push(task_marker);
    let body = blocks.join("\n\n");
    if markdown::length(&body) <= MAX_BODY {
        return body;
    }
    // Unreachable with the caps above; kept so the limit holds whatever they become.
    let marker_line = blocks.pop().unwrap_or_default();
    let text = blocks.join("\n\n");
    let room = MAX_BODY.saturating_sub(markdown::length(&marker_line) + 2);
    format!("{}\n\n{marker_line}", cut(&text, room))
}

/// A finding in the body: `**severity** · location · title`, its description, its suggestion as
/// text, and its fingerprint marker.
fn body_entry(
    finding: &ResultFinding,
    fingerprint: &str,
    location: &Location,
    lang: Language,
) -> String {
    let f = &finding.finding;
    let place = match location {
        Location::Lines { path, start, end } => code(&lines_of(path, *start, *end)),
        Location::File(path) => code(path),
        Location::NotFound(reported) => {
            let shown = reported.as_ref().map(reported_place);
            match (lang, shown) {
                (Language::En, Some(p)) => format!("location not found: reported {}", code(&p)),
                (Language::En, None) => "location not found".to_owned(),
                (Language::ZhCn, Some(p)) => format!("未找到位置：报告为 {}", code(&p)),
                (Language::ZhCn, None) => "未找到位置".to_owned(),
            }
        }
        Location::Nowhere => lang.pick("no specific location", "无具体位置").to_owned(),
    };
    let mut parts = vec![format!(
        "**{}** · {place} · {}",
        f.severity.as_str(),
        title(&f.title)
    )];
    if !f.description.trim().is_empty() {
        parts.push(prose(&f.description, BODY_TEXT_MAX));
    }
    if let Some(s) = f.suggestion.as_deref().filter(|s| !s.trim().is_empty()) {
        parts.push(suggestion_label(lang).to_owned());
        parts.push(prose(s, BODY_TEXT_MAX));
    }
    parts.push(fingerprint_marker(fingerprint));
    parts.join("\n\n")
}

/// An inline comment: `**severity** · title`, the description, the suggestion (a suggestion
/// block when it is replacement code and the replaced lines are known, text otherwise), and the
/// fingerprint marker.
fn inline_body(
    finding: &ResultFinding,
    fingerprint: &str,
    replaced: Option<&str>,
    lang: Language,
) -> String {
    let f = &finding.finding;
    let mut parts = vec![format!("**{}** · {}", f.severity.as_str(), title(&f.title))];
    if !f.description.trim().is_empty() {
        parts.push(prose(&f.description, INLINE_TEXT_MAX));
    }
    if let Some(s) = f.suggestion.as_deref().filter(|s| !s.trim().is_empty()) {
        let block = replaced
            .zip(suggestion::code_of(s))
            .map(|(replaced, code)| suggestion::realign(&code, replaced))
            .filter(|code| markdown::length(code) <= BLOCK_MAX)
            .map(|code| suggestion::block(&code));
        match block {
            Some(block) => parts.push(block),
            None => {
                parts.push(suggestion_label(lang).to_owned());
                parts.push(prose(s, INLINE_TEXT_MAX));
            }
        }
    }
    parts.push(fingerprint_marker(fingerprint));
    parts.join("\n\n")
}

fn suggestion_label(lang: Language) -> &'static str {
    lang.pick("**Suggestion**", "**建议**")
}

fn title(title: &str) -> String {
    markdown::untrusted(&cut(&one_line(title), TITLE_MAX))
}

/// `path:start-end`, or `path:start` for one line.
fn lines_of(path: &str, start: u32, end: u32) -> String {
    if start == end {
        format!("{path}:{start}")
    } else {
        format!("{path}:{start}-{end}")
    }
}

fn reported_place(r: &ReportedLocation) -> String {
    match (r.start_line, r.end_line) {
        (Some(s), Some(e)) => lines_of(&r.file, s, e),
        (Some(n), None) | (None, Some(n)) => lines_of(&r.file, n, n),
        (None, None) => r.file.clone(),
    }
}
