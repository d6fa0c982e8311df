//! The report model built from task documents, its links, and the page's escaping.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use serde_json::json;
use verdict_proto::wire::Usage;

use super::*;
use verdict_api::document::{Coverage, NotReviewed, RepositoryView, TaskKind, Timings};

/// A finished scan document with `findings` and a coverage of `scanned` files and `skipped`.
pub(super) fn scan_document(
    id: &str,
    url: &str,
    score: Option<u64>,
    findings: Value,
    scanned: usize,
    skipped: &[(&str, SkipReason)],
) -> TaskDocument {
    TaskDocument {
        id: id.to_owned(),
        kind: TaskKind::Scan,
        pipeline: "scan".to_owned(),
        state: if score.is_some() {
            TaskState::Completed
        } else {
            TaskState::Degraded
        },
        reason: None,
        failure_kind: None,
        repository: Some(RepositoryView {
            url: url.to_owned(),
            revision: "HEAD".to_owned(),
            commit: Some("c0ffee".to_owned()),
            base_revision: None,
            base: None,
        }),
        github: None,
        publication: None,
        trace_id: None,
        result: Some(
            json!({"overall_score": score, "summary": "s", "findings": findings,
                            "degraded": score.is_none()}),
        ),
        stages: vec![],
        events: vec![],
        coverage: Coverage {
            files_total: scanned + skipped.len(),
            files_reviewed: (0..scanned).map(|i| format!("src/f{i}.rs")).collect(),
            files_not_reviewed: skipped
                .iter()
                .map(|(p, k)| NotReviewed::skipped(p, *k, format!("{} file", k.as_str())))
                .collect(),
            shards_failed: vec![],
        },
        timings: Timings::default(),
        usage: Usage {
            calls: 1,
            input_tokens: 1000,
            output_tokens: 200,
        },
        cost_usd: None,
    }
}

fn finding(severity: &str, category: &str, file: &str, line: u64, title: &str) -> Value {
    json!({"severity": severity, "category": category, "file": file, "start_line": line,
           "end_line": line + 2, "title": title, "description": "d", "suggestion": null,
           "confidence": 80})
}

#[test]
fn a_repository_is_counted_by_severity_category_and_coverage() {
    let doc = scan_document(
        "t1",
        "https://github.example/acme/api.git",
        Some(72),
        json!([
            finding("critical", "security", "src/a.rs", 3, "SQL injection"),
            finding("minor", "security", "src/b.rs", 9, "Weak hash"),
            finding("minor", "performance", "src/c.rs", 1, "N+1 query"),
        ]),
        10,
        &[
            ("vendor/x.go", SkipReason::Vendored),
            ("a.png", SkipReason::Binary),
        ],
    );
    let report = build(
        "acme",
        &[Member {
            url: "https://github.example/acme/api.git".to_owned(),
            document: doc,
            cost_usd: Some(0.25),
        }],
        1_764_628_756_000,
    );
    assert_eq!(report.generated_at, "2025-12-01T22:39:16Z");
    let r = &report.repositories[0];
    assert_eq!(r.name, "acme/api");
    assert_eq!(r.score, Some(72));
    assert_eq!(r.by_severity["critical"], 1);
    assert_eq!(r.by_severity["minor"], 2);
    assert_eq!(r.by_severity["major"], 0);
    assert_eq!(r.by_category["security"], 2);
    assert_eq!(r.by_category["architecture"], 0);
    assert_eq!(r.coverage.files_scanned, 10);
    assert_eq!(r.coverage.files_skipped, 2);
    assert_eq!(r.coverage.skipped_by_reason["vendored"], 1);
    assert_eq!(r.coverage.skipped_by_reason["binary"], 1);
    assert_eq!(r.coverage.skipped_by_reason["generated"], 0);
    assert_eq!(r.tokens, 1200);
    assert_eq!(
        r.findings[0].link.as_deref(),
        Some("https://github.example/acme/api/blob/c0ffee/src/a.rs#L3-L5")
    );
    assert_eq!(report.totals.findings, 3);
    assert_eq!(report.totals.cost_usd, Some(0.25));
}

#[test]
fn links_follow_the_repositorys_host_and_only_https_repositories_have_them() {
    assert_eq!(
        file_link(
            "https://x-access-token:s3cret@github.com/o/r",
            "abc",
            "dir/my file#1.rs",
            Some(4),
            Some(4)
        )
        .as_deref(),
        Some("https://github.com/o/r/blob/abc/dir/my%20file%231.rs#L4-L4")
    );
    assert_eq!(
        file_link("/srv/repos/r", "abc", "a.rs", Some(1), Some(1)),
        None
    );
    assert_eq!(
        file_link("https://github.com/o", "abc", "a.rs", None, None),
        None
    );
    // Other URLs and paths are named by their last two segments, as people name repositories.
    assert_eq!(repository_name("/srv/repos/r"), "repos/r");
    assert_eq!(repository_name("/srv/git/acme/api.git/"), "acme/api");
    assert_eq!(repository_name("git@github.com:acme/api.git"), "acme/api");
    assert_eq!(repository_name("ssh://git@host:2222/acme/api"), "acme/api");
    assert_eq!(repository_name("solo"), "solo");
}

#[test]
fn untrusted_text_in_the_page_is_escaped() {
    let doc = scan_document(
        "t1",
        "https://github.com/acme/web",
        Some(50),
        json!([finding(
            "major",
            "security",
            "src/<img src=x>.js",
            1,
            "<script>alert(1)</script> & \"quotes\""
        )]),
        1,
        &[],
    );
    let report = build(
        "acme <b>",
        &[Member {
            url: "https://github.com/acme/web".to_owned(),
            document: doc,
            cost_usd: None,
        }],
        0,
    );
    let page = html(&report).unwrap();
    assert!(!page.contains("<script>alert(1)"), "the title is escaped");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;")
            || page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<img src=x>"));
    assert!(!page.contains("acme <b>"));
    assert_eq!(
        page.matches("<script>").count(),
        1,
        "only the page's own script"
    );
    assert!(
        !page.contains("<link") && !page.contains(" src=\""),
        "no external assets"
    );
}

#[test]
fn a_scan_stopped_at_its_budget_has_a_report_that_says_it_is_partial() {
    let scanned = scan_document(
        "t1",
        "https://github.com/acme/web",
        Some(70),
        json!([]),
        3,
        &[],
    );
    let mut refused = scan_document("t2", "https://github.com/acme/api", None, json!([]), 0, &[]);
    refused.state = TaskState::Incomplete;
    refused.failure_kind = Some(FailureKind::BudgetExceeded);
    refused.reason = Some("refused by the budget: this scan is estimated at 9,000 tokens".into());
    let member = |url: &str, document: TaskDocument| Member {
        url: url.to_owned(),
        document,
        cost_usd: Some(0.5),
    };
    let report = build(
        "acme",
        &[
            member("https://github.com/acme/web", scanned),
            member("https://github.com/acme/api", refused),
        ],
        0,
    );
    assert_eq!(report.over_budget, 1);
    assert!(
        report
            .budget_note
            .as_deref()
            .unwrap()
            .contains("9,000 tokens")
    );
    assert_eq!(report.totals.cost_usd, Some(1.0));
    let page = html(&report).unwrap();
    assert!(
        page.contains("This report is partial: the scan stopped at its budget, and 1 of 2 repositories were not scanned."),
        "{page}"
    );

    let whole = build(
        "acme",
        &[member(
            "https://github.com/acme/web",
            scan_document(
                "t1",
                "https://github.com/acme/web",
                Some(70),
                json!([]),
                3,
                &[],
            ),
        )],
        0,
    );
    assert_eq!(whole.over_budget, 0);
    assert!(!html(&whole).unwrap().contains("This report is partial"));
}
