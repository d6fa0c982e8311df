//! One AI call, the only way an attempt reaches a model: the response journal first (E7), then
//! the provider with retries (E5) and fallback models — each provider call admitted by the
//! pool's rate limits first and metered, a 429 pausing its model for the pool (Q3, X6) — and the
//! call written to the transcript whatever its end.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;
use verdict_proto::evidence::Boundary;
use verdict_proto::outcome::FailureKind;
use verdict_proto::transcript::{CallPurpose, TranscriptEntry};
use verdict_proto::wire::EventType;

use super::context::CallContext;
use super::conversation::Conversation;
use super::limits::{self, Admission};
use super::sizing;
use super::turns::finalise_if_due;
use crate::journal;
use crate::provider::{
    ChatRequest, ChatResponse, Message, OutputConstraint, Provider, ProviderError,
    StructuredOutput, TokenUsage, ToolChoice,
};
use crate::retry::{RetryDecision, RetryPolicy, RetryState};
use verdict_backends::repo::Snapshot;
use verdict_proto::structured;

/// E3: repair calls run at temperature 0.
const REPAIR_TEMPERATURE: f32 = 0.0;

/// What a call is for, which decides what it sends. Only a turn may offer tools: repair calls
/// never do.
pub(super) enum Call {
    /// The next turn of the conversation; tools are offered when `offer_tools` (E1, E2).
    Turn { offer_tools: bool },
    /// A repair over the whole conversation so far (E3, conversation mode).
    ConversationRepair,
    /// A repair over a self-contained message list fenced with its own boundary token (E3,
    /// isolated mode); the conversation is neither sent nor changed.
    IsolatedRepair {
        messages: Vec<Message>,
        boundary: Boundary,
    },
}

impl Call {
    fn purpose(&self) -> CallPurpose {
        match self {
            Call::Turn { .. } => CallPurpose::Turn,
            Call::ConversationRepair | Call::IsolatedRepair { .. } => CallPurpose::Repair,
        }
    }

    fn offers_tools(&self) -> bool {
        matches!(self, Call::Turn { offer_tools: true })
    }

    fn temperature(&self) -> Option<f32> {
        match self {
            Call::Turn { .. } => None,
            Call::ConversationRepair | Call::IsolatedRepair { .. } => Some(REPAIR_TEMPERATURE),
        }
    }
}

/// Where an attempt's calls go: the provider, the model now in use, the fallback models not yet
/// tried, and the retry budget left on the current model.
pub(super) struct Route {
    provider: Arc<dyn Provider>,
    model: String,
    fallbacks: std::vec::IntoIter<String>,
    retry: RetryState,
}

impl Route {
    pub(super) fn new(
        provider: Arc<dyn Provider>,
        model: String,
        fallbacks: Vec<String>,
        retry: &RetryPolicy,
    ) -> Route {
        Route {
            provider,
            model,
            fallbacks: fallbacks.into_iter(),
            retry: RetryState::new(retry),
        }
    }

    /// E5: after the current model's budget is spent on a retryable failure, the next fallback
    /// model, if any; a requeue or a final failure ends the attempt instead.
    fn fallback_after(&mut self, failure: &Failure) -> Option<String> {
        let exhausted = failure.requeue_after.is_none() && failure.error.kind.is_retryable();
        if exhausted {
            self.fallbacks.next()
        } else {
            None
        }
    }

    /// The model calls go to now (a fallback once the primary's budget is spent).
    pub(super) fn model(&self) -> &str {
        &self.model
    }

    /// The provider calls go to.
    pub(super) fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Moves to `model` with a fresh retry budget.
    fn switch_to(&mut self, model: String, retry: &RetryPolicy) {
        self.model = model;
        self.retry = RetryState::new(retry);
    }
}

/// How an attempt ended without an answer to judge.
#[derive(Debug)]
pub(super) struct Failure {
    pub error: ProviderError,
    /// Set when the stage should be requeued after this delay rather than fail now.
    pub requeue_after: Option<Duration>,
}

impl Failure {
    fn now(error: ProviderError) -> Failure {
        Failure {
            error,
            requeue_after: None,
        }
    }
}

/// Makes one AI call of the attempt and records it in the conversation's transcript. A turn or
/// a conversation repair sends the whole conversation (the caller has already added its
/// message); an isolated repair sends only its own messages.
pub(super) async fn ai_call(
    ctx: &mut CallContext<'_>,
    conv: &mut Conversation<'_>,
    call: Call,
) -> Result<ChatResponse, Failure> {
    let purpose = call.purpose();
    let temperature = call.temperature();
    let tools = match (&ctx.toolbox, call.offers_tools()) {
        (Some(t), true) => t.definitions(),
        _ => Vec::new(),
    };
    let tool_choice = if tools.is_empty() {
        ToolChoice::None
    } else {
        ToolChoice::Auto
    };
    // Every boundary token in the request, so the journal key ignores them (decision 22).
    let mut tokens = vec![conv.boundary().token().to_owned()];
    let (messages, mut new_messages) = match call {
        Call::IsolatedRepair { messages, boundary } => {
            tokens.push(boundary.token().to_owned());
            conv.note_boundary(boundary.token());
            (messages.clone(), messages)
        }
        Call::Turn { .. } | Call::ConversationRepair => {
            let new = conv.take_unrecorded();
            (conv.messages().to_vec(), new)
        }
    };
    let mut tool_names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    let mut request = ChatRequest {
        model: ctx.route.model.clone(),
        messages,
        tools,
        tool_choice,
        temperature,
        max_tokens: None,
        constraint: None,
    };
    // A schema or grammar and tool calls exclude each other: only calls without tools are
    // constrained (the final answer after the deadline, stages without tools, every repair).
    if request.tools.is_empty() {
        request.constraint = constraint_for(ctx, &request).await;
    }
    let seq = conv.next_seq();

    loop {
        let provider = ctx.route.provider.name().to_owned();
        // Sized to the model's context window, when it is known: the output limit cut to the
        // room the prompt leaves, or the call not sent at all when no answer would fit.
        let sized = match ctx.route.provider.context_window(ctx.cancel).await {
            Some(window) => sizing::size(
                &mut request,
                &provider,
                window,
                ctx.route.provider.output_limit(),
            ),
            None => Ok(()),
        };
        let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let key = journal::call_key(
            &ctx.request.task_id,
            &ctx.request.stage_id,
            &provider,
            &request,
            &token_refs,
        );
        let entry = CallEntry {
            seq,
            purpose,
            provider: &provider,
            request: &request,
            new_messages: &new_messages,
            tools: &tool_names,
        };
        if let Err(error) = sized {
            conv.record(entry.ended(Ended::Failed(&error)));
            return Err(Failure::now(error));
        }
        match ctx.deps.journal.get(&key).await {
            Ok(Some(response)) => {
                ctx.deps
                    .metrics
                    .responses_reused
                    .with_label_values(&[&provider])
                    .inc();
                conv.record(entry.ended(Ended::Reused(&response)));
                return Ok(response);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "response journal unavailable; calling the provider")
            }
        }

        // A turn that offers tools must not start after the deadline: a rate-limit wait stops
        // there (E2).
        let stop_at = (!request.tools.is_empty()).then(|| conv.deadline.deadline_unix_ms());
        match call_with_retries(ctx, conv, seq, &request, stop_at).await {
            Ok((response, latency_ms)) => {
                if let Err(e) = ctx.deps.journal.put(&key, &response).await {
                    tracing::warn!(error = %e, "response not journaled; a redelivery would pay for it again");
                }
                conv.record(entry.ended(Ended::Answered(&response, latency_ms)));
                return Ok(response);
            }
            Err(Stop::Deadline) => {
                // The soft deadline came while this turn waited for the rate limit: it goes
                // out as the final call instead — the finalise message added, no tools (E2).
                finalise_if_due(ctx, conv).await;
                new_messages.extend(conv.take_unrecorded());
                request.messages = conv.messages().to_vec();
                request.tools.clear();
                request.tool_choice = ToolChoice::None;
                request.constraint = constraint_for(ctx, &request).await;
                tool_names.clear();
            }
            Err(Stop::Failed(mut failure)) => {
                conv.record(entry.ended(Ended::Failed(&failure.error)));
                if let Some(mode) = refused_constraint(&request, &failure.error) {
                    // The provider refused the constraint itself: retried once without it, and
                    // that model is asked unconstrained from now on. Never a failed stage.
                    ctx.route.provider.refuse_constraint(&request.model);
                    ctx.deps
                        .metrics
                        .structured_downgrades
                        .with_label_values(&[provider.as_str(), request.model.as_str(), mode])
                        .inc();
                    tracing::warn!(
                        provider = %provider,
                        model = %request.model,
                        mode,
                        error = %failure.error,
                        "the provider refused the decoding constraint; retrying without it"
                    );
                    request.constraint = None;
                    continue;
                }
                let Some(next) = ctx.route.fallback_after(&failure) else {
                    if failure.requeue_after.is_none()
                        && failure.error.kind == FailureKind::RateLimited
                    {
                        // A rate limit outlasted the inline budget of every model: requeue
                        // with a delay rather than fail (E5); the consumer bounds requeues by
                        // broker.max_requeues, after which the failure is final.
                        failure.requeue_after = Some(ctx.route.retry.requeue_delay(&failure.error));
                    }
                    return Err(failure);
                };
                let from = &ctx.route.model;
                ctx.emit(
                    EventType::StageRetry,
                    None,
                    format!(
                        "Model {from} keeps failing ({}); falling back to {next}",
                        failure.error.kind
                    ),
                    serde_json::json!({"from": from, "to": next, "kind": failure.error.kind}),
                )
                .await;
                ctx.route.switch_to(next.clone(), &ctx.settings.retry);
                request.model = next;
            }
        }
    }
}

/// The decoding constraint for `request`, a call without tools to the route's provider: the
/// stage's `structured_output` override, else the provider's mode (`auto` resolved), unless the
/// provider already refused a constraint for that model; its lists bounded to what the call's
/// output limit holds (decision 182).
async fn constraint_for(ctx: &CallContext<'_>, request: &ChatRequest) -> Option<OutputConstraint> {
    let provider = &ctx.route.provider;
    if provider.refuses_constraint(&request.model) {
        return None;
    }
    let mode = match ctx.request.structured_output {
        Some(mode) if mode != StructuredOutput::Auto => mode,
        _ => provider.structured_output(ctx.cancel).await,
    };
    if mode == StructuredOutput::Off {
        return None;
    }
    // Lists no longer than the call's output limit holds: the answer ends inside it.
    let output_tokens = match provider.context_window(ctx.cancel).await {
        Some(window) => Some(sizing::output_tokens(
            request,
            window,
            provider.output_limit(),
        )),
        None => request.max_tokens.or(provider.output_limit()),
    };
    let bounds = provider.structured_bounds();
    structured::constraint(
        ctx.request.protocol,
        mode,
        output_tokens.map_or(bounds, |tokens| bounds.fitted_to_output(tokens)),
        ctx.scope.as_scope(),
    )
}

/// Words a provider's refusal of a constraint names (OpenAI `response_format`, llama.cpp's
/// grammar and schema errors — `json_schema` among them —, Anthropic's `tool_choice`).
const CONSTRAINT_WORDS: [&str; 5] = [
    "response_format",
    "schema",
    "grammar",
    "tool_choice",
    "structured",
];

/// The refused mode, when `error` is an HTTP 400 (or 422) to a constrained request that names
/// the constraint: the request was fine but for it.
fn refused_constraint(request: &ChatRequest, error: &ProviderError) -> Option<&'static str> {
    let constraint = request.constraint.as_ref()?;
    let rejected = error.kind == FailureKind::BadRequest && matches!(error.status, Some(400 | 422));
    let message = error.message.to_ascii_lowercase();
    (rejected && CONSTRAINT_WORDS.iter().any(|w| message.contains(w))).then(|| constraint.mode())
}

/// Why [`call_with_retries`] returned without an answer.
enum Stop {
    Failed(Failure),
    /// A rate-limit wait reached the soft deadline (`stop_at`): nothing was sent.
    Deadline,
}

/// Calls the provider until it answers, the failure is final, or the wait is too long. Every
/// call first waits for the pool's rate limits (that wait ends at `stop_at` when given). Returns
/// the answer and its latency in milliseconds.
async fn call_with_retries(
    ctx: &mut CallContext<'_>,
    conv: &mut Conversation<'_>,
    seq: u32,
    request: &ChatRequest,
    stop_at: Option<u64>,
) -> Result<(ChatResponse, u64), Stop> {
    let provider = Arc::clone(&ctx.route.provider);
    let metrics = ctx.deps.metrics.clone();
    let labels = [provider.name().to_owned(), request.model.clone()];
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(Stop::Failed(Failure::now(cancelled())));
        }
        match limits::admit(ctx, provider.name(), request, stop_at).await {
            Admission::Granted => {}
            Admission::DeadlineReached => return Err(Stop::Deadline),
            Admission::Requeue(wait) => {
                let error = ProviderError {
                    retry_after: Some(wait),
                    ..ProviderError::new(
                        FailureKind::RateLimited,
                        format!(
                            "provider `{}` model `{}`: the pool's rate limit asks to wait {} ms, longer than retry.max_inline_wait_seconds; the stage is requeued",
                            labels[0],
                            labels[1],
                            wait.as_millis()
                        ),
                    )
                };
                return Err(Stop::Failed(Failure {
                    error,
                    requeue_after: Some(wait),
                }));
            }
            Admission::Cancelled => return Err(Stop::Failed(Failure::now(cancelled()))),
            Admission::Refused(reason) => {
                return Err(Stop::Failed(Failure::now(ProviderError::new(
                    FailureKind::Internal,
                    reason,
                ))));
            }
        }
        let span = tracing::info_span!(
            "ai_call",
            provider = provider.name(),
            model = %request.model,
            seq,
            tools = request.tools.len(),
            status = tracing::field::Empty,
        );
        let started = tokio::time::Instant::now();
        let result = provider
            .complete(
                request,
                ctx.snapshot.as_ref().map(Snapshot::root),
                ctx.cancel,
            )
            .instrument(span.clone())
            .await;
        let latency = started.elapsed();
        metrics
            .provider_latency
            .with_label_values(&[&labels[0], &labels[1]])
            .observe(latency.as_secs_f64());
        let status = match &result {
            Ok(_) => "ok",
            Err(e) => e.kind.as_str(),
        };
        span.record("status", status);
        metrics
            .provider_requests
            .with_label_values(&[&labels[0], &labels[1], status])
            .inc();
        let error = match result {
            Ok(response) => {
                let u = response.usage;
                metrics
                    .provider_tokens
                    .with_label_values(&[&labels[0], &labels[1], "input"])
                    .inc_by(u.input_tokens);
                metrics
                    .provider_tokens
                    .with_label_values(&[&labels[0], &labels[1], "output"])
                    .inc_by(u.output_tokens);
                if let Some(price) = ctx.settings.prices.get(&labels[0]) {
                    metrics
                        .provider_cost
                        .with_label_values(&[&labels[0], &labels[1]])
                        .inc_by(price.cost(u.input_tokens, u.output_tokens));
                }
                conv.count_call(u);
                let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
                return Ok((response, latency_ms));
            }
            Err(e) => e,
        };
        conv.count_call(TokenUsage::default());
        if ctx.cancel.is_cancelled() {
            return Err(Stop::Failed(Failure::now(cancelled())));
        }
        let decision = ctx.route.retry.decide(&error);
        if let Some(pause) = ctx.route.retry.pool_pause(&error) {
            // X6: the whole pool slows down for this model, not only this call.
            limits::pause(ctx, &labels[0], &labels[1], pause).await;
        }
        match decision {
            RetryDecision::Wait(wait) => {
                metrics
                    .provider_retries
                    .with_label_values(&[&labels[0], &labels[1], error.kind.as_str()])
                    .inc();
                if error.kind == FailureKind::RateLimited {
                    metrics
                        .rate_limit_waits
                        .with_label_values(&[&labels[0], &labels[1]])
                        .inc();
                    metrics
                        .rate_limit_wait_seconds
                        .with_label_values(&[&labels[0], &labels[1]])
                        .observe(wait.as_secs_f64());
                }
                conv.record(TranscriptEntry::Retry {
                    seq,
                    kind: error.kind.as_str().to_owned(),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    message: error.message.clone(),
                });
                tracing::info!(
                    kind = error.kind.as_str(),
                    wait_ms = wait.as_millis() as u64,
                    "retrying provider call"
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = ctx.cancel.cancelled() => return Err(Stop::Failed(Failure::now(cancelled()))),
                }
            }
            RetryDecision::Requeue(wait) => {
                return Err(Stop::Failed(Failure {
                    error,
                    requeue_after: Some(wait),
                }));
            }
            RetryDecision::GiveUp => return Err(Stop::Failed(Failure::now(error))),
        }
    }
}

/// What the transcript says of one call, whatever its end.
struct CallEntry<'r> {
    seq: u32,
    purpose: CallPurpose,
    provider: &'r str,
    request: &'r ChatRequest,
    /// The messages the transcript has not shown yet (the whole prompt of an isolated repair).
    new_messages: &'r [Message],
    tools: &'r [String],
}

/// How a call ended.
enum Ended<'r> {
    /// Answered from the journal of an earlier delivery (E7).
    Reused(&'r ChatResponse),
    /// Answered by the provider, after this many milliseconds.
    Answered(&'r ChatResponse, u64),
    /// Failed after its retries.
    Failed(&'r ProviderError),
}

impl CallEntry<'_> {
    fn ended(&self, ended: Ended<'_>) -> TranscriptEntry {
        let (response, error, latency_ms, reused) = match ended {
            Ended::Reused(r) => (Some(r.clone()), None, 0, true),
            Ended::Answered(r, latency_ms) => (Some(r.clone()), None, latency_ms, false),
            Ended::Failed(e) => (None, Some(e.to_string()), 0, false),
        };
        TranscriptEntry::Call {
            seq: self.seq,
            purpose: self.purpose,
            provider: self.provider.to_owned(),
            model: self.request.model.clone(),
            new_messages: self.new_messages.to_vec(),
            tools: self.tools.to_vec(),
            temperature: self.request.temperature,
            response,
            error,
            latency_ms,
            reused,
        }
    }
}

fn cancelled() -> ProviderError {
    ProviderError::new(FailureKind::Cancelled, "the stage was cancelled")
}
