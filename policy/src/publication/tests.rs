//! Whole plans: which event, which findings inline, in the body or left out as repeated, and what
//! the body says. The pieces (path mapping, suggestions, Markdown safety, statuses, issues) are
//! tested beside their code; end-to-end cases as data are in `scheduler/tests/publication.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use verdict_proto::Language;
use verdict_proto::grounding::{LocationNote, LocationStatus, ReportedLocation};
use verdict_proto::publication::{ReviewEvent, fingerprint_marker, markers_in};
use verdict_proto::review::{Decision, Finding};
use verdict_proto::severity::Severity;

use super::markdown::length;
use super::*;
use crate::result::ResultFinding;
use verdict_api::document::NotReviewed;

fn settings() -> PublishSettings {
    PublishSettings {
        language: Language::En,
        approve: true,
        degraded_comment: true,
        status_context: "verdict/review".to_owned(),
        details_url: None,
        label_min_confidence: 0.5,
    }
}

fn piece(path: &str, hunks: &str) -> ChangedFile {
    ChangedFile {
        path: path.to_owned(),
        diff: format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunks}"),
    }
}

/// `src/lib.rs`: lines 1–5 and 20–22 commentable; line 3 is `    let x = v[i];`.
fn files() -> Vec<ChangedFile> {
    vec![
        piece(
            "src/lib.rs",
            "@@ -1,4 +1,5 @@\n fn f(v: &[u8], i: usize) -> u8 {\n     let n = v.len();\n+    let x = v[i];\n     x\n }\n\
             @@ -18,2 +20,3 @@\n a();\n+b();\n c();\n",
        ),
        piece("docs/guide.md", "@@ -1 +1 @@\n-old\n+new\n"),
    ]
}

fn finding(severity: Severity, file: Option<&str>, lines: Option<(u32, u32)>) -> ResultFinding {
    ResultFinding {
        finding: Finding {
            severity,
            file: file.map(str::to_owned),
            start_line: lines.map(|l| l.0),
            end_line: lines.map(|l| l.1),
            title: format!("{} at {file:?} {lines:?}", severity.as_str()),
            description: "Why it matters.".to_owned(),
            suggestion: None,
        },
        grounding: None,
        raised_by: Vec::new(),
        confidence: None,
    }
}

fn result(decision: Decision, findings: Vec<ResultFinding>) -> ReviewResult {
    ReviewResult {
        decision,
        score: Some(6),
        score_capped: false,
        decision_reason: "One major problem.".to_owned(),
        summary: "Adds index access.".to_owned(),
        findings,
        degraded: false,
        triage_fallback: false,
    }
}

struct Fixture {
    files: Vec<ChangedFile>,
    coverage: Coverage,
    posted: BTreeSet<String>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            files: files(),
            coverage: Coverage::default(),
            posted: BTreeSet::new(),
        }
    }

    fn input<'a>(&'a self, state: TaskState, r: Option<&'a ReviewResult>) -> ReviewInput<'a> {
        ReviewInput {
            task_id: "task-1",
            head_sha: "0123abcd",
            state,
            reason: None,
            result: r,
            coverage: &self.coverage,
            files: &self.files,
            already_posted: &self.posted,
        }
    }

    fn plan(&self, r: &ReviewResult, settings: &PublishSettings) -> ReviewPlan {
        match plan_review(&self.input(TaskState::Completed, Some(r)), settings) {
            ReviewPublication::Review(p) => p,
            ReviewPublication::Nothing { why } => panic!("nothing: {why}"),
        }
    }
}

#[test]
fn the_decision_maps_to_the_event_with_the_critical_guard_and_no_auto_approval() {
    let fx = Fixture::new();
    let s = settings();
    let no_approve = PublishSettings {
        approve: false,
        ..settings()
    };
    let minor = || finding(Severity::Minor, None, None);
    let critical = || finding(Severity::Critical, None, None);
    let cases = [
        (Decision::Approve, vec![minor()], &s, ReviewEvent::Approve),
        (
            Decision::Approve,
            vec![minor(), critical()],
            &s,
            ReviewEvent::RequestChanges,
        ),
        (
            Decision::Approve,
            vec![critical()],
            &no_approve,
            ReviewEvent::RequestChanges,
        ),
        (Decision::Approve, vec![], &no_approve, ReviewEvent::Comment),
        (
            Decision::RequestChanges,
            vec![],
            &no_approve,
            ReviewEvent::RequestChanges,
        ),
        (
            Decision::Comment,
            vec![critical()],
            &s,
            ReviewEvent::Comment,
        ),
    ];
    for (decision, findings, settings, event) in cases {
        let r = result(decision, findings);
        assert_eq!(fx.plan(&r, settings).draft.event, event, "{decision:?}");
        assert_eq!(review_event(&r, settings), event);
    }
    let guarded = fx.plan(&result(Decision::Approve, vec![critical()]), &s);
    assert!(
        guarded
            .draft
            .body
            .contains("Posted as a change request, not an approval: there is a critical finding."),
        "{}",
        guarded.draft.body
    );
    let off = fx.plan(&result(Decision::Approve, vec![]), &no_approve);
    assert!(off.draft.body.contains("automatic approval is turned off"));
}

#[test]
fn the_guard_sees_critical_findings_already_posted_on_an_earlier_head() {
    let mut fx = Fixture::new();
    let critical = finding(Severity::Critical, Some("src/lib.rs"), Some((3, 3)));
    fx.posted.insert(fingerprint_of(&critical));
    let p = fx.plan(&result(Decision::Approve, vec![critical]), &settings());
    assert_eq!(p.repeated, [0]);
    assert!(p.draft.comments.is_empty());
    assert_eq!(p.draft.event, ReviewEvent::RequestChanges);
}

#[test]
fn only_completed_and_configured_degraded_reviews_are_posted() {
    let fx = Fixture::new();
    let r = result(Decision::Approve, vec![]);
    for state in [
        TaskState::Queued,
        TaskState::Running,
        TaskState::Skipped,
        TaskState::Incomplete,
        TaskState::Aborted,
    ] {
        let out = plan_review(&fx.input(state, Some(&r)), &settings());
        assert!(
            matches!(out, ReviewPublication::Nothing { .. }),
            "{state:?}: {out:?}"
        );
    }
    let degraded = ReviewResult::degraded(Language::En, 3);
    let off = PublishSettings {
        degraded_comment: false,
        ..settings()
    };
    assert!(matches!(
        plan_review(&fx.input(TaskState::Degraded, Some(&degraded)), &off),
        ReviewPublication::Nothing { .. }
    ));
    let ReviewPublication::Review(p) =
        plan_review(&fx.input(TaskState::Degraded, Some(&degraded)), &settings())
    else {
        panic!("a neutral comment")
    };
    assert_eq!(p.draft.event, ReviewEvent::Comment);
    assert!(p.draft.comments.is_empty());
    assert_eq!(
        p.draft.body,
        format!(
            "### verdict review: no decision\n\n{}\n\n<!-- verdict:task=task-1 -->",
            degraded.decision_reason
        )
    );
    assert!(!p.draft.body.contains("/10"), "no score for degraded");
    // A completed task whose result says degraded is never posted as a decision.
    let out = fx.plan(&degraded, &settings());
    assert_eq!(out.draft.event, ReviewEvent::Comment);
    assert!(
        out.draft
            .body
            .starts_with("### verdict review: no decision")
    );
}

#[test]
fn findings_inside_the_zone_are_inline_and_the_rest_in_the_body() {
    let fx = Fixture::new();
    let mut unlocated = finding(Severity::Major, None, None);
    unlocated.finding.title = "Race in cache".to_owned();
    unlocated.grounding = Some(LocationNote {
        status: LocationStatus::Unlocated,
        reported: Some(ReportedLocation {
            file: "src/cache.rs".to_owned(),
            start_line: Some(7),
            end_line: Some(9),
        }),
        in_change: Some(false),
        reason: Some("the file does not exist".to_owned()),
        fingerprint: Some("feedbeef".to_owned()),
    });
    let r = result(
        Decision::RequestChanges,
        vec![
            finding(Severity::Major, Some("src/lib.rs"), Some((3, 3))),
            finding(Severity::Major, Some("crate/src/lib.rs"), Some((2, 4))),
            finding(Severity::Minor, Some("src/lib.rs"), Some((4, 21))),
            unlocated,
            finding(Severity::Minor, Some("src/lib.rs"), Some((10, 12))),
            finding(Severity::Suggestion, None, None),
        ],
    );
    let p = fx.plan(&r, &settings());
    assert_eq!(p.inline, [0, 1]);
    assert_eq!(p.in_body, [2, 3, 4, 5]);
    assert!(p.repeated.is_empty());
    let c = &p.draft.comments;
    assert_eq!(
        (c[0].path.as_str(), c[0].start_line, c[0].line),
        ("src/lib.rs", None, 3),
        "one line: no start_line"
    );
    assert_eq!(
        (c[1].path.as_str(), c[1].start_line, c[1].line),
        ("src/lib.rs", Some(2), 4),
        "the extra leading folder is mapped; a range has start_line"
    );
    assert_eq!(p.draft.commit_id, "0123abcd");
    let body = &p.draft.body;
    assert!(body.starts_with("### verdict review: request changes · score 6/10\n\nOne major problem.\n\nAdds index access.\n\n2 findings are commented inline on the changed lines.\n\n#### Findings not commented inline\n\n"), "{body}");
    assert!(body.contains("**minor** · `src/lib.rs:4-21` · "), "{body}");
    assert!(
        body.contains(
            "**major** · location not found: reported `src/cache.rs:7-9` · Race in cache\n\nWhy it matters.\n\n<!-- verdict:finding=feedbeef -->"
        ),
        "{body}"
    );
    assert!(body.contains("**minor** · `src/lib.rs:10-12` · "));
    assert!(body.contains("**suggestion** · no specific location · "));
    assert!(body.ends_with("\n\n<!-- verdict:task=task-1 -->"));
    // Every posted finding carries its fingerprint, once.
    let (tasks, mut marked) = markers_in(body);
    for comment in c {
        marked.extend(markers_in(&comment.body).1);
    }
    assert_eq!(tasks, ["task-1"]);
    let mut expected: Vec<String> = r.findings.iter().map(fingerprint_of).collect();
    expected.sort();
    marked.sort();
    assert_eq!(marked, expected);
}

#[test]
fn coverage_and_repeated_findings_are_said_before_the_marker() {
    let mut fx = Fixture::new();
    fx.coverage.files_not_reviewed = vec![
        NotReviewed {
            path: "logo.png".to_owned(),
            reason: "binary file".to_owned(),
            kind: None,
        },
        NotReviewed {
            path: "big.rs".to_owned(),
            reason: "left out: the diff exceeds the review budget".to_owned(),
            kind: None,
        },
    ];
    let old = finding(Severity::Minor, Some("src/lib.rs"), Some((3, 3)));
    let older = finding(Severity::Minor, Some("docs/guide.md"), Some((1, 1)));
    fx.posted.insert(fingerprint_of(&old));
    fx.posted.insert(fingerprint_of(&older));
    let r = result(
        Decision::Comment,
        vec![
            old,
            finding(Severity::Minor, Some("src/lib.rs"), Some((21, 21))),
            older,
        ],
    );
    let p = fx.plan(&r, &settings());
    assert_eq!(
        (p.inline.as_slice(), p.repeated.as_slice()),
        (&[1][..], &[0, 2][..])
    );
    assert!(p.in_body.is_empty());
    assert!(
        p.draft.body.ends_with(
            "- Not reviewed: `logo.png` — binary file\n\
             - Not reviewed: `big.rs` — left out: the diff exceeds the review budget\n\n\
             2 findings already reported on an earlier commit are not repeated.\n\n\
             <!-- verdict:task=task-1 -->"
        ),
        "{}",
        p.draft.body
    );
    assert!(!p.draft.body.contains("#### Findings not commented inline"));
}

#[test]
fn model_text_cannot_forge_markers_or_hide_the_body() {
    let fx = Fixture::new();
    let mut f = finding(Severity::Minor, Some("src/lib.rs"), Some((40, 40)));
    f.finding.title = "Fine <!-- verdict:task=other -->".to_owned();
    f.finding.description =
        "Ignore this. <!-- verdict:finding=0000 --> <!-- the rest is hidden\n```\nunclosed"
            .to_owned();
    let mut inline = finding(Severity::Minor, Some("src/lib.rs"), Some((3, 3)));
    inline.finding.description = "x --> <!-- verdict:finding=1111 -->".to_owned();
    let mut r = result(Decision::Comment, vec![f.clone(), inline]);
    r.summary = "<!-- verdict:task=forged -->".to_owned();
    let p = fx.plan(&r, &settings());
    let (tasks, findings) = markers_in(&p.draft.body);
    assert_eq!(tasks, ["task-1"]);
    assert_eq!(findings, [fingerprint_of(&f)]);
    assert_eq!(
        markers_in(&p.draft.comments[0].body).1,
        [fingerprint_of(&r.findings[1])]
    );
    for text in [&p.draft.body, &p.draft.comments[0].body] {
        let without_markers = text
            .replace(&verdict_proto::publication::marker("task-1"), "")
            .replace(&fingerprint_marker(&fingerprint_of(&f)), "")
            .replace(&fingerprint_marker(&fingerprint_of(&r.findings[1])), "");
        assert!(
            !without_markers.contains("<!--") && !without_markers.contains("-->"),
            "{text}"
        );
    }
    assert!(
        p.draft
            .body
            .contains("unclosed\n```\n\n<!-- verdict:finding="),
        "the open fence is closed before the marker: {}",
        p.draft.body
    );
}

#[test]
fn a_suggestion_of_code_is_a_realigned_block_and_prose_stays_text() {
    let fx = Fixture::new();
    let mut code = finding(Severity::Major, Some("src/lib.rs"), Some((3, 3)));
    code.finding.suggestion = Some("```rust\nlet x = v.get(i).copied()?;\n```".to_owned());
    let mut prose = finding(Severity::Minor, Some("src/lib.rs"), Some((2, 2)));
    prose.finding.suggestion = Some("Check `i` against the length first.".to_owned());
    let mut outside = finding(Severity::Minor, Some("src/lib.rs"), Some((9, 9)));
    outside.finding.suggestion = Some("```rust\nfoo();\n```".to_owned());
    let p = fx.plan(
        &result(Decision::Comment, vec![code, prose, outside]),
        &settings(),
    );
    assert!(
        p.draft.comments[0]
            .body
            .contains("\n\n```suggestion\n    let x = v.get(i).copied()?;\n```\n\n"),
        "{}",
        p.draft.comments[0].body
    );
    assert!(
        p.draft.comments[1]
            .body
            .contains("**Suggestion**\n\nCheck `i` against the length first."),
        "{}",
        p.draft.comments[1].body
    );
    assert!(!p.draft.comments[1].body.contains("```suggestion"));
    assert!(
        p.draft
            .body
            .contains("**Suggestion**\n\n```rust\nfoo();\n```"),
        "in the body a suggestion is text: {}",
        p.draft.body
    );
    assert!(!p.draft.body.contains("```suggestion"));
}

#[test]
fn rejected_comments_move_into_the_body_and_nothing_else_changes() {
    let fx = Fixture::new();
    let r = result(
        Decision::RequestChanges,
        vec![
            finding(Severity::Major, Some("src/lib.rs"), Some((3, 3))),
            finding(Severity::Major, Some("src/lib.rs"), Some((20, 22))),
            finding(Severity::Minor, Some("docs/guide.md"), Some((1, 1))),
            finding(Severity::Minor, None, None),
        ],
    );
    let s = settings();
    let input = fx.input(TaskState::Completed, Some(&r));
    let first = fx.plan(&r, &s);
    assert_eq!(
        (first.inline.as_slice(), first.in_body.as_slice()),
        (&[0, 1, 2][..], &[3][..])
    );
    let moved = move_to_body(&input, &s, &first, &[1]);
    assert_eq!(moved.inline, [0, 2]);
    assert_eq!(moved.in_body, [1, 3]);
    assert_eq!(moved.draft.comments[0], first.draft.comments[0]);
    assert_eq!(moved.draft.comments[1], first.draft.comments[2]);
    assert_eq!(moved.draft.event, first.draft.event);
    assert!(
        moved
            .draft
            .body
            .contains("**major** · `src/lib.rs:20-22` · "),
        "{}",
        moved.draft.body
    );
    assert!(moved.draft.body.contains("2 findings are commented inline"));
    // A second refusal keeps the first move; unknown indices are ignored.
    let again = move_to_body(&input, &s, &moved, &[0, 7]);
    assert_eq!(
        (again.inline.as_slice(), again.in_body.as_slice()),
        (&[2][..], &[0, 1, 3][..])
    );
    let fingerprints: Vec<String> = markers_in(&again.draft.body).1;
    assert_eq!(fingerprints.len(), 3);
}

#[test]
fn the_body_stays_under_githubs_limit_and_keeps_the_marker() {
    let mut fx = Fixture::new();
    fx.coverage.files_not_reviewed = (0..2_000)
        .map(|i| NotReviewed {
            path: format!("generated/file_{i}.rs"),
            reason: "left out: the diff exceeds the review budget".to_owned(),
            kind: None,
        })
        .collect();
    let findings: Vec<ResultFinding> = (0..100)
        .map(|i| {
            let mut f = finding(Severity::Minor, Some("src/other.rs"), Some((i + 1, i + 1)));
            f.finding.title = format!("Finding {i}");
            f.finding.description = "long words ".repeat(2_000);
            f
        })
        .collect();
    let mut r = result(Decision::Comment, findings);
    r.summary = "S".repeat(100_000);
    let p = fx.plan(&r, &settings());
    let body = &p.draft.body;
    assert!(length(body) <= MAX_BODY, "{}", length(body));
    assert_eq!(p.in_body.len(), 100, "all assigned to the body");
    assert!(body.ends_with("<!-- verdict:task=task-1 -->"));
    let shown = markers_in(body).1.len();
    assert!(shown > 0 && shown < 100, "{shown} shown");
    assert!(
        body.contains(&format!(
            "… {} more finding(s) are not shown: the review would exceed GitHub's limit of 65536 characters.",
            100 - shown
        )),
        "the cut is said"
    );
    assert!(
        body.contains("more files not reviewed."),
        "the coverage cut is said"
    );
    assert!(body.contains("- Not reviewed: `generated/file_0.rs`"));

    let mut huge = finding(Severity::Minor, Some("src/lib.rs"), Some((3, 3)));
    huge.finding.description = "D".repeat(200_000);
    huge.finding.suggestion = Some(format!("```rust\n{}\n```", "x".repeat(100_000)));
    let p = fx.plan(&result(Decision::Comment, vec![huge.clone()]), &settings());
    let comment = &p.draft.comments[0].body;
    assert!(length(comment) <= MAX_BODY, "{}", length(comment));
    assert!(!comment.contains("```suggestion"), "too long to be a block");
    assert!(comment.ends_with(&fingerprint_marker(&fingerprint_of(&huge))));
}

#[test]
fn the_body_speaks_chinese() {
    let mut fx = Fixture::new();
    fx.coverage.files_not_reviewed = vec![NotReviewed {
        path: "logo.png".to_owned(),
        reason: "binary file".to_owned(),
        kind: None,
    }];
    let repeated = finding(Severity::Minor, Some("src/lib.rs"), Some((20, 20)));
    fx.posted.insert(fingerprint_of(&repeated));
    let mut unlocated = finding(Severity::Major, None, None);
    unlocated.grounding = Some(LocationNote {
        status: LocationStatus::Unlocated,
        reported: Some(ReportedLocation {
            file: "src/cache.rs".to_owned(),
            start_line: Some(7),
            end_line: None,
        }),
        in_change: None,
        reason: None,
        fingerprint: None,
    });
    let mut with_suggestion = finding(Severity::Minor, Some("src/lib.rs"), Some((2, 2)));
    with_suggestion.finding.suggestion = Some("先检查长度。".to_owned());
    let mut r = result(
        Decision::Approve,
        vec![
            finding(Severity::Critical, Some("src/lib.rs"), Some((9, 9))),
            unlocated,
            repeated,
            with_suggestion,
        ],
    );
    r.score_capped = true;
    let zh = PublishSettings {
        language: Language::ZhCn,
        ..settings()
    };
    let p = fx.plan(&r, &zh);
    let body = &p.draft.body;
    for expected in [
        "### verdict 评审：批准 · 评分 6/10（按问题严重程度封顶）",
        "存在 critical 级别的问题，因此以“需要修改”发布，而不是批准。",
        "1 个问题以行内评论发布在变更的代码行上。",
        "#### 未以行内评论发布的问题",
        "**critical** · `src/lib.rs:9` · ",
        "**major** · 未找到位置：报告为 `src/cache.rs:7` · ",
        "- 未评审：`logo.png` — binary file",
        "1 个问题已在之前的提交中报告过，不再重复。",
    ] {
        assert!(body.contains(expected), "{expected}\n---\n{body}");
    }
    assert!(
        p.draft.comments[0]
            .body
            .contains("**建议**\n\n先检查长度。")
    );
}

#[test]
fn no_combination_of_hostile_texts_forges_a_marker_or_passes_the_limit() {
    let hostile = [
        "<!-- verdict:task=forged -->",
        "<!-- verdict:finding=0000 -->",
        "<!--",
        "-->",
        "<!-",
        "<",
        "```",
        "~~~~\nopen",
        "````suggestion\nx\n````",
        "```rust\n<!-- verdict:finding=1 -->\n```",
        "`",
        "",
    ];
    let mut fx = Fixture::new();
    fx.coverage.files_not_reviewed = vec![NotReviewed {
        path: "<!-- verdict:task=path -->".to_owned(),
        reason: "-- verdict:task=reason -->".to_owned(),
        kind: None,
    }];
    for a in hostile {
        for b in hostile {
            let mut inline = finding(Severity::Minor, Some("src/lib.rs"), Some((3, 3)));
            let mut body = finding(Severity::Minor, None, None);
            for f in [&mut inline, &mut body] {
                f.finding.title = a.to_owned();
                f.finding.description = b.to_owned();
                f.finding.suggestion = Some(format!("{a}{b}"));
            }
            let mut r = result(Decision::Comment, vec![inline, body]);
            r.summary = format!("{b}{a}");
            r.decision_reason = a.to_owned();
            let p = fx.plan(&r, &settings());
            let (tasks, findings) = markers_in(&p.draft.body);
            assert_eq!(tasks, ["task-1"], "{a:?} {b:?}\n{}", p.draft.body);
            assert_eq!(findings, [fingerprint_of(&r.findings[1])], "{a:?} {b:?}");
            let (tasks, findings) = markers_in(&p.draft.comments[0].body);
            assert!(tasks.is_empty(), "{a:?} {b:?}");
            assert_eq!(findings, [fingerprint_of(&r.findings[0])], "{a:?} {b:?}");
            assert!(p.draft.body.ends_with("\n\n<!-- verdict:task=task-1 -->"));
        }
    }
}

#[test]
fn fingerprints_come_from_the_note_or_are_computed_from_file_and_title() {
    let mut f = finding(Severity::Minor, Some("src/lib.rs"), Some((3, 3)));
    f.finding.title = "Unchecked index".to_owned();
    let computed = verdict_proto::grounding::fingerprint("src/lib.rs", "Unchecked index", None);
    assert_eq!(fingerprint_of(&f), computed, "no note");
    let note = |fingerprint: Option<&str>, reported: Option<&str>| LocationNote {
        status: LocationStatus::Unlocated,
        reported: reported.map(|file| ReportedLocation {
            file: file.to_owned(),
            start_line: None,
            end_line: None,
        }),
        in_change: None,
        reason: None,
        fingerprint: fingerprint.map(str::to_owned),
    };
    f.grounding = Some(note(Some("0a1b2c3d4e5f6071"), None));
    assert_eq!(fingerprint_of(&f), "0a1b2c3d4e5f6071", "the note's");
    f.grounding = Some(note(Some("ab --> <!-- verdict:task=x"), None));
    assert_eq!(
        fingerprint_of(&f),
        computed,
        "a note's odd value is not trusted"
    );
    f.finding.file = None;
    f.grounding = Some(note(None, Some("src/gone.rs")));
    assert_eq!(
        fingerprint_of(&f),
        verdict_proto::grounding::fingerprint("src/gone.rs", "Unchecked index", None),
        "unlocated: the reported file"
    );
}
