//! The OpenAI chat-completions format as the fake speaks it: the request checks the real API (and
//! llama.cpp) apply to the fields verdict sends, and the response shape with `tool_calls`,
//! `finish_reason` and `usage`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::script::{Finish, ToolArguments};
use crate::wire::{Rendered, check};

pub(crate) fn validate(body: &Value) -> Result<(), String> {
    let req = check::object(body, "body")?;
    check::non_empty_string(req.get("model"), "model")?;
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("stream: the fake provider does not stream".to_owned());
    }
    let messages = check::array(req.get("messages").unwrap_or(&Value::Null), "messages")?;
    if messages.is_empty() {
        return Err("messages: must contain at least one message".to_owned());
    }
    // Ids of the last assistant turn's tool calls that no tool message has answered yet.
    let mut open_calls: BTreeSet<String> = BTreeSet::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let msg = check::object(m, &at)?;
        let role = check::string(msg.get("role"), &format!("{at}.role"))?;
        if role != "tool" && !open_calls.is_empty() {
            return Err(format!(
                "{at}: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; missing: {}",
                open_calls.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        match role {
            "system" | "developer" | "user" => content(msg.get("content"), &at, false)?,
            "assistant" => {
                let calls = match msg.get("tool_calls") {
                    None | Some(Value::Null) => &[][..],
                    Some(v) => check::array(v, &format!("{at}.tool_calls"))?.as_slice(),
                };
                content(msg.get("content"), &at, !calls.is_empty())?;
                for (j, c) in calls.iter().enumerate() {
                    let at = format!("{at}.tool_calls[{j}]");
                    let call = check::object(c, &at)?;
                    let id = check::non_empty_string(call.get("id"), &format!("{at}.id"))?;
                    if check::string(call.get("type"), &format!("{at}.type"))? != "function" {
                        return Err(format!("{at}.type: must be 'function'"));
                    }
                    let f = check::object(
                        call.get("function").unwrap_or(&Value::Null),
                        &format!("{at}.function"),
                    )?;
                    check::non_empty_string(f.get("name"), &format!("{at}.function.name"))?;
                    check::string(f.get("arguments"), &format!("{at}.function.arguments"))?;
                    open_calls.insert(id.to_owned());
                }
            }
            "tool" => {
                let id = check::string(msg.get("tool_call_id"), &format!("{at}.tool_call_id"))?;
                if !open_calls.remove(id) {
                    return Err(format!(
                        "{at}: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (unknown tool_call_id '{id}')"
                    ));
                }
                content(msg.get("content"), &at, false)?;
            }
            other => {
                return Err(format!(
                    "{at}.role: '{other}' is not one of 'system', 'developer', 'user', 'assistant', 'tool'"
                ));
            }
        }
    }
    let has_tools = match req.get("tools") {
        None => false,
        Some(t) => {
            let tools = check::array(t, "tools")?;
            if tools.is_empty() {
                return Err("tools: [] is too short; omit 'tools' when there are none".to_owned());
            }
            for (i, t) in tools.iter().enumerate() {
                let at = format!("tools[{i}]");
                let tool = check::object(t, &at)?;
                if check::string(tool.get("type"), &format!("{at}.type"))? != "function" {
                    return Err(format!("{at}.type: must be 'function'"));
                }
                let f = check::object(
                    tool.get("function").unwrap_or(&Value::Null),
                    &format!("{at}.function"),
                )?;
                check::non_empty_string(f.get("name"), &format!("{at}.function.name"))?;
                if let Some(p) = f.get("parameters") {
                    check::object(p, &format!("{at}.function.parameters"))?;
                }
            }
            true
        }
    };
    match req.get("tool_choice") {
        None => {}
        Some(_) if !has_tools => {
            return Err("tool_choice: only allowed when 'tools' are specified".to_owned());
        }
        Some(Value::String(s)) if matches!(s.as_str(), "none" | "auto" | "required") => {}
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {}
        Some(other) => return Err(format!("tool_choice: invalid value {other}")),
    }
    if let Some(format) = req.get("response_format") {
        response_format(format)?;
    }
    match req.get("grammar") {
        None => {}
        // llama.cpp's answer to a grammar beside tools.
        Some(_) if has_tools => {
            return Err("Cannot use custom grammar constraints with tools.".to_owned());
        }
        Some(Value::String(g)) if g.contains("::=") => {}
        Some(other) => return Err(format!("grammar: not a GBNF grammar: {other}")),
    }
    check::optional_number_in(req.get("temperature"), "temperature", 2.0)?;
    if req.contains_key("max_tokens") {
        check::positive_integer(req.get("max_tokens"), "max_tokens")?;
    }
    Ok(())
}

/// `response_format` as OpenAI checks it: `text`, `json_object`, or `json_schema` with a name of
/// at most 64 letters, digits, `_` and `-`, a schema object and an optional boolean `strict`.
fn response_format(v: &Value) -> Result<(), String> {
    let format = check::object(v, "response_format")?;
    match check::string(format.get("type"), "response_format.type")? {
        "text" | "json_object" => Ok(()),
        "json_schema" => {
            let js = check::object(
                format.get("json_schema").unwrap_or(&Value::Null),
                "response_format.json_schema",
            )?;
            let name = check::non_empty_string(js.get("name"), "response_format.json_schema.name")?;
            if name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(format!(
                    "response_format.json_schema.name: '{name}' does not match '^[a-zA-Z0-9_-]{{1,64}}$'"
                ));
            }
            check::object(
                js.get("schema").unwrap_or(&Value::Null),
                "response_format.json_schema.schema",
            )?;
            match js.get("strict") {
                None | Some(Value::Bool(_)) => Ok(()),
                Some(other) => Err(format!(
                    "response_format.json_schema.strict: expected a boolean, got {other}"
                )),
            }
        }
        other => Err(format!(
            "response_format.type: '{other}' is not one of 'text', 'json_object', 'json_schema'"
        )),
    }
}

/// A message's `content`: a string, an array of text parts, or (assistant with tool calls only)
/// null or absent.
fn content(v: Option<&Value>, at: &str, may_be_null: bool) -> Result<(), String> {
    match v {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (i, p) in parts.iter().enumerate() {
                let part = check::object(p, &format!("{at}.content[{i}]"))?;
                check::string(part.get("type"), &format!("{at}.content[{i}].type"))?;
            }
            Ok(())
        }
        None | Some(Value::Null) if may_be_null => Ok(()),
        None => Err(format!("{at}.content: field required")),
        Some(other) => Err(format!(
            "{at}.content: expected a string or an array, got {}",
            check::kind(other)
        )),
    }
}

pub(crate) fn render(r: &Rendered<'_>) -> Value {
    let tool_calls: Vec<Value> = r
        .reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let arguments = match &c.arguments {
                ToolArguments::Json(v) => v.to_string(),
                ToolArguments::Raw(s) => s.clone(),
            };
            json!({
                "id": format!("call_{}_{i}", r.id),
                "type": "function",
                "function": {"name": c.name, "arguments": arguments},
            })
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": r.reply.text});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = match r.finish() {
        Finish::Stop => "stop".to_owned(),
        Finish::Length => "length".to_owned(),
        Finish::ToolCalls => "tool_calls".to_owned(),
        Finish::Other(s) => s,
    };
    json!({
        "id": format!("chatcmpl-fake-{}", r.id),
        "object": "chat.completion",
        "created": 0,
        "model": r.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish,
            "logprobs": null,
        }],
        "usage": {
            "prompt_tokens": r.input_tokens,
            "completion_tokens": r.output_tokens,
            "total_tokens": r.input_tokens.saturating_add(r.output_tokens),
        },
    })
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let (kind, code) = match status {
        400 | 422 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", json!("invalid_api_key")),
        403 => ("permission_error", Value::Null),
        404 => ("invalid_request_error", json!("model_not_found")),
        429 => ("rate_limit_error", json!("rate_limit_exceeded")),
        _ => ("server_error", Value::Null),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: Value) {
        assert_eq!(validate(&body), Ok(()), "{body}");
    }

    fn rejected(body: Value, needle: &str) {
        let err = validate(&body).expect_err("should be rejected");
        assert!(err.contains(needle), "{err}");
    }

    #[test]
    fn accepts_a_tool_round_trip() {
        ok(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "file"},
            ],
            "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
            "tool_choice": "auto",
            "temperature": 0.0,
            "max_tokens": 10,
        }));
    }

    #[test]
    fn rejects_what_the_real_api_rejects() {
        let user = json!([{"role": "user", "content": "u"}]);
        rejected(json!({"model": "m", "messages": []}), "at least one");
        rejected(
            json!({"model": "m", "messages": user, "tools": []}),
            "too short",
        );
        rejected(
            json!({"model": "m", "messages": user, "tool_choice": "none"}),
            "only allowed when 'tools'",
        );
        rejected(
            json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": ""}]}),
            "preceding message with 'tool_calls'",
        );
        rejected(
            json!({"model": "m", "messages": [
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                ]},
                {"role": "user", "content": "u"},
            ]}),
            "missing: c1",
        );
        rejected(
            json!({"model": "m", "messages": user, "temperature": 3}),
            "temperature",
        );
        rejected(json!({"messages": user}), "model");
    }
}
