//! Placeholder until the output-tag extraction lands.
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language};
pub fn validate_canonical(_response: &str) -> Result<serde_json::Value, Diagnostics> {
    Err(Diagnostics::one(Diagnostic::new(
        DiagnosticCode::NoOutputBlock,
        "not built yet",
    )))
}
pub fn contract_text(_language: Language) -> String {
    String::new()
}
