//! Bounded tool output: every tool writes its lines through [`Body`], which stops at the output
//! limit, and ends with notes that say what was cut and how to ask for less.

use std::borrow::Cow;

/// Room kept for the closing notes, so body + notes stay within the output limit.
const NOTE_RESERVE: usize = 1024;

/// The lines of one tool result, up to a byte budget.
#[derive(Debug)]
pub(crate) struct Body {
    text: String,
    budget: usize,
    full: bool,
    lines: usize,
}

impl Body {
    pub(crate) fn new(max_output_bytes: usize) -> Body {
        Body {
            text: String::new(),
            budget: max_output_bytes.saturating_sub(NOTE_RESERVE).max(1),
            full: false,
            lines: 0,
        }
    }

    /// Appends `line` if it fits. When it does not, the body is full and stays full. The first
    /// line is cut to fit rather than dropped, so a result is never empty just for being long.
    pub(crate) fn push_line(&mut self, line: &str) -> bool {
        if self.full {
            return false;
        }
        let needed = line.len() + usize::from(self.lines > 0);
        if self.text.len() + needed > self.budget {
            self.full = true;
            if self.lines > 0 {
                return false;
            }
            let mut end = self.budget.min(line.len());
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&line[..end]);
            self.lines = 1;
            return true;
        }
        if self.lines > 0 {
            self.text.push('\n');
        }
        self.text.push_str(line);
        self.lines += 1;
        true
    }

    pub(crate) fn is_full(&self) -> bool {
        self.full
    }

    /// The body followed by `notes`, one per line.
    pub(crate) fn finish(self, notes: &[String]) -> String {
        let mut text = self.text;
        for note in notes {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(note);
        }
        text
    }
}

/// `text` cut to at most `max_chars` characters, and whether it was cut.
pub(crate) fn cut_chars(text: &str, max_chars: usize) -> (&str, bool) {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    }
}

/// A line of a file as text: the bytes decoded as UTF-8, invalid sequences replaced by U+FFFD
/// (the flag says whether any were). When the bytes were cut short (`cut`), an incomplete
/// character at the end is dropped rather than reported as invalid.
pub(crate) fn decode_line(bytes: &[u8], cut: bool) -> (Cow<'_, str>, bool) {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => (Cow::Borrowed(text), false),
        Err(e) if cut && e.error_len().is_none() => (
            Cow::Borrowed(std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()),
            false,
        ),
        Err(_) => (String::from_utf8_lossy(bytes), true),
    }
}

/// Files with a NUL byte in their first 8 KiB are treated as binary (git's heuristic).
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    head[..head.len().min(8192)].contains(&0)
}

/// A byte count for people: `512 B`, `64 KiB`, `1 MiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / f64::from(1 << 10))
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_stops_at_its_budget() {
        let mut body = Body::new(NOTE_RESERVE + 10);
        assert!(body.push_line("12345"));
        assert!(!body.push_line("123456"), "5 + 1 + 6 > 10");
        assert!(body.is_full());
        assert!(!body.push_line("1"), "full stays full");
        assert_eq!(body.finish(&["[note]".to_owned()]), "12345\n[note]");
    }

    #[test]
    fn a_long_first_line_is_cut_not_dropped() {
        let mut body = Body::new(NOTE_RESERVE + 4);
        assert!(body.push_line("ééé"));
        assert!(body.is_full());
        assert_eq!(body.finish(&[]), "éé");
    }

    #[test]
    fn lines_decode_and_cut() {
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(cut_chars("hé", 2), ("hé", false));
        assert_eq!(decode_line(b"ok\r", false), (Cow::Borrowed("ok"), false));
        let (text, invalid) = decode_line(b"a\xffb", false);
        assert_eq!((text.as_ref(), invalid), ("a\u{fffd}b", true));
        // "é" is C3 A9; cut after C3.
        assert_eq!(decode_line(b"a\xc3", true), (Cow::Borrowed("a"), false));
        assert!(decode_line(b"a\xc3", false).1);
    }

    #[test]
    fn binary_and_sizes() {
        assert!(looks_binary(b"ab\0c"));
        assert!(!looks_binary(b"abc"));
        let mut late = vec![b'a'; 9000];
        late[8500] = 0;
        assert!(!looks_binary(&late), "only the head counts");
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
