//! The conversation: AI calls and tool rounds until the model gives a final answer, under the
//! soft deadline (SPEC E1, E2). There is no tool-round limit; the deadline is what ends a loop.

use tracing::Instrument;
use verdict_proto::evidence;
use verdict_proto::transcript::TranscriptEntry;
use verdict_proto::wire::EventType;

use super::call::{Call, Failure, ai_call};
use super::context::CallContext;
use super::conversation::Conversation;
use crate::deadline::{finalise_message, no_tools_message, not_executed_message};
use crate::provider::{ChatResponse, Message, ToolCall};

/// Runs the conversation to a final answer: a response without tool calls, or any response once
/// tools are no longer offered (its text goes to parsing and repair).
pub(super) async fn converse(
    ctx: &mut CallContext<'_>,
    conv: &mut Conversation<'_>,
) -> Result<ChatResponse, Failure> {
    loop {
        finalise_if_due(ctx, conv).await;
        let offer_tools = ctx.toolbox.is_some() && !conv.deadline.is_finalised();
        let response = ai_call(ctx, conv, Call::Turn { offer_tools }).await?;
        // The assistant turn is kept with its tool calls so tool results can answer them.
        conv.push(Message::assistant(
            response.content.clone(),
            response.tool_calls.clone(),
        ));
        if response.tool_calls.is_empty() {
            return Ok(response);
        }
        let language = ctx.request.language;
        if !offer_tools {
            // Finalised, or a stage without tools: answer the calls as not executed and judge
            // the text of this turn.
            let reason = if conv.deadline.is_finalised() {
                not_executed_message(language)
            } else {
                no_tools_message(language)
            };
            answer_unexecuted(ctx, conv, &response.tool_calls, reason);
            return Ok(response);
        }
        if conv.deadline.reached(ctx.now_unix_ms()) {
            // The call was in flight when the deadline passed: it was allowed to return, but its
            // tool calls are not run; the next call carries the finalise message.
            answer_unexecuted(
                ctx,
                conv,
                &response.tool_calls,
                not_executed_message(language),
            );
            continue;
        }
        run_tools(ctx, conv, &response.tool_calls).await;
    }
}

/// Adds the finalise message once, the first time a call is about to be made after the deadline
/// (E2).
pub(super) async fn finalise_if_due(ctx: &CallContext<'_>, conv: &mut Conversation<'_>) {
    let now = ctx.now_unix_ms();
    if !conv.deadline.take_finalisation(now) {
        return;
    }
    conv.push(Message::user(finalise_message(ctx.request.language)));
    conv.record(TranscriptEntry::DeadlineReached { at_unix_ms: now });
    ctx.deps
        .metrics
        .deadline_finalisations
        .with_label_values(&[ctx.request.stage.as_str()])
        .inc();
    tracing::info!("soft deadline reached; asking for a final answer without tools");
    ctx.emit(
        EventType::DeadlineReached,
        None,
        format!(
            "Time budget reached during {}; asking the model for its final answer without tools.",
            ctx.request.stage.as_str()
        ),
        serde_json::json!({"deadline_unix_ms": conv.deadline.deadline_unix_ms()}),
    )
    .await;
}

fn answer_unexecuted(
    ctx: &CallContext<'_>,
    conv: &mut Conversation<'_>,
    calls: &[ToolCall],
    reason: &str,
) {
    for call in calls {
        ctx.deps
            .metrics
            .tool_calls
            .with_label_values(&[metric_tool_name(&call.name), "not_executed"])
            .inc();
        conv.record(TranscriptEntry::ToolCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            executed: false,
            output: reason.to_owned(),
            is_error: true,
            truncated: false,
        });
        conv.push(Message::tool_result(&call.id, reason));
    }
}

/// Runs the calls in order; every result is evidence, fenced like the rest (P7).
async fn run_tools(ctx: &CallContext<'_>, conv: &mut Conversation<'_>, calls: &[ToolCall]) {
    let Some(toolbox) = &ctx.toolbox else { return };
    for call in calls {
        let span =
            tracing::info_span!("tool_call", tool = %call.name, is_error = tracing::field::Empty);
        let output = toolbox
            .call(&call.name, &call.arguments)
            .instrument(span.clone())
            .await;
        span.record("is_error", output.is_error);
        ctx.deps
            .metrics
            .tool_calls
            .with_label_values(&[
                metric_tool_name(&call.name),
                if output.is_error { "error" } else { "ok" },
            ])
            .inc();
        let label = format!(
            "tool result: {} {}",
            call.name,
            one_line(&call.arguments, 100)
        );
        let fenced = evidence::fence(&label, &output.content, conv.boundary());
        conv.record(TranscriptEntry::ToolCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            executed: true,
            output: output.content,
            is_error: output.is_error,
            truncated: output.truncated,
        });
        conv.push(Message::tool_result(&call.id, fenced));
    }
}

/// Tool names are a metric label: only the known ones pass, anything a model invents is `other`.
fn metric_tool_name(name: &str) -> &'static str {
    match name {
        "read" => "read",
        "grep" => "grep",
        "find" => "find",
        "ls" => "ls",
        _ => "other",
    }
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    flat
}
