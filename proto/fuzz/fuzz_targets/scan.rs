//! Fuzzes the scan envelope parser: it must never panic, and every rejection is located.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(diagnostics) = verdict_proto::scan::parse(text) {
            for d in &diagnostics {
                assert!(d.line.is_some() && d.field.is_some(), "unlocated: {d:?}");
            }
        }
    }
});
