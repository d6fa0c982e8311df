//! The conversation: AI calls and tool rounds until the model gives a final answer, under the
//! soft deadline (SPEC E1, E2). There is no tool-round limit; the deadline is what ends a loop.

use tracing::Instrument;
use verdict_proto::evidence;
use verdict_proto::wire::EventType;

use super::attempt::{Attempt, Failure};
use crate::deadline::{finalise_message, no_tools_message, not_executed_message};
use crate::provider::{ChatResponse, Message, ToolCall};
use verdict_proto::transcript::{CallPurpose, TranscriptEntry};

impl Attempt<'_> {
    /// Runs the conversation to a final answer: a response without tool calls, or any response
    /// once tools are no longer offered (its text goes to parsing and repair).
    pub(super) async fn converse(&mut self) -> Result<ChatResponse, Failure> {
        loop {
            self.finalise_if_due().await;
            let offer_tools = self.toolbox.is_some() && !self.deadline.is_finalised();
            let response = self
                .call(CallPurpose::Turn, None, offer_tools, None)
                .await?;
            // The assistant turn is kept with its tool calls so tool results can answer them.
            self.messages.push(Message::assistant(
                response.content.clone(),
                response.tool_calls.clone(),
            ));
            if response.tool_calls.is_empty() {
                return Ok(response);
            }
            let language = self.request.language;
            if !offer_tools {
                // Finalised, or a stage without tools: answer the calls as not executed and
                // judge the text of this turn.
                let reason = if self.deadline.is_finalised() {
                    not_executed_message(language)
                } else {
                    no_tools_message(language)
                };
                self.answer_unexecuted(&response.tool_calls, reason);
                return Ok(response);
            }
            if self.deadline.reached(self.now_unix_ms()) {
                // The call was in flight when the deadline passed: it was allowed to return, but
                // its tool calls are not run; the next call carries the finalise message.
                self.answer_unexecuted(&response.tool_calls, not_executed_message(language));
                continue;
            }
            self.run_tools(&response.tool_calls).await;
        }
    }

    /// Adds the finalise message once, the first time a call is about to be made after the
    /// deadline (E2).
    pub(super) async fn finalise_if_due(&mut self) {
        let now = self.now_unix_ms();
        if !self.deadline.take_finalisation(now) {
            return;
        }
        self.messages
            .push(Message::user(finalise_message(self.request.language)));
        self.transcript
            .entries
            .push(TranscriptEntry::DeadlineReached { at_unix_ms: now });
        self.exec
            .deps
            .metrics
            .deadline_finalisations
            .with_label_values(&[self.request.stage.as_str()])
            .inc();
        tracing::info!("soft deadline reached; asking for a final answer without tools");
        self.emit(
            EventType::DeadlineReached,
            None,
            format!(
                "Time budget reached during {}; asking the model for its final answer without tools.",
                self.request.stage.as_str()
            ),
            serde_json::json!({"deadline_unix_ms": self.deadline.deadline_unix_ms()}),
        )
        .await;
    }

    fn answer_unexecuted(&mut self, calls: &[ToolCall], reason: &str) {
        for call in calls {
            self.exec
                .deps
                .metrics
                .tool_calls
                .with_label_values(&[metric_tool_name(&call.name), "not_executed"])
                .inc();
            self.transcript.entries.push(TranscriptEntry::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                executed: false,
                output: reason.to_owned(),
                is_error: true,
                truncated: false,
            });
            self.messages.push(Message::tool_result(&call.id, reason));
        }
    }

    /// Runs the calls in order; every result is evidence, fenced like the rest (P7).
    async fn run_tools(&mut self, calls: &[ToolCall]) {
        let boundary = self.boundary.clone();
        for call in calls {
            let Some(toolbox) = &self.toolbox else { return };
            let span = tracing::info_span!("tool_call", tool = %call.name, is_error = tracing::field::Empty);
            let output = toolbox
                .call(&call.name, &call.arguments)
                .instrument(span.clone())
                .await;
            span.record("is_error", output.is_error);
            self.exec
                .deps
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
            let fenced = evidence::fence(&label, &output.content, &boundary);
            self.transcript.entries.push(TranscriptEntry::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                executed: true,
                output: output.content,
                is_error: output.is_error,
                truncated: output.truncated,
            });
            self.messages.push(Message::tool_result(&call.id, fenced));
        }
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
