//! Protocol cases: model responses validated as their directory's protocol.
//!
//! A case is `<name>.txt` (the response, byte for byte) plus exactly one of
//! - `<name>.json`: the response is valid and this is its canonical value;
//! - `<name>.err`: the response is invalid and these are its diagnostics, one per line, exactly as
//!   the repair round quotes them.
//!
//! and optionally `<name>.options.json` ([`ValidateOptions`]).

use std::fs;
use std::path::Path;

use verdict_proto::{ProtocolId, ValidateOptions, validate};

pub(crate) const INPUT: &str = "txt";
pub(crate) const COMPANIONS: &[&str] = &["json", "err", "options.json"];

pub(crate) fn check(protocol: ProtocolId, input: &Path, bless: bool) -> Result<(), String> {
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
