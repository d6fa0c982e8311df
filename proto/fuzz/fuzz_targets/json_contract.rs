//! Fuzzes the P4 JSON stage contracts: any input gives a value or located diagnostics, never a
//! panic (SPEC R2).

#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict_proto::{ProtocolId, ValidateOptions, validate};

const PROTOCOLS: [ProtocolId; 4] = [
    ProtocolId::Triage,
    ProtocolId::Summary,
    ProtocolId::Reviewer,
    ProtocolId::Validator,
];

fuzz_target!(|data: &[u8]| {
    let Ok(response) = std::str::from_utf8(data) else {
        return;
    };
    for protocol in PROTOCOLS {
        if let Err(diagnostics) = validate(protocol, &ValidateOptions::default(), response) {
            for d in &diagnostics {
                assert!(d.line.is_some() && d.field.is_some(), "unlocated: {d:?}");
            }
        }
    }
});
