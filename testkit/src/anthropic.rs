//! The Anthropic Messages format as the fake speaks it: the request checks the real API applies
//! (roles, content blocks, `tool_use` answered by `tool_result` in the very next user message,
//! required `max_tokens`) and the response with content blocks, `stop_reason` and `usage`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::script::{Finish, ToolArguments};
use crate::wire::{Rendered, check};

pub(crate) fn validate(body: &Value) -> Result<(), String> {
    let req = check::object(body, "body")?;
    check::non_empty_string(req.get("model"), "model")?;
    check::positive_integer(req.get("max_tokens"), "max_tokens")?;
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("stream: the fake provider does not stream".to_owned());
    }
    match req.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                let at = format!("system[{i}]");
                let block = check::object(b, &at)?;
                if check::string(block.get("type"), &format!("{at}.type"))? != "text" {
                    return Err(format!("{at}.type: system blocks must be 'text'"));
                }
                check::string(block.get("text"), &format!("{at}.text"))?;
            }
        }
        Some(other) => {
            return Err(format!(
                "system: expected a string or text blocks, got {}",
                check::kind(other)
            ));
        }
    }
    let messages = check::array(req.get("messages").unwrap_or(&Value::Null), "messages")?;
    if messages.is_empty() {
        return Err("messages: at least one message is required".to_owned());
    }
    // tool_use ids of the previous assistant turn: each must be answered by a tool_result in the
    // very next (user) message.
    let mut open_calls: BTreeSet<String> = BTreeSet::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let msg = check::object(m, &at)?;
        let role = check::string(msg.get("role"), &format!("{at}.role"))?;
        if !matches!(role, "user" | "assistant") {
            return Err(format!(
                "{at}.role: unexpected role \"{role}\"; the Messages API accepts \"user\" and \"assistant\" (use the top-level \"system\" field)"
            ));
        }
        if i == 0 && role != "user" {
            return Err("messages[0]: the first message must use the \"user\" role".to_owned());
        }
        let answered = blocks(msg.get("content"), &at, role, &mut |block, at| match block
            .get("type")
            .and_then(Value::as_str)
        {
            Some("tool_result") => {
                let id = check::string(block.get("tool_use_id"), &format!("{at}.tool_use_id"))?;
                if !open_calls.remove(id) {
                    return Err(format!(
                        "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    ));
                }
                Ok(None)
            }
            Some("tool_use") => Ok(Some(
                check::non_empty_string(block.get("id"), &format!("{at}.id"))?.to_owned(),
            )),
            _ => Ok(None),
        })?;
        if !open_calls.is_empty() {
            return Err(format!(
                "{at}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                open_calls.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        open_calls = answered.into_iter().collect();
    }
    if !open_calls.is_empty() {
        // A conversation may end on an assistant turn (prefill), but not with unanswered calls.
        return Err(format!(
            "messages: the last assistant turn has `tool_use` blocks without results: {}",
            open_calls.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let has_tools = match req.get("tools") {
        None => false,
        Some(t) => {
            for (i, t) in check::array(t, "tools")?.iter().enumerate() {
                let at = format!("tools[{i}]");
                let tool = check::object(t, &at)?;
                check::non_empty_string(tool.get("name"), &format!("{at}.name"))?;
                check::object(
                    tool.get("input_schema").unwrap_or(&Value::Null),
                    &format!("{at}.input_schema"),
                )?;
            }
            true
        }
    };
    match req.get("tool_choice") {
        None => {}
        Some(_) if !has_tools => {
            return Err("tool_choice: may only be specified while providing tools".to_owned());
        }
        Some(v) => {
            let choice = check::object(v, "tool_choice")?;
            match check::string(choice.get("type"), "tool_choice.type")? {
                "auto" | "any" | "none" => {}
                "tool" => {
                    let name = check::non_empty_string(choice.get("name"), "tool_choice.name")?;
                    let offered = req
                        .get("tools")
                        .and_then(Value::as_array)
                        .is_some_and(|tools| {
                            tools
                                .iter()
                                .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
                        });
                    if !offered {
                        return Err(format!(
                            "tool_choice.name: tool '{name}' is not among the request's tools"
                        ));
                    }
                }
                other => return Err(format!("tool_choice.type: unknown type '{other}'")),
            }
        }
    }
    check::optional_number_in(req.get("temperature"), "temperature", 1.0)?;
    Ok(())
}

/// Sees one content block (and where it is); returns the tool_use id it opens, if any.
type VisitBlock<'a> = dyn FnMut(&Map<String, Value>, &str) -> Result<Option<String>, String> + 'a;

/// Walks a message's content (a string or an array of blocks), checking each block's shape and
/// handing it to `visit`, which returns the tool_use ids this message opens.
fn blocks(
    content: Option<&Value>,
    at: &str,
    role: &str,
    visit: &mut VisitBlock<'_>,
) -> Result<Vec<String>, String> {
    let blocks = match content {
        Some(Value::String(_)) => return Ok(Vec::new()),
        Some(Value::Array(b)) => b,
        Some(other) => {
            return Err(format!(
                "{at}.content: expected a string or an array of blocks, got {}",
                check::kind(other)
            ));
        }
        None => return Err(format!("{at}.content: field required")),
    };
    if blocks.is_empty() {
        return Err(format!("{at}.content: must not be empty"));
    }
    let mut opened = Vec::new();
    let mut seen_other = false;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        let block = check::object(b, &at)?;
        let kind = check::string(block.get("type"), &format!("{at}.type"))?;
        match (kind, role) {
            ("text", _) => {
                check::non_empty_string(block.get("text"), &format!("{at}.text"))
                    .map_err(|e| format!("{e} (text content blocks must be non-empty)"))?;
                seen_other = true;
            }
            ("tool_use", "assistant") => {
                check::non_empty_string(block.get("name"), &format!("{at}.name"))?;
                check::object(
                    block.get("input").unwrap_or(&Value::Null),
                    &format!("{at}.input"),
                )?;
            }
            ("tool_result", "user") => {
                if seen_other {
                    return Err(format!(
                        "{at}: `tool_result` blocks must come first in a user message"
                    ));
                }
                match block.get("content") {
                    None | Some(Value::String(_)) | Some(Value::Array(_)) => {}
                    Some(other) => {
                        return Err(format!(
                            "{at}.content: expected a string or blocks, got {}",
                            check::kind(other)
                        ));
                    }
                }
            }
            ("tool_use" | "tool_result", _) => {
                return Err(format!(
                    "{at}.type: '{kind}' blocks are not allowed in a {role} message"
                ));
            }
            _ => return Err(format!("{at}.type: unsupported block type '{kind}'")),
        }
        if let Some(id) = visit(block, &at)? {
            opened.push(id);
        }
    }
    Ok(opened)
}

pub(crate) fn render(r: &Rendered<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(text) = &r.reply.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, c) in r.reply.tool_calls.iter().enumerate() {
        let input = match &c.arguments {
            ToolArguments::Json(v) => v.clone(),
            ToolArguments::Raw(s) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => Value::String(s.clone()),
            },
        };
        content.push(json!({
            "type": "tool_use",
            "id": format!("toolu_fake_{}_{i}", r.id),
            "name": c.name,
            "input": input,
        }));
    }
    let stop = match r.finish() {
        Finish::Stop => "end_turn".to_owned(),
        Finish::Length => "max_tokens".to_owned(),
        Finish::ToolCalls => "tool_use".to_owned(),
        Finish::Other(s) => s,
    };
    json!({
        "id": format!("msg_fake_{}", r.id),
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
    })
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
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
            "max_tokens": 100,
            "system": "s",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "u"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "ls", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "file"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "a b"},
                    {"type": "text", "text": "finish now"},
                ]},
            ],
            "tools": [{"name": "read", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto"},
            "temperature": 0.5,
        }));
    }

    #[test]
    fn rejects_what_the_real_api_rejects() {
        let user = json!([{"role": "user", "content": "u"}]);
        rejected(json!({"model": "m", "messages": user}), "max_tokens");
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "s"}]}),
            "unexpected role",
        );
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": user, "tool_choice": {"type": "none"}}),
            "while providing tools",
        );
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "r", "input": {}}]},
                {"role": "user", "content": "no results"},
            ]}),
            "without `tool_result`",
        );
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
            ]}),
            "unexpected `tool_use_id`",
        );
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}),
            "non-empty",
        );
        rejected(
            json!({"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "r", "input": "{}"}]},
            ]}),
            "input",
        );
    }
}
