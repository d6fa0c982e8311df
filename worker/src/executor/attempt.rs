//! One stage attempt's state, and the one way it makes an AI call: journal first (E7), then the
//! provider with retries (E5) and fallback models, each call metered and written to the
//! transcript.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use verdict_proto::evidence::Boundary;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::wire::{EventType, StageRequest, Usage};

use super::StageExecutor;
use crate::deadline::SoftDeadline;

use crate::journal;
use crate::provider::{ChatRequest, ChatResponse, Message, Provider, ProviderError, ToolChoice};
use crate::retry::{RetryDecision, RetryState};
use crate::tools::ToolBox;
use verdict_backends::repo::Snapshot;
use verdict_proto::transcript::{CallPurpose, Transcript, TranscriptEntry};

/// How an attempt ended without an answer to judge.
#[derive(Debug)]
pub(super) struct Failure {
    pub error: ProviderError,
    /// Set when the stage should be requeued after this delay rather than fail now.
    pub requeue_after: Option<Duration>,
}

impl Failure {
    pub fn now(error: ProviderError) -> Failure {
        Failure {
            error,
            requeue_after: None,
        }
    }
}

pub(super) struct Attempt<'a> {
    pub exec: &'a StageExecutor,
    pub request: &'a StageRequest,
    pub cancel: &'a CancellationToken,
    provider: Arc<dyn Provider>,
    model: String,
    fallbacks: std::vec::IntoIter<String>,
    /// Held for the whole attempt: its lease keeps the cache from evicting the tree while an
    /// `exec` agent or a tool works in it.
    snapshot: Option<Snapshot>,
    pub toolbox: Option<ToolBox>,
    /// The conversation so far (the first two messages are the prompt).
    pub messages: Vec<Message>,
    /// How many of `messages` the transcript has already recorded.
    recorded: usize,
    pub deadline: SoftDeadline,
    /// The boundary token the system message declares; tool results are fenced with it.
    pub boundary: Boundary,
    retry: RetryState,
    pub transcript: &'a mut Transcript,
    usage: Usage,
    seq: u32,
}

impl<'a> Attempt<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        exec: &'a StageExecutor,
        request: &'a StageRequest,
        cancel: &'a CancellationToken,
        provider: Arc<dyn Provider>,
        model: String,
        fallbacks: Vec<String>,
        snapshot: Option<Snapshot>,
        toolbox: Option<ToolBox>,
        messages: Vec<Message>,
        boundary: Boundary,
        transcript: &'a mut Transcript,
    ) -> Attempt<'a> {
        Attempt {
            exec,
            request,
            cancel,
            provider,
            model,
            fallbacks: fallbacks.into_iter(),
            snapshot,
            toolbox,
            messages,
            recorded: 0,
            deadline: SoftDeadline::new(request.deadline_unix_ms),
            boundary,
            retry: RetryState::new(&exec.settings.retry),
            transcript,
            usage: Usage::default(),
            seq: 0,
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    pub fn now_unix_ms(&self) -> u64 {
        self.exec.deps.clock.now_unix_ms()
    }

    /// The whole attempt: conversation, then protocol check and repairs.
    pub async fn run(&mut self) -> Result<StageOutcome, Failure> {
        let answer = self.converse().await?;
        self.judge(answer).await
    }

    /// Emits a progress event for this stage (best effort).
    pub async fn emit(
        &self,
        kind: EventType,
        channel: Option<&str>,
        message: String,
        data: serde_json::Value,
    ) {
        let mut e = verdict_backends::store::event(
            &self.request.task_id,
            Some(&self.request.stage_id),
            self.now_unix_ms(),
            kind,
            message,
        );
        e.channel = channel.map(str::to_owned);
        e.data = data;
        self.exec.deps.events.emit(e).await;
    }

    /// One AI call over the current conversation (`isolated` = `None`) or over a separate,
    /// self-contained message list and its own boundary token (isolated repairs). Tools are
    /// offered only when `offer_tools`.
    pub async fn call(
        &mut self,
        purpose: CallPurpose,
        isolated: Option<(Vec<Message>, &Boundary)>,
        offer_tools: bool,
        temperature: Option<f32>,
    ) -> Result<ChatResponse, Failure> {
        let tools = match (&self.toolbox, offer_tools) {
            (Some(t), true) => t.definitions(),
            _ => Vec::new(),
        };
        let tool_choice = if tools.is_empty() {
            ToolChoice::None
        } else {
            ToolChoice::Auto
        };
        let mut tokens = vec![self.boundary.token().to_owned()];
        let (messages, new_messages) = match isolated {
            Some((m, boundary)) => {
                tokens.push(boundary.token().to_owned());
                (m.clone(), m)
            }
            None => {
                let new = self.messages[self.recorded..].to_vec();
                self.recorded = self.messages.len();
                (self.messages.clone(), new)
            }
        };
        let tool_names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let mut request = ChatRequest {
            model: self.model.clone(),
            messages,
            tools,
            tool_choice,
            temperature,
            max_tokens: None,
        };
        self.seq += 1;
        let seq = self.seq;

        loop {
            let provider_name = self.provider.name().to_owned();
            let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
            let key = journal::call_key(
                &self.request.task_id,
                &self.request.stage_id,
                &provider_name,
                &request,
                &token_refs,
            );
            match self.exec.deps.journal.get(&key).await {
                Ok(Some(response)) => {
                    self.exec
                        .deps
                        .metrics
                        .responses_reused
                        .with_label_values(&[&provider_name])
                        .inc();
                    self.record_call(
                        seq,
                        purpose,
                        &request,
                        &new_messages,
                        &tool_names,
                        Some(&response),
                        None,
                        0,
                        true,
                    );
                    return Ok(response);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "response journal unavailable; calling the provider")
                }
            }

            match self.call_with_retries(seq, &request).await {
                Ok((response, latency_ms)) => {
                    if let Err(e) = self.exec.deps.journal.put(&key, &response).await {
                        tracing::warn!(error = %e, "response not journaled; a redelivery would pay for it again");
                    }
                    self.record_call(
                        seq,
                        purpose,
                        &request,
                        &new_messages,
                        &tool_names,
                        Some(&response),
                        None,
                        latency_ms,
                        false,
                    );
                    return Ok(response);
                }
                Err(failure) => {
                    self.record_call(
                        seq,
                        purpose,
                        &request,
                        &new_messages,
                        &tool_names,
                        None,
                        Some(&failure.error),
                        0,
                        false,
                    );
                    // E5: after the primary model's budget is spent on a retryable failure, the
                    // fallback models are tried in order, each with a fresh budget.
                    let exhausted =
                        failure.requeue_after.is_none() && failure.error.kind.is_retryable();
                    match (exhausted, self.fallbacks.next()) {
                        (true, Some(next)) => {
                            self.emit(
                                EventType::StageRetry,
                                None,
                                format!(
                                    "Model {} keeps failing ({}); falling back to {next}",
                                    self.model, failure.error.kind
                                ),
                                serde_json::json!({"from": self.model, "to": next, "kind": failure.error.kind}),
                            )
                            .await;
                            self.model = next.clone();
                            request.model = next;
                            self.retry = RetryState::new(&self.exec.settings.retry);
                        }
                        _ => return Err(failure),
                    }
                }
            }
        }
    }

    /// Calls the provider until it answers, the failure is final, or the wait is too long.
    async fn call_with_retries(
        &mut self,
        seq: u32,
        request: &ChatRequest,
    ) -> Result<(ChatResponse, u64), Failure> {
        let provider = Arc::clone(&self.provider);
        let metrics = self.exec.deps.metrics.clone();
        let labels = [provider.name().to_owned(), request.model.clone()];
        loop {
            if self.cancel.is_cancelled() {
                return Err(Failure::now(cancelled()));
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
                    self.snapshot.as_ref().map(Snapshot::root),
                    self.cancel,
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
                    self.usage.calls += 1;
                    self.usage.input_tokens += u.input_tokens;
                    self.usage.output_tokens += u.output_tokens;
                    let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
                    return Ok((response, latency_ms));
                }
                Err(e) => e,
            };
            self.usage.calls += 1;
            if self.cancel.is_cancelled() {
                return Err(Failure::now(cancelled()));
            }
            match self.retry.decide(&error) {
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
                            .inc_by(wait.as_secs_f64());
                    }
                    self.transcript.entries.push(TranscriptEntry::Retry {
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
                        () = self.cancel.cancelled() => return Err(Failure::now(cancelled())),
                    }
                }
                RetryDecision::Requeue(wait) => {
                    return Err(Failure {
                        error,
                        requeue_after: Some(wait),
                    });
                }
                RetryDecision::GiveUp => return Err(Failure::now(error)),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record_call(
        &mut self,
        seq: u32,
        purpose: CallPurpose,
        request: &ChatRequest,
        new_messages: &[Message],
        tool_names: &[String],
        response: Option<&ChatResponse>,
        error: Option<&ProviderError>,
        latency_ms: u64,
        reused: bool,
    ) {
        self.transcript.entries.push(TranscriptEntry::Call {
            seq,
            purpose,
            provider: self.provider.name().to_owned(),
            model: request.model.clone(),
            new_messages: new_messages.to_vec(),
            tools: tool_names.to_vec(),
            temperature: request.temperature,
            response: response.cloned(),
            error: error.map(ToString::to_string),
            latency_ms,
            reused,
        });
    }
}

pub(super) fn cancelled() -> ProviderError {
    ProviderError::new(FailureKind::Cancelled, "the stage was cancelled")
}
