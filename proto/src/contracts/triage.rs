//! Triage (SPEC S1, P4): the cheap first stage that decides whether a pull request needs the full
//! review at all.
//!
//! Schema: exactly `{"review": boolean, "reason": non-empty string}`. Triage is only an
//! optimisation: when its output is still invalid after repair, the pipeline continues with
//! [`Triage::fallback`] (SPEC S5).

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Diagnostics, Language, ProtocolId};

use super::{JsonContract, Text, generate_schema};

/// The reason the pipeline records when triage output stayed invalid after repair (SPEC S5).
pub const TRIAGE_FALLBACK_REASON: &str =
    "Triage did not return structured output; continuing with review by default.";

/// Whether a pull request needs a full review, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Triage {
    /// Whether the pull request needs a full review; true when in doubt.
    pub review: bool,
    /// Why this pull request does or does not need review.
    pub reason: Text,
}

impl Triage {
    /// The decision used when triage output is still invalid after repair: review, and say why.
    pub fn fallback() -> Triage {
        Triage {
            review: true,
            reason: Text::known(TRIAGE_FALLBACK_REASON),
        }
    }
}

impl JsonContract for Triage {
    const PROTOCOL: ProtocolId = ProtocolId::Triage;

    fn schema() -> &'static Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(generate_schema::<Triage>)
    }

    fn example(language: Language) -> Self {
        Triage {
            review: true,
            reason: Text::known(language.pick(
                "Changes how the session middleware refreshes expired tokens; behaviour changes in authentication need review.",
                "修改了会话中间件刷新过期令牌的方式；认证相关的行为变化需要评审。",
            )),
        }
    }

    fn rules(language: Language) -> &'static [&'static str] {
        match language {
            Language::En => &[
                "\"review\" is a JSON boolean (true or false), not a string; when unsure, use true.",
            ],
            Language::ZhCn => {
                &["\"review\" 是 JSON 布尔值（true 或 false），不是字符串；拿不准时用 true。"]
            }
        }
    }
}

/// Parses a triage response.
pub fn parse(response: &str) -> Result<Triage, Diagnostics> {
    super::parse::<Triage>(response)
}
