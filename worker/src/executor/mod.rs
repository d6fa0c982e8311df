//! The stage executor: one stage request in, exactly one classified outcome out (SPEC E1–E7).
//!
//! `execute` resolves the provider, inputs and repository snapshot, assembles the prompt, runs the
//! conversation (tool loop under the soft deadline), holds the answer to the stage's protocol,
//! repairs it within the budget, and classifies what happened. Queues are not its business: the
//! AMQP consumer and `verdict dev` both call it the same way.
//!
//! An attempt is two values passed side by side, never one object: the
//! [`context::CallContext`] (backends, settings, request, cancellation, provider route, snapshot
//! and tools: what calls need) and the [`conversation::Conversation`] (messages, deadline,
//! boundary token, usage, transcript: what has been said). Each step below is a function of the
//! two.
//!
//! - [`call`]: one AI call (journal, provider with retries and fallback models, metrics,
//!   transcript entry).
//! - [`limits`]: the pool's rate limits each provider call waits for, and the pause a 429 sets
//!   (SPEC Q3, X6).
//! - [`turns`]: the conversation and tool loop under the soft deadline (E1, E2).
//! - [`repair`]: the repair rounds, the consistency check and the classification (E3, E4).
//! - [`ground`]: the answer's findings checked against the snapshot (corrected, or demoted when
//!   repair cannot fix them).

mod call;
mod context;
mod conversation;
mod fit;
mod ground;
mod limits;
mod repair;
mod sizing;
mod turns;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::wire::{EvidenceCut, StageKind, StageRequest, StageResult, Usage, WIRE_VERSION};

use crate::deadline::SoftDeadline;
use crate::metrics::WorkerMetrics;
use crate::prompt;
use crate::provider::{Provider, ProviderKind};
use crate::retry::RetryPolicy;
use crate::tools::{ToolBox, ToolLimits};
use verdict_backends::clock::Clock;
use verdict_backends::ratelimit::RateLimiter;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::{
    CachedAnswer, EventSink, InputStore, ResponseCache, ResponseJournal, TranscriptStore,
};
use verdict_proto::transcript::Transcript;

use call::{Failure, Route};
use context::{CallContext, InputScope};
use conversation::Conversation;
pub use limits::{ModelLimits, RateLimits};

/// The configured providers by name, and the one used when a stage names none.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    providers: HashMap<String, Arc<dyn Provider>>,
    default: Option<String>,
}

impl fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.providers.keys().collect();
        names.sort();
        f.debug_struct("ProviderRegistry")
            .field("providers", &names)
            .field("default", &self.default)
            .finish()
    }
}

impl ProviderRegistry {
    pub fn new() -> ProviderRegistry {
        ProviderRegistry::default()
    }

    /// Adds a provider under its own name; the first one added is the default until
    /// [`ProviderRegistry::set_default`] says otherwise.
    pub fn insert(&mut self, provider: Arc<dyn Provider>) {
        let name = provider.name().to_owned();
        if self.default.is_none() {
            self.default = Some(name.clone());
        }
        self.providers.insert(name, provider);
    }

    pub fn set_default(&mut self, name: &str) {
        self.default = Some(name.to_owned());
    }

    /// The named provider, or the default for `None`.
    pub fn get(&self, name: Option<&str>) -> Option<Arc<dyn Provider>> {
        let name = name.or(self.default.as_deref())?;
        self.providers.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.providers.keys().cloned().collect();
        v.sort();
        v
    }
}

/// The backends an executor talks to.
#[derive(Debug, Clone)]
pub struct ExecutorDeps {
    pub providers: ProviderRegistry,
    pub repositories: Arc<dyn RepositorySource>,
    pub inputs: Arc<dyn InputStore>,
    pub journal: Arc<dyn ResponseJournal>,
    /// Accepted answers of identical work (X3); consulted when
    /// [`ExecutorSettings::response_cache`] is on.
    pub cache: Arc<dyn ResponseCache>,
    pub transcripts: Arc<dyn TranscriptStore>,
    pub events: Arc<dyn EventSink>,
    /// The pool's rate limits (SPEC Q3); called only for providers and models with limits in
    /// [`ExecutorSettings::rate_limits`].
    pub limiter: Arc<dyn RateLimiter>,
    pub metrics: WorkerMetrics,
    pub clock: Arc<dyn Clock>,
}

/// How stages are executed.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    pub retry: RetryPolicy,
    pub tool_limits: ToolLimits,
    /// Models tried, in order, after the primary model's retry budget is spent (per stage).
    pub fallback_models: HashMap<StageKind, Vec<String>>,
    /// Characters of the last response kept in an `invalid_output` preview.
    pub preview_chars: usize,
    /// Requests and tokens per minute per provider and model, shared by the pool (SPEC Q3).
    pub rate_limits: RateLimits,
    /// Token prices per provider, for `verdict_provider_cost_usd_total`.
    pub prices: crate::metrics::Prices,
    /// Whether identical work is answered from [`ExecutorDeps::cache`] (X3). Off by default here
    /// (a test that runs the same stage twice expects two answers); the configuration turns it
    /// on (`worker.response_cache`).
    pub response_cache: bool,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            retry: RetryPolicy::default(),
            tool_limits: ToolLimits::default(),
            fallback_models: HashMap::new(),
            preview_chars: 500,
            rate_limits: RateLimits::default(),
            prices: crate::metrics::Prices::default(),
            response_cache: false,
        }
    }
}

/// What one execution produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    pub result: StageResult,
    /// Set when the attempt ended on a retryable failure whose wait is too long to spend in
    /// place: the caller should requeue the stage after this delay (SPEC E5).
    pub requeue_after: Option<Duration>,
}

/// An attempt's transcript, redacted, not yet stored: the consumer stores it while the result
/// is recorded and published, instead of one store round trip before them.
#[derive(Debug)]
#[must_use = "a transcript is stored only when `store` is awaited"]
pub struct PendingTranscript {
    store: Arc<dyn TranscriptStore>,
    transcript: Transcript,
}

impl PendingTranscript {
    /// Stores it; a failure is logged, never the stage's.
    pub async fn store(self) {
        if let Err(e) = self.store.put(self.transcript).await {
            tracing::warn!(error = %e, "transcript not stored");
        }
    }
}

/// The `model` label of an attempt that ended before any provider call.
const NO_MODEL: &str = crate::metrics::NO_MODEL;

/// How long a stage whose inputs the store could not give waits before it runs again (plus as
/// much jitter): about a Redis failover.
const STORE_OUTAGE_REQUEUE: Duration = Duration::from_secs(2);

/// Executes stage requests.
#[derive(Debug, Clone)]
pub struct StageExecutor {
    deps: ExecutorDeps,
    settings: ExecutorSettings,
}

impl StageExecutor {
    pub fn new(deps: ExecutorDeps, settings: ExecutorSettings) -> StageExecutor {
        StageExecutor { deps, settings }
    }

    pub fn deps(&self) -> &ExecutorDeps {
        &self.deps
    }

    /// Runs one attempt of `request` to its classified outcome. Never panics and never returns
    /// an error: every failure is an outcome. `cancel` aborts in-flight calls promptly.
    pub async fn execute(&self, request: &StageRequest, cancel: &CancellationToken) -> Execution {
        let (execution, transcript) = self.execute_unstored(request, cancel).await;
        transcript.store().await;
        execution
    }

    /// [`Self::execute`], with the attempt's transcript handed back to be stored by the caller
    /// (before it acknowledges the delivery).
    pub async fn execute_unstored(
        &self,
        request: &StageRequest,
        cancel: &CancellationToken,
    ) -> (Execution, PendingTranscript) {
        let span = tracing::info_span!(
            "stage",
            task_id = %request.task_id,
            stage_id = %request.stage_id,
            stage = request.stage.as_str(),
            protocol = request.protocol.as_str(),
            attempt = request.attempt,
            outcome = tracing::field::Empty,
        );
        self.execute_in_span(request, cancel).instrument(span).await
    }

    async fn execute_in_span(
        &self,
        request: &StageRequest,
        cancel: &CancellationToken,
    ) -> (Execution, PendingTranscript) {
        let metrics = &self.deps.metrics;
        let stage = request.stage.as_str();
        let started_unix_ms = self.deps.clock.now_unix_ms();
        let timer = tokio::time::Instant::now();
        let in_flight = metrics
            .stages_in_flight
            .with_label_values(&[crate::metrics::queue_label(request.priority)]);
        in_flight.inc();
        let _in_flight = InFlight(in_flight);

        let mut transcript = Transcript {
            task_id: request.task_id.clone(),
            stage_id: request.stage_id.clone(),
            stage: request.stage,
            attempt: request.attempt,
            started_unix_ms,
            finished_unix_ms: started_unix_ms,
            tools_offered: Vec::new(),
            entries: Vec::new(),
            usage: Default::default(),
            outcome: None,
            boundary_tokens: Vec::new(),
        };
        let Ran {
            outcome,
            requeue_after,
            usage,
            model,
            evidence_cut,
        } = self.run(request, cancel, &mut transcript).await;

        let finished_unix_ms = self.deps.clock.now_unix_ms();
        let label = outcome.label();
        tracing::Span::current().record("outcome", label);
        let kind = outcome.failure_kind().map_or("none", FailureKind::as_str);
        metrics
            .stage_duration
            .with_label_values(&[stage, label])
            .observe(timer.elapsed().as_secs_f64());
        metrics
            .stage_outcomes
            .with_label_values(&[stage, model.as_deref().unwrap_or(NO_MODEL), label, kind])
            .inc();
        match &outcome {
            StageOutcome::ExecutionFailure { kind, message, .. } => {
                tracing::warn!(kind = kind.as_str(), %message, "stage failed to execute");
            }
            StageOutcome::InvalidOutput { error, .. } => {
                tracing::warn!(%error, "stage output invalid after repairs");
            }
            StageOutcome::Ok { .. } => tracing::info!("stage completed"),
        }

        transcript.finished_unix_ms = finished_unix_ms;
        transcript.usage = crate::provider::TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        };
        transcript.outcome = Some(outcome.clone());
        let pending = PendingTranscript {
            store: self.deps.transcripts.clone(),
            transcript: transcript.redacted(),
        };

        let execution = Execution {
            result: StageResult {
                version: WIRE_VERSION,
                task_id: request.task_id.clone(),
                stage_id: request.stage_id.clone(),
                stage: request.stage,
                attempt: request.attempt,
                outcome,
                usage,
                started_unix_ms,
                finished_unix_ms,
                model,
                evidence_cut,
            },
            requeue_after,
        };
        (execution, pending)
    }

    /// Everything between "request received" and "outcome known".
    async fn run(
        &self,
        request: &StageRequest,
        cancel: &CancellationToken,
        transcript: &mut Transcript,
    ) -> Ran {
        let Some(provider) = self.deps.providers.get(request.provider.as_deref()) else {
            let name = request.provider.as_deref().unwrap_or("(default)");
            let message = format!(
                "stage `{}` names provider `{name}`, which is not configured (configured: {}); add [providers.{name}] or fix [stages.{}].provider",
                request.stage.as_str(),
                self.deps.providers.names().join(", "),
                request.stage.as_str(),
            );
            return Ran::before_any_call(fail(FailureKind::BadRequest, false, message));
        };

        let inputs = match verdict_backends::store::resolve(
            self.deps.inputs.as_ref(),
            &request.inputs,
        )
        .await
        {
            Ok(i) => i,
            Err(e) if e.is_retryable() => {
                // The store is unreachable, not the stage at fault (on a Redis Cluster a task's
                // claim may be on a live primary while an input is on one failing over): run it
                // again in a while, as a claim that fails is, instead of spending the stage's
                // retries on an outage.
                let mut ran =
                    Ran::before_any_call(fail(FailureKind::Internal, true, e.to_string()));
                ran.requeue_after =
                    Some(STORE_OUTAGE_REQUEUE + crate::retry::full_jitter(STORE_OUTAGE_REQUEUE));
                return ran;
            }
            Err(e) => {
                return Ran::before_any_call(fail(FailureKind::Internal, false, e.to_string()));
            }
        };

        // Grounding reads the snapshot too: a stage without tools still answers with locations.
        let needs_snapshot = !request.tools.is_empty()
            || provider.kind() == ProviderKind::Exec
            || verdict_proto::grounding::applies_to(request.protocol);
        let snapshot = match (&request.repository, needs_snapshot) {
            (Some(repo), true) => match self.deps.repositories.snapshot(repo, cancel).await {
                Ok(s) => Some(s),
                Err(_) if cancel.is_cancelled() => {
                    return Ran::before_any_call(fail(
                        FailureKind::Cancelled,
                        false,
                        "cancelled while preparing the repository snapshot".into(),
                    ));
                }
                Err(e) => {
                    // A missing revision is the request's mistake, an unreachable host is
                    // transient: the one classification intake uses too.
                    return Ran::before_any_call(fail(
                        e.failure_kind(),
                        e.is_retryable(),
                        e.to_string(),
                    ));
                }
            },
            _ => None,
        };
        // A model whose server says it cannot call tools is not offered them: its first turn
        // then carries the decoding constraint instead of running on unconstrained.
        let offers_tools = !request.tools.is_empty() && provider.calls_tools(cancel).await;
        let toolbox = match &snapshot {
            Some(s) if offers_tools => Some(ToolBox::new(
                s.clone(),
                &request.tools,
                self.settings.tool_limits.clone(),
            )),
            _ => None,
        };
        if let Some(t) = &toolbox {
            transcript.tools_offered = t.definitions();
        }

        let boundary = prompt::new_boundary();
        let (inputs, evidence_cut) = match provider.context_window(cancel).await {
            Some(window) => {
                let tool_bytes = toolbox
                    .as_ref()
                    .map_or(0, |t| sizing::tool_bytes(&t.definitions()));
                let frame =
                    prompt::initial_messages(request, &[], &boundary, toolbox.is_some(), None);
                let room = sizing::evidence_bytes(
                    window,
                    provider.output_limit(),
                    sizing::prompt_tokens(&frame, tool_bytes + fit::NOTE_BYTES),
                    inputs.len(),
                    toolbox.is_some(),
                );
                fit::fit(inputs, room, window)
            }
            None => (inputs, None),
        };
        let note = evidence_cut.as_ref().map(|cut| {
            tracing::warn!(
                window = cut.context_window,
                cut = ?cut.inputs.iter().map(|i| &i.name).collect::<Vec<_>>(),
                "evidence cut to fit the model's context window"
            );
            fit::coverage_note(cut, request.language)
        });
        let messages = prompt::initial_messages(
            request,
            &inputs,
            &boundary,
            toolbox.is_some(),
            note.as_deref(),
        );
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| provider.default_model().to_owned());
        let fallbacks = self
            .settings
            .fallback_models
            .get(&request.stage)
            .cloned()
            .unwrap_or_default();

        let cache_key = self.settings.response_cache.then(|| {
            crate::cache::key(
                request,
                provider.name(),
                &model,
                &messages,
                boundary.token(),
            )
        });
        if let Some(key) = &cache_key
            && let Some(hit) = self.cached(request, key).await
        {
            return hit;
        }

        let tree = ground::tree_for(request.protocol, snapshot.as_ref());
        let mut ctx = CallContext {
            deps: &self.deps,
            settings: &self.settings,
            request,
            cancel,
            route: Route::new(provider, model, fallbacks, &self.settings.retry),
            snapshot,
            toolbox,
            tree,
            scope: InputScope::of(&inputs),
        };
        let deadline = SoftDeadline::new(request.deadline_unix_ms);
        let mut conv = Conversation::new(messages, boundary, deadline, transcript);
        let judged = match turns::converse(&mut ctx, &mut conv).await {
            Ok(answer) => repair::judge(&mut ctx, &mut conv, answer).await,
            Err(failure) => Err(failure),
        };
        let (outcome, requeue_after) = match judged {
            Ok(outcome) => (outcome, None),
            Err(Failure {
                error,
                requeue_after,
            }) => (
                fail(error.kind, requeue_after.is_some(), error.message),
                requeue_after,
            ),
        };
        let usage = conv.usage();
        let model = (usage.calls > 0).then(|| ctx.route.model().to_owned());
        // Only an answer paid for in full is kept: not one forced out by the soft deadline
        // (finalised without tools), which the same work with time left would not give.
        if let (Some(key), StageOutcome::Ok { .. }, Some(model), false) =
            (&cache_key, &outcome, &model, conv.deadline.is_finalised())
        {
            self.keep(request, key, &outcome, model, usage).await;
        }
        Ran {
            outcome,
            requeue_after,
            usage,
            model,
            evidence_cut,
        }
    }

    /// The cached answer of identical work, as this stage's outcome (no call made, nothing
    /// spent); `None` on a miss or when the cache does not answer.
    async fn cached(&self, request: &StageRequest, key: &str) -> Option<Ran> {
        let counter = |result: &str| {
            self.deps
                .metrics
                .response_cache
                .with_label_values(&[request.stage.as_str(), result])
                .inc();
        };
        match self.deps.cache.get_answer(key).await {
            Ok(Some(answer)) => {
                counter("hit");
                tracing::info!(
                    key,
                    model = %answer.model,
                    "answered from the response cache"
                );
                Some(Ran {
                    outcome: StageOutcome::Ok {
                        value: answer.value,
                        repaired: answer.repaired,
                        attempts: answer.attempts,
                    },
                    requeue_after: None,
                    usage: Usage::default(),
                    model: Some(answer.model),
                    evidence_cut: None,
                })
            }
            Ok(None) => {
                counter("miss");
                None
            }
            Err(e) => {
                counter("error");
                tracing::warn!(error = %e, "response cache not read; calling the provider");
                None
            }
        }
    }

    /// Keeps an accepted answer for identical work later; a failure costs only a later call.
    async fn keep(
        &self,
        request: &StageRequest,
        key: &str,
        outcome: &StageOutcome,
        model: &str,
        usage: Usage,
    ) {
        let StageOutcome::Ok {
            value,
            repaired,
            attempts,
        } = outcome
        else {
            return;
        };
        let answer = CachedAnswer {
            value: value.clone(),
            model: model.to_owned(),
            repaired: *repaired,
            attempts: *attempts,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            stored_unix_ms: self.deps.clock.now_unix_ms(),
        };
        let result = match self.deps.cache.put_answer(key, &answer).await {
            Ok(()) => "stored",
            Err(e) => {
                tracing::warn!(error = %e, "answer not kept in the response cache");
                "error"
            }
        };
        self.deps
            .metrics
            .response_cache
            .with_label_values(&[request.stage.as_str(), result])
            .inc();
    }
}

/// How [`StageExecutor::run`] ended.
struct Ran {
    outcome: StageOutcome,
    requeue_after: Option<Duration>,
    usage: Usage,
    /// The model of the last call, when a call was made.
    model: Option<String>,
    /// The evidence cut to fit the model's context window, if any was.
    evidence_cut: Option<EvidenceCut>,
}

impl Ran {
    fn before_any_call(outcome: StageOutcome) -> Ran {
        Ran {
            outcome,
            requeue_after: None,
            usage: Usage::default(),
            model: None,
            evidence_cut: None,
        }
    }
}

fn fail(kind: FailureKind, retryable: bool, message: String) -> StageOutcome {
    StageOutcome::ExecutionFailure {
        kind,
        retryable,
        message: verdict_proto::redact::redact(&message),
    }
}

/// Decrements the in-flight gauge however the attempt ends.
struct InFlight(prometheus::IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
