//! The "comments" contract ([`ProtocolId::Comments`]): what a free-form agent posts on a pull
//! request — replies to existing review threads, new inline comments, new top-level comments —
//! delivered in its final `<output>` block (P5).
//!
//! Canonical shape (all three arrays required in the emitted value):
//! `{"threadReplies": [{"commentId", "body"}], "newInlineComments": [{"path", "line", "body"}],
//! "topLevelComments": [{"body"}]}`.
//!
//! Tolerated on input ([`TOLERANCE`]), always emitted canonically:
//! - `comment_id` for `commentId`; `comment` for `body` (in every item); `file` for `path`.
//!   Giving an alias *and* its canonical key in one object is rejected (which one is meant?).
//! - `lineRange` when `line` is absent: its first number (`"120-135"`, `"L120"`, `[120, 135]`,
//!   or a plain number). When `line` is present it wins and `lineRange` is ignored.
//! - A missing (or `null`) array is empty.
//!
//! Anything else unknown is rejected with the list of allowed keys, never dropped: an
//! unrecognised `inlineComments` would otherwise lose every comment in it without a trace.
//! Whether a `commentId` names a real unresolved thread, and whether a `line` is commentable in
//! the diff, depends on the pull request; the publisher checks that (SPEC G2).

use std::num::NonZeroU32;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contracts::path::JsonPath;
use crate::contracts::strict::objects;
use crate::contracts::tolerance::{Alias, AliasKind, Tolerance};
use crate::contracts::violation::Violation;
use crate::contracts::{JsonContract, Text, generate_schema};
use crate::{DiagnosticCode, Diagnostics, Language, ProtocolId};

/// What to post on the pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Comments {
    /// Replies to existing review threads.
    #[serde(rename = "threadReplies", deserialize_with = "objects")]
    pub thread_replies: Vec<ThreadReply>,
    /// New comments on one line of the diff.
    #[serde(rename = "newInlineComments", deserialize_with = "objects")]
    pub new_inline_comments: Vec<InlineComment>,
    /// New comments on the pull request as a whole.
    #[serde(rename = "topLevelComments", deserialize_with = "objects")]
    pub top_level_comments: Vec<TopLevelComment>,
}

/// A reply to an existing review thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadReply {
    /// Id of the thread comment being answered, exactly as given in the review threads.
    #[serde(rename = "commentId")]
    pub comment_id: Text,
    /// The reply, in Markdown.
    pub body: Text,
}

/// A new comment on one line of the diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InlineComment {
    /// Repository-relative path of the file.
    pub path: Text,
    /// The line on the new side of the diff the comment belongs to.
    pub line: NonZeroU32,
    /// The comment, in Markdown.
    pub body: Text,
}

/// A new comment on the pull request as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopLevelComment {
    /// The comment, in Markdown.
    pub body: Text,
}

const fn synonym(within: &'static str, alias: &'static str, canonical: &'static str) -> Alias {
    Alias {
        within,
        alias,
        canonical,
        kind: AliasKind::Synonym,
    }
}

const ALIASES: &[Alias] = &[
    synonym("$.threadReplies[*]", "comment_id", "commentId"),
    synonym("$.threadReplies[*]", "comment", "body"),
    synonym("$.newInlineComments[*]", "file", "path"),
    Alias {
        within: "$.newInlineComments[*]",
        alias: "lineRange",
        canonical: "line",
        kind: AliasKind::Fallback(first_line),
    },
    synonym("$.newInlineComments[*]", "comment", "body"),
    synonym("$.topLevelComments[*]", "comment", "body"),
];

/// What the comments contract tolerates on input.
pub const TOLERANCE: Tolerance = Tolerance {
    aliases: ALIASES,
    missing_arrays_are_empty: true,
};

/// The first line number of a `lineRange`: the first run of digits of a string (`"120-135"`,
/// `"L120"`), the first element of an array, or the number itself. A number that is not a valid
/// line (zero, negative, fractional, too large) is passed on for the schema to report at
/// `lineRange`, except a zero written inside a string, which is reported here so the message
/// quotes what the model wrote.
fn first_line(range: &Value) -> Result<Value, String> {
    const EXPECTED: &str = "expected \"lineRange\" to start with a positive line number, such as \"120-135\", \"L120\" or [120, 135] (or give \"line\")";
    let number = match range {
        Value::Number(_) => Some(range.clone()),
        Value::Array(items) => items.first().filter(|v| v.is_number()).cloned(),
        Value::String(s) => {
            let digits: String = s
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            match digits.parse::<u64>() {
                Ok(0) => None,
                Ok(n) => Some(Value::from(n)),
                Err(_) if !digits.is_empty() => Some(Value::from(u64::MAX)),
                Err(_) => None,
            }
        }
        _ => None,
    };
    number.ok_or_else(|| EXPECTED.to_owned())
}

impl JsonContract for Comments {
    const PROTOCOL: ProtocolId = ProtocolId::Comments;

    fn check(&self, out: &mut Vec<Violation>) {
        for (i, c) in self.new_inline_comments.iter().enumerate() {
            if let Some(problem) = crate::location::repository_path_problem(&c.path) {
                out.push(Violation::at_value(
                    DiagnosticCode::ConstraintViolation,
                    JsonPath::root()
                        .key("newInlineComments")
                        .index(i)
                        .key("path"),
                    format!("\"path\" must be {problem}"),
                ));
            }
        }
    }

    fn schema() -> &'static Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(generate_schema::<Comments>)
    }

    fn example(language: Language) -> Self {
        let t = |en, zh| Text::known(language.pick(en, zh));
        Comments {
            thread_replies: vec![ThreadReply {
                comment_id: Text::known("PRRC_kwDOAbc123"),
                body: t(
                    "Fixed in the latest commit: the retry loop now sends an idempotency key.",
                    "已在最新提交中修复：重试循环现在会发送幂等键。",
                ),
            }],
            new_inline_comments: vec![InlineComment {
                path: Text::known("src/webhook/sender.rs"),
                line: NonZeroU32::MIN.saturating_add(41),
                body: t(
                    "This timeout is shorter than the receiver's processing time; consider 30 s.",
                    "这个超时比接收方的处理时间短，建议改为 30 秒。",
                ),
            }],
            top_level_comments: Vec::new(),
        }
    }

    fn rules(language: Language) -> &'static [&'static str] {
        match language {
            Language::En => &[
                "\"commentId\" must be the id of a review-thread comment you were given; reply only to those threads.",
                "\"path\" is repository-relative; \"line\" is a positive line number on the new side of the diff.",
            ],
            Language::ZhCn => &[
                "\"commentId\" 必须是提供给你的评审线程评论的 id；只回复这些线程。",
                "\"path\" 是相对于仓库根目录的路径；\"line\" 是 diff 新版本一侧的正整数行号。",
            ],
        }
    }
}

/// Parses a comments response: the final `<output>` block, aliases tolerated, canonical result.
pub fn parse(response: &str) -> Result<Comments, Diagnostics> {
    super::parse::<Comments>(response, &TOLERANCE)
}
