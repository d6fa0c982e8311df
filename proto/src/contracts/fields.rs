//! Value types several contracts share, each carrying its rule in both its `Deserialize` and its
//! schema, so the typed fast path and the schema walker reject exactly the same values.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{Error as _, Unexpected};
use serde::{Deserialize, Deserializer, Serialize};

/// Text that is not empty after trimming: reasons, titles, paths, comment bodies. A blank string
/// carries nothing the pipeline can use, so it is rejected instead of stored. Schema:
/// `{"type": "string", "pattern": "\\S"}`. Inner whitespace and indentation are kept (a suggestion
/// may be code).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Text(String);

impl Text {
    /// `None` when `text` is empty or only whitespace.
    pub fn new(text: impl Into<String>) -> Option<Text> {
        let text = text.into();
        (!text.trim().is_empty()).then_some(Text(text))
    }

    /// For texts written in this crate (examples, fallbacks) that are visibly non-blank; a test
    /// validates every one of them.
    pub(crate) fn known(text: &str) -> Text {
        Text(text.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Err(D::Error::invalid_value(
                Unexpected::Str(&text),
                &"a non-empty string",
            ));
        }
        Ok(Text(text))
    }
}

impl JsonSchema for Text {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Text".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "pattern": "\\S" })
    }
}

/// How sure a reviewer is that a finding is real, from 0 (a guess) to 1 (certain). Schema:
/// `{"type": "number", "minimum": 0, "maximum": 1}`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Confidence(f64);

impl Confidence {
    /// `None` outside 0..=1 (and for NaN).
    pub fn new(value: f64) -> Option<Confidence> {
        (0.0..=1.0).contains(&value).then_some(Confidence(value))
    }

    /// For constants written in this crate (examples); clamped so it can never break the rule.
    pub(crate) fn known(value: f64) -> Confidence {
        Confidence(if value.is_nan() {
            0.0
        } else {
            value.clamp(0.0, 1.0)
        })
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Confidence {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Confidence::new(value).ok_or_else(|| {
            D::Error::invalid_value(Unexpected::Float(value), &"a number from 0 to 1")
        })
    }
}

impl JsonSchema for Confidence {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Confidence".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number", "minimum": 0, "maximum": 1 })
    }
}

pub use crate::severity::Severity;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_rejects_blank() {
        assert!(Text::new("  \n\t").is_none());
        assert!(serde_json::from_str::<Text>("\" \"").is_err());
        assert_eq!(
            serde_json::from_str::<Text>("\" a \"").unwrap().as_str(),
            " a "
        );
    }

    #[test]
    fn confidence_is_a_probability() {
        assert!(Confidence::new(1.01).is_none());
        assert!(Confidence::new(f64::NAN).is_none());
        assert!(serde_json::from_str::<Confidence>("1").is_ok());
        assert!(serde_json::from_str::<Confidence>("-0.1").is_err());
    }

    #[test]
    fn severity_schema_lists_the_wire_names() {
        let schema = schemars::schema_for!(Severity).to_value();
        let names: Vec<&str> = Severity::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(schema["enum"], serde_json::json!(names));
    }
}
