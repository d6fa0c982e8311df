//! Bearer-token authentication for every `/v1/*` route (SPEC I2, R3). Several tokens can be
//! accepted at once so a token can be rotated without downtime. Tokens are kept only as SHA-256
//! digests and compared in constant time, so neither memory dumps, `Debug` output, logs nor
//! response timing give a token away.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};
use verdict_backends::secret::Secret;

use super::error::ApiError;

/// Why a set of tokens cannot be used. Tokens are named by position, never by value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiAuthError {
    #[error("no API token is configured: the API requires at least one bearer token")]
    NoTokens,
    #[error("API token #{index} is empty")]
    Empty { index: usize },
    #[error(
        "API token #{index} contains whitespace or control characters, which cannot travel in an `Authorization` header"
    )]
    Unprintable { index: usize },
}

/// The bearer tokens the API accepts.
#[derive(Clone)]
pub struct ApiAuth {
    digests: Arc<[[u8; 32]]>,
    /// No authentication at all: only for `api.allow_unauthenticated = true` (behind another
    /// authenticating layer) and the local `verdict dev`.
    open: bool,
}

impl ApiAuth {
    /// Accepts each of `tokens` (one normally; two while rotating).
    pub fn new(tokens: impl IntoIterator<Item = Secret>) -> Result<ApiAuth, ApiAuthError> {
        let mut digests = Vec::new();
        for (index, token) in tokens.into_iter().enumerate() {
            let value = token.expose();
            if value.is_empty() {
                return Err(ApiAuthError::Empty { index });
            }
            if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(ApiAuthError::Unprintable { index });
            }
            digests.push(digest(value));
        }
        if digests.is_empty() {
            return Err(ApiAuthError::NoTokens);
        }
        Ok(ApiAuth {
            digests: digests.into(),
            open: false,
        })
    }

    /// Accepts every request without a token. Only for deployments that authenticate in front
    /// of the API (`api.allow_unauthenticated`) and for `verdict dev` on loopback.
    pub fn disabled() -> ApiAuth {
        ApiAuth {
            digests: Arc::from(Vec::new()),
            open: true,
        }
    }

    /// How many tokens are accepted.
    pub fn token_count(&self) -> usize {
        self.digests.len()
    }

    /// Whether `presented` is one of the accepted tokens. Every accepted token is compared, with
    /// no early exit, so the time taken says nothing about which one (if any) matched.
    pub fn accepts(&self, presented: &str) -> bool {
        let presented = digest(presented);
        let matched = self
            .digests
            .iter()
            .fold(Choice::from(0), |acc, d| acc | d.ct_eq(&presented));
        bool::from(matched)
    }
}

impl fmt::Debug for ApiAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiAuth")
            .field("tokens", &format_args!("{} [REDACTED]", self.digests.len()))
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether a path is part of the authenticated API; unknown `/v1/*` paths are too, so that the
/// set of routes is not probeable without a token.
pub(crate) fn is_protected(path: &str) -> bool {
    // Webhooks are authenticated by their signature instead: GitHub sends no bearer token.
    (path == "/v1" || path.starts_with("/v1/")) && !path.starts_with(super::webhooks::PREFIX)
}

/// Middleware: lets a protected request through only with an accepted bearer token.
pub(crate) async fn require_bearer(
    State(auth): State<ApiAuth>,
    req: Request,
    next: Next,
) -> Response {
    if auth.open || !is_protected(req.uri().path()) {
        return next.run(req).await;
    }
    let Some(header) = req.headers().get(AUTHORIZATION) else {
        return ApiError::unauthorized(
            "missing bearer token: send `Authorization: Bearer <token>`",
            false,
        )
        .into_response();
    };
    let token = header.to_str().ok().and_then(bearer_token);
    match token {
        Some(token) if auth.accepts(token) => next.run(req).await,
        Some(_) => ApiError::unauthorized("the bearer token is not accepted", true).into_response(),
        None => ApiError::unauthorized(
            "the `Authorization` header is not a bearer token: send `Authorization: Bearer <token>`",
            true,
        )
        .into_response(),
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 7235).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_configured_token_and_nothing_else() {
        let auth = ApiAuth::new([Secret::new("old-token"), Secret::new("new-token")]).unwrap();
        assert!(auth.accepts("old-token"));
        assert!(auth.accepts("new-token"));
        assert!(!auth.accepts("new-toke"));
        assert!(!auth.accepts(""));
    }

    #[test]
    fn debug_never_shows_a_token() {
        let auth = ApiAuth::new([Secret::new("s3cr3t-value")]).unwrap();
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
    }

    #[test]
    fn unusable_token_sets_are_refused_by_position() {
        assert_eq!(
            ApiAuth::new(Vec::<Secret>::new()).unwrap_err(),
            ApiAuthError::NoTokens
        );
        assert_eq!(
            ApiAuth::new([Secret::new("ok"), Secret::new("")]).unwrap_err(),
            ApiAuthError::Empty { index: 1 }
        );
        let e = ApiAuth::new([Secret::new("has space")]).unwrap_err();
        assert_eq!(e, ApiAuthError::Unprintable { index: 0 });
        assert!(!e.to_string().contains("has space"));
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn only_v1_is_protected() {
        assert!(is_protected("/v1/reviews"));
        assert!(is_protected("/v1/nope"));
        assert!(is_protected("/v1"));
        assert!(!is_protected("/v10"));
        assert!(!is_protected("/healthz"));
        assert!(!is_protected("/metrics"));
    }
}
