//! The contract text a system prompt shows for each protocol, in the configured language (P6).

use crate::{Language, ProtocolId};

/// The exact output contract for `protocol`, as the system message and the repair prompt show it.
pub fn contract_text(protocol: ProtocolId, language: Language) -> String {
    match protocol {
        ProtocolId::Review => crate::review::contract_text(language),
        ProtocolId::IssueAnalysis => crate::issue_analysis::contract_text(language),
        ProtocolId::Scan => crate::scan::contract_text(language),
        ProtocolId::Triage | ProtocolId::Summary | ProtocolId::Reviewer | ProtocolId::Validator => {
            crate::contracts::contract_text(protocol, language)
        }
        ProtocolId::Comments => crate::output_tag::contract_text(language),
    }
}
