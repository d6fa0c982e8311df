//! JSON paths (`$`, `$.review`, `$.findings[0].start_line`): how a diagnostic names the value it
//! is about, in the notation JSON tooling and models already know.

use std::fmt;

/// One step from a value to one of its children.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A property of an object.
    Key(String),
    /// An element of an array (0-based, as JSON tooling counts).
    Index(usize),
}

/// A path from the root of a JSON document; displays as `$.findings[0].start_line`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct JsonPath(Vec<Segment>);

impl JsonPath {
    /// `$`, the whole document.
    pub fn root() -> Self {
        JsonPath(Vec::new())
    }

    /// This path extended by a property.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.0.push(Segment::Key(key.into()));
        self
    }

    /// This path extended by an array index.
    #[must_use]
    pub fn index(mut self, index: usize) -> Self {
        self.0.push(Segment::Index(index));
        self
    }

    pub fn push(&mut self, segment: Segment) {
        self.0.push(segment);
    }

    pub fn pop(&mut self) -> Option<Segment> {
        self.0.pop()
    }

    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// The path of the value that holds this one; the root is its own parent.
    #[must_use]
    pub fn parent(&self) -> JsonPath {
        let mut parent = self.clone();
        parent.pop();
        parent
    }

    /// The last property name, if the path ends in one.
    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(Segment::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// The path with every index replaced by `[*]`: `$.findings[*].file`. Alias tables are
    /// written against these patterns because they apply to every element alike.
    pub fn pattern(&self) -> String {
        let mut s = String::from("$");
        for segment in &self.0 {
            match segment {
                Segment::Key(k) => push_key(&mut s, k),
                Segment::Index(_) => s.push_str("[*]"),
            }
        }
        s
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::from("$");
        for segment in &self.0 {
            match segment {
                Segment::Key(k) => push_key(&mut s, k),
                Segment::Index(i) => {
                    s.push('[');
                    s.push_str(&i.to_string());
                    s.push(']');
                }
            }
        }
        f.write_str(&s)
    }
}

/// `.name` for identifier-like keys, `["odd key"]` (JSON-escaped) for the rest, so a path can
/// always be read back unambiguously.
fn push_key(s: &mut String, key: &str) {
    let mut chars = key.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if identifier {
        s.push('.');
        s.push_str(key);
    } else {
        s.push('[');
        s.push_str(&serde_json::Value::String(key.to_owned()).to_string());
        s.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_in_dollar_notation() {
        assert_eq!(JsonPath::root().to_string(), "$");
        let p = JsonPath::root().key("findings").index(0).key("start_line");
        assert_eq!(p.to_string(), "$.findings[0].start_line");
        assert_eq!(p.pattern(), "$.findings[*].start_line");
        assert_eq!(p.parent().to_string(), "$.findings[0]");
        assert_eq!(
            JsonPath::root().key("odd key").key("\"q").to_string(),
            r#"$["odd key"]["\"q"]"#
        );
    }
}
