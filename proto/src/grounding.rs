//! Grounding: whether a finding's location exists in the snapshot the task looked at, and what
//! was done about it when it does not. A report that points at code that is not there loses a
//! team's trust faster than a missed problem, so every location is checked before anyone sees it.
//!
//! The checks themselves live here and do no I/O: the worker hands in a [`Tree`] over its snapshot.
//! After grounding, every finding that named a file carries a [`LocationNote`] under the key
//! [`NOTE_KEY`] in the stage's canonical value; the model's own contract never contains that key.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::string_enum;

/// The property each grounded finding carries its note under.
pub const NOTE_KEY: &str = "grounding";

/// What grounding concluded about one finding's location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocationStatus {
    /// The file and lines exist as the model gave them.
    Located,
    /// The location resolved to exactly one real place after a correction (a leading folder,
    /// `./`, letter case, or the lines where the quoted code really is); `reported` keeps what the
    /// model wrote.
    Corrected,
    /// The location does not exist in the snapshot: the finding's file and lines were removed and
    /// `reported` keeps them. The finding is kept, never dropped, and never shown as located.
    Unlocated,
}

string_enum!(LocationStatus {
    Located => "located",
    Corrected => "corrected",
    Unlocated => "unlocated",
});

/// A location as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReportedLocation {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
}

/// The note a grounded finding carries (under [`NOTE_KEY`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocationNote {
    pub status: LocationStatus,
    /// What the model wrote, when it differs from the finding's location (corrected, unlocated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ReportedLocation>,
    /// For reviews: whether the file is one the change touches. `None` for scans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_change: Option<bool>,
    /// Why the location was corrected or could not be found, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl LocationNote {
    /// The note of finding `finding` (an object of a grounded value), if it has one.
    pub fn of(finding: &Value) -> Option<LocationNote> {
        serde_json::from_value(finding.get(NOTE_KEY)?.clone()).ok()
    }
}

/// Removes the notes from a grounded value's `findings`, returning them by finding index, so the
/// value can be read back as the model's contract type (which does not know the key).
pub fn take_notes(value: &mut Value) -> Vec<Option<LocationNote>> {
    let Some(findings) = value.get_mut("findings").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    findings
        .iter_mut()
        .map(|f| {
            let note = f.as_object_mut()?.remove(NOTE_KEY)?;
            serde_json::from_value(note).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_taken_out_by_index() {
        let mut value = serde_json::json!({"findings": [
            {"file": "src/a.rs", "grounding": {"status": "corrected", "reported": {"file": "repo/src/a.rs", "start_line": 1, "end_line": 2}, "reason": "r"}},
            {"file": null},
        ]});
        let notes = take_notes(&mut value);
        assert_eq!(notes.len(), 2);
        let first = notes[0].as_ref().unwrap();
        assert_eq!(first.status, LocationStatus::Corrected);
        assert_eq!(first.reported.as_ref().unwrap().file, "repo/src/a.rs");
        assert!(notes[1].is_none());
        assert!(value["findings"][0].get(NOTE_KEY).is_none());
    }
}
