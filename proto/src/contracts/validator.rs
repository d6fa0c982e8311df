//! Validator (SPEC S1, P4): confirms or rejects the reviewers' candidate findings, which the
//! scheduler numbered `F1`, `F2`, … before handing them over.
//!
//! Schema: `{"verdicts": [{"id": text, "verdict": "confirmed"|"rejected",
//! "severity": severity|null, "reason": text}]}`, every property required. Rules beyond the
//! schema: ids are unique; a rejected finding carries no severity override. Whether every id
//! given was answered, and only those, depends on the candidates, so the scheduler checks it.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DiagnosticCode, Diagnostics, Language, ProtocolId};

use super::extract::preview;
use super::path::JsonPath;
use super::strict::{NullOr, objects};
use super::violation::Violation;
use super::{JsonContract, Severity, Text, duplicates, generate_schema};
use crate::names::string_enum;

/// The validator's verdict on each candidate finding it was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidatorReport {
    /// One verdict per candidate finding, each id once.
    #[serde(deserialize_with = "objects")]
    pub verdicts: Vec<Verdict>,
}

/// The verdict on one candidate finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// The candidate finding's id exactly as given, such as "F1".
    pub id: Text,
    /// Whether the finding holds up against the code.
    pub verdict: VerdictKind,
    /// A corrected severity for a confirmed finding, or null to keep the reviewer's; always null for a rejected finding.
    #[serde(deserialize_with = "Option::deserialize")]
    #[schemars(with = "NullOr<Severity>")]
    pub severity: Option<Severity>,
    /// The evidence for the verdict.
    pub reason: Text,
}

/// Whether a finding holds up: confirmed (real and correctly described) or rejected (not a real problem, already handled, or not supported by the code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    Confirmed,
    Rejected,
}

string_enum!(VerdictKind {
    Confirmed => "confirmed",
    Rejected => "rejected",
});

impl JsonContract for ValidatorReport {
    const PROTOCOL: ProtocolId = ProtocolId::Validator;

    fn schema() -> &'static Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(generate_schema::<ValidatorReport>)
    }

    fn check(&self, out: &mut Vec<Violation>) {
        unique_ids(
            self.verdicts
                .iter()
                .enumerate()
                .map(|(i, v)| (i, v.id.as_str())),
            out,
        );
        for (i, v) in self.verdicts.iter().enumerate() {
            if v.verdict == VerdictKind::Rejected && v.severity.is_some() {
                out.push(rejected_with_severity(i));
            }
        }
    }

    fn check_value(value: &Value, out: &mut Vec<Violation>) {
        let Some(verdicts) = value.get("verdicts").and_then(Value::as_array) else {
            return;
        };
        let ids = verdicts.iter().enumerate().filter_map(|(i, v)| {
            let id = v.get("id")?.as_str()?;
            (!id.trim().is_empty()).then_some((i, id))
        });
        unique_ids(ids, out);
        for (i, v) in verdicts.iter().enumerate() {
            let rejected = v.get("verdict").and_then(Value::as_str) == Some("rejected");
            let severity = v
                .get("severity")
                .and_then(Value::as_str)
                .is_some_and(|s| Severity::ALL.iter().any(|k| k.as_str() == s));
            if rejected && severity {
                out.push(rejected_with_severity(i));
            }
        }
    }

    fn example(language: Language) -> Self {
        let t = |en, zh| Text::known(language.pick(en, zh));
        ValidatorReport {
            verdicts: vec![
                Verdict {
                    id: Text::known("F1"),
                    verdict: VerdictKind::Confirmed,
                    severity: Some(Severity::Critical),
                    reason: t(
                        "sender.rs:42-48 resends after a timeout without an idempotency key, and the payment handler charges on every delivery.",
                        "sender.rs:42-48 在超时后不带幂等键重新发送，而支付处理器每次投递都会扣款。",
                    ),
                },
                Verdict {
                    id: Text::known("F2"),
                    verdict: VerdictKind::Rejected,
                    severity: None,
                    reason: t(
                        "tests/webhook_retry.rs already covers a failing delivery.",
                        "tests/webhook_retry.rs 已经覆盖了投递失败的情况。",
                    ),
                },
            ],
        }
    }

    fn rules(language: Language) -> &'static [&'static str] {
        match language {
            Language::En => &[
                "Give exactly one verdict per candidate finding, using its id exactly as given; each id appears once.",
                "\"severity\" only overrides the severity of a confirmed finding; use null to keep it, and always null for a rejected finding.",
            ],
            Language::ZhCn => &[
                "每个候选问题恰好给出一个裁决，id 必须与给定的完全一致；每个 id 只出现一次。",
                "\"severity\" 仅用于修正已确认问题的严重程度；保持原值时写 null，被驳回的问题一律写 null。",
            ],
        }
    }
}

fn unique_ids<'a>(ids: impl Iterator<Item = (usize, &'a str)>, out: &mut Vec<Violation>) {
    for (first, later, id) in duplicates(ids) {
        out.push(Violation::at_value(
            DiagnosticCode::ConstraintViolation,
            JsonPath::root().key("verdicts").index(later).key("id"),
            format!(
                "duplicate id \"{}\": verdicts[{first}] already has it; give exactly one verdict per candidate finding",
                preview(id, 40)
            ),
        ));
    }
}

fn rejected_with_severity(i: usize) -> Violation {
    Violation::at_value(
        DiagnosticCode::ConstraintViolation,
        JsonPath::root().key("verdicts").index(i).key("severity"),
        "a rejected finding takes no severity; set \"severity\" to null, or confirm the finding",
    )
}

/// Parses a validator response.
pub fn parse(response: &str) -> Result<ValidatorReport, Diagnostics> {
    super::parse::<ValidatorReport>(response)
}
