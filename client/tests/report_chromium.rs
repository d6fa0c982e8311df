//! The organisation report opened in a real browser (issue 10, item 3): a report of several
//! repositories with known numbers rendered to `report.html`, loaded by Debian's
//! `chromium-headless-shell` (installed by `ops/bin/chromium`), and the DOM it shows after its
//! script ran checked against `report.json`: per repository the score, the findings by
//! severity and category, and the coverage; the summary table sorted by the address's
//! `#sort=` fragment. The rendered text is printed (the closing note's screenshot-equivalent).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use verdict_api::document::{
    Coverage, NotReviewed, RepositoryView, SkipReason, TaskDocument, TaskKind, TaskState, Timings,
};
use verdict_client::report::{self, Member, OrgReport};
use verdict_proto::wire::Usage;

fn browser() -> String {
    let installer = concat!(env!("CARGO_MANIFEST_DIR"), "/../ops/bin/chromium");
    let out = Command::new(installer).arg("path").output().unwrap();
    assert!(
        out.status.success(),
        "ops/bin/chromium path failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The DOM of `page` (with `fragment`) after its scripts ran.
fn dump_dom(chromium: &str, page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}{fragment}", page.display());
    let out = Command::new(chromium)
        .args(["--no-sandbox", "--disable-gpu", "--headless"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn finding(severity: &str, category: &str, file: &str, line: u64, title: &str) -> Value {
    json!({"severity": severity, "category": category, "file": file, "start_line": line,
           "end_line": line, "title": title, "description": "d", "suggestion": null,
           "confidence": 80})
}

fn document(
    id: &str,
    url: &str,
    score: Option<u64>,
    findings: Value,
    scanned: usize,
    skipped: &[(&str, SkipReason)],
    tokens: u64,
) -> TaskDocument {
    // A scan without a score is a degraded one.
    let state = if score.is_some() {
        TaskState::Completed
    } else {
        TaskState::Degraded
    };
    TaskDocument {
        id: id.to_owned(),
        kind: TaskKind::Scan,
        pipeline: "scan".to_owned(),
        state,
        reason: None,
        failure_kind: None,
        repository: Some(RepositoryView {
            url: url.to_owned(),
            revision: "HEAD".to_owned(),
            commit: Some(format!("{id:0>40}")),
            base_revision: None,
            base: None,
        }),
        github: None,
        publication: None,
        trace_id: None,
        result: Some(
            json!({"overall_score": score, "summary": "s", "findings": findings,
                            "degraded": state == TaskState::Degraded}),
        ),
        stages: vec![],
        events: vec![],
        coverage: Coverage {
            files_total: scanned + skipped.len(),
            files_reviewed: (0..scanned).map(|i| format!("src/f{i}.rs")).collect(),
            files_not_reviewed: skipped
                .iter()
                .map(|(p, k)| NotReviewed::skipped(p, *k, k.as_str().to_owned()))
                .collect(),
            shards_failed: vec![],
        },
        timings: Timings::default(),
        usage: Usage {
            calls: 2,
            input_tokens: tokens,
            output_tokens: tokens / 10,
        },
        cost_usd: None,
    }
}

fn sample() -> OrgReport {
    let members = vec![
        Member {
            url: "https://github.com/acme/api".into(),
            document: document(
                "1",
                "https://github.com/acme/api",
                Some(62),
                json!([
                    finding(
                        "critical",
                        "security",
                        "src/db.rs",
                        12,
                        "SQL built from input"
                    ),
                    finding(
                        "major",
                        "reliability",
                        "src/retry.rs",
                        40,
                        "Unbounded retries"
                    ),
                    finding(
                        "minor",
                        "performance",
                        "src/cache.rs",
                        7,
                        "Cache never evicts"
                    ),
                    finding("minor", "maintainability", "src/lib.rs", 1, "Dead module"),
                ]),
                120,
                &[
                    ("vendor/a.go", SkipReason::Vendored),
                    ("Cargo.lock", SkipReason::Generated),
                    ("logo.png", SkipReason::Binary),
                ],
                40_000,
            ),
            cost_usd: Some(0.42),
        },
        Member {
            url: "https://github.com/acme/web".into(),
            document: document(
                "2",
                "https://github.com/acme/web",
                Some(91),
                json!([finding(
                    "suggestion",
                    "architecture",
                    "app/main.ts",
                    3,
                    "<script>alert('x')</script> in a title"
                )]),
                300,
                &[
                    ("web/node_modules/x/index.js", SkipReason::Vendored),
                    ("web/dist/app.min.js", SkipReason::Generated),
                    ("data/dump.sql", SkipReason::TooLarge),
                    ("docs/a.md", SkipReason::Excluded),
                ],
                90_000,
            ),
            cost_usd: Some(1.10),
        },
        Member {
            url: "https://github.com/acme/tools".into(),
            document: document(
                "3",
                "https://github.com/acme/tools",
                None,
                json!([]),
                15,
                &[],
                5_000,
            ),
            cost_usd: None,
        },
        Member {
            url: "https://github.com/acme/infra".into(),
            document: document(
                "4",
                "https://github.com/acme/infra",
                Some(35),
                json!([
                    finding(
                        "critical",
                        "security",
                        "tf/iam.tf",
                        5,
                        "Wildcard IAM policy"
                    ),
                    finding("critical", "security", "tf/s3.tf", 9, "Public bucket"),
                ]),
                42,
                &[("bin/tool", SkipReason::Binary)],
                12_000,
            ),
            cost_usd: Some(0.12),
        },
    ];
    report::build("acme", &members, 1_764_628_756_000)
}

/// The value of the `<td data-key="KEY" …>` cells of the summary table, row by row, with each
/// row's `data-repo`.
fn summary_rows(dom: &str) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
    let table = &dom[dom.find("<table id=\"summary\"").unwrap()..];
    let body = &table[table.find("<tbody>").unwrap()..table.find("</tbody>").unwrap()];
    body.split("<tr data-repo=\"")
        .skip(1)
        .map(|row| {
            let name = row[..row.find('"').unwrap()].to_owned();
            let mut cells = std::collections::BTreeMap::new();
            for cell in row.split("<td data-key=\"").skip(1) {
                let key = cell[..cell.find('"').unwrap()].to_owned();
                let shown = &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()];
                cells.insert(key, strip_tags(shown).trim().to_owned());
            }
            (name, cells)
        })
        .collect()
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

/// The page's text as a reader sees it: one line per block, entities decoded.
fn rendered_text(dom: &str) -> String {
    let body = &dom[dom.find("<body").unwrap()..];
    let body = &body[..body.find("<script").unwrap_or(body.len())];
    let spaced = body
        .replace('\n', " ")
        .replace("</tr>", "\n")
        .replace("</td>", " | ")
        .replace("</th>", " | ")
        .replace("</h1>", "\n")
        .replace("</h2>", "\n")
        .replace("</p>", "\n")
        .replace("</table>", "\n")
        .replace("</summary>", "\n");
    strip_tags(&spaced)
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .replace("&quot;", "\"")
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty() && l != "|")
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_report_shows_in_chromium_the_numbers_of_its_json_and_sorts() {
    let chromium = browser();
    let report = sample();
    let dir = tempfile::tempdir().unwrap();
    let json_text = serde_json::to_string_pretty(&report).unwrap();
    std::fs::write(dir.path().join("report.json"), &json_text).unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, report::html(&report).unwrap()).unwrap();
    // What the page is checked against is the JSON as written, read back.
    let json: Value = serde_json::from_str(&json_text).unwrap();
    let repos = json["repositories"].as_array().unwrap();

    let dom = dump_dom(&chromium, &page, "");
    assert!(
        !dom.contains("<script>alert"),
        "a finding's title is text, not markup"
    );
    assert!(dom.contains("&lt;script&gt;alert('x')&lt;/script&gt; in a title"));
    let rows = summary_rows(&dom);
    assert_eq!(rows.len(), repos.len());
    for ((name, cells), r) in rows.iter().zip(repos) {
        assert_eq!(name, r["name"].as_str().unwrap(), "unsorted: JSON order");
        let score = r["score"]
            .as_u64()
            .map_or("—".to_owned(), |s| s.to_string());
        assert_eq!(cells["score"], score, "{name}");
        for s in report::SEVERITIES {
            assert_eq!(cells[s], r["by_severity"][s].to_string(), "{name} {s}");
        }
        for c in report::CATEGORIES {
            assert_eq!(cells[c], r["by_category"][c].to_string(), "{name} {c}");
        }
        let coverage = &r["coverage"];
        assert_eq!(
            cells["scanned"],
            coverage["files_scanned"].to_string(),
            "{name}"
        );
        assert_eq!(
            cells["skipped"],
            coverage["files_skipped"].to_string(),
            "{name}"
        );
        assert_eq!(cells["tokens"], r["tokens"].to_string(), "{name}");
        assert!(cells["state"].starts_with(r["state"].as_str().unwrap()));

        // The repository's own section: its skipped files by reason, and its findings' links.
        let section_start = dom
            .find(&format!("class=\"repository\" data-repo=\"{name}\""))
            .unwrap();
        let section = &dom[section_start..];
        let section = &section[..section.find("</section>").unwrap()];
        for (reason, count) in coverage["skipped_by_reason"].as_object().unwrap() {
            let cell = format!("data-reason=\"{reason}\">{count}</td>");
            assert!(section.contains(&cell), "{name}: {cell}");
        }
        for f in r["findings"].as_array().unwrap() {
            let link = f["link"].as_str().unwrap();
            assert!(
                section.contains(&format!("href=\"{link}\"")),
                "{name}: {link}"
            );
        }
        assert_eq!(
            section.matches("class=\"finding\"").count(),
            r["findings_total"].as_u64().unwrap() as usize
        );
    }

    // Sorted on load by the address: highest score first (no score sorts last), then by name.
    let dom = dump_dom(&chromium, &page, "#sort=score-desc");
    assert!(dom.contains("data-sorted=\"score-desc\""));
    let order: Vec<String> = summary_rows(&dom).into_iter().map(|(n, _)| n).collect();
    let mut expected: Vec<(i64, String)> = repos
        .iter()
        .map(|r| {
            (
                r["score"].as_i64().unwrap_or(-1),
                r["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    expected.sort_by_key(|e| std::cmp::Reverse(e.0));
    let expected: Vec<String> = expected.into_iter().map(|(_, n)| n).collect();
    assert_eq!(order, expected);
    assert_eq!(order, ["acme/web", "acme/api", "acme/infra", "acme/tools"]);

    let dom = dump_dom(&chromium, &page, "#sort=critical-desc");
    let order: Vec<String> = summary_rows(&dom).into_iter().map(|(n, _)| n).collect();
    assert_eq!(order[..2], ["acme/infra", "acme/api"]);

    let dom = dump_dom(&chromium, &page, "#sort=name");
    let order: Vec<String> = summary_rows(&dom).into_iter().map(|(n, _)| n).collect();
    assert_eq!(order, ["acme/api", "acme/infra", "acme/tools", "acme/web"]);

    println!(
        "--- the report as chromium rendered it (#sort=score-desc) ---\n{}",
        rendered_text(&dump_dom(&chromium, &page, "#sort=score-desc"))
    );
}
