//! Diffs come from pull requests, so from anyone: the parser must survive every input and keep its
//! output well-formed (sorted, merged, 1-based ranges; warnings on lines that exist).
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict_proto::diff;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = diff::parse(&text);
    let line_count = u32::try_from(text.lines().count().max(1)).unwrap_or(u32::MAX);
    for warning in &parsed.warnings {
        assert!(warning.line.is_some_and(|l| (1..=line_count).contains(&l)));
    }
    let commentable = parsed.commentable();
    for file in &commentable.files {
        for &(start, end) in &file.lines {
            assert!(1 <= start && start <= end);
            assert!(commentable.contains(&file.path, start, end));
        }
        for pair in file.lines.windows(2) {
            assert!(pair[0].1.saturating_add(1) < pair[1].0);
        }
    }
});
