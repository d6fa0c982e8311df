//! The one error shape of the API: `{"error": {"code": "...", "message": "..."}}` with a status
//! that matches the code, so a client (or a person with curl) always gets a machine-readable
//! code and a sentence naming the problem — never axum's plain-text rejections or an empty body.

use axum::Json;
use axum::http::header::{ALLOW, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
pub use verdict_api::http::{ErrorBody, ErrorDetail};

use crate::service::ServiceError;

/// The `Retry-After` of a 503 for a backend that is down: about what a Redis primary's failover
/// takes with the `cluster-node-timeout` docs/deploy.md asks for, so a client that waits it out
/// comes back about when the store does (decision 201).
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 5;

/// An error response in the making.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `WWW-Authenticate` challenge for 401s.
    challenge: Option<&'static str>,
    /// `Allow` for 405s, when known.
    allow: Option<HeaderValue>,
    /// `Retry-After` in seconds for 429s and 503s.
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            challenge: None,
            allow: None,
            retry_after: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 401 with the `Bearer` challenge RFC 6750 asks for; `invalid_token` when one was sent.
    pub fn unauthorized(message: impl Into<String>, token_sent: bool) -> ApiError {
        let mut e = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
        e.challenge = Some(if token_sent {
            r#"Bearer realm="verdict", error="invalid_token""#
        } else {
            r#"Bearer realm="verdict""#
        });
        e
    }

    /// 405, keeping the `Allow` header the router computed.
    pub fn method_not_allowed(message: impl Into<String>, allow: Option<HeaderValue>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            message,
        );
        e.allow = allow;
        e
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(challenge) = self.challenge {
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        if let Some(allow) = self.allow {
            response.headers_mut().insert(ALLOW, allow);
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> ApiError {
        let message = e.to_string();
        match e {
            ServiceError::NotFound(_)
            | ServiceError::NoSuchBatch(_)
            | ServiceError::NoSuchStage { .. } => ApiError::not_found(message),
            ServiceError::Invalid(_) => ApiError::invalid(message),
            ServiceError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            ServiceError::TooLarge(_) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
            }
            ServiceError::Unavailable(_) => {
                let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message);
                e.retry_after = Some(UNAVAILABLE_RETRY_AFTER_SECS);
                e
            }
            ServiceError::Busy {
                retry_after_secs, ..
            } => {
                let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "busy", message);
                e.retry_after = Some(retry_after_secs);
                e
            }
            ServiceError::Overloaded {
                retry_after_secs, ..
            } => {
                let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message);
                e.retry_after = Some(retry_after_secs);
                e
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_map_to_their_status_and_code() {
        let cases = [
            (ServiceError::NotFound("t-1".into()), 404, "not_found"),
            (ServiceError::Invalid("bad".into()), 400, "invalid_request"),
            (ServiceError::Conflict("ended".into()), 409, "conflict"),
            (
                ServiceError::TooLarge("title is 2 bytes".into()),
                413,
                "payload_too_large",
            ),
            (
                ServiceError::Unavailable("redis".into()),
                503,
                "unavailable",
            ),
            (
                ServiceError::Busy {
                    reason: "full".into(),
                    retry_after_secs: 3,
                },
                429,
                "busy",
            ),
            (
                ServiceError::Overloaded {
                    reason: "redis full".into(),
                    retry_after_secs: 3,
                },
                503,
                "overloaded",
            ),
        ];
        for (e, status, code) in cases {
            let api = ApiError::from(e.clone());
            assert_eq!(api.status.as_u16(), status, "{e:?}");
            assert_eq!(api.code, code);
            assert_eq!(api.message, e.to_string());
            let response = api.into_response();
            let retry_after = response.headers().get(RETRY_AFTER);
            if code == "busy" || code == "overloaded" {
                assert_eq!(retry_after.and_then(|v| v.to_str().ok()), Some("3"));
            } else if code == "unavailable" {
                assert_eq!(retry_after.and_then(|v| v.to_str().ok()), Some("5"));
            } else {
                assert!(retry_after.is_none(), "{e:?}");
            }
        }
    }
}
