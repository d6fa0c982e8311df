//! Placeholder until the JSON contracts land.
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language, ProtocolId};
pub fn validate_canonical(
    _protocol: ProtocolId,
    _response: &str,
) -> Result<serde_json::Value, Diagnostics> {
    Err(Diagnostics::one(Diagnostic::new(
        DiagnosticCode::InvalidJson,
        "not built yet",
    )))
}
pub fn contract_text(_protocol: ProtocolId, _language: Language) -> String {
    String::new()
}
