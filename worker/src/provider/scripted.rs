//! An in-memory provider that answers from a script and records what it was asked: the
//! provider backend for unit tests, with virtual-time latency.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;

use super::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, ProviderKind, TokenUsage,
    ToolCall,
};
use verdict_backends::BoxFuture;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Step {
    Respond(ChatResponse),
    Fail(ProviderError),
    /// Wait (tokio time, so virtual in paused tests), then take the inner step.
    After(Duration, Box<Step>),
}

impl Step {
    pub fn text(content: &str) -> Step {
        Step::Respond(ChatResponse {
            content: content.to_owned(),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 5,
            },
            raw: String::new(),
        })
    }

    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Step {
        Step::Respond(ChatResponse {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments: arguments.to_owned(),
            }],
            finish: FinishReason::ToolCalls,
            usage: TokenUsage::default(),
            raw: String::new(),
        })
    }

    pub fn fail(kind: FailureKind) -> Step {
        Step::Fail(ProviderError::new(kind, format!("scripted {kind}")))
    }

    pub fn after(self, wait: Duration) -> Step {
        Step::After(wait, Box::new(self))
    }
}

/// A provider that plays [`Step`]s in order; when the script runs out it fails with `internal`.
#[derive(Debug)]
pub struct ScriptedProvider {
    name: String,
    model: String,
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedProvider {
    pub fn new(name: &str, model: &str, steps: impl IntoIterator<Item = Step>) -> ScriptedProvider {
        ScriptedProvider {
            name: name.to_owned(),
            model: model.to_owned(),
            steps: Mutex::new(steps.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        match self.requests.lock() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn next_step(&self) -> Option<Step> {
        match self.steps.lock() {
            Ok(mut s) => s.pop_front(),
            Err(p) => p.into_inner().pop_front(),
        }
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> ProviderKind {
        ProviderKind::Openai
    }

    fn default_model(&self) -> &str {
        &self.model
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        _workdir: Option<&'a Path>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        match self.requests.lock() {
            Ok(mut r) => r.push(request.clone()),
            Err(p) => p.into_inner().push(request.clone()),
        }
        let step = self.next_step();
        Box::pin(async move {
            let mut step = step.ok_or_else(|| {
                ProviderError::new(FailureKind::Internal, "scripted provider: script exhausted")
            })?;
            loop {
                match step {
                    Step::Respond(r) => return Ok(r),
                    Step::Fail(e) => return Err(e),
                    Step::After(wait, inner) => {
                        tokio::select! {
                            () = tokio::time::sleep(wait) => step = *inner,
                            () = cancel.cancelled() => {
                                return Err(ProviderError::new(FailureKind::Cancelled, "cancelled"));
                            }
                        }
                    }
                }
            }
        })
    }
}
