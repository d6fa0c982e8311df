//! Classifies each line of a response: blank, a protocol tag line, or content.
//!
//! P1 rule 5 is line-oriented: only a line whose trimmed content is exactly one protocol tag (or
//! one single-line field) is structure; everything else is content, even if it contains tag-like
//! text mid-line. Keeping that decision in one place keeps the three envelopes consistent.

use super::spec::Field;

/// A line's role. Indices refer to the protocol's tag table ([`Tags`]); `ROOT` is the envelope tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    Blank,
    /// `<TAG>` alone.
    Open(usize),
    /// `</TAG>` alone.
    Close(usize),
    /// `<TAG>value</TAG>` on one line (value untrimmed).
    Inline(usize, &'a str),
    /// `<TAG>` followed by more text that does not end in `</TAG>`: a tag line gone wrong.
    OpenWithText(usize),
    /// Something shaped like a tag (`<NAME>`, `</NAME>` or `<NAME>…</NAME>`) whose name is not a
    /// protocol tag. Only an error in a structural position.
    Unknown(&'a str),
    /// Anything else.
    Text,
}

/// The tag table of one protocol: index [`Tags::ROOT`] is the envelope, the rest its fields.
#[derive(Debug)]
pub(crate) struct Tags {
    pub names: Vec<&'static str>,
    pub fields: Vec<Option<&'static Field>>,
}

impl Tags {
    pub(super) const ROOT: usize = 0;

    pub(super) fn new(root: &'static str, fields: Vec<&'static Field>) -> Tags {
        let mut names = vec![root];
        let mut by_index = vec![None];
        for f in fields {
            names.push(f.tag);
            by_index.push(Some(f));
        }
        Tags {
            names,
            fields: by_index,
        }
    }

    pub(super) fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| *n == name)
    }

    pub(super) fn name(&self, index: usize) -> &'static str {
        self.names.get(index).copied().unwrap_or("?")
    }

    pub(super) fn field(&self, index: usize) -> Option<&'static Field> {
        self.fields.get(index).copied().flatten()
    }

    /// Classifies one line (already stripped of its line terminator).
    pub(super) fn classify<'a>(&self, raw: &'a str) -> Line<'a> {
        let t = raw.trim();
        if t.is_empty() {
            return Line::Blank;
        }
        let b = t.as_bytes();
        if b[0] != b'<' {
            return Line::Text;
        }
        // `</NAME>`
        if let Some(rest) = t.strip_prefix("</") {
            return match rest.strip_suffix('>') {
                Some(name) if is_tag_name(name) => match self.index(name) {
                    Some(i) => Line::Close(i),
                    None => Line::Unknown(t),
                },
                _ => Line::Text,
            };
        }
        // `<NAME>` possibly followed by more.
        let Some(gt) = t.find('>') else {
            return Line::Text;
        };
        let name = &t[1..gt];
        if !is_tag_name(name) {
            return Line::Text;
        }
        let after = &t[gt + 1..];
        let known = self.index(name);
        if after.is_empty() {
            return match known {
                Some(i) => Line::Open(i),
                None => Line::Unknown(t),
            };
        }
        // `<NAME>value</NAME>`: the closing tag must be the same name and the value must not
        // contain that closing tag again.
        if let Some(value) = after
            .strip_suffix('>')
            .and_then(|s| s.strip_suffix(name))
            .and_then(|s| s.strip_suffix("</"))
            && !contains_close(value, name)
        {
            return match known {
                Some(i) => Line::Inline(i, value),
                None => Line::Unknown(t),
            };
        }
        match known {
            Some(i) => Line::OpenWithText(i),
            None => Line::Text,
        }
    }
}

fn contains_close(value: &str, name: &str) -> bool {
    value.match_indices("</").any(|(i, _)| {
        value[i + 2..]
            .strip_prefix(name)
            .is_some_and(|r| r.starts_with('>'))
    })
}

/// Tag names are identifiers; case is checked later so `<summary>` can be reported as a likely
/// misspelling of `<SUMMARY>` rather than as prose.
fn is_tag_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && name.as_bytes()[0].is_ascii_alphabetic()
}

/// Splits a response into lines without terminators; a trailing `\r` (CRLF) is removed.
pub(crate) fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::with_capacity(text.len() / 32 + 1);
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', text.as_bytes()) {
        lines.push(strip_cr(&text[start..nl]));
        start = nl + 1;
    }
    if start < text.len() {
        lines.push(strip_cr(&text[start..]));
    }
    lines
}

fn strip_cr(line: &str) -> &str {
    line.strip_suffix('\r').unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    static F: [Field; 2] = [
        Field::scalar("SCORE", super::super::spec::Domain::Int(1, 10), ("", "")),
        Field::text("TITLE", ("", "")),
    ];

    fn tags() -> Tags {
        Tags::new("ROOT", F.iter().collect())
    }

    #[test]
    fn classifies_tag_lines() {
        let t = tags();
        assert_eq!(t.classify("   "), Line::Blank);
        assert_eq!(t.classify("<ROOT>"), Line::Open(0));
        assert_eq!(t.classify("  </ROOT>  "), Line::Close(0));
        assert_eq!(t.classify("<SCORE> 7 </SCORE>"), Line::Inline(1, " 7 "));
        assert_eq!(
            t.classify("<TITLE>Vec<u8> handling</TITLE>"),
            Line::Inline(2, "Vec<u8> handling")
        );
        assert_eq!(t.classify("<TITLE></TITLE>"), Line::Inline(2, ""));
        assert_eq!(t.classify("<TITLE>starts here"), Line::OpenWithText(2));
        assert_eq!(
            t.classify("<TITLE>a</TITLE> and <TITLE>b</TITLE>"),
            Line::OpenWithText(2)
        );
        assert_eq!(t.classify("<NOTES>"), Line::Unknown("<NOTES>"));
        assert_eq!(t.classify("<summary>"), Line::Unknown("<summary>"));
        assert_eq!(t.classify("see <TITLE> below"), Line::Text);
        assert_eq!(t.classify("<div class=\"x\">"), Line::Text);
        assert_eq!(t.classify("<>"), Line::Text);
        assert_eq!(t.classify("</ TITLE>"), Line::Text);
    }

    #[test]
    fn splits_lf_and_crlf_without_inventing_a_last_line() {
        assert_eq!(split_lines("a\r\nb\n\nc"), vec!["a", "b", "", "c"]);
        assert_eq!(split_lines("a\n"), vec!["a"]);
        assert_eq!(split_lines(""), Vec::<&str>::new());
    }
}
