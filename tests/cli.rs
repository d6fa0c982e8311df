//! The `verdict` binary's contract with scripts: exit codes, stdout/stderr, and the JSON shapes of
//! `validate`, `diff-lines` and `contract`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn verdict(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn data(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("proto/tests/data")
        .join(rel)
        .display()
        .to_string()
}

#[test]
fn validate_prints_canonical_json_and_exits_0() {
    let out = verdict(
        &[
            "validate",
            "--protocol",
            "review",
            &data("review/p1-r7-critical-caps-score-at-3.txt"),
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["score"], 3, "the capped score, as an integer");
    assert!(v["findings"].is_array());
}

#[test]
fn validate_reads_stdin_and_reports_every_problem_with_line_and_field() {
    let response =
        "<SAKURA_REVIEW>\n<VERSION>2</VERSION>\n<SCORE>eleven</SCORE>\n</SAKURA_REVIEW>\n";
    let out = verdict(&["validate", "--protocol", "review", "-"], Some(response));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("line 2, VERSION: VERSION must be 1"), "{err}");
    assert!(err.contains("line 3, SCORE:"), "{err}");
    assert!(err.contains("missing <DECISION>"), "{err}");

    let out = verdict(
        &["validate", "--protocol", "review", "--json-diagnostics"],
        Some(response),
    );
    assert_eq!(out.status.code(), Some(1));
    let d: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(d[0]["code"], "invalid-value");
    assert_eq!(d[0]["line"], 2);
    assert_eq!(d[0]["field"], "VERSION");
}

#[test]
fn usage_errors_exit_2_and_name_the_fix() {
    let out = verdict(&["validate", "--protocol", "revue", "-"], Some(""));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("issue-analysis"),
        "lists the known protocols: {err}"
    );

    let out = verdict(
        &["validate", "--protocol", "review", "/no/such/file.txt"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("/no/such/file.txt")
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("latin1.txt");
    std::fs::write(&bad, b"caf\xe9").unwrap();
    let out = verdict(
        &["validate", "--protocol", "triage", bad.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("not valid UTF-8")
    );
}

#[test]
fn contract_prints_the_localised_contract() {
    let out = verdict(
        &["contract", "--protocol", "review", "--lang", "zh-CN"],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("<SAKURA_REVIEW>") && text.contains("简体中文"),
        "{text}"
    );

    let out = verdict(&["contract", "--protocol", "scan", "--lang", "fr"], None);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("falling back to zh-CN")
    );
}

#[test]
fn diff_lines_reports_commentable_ranges() {
    let diff = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,3 +1,4 @@\n x\n+y\n z\n w\ndiff --git a/gone.rs b/gone.rs\ndeleted file mode 100644\n--- a/gone.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
    let out = verdict(&["diff-lines"], Some(diff));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"files": [{"path": "src/a.rs", "lines": [[1, 4]]}]})
    );
}
