//! The HTTP transport both API providers share: one `reqwest::Client` per provider, the endpoint
//! URL rule, the per-request timeout, prompt cancellation, a bounded response body, and the
//! hand-off of every failure to [`super::classify`]. The wire modules only build and parse JSON.

use std::time::Duration;

use reqwest::Url;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;

use super::build::ProviderBuildError;
use super::classify::{self, Flavor};
use super::{ProviderError, ProviderSettings, Secret};

/// The largest response body accepted. Chat completions are far smaller; a body this large is a
/// misbehaving server, and reading it whole would let one call exhaust a worker's memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Builds the client a provider keeps for its lifetime (connection pooling): the settings'
/// connect timeout, no redirects (a POST must not silently change target; a redirect is reported
/// as a wrong base URL), and a `verdict/<version>` user agent.
///
/// reqwest is built with `rustls-no-provider`, so this installs ring as the process's rustls
/// crypto provider first (a no-op when one is installed already). Certificates are verified
/// against the system roots (`rustls-platform-verifier`); a host without a CA bundle fails here,
/// at start-up, with an error naming the provider.
pub fn http_client(settings: &ProviderSettings) -> Result<reqwest::Client, ProviderBuildError> {
    // Err means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("verdict/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ProviderBuildError::HttpClient {
            provider: settings.name.clone(),
            reason: classify::scrub(&e.to_string(), None),
        })
}

/// The URL of an API endpoint under `base_url`: `{base}/v1/{path}`, or `{base}/{path}` when the
/// base already ends in a version segment (`/v1`, `/api/v3`, `/api/paas/v4`), so both
/// `https://api.openai.com` and the versioned bases of Volcengine Ark or GLM work, and a base
/// pasted with `/v1` does not become `/v1/v1`.
pub fn endpoint(base_url: &str, path: &str) -> Result<Url, String> {
    let base = base_url.trim_end_matches('/');
    let parsed = Url::parse(base).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not http or https", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("no host".to_owned());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("a base URL takes no query or fragment".to_owned());
    }
    let versioned = parsed
        .path_segments()
        .and_then(|mut s| s.next_back())
        .is_some_and(|last| {
            last.len() > 1 && last.starts_with('v') && last[1..].bytes().all(|b| b.is_ascii_digit())
        });
    let url = if versioned {
        format!("{base}/{path}")
    } else {
        format!("{base}/v1/{path}")
    };
    Url::parse(&url).map_err(|e| e.to_string())
}

/// The URL of a server endpoint beside the API (llama.cpp's `/props`): `{base}/{path}` with a
/// trailing version segment of the base removed, so `http://host:8091/v1` gives
/// `http://host:8091/props`.
pub fn server_endpoint(base_url: &str, path: &str) -> Result<Url, String> {
    let api = endpoint(base_url, path)?;
    let mut url = api.clone();
    let kept: Vec<String> = api
        .path_segments()
        .map(|segments| {
            let all: Vec<&str> = segments.collect();
            // `endpoint` put exactly one version segment before `path`; drop it.
            let cut = all.len().saturating_sub(2);
            all[..cut].iter().map(|s| (*s).to_owned()).collect()
        })
        .unwrap_or_default();
    url.set_path(&format!("{}/{path}", kept.join("/")).replace("//", "/"));
    Ok(url)
}

/// How long a discovery GET may take: a server that does not answer in this is taken as one
/// that does not say.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(3);

/// The largest discovery body read (`/props` is a few KiB, with the chat template).
const MAX_DISCOVERY_BYTES: usize = 1024 * 1024;

/// One provider's way to POST JSON and get a successful body back, or a classified error.
#[derive(Debug)]
pub(crate) struct HttpTransport {
    client: reqwest::Client,
    url: Url,
    timeout: Duration,
    provider: String,
    /// Kept only to scrub it from error messages; the wire modules put it on the wire.
    api_key: Option<Secret>,
    flavor: Flavor,
}

/// A 2xx answer.
#[derive(Debug)]
pub(crate) struct Received {
    pub status: u16,
    pub body: Vec<u8>,
}

impl HttpTransport {
    pub(crate) fn new(
        settings: &ProviderSettings,
        path: &str,
        flavor: Flavor,
    ) -> Result<HttpTransport, ProviderBuildError> {
        let url = endpoint(&settings.base_url, path)
            .map_err(|reason| ProviderBuildError::base_url(settings, &reason))?;
        Ok(HttpTransport {
            client: http_client(settings)?,
            url,
            timeout: settings.timeout,
            provider: settings.name.clone(),
            api_key: settings.api_key.clone(),
            flavor,
        })
    }

    pub(crate) fn api_key(&self) -> Option<&Secret> {
        self.api_key.as_ref()
    }

    /// A header value holding a credential: marked sensitive so hyper and reqwest never print it.
    pub(crate) fn secret_header(&self, value: &str) -> Result<HeaderValue, ProviderError> {
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            ProviderError::new(
                FailureKind::Auth,
                format!(
                    "provider `{}`: the API key contains characters not allowed in an HTTP header; check the key source",
                    self.provider
                ),
            )
        })?;
        v.set_sensitive(true);
        Ok(v)
    }

    /// POSTs `body` (JSON) with `headers`, within the transport timeout, abandoning the request
    /// as soon as `cancel` fires. Non-2xx answers and transport failures come back classified.
    pub(crate) async fn post_json(
        &self,
        body: Vec<u8>,
        headers: Vec<(HeaderName, HeaderValue)>,
        cancel: &CancellationToken,
    ) -> Result<Received, ProviderError> {
        let mut request = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let exchange = async {
            let mut response = request.send().await.map_err(|e| self.transport(&e))?;
            let status = response.status().as_u16();
            let response_headers = response.headers().clone();
            let body = self.read_body(&mut response, status).await?;
            if (200..300).contains(&status) {
                Ok(Received { status, body })
            } else {
                Err(classify::status_error(
                    &self.provider,
                    status,
                    &response_headers,
                    &body,
                    self.flavor,
                    self.api_key.as_ref(),
                ))
            }
        };
        // Dropping `exchange` on cancellation drops the in-flight request and its connection.
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(ProviderError::new(
                FailureKind::Cancelled,
                format!("provider `{}`: the call was cancelled", self.provider),
            )),
            result = exchange => result,
        }
    }

    async fn read_body(
        &self,
        response: &mut reqwest::Response,
        status: u16,
    ) -> Result<Vec<u8>, ProviderError> {
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let too_large = || ProviderError {
            status: Some(status),
            ..ProviderError::new(
                FailureKind::ProviderUnavailable,
                format!(
                    "provider `{}`: HTTP {status} with a response body over {MAX_RESPONSE_BYTES} bytes; not read",
                    self.provider
                ),
            )
        };
        if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES) {
            return Err(too_large());
        }
        let mut body = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(&e))? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn transport(&self, error: &reqwest::Error) -> ProviderError {
        classify::transport_error(&self.provider, error, self.timeout, self.api_key.as_ref())
    }

    /// GETs `url` to learn what the server supports: [`DISCOVERY_TIMEOUT`], abandoned on
    /// `cancel`, at most [`MAX_DISCOVERY_BYTES`]. Any failure is `None`: a server that does not
    /// say is treated as one that supports only what its kind always does.
    pub(crate) async fn discover(&self, url: Url, cancel: &CancellationToken) -> Option<Vec<u8>> {
        let mut request = self.client.get(url).timeout(DISCOVERY_TIMEOUT);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose());
        }
        let exchange = async {
            let mut response = request.send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.ok()? {
                if body.len() + chunk.len() > MAX_DISCOVERY_BYTES {
                    return None;
                }
                body.extend_from_slice(&chunk);
            }
            Some(body)
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            body = exchange => body,
        }
    }

    /// A 2xx body that is not the expected JSON (see [`classify::malformed_error`]).
    pub(crate) fn malformed(&self, received: &Received, problem: &str) -> ProviderError {
        classify::malformed_error(
            &self.provider,
            received.status,
            problem,
            &received.body,
            self.api_key.as_ref(),
        )
    }

    /// A request that cannot be expressed in this wire format (a bug upstream, not the provider's).
    pub(crate) fn internal(&self, problem: &str) -> ProviderError {
        ProviderError::new(
            FailureKind::Internal,
            format!("provider `{}`: {problem}", self.provider),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_append_v1_unless_the_base_is_versioned() {
        let cases = [
            (
                "https://api.openai.com",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://api.openai.com/",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://api.openai.com/v1",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8091",
                "http://127.0.0.1:8091/v1/chat/completions",
            ),
            (
                "https://ark.cn-beijing.volces.com/api/v3",
                "https://ark.cn-beijing.volces.com/api/v3/chat/completions",
            ),
            (
                "https://open.bigmodel.cn/api/paas/v4/",
                "https://open.bigmodel.cn/api/paas/v4/chat/completions",
            ),
            (
                "https://gw.example/openai",
                "https://gw.example/openai/v1/chat/completions",
            ),
            (
                "https://gw.example/video",
                "https://gw.example/video/v1/chat/completions",
            ),
        ];
        for (base, want) in cases {
            assert_eq!(
                endpoint(base, "chat/completions").unwrap().as_str(),
                want,
                "{base}"
            );
        }
    }

    #[test]
    fn server_endpoints_sit_beside_the_api() {
        for (base, want) in [
            ("http://127.0.0.1:8091", "http://127.0.0.1:8091/props"),
            ("http://127.0.0.1:8091/v1", "http://127.0.0.1:8091/props"),
            ("http://127.0.0.1:8091/v1/", "http://127.0.0.1:8091/props"),
            ("https://gw.example/llama", "https://gw.example/llama/props"),
            (
                "https://gw.example/llama/v1",
                "https://gw.example/llama/props",
            ),
        ] {
            assert_eq!(
                server_endpoint(base, "props").unwrap().as_str(),
                want,
                "{base}"
            );
        }
    }

    #[test]
    fn unusable_bases_are_refused() {
        for base in [
            "api.openai.com",
            "ftp://host",
            "https://",
            "https://host/?a=b",
            "",
        ] {
            assert!(endpoint(base, "messages").is_err(), "{base}");
        }
    }
}
