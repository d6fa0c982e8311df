//! Summary (SPEC S1, P4): the required stage that describes a pull request for the reviewers that
//! run after it, so each reviewer sees the whole change even when it only reviews a shard.
//!
//! Schema: `{"summary": text, "change_type": enum, "risk": "low"|"medium"|"high",
//! "files": [{"path": text, "summary": text}], "focus_areas": [text]}`, all required.
//! Rule beyond the schema: file paths are unique.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DiagnosticCode, Diagnostics, Language, ProtocolId};

use super::extract::preview;
use super::path::JsonPath;
use super::strict::objects;
use super::violation::Violation;
use super::{JsonContract, Text, duplicates, generate_schema};
use crate::names::string_enum;

/// An overview of a pull request for its reviewers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Markdown overview of the change: what it does and why, in a few sentences or bullets.
    pub summary: Text,
    /// The main kind of change.
    pub change_type: ChangeType,
    /// How risky merging the change is.
    pub risk: Risk,
    /// One entry per changed file, each path once.
    #[serde(deserialize_with = "objects")]
    pub files: Vec<FileSummary>,
    /// What reviewers should examine most closely, as short phrases; may be empty.
    pub focus_areas: Vec<Text>,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSummary {
    /// Repository-relative path, as in the diff.
    pub path: Text,
    /// What changes in this file, in one or two sentences.
    pub summary: Text,
}

/// The main kind of change: feature (new behaviour), fix (corrects a bug), refactor (same behaviour, new structure), performance, docs, test, build (build, CI or dependencies), chore (other maintenance), mixed (several kinds, none main).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeType {
    Feature,
    Fix,
    Refactor,
    Performance,
    Docs,
    Test,
    Build,
    Chore,
    Mixed,
}

string_enum!(ChangeType {
    Feature => "feature",
    Fix => "fix",
    Refactor => "refactor",
    Performance => "performance",
    Docs => "docs",
    Test => "test",
    Build => "build",
    Chore => "chore",
    Mixed => "mixed",
});

/// How risky merging the change is: low (local and contained), medium (shared code or behaviour users notice), high (security, data, money, concurrency or a wide blast radius).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
}

string_enum!(Risk {
    Low => "low",
    Medium => "medium",
    High => "high",
});

impl JsonContract for Summary {
    const PROTOCOL: ProtocolId = ProtocolId::Summary;

    fn schema() -> &'static Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(generate_schema::<Summary>)
    }

    fn check(&self, out: &mut Vec<Violation>) {
        unique_paths(
            self.files
                .iter()
                .enumerate()
                .map(|(i, f)| (i, f.path.as_str())),
            out,
        );
    }

    fn check_value(value: &Value, out: &mut Vec<Violation>) {
        let Some(files) = value.get("files").and_then(Value::as_array) else {
            return;
        };
        let paths = files.iter().enumerate().filter_map(|(i, f)| {
            let path = f.get("path")?.as_str()?;
            (!path.trim().is_empty()).then_some((i, path))
        });
        unique_paths(paths, out);
    }

    fn example(language: Language) -> Self {
        let t = |en, zh| Text::known(language.pick(en, zh));
        Summary {
            summary: t(
                "Adds retry with exponential backoff to the webhook sender and records each attempt.\n\n- New `RetryPolicy` type\n- Sender retries 5xx and timeouts, not 4xx",
                "为 webhook 发送器加入指数退避重试，并记录每次尝试。\n\n- 新增 `RetryPolicy` 类型\n- 对 5xx 和超时重试，4xx 不重试",
            ),
            change_type: ChangeType::Feature,
            risk: Risk::Medium,
            files: vec![
                FileSummary {
                    path: Text::known("src/webhook/sender.rs"),
                    summary: t(
                        "Wraps delivery in a retry loop driven by RetryPolicy.",
                        "用 RetryPolicy 驱动的重试循环包装投递逻辑。",
                    ),
                },
                FileSummary {
                    path: Text::known("src/webhook/retry.rs"),
                    summary: t(
                        "New RetryPolicy with capped exponential backoff and jitter.",
                        "新增 RetryPolicy：带上限的指数退避与随机抖动。",
                    ),
                },
            ],
            focus_areas: vec![
                t(
                    "whether non-idempotent deliveries can be sent twice",
                    "非幂等的投递是否可能被重复发送",
                ),
                t(
                    "the backoff cap and total retry time",
                    "退避上限与总重试时长",
                ),
            ],
        }
    }

    fn rules(language: Language) -> &'static [&'static str] {
        match language {
            Language::En => &[
                "List each changed file once in \"files\"; \"focus_areas\" may be an empty array.",
            ],
            Language::ZhCn => &["\"files\" 中每个变更文件只列一次；\"focus_areas\" 可以是空数组。"],
        }
    }
}

fn unique_paths<'a>(paths: impl Iterator<Item = (usize, &'a str)>, out: &mut Vec<Violation>) {
    for (first, later, path) in duplicates(paths) {
        out.push(Violation::at_value(
            DiagnosticCode::ConstraintViolation,
            JsonPath::root().key("files").index(later).key("path"),
            format!(
                "\"{}\" is already listed at files[{first}]; list each changed file once",
                preview(path, 60)
            ),
        ));
    }
}

/// Parses a summary response.
pub fn parse(response: &str) -> Result<Summary, Diagnostics> {
    super::parse::<Summary>(response)
}
