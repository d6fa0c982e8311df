//! An HTTP API provider, generic over its wire format: the one call both the OpenAI-compatible
//! and the Anthropic clients make. The body comes from the wire format (a conversation it cannot
//! express is `internal`), the credential header is marked sensitive, the POST goes through
//! [`super::http`] (timeout, cancellation, size cap, classification by [`super::classify`]), and
//! a 2xx body the wire format cannot parse is `provider_unavailable` with a redacted preview.
//! A wire format module ([`super::openai`], [`super::anthropic`]) says only how requests,
//! headers and answers look.

use std::marker::PhantomData;

use reqwest::header::{HeaderName, HeaderValue};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::build::ProviderBuildError;
use super::classify::Flavor;
use super::http::HttpTransport;
use super::{
    ChatRequest, ChatResponse, Provider, ProviderError, ProviderKind, ProviderSettings,
    StructuredBounds, StructuredOutput,
};
use verdict_backends::BoxFuture;

/// How one HTTP API looks on the wire.
pub trait WireFormat: std::fmt::Debug + Send + Sync + 'static {
    const KIND: ProviderKind;
    /// The endpoint under the base URL's version segment (see [`super::http::endpoint`]).
    const PATH: &'static str;
    /// Its differences in classifying statuses.
    const FLAVOR: Flavor;

    /// The request body as serialised.
    type Body<'a>: Serialize;

    /// The body for `request`; `Err` names a conversation this format cannot express (a caller
    /// bug).
    fn request_body<'a>(
        request: &'a ChatRequest,
        settings: &ProviderSettings,
    ) -> Result<Self::Body<'a>, String>;

    /// Headers every request carries besides the credential.
    fn fixed_headers() -> Vec<(HeaderName, HeaderValue)>;

    /// The header carrying `key`: its name and its value.
    fn credential(key: &str) -> (HeaderName, String);

    /// Parses a 2xx body; `Err` says what is wrong with it.
    fn parse_response(body: &[u8]) -> Result<ChatResponse, String>;

    /// The answer to a request that carried a decoding constraint, as text: the identity where
    /// the server constrains the text itself; Anthropic moves its forced tool call's input there.
    fn constrained_answer(_request: &ChatRequest, response: ChatResponse) -> ChatResponse {
        response
    }

    /// What the server says of itself, asked once per provider (OpenAI-compatible servers may
    /// be llama.cpp, whose `/props` gives its kind and context window). Nothing by default.
    fn discover<'a>(
        _provider: &'a ApiProvider<Self>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ServerFacts>
    where
        Self: Sized,
    {
        Box::pin(async { ServerFacts::default() })
    }

    /// What `structured_output = "auto"` means for this format on a server with `facts`.
    fn auto_mode(facts: &ServerFacts) -> StructuredOutput;
}

/// What a server said of itself when asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerFacts {
    /// The server is llama.cpp: it takes GBNF grammars.
    pub llama_cpp: bool,
    /// Its context window in tokens (llama.cpp's `n_ctx`).
    pub context_window: Option<u32>,
    /// The server said its chat template cannot call tools (llama.cpp's
    /// `chat_template_caps.supports_tool_calls` is `false`); unknown reads as able.
    pub cannot_call_tools: bool,
}

/// A provider speaking the HTTP API `W`: its settings and one pooled HTTP client.
#[derive(Debug)]
pub struct ApiProvider<W> {
    settings: ProviderSettings,
    http: HttpTransport,
    /// What the server said of itself, asked on first use (discovery runs once).
    facts: tokio::sync::OnceCell<ServerFacts>,
    /// Models this provider refused a decoding constraint for (HTTP 400 naming it).
    refused: std::sync::Mutex<std::collections::HashSet<String>>,
    wire: PhantomData<W>,
}

impl<W: WireFormat> ApiProvider<W> {
    /// Checks the settings as [`super::build()`] does for this kind and builds the HTTP client.
    pub fn new(settings: ProviderSettings) -> Result<ApiProvider<W>, ProviderBuildError> {
        let settings = ProviderSettings {
            kind: W::KIND,
            ..settings
        };
        settings.validate()?;
        let http = HttpTransport::new(&settings, W::PATH, W::FLAVOR)?;
        Ok(ApiProvider {
            settings,
            http,
            facts: tokio::sync::OnceCell::new(),
            refused: std::sync::Mutex::default(),
            wire: PhantomData,
        })
    }

    pub(crate) fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    pub(crate) fn http(&self) -> &HttpTransport {
        &self.http
    }

    /// What the server says of itself, asked once. A discovery cut short by cancellation is
    /// not remembered: the next call asks again. Concurrent first calls may each ask; the
    /// first answer stays.
    async fn facts(&self, cancel: &CancellationToken) -> ServerFacts {
        if let Some(facts) = self.facts.get() {
            return *facts;
        }
        let facts = W::discover(self, cancel).await;
        if !cancel.is_cancelled() {
            let _ = self.facts.set(facts);
        }
        facts
    }

    async fn call(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.encode(request)?;
        let mut headers = W::fixed_headers();
        if let Some(key) = self.http.api_key() {
            let (name, value) = W::credential(key.expose());
            headers.push((name, self.http.secret_header(&value)?));
        }
        let received = self.http.post_json(body, headers, cancel).await?;
        let response =
            W::parse_response(&received.body).map_err(|p| self.http.malformed(&received, &p))?;
        Ok(match request.constraint {
            Some(_) => W::constrained_answer(request, response),
            None => response,
        })
    }

    fn encode(&self, request: &ChatRequest) -> Result<Vec<u8>, ProviderError> {
        let wire = W::request_body(request, &self.settings).map_err(|p| self.http.internal(&p))?;
        serde_json::to_vec(&wire).map_err(|e| {
            self.http
                .internal(&format!("cannot serialise the request: {e}"))
        })
    }
}

impl<W: WireFormat> Provider for ApiProvider<W> {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn kind(&self) -> ProviderKind {
        W::KIND
    }

    fn default_model(&self) -> &str {
        &self.settings.model
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        _workdir: Option<&'a std::path::Path>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(self.call(request, cancel))
    }

    fn structured_output<'a>(
        &'a self,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, StructuredOutput> {
        Box::pin(async move {
            match self.settings.structured_output {
                StructuredOutput::Auto => W::auto_mode(&self.facts(cancel).await),
                mode => mode,
            }
        })
    }

    fn context_window<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, Option<u32>> {
        Box::pin(async move {
            match self.settings.context_window {
                Some(window) => Some(window),
                None => self.facts(cancel).await.context_window,
            }
        })
    }

    fn calls_tools<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, bool> {
        Box::pin(async move { !self.facts(cancel).await.cannot_call_tools })
    }

    fn output_limit(&self) -> Option<u32> {
        self.settings.max_tokens
    }

    fn structured_bounds(&self) -> StructuredBounds {
        self.settings.structured_bounds
    }

    fn refuse_constraint(&self, model: &str) {
        // A poisoned lock only means another thread panicked mid-insert: the set is still a set.
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.insert(model.to_owned());
    }

    fn refuses_constraint(&self, model: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.contains(model)
    }
}
