//! The names of verdict's output protocols and what each stage is held to.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Every output contract a stage can be held to (SPEC P1–P5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolId {
    /// P1 `<SAKURA_REVIEW>` envelope.
    Review,
    /// P2 `<SAKURA_ISSUE_ANALYSIS>` envelope.
    IssueAnalysis,
    /// P3 `<SAKURA_SCAN>` envelope.
    Scan,
    /// P4 triage JSON.
    Triage,
    /// P4 summary JSON.
    Summary,
    /// P4 reviewer JSON.
    Reviewer,
    /// P4 validator JSON.
    Validator,
    /// P5 `<output>` block of a free-form agent: review comments and thread replies.
    Comments,
}

/// The family decides the repair mode default (SPEC E3) and the lexical rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolFamily {
    /// P1–P3: line-oriented tagged envelopes; repaired in conversation by default.
    Envelope,
    /// P4: one JSON object; repaired in isolation by default.
    Json,
    /// P5: a final `<output>` block holding JSON; repaired in isolation by default.
    OutputTag,
}

impl ProtocolId {
    pub const ALL: [ProtocolId; 8] = [
        ProtocolId::Review,
        ProtocolId::IssueAnalysis,
        ProtocolId::Scan,
        ProtocolId::Triage,
        ProtocolId::Summary,
        ProtocolId::Reviewer,
        ProtocolId::Validator,
        ProtocolId::Comments,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolId::Review => "review",
            ProtocolId::IssueAnalysis => "issue-analysis",
            ProtocolId::Scan => "scan",
            ProtocolId::Triage => "triage",
            ProtocolId::Summary => "summary",
            ProtocolId::Reviewer => "reviewer",
            ProtocolId::Validator => "validator",
            ProtocolId::Comments => "comments",
        }
    }

    pub fn family(self) -> ProtocolFamily {
        match self {
            ProtocolId::Review | ProtocolId::IssueAnalysis | ProtocolId::Scan => {
                ProtocolFamily::Envelope
            }
            ProtocolId::Triage
            | ProtocolId::Summary
            | ProtocolId::Reviewer
            | ProtocolId::Validator => ProtocolFamily::Json,
            ProtocolId::Comments => ProtocolFamily::OutputTag,
        }
    }
}

impl fmt::Display for ProtocolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown protocol name; the message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol `{given}`; expected one of: {}", ProtocolId::ALL.map(|p| p.as_str()).join(", "))]
pub struct UnknownProtocol {
    pub given: String,
}

impl FromStr for ProtocolId {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProtocolId::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProtocol {
                given: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in ProtocolId::ALL {
            assert_eq!(p.as_str().parse::<ProtocolId>().unwrap(), p);
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::Value::String(p.as_str().into())
            );
        }
        let e = "revue".parse::<ProtocolId>().unwrap_err();
        assert!(e.to_string().contains("issue-analysis"), "{e}");
    }
}
