//! The OpenAI-compatible chat-completions client (SPEC E6): OpenAI, Azure-style gateways, vLLM,
//! llama.cpp, Ollama, DeepSeek, Volcengine Ark, GLM. Maps the provider-neutral chat types to
//! `POST {base_url}/v1/chat/completions` and back; the call itself (transport, classification,
//! redaction) is shared with the Anthropic client in [`super::api`].
//!
//! # What is sent
//! - `model`; `messages` with roles `system`, `user`, `assistant` (with `tool_calls`
//!   `[{id, type: "function", function: {name, arguments}}]` when it called tools, and
//!   `content: null` when it only called tools) and `tool` (with `tool_call_id`);
//! - `tools` (`[{type: "function", function: {name, description, parameters}}]`) and
//!   `tool_choice` (`"auto"` or `"none"`, from the request) **only when the tool list is not
//!   empty**. With no tools neither field is sent, whatever the request's `tool_choice`: OpenAI
//!   rejects `tool_choice` without `tools` and an empty `tools` array, and llama.cpp started
//!   without `--jinja` rejects any `tools` ("tools param requires --jinja flag") and any
//!   `tool_choice` but `auto`; no tools already means no tool calls. (Tool-using stages on
//!   llama.cpp therefore need `--jinja`.)
//! - `temperature` and `max_tokens` when the request or, failing that, the settings give one
//!   (`max_tokens`, not `max_completion_tokens`: the field every compatible server accepts);
//! - the request's decoding constraint, on calls without tools only: a JSON Schema as
//!   `response_format: {type: "json_schema", json_schema: {name, strict: true, schema}}`
//!   (OpenAI strict structured outputs, vLLM guided decoding, llama.cpp, Ollama), a GBNF grammar
//!   as the top-level `grammar` field (llama.cpp, which refuses it beside `tools`);
//! - `Authorization: Bearer <key>` when a key is configured. Nothing is streamed.
//!
//! # What is read
//! `choices[0].message.content` (a string, `null`, or an array of text parts, concatenated),
//! `tool_calls` (arguments kept as the raw JSON text; an arguments object from a lenient server is
//! serialised; a missing id becomes `call_<index>` so the result can still answer it),
//! `finish_reason` (`stop`, `length`, `tool_calls`/`function_call`, anything else verbatim as
//! `Other`; absent means `tool_calls` when there are calls, else `stop`) and `usage`
//! (`prompt_tokens`, `completion_tokens`; absent counts as zero).

use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use verdict_proto::contracts::contract_text::InReadingOrder;

use super::api::{ApiProvider, ServerFacts, WireFormat};
use super::classify::Flavor;
use super::http::server_endpoint;
use super::{
    ChatRequest, ChatResponse, FinishReason, Message, OutputConstraint, ProviderKind,
    ProviderSettings, Role, StructuredOutput, TokenUsage, ToolCall, ToolChoice,
};
use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;

/// The OpenAI chat-completions wire format.
#[derive(Debug)]
pub struct OpenAi;

/// An OpenAI-compatible provider.
pub type OpenAiProvider = ApiProvider<OpenAi>;

impl WireFormat for OpenAi {
    const KIND: ProviderKind = ProviderKind::Openai;
    const PATH: &'static str = "chat/completions";
    const FLAVOR: Flavor = Flavor::OpenAi;
    type Body<'a> = WireRequest<'a>;

    fn request_body<'a>(
        request: &'a ChatRequest,
        settings: &ProviderSettings,
    ) -> Result<WireRequest<'a>, String> {
        request_body(request, settings)
    }

    fn fixed_headers() -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    fn credential(key: &str) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {key}"))
    }

    fn parse_response(body: &[u8]) -> Result<ChatResponse, String> {
        parse_response(body)
    }

    /// A llama.cpp server says what it is, and its context window, at `/props`; other
    /// OpenAI-compatible servers answer 404 there.
    fn discover<'a>(
        provider: &'a OpenAiProvider,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ServerFacts> {
        Box::pin(async move {
            let Ok(url) = server_endpoint(&provider.settings().base_url, "props") else {
                return ServerFacts::default();
            };
            match provider.http().discover(url, cancel).await {
                Some(body) => llama_cpp_facts(&body),
                None => ServerFacts::default(),
            }
        })
    }

    /// Every OpenAI-compatible server named here takes a JSON Schema `response_format`; a
    /// llama.cpp server also takes a GBNF grammar.
    fn auto_mode(facts: &ServerFacts) -> StructuredOutput {
        if facts.llama_cpp {
            StructuredOutput::Grammar
        } else {
            StructuredOutput::JsonSchema
        }
    }
}

/// What a `/props` body says: llama.cpp's holds `default_generation_settings`, with `n_ctx`,
/// and `chat_template_caps`, which says whether the model's chat template can call tools.
fn llama_cpp_facts(body: &[u8]) -> ServerFacts {
    let Ok(props) = serde_json::from_slice::<Value>(body) else {
        return ServerFacts::default();
    };
    let Some(settings) = props
        .get("default_generation_settings")
        .filter(|s| s.is_object())
    else {
        return ServerFacts::default();
    };
    ServerFacts {
        llama_cpp: true,
        context_window: settings
            .get("n_ctx")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0),
        cannot_call_tools: props
            .pointer("/chat_template_caps/supports_tool_calls")
            .and_then(Value::as_bool)
            == Some(false),
    }
}

#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grammar: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct WireResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: WireJsonSchema<'a>,
}

#[derive(Debug, Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    strict: bool,
    schema: InReadingOrder<'a>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    /// Always present; `null` only for an assistant turn that only called tools.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The request body; `Err` names a conversation this format cannot express (a caller bug).
fn request_body<'a>(
    request: &'a ChatRequest,
    settings: &ProviderSettings,
) -> Result<WireRequest<'a>, String> {
    let messages = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| wire_message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let has_tools = !request.tools.is_empty();
    let tools = has_tools.then(|| {
        request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect()
    });
    let tool_choice = has_tools.then_some(match request.tool_choice {
        ToolChoice::Auto => "auto",
        ToolChoice::None => "none",
    });
    let (response_format, grammar) = match &request.constraint {
        Some(_) if has_tools => {
            return Err("a decoding constraint was set on a call that offers tools".to_owned());
        }
        Some(OutputConstraint::JsonSchema { name, schema }) => (
            Some(WireResponseFormat {
                kind: "json_schema",
                json_schema: WireJsonSchema {
                    name,
                    strict: true,
                    schema: InReadingOrder(schema),
                },
            }),
            None,
        ),
        Some(OutputConstraint::Grammar { gbnf }) => (None, Some(gbnf.as_str())),
        None => (None, None),
    };
    Ok(WireRequest {
        model: &request.model,
        messages,
        tools,
        tool_choice,
        temperature: request.temperature.or(settings.temperature),
        max_tokens: request.max_tokens.or(settings.max_tokens),
        response_format,
        grammar,
    })
}

fn wire_message(index: usize, m: &Message) -> Result<WireMessage<'_>, String> {
    let plain = |role| WireMessage {
        role,
        content: Some(&m.content),
        tool_calls: Vec::new(),
        tool_call_id: None,
    };
    Ok(match m.role {
        Role::System => plain("system"),
        Role::User => plain("user"),
        Role::Assistant => WireMessage {
            role: "assistant",
            content: (!m.content.is_empty() || m.tool_calls.is_empty()).then_some(&m.content),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| WireToolCall {
                    id: &c.id,
                    kind: "function",
                    function: WireFunctionCall {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                })
                .collect(),
            tool_call_id: None,
        },
        Role::Tool => WireMessage {
            tool_call_id: Some(m.tool_call_id.as_deref().ok_or_else(|| {
                format!("message {index} is a tool result without the id of the call it answers")
            })?),
            ..plain("tool")
        },
    })
}

#[derive(Debug, Deserialize)]
struct WireResponse {
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct WireChoice {
    message: WireAnswer,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireAnswer {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireAnswerCall>>,
}

#[derive(Debug, Deserialize)]
struct WireAnswerCall {
    #[serde(default)]
    id: Option<String>,
    function: WireAnswerFunction,
}

#[derive(Debug, Deserialize)]
struct WireAnswerFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// Parses a 2xx body; `Err` says what is wrong with it (for the malformed-response error).
fn parse_response(body: &[u8]) -> Result<ChatResponse, String> {
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err("`choices` is empty".to_owned());
    };
    let content = match choice.message.content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        Some(other) => return Err(format!("`message.content` is {other}, not text")),
    };
    let tool_calls: Vec<ToolCall> = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: c
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{i}")),
            name: c.function.name,
            arguments: match c.function.arguments {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
            },
        })
        .collect();
    let finish = match choice.finish_reason.as_deref() {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
    };
    let usage = wire.usage.map_or(TokenUsage::default(), |u| TokenUsage {
        input_tokens: u.prompt_tokens.unwrap_or(0),
        output_tokens: u.completion_tokens.unwrap_or(0),
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
    use crate::provider::ToolDefinition;
    use crate::provider::build::test_settings;
    use serde_json::json;

    fn request(tools: Vec<ToolDefinition>, tool_choice: ToolChoice) -> ChatRequest {
        ChatRequest {
            model: "gpt-x".into(),
            messages: vec![
                Message::system("policy"),
                Message::user("review this"),
                Message::assistant(
                    "",
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: "{\"path\":\"a.rs\"}".into(),
                    }],
                ),
                Message::tool_result("c1", "fn main() {}"),
                Message::assistant("done", vec![]),
            ],
            tools,
            tool_choice,
            temperature: None,
            max_tokens: None,
            constraint: None,
        }
    }

    fn read_tool() -> ToolDefinition {
        ToolDefinition {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    /// The body as it goes on the wire (through bytes: `to_value` would widen an f32 such as
    /// 0.2 to 0.20000000298023224, which the wire never shows).
    fn body_of(request: &ChatRequest, settings: &ProviderSettings) -> Value {
        let bytes = serde_json::to_vec(&request_body(request, settings).unwrap()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn maps_every_role_and_omits_tools_when_there_are_none() {
        let mut settings = test_settings(ProviderKind::Openai);
        settings.temperature = Some(0.2);
        settings.max_tokens = Some(900);
        let body = body_of(&request(vec![], ToolChoice::None), &settings);
        assert_eq!(
            body,
            json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "policy"},
                    {"role": "user", "content": "review this"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}}
                    ]},
                    {"role": "tool", "content": "fn main() {}", "tool_call_id": "c1"},
                    {"role": "assistant", "content": "done"},
                ],
                "temperature": 0.2,
                "max_tokens": 900,
            })
        );
    }

    #[test]
    fn sends_tools_with_the_requested_choice_and_request_overrides() {
        let settings = test_settings(ProviderKind::Openai);
        let mut r = request(vec![read_tool()], ToolChoice::Auto);
        r.temperature = Some(0.0);
        r.max_tokens = Some(64);
        let body = body_of(&r, &settings);
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}])
        );
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["max_tokens"], 64);
        r.tool_choice = ToolChoice::None;
        assert_eq!(body_of(&r, &settings)["tool_choice"], "none");
        let bare = body_of(&request(vec![], ToolChoice::Auto), &settings);
        assert!(bare.get("tools").is_none() && bare.get("tool_choice").is_none());
        assert!(bare.get("temperature").is_none() && bare.get("max_tokens").is_none());
    }

    #[test]
    fn a_tool_result_without_its_call_id_is_a_caller_bug() {
        let mut r = request(vec![], ToolChoice::None);
        r.messages[3].tool_call_id = None;
        let err = request_body(&r, &test_settings(ProviderKind::Openai)).unwrap_err();
        assert!(err.contains("message 3"), "{err}");
    }

    #[test]
    fn parses_text_tool_calls_finish_and_usage() {
        let body = json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": \"x\"}"}},
                {"type": "function", "function": {"name": "ls", "arguments": {"path": "."}}},
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
        });
        let r = parse_response(body.to_string().as_bytes()).unwrap();
        assert_eq!(r.content, "");
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            TokenUsage {
                input_tokens: 12,
                output_tokens: 5
            }
        );
        assert_eq!(r.tool_calls[0].id, "call_9");
        assert_eq!(r.tool_calls[0].arguments, "{\"pattern\": \"x\"}");
        assert_eq!(r.tool_calls[1].id, "call_1");
        assert_eq!(r.tool_calls[1].arguments, "{\"path\":\".\"}");
        assert_eq!(r.raw, body.to_string());

        let cases = [
            (json!("stop"), FinishReason::Stop),
            (json!("length"), FinishReason::Length),
            (
                json!("content_filter"),
                FinishReason::Other("content_filter".into()),
            ),
            (Value::Null, FinishReason::Stop),
        ];
        for (finish, want) in cases {
            let body = json!({"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "finish_reason": finish}]});
            let r = parse_response(body.to_string().as_bytes()).unwrap();
            assert_eq!((r.content.as_str(), r.finish), ("ab", want));
            assert_eq!(r.usage, TokenUsage::default());
        }
    }

    #[test]
    fn rejects_bodies_that_are_not_completions() {
        for body in [
            "{\"choices\": []}",
            "{\"error\": {\"message\": \"x\"}}",
            "<html>",
            "{\"choices\": [{\"message\": {\"content\": 5}}]}",
        ] {
            assert!(parse_response(body.as_bytes()).is_err(), "{body}");
        }
    }
}
