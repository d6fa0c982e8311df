//! Whole review publications as data: each `<name>.case.json` under `tests/data/publication/` is
//! a finished review task, planned with `plan_review` against the pull request's diff in
//! `<name>.diff` and compared with what it must post.
//!
//! - `<name>.case.json`: `state`, the review `result` (as the task document stores it), and
//!   optionally `reason`, `coverage`, `already_posted` (fingerprints an earlier head has),
//!   `settings` (any of `language`, `approve`, `degraded_comment`; the rest are fixed), and
//!   `rejected` (indices of inline comments the host refused: the plan is then passed through
//!   `move_to_body`).
//! - `<name>.diff`: the pull request's diff, cut into per-file pieces as intake does (optional:
//!   no diff is no changed files).
//! - `<name>.expected.json`: the publication (`{"review": plan}` or `{"nothing": {"why": …}}`),
//!   with the review body replaced by the name of
//! - `<name>.body.md`: the review body, byte for byte — readable as GitHub would render it.
//!
//! A file that belongs to no case fails the test. `VERDICT_BLESS=1 cargo test -p
//! verdict-policy --test publication` rewrites the expectations; review the diff before
//! committing it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use verdict_api::document::{Coverage, TaskState};
use verdict_policy::publication::{
    ChangedFile, PublishSettings, ReviewInput, ReviewPublication, move_to_body, plan_review,
};
use verdict_policy::result::ReviewResult;
use verdict_proto::Language;
use verdict_proto::diff;
use verdict_proto::diff::split_by_file;

const INPUT: &str = ".case.json";
const COMPANIONS: [&str; 3] = [".diff", ".expected.json", ".body.md"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    state: TaskState,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    result: Option<ReviewResult>,
    #[serde(default)]
    coverage: Coverage,
    #[serde(default)]
    already_posted: BTreeSet<String>,
    #[serde(default)]
    settings: Settings,
    #[serde(default)]
    rejected: Option<Vec<usize>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Settings {
    language: Option<Language>,
    approve: Option<bool>,
    degraded_comment: Option<bool>,
}

#[test]
fn every_publication_case_posts_what_it_expects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/publication");
    let bless = std::env::var_os("VERDICT_BLESS").is_some();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut cases = 0;
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap();
        let Some(stem) = name.strip_suffix(INPUT) else {
            let owned = COMPANIONS.iter().any(|c| {
                name.strip_suffix(c)
                    .is_some_and(|stem| dir.join(format!("{stem}{INPUT}")).is_file())
            });
            if !owned {
                failures.push(format!(
                    "{name}: belongs to no case (expected `<name>{INPUT}` beside it)"
                ));
            }
            continue;
        };
        cases += 1;
        if let Err(e) = check(&dir, stem, bless) {
            failures.push(e);
        }
    }
    assert!(cases > 0, "no cases in {}", dir.display());
    assert!(
        failures.is_empty(),
        "{} problems in {cases} cases:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn check(dir: &Path, stem: &str, bless: bool) -> Result<(), String> {
    let read = |ext: &str| fs::read_to_string(dir.join(format!("{stem}{ext}")));
    let case: Case = serde_json::from_str(&read(INPUT).map_err(|e| format!("{stem}: {e}"))?)
        .map_err(|e| format!("{stem}{INPUT}: {e}"))?;
    // No diff: a case whose task publishes nothing needs none.
    let diff_text = read(".diff").unwrap_or_default();
    let changed: Vec<ChangedFile> = split_by_file(&diff_text)
        .into_iter()
        .map(|piece| {
            let parsed = diff::parse(piece);
            let path = parsed.files.first().and_then(|f| f.path()).unwrap_or("");
            ChangedFile {
                path: path.to_owned(),
                diff: piece.to_owned(),
            }
        })
        .collect();
    let settings = PublishSettings {
        language: case.settings.language.unwrap_or(Language::En),
        approve: case.settings.approve.unwrap_or(true),
        degraded_comment: case.settings.degraded_comment.unwrap_or(true),
        status_context: "verdict/review".to_owned(),
        details_url: None,
        label_min_confidence: 0.5,
    };
    let input = ReviewInput {
        task_id: "0b1c2d3e-task",
        head_sha: "4f9e8d7c6b5a49382716f5e4d3c2b1a098765432",
        state: case.state,
        reason: case.reason.as_deref(),
        result: case.result.as_ref(),
        coverage: &case.coverage,
        files: &changed,
        already_posted: &case.already_posted,
    };
    let mut publication = plan_review(&input, &settings);
    if let (Some(rejected), ReviewPublication::Review(plan)) = (&case.rejected, &publication) {
        publication = ReviewPublication::Review(move_to_body(&input, &settings, plan, rejected));
    }
    let mut got = serde_json::to_value(&publication).unwrap();
    let body_file = format!("{stem}.body.md");
    let body = got
        .pointer_mut("/review/draft/body")
        .map(|b| std::mem::replace(b, Value::String(body_file.clone())));
    let got_json = serde_json::to_string_pretty(&got).unwrap() + "\n";

    if bless {
        fs::write(dir.join(format!("{stem}.expected.json")), &got_json).unwrap();
        let body_path = dir.join(&body_file);
        match &body {
            Some(Value::String(b)) => fs::write(body_path, b).unwrap(),
            _ => {
                let _ = fs::remove_file(body_path);
            }
        }
        return Ok(());
    }

    let mut problems = Vec::new();
    match read(".expected.json") {
        Err(e) => problems.push(format!(
            "{stem}.expected.json: {e} (write it, or run with VERDICT_BLESS=1); got\n{got_json}"
        )),
        Ok(expected) => {
            let expected: Value = serde_json::from_str(&expected)
                .map_err(|e| format!("{stem}.expected.json: {e}"))?;
            if expected != got {
                problems.push(format!(
                    "{stem}: the publication differs\n--- expected\n{}\n--- got\n{got_json}",
                    serde_json::to_string_pretty(&expected).unwrap()
                ));
            }
        }
    }
    match (body, read(".body.md")) {
        (Some(Value::String(got)), Ok(expected)) if got != expected => problems.push(format!(
            "{body_file}: the body differs\n--- expected\n{expected}\n--- got\n{got}"
        )),
        (Some(Value::String(got)), Err(e)) => {
            problems.push(format!("{body_file}: {e}; got\n{got}"))
        }
        (None, Ok(_)) => problems.push(format!("{body_file}: nothing is posted, remove it")),
        _ => {}
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n\n"))
    }
}
