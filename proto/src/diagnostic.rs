//! Why a model's answer broke its contract, precise enough to quote back to the model.
//!
//! Parsers never stop at the first problem: they return every diagnostic they can find, each with
//! the 1-based line of the response it concerns and the field it belongs to, because the repair
//! round (SPEC E3) shows them to the model verbatim and the operator reads them in transcripts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of rule a response broke. Stable and machine-readable (kebab-case on the wire);
/// dashboards and tests match on it, the model reads [`Diagnostic::message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DiagnosticCode {
    // Tagged envelopes (P1–P3).
    /// No complete envelope in the response.
    NoEnvelope,
    /// More than one envelope (opening tag lines counted anywhere, fenced or not).
    MultipleEnvelopes,
    /// The envelope was opened but never closed (often: truncated output).
    UnclosedEnvelope,
    /// More text around the envelope than the tolerated short preamble/epilogue.
    SurroundingText,
    /// A Markdown fence outside the envelope that is not one balanced outer fence.
    UnbalancedFence,
    /// A tag the protocol does not define.
    UnknownTag,
    /// A non-blank line between fields that belongs to no field.
    UnexpectedText,
    /// A field in the wrong place.
    FieldOrder,
    /// A field that must appear once appears again.
    DuplicateField,
    /// A required field is absent.
    MissingField,
    /// A field not allowed in this block.
    MisplacedField,
    /// A block field opened and not closed before the next field or the end.
    UnclosedBlock,
    /// A closing tag without its opening tag.
    UnmatchedClose,
    /// A protocol tag line inside a text block.
    TagInText,
    /// A tag line with extra text on it (`<SUMMARY>text` without the closing tag).
    MalformedTagLine,
    /// A scalar field written over several lines.
    NotSingleLine,
    /// A value outside its type, enumeration or range.
    InvalidValue,
    /// A required text is empty after trimming.
    EmptyText,
    /// FILE / START_LINE / END_LINE do not form a valid location (P1 rule 4).
    InvalidLocation,
    /// A value that is not in the configured set (e.g. issue category).
    NotConfigured,

    // Grounding: the answer follows its contract but points at code that is not there.
    /// A finding's file, lines or quoted code do not exist in the snapshot it was made on.
    UngroundedLocation,

    // JSON contracts (P4) and output tags (P5).
    /// Not parseable as JSON.
    InvalidJson,
    /// JSON, but not an object at the top level.
    NotAnObject,
    /// Prose or other text before or after the JSON object or fence.
    TextAroundJson,
    /// A value of the wrong JSON type.
    TypeMismatch,
    /// A required property is absent.
    MissingProperty,
    /// A property the contract does not define.
    UnknownProperty,
    /// A string outside the allowed enumeration.
    InvalidEnumValue,
    /// A number outside its allowed range.
    OutOfRange,
    /// A string that must not be empty is empty.
    EmptyString,
    /// A rule that spans several fields (e.g. start line after end line).
    ConstraintViolation,
    /// No `<output>…</output>` block.
    NoOutputBlock,
    /// More than one `<output>…</output>` block.
    MultipleOutputBlocks,
    /// Text after the closing `</output>`.
    TextAfterOutputBlock,
    /// `<output>` opened and never closed.
    UnclosedOutputBlock,

    // Any protocol.
    /// A well-formed answer whose values copy the contract's placeholders or example.
    EchoedContract,
}

/// One broken rule, located.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub code: DiagnosticCode,
    /// 1-based line in the response as received (before any fence or preamble is removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Field path: `FINDINGS/FINDING[2]/START_LINE` for envelopes (1-based block index, as the
    /// model counts), `findings[0].start_line` for JSON (0-based, as JSON tooling counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What is wrong and how to fix it, written to be quoted to the model.
    pub message: String,
}

impl Diagnostic {
    pub fn new(code: DiagnosticCode, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            line: None,
            field: None,
            message: message.into(),
        }
    }

    #[must_use]
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = Some(line);
        self
    }

    #[must_use]
    pub fn at_line_opt(mut self, line: Option<u32>) -> Self {
        self.line = line;
        self
    }

    #[must_use]
    pub fn in_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, &self.field) {
            (Some(line), Some(field)) => write!(f, "line {line}, {field}: {}", self.message),
            (Some(line), None) => write!(f, "line {line}: {}", self.message),
            (None, Some(field)) => write!(f, "{field}: {}", self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}

/// Every diagnostic of one response, in the order of the response. Never empty when returned as
/// an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    /// Wraps a list that the caller knows to be non-empty; an empty list becomes one
    /// `internal`-looking diagnostic rather than a silent success.
    pub fn new(mut list: Vec<Diagnostic>) -> Self {
        if list.is_empty() {
            list.push(Diagnostic::new(
                DiagnosticCode::InvalidValue,
                "the response was rejected without a specific reason",
            ));
        }
        Diagnostics(list)
    }

    pub fn one(diagnostic: Diagnostic) -> Self {
        Diagnostics(vec![diagnostic])
    }

    pub fn as_slice(&self) -> &[Diagnostic] {
        &self.0
    }

    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// The first diagnostic: what a one-line summary (metrics label, outcome preview) shows.
    pub fn first(&self) -> &Diagnostic {
        // `new` and `one` guarantee at least one element; fall back defensively anyway.
        self.0.first().unwrap_or(&FALLBACK)
    }
}

static FALLBACK: Diagnostic = Diagnostic {
    code: DiagnosticCode::InvalidValue,
    line: None,
    field: None,
    message: String::new(),
};

impl fmt::Display for Diagnostics {
    /// One diagnostic per line, as the repair round quotes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "- {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Collects diagnostics while a parser walks a response; turns into `Result` at the end.
#[derive(Debug, Default)]
pub struct Collector {
    list: Vec<Diagnostic>,
}

impl Collector {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.list.push(diagnostic);
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// `Ok(value)` when nothing was collected and the value was built; the diagnostics otherwise.
    pub fn finish<T>(mut self, value: Option<T>) -> Result<T, Diagnostics> {
        match value {
            Some(v) if self.list.is_empty() => Ok(v),
            _ => {
                self.list.sort_by_key(|d| d.line.unwrap_or(u32::MAX));
                Err(Diagnostics::new(self.list))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_line_and_field() {
        let d = Diagnostic::new(DiagnosticCode::InvalidValue, "expected a positive integer")
            .at_line(12)
            .in_field("FINDINGS/FINDING[2]/START_LINE");
        assert_eq!(
            d.to_string(),
            "line 12, FINDINGS/FINDING[2]/START_LINE: expected a positive integer"
        );
    }

    #[test]
    fn collector_without_value_is_never_a_silent_success() {
        let c = Collector::default();
        let r: Result<u8, _> = c.finish(None);
        assert_eq!(r.unwrap_err().len(), 1);
    }

    #[test]
    fn collector_sorts_by_line_and_keeps_unlocated_last() {
        let mut c = Collector::default();
        c.push(Diagnostic::new(DiagnosticCode::MissingField, "b"));
        c.push(Diagnostic::new(DiagnosticCode::InvalidValue, "a").at_line(3));
        let e = c.finish::<()>(Some(())).unwrap_err();
        assert_eq!(e.first().message, "a");
    }
}
