//! A sharded scan's answers merged into one result (SPEC S4, X2): the shards' P3 values in
//! stage order, findings de-duplicated first by their stable fingerprint (the one publication
//! uses) and then as any single answer is (`merge::dedupe_value`: same place, similar title),
//! the overall score the shards' scores weighted by their estimated tokens, and the summaries
//! kept per shard. Pure.

use serde_json::{Map, Value, json};
use verdict_proto::grounding::{self, NOTE_KEY};

use crate::merge;

/// One shard's valid answer.
#[derive(Debug, Clone, Copy)]
pub struct ShardAnswer<'a> {
    pub stage: &'a str,
    pub files: usize,
    /// The shard's estimated tokens: its weight in the overall score.
    pub tokens: u64,
    /// The canonical P3 value (with grounding notes).
    pub value: &'a Value,
}

/// The merged value and how many findings were folded into another.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub value: Value,
    pub merged_findings: usize,
}

/// A finding's stable identity (SPEC X2): its grounding note's fingerprint when it has a plain
/// one, else the same computation over its file (or the file it reported) and title.
pub fn fingerprint(finding: &Value) -> String {
    let note = finding.get(NOTE_KEY);
    if let Some(fp) = note
        .and_then(|n| n.get("fingerprint"))
        .and_then(Value::as_str)
        && !fp.is_empty()
        && fp.len() <= 64
        && fp.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return fp.to_owned();
    }
    let file = finding
        .get("file")
        .and_then(Value::as_str)
        .or_else(|| {
            note.and_then(|n| n.get("reported"))
                .and_then(|r| r.get("file"))
                .and_then(Value::as_str)
        })
        .unwrap_or("");
    let title = finding.get("title").and_then(Value::as_str).unwrap_or("");
    grounding::fingerprint(file, title, None)
}

/// The weighted mean of the shards' scores (weights: estimated tokens, at least 1), rounded to
/// the nearest integer and kept within 1–100; `None` when no shard has a score.
pub fn overall_score(answers: &[ShardAnswer<'_>]) -> Option<u64> {
    let scored: Vec<(u64, u64)> = answers
        .iter()
        .filter_map(|a| {
            let score = a.value.get("overall_score").and_then(Value::as_u64)?;
            Some((score, a.tokens.max(1)))
        })
        .collect();
    let weight: u128 = scored.iter().map(|&(_, w)| u128::from(w)).sum();
    if weight == 0 {
        return None;
    }
    let total: u128 = scored
        .iter()
        .map(|&(s, w)| u128::from(s) * u128::from(w))
        .sum();
    let mean = (total * 2 + weight) / (weight * 2);
    Some(u64::try_from(mean).unwrap_or(100).clamp(1, 100))
}

/// Merges the answers (in the order given). A single answer passes through with only its
/// repeats folded, as an unsharded scan's does.
pub fn merge(answers: &[ShardAnswer<'_>]) -> Merged {
    if let [one] = answers {
        let mut value = one.value.clone();
        let merged = dedupe_by_fingerprint(&mut value) + merge::dedupe_value(&mut value);
        return Merged {
            value,
            merged_findings: merged,
        };
    }
    let mut findings: Vec<Value> = Vec::new();
    let mut summaries: Vec<String> = Vec::new();
    let mut shards: Vec<Value> = Vec::new();
    for a in answers {
        if let Some(list) = a.value.get("findings").and_then(Value::as_array) {
            findings.extend(list.iter().cloned());
        }
        let summary = a.value.get("summary").and_then(Value::as_str).unwrap_or("");
        summaries.push(format!(
            "{} ({} files): {}",
            a.stage,
            a.files,
            summary.trim()
        ));
        shards.push(json!({
            "stage": a.stage,
            "files": a.files,
            "tokens": a.tokens,
            "overall_score": a.value.get("overall_score").cloned().unwrap_or(Value::Null),
        }));
    }
    let mut value = Value::Object(Map::from_iter([
        ("version".to_owned(), json!(1)),
        (
            "overall_score".to_owned(),
            overall_score(answers).map_or(Value::Null, Value::from),
        ),
        ("summary".to_owned(), Value::String(summaries.join("\n\n"))),
        ("findings".to_owned(), Value::Array(findings)),
        ("shards".to_owned(), Value::Array(shards)),
    ]));
    let merged = dedupe_by_fingerprint(&mut value) + merge::dedupe_value(&mut value);
    Merged {
        value,
        merged_findings: merged,
    }
}

/// Drops every finding whose fingerprint an earlier one has, keeping the more severe of the two
/// in the earlier one's place. Returns how many were dropped.
fn dedupe_by_fingerprint(value: &mut Value) -> usize {
    let Some(findings) = value.get_mut("findings").and_then(Value::as_array_mut) else {
        return 0;
    };
    let rank = |f: &Value| match f.get("severity").and_then(Value::as_str) {
        Some("critical") => 0,
        Some("major") => 1,
        Some("minor") => 2,
        _ => 3,
    };
    let mut kept: Vec<(String, Value)> = Vec::with_capacity(findings.len());
    let mut dropped = 0;
    for f in findings.drain(..) {
        let fp = fingerprint(&f);
        match kept.iter_mut().find(|(k, _)| *k == fp) {
            Some((_, earlier)) => {
                if rank(&f) < rank(earlier) {
                    *earlier = f;
                }
                dropped += 1;
            }
            None => kept.push((fp, f)),
        }
    }
    *findings = kept.into_iter().map(|(_, f)| f).collect();
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(file: &str, line: u32, title: &str, severity: &str) -> Value {
        json!({"severity": severity, "category": "security", "file": file, "start_line": line,
               "end_line": line, "title": title, "description": "d", "suggestion": null,
               "confidence": 80})
    }

    fn answer(score: u64, findings: Vec<Value>) -> Value {
        json!({"version": 1, "overall_score": score, "summary": "s", "findings": findings})
    }

    #[test]
    fn the_score_is_weighted_by_shard_size() {
        let a = answer(90, vec![]);
        let b = answer(30, vec![]);
        let answers = [
            ShardAnswer {
                stage: "scan-1",
                files: 3,
                tokens: 300,
                value: &a,
            },
            ShardAnswer {
                stage: "scan-2",
                files: 1,
                tokens: 100,
                value: &b,
            },
        ];
        assert_eq!(overall_score(&answers), Some(75));
        assert_eq!(merge(&answers).value["overall_score"], 75);
    }

    #[test]
    fn a_finding_two_shards_report_is_listed_once_at_its_most_severe() {
        let a = answer(
            80,
            vec![
                finding("src/a.rs", 3, "SQL injection", "minor"),
                finding("src/b.rs", 9, "Unbounded loop", "major"),
            ],
        );
        let b = answer(
            70,
            vec![finding("src/a.rs", 3, "sql  injection!", "critical")],
        );
        let answers = [
            ShardAnswer {
                stage: "scan-1",
                files: 2,
                tokens: 10,
                value: &a,
            },
            ShardAnswer {
                stage: "scan-2",
                files: 2,
                tokens: 10,
                value: &b,
            },
        ];
        let m = merge(&answers);
        let findings = m.value["findings"].as_array().unwrap();
        assert_eq!(m.merged_findings, 1);
        assert_eq!(findings.len(), 2);
        assert_eq!(findings[0]["severity"], "critical");
        assert_eq!(findings[0]["file"], "src/a.rs");
        assert_eq!(m.value["shards"].as_array().unwrap().len(), 2);
        assert!(
            m.value["summary"]
                .as_str()
                .unwrap()
                .starts_with("scan-1 (2 files): s")
        );
    }
}
