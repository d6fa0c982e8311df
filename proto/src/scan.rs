//! Placeholder until the envelope parser lands.
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language};
pub fn parse(_response: &str) -> Result<serde_json::Value, Diagnostics> {
    Err(Diagnostics::one(Diagnostic::new(DiagnosticCode::NoEnvelope, "not built yet")))
}
pub fn contract_text(_language: Language) -> String {
    String::new()
}
