//! Fuzzes P5 output-tag extraction with the comments contract (aliases, fences, several blocks):
//! any input gives a value or located diagnostics, never a panic (SPEC R2).

#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict_proto::{ProtocolId, ValidateOptions, validate};

fuzz_target!(|data: &[u8]| {
    let Ok(response) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(diagnostics) = validate(ProtocolId::Comments, &ValidateOptions::default(), response)
    {
        for d in &diagnostics {
            assert!(d.line.is_some() && d.field.is_some(), "unlocated: {d:?}");
        }
    }
});
