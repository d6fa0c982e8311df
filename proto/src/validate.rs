//! One entry point that holds a response to any protocol and returns its canonical JSON value.
//!
//! The CLI (`verdict validate`), the table-driven tests and the worker's stage results all go
//! through here, so "valid" means the same thing everywhere.

use serde::Serialize;
use serde_json::Value;

use crate::{Diagnostic, DiagnosticCode, Diagnostics, ProtocolId};

/// Settings that change what a protocol accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidateOptions {
    /// P2: when set, `CATEGORY` must be one of these (exact match).
    #[serde(default)]
    pub issue_categories: Option<Vec<String>>,
}

/// Parses and validates `response` against `protocol`; the canonical value on success, every
/// diagnostic otherwise. A well-formed answer that copies the contract's placeholders or
/// example values is invalid too (`echoed-contract`, [`crate::echo`]).
pub fn validate(
    protocol: ProtocolId,
    options: &ValidateOptions,
    response: &str,
) -> Result<Value, Diagnostics> {
    let value = parse(protocol, options, response)?;
    match crate::echo::check(protocol, response, &value) {
        Some(echoes) => Err(echoes),
        None => Ok(value),
    }
}

fn parse(
    protocol: ProtocolId,
    options: &ValidateOptions,
    response: &str,
) -> Result<Value, Diagnostics> {
    match protocol {
        ProtocolId::Review => crate::review::parse(response).and_then(|v| canonical(&v)),
        ProtocolId::IssueAnalysis => {
            crate::issue_analysis::parse(response, options.issue_categories.as_deref())
                .and_then(|v| canonical(&v))
        }
        ProtocolId::Scan => crate::scan::parse(response).and_then(|v| canonical(&v)),
        ProtocolId::Triage | ProtocolId::Summary | ProtocolId::Reviewer | ProtocolId::Validator => {
            crate::contracts::validate_canonical(protocol, response)
        }
        ProtocolId::Comments => crate::output_tag::validate_canonical(response),
    }
}

/// Serialises a parsed value; our own types always serialise, but a failure is still reported as
/// data rather than a panic.
pub(crate) fn canonical<T: Serialize>(value: &T) -> Result<Value, Diagnostics> {
    serde_json::to_value(value).map_err(|e| {
        Diagnostics::one(Diagnostic::new(
            DiagnosticCode::InvalidValue,
            format!("the parsed value could not be serialised: {e}"),
        ))
    })
}
