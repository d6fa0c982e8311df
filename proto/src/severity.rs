//! Finding severity, one type for every protocol (P1, P3, the reviewer contract), so multi-stage
//! and single-pass reviews assemble into one result model.

use schemars::JsonSchema;

use crate::names::string_enum;

// The doc line below is the schema description models read.
/// How serious a finding is: critical (must be fixed before merging: security hole, data loss, crash), major (a real bug or serious risk), minor (a small defect or edge case), suggestion (an improvement, not a defect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Major,
    Minor,
    Suggestion,
}

string_enum!(Severity {
    Critical => "critical",
    Major => "major",
    Minor => "minor",
    Suggestion => "suggestion",
});

impl Severity {
    /// The highest review SCORE allowed with a finding of this severity (P1 rule 7).
    pub fn score_cap(self) -> u8 {
        match self {
            Severity::Critical => 3,
            Severity::Major => 6,
            Severity::Minor | Severity::Suggestion => 10,
        }
    }
}
