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
use super::{ChatRequest, ChatResponse, Provider, ProviderError, ProviderKind, ProviderSettings};
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
}

/// A provider speaking the HTTP API `W`: its settings and one pooled HTTP client.
#[derive(Debug)]
pub struct ApiProvider<W> {
    settings: ProviderSettings,
    http: HttpTransport,
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
            wire: PhantomData,
        })
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
        W::parse_response(&received.body).map_err(|p| self.http.malformed(&received, &p))
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
}
