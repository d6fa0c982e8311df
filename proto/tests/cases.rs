//! The one table-driven test for every protocol: each response under `data/<protocol>/` is a case.
//!
//! A case is `<name>.txt` (the response, byte for byte) plus exactly one of
//! - `<name>.json`: the response is valid and this is its canonical value;
//! - `<name>.err`: the response is invalid and these are its diagnostics, one per line, exactly as
//!   the repair round quotes them.
//!
//! and optionally `<name>.options.json` ([`ValidateOptions`]). Adding a case is adding files.
//! `VERDICT_BLESS=1 cargo test -p verdict-proto --test cases` rewrites the expectations from the
//! current behaviour — review the diff before committing it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::fs;
use std::path::{Path, PathBuf};

use verdict_proto::{ProtocolId, ValidateOptions, validate};

#[test]
fn every_case_under_data_matches_its_expectation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bless = std::env::var_os("VERDICT_BLESS").is_some();
    let mut failures = Vec::new();
    let mut count = 0;
    for dir in sorted_entries(&root) {
        let protocol_name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let protocol: ProtocolId = protocol_name
            .parse()
            .unwrap_or_else(|e| panic!("directory {}: {e}", dir.display()));
        for input in sorted_entries(&dir) {
            if input.extension().and_then(|e| e.to_str()) != Some("txt") {
                continue;
            }
            count += 1;
            if let Err(f) = check_case(protocol, &input, bless) {
                failures.push(f);
            }
        }
    }
    assert!(count > 0, "no cases found under {}", root.display());
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn check_case(protocol: ProtocolId, input: &Path, bless: bool) -> Result<(), String> {
    let name = input.display().to_string();
    let response = fs::read_to_string(input).map_err(|e| format!("{name}: {e}"))?;
    let options_path = input.with_extension("options.json");
    let options: ValidateOptions = if options_path.exists() {
        serde_json::from_str(&fs::read_to_string(&options_path).unwrap())
            .map_err(|e| format!("{}: {e}", options_path.display()))?
    } else {
        ValidateOptions::default()
    };
    let json_path = input.with_extension("json");
    let err_path = input.with_extension("err");
    let got = validate(protocol, &options, &response);

    if let Err(diagnostics) = &got {
        for d in diagnostics {
            if d.line.is_none() || d.field.is_none() {
                return Err(format!(
                    "{name}: every diagnostic must name its line and field, this one does not: {d:?}"
                ));
            }
        }
    }

    if bless {
        let _ = fs::remove_file(&json_path);
        let _ = fs::remove_file(&err_path);
        match &got {
            Ok(v) => fs::write(&json_path, pretty(v)).unwrap(),
            Err(d) => fs::write(&err_path, format!("{d}\n")).unwrap(),
        }
        return Ok(());
    }

    match (json_path.exists(), err_path.exists(), got) {
        (true, true, _) => Err(format!("{name}: has both .json and .err; keep one")),
        (false, false, got) => Err(format!(
            "{name}: no expectation beside it (add .json or .err, or run with VERDICT_BLESS=1); got {got:#?}"
        )),
        (true, false, Ok(value)) => {
            let expected: serde_json::Value =
                serde_json::from_str(&fs::read_to_string(&json_path).unwrap())
                    .map_err(|e| format!("{}: {e}", json_path.display()))?;
            if expected == value {
                Ok(())
            } else {
                Err(format!(
                    "{name}: value differs\n--- expected\n{}\n--- got\n{}",
                    pretty(&expected),
                    pretty(&value)
                ))
            }
        }
        (true, false, Err(d)) => Err(format!("{name}: expected valid, got diagnostics:\n{d}")),
        (false, true, Ok(value)) => Err(format!(
            "{name}: expected diagnostics, got a valid value:\n{}",
            pretty(&value)
        )),
        (false, true, Err(d)) => {
            let expected = fs::read_to_string(&err_path).unwrap();
            let got = format!("{d}\n");
            if expected.replace("\r\n", "\n") == got {
                Ok(())
            } else {
                Err(format!(
                    "{name}: diagnostics differ\n--- expected\n{expected}--- got\n{got}"
                ))
            }
        }
    }
}

fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    s
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}
