//! Call sizing: every call is sized to fit the model's context window — prompt, tool
//! results and the output it may write, with a margin — so a small local model is never sent a
//! request its server refuses (`exceed_context_size_error`) or left to run on until the window
//! is full.

use crate::provider::{ChatRequest, Message, ProviderError, ToolDefinition};
use verdict_proto::outcome::FailureKind;

/// The output limit of a call when the provider's window is known and no `max_tokens` is
/// configured, for a large window: enough for any contract's answer, small enough that a model
/// that runs on stops.
pub(super) const DEFAULT_OUTPUT_TOKENS: u32 = 2048;

/// The default output limit in `window`: an eighth of it, at most [`DEFAULT_OUTPUT_TOKENS`],
/// at least [`MIN_OUTPUT_TOKENS`]. A model with a small window is a small or local one, whose
/// every generated token costs real seconds when it runs on; 1,024 tokens of an 8,192 window
/// still hold a review envelope with several findings.
pub(super) fn default_output_tokens(window: u32) -> u32 {
    (window / 8).clamp(MIN_OUTPUT_TOKENS, DEFAULT_OUTPUT_TOKENS)
}

/// A call that leaves less room than this for the answer is not sent: no contract fits in it.
pub(super) const MIN_OUTPUT_TOKENS: u32 = 256;

/// The tokens a prompt of these messages (and `extra_bytes` of tool definitions) counts, on the
/// high side: one token per three bytes of UTF-8 (about four characters of English, one of
/// Chinese or Japanese) plus four per message for the chat framing.
pub(super) fn prompt_tokens(messages: &[Message], extra_bytes: usize) -> u64 {
    let bytes: usize = messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_call_id.as_ref().map_or(0, String::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                    .sum::<usize>()
        })
        .sum();
    let tokens = (bytes + extra_bytes).div_ceil(3) + 4 * messages.len();
    u64::try_from(tokens).unwrap_or(u64::MAX)
}

/// Bytes of tool definitions, as they count against the window.
pub(super) fn tool_bytes(tools: &[ToolDefinition]) -> usize {
    tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum()
}

/// What is held back from a window besides prompt and output: the estimate's error and the
/// chat template's own tokens (a sixteenth, at least 64).
fn margin(window: u32) -> u64 {
    u64::from((window / 16).max(64))
}

/// The room left for the answer after a prompt of `prompt` tokens in `window`.
pub(super) fn room(window: u32, prompt: u64) -> u64 {
    u64::from(window).saturating_sub(prompt.saturating_add(margin(window)))
}

/// Whether messages of `prompt` tokens leave the answer at least [`MIN_OUTPUT_TOKENS`].
pub(super) fn fits(window: u32, prompt: u64) -> bool {
    room(window, prompt) >= u64::from(MIN_OUTPUT_TOKENS)
}

/// The bytes of evidence a first call's prompt may carry in `window`: what is left after the
/// prompt's frame (`frame_tokens`: system message, tools, coverage note), a fence per input,
/// the margin and the answer's room — the output limit (or [`default_output_tokens`]), at
/// most a quarter of the window, at least [`MIN_OUTPUT_TOKENS`] — and, when tools are offered,
/// an eighth of the window for their results.
pub(super) fn evidence_bytes(
    window: u32,
    output_limit: Option<u32>,
    frame_tokens: u64,
    inputs: usize,
    tools: bool,
) -> usize {
    let answer = output_limit
        .unwrap_or(default_output_tokens(window))
        .min(window / 4)
        .max(MIN_OUTPUT_TOKENS);
    let tool_results = if tools { window / 8 } else { 0 };
    let fences = u64::try_from(inputs)
        .unwrap_or(u64::MAX)
        .saturating_mul(FENCE_TOKENS);
    let left = room(window, frame_tokens.saturating_add(fences))
        .saturating_sub(u64::from(answer) + u64::from(tool_results));
    usize::try_from(left.saturating_mul(3)).unwrap_or(usize::MAX)
}

/// The tokens one input's fence (its label and the boundary markers) counts, on the high side.
const FENCE_TOKENS: u64 = 48;

/// Sizes `request` to `window`: its `max_tokens` becomes the configured output limit (or
/// [`default_output_tokens`]) cut to the room the prompt leaves. `Err` when that room is below
/// [`MIN_OUTPUT_TOKENS`]: the call would be refused or cut off, so it is not sent.
pub(super) fn size(
    request: &mut ChatRequest,
    provider: &str,
    window: u32,
    output_limit: Option<u32>,
) -> Result<(), ProviderError> {
    let prompt = prompt_tokens(&request.messages, tool_bytes(&request.tools));
    if room(window, prompt) < u64::from(MIN_OUTPUT_TOKENS) {
        return Err(ProviderError::new(
            FailureKind::BadRequest,
            format!(
                "provider `{provider}` model `{}`: the prompt (about {prompt} tokens) leaves no room for an answer in the model's context window of {window} tokens; raise context_window (and the server's context size), or lower pipeline.max_diff_bytes_per_reviewer",
                request.model
            ),
        ));
    }
    request.max_tokens = Some(output_tokens(request, window, output_limit));
    Ok(())
}

/// The output limit [`size`] gives `request` in `window`: the request's own, else the
/// configured one, else [`default_output_tokens`], cut to the room the prompt leaves.
pub(super) fn output_tokens(request: &ChatRequest, window: u32, output_limit: Option<u32>) -> u32 {
    let prompt = prompt_tokens(&request.messages, tool_bytes(&request.tools));
    let wanted = request
        .max_tokens
        .or(output_limit)
        .unwrap_or(default_output_tokens(window));
    u32::try_from(room(window, prompt).min(u64::from(wanted))).unwrap_or(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolChoice;

    fn request(user_bytes: usize) -> ChatRequest {
        ChatRequest {
            model: "small".into(),
            messages: vec![Message::system("s"), Message::user("x".repeat(user_bytes))],
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            temperature: None,
            max_tokens: None,
            constraint: None,
        }
    }

    #[test]
    fn the_output_limit_is_cut_to_the_room_the_prompt_leaves() {
        // 3,000 bytes ≈ 1,001 tokens + 8 of framing; margin 512 of 8,192.
        let mut r = request(3000);
        size(&mut r, "local", 8192, None).unwrap();
        assert_eq!(
            r.max_tokens,
            Some(1024),
            "an eighth of the window by default"
        );
        let mut r = request(3000);
        size(&mut r, "local", 131_072, None).unwrap();
        assert_eq!(r.max_tokens, Some(DEFAULT_OUTPUT_TOKENS));
        let mut r = request(18_000);
        size(&mut r, "local", 8192, Some(4096)).unwrap();
        assert_eq!(r.max_tokens, Some(8192 - 6001 - 8 - 512));
    }

    #[test]
    fn evidence_gets_what_the_frame_the_answer_and_tool_results_leave() {
        // 8,192 - margin 512 - frame 1,000 - 2 fences 96 - answer 1,024 = 5,560 tokens.
        assert_eq!(evidence_bytes(8192, None, 1000, 2, false), 5560 * 3);
        // Tools hold back an eighth of the window for their results.
        assert_eq!(evidence_bytes(8192, None, 1000, 2, true), (5560 - 1024) * 3);
        // A configured limit above a quarter of the window is held to the quarter.
        assert_eq!(
            evidence_bytes(8192, Some(6000), 1000, 2, false),
            (8192 - 512 - 1000 - 96 - 2048) * 3
        );
        assert_eq!(evidence_bytes(1024, None, 2000, 1, false), 0);
    }

    #[test]
    fn a_configured_limit_smaller_than_the_room_is_kept() {
        let mut r = request(300);
        size(&mut r, "local", 8192, Some(700)).unwrap();
        assert_eq!(r.max_tokens, Some(700));
    }

    #[test]
    fn a_prompt_that_leaves_no_room_is_not_sent_and_the_error_names_the_fix() {
        let mut r = request(24_000);
        let e = size(&mut r, "local", 8192, None).unwrap_err();
        assert_eq!(e.kind, FailureKind::BadRequest);
        assert!(e.message.contains("context_window"), "{e}");
        assert!(!fits(8192, 8000) && fits(8192, 7000));
    }
}
