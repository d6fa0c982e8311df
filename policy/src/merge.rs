//! Merging duplicate findings, so a result never lists the same finding twice: reviewers that
//! see the same problem (or one answer that repeats itself) would otherwise read like a machine
//! talking to itself. Pure: merge keys in, groups of indices out.
//!
//! Two findings are the same finding when
//! - both name a file: the same file, overlapping lines (a missing line range counts as the whole
//!   file) and similar titles. An *unlocated* finding (grounding could not find its location, so
//!   its `file` is null) is compared by the location the model **reported**, so two reviewers'
//!   identical finding on a missing file still merges;
//! - neither names a file: similar titles alone.
//!
//! A finding with a file and one without never merge.
//!
//! **Similar titles.** A title is normalised to words: lowercased, split on everything that is not
//! a letter or digit, each CJK character its own word (Chinese titles have no spaces), and a few
//! English stop words dropped ([`STOP_WORDS`]; a title made only of them keeps them). Two titles
//! are similar when the Jaccard similarity of their word sets, |A∩B| / |A∪B|, is **at least 1/2**
//! (checked in integers: `2·|A∩B| ≥ |A∪B|`). Identical normalised titles always are. The threshold
//! is deliberately loose because the location must agree as well, except for findings without a
//! file, which are few and general.
//!
//! **Groups.** Findings are taken in order; each joins the first group whose *first member* it
//! matches, or starts a new group. Comparing with the first member only keeps chains of near
//! matches from pulling unrelated findings together. Groups are in the order of their first
//! members, members in input order, so the same input always gives the same groups.

use std::collections::BTreeSet;

use serde_json::Value;
use verdict_proto::grounding::{LocationNote, LocationStatus};
use verdict_proto::severity::Severity;

/// English words too common to tell two titles apart.
pub const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on",
    "or", "the", "to", "when", "with",
];

/// Where a finding is, for comparing: a file and, when known, its lines (`start <= end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: String,
    pub lines: Option<(u32, u32)>,
}

impl Place {
    /// A place from a file and the lines given with it, in either order; one line alone is a
    /// one-line range.
    pub fn new(file: &str, start: Option<u32>, end: Option<u32>) -> Place {
        let lines = match (start, end) {
            (Some(s), Some(e)) => Some((s.min(e), s.max(e))),
            (Some(l), None) | (None, Some(l)) => Some((l, l)),
            (None, None) => None,
        };
        Place {
            file: file.to_owned(),
            lines,
        }
    }

    fn overlaps(&self, other: &Place) -> bool {
        self.file == other.file
            && match (self.lines, other.lines) {
                (Some((s1, e1)), Some((s2, e2))) => s1 <= e2 && s2 <= e1,
                _ => true,
            }
    }
}

/// What two findings are compared by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeKey {
    place: Option<Place>,
    words: BTreeSet<String>,
}

impl MergeKey {
    pub fn new(place: Option<Place>, title: &str) -> MergeKey {
        MergeKey {
            place,
            words: title_words(title),
        }
    }

    /// The key of a finding given by its parts and its grounding note: an unlocated finding is
    /// placed where the model reported it.
    pub fn of_parts(
        file: Option<&str>,
        start: Option<u32>,
        end: Option<u32>,
        title: &str,
        note: Option<&LocationNote>,
    ) -> MergeKey {
        let reported = note
            .filter(|n| n.status == LocationStatus::Unlocated)
            .and_then(|n| n.reported.as_ref());
        let place = match (reported, file) {
            (Some(r), _) => Some(Place::new(&r.file, r.start_line, r.end_line)),
            (None, Some(f)) => Some(Place::new(f, start, end)),
            (None, None) => None,
        };
        MergeKey::new(place, title)
    }

    /// The key of a finding object in a canonical JSON value (a review or scan finding, with its
    /// grounding note when it has one).
    pub fn of_value(finding: &Value) -> MergeKey {
        let line = |key: &str| {
            finding
                .get(key)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        MergeKey::of_parts(
            finding.get("file").and_then(Value::as_str),
            line("start_line"),
            line("end_line"),
            finding.get("title").and_then(Value::as_str).unwrap_or(""),
            LocationNote::of(finding).as_ref(),
        )
    }

    /// Whether `self` and `other` are the same finding (see the module documentation).
    pub fn same_finding(&self, other: &MergeKey) -> bool {
        let places_agree = match (&self.place, &other.place) {
            (Some(a), Some(b)) => a.overlaps(b),
            (None, None) => true,
            _ => false,
        };
        places_agree && similar_words(&self.words, &other.words)
    }
}

/// The findings that are one, as indices into `keys`: every index in exactly one group, groups in
/// the order of their first members.
pub fn groups(keys: &[MergeKey]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match groups.iter_mut().find(|g| keys[g[0]].same_finding(key)) {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// How many findings the groups merged into another: the sum of each group's size minus one.
pub fn merged_count(groups: &[Vec<usize>]) -> usize {
    groups.iter().map(|g| g.len().saturating_sub(1)).sum()
}

/// The member a merged finding takes its text, location and note from: the most severe, then the
/// first. `None` only for an empty group.
pub fn lead(group: &[usize], severity_of: impl Fn(usize) -> Severity) -> Option<usize> {
    // `min_by_key` returns the first of equal minima, and the most severe severity is the least.
    group.iter().copied().min_by_key(|&i| severity_of(i))
}

/// Whether two titles are similar (see the module documentation).
pub fn similar_titles(a: &str, b: &str) -> bool {
    similar_words(&title_words(a), &title_words(b))
}

fn similar_words(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    let common = a.intersection(b).count();
    let union = a.len() + b.len() - common;
    // Two titles without a single word are identical for this purpose.
    2 * common >= union
}

/// A title's word set: lowercase letter/digit runs, each CJK character alone, stop words dropped
/// unless nothing else is left.
pub fn title_words(title: &str) -> BTreeSet<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if is_cjk(c) {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            words.push(c.to_string());
        } else if c.is_alphanumeric() {
            current.push(c);
        } else if !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    let meaningful: BTreeSet<String> = words
        .iter()
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .cloned()
        .collect();
    if meaningful.is_empty() {
        words.into_iter().collect()
    } else {
        meaningful
    }
}

/// CJK ideographs, kana and hangul: scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30ff}'   // hiragana, katakana
        | '\u{3400}'..='\u{4dbf}' // CJK extension A
        | '\u{4e00}'..='\u{9fff}' // CJK unified ideographs
        | '\u{ac00}'..='\u{d7af}' // hangul syllables
        | '\u{f900}'..='\u{faff}' // CJK compatibility ideographs
        | '\u{20000}'..='\u{2fa1f}' // CJK extensions B–F and compatibility supplement
    )
}

/// De-duplicates the `findings` of a canonical JSON value (a scan report, say) in place: each
/// group keeps its lead member (most severe, then first) at the position of its first member,
/// with the group's highest numeric `confidence`; the lead's grounding note stays with it.
/// Returns how many findings were merged into another.
pub fn dedupe_value(value: &mut Value) -> usize {
    let Some(findings) = value.get_mut("findings").and_then(Value::as_array_mut) else {
        return 0;
    };
    let keys: Vec<MergeKey> = findings.iter().map(MergeKey::of_value).collect();
    let groups = groups(&keys);
    let merged = merged_count(&groups);
    if merged == 0 {
        return 0;
    }
    let severity_of = |i: usize| {
        findings[i]
            .get("severity")
            .and_then(Value::as_str)
            .and_then(|name| Severity::ALL.iter().copied().find(|s| s.as_str() == name))
            // An unreadable severity never outranks a readable one.
            .unwrap_or(Severity::Suggestion)
    };
    let mut kept = Vec::with_capacity(groups.len());
    for group in &groups {
        let Some(lead) = lead(group, severity_of) else {
            continue;
        };
        let mut finding = findings[lead].clone();
        let highest = group
            .iter()
            .filter_map(|&i| findings[i].get("confidence").and_then(Value::as_f64))
            .fold(None, |best: Option<f64>, c| {
                Some(best.map_or(c, |b| b.max(c)))
            });
        if let (Some(best), Some(slot)) = (highest, finding.get_mut("confidence"))
            && slot.as_f64().is_some_and(|c| c < best)
        {
            // Keep the member's own number (an integer scan confidence stays an integer).
            if let Some(original) = group
                .iter()
                .filter_map(|&i| findings[i].get("confidence"))
                .find(|c| c.as_f64() == Some(best))
            {
                *slot = original.clone();
            }
        }
        kept.push(finding);
    }
    *findings = kept;
    merged
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use verdict_proto::grounding::ReportedLocation;

    use super::*;

    fn at(file: &str, start: u32, end: u32, title: &str) -> MergeKey {
        MergeKey::new(Some(Place::new(file, Some(start), Some(end))), title)
    }

    fn general(title: &str) -> MergeKey {
        MergeKey::new(None, title)
    }

    fn unlocated(file: &str, start: u32, end: u32) -> LocationNote {
        LocationNote {
            status: LocationStatus::Unlocated,
            reported: Some(ReportedLocation {
                file: file.to_owned(),
                start_line: Some(start),
                end_line: Some(end),
            }),
            in_change: None,
            reason: Some("no such file".to_owned()),
            fingerprint: None,
        }
    }

    #[test]
    fn titles_are_normalised_to_words_without_stop_words() {
        let words = title_words("Division by zero on an EMPTY cart!");
        assert_eq!(
            words.into_iter().collect::<Vec<_>>(),
            ["cart", "division", "empty", "zero"]
        );
        assert_eq!(
            title_words("The, and of").into_iter().collect::<Vec<_>>(),
            ["and", "of", "the"],
            "a title of stop words only keeps them"
        );
        assert_eq!(
            title_words("空购物车").len(),
            4,
            "each CJK character is a word"
        );
        assert!(similar_titles(
            "Division by zero on an empty cart",
            "division-by-zero when the cart is empty"
        ));
    }

    #[test]
    fn the_title_threshold_is_one_half_inclusive() {
        // {alpha, beta, gamma} vs {alpha, beta, delta}: 2 common of 4 = 1/2 → similar.
        assert!(similar_titles("alpha beta gamma", "alpha beta delta"));
        // {alpha, beta, gamma, delta} vs {alpha, beta, gamma, epsilon, zeta}: 3 of 6 = 1/2.
        assert!(similar_titles(
            "alpha beta gamma delta",
            "alpha beta gamma epsilon zeta"
        ));
        // {alpha, beta, gamma} vs {alpha, beta, delta, epsilon}: 2 of 5 < 1/2 → not similar.
        assert!(!similar_titles(
            "alpha beta gamma",
            "alpha beta delta epsilon"
        ));
        assert!(!similar_titles("Unchecked index", "Unchecked input"));
        assert!(similar_titles("SQL injection", "sql INJECTION"));
        assert!(similar_titles("!!!", "???"), "no words on either side");
        assert!(!similar_titles("!!!", "Overflow"));
    }

    #[test]
    fn located_findings_need_the_same_file_and_overlapping_lines() {
        let a = at("src/a.rs", 10, 12, "Unchecked index");
        assert!(
            a.same_finding(&at("src/a.rs", 12, 20, "unchecked index")),
            "touching at 12"
        );
        assert!(
            !a.same_finding(&at("src/a.rs", 13, 20, "Unchecked index")),
            "adjacent only"
        );
        assert!(!a.same_finding(&at("src/b.rs", 10, 12, "Unchecked index")));
        assert!(!a.same_finding(&at("src/a.rs", 10, 12, "Leaked file handle")));
        assert!(
            a.same_finding(&MergeKey::new(
                Some(Place::new("src/a.rs", None, None)),
                "Unchecked index"
            )),
            "a place without lines is the whole file"
        );
        assert!(
            !a.same_finding(&general("Unchecked index")),
            "file vs no file"
        );
    }

    #[test]
    fn findings_without_a_file_merge_on_title_alone() {
        assert!(
            general("No test covers the retry path")
                .same_finding(&general("No tests for retry path"))
        );
        assert!(
            !general("No test covers the retry path").same_finding(&general("Missing changelog"))
        );
    }

    #[test]
    fn unlocated_findings_are_compared_by_their_reported_location() {
        let note = unlocated("src/missing.rs", 3, 4);
        let one = MergeKey::of_parts(None, None, None, "Missing null check", Some(&note));
        let two = MergeKey::of_parts(None, None, None, "Missing null check", Some(&note));
        assert!(one.same_finding(&two));
        let elsewhere = unlocated("src/other.rs", 3, 4);
        let three = MergeKey::of_parts(None, None, None, "Missing null check", Some(&elsewhere));
        assert!(!one.same_finding(&three), "different reported files");
        assert!(
            !one.same_finding(&general("Missing null check")),
            "an unlocated finding is not a finding without a file"
        );
        // A corrected finding is compared where it really is, not where it was reported.
        let corrected = LocationNote {
            status: LocationStatus::Corrected,
            ..unlocated("repo/src/a.rs", 3, 4)
        };
        let four = MergeKey::of_parts(Some("src/a.rs"), Some(3), Some(4), "X", Some(&corrected));
        assert!(four.same_finding(&at("src/a.rs", 4, 4, "X")));
    }

    #[test]
    fn groups_keep_input_order_and_compare_with_the_first_member() {
        let keys = [
            at("src/a.rs", 1, 2, "Overflow in sum"),
            general("No tests"),
            at("src/a.rs", 2, 3, "Overflow in the sum"),
            general("No tests at all"),
            at("src/a.rs", 9, 9, "Overflow in sum"),
        ];
        let g = groups(&keys);
        assert_eq!(g, [vec![0, 2], vec![1, 3], vec![4]]);
        assert_eq!(merged_count(&g), 2);
        assert_eq!(groups(&[]), Vec::<Vec<usize>>::new());

        // c overlaps b but not a (the first member): chains do not merge.
        let chain = [
            at("src/a.rs", 1, 2, "Overflow"),
            at("src/a.rs", 2, 5, "Overflow"),
            at("src/a.rs", 5, 6, "Overflow"),
        ];
        assert_eq!(groups(&chain), [vec![0, 1], vec![2]]);
    }

    #[test]
    fn the_lead_is_the_most_severe_then_the_first() {
        let severities = [Severity::Minor, Severity::Major, Severity::Major];
        assert_eq!(lead(&[0, 1, 2], |i| severities[i]), Some(1));
        assert_eq!(lead(&[0], |i| severities[i]), Some(0));
        assert_eq!(lead(&[], |i| severities[i]), None);
    }

    #[test]
    fn a_json_value_is_deduplicated_keeping_the_lead_its_note_and_the_best_confidence() {
        let mut scan = json!({"overall_score": 70, "summary": "s", "findings": [
            {"severity": "minor", "file": "src/a.rs", "start_line": 3, "end_line": 4, "title": "Unchecked index", "confidence": 90,
             "grounding": {"status": "located"}},
            {"severity": "major", "file": null, "start_line": null, "end_line": null, "title": "Leaky pool", "confidence": 50,
             "grounding": {"status": "unlocated", "reported": {"file": "src/gone.rs", "start_line": 1, "end_line": 2}}},
            {"severity": "major", "file": "src/a.rs", "start_line": 4, "end_line": 4, "title": "unchecked INDEX", "confidence": 60,
             "grounding": {"status": "corrected", "reported": {"file": "a.rs", "start_line": 4, "end_line": 4}}},
            {"severity": "minor", "file": null, "start_line": null, "end_line": null, "title": "Leaky pool", "confidence": 70,
             "grounding": {"status": "unlocated", "reported": {"file": "src/gone.rs", "start_line": 2, "end_line": 2}}},
        ]});
        assert_eq!(dedupe_value(&mut scan), 2);
        let findings = scan["findings"].as_array().unwrap();
        assert_eq!(findings.len(), 2);
        assert_eq!(
            findings[0]["severity"], "major",
            "the more severe member leads"
        );
        assert_eq!(findings[0]["start_line"], 4);
        assert_eq!(findings[0]["grounding"]["status"], "corrected");
        assert_eq!(
            findings[0]["confidence"], 90,
            "the highest confidence, as written"
        );
        assert_eq!(findings[1]["title"], "Leaky pool");
        assert_eq!(findings[1]["grounding"]["reported"]["start_line"], 1);
        assert_eq!(findings[1]["confidence"], 70);

        let mut clean = json!({"findings": [{"severity": "minor", "file": null, "title": "a"}]});
        let before = clean.clone();
        assert_eq!(dedupe_value(&mut clean), 0);
        assert_eq!(clean, before);
        assert_eq!(dedupe_value(&mut json!({"summary": "no findings key"})), 0);
    }
}
