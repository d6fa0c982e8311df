//! Where a JSON path is written in the response, for the error path only.
//!
//! The validators work on `serde_json::Value`, which forgets positions; a diagnostic must still
//! name the 1-based line the model wrote the value on. Rather than carry spans through every
//! valid parse, the slow path scans the (already known to be valid) JSON text once and records
//! where each path's property name and value start. The same scan finds duplicate property
//! names, which `Value` silently collapses (last one wins).

use std::collections::{HashMap, HashSet};

use super::path::{JsonPath, Segment};

/// 1-based line numbers and columns of byte offsets in one text.
#[derive(Debug)]
pub(crate) struct Lines {
    /// Byte offset where each line starts; the first line starts at 0.
    starts: Vec<usize>,
}

impl Lines {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        Lines { starts }
    }

    /// The 1-based line holding `offset`.
    pub(crate) fn line(&self, offset: usize) -> u32 {
        let line = self.starts.partition_point(|&start| start <= offset).max(1);
        u32::try_from(line).unwrap_or(u32::MAX)
    }

    /// The 1-based byte column of `offset` on its line.
    pub(crate) fn column(&self, offset: usize) -> usize {
        let index = self.starts.partition_point(|&start| start <= offset).max(1) - 1;
        let start = self.starts.get(index).copied().unwrap_or(0);
        offset.saturating_sub(start) + 1
    }

    /// The 1-based number of the last line.
    pub(crate) fn last(&self) -> u32 {
        u32::try_from(self.starts.len()).unwrap_or(u32::MAX)
    }
}

/// Where a path is written, as byte offsets into the scanned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spot {
    /// The opening quote of the property name, when the value is an object property.
    pub key: Option<usize>,
    /// The first byte of the value.
    pub value: usize,
}

/// Every path of one JSON value and where it is written.
#[derive(Debug, Default)]
pub(crate) struct Index {
    spots: HashMap<JsonPath, Spot>,
    /// Property names given twice in one object, each with the offset of the later name.
    pub duplicates: Vec<(JsonPath, usize)>,
}

/// serde_json refuses deeper documents (recursion limit 128), so a valid one never gets here;
/// the cap only keeps the scanner safe if it is ever handed something else.
const MAX_DEPTH: usize = 256;

impl Index {
    /// Scans the JSON value at the start of `text` (leading whitespace allowed; anything after
    /// the value is ignored). Meant for text serde_json has already accepted; on anything else
    /// it stops early and returns what it found, never panics.
    pub(crate) fn build(text: &str) -> Index {
        let mut scanner = Scanner {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            index: Index::default(),
        };
        let mut path = JsonPath::root();
        scanner.value(&mut path, None, 0);
        scanner.index
    }

    pub(crate) fn spot(&self, path: &JsonPath) -> Option<Spot> {
        self.spots.get(path).copied()
    }
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    index: Index,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self, path: &mut JsonPath, key: Option<usize>, depth: usize) {
        self.skip_whitespace();
        let start = self.pos;
        self.index
            .spots
            .insert(path.clone(), Spot { key, value: start });
        match self.peek() {
            Some(b'{') if depth < MAX_DEPTH => self.object(path, depth),
            Some(b'[') if depth < MAX_DEPTH => self.array(path, depth),
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.pos += 1;
                }
            }
            None => {}
        }
    }

    fn object(&mut self, path: &mut JsonPath, depth: usize) {
        self.pos += 1; // `{`
        let mut seen: HashSet<String> = HashSet::new();
        loop {
            self.skip_whitespace();
            match self.peek() {
                None => return,
                Some(b'}') => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => self.pos += 1,
                Some(b'"') => {
                    let key_start = self.pos;
                    let key = self.string();
                    self.skip_whitespace();
                    if self.peek() != Some(b':') {
                        return;
                    }
                    self.pos += 1;
                    if !seen.insert(key.clone()) {
                        self.index
                            .duplicates
                            .push((path.clone().key(key.clone()), key_start));
                    }
                    path.push(Segment::Key(key));
                    self.value(path, Some(key_start), depth + 1);
                    path.pop();
                }
                Some(_) => return,
            }
        }
    }

    fn array(&mut self, path: &mut JsonPath, depth: usize) {
        self.pos += 1; // `[`
        let mut i = 0;
        loop {
            self.skip_whitespace();
            match self.peek() {
                None => return,
                Some(b']') => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => self.pos += 1,
                Some(_) => {
                    let before = self.pos;
                    path.push(Segment::Index(i));
                    self.value(path, None, depth + 1);
                    path.pop();
                    i += 1;
                    if self.pos == before {
                        return; // not JSON after all; stop rather than spin
                    }
                }
            }
        }
    }

    /// Consumes a string starting at `"` and returns its decoded content.
    fn string(&mut self) -> String {
        let start = self.pos;
        self.pos += 1;
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'"' => break,
                _ => {}
            }
        }
        let end = self.pos.min(self.bytes.len());
        let raw = self.text.get(start..end).unwrap_or("");
        serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.trim_matches('"').to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let lines = Lines::new("ab\ncd\r\n\nx");
        assert_eq!(lines.line(0), 1);
        assert_eq!(lines.line(2), 1);
        assert_eq!(lines.line(3), 2);
        assert_eq!(lines.column(4), 2);
        assert_eq!(lines.line(7), 3);
        assert_eq!(lines.line(8), 4);
        assert_eq!(lines.last(), 4);
    }

    #[test]
    fn finds_keys_values_and_duplicates() {
        let text =
            "{\n  \"a\": 1,\n  \"b\": [\n    {\"c\": \"x\\\"y\"},\n    2\n  ],\n  \"a\": 3\n}";
        let index = Index::build(text);
        let lines = Lines::new(text);
        let line = |p: &JsonPath| lines.line(index.spot(p).unwrap().value);
        assert_eq!(line(&JsonPath::root()), 1);
        assert_eq!(line(&JsonPath::root().key("b").index(0).key("c")), 4);
        assert_eq!(line(&JsonPath::root().key("b").index(1)), 5);
        // The later of two duplicates wins, as in `serde_json::Value`.
        assert_eq!(line(&JsonPath::root().key("a")), 7);
        assert_eq!(index.duplicates.len(), 1);
        assert_eq!(index.duplicates[0].0.to_string(), "$.a");
    }

    #[test]
    fn decodes_escaped_keys() {
        let index = Index::build(r#"{"\u0061b": true}"#);
        assert!(index.spot(&JsonPath::root().key("ab")).is_some());
    }

    #[test]
    fn survives_garbage() {
        for text in [
            "", "{", "[", "{\"a\"", "{\"a\":", "[1,", "{]", "\"", "[[[[", "{,,,}",
        ] {
            let _ = Index::build(text);
        }
    }
}
