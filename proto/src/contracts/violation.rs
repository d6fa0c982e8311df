//! A broken rule as the validators see it: named by JSON path, before any line is known.
//!
//! The schema walker and the contracts' semantic rules work on values, not text; the slow path
//! locates each violation in the response once, at the end, and turns it into a [`Diagnostic`].
//!
//! [`Diagnostic`]: crate::Diagnostic

use crate::DiagnosticCode;

use super::path::JsonPath;

/// Which position in the text a violation points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// Where the value at the path starts (wrong type, bad enum, broken rule).
    Value,
    /// Where the property name at the path is written (unknown or duplicate property).
    Key,
    /// The `{` of the object that should hold the path (missing property).
    EnclosingObject,
}

/// One broken rule of a JSON contract, located by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub code: DiagnosticCode,
    pub path: JsonPath,
    pub anchor: Anchor,
    /// What is wrong and how to fix it, written to be quoted to the model.
    pub message: String,
}

impl Violation {
    /// A violation about the value at `path`.
    pub fn at_value(code: DiagnosticCode, path: JsonPath, message: impl Into<String>) -> Self {
        Violation {
            code,
            path,
            anchor: Anchor::Value,
            message: message.into(),
        }
    }

    /// A violation about the property name at `path` (the value may be fine).
    pub fn at_key(code: DiagnosticCode, path: JsonPath, message: impl Into<String>) -> Self {
        Violation {
            code,
            path,
            anchor: Anchor::Key,
            message: message.into(),
        }
    }

    /// A violation about a property that is absent from the object holding `path`.
    pub fn missing(path: JsonPath, message: impl Into<String>) -> Self {
        Violation {
            code: DiagnosticCode::MissingProperty,
            path,
            anchor: Anchor::EnclosingObject,
            message: message.into(),
        }
    }
}
