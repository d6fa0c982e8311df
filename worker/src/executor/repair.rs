//! Holding the answer to its protocol, and the repair rounds when it breaks it (SPEC E3): the
//! specific error injected each round, no tools, temperature 0, every round observable, and a
//! consistency check after a successful repair. Ends in the attempt's classified outcome (E4).

use tracing::Instrument;
use verdict_proto::grounding::{self, Check};
use verdict_proto::outcome::StageOutcome;
use verdict_proto::redact::safe_preview;
use verdict_proto::repair::{self, MAX_ATTEMPTS_RANGE, RepairMode};
use verdict_proto::transcript::TranscriptEntry;
use verdict_proto::wire::{EventType, PROTOCOL_REPAIR_CHANNEL};
use verdict_proto::{Diagnostics, ProtocolFamily, ProtocolId, validate};

use super::call::{Call, Failure, ai_call};
use super::context::CallContext;
use super::conversation::Conversation;
use super::ground;
use super::turns::finalise_if_due;
use crate::prompt;
use crate::provider::{ChatResponse, Message};

/// Diagnostics quoted in events and outcomes are bounded; the full list stays in the transcript.
const ERROR_CHARS: usize = 2_000;

/// Which repair round this is, of how many, in which mode.
#[derive(Debug, Clone, Copy)]
struct Round {
    number: u8,
    max: u8,
    mode: RepairMode,
}

/// What the next repair round must fix.
enum Problem {
    /// The answer breaks its contract (E3).
    Protocol(Diagnostics),
    /// The answer follows its contract, but findings point at code that is not in the snapshot.
    Grounding(Diagnostics),
}

impl Problem {
    fn diagnostics(&self) -> &Diagnostics {
        match self {
            Problem::Protocol(d) | Problem::Grounding(d) => d,
        }
    }
}

/// The latest answer that followed the contract, with what grounding concluded about it.
struct Valid {
    value: serde_json::Value,
    checks: Vec<Check>,
    unresolved: usize,
}

impl Valid {
    async fn of(ctx: &CallContext<'_>, value: serde_json::Value) -> Valid {
        let checks = ground::check(ctx, &value).await;
        let unresolved = checks
            .iter()
            .filter(|c| matches!(c.verdict, grounding::Verdict::Unresolved { .. }))
            .count();
        Valid {
            value,
            checks,
            unresolved,
        }
    }
}

/// Parses the final answer; grounds its findings; repairs it when invalid (and, in conversation
/// mode, when its locations do not resolve); classifies the result.
///
/// Grounding repair is only asked for in conversation mode: there the model still has the
/// conversation, including what it read, and can say where a finding really is. An isolated
/// repairer sees only the answer and the contract, so it could only guess a path; its stages'
/// unresolved locations are demoted without a round. Grounding rounds share the stage's repair
/// budget, and an answer that followed the contract is never lost to a later round that broke
/// it: when the budget runs out, the best valid answer is kept with what still does not resolve
/// demoted to unlocated.
pub(super) async fn judge(
    ctx: &mut CallContext<'_>,
    conv: &mut Conversation<'_>,
    answer: ChatResponse,
) -> Result<StageOutcome, Failure> {
    let request = ctx.request;
    let protocol = request.protocol;
    let mode = request.repair.mode;
    let repair_grounding = mode == RepairMode::Conversation;
    let original = answer.content;
    let mut best: Option<Valid> = None;
    let mut problem = match validate(protocol, &request.validate, &original) {
        Ok(value) => {
            let valid = Valid::of(ctx, value).await;
            match grounding::diagnostics(protocol, &valid.checks) {
                Some(d) if repair_grounding => {
                    best = Some(valid);
                    Problem::Grounding(d)
                }
                _ => return Ok(settle(ctx, conv, valid, 1)),
            }
        }
        Err(d) => Problem::Protocol(d),
    };
    let max = request
        .repair
        .max_attempts
        .clamp(*MAX_ATTEMPTS_RANGE.start(), *MAX_ATTEMPTS_RANGE.end());
    let mut last = original.clone();
    let mut rounds = max;
    for number in 1..=max {
        let round = Round { number, max, mode };
        let span = tracing::info_span!(
            "repair_round",
            attempt = number,
            max,
            mode = mode_name(mode),
            outcome = tracing::field::Empty
        );
        let result = repair_call(ctx, conv, round, &last, &problem)
            .instrument(span.clone())
            .await;
        let response = match result {
            Ok(r) => r,
            Err(failure) => {
                span.record("outcome", "execution_failure");
                round_done(ctx, conv, round, &problem, None, "execution_failure").await;
                return Err(failure);
            }
        };
        let attempts = 1 + u32::from(number);
        match validate(protocol, &request.validate, &response.content) {
            Ok(value) => {
                if matches!(problem, Problem::Protocol(_)) {
                    check_consistency(ctx, conv, protocol, &original, &value).await;
                }
                let valid = Valid::of(ctx, value).await;
                let remaining =
                    grounding::diagnostics(protocol, &valid.checks).filter(|_| repair_grounding);
                match remaining {
                    None => {
                        span.record("outcome", "repaired");
                        round_done(ctx, conv, round, &problem, None, "repaired").await;
                        return Ok(settle(ctx, conv, valid, attempts));
                    }
                    Some(d) => {
                        span.record("outcome", "ungrounded");
                        round_done(ctx, conv, round, &problem, Some(&d), "ungrounded").await;
                        // The fewer locations left unresolved, the better; on a tie the later
                        // answer, which the model gave knowing the problems.
                        if best
                            .as_ref()
                            .is_none_or(|b| valid.unresolved <= b.unresolved)
                        {
                            best = Some(valid);
                        }
                        problem = Problem::Grounding(d);
                    }
                }
            }
            Err(remaining) => {
                span.record("outcome", "invalid");
                round_done(ctx, conv, round, &problem, Some(&remaining), "invalid").await;
                // The same invalid answer again: a temperature-0 round asked to change nothing
                // but the form has not changed it, and the next would pay for it once more
                // (decision 182). The rounds left are not run.
                let repeated = response.content.trim() == last.trim();
                problem = Problem::Protocol(remaining);
                last = response.content;
                if repeated && number < max {
                    tracing::info!(
                        round = number,
                        max,
                        "the repair round repeated the invalid answer; no further rounds"
                    );
                    rounds = number;
                    break;
                }
            }
        }
    }
    if let Some(valid) = best {
        return Ok(settle(ctx, conv, valid, 1 + u32::from(rounds)));
    }
    let diagnostics = problem.diagnostics().clone();
    Ok(StageOutcome::InvalidOutput {
        stage: request.stage.as_str().to_owned(),
        error: bounded(&diagnostics.to_string()),
        diagnostics,
        preview: safe_preview(&last, ctx.settings.preview_chars),
        attempts: 1 + u32::from(rounds),
    })
}

/// The `ok` outcome of a valid answer, its findings grounded (unresolved ones demoted).
fn settle(
    ctx: &CallContext<'_>,
    conv: &mut Conversation<'_>,
    valid: Valid,
    attempts: u32,
) -> StageOutcome {
    let Valid {
        mut value, checks, ..
    } = valid;
    ground::settle(ctx, conv, &mut value, &checks);
    StageOutcome::Ok {
        value,
        repaired: attempts > 1,
        attempts,
    }
}

/// One repair call: no tools, temperature 0, in the configured mode. A grounding problem is
/// only ever repaired in conversation mode.
async fn repair_call(
    ctx: &mut CallContext<'_>,
    conv: &mut Conversation<'_>,
    round: Round,
    invalid: &str,
    problem: &Problem,
) -> Result<ChatResponse, Failure> {
    let protocol = ctx.request.protocol;
    let language = ctx.request.language;
    let conversation_text = match problem {
        Problem::Grounding(d) => Some(repair::grounding_message(
            protocol,
            language,
            d,
            round.number,
            round.max,
        )),
        Problem::Protocol(d) if round.mode == RepairMode::Conversation => Some(
            repair::conversation_message(protocol, language, d, round.number, round.max),
        ),
        Problem::Protocol(_) => None,
    };
    // A conversation repair that would not fit the model's window becomes an isolated one:
    // the contract, the invalid answer and the errors only.
    let conversation_text = match conversation_text {
        Some(text) if matches!(problem, Problem::Protocol(_)) => {
            let window = ctx.route.provider().context_window(ctx.cancel).await;
            let prompt = super::sizing::prompt_tokens(conv.messages(), text.len() + 16);
            match window {
                Some(window) if !super::sizing::fits(window, prompt) => {
                    tracing::info!(
                        window,
                        prompt,
                        "the conversation repair would not fit the context window; repairing in isolation"
                    );
                    None
                }
                _ => Some(text),
            }
        }
        other => other,
    };
    match conversation_text {
        Some(text) => {
            // The whole dialogue so far stays, so the model reformats the conclusions it already
            // reached; after the deadline the finalise message is in it too.
            finalise_if_due(ctx, conv).await;
            conv.push(Message::user(text));
            let response = ai_call(ctx, conv, Call::ConversationRepair).await?;
            // Only the text is kept: tool calls in a repair answer are never run, and a dangling
            // call would make the next request ill-formed.
            conv.push(Message::assistant(response.content.clone(), Vec::new()));
            Ok(response)
        }
        None => {
            // Only the contract, the invalid response (fenced behind a fresh token) and the
            // error: no task, no repository, no snapshot path, no tools.
            let boundary = prompt::new_boundary();
            let contract = prompt::contract_for(ctx.request);
            let p = repair::isolated_prompt(
                protocol,
                language,
                &contract,
                invalid,
                problem.diagnostics(),
                &boundary,
            );
            let messages = vec![Message::system(p.system), Message::user(p.user)];
            ai_call(ctx, conv, Call::IsolatedRepair { messages, boundary }).await
        }
    }
}

/// Records one round: metric, transcript entry, and a progress event on the repair channel.
async fn round_done(
    ctx: &CallContext<'_>,
    conv: &mut Conversation<'_>,
    round: Round,
    problem: &Problem,
    remaining: Option<&Diagnostics>,
    outcome: &str,
) {
    let Round { number, max, mode } = round;
    let repaired_error = problem.diagnostics();
    let reason = match problem {
        Problem::Protocol(_) => "protocol",
        Problem::Grounding(_) => "grounding",
    };
    let protocol = ctx.request.protocol.as_str();
    ctx.deps
        .metrics
        .repair_rounds
        .with_label_values(&[protocol, ctx.route.model(), outcome])
        .inc();
    let error = bounded(&repaired_error.to_string());
    conv.record(TranscriptEntry::RepairRound {
        attempt: number,
        max,
        mode: mode_name(mode).to_owned(),
        error: error.clone(),
        outcome: outcome.to_owned(),
    });
    let first = repaired_error.first();
    let message = match outcome {
        "repaired" => format!(
            "Protocol repair round {number} of {max} ({protocol}): the answer now follows the contract."
        ),
        "invalid" => format!(
            "Protocol repair round {number} of {max} ({protocol}): still invalid — {}",
            safe_preview(&first.to_string(), 200)
        ),
        "ungrounded" => format!(
            "Protocol repair round {number} of {max} ({protocol}): the answer follows the contract, but some findings still point at code that is not in the repository — {}",
            safe_preview(
                &remaining.map_or(first, Diagnostics::first).to_string(),
                200
            )
        ),
        _ => {
            format!("Protocol repair round {number} of {max} ({protocol}): the repair call failed.")
        }
    };
    ctx.emit(
        EventType::ProtocolRepair,
        Some(PROTOCOL_REPAIR_CHANNEL),
        message,
        serde_json::json!({
            "attempt": number,
            "max": max,
            "mode": mode_name(mode),
            "protocol": protocol,
            "reason": reason,
            "error": error,
            "remaining_error": remaining.map(|d| bounded(&d.to_string())),
            "outcome": outcome,
        }),
    )
    .await;
}

/// After a successful repair, compares the finding count with the `<FINDING>` blocks of the
/// original response (envelopes with findings only). A difference is a warning, never a
/// rejection: the model may have merged duplicates, or invented or dropped findings.
async fn check_consistency(
    ctx: &CallContext<'_>,
    conv: &mut Conversation<'_>,
    protocol: ProtocolId,
    original: &str,
    value: &serde_json::Value,
) {
    if protocol.family() != ProtocolFamily::Envelope {
        return;
    }
    let Some(repaired) = value
        .get("findings")
        .and_then(|f| f.as_array())
        .map(Vec::len)
    else {
        return;
    };
    let original_count = original.lines().filter(|l| l.trim() == "<FINDING>").count();
    if original_count == repaired {
        return;
    }
    ctx.deps
        .metrics
        .repair_consistency_warnings
        .with_label_values(&[protocol.as_str()])
        .inc();
    conv.record(TranscriptEntry::ConsistencyWarning {
        original: original_count,
        repaired,
    });
    tracing::warn!(
        original = original_count,
        repaired,
        "repaired answer changed the number of findings"
    );
    ctx.emit(
        EventType::RepairConsistencyWarning,
        Some(PROTOCOL_REPAIR_CHANNEL),
        format!(
            "The repaired answer has {repaired} findings; the original response had {original_count} <FINDING> blocks."
        ),
        serde_json::json!({"original": original_count, "repaired": repaired}),
    )
    .await;
}

fn mode_name(mode: RepairMode) -> &'static str {
    match mode {
        RepairMode::Conversation => "conversation",
        RepairMode::Isolated => "isolated",
    }
}

fn bounded(text: &str) -> String {
    safe_preview(text, ERROR_CHARS)
}
