//! Fuzzes wire decoding: arbitrary bytes from the queue must become a message or a reason.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict_proto::wire::{ProgressEvent, StageRequest, StageResult, decode};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<StageRequest>(data, 1 << 20);
    let _ = decode::<StageResult>(data, 1 << 20);
    let _ = decode::<ProgressEvent>(data, 1 << 20);
});
