//! Request bodies: a JSON extractor whose every rejection is an [`ApiError`] that names the
//! problem — the wrong content type, the size limit, or the field path, line and column of a
//! syntax error or an unknown field — instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;

pub use verdict_api::http::MAX_BODY_BYTES;

use super::error::ApiError;

/// A JSON request body of type `T`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(req.headers().get(CONTENT_TYPE))?;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("the request body is larger than the {MAX_BODY_BYTES}-byte limit"),
                )
            } else {
                ApiError::invalid(format!(
                    "could not read the request body: {}",
                    rejection.body_text()
                ))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

fn check_content_type(value: Option<&axum::http::HeaderValue>) -> Result<(), ApiError> {
    let unsupported = |found: &str| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("expected `Content-Type: application/json`, found {found}"),
        )
    };
    let Some(value) = value else {
        return Err(unsupported("no Content-Type header"));
    };
    let text = value.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim();
    let json = essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"));
    if json {
        Ok(())
    } else {
        Err(unsupported(&format!("`{text}`")))
    }
}

/// Parses a whole body as `T`, naming the failing field path (e.g. `options.langauge`) and the
/// line and column, and rejecting anything after the value.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::invalid(format!("the request body is not valid JSON: {inner}"))
        } else if path == "." {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid request body at `{path}`: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_api::submission::{ReviewSubmission, ScanSubmission};

    #[test]
    fn an_unknown_nested_field_is_named_with_its_path() {
        let body = br#"{"repository":"r","base":"a","head":"b","options":{"langauge":"en"}}"#;
        let e = parse::<ReviewSubmission>(body).unwrap_err();
        assert_eq!(e.code, "invalid_request");
        assert!(e.message.contains("`options.langauge`"), "{}", e.message);
        assert!(
            e.message.contains("unknown field `langauge`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_syntax_error_names_line_and_column() {
        let e = parse::<ReviewSubmission>(b"{\n\"repository\": }").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        assert!(e.message.contains("line 2"), "{}", e.message);
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = parse::<ScanSubmission>(br#"{"repository":"r"}"#).unwrap_err();
        assert!(
            e.message.contains("missing field `revision`"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("not valid JSON"), "{}", e.message);
    }

    #[test]
    fn trailing_data_is_rejected() {
        let body = br#"{"repository":"r","base":"a","head":"b"} {}"#;
        let e = parse::<ReviewSubmission>(body).unwrap_err();
        assert!(e.message.contains("trailing"), "{}", e.message);
    }

    #[test]
    fn content_types() {
        use axum::http::HeaderValue;
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
        ] {
            assert!(
                check_content_type(Some(&HeaderValue::from_static(ok))).is_ok(),
                "{ok}"
            );
        }
        let e = check_content_type(Some(&HeaderValue::from_static("text/plain"))).unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(e.message.contains("`text/plain`"));
        assert!(check_content_type(None).is_err());
    }
}
