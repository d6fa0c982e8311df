//! Reviewer (SPEC S1, P4): one reviewer's candidate findings over its shard of the changed files.
//! The validator confirms or rejects them afterwards.
//!
//! Schema: `{"findings": [{"severity", "file", "start_line", "end_line", "quote", "title",
//! "description", "suggestion", "confidence"}], "files_reviewed": [text]}`, every property
//! required (nullable ones as `null`). Rules beyond the schema, as P1 rule 4: `file: null`
//! requires both lines `null` and `quote: null` (a quote needs a file); a file finding requires
//! both lines, positive, with `start_line <= end_line`. The quote is what grounding checks a
//! location against, so it is asked for as whole lines copied verbatim.

use std::num::NonZeroU32;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DiagnosticCode, Diagnostics, Language, ProtocolId};

use super::path::JsonPath;
use super::strict::{NullOr, objects};
use super::violation::Violation;
use super::{Confidence, JsonContract, Severity, Text, generate_schema};

/// One reviewer's findings over the files it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewerReport {
    /// Every problem found, most severe first; an empty array when there is none.
    #[serde(deserialize_with = "objects")]
    pub findings: Vec<Finding>,
    /// Repository-relative paths of the files actually reviewed.
    pub files_reviewed: Vec<Text>,
}

/// One problem in the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// How serious the problem is.
    pub severity: Severity,
    /// Repository-relative path of the file, or null for a finding about the change as a whole.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<Text>")]
    pub file: Option<Text>,
    /// First line of the problem on the new side of the diff; null exactly when file is null.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<NonZeroU32>")]
    pub start_line: Option<NonZeroU32>,
    /// Last line of the problem, not before start_line; null exactly when file is null.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<NonZeroU32>")]
    pub end_line: Option<NonZeroU32>,
    // One line: a doc comment's line breaks would become line breaks in the schema's description.
    /// The exact code at start_line..end_line that shows the problem, copied verbatim from the file (whole lines), or null for a finding without a file.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<Text>")]
    pub quote: Option<Text>,
    /// Short title of the problem.
    pub title: Text,
    /// Evidence and impact: what is wrong, where, and what happens because of it.
    pub description: Text,
    /// A concrete fix (text or code), or null.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<Text>")]
    pub suggestion: Option<Text>,
    /// How sure the reviewer is that the problem is real, from 0 to 1.
    pub confidence: Confidence,
}

impl JsonContract for ReviewerReport {
    const PROTOCOL: ProtocolId = ProtocolId::Reviewer;

    fn schema() -> &'static Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(generate_schema::<ReviewerReport>)
    }

    fn check(&self, out: &mut Vec<Violation>) {
        for (i, f) in self.findings.iter().enumerate() {
            path_rule(i, f.file.as_deref(), out);
            quote_rule(i, f.file.is_some(), f.quote.is_some(), out);
            location_rule(
                i,
                f.file.is_some(),
                f.start_line.map(NonZeroU32::get),
                f.end_line.map(NonZeroU32::get),
                out,
            );
        }
    }

    fn check_value(value: &Value, out: &mut Vec<Violation>) {
        let Some(findings) = value.get("findings").and_then(Value::as_array) else {
            return;
        };
        for (i, finding) in findings.iter().enumerate() {
            // Only findings whose three location fields are well-typed; the schema walker
            // reports the others, and guessing here would only repeat it.
            let has_file = match finding.get("file") {
                Some(Value::Null) => false,
                Some(Value::String(s)) if !s.trim().is_empty() => {
                    path_rule(i, Some(s), out);
                    true
                }
                _ => continue,
            };
            // Only a well-typed quote; a blank or non-string one is the schema walker's to report.
            if let Some(Value::String(q)) = finding.get("quote")
                && !q.trim().is_empty()
            {
                quote_rule(i, has_file, true, out);
            }
            let line = |key: &str| match finding.get(key) {
                Some(Value::Null) => Some(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n >= 1)
                    .map(Some),
                None => None,
            };
            let (Some(start), Some(end)) = (line("start_line"), line("end_line")) else {
                continue;
            };
            location_rule(i, has_file, start, end, out);
        }
    }

    fn example(language: Language) -> Self {
        let t = |en, zh| Text::known(language.pick(en, zh));
        ReviewerReport {
            findings: vec![
                Finding {
                    severity: Severity::Major,
                    file: Some(Text::known("src/webhook/sender.rs")),
                    start_line: NonZeroU32::new(42),
                    end_line: NonZeroU32::new(48),
                    quote: Some(Text::known(
                        "    loop {\n        match self.client.post(&url).json(&delivery).send().await {\n            Ok(response) => return Ok(response),\n            Err(e) if e.is_timeout() && attempt < self.max_retries => {\n                attempt += 1;\n            }\n            Err(e) => return Err(e.into()),",
                    )),
                    title: t(
                        "Retries re-send non-idempotent deliveries",
                        "重试会重复发送非幂等的投递",
                    ),
                    description: t(
                        "The retry loop resends after a timeout even when the receiver may already have processed the request, so a payment webhook can be delivered twice.",
                        "超时后重试循环会重新发送，而接收方可能已经处理过该请求，因此支付类 webhook 可能被投递两次。",
                    ),
                    suggestion: Some(t(
                        "Send an Idempotency-Key header derived from the delivery id.",
                        "发送由投递 id 派生的 Idempotency-Key 请求头。",
                    )),
                    confidence: Confidence::known(0.8),
                },
                Finding {
                    severity: Severity::Suggestion,
                    file: None,
                    start_line: None,
                    end_line: None,
                    quote: None,
                    title: t("No test covers the retry path", "没有测试覆盖重试路径"),
                    description: t(
                        "The change adds retry behaviour but no test exercises a failing delivery.",
                        "本次变更加入了重试行为，但没有测试覆盖投递失败的情况。",
                    ),
                    suggestion: None,
                    confidence: Confidence::known(0.6),
                },
            ],
            files_reviewed: vec![
                Text::known("src/webhook/sender.rs"),
                Text::known("src/webhook/retry.rs"),
            ],
        }
    }

    fn rules(language: Language) -> &'static [&'static str] {
        match language {
            Language::En => &[
                "Location: when \"file\" is null, \"start_line\" and \"end_line\" must be null too; when \"file\" is set, both lines must be positive integers with start_line <= end_line.",
                "Quote: when \"file\" is set, \"quote\" is the code at start_line..end_line copied exactly from the file, whole lines with their indentation, so the location can be checked; when \"file\" is null, \"quote\" must be null.",
                "Report each problem once; use an empty \"findings\" array when there is none.",
            ],
            Language::ZhCn => &[
                "位置规则：\"file\" 为 null 时，\"start_line\" 和 \"end_line\" 也必须为 null；\"file\" 有值时，两个行号都必须是正整数，且 start_line <= end_line。",
                "引用规则：\"file\" 有值时，\"quote\" 是从该文件中原样复制的 start_line..end_line 处的代码（整行，保留缩进），以便核对位置；\"file\" 为 null 时，\"quote\" 必须为 null。",
                "每个问题只报告一次；没有问题时 \"findings\" 为空数组。",
            ],
        }
    }
}

/// Finding `i`'s file must lie inside the repository (as the envelopes' FILE).
fn path_rule(i: usize, file: Option<&str>, out: &mut Vec<Violation>) {
    if let Some(problem) = file.and_then(crate::location::repository_path_problem) {
        out.push(Violation::at_value(
            DiagnosticCode::ConstraintViolation,
            JsonPath::root().key("findings").index(i).key("file"),
            format!("\"file\" must be {problem}"),
        ));
    }
}

/// Finding `i` may quote code only when it names the file the code is in.
fn quote_rule(i: usize, has_file: bool, has_quote: bool, out: &mut Vec<Violation>) {
    if has_quote && !has_file {
        out.push(Violation::at_value(
            DiagnosticCode::ConstraintViolation,
            JsonPath::root().key("findings").index(i).key("quote"),
            "a finding without a file (\"file\": null) must have \"quote\": null; set \"file\" to the path the quoted code is in, or set \"quote\" to null",
        ));
    }
}

/// P1 rule 4 for finding `i`.
fn location_rule(
    i: usize,
    has_file: bool,
    start: Option<u32>,
    end: Option<u32>,
    out: &mut Vec<Violation>,
) {
    let at = |key: &str| JsonPath::root().key("findings").index(i).key(key);
    if !has_file {
        if let Some(key) = [("start_line", start), ("end_line", end)]
            .into_iter()
            .find_map(|(key, line)| line.map(|_| key))
        {
            out.push(Violation::at_value(
                DiagnosticCode::ConstraintViolation,
                at(key),
                "a finding without a file (\"file\": null) must have \"start_line\": null and \"end_line\": null; set \"file\" to the path the lines belong to, or set both lines to null",
            ));
        }
        return;
    }
    for (key, line) in [("start_line", start), ("end_line", end)] {
        if line.is_none() {
            out.push(Violation::at_value(
                DiagnosticCode::ConstraintViolation,
                at(key),
                format!(
                    "a finding with a file needs \"start_line\" and \"end_line\" as positive integers, but \"{key}\" is null; give the line, or set \"file\" to null for a finding about the whole change"
                ),
            ));
        }
    }
    if let (Some(start), Some(end)) = (start, end)
        && start > end
    {
        out.push(Violation::at_value(
                DiagnosticCode::ConstraintViolation,
                at("end_line"),
                format!(
                    "\"end_line\" ({end}) is before \"start_line\" ({start}); end_line must be greater than or equal to start_line"
                ),
            ));
    }
}

/// Parses a reviewer response.
pub fn parse(response: &str) -> Result<ReviewerReport, Diagnostics> {
    super::parse::<ReviewerReport>(response)
}
