//! The Anthropic Messages client (SPEC E6): maps the provider-neutral chat types to
//! `POST {base_url}/v1/messages` and back. The call itself (transport, classification including
//! 529 "overloaded" as a rate limit, redaction) is shared with the OpenAI client in
//! [`super::api`].
//!
//! # What is sent
//! - headers `x-api-key` (when a key is configured) and `anthropic-version: 2023-06-01`;
//! - `model`; `max_tokens` (required by the API: the request's, else the settings', else 4096);
//!   `temperature` when the request or the settings give one;
//! - `system`: every system message's text, in order, joined by a blank line (the API has one
//!   top-level system prompt; system messages are never sent as turns);
//! - `messages`: user text as `text` blocks; an assistant turn as its text block (if any) then one
//!   `tool_use` block per call, `input` being the call's arguments parsed as JSON — arguments that
//!   are not a JSON object (a model's malformed call) are sent as `{}` with a warning logged, since
//!   the API accepts only objects and the tool already answered that call with an error; tool
//!   results as `tool_result` blocks in a user turn. Consecutive messages that land in the same
//!   role are merged into one turn (the API wants tool results for one assistant turn together,
//!   first in the next user message, and text after them), and empty text blocks, which the API
//!   rejects, are left out;
//! - `tools` (`[{name, description, input_schema}]`) and `tool_choice` (`{"type": "auto"}` or
//!   `{"type": "none"}`) only when the tool list is not empty;
//! - a JSON Schema decoding constraint (calls without tools only) as one tool whose
//!   `input_schema` is the contract, forced with `tool_choice: {"type": "tool", name}`: the
//!   answer is that call's `input`, serialised as the response text.
//!
//! # What is read
//! `content` blocks (`text` concatenated in order; `tool_use` → a tool call whose arguments are
//! `input` serialised back to JSON text; other block types such as `thinking` ignored),
//! `stop_reason` (`end_turn`/`stop_sequence` → stop, `max_tokens` → length, `tool_use` → tool
//! calls, anything else verbatim as `Other`) and `usage` (`input_tokens` plus any cache creation
//! and cache read tokens, which Anthropic counts separately but bills as input; `output_tokens`).

use reqwest::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use verdict_proto::contracts::contract_text::InReadingOrder;

use super::api::{ApiProvider, ServerFacts, WireFormat};
use super::classify::Flavor;
use super::{
    ChatRequest, ChatResponse, FinishReason, OutputConstraint, ProviderKind, ProviderSettings,
    Role, StructuredOutput, TokenUsage, ToolCall, ToolChoice,
};

/// The Messages API version verdict is written against.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when neither the request nor the settings give one: the API requires a value.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Anthropic Messages wire format.
#[derive(Debug)]
pub struct Anthropic;

/// An Anthropic Messages provider.
pub type AnthropicProvider = ApiProvider<Anthropic>;

impl WireFormat for Anthropic {
    const KIND: ProviderKind = ProviderKind::Anthropic;
    const PATH: &'static str = "messages";
    const FLAVOR: Flavor = Flavor::Anthropic;
    type Body<'a> = WireRequest<'a>;

    fn request_body<'a>(
        request: &'a ChatRequest,
        settings: &ProviderSettings,
    ) -> Result<WireRequest<'a>, String> {
        request_body(request, settings)
    }

    fn fixed_headers() -> Vec<(HeaderName, HeaderValue)> {
        vec![(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        )]
    }

    fn credential(key: &str) -> (HeaderName, String) {
        (HeaderName::from_static("x-api-key"), key.to_owned())
    }

    fn parse_response(body: &[u8]) -> Result<ChatResponse, String> {
        parse_response(body)
    }

    /// The forced contract tool's call is the answer: its input becomes the text, as an
    /// OpenAI-compatible server's constrained answer is.
    fn constrained_answer(request: &ChatRequest, mut response: ChatResponse) -> ChatResponse {
        let Some(OutputConstraint::JsonSchema { name, .. }) = &request.constraint else {
            return response;
        };
        if let Some(i) = response.tool_calls.iter().position(|c| &c.name == name) {
            let call = response.tool_calls.remove(i);
            response.content = call.arguments;
            response.tool_calls.clear();
            response.finish = match response.finish {
                FinishReason::ToolCalls => FinishReason::Stop,
                other => other,
            };
        }
        response
    }

    fn auto_mode(_facts: &ServerFacts) -> StructuredOutput {
        StructuredOutput::Tool
    }
}

#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        /// Omitted when empty: the field is optional, an empty result is still a result.
        #[serde(skip_serializing_if = "str::is_empty")]
        content: &'a str,
    },
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: InReadingOrder<'a>,
}

#[derive(Debug, Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The tool a `tool` choice forces.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// What the forced tool of a JSON constraint tells the model.
const CONTRACT_TOOL_DESCRIPTION: &str =
    "Give your final answer as this tool's input. Its schema is the output contract.";

/// The request body; `Err` names a conversation this format cannot express (a caller bug).
fn request_body<'a>(
    request: &'a ChatRequest,
    settings: &ProviderSettings,
) -> Result<WireRequest<'a>, String> {
    let mut system: Vec<&str> = Vec::new();
    let mut messages: Vec<WireMessage<'a>> = Vec::new();
    for (index, m) in request.messages.iter().enumerate() {
        match m.role {
            Role::System => {
                if !m.content.is_empty() {
                    system.push(&m.content);
                }
            }
            Role::User => push_blocks(&mut messages, "user", text_block(&m.content)),
            Role::Assistant => {
                let mut blocks = text_block(&m.content);
                for call in &m.tool_calls {
                    blocks.push(WireBlock::ToolUse {
                        id: &call.id,
                        name: &call.name,
                        input: tool_input(call, &settings.name),
                    });
                }
                push_blocks(&mut messages, "assistant", blocks);
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().ok_or_else(|| {
                    format!(
                        "message {index} is a tool result without the id of the call it answers"
                    )
                })?;
                push_blocks(
                    &mut messages,
                    "user",
                    vec![WireBlock::ToolResult {
                        tool_use_id: id,
                        content: &m.content,
                    }],
                );
            }
        }
    }
    let has_tools = !request.tools.is_empty();
    let (tools, tool_choice) = match &request.constraint {
        Some(_) if has_tools => {
            return Err("a decoding constraint was set on a call that offers tools".to_owned());
        }
        Some(OutputConstraint::Grammar { .. }) => {
            return Err(
                "the Messages API takes no grammar; use structured_output = \"tool\"".to_owned(),
            );
        }
        Some(OutputConstraint::JsonSchema { name, schema }) => (
            Some(vec![WireTool {
                name,
                description: CONTRACT_TOOL_DESCRIPTION,
                input_schema: InReadingOrder(schema),
            }]),
            Some(WireToolChoice {
                kind: "tool",
                name: Some(name),
            }),
        ),
        None => (
            has_tools.then(|| {
                request
                    .tools
                    .iter()
                    .map(|t| WireTool {
                        name: &t.name,
                        description: &t.description,
                        input_schema: InReadingOrder(&t.parameters),
                    })
                    .collect()
            }),
            has_tools.then_some(WireToolChoice {
                kind: match request.tool_choice {
                    ToolChoice::Auto => "auto",
                    ToolChoice::None => "none",
                },
                name: None,
            }),
        ),
    };
    Ok(WireRequest {
        model: &request.model,
        max_tokens: request
            .max_tokens
            .or(settings.max_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        tools,
        tool_choice,
        temperature: request.temperature.or(settings.temperature),
    })
}

fn text_block(text: &str) -> Vec<WireBlock<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![WireBlock::Text { text }]
    }
}

/// Appends blocks to the conversation, merging into the last turn when it has the same role.
/// Tool results go before any text already in that turn, as the API requires.
fn push_blocks<'a>(
    messages: &mut Vec<WireMessage<'a>>,
    role: &'static str,
    blocks: Vec<WireBlock<'a>>,
) {
    if blocks.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == role => {
            for block in blocks {
                if matches!(block, WireBlock::ToolResult { .. }) {
                    let at = last
                        .content
                        .iter()
                        .take_while(|b| matches!(b, WireBlock::ToolResult { .. }))
                        .count();
                    last.content.insert(at, block);
                } else {
                    last.content.push(block);
                }
            }
        }
        _ => messages.push(WireMessage {
            role,
            content: blocks,
        }),
    }
}

/// A tool call's raw arguments as the object `tool_use.input` must be.
fn tool_input(call: &ToolCall, provider: &str) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::warn!(
                provider,
                tool_call_id = %call.id,
                tool = %call.name,
                "tool call arguments are not a JSON object; replayed to Anthropic as {{}}"
            );
            Value::Object(serde_json::Map::new())
        }
    }
}

#[derive(Debug, Deserialize)]
struct WireResponse {
    content: Vec<WireAnswerBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireAnswerBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// Parses a 2xx body; `Err` says what is wrong with it (for the malformed-response error).
fn parse_response(body: &[u8]) -> Result<ChatResponse, String> {
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in wire.content {
        match block {
            WireAnswerBlock::Text { text } => content.push_str(&text),
            WireAnswerBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input.to_string(),
            }),
            WireAnswerBlock::Other => {}
        }
    }
    let finish = match wire.stop_reason.as_deref() {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
    };
    let usage = wire.usage.map_or(TokenUsage::default(), |u| TokenUsage {
        input_tokens: [
            u.input_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
        ]
        .into_iter()
        .flatten()
        .fold(0, u64::saturating_add),
        output_tokens: u.output_tokens.unwrap_or(0),
    });
    Ok(ChatResponse {
        content,
        tool_calls,
        finish,
        usage,
        raw: String::from_utf8_lossy(body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::build::test_settings;
    use crate::provider::{Message, ToolDefinition};
    use serde_json::json;

    fn call(id: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: arguments.into(),
        }
    }

    fn request(messages: Vec<Message>, tools: Vec<ToolDefinition>) -> ChatRequest {
        ChatRequest {
            model: "claude-x".into(),
            messages,
            tools,
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: None,
            constraint: None,
        }
    }

    fn body_of(request: &ChatRequest, settings: &ProviderSettings) -> Value {
        let bytes = serde_json::to_vec(&request_body(request, settings).unwrap()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn hoists_system_and_merges_tool_results_into_one_user_turn() {
        let r = request(
            vec![
                Message::system("policy"),
                Message::system("contract"),
                Message::user("review"),
                Message::assistant(
                    "Reading.",
                    vec![call("t1", "{\"path\":\"a\"}"), call("t2", "{broken")],
                ),
                Message::tool_result("t1", "A"),
                Message::tool_result("t2", "error: arguments are not JSON"),
                Message::user("Deadline reached: answer now."),
            ],
            vec![],
        );
        let body = body_of(&r, &test_settings(ProviderKind::Anthropic));
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 4096,
                "system": "policy\n\ncontract",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "review"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                        {"type": "tool_use", "id": "t2", "name": "read", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "error: arguments are not JSON"},
                        {"type": "text", "text": "Deadline reached: answer now."},
                    ]},
                ],
            })
        );
    }

    #[test]
    fn tools_choice_and_limits() {
        let tool = ToolDefinition {
            name: "grep".into(),
            description: "Search".into(),
            parameters: json!({"type": "object"}),
        };
        let mut settings = test_settings(ProviderKind::Anthropic);
        settings.max_tokens = Some(1000);
        settings.temperature = Some(0.5);
        let mut r = request(vec![Message::user("u")], vec![tool]);
        let body = body_of(&r, &settings);
        assert_eq!(
            body["tools"],
            json!([{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "auto"}));
        assert_eq!(
            (body["max_tokens"].clone(), body["temperature"].clone()),
            (json!(1000), json!(0.5))
        );
        r.tool_choice = ToolChoice::None;
        r.max_tokens = Some(10);
        r.temperature = Some(0.0);
        let body = body_of(&r, &settings);
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
        assert_eq!(
            (body["max_tokens"].clone(), body["temperature"].clone()),
            (json!(10), json!(0.0))
        );
        r.tools.clear();
        let body = body_of(&r, &settings);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert!(body.get("system").is_none());
    }

    #[test]
    fn a_tool_result_without_its_call_id_is_a_caller_bug() {
        let mut result = Message::tool_result("t", "x");
        result.tool_call_id = None;
        let r = request(vec![Message::user("u"), result], vec![]);
        assert!(request_body(&r, &test_settings(ProviderKind::Anthropic)).is_err());
    }

    #[test]
    fn parses_blocks_stop_reasons_and_usage() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me "},
                {"type": "text", "text": "look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.rs"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "output_tokens": 7},
        });
        let r = parse_response(body.to_string().as_bytes()).unwrap();
        assert_eq!(r.content, "Let me look.");
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            TokenUsage {
                input_tokens: 110,
                output_tokens: 7
            }
        );
        assert_eq!(
            r.tool_calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "read".into(),
                arguments: "{\"path\":\"a.rs\"}".into()
            }]
        );

        for (stop, want) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::Other("refusal".into())),
        ] {
            let body = json!({"content": [{"type": "text", "text": "x"}], "stop_reason": stop});
            assert_eq!(
                parse_response(body.to_string().as_bytes()).unwrap().finish,
                want
            );
        }
    }

    #[test]
    fn rejects_bodies_that_are_not_messages() {
        for body in [
            "{}",
            "{\"type\": \"error\", \"error\": {}}",
            "[]",
            "{\"content\": \"x\"}",
        ] {
            assert!(parse_response(body.as_bytes()).is_err(), "{body}");
        }
    }
}
