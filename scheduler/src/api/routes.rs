//! The handlers: each turns one HTTP request into one `TaskService` call and its answer into a
//! status and JSON body. No behaviour lives here that the service does not own.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::header::{ALLOW, CONTENT_TYPE, LOCATION};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{Encoder, TextEncoder};
use serde::Serialize;

use super::ApiState;
use super::error::{ApiError, ErrorDetail};
use super::json::ApiJson;
use crate::service::ServiceError;
use verdict_api::document::TranscriptsDocument;
pub use verdict_api::http::{batch_location, path_segment, task_location};
use verdict_api::submission::{
    IssueAnalysisSubmission, ReviewSubmission, ScanBatchSubmission, ScanSubmission, Submitted,
};

pub(crate) async fn submit_review(
    State(state): State<ApiState>,
    ApiJson(submission): ApiJson<ReviewSubmission>,
) -> Result<Response, ApiError> {
    accepted(state.service.submit_review(submission).await)
}

pub(crate) async fn submit_issue_analysis(
    State(state): State<ApiState>,
    ApiJson(submission): ApiJson<IssueAnalysisSubmission>,
) -> Result<Response, ApiError> {
    accepted(state.service.submit_issue_analysis(submission).await)
}

/// One repository (`repository`, `revision`: a task, `Location: /v1/tasks/{id}`) or many
/// (`organisation` or `manifest`: a batch, `Location: /v1/scans/{id}`), told apart by those
/// fields; each form is then read strictly, unknown fields named.
pub(crate) async fn submit_scan(
    State(state): State<ApiState>,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> Result<Response, ApiError> {
    let batch = body
        .as_object()
        .is_some_and(|o| o.contains_key("organisation") || o.contains_key("manifest"));
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal(e.to_string()))?;
    if batch {
        let submission: ScanBatchSubmission = super::json::parse(&bytes)?;
        let submitted = state.service.submit_scan_batch(submission).await?;
        let location = HeaderValue::from_str(&batch_location(&submitted.id))
            .map_err(|_| ApiError::internal("a batch id cannot be put in a Location header"))?;
        let mut response = (StatusCode::ACCEPTED, Json(submitted)).into_response();
        response.headers_mut().insert(LOCATION, location);
        Ok(response)
    } else {
        let submission: ScanSubmission = super::json::parse(&bytes)?;
        accepted(state.service.submit_scan(submission).await)
    }
}

/// `GET /v1/scans/{id}`: the batch with its members and counts.
pub(crate) async fn get_scan_batch(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    Ok(Json(state.service.scan_batch(&id).await?).into_response())
}

/// `POST /v1/scans/{id}/resume`: the batch driven on now; `202` with the batch as it is.
pub(crate) async fn resume_scan_batch(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    let doc = state.service.resume_scan_batch(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(doc)).into_response())
}

/// `202 Accepted`, `Location: /v1/tasks/{id}` and `{"id": ...}`.
fn accepted(result: Result<Submitted, ServiceError>) -> Result<Response, ApiError> {
    let submitted = result?;
    let location = HeaderValue::from_str(&task_location(&submitted.id)).map_err(|_| {
        ApiError::internal(format!(
            "task id {:?} cannot be put in a Location header",
            submitted.id
        ))
    })?;
    let mut response = (StatusCode::ACCEPTED, Json(submitted)).into_response();
    response.headers_mut().insert(LOCATION, location);
    Ok(response)
}

/// The `{id}` of a task route, or a JSON 400 naming the problem.
pub(crate) fn task_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(id) = path.map_err(|e| ApiError::invalid(e.body_text()))?;
    if id.trim().is_empty() {
        return Err(ApiError::invalid("the task id is empty"));
    }
    Ok(id)
}

pub(crate) async fn get_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    Ok(Json(state.service.task(&id).await?).into_response())
}

pub(crate) async fn get_transcripts(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    transcripts(&state, task_id(path)?, None).await
}

pub(crate) async fn get_stage_transcripts(
    State(state): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((id, stage)) = path.map_err(|e| ApiError::invalid(e.body_text()))?;
    if id.trim().is_empty() || stage.trim().is_empty() {
        return Err(ApiError::invalid("the task id or stage id is empty"));
    }
    transcripts(&state, id, Some(&stage)).await
}

/// The task's transcripts (of `stage` only) as a [`TranscriptsDocument`].
async fn transcripts(
    state: &ApiState,
    id: String,
    stage: Option<&str>,
) -> Result<Response, ApiError> {
    let transcripts = state.service.transcripts(&id, stage).await?;
    Ok(Json(TranscriptsDocument {
        task_id: id,
        transcripts,
    })
    .into_response())
}

pub(crate) async fn cancel(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    let doc = state.service.cancel(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(doc)).into_response())
}

/// Liveness: the process answers. Deliberately checks nothing else, so a backend outage makes
/// the pod unready, not restarted.
pub(crate) async fn healthz() -> Response {
    Json(serde_json::json!({ "status": "ok" })).into_response()
}

/// The body of `/readyz`: the readiness report, plus the usual error object when not ready.
#[derive(Debug, Serialize)]
struct ReadyBody {
    ready: bool,
    problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDetail>,
}

pub(crate) async fn readyz(State(state): State<ApiState>) -> Response {
    let readiness = state.service.readiness().await;
    if readiness.ready {
        let body = ReadyBody {
            ready: true,
            problems: readiness.problems,
            error: None,
        };
        return Json(body).into_response();
    }
    let message = if readiness.problems.is_empty() {
        "not ready".to_owned()
    } else {
        format!("not ready: {}", readiness.problems.join("; "))
    };
    let body = ReadyBody {
        ready: false,
        problems: readiness.problems,
        error: Some(ErrorDetail {
            code: "unavailable".to_owned(),
            message,
        }),
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

pub(crate) async fn metrics(State(state): State<ApiState>) -> Response {
    let rendered = match &state.metrics {
        Some(m) => m.render(&state.registry),
        None => {
            let mut out = Vec::new();
            TextEncoder::new()
                .encode(&state.registry.gather(), &mut out)
                .map(|()| String::from_utf8_lossy(&out).into_owned())
        }
    };
    match rendered {
        Ok(text) => {
            let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
            ([(CONTENT_TYPE, content_type)], text).into_response()
        }
        Err(e) => ApiError::internal(format!("metrics could not be encoded: {e}")).into_response(),
    }
}

/// Unknown routes.
pub(crate) async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}; see the API reference for the routes under /v1",
        req.method(),
        req.uri().path()
    ))
}

/// Middleware: gives the router's bodiless `405 Method Not Allowed` the JSON error shape,
/// keeping its `Allow` header.
pub(crate) async fn json_method_not_allowed(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let response = next.run(req).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED
        || response.headers().contains_key(CONTENT_TYPE)
    {
        return response;
    }
    let allow = response.headers().get(ALLOW).cloned();
    let allowed = allow
        .as_ref()
        .and_then(|a| a.to_str().ok())
        .map(|a| format!("; allowed: {a}"))
        .unwrap_or_default();
    let route = route.unwrap_or_else(|| "this route".to_owned());
    ApiError::method_not_allowed(
        format!("{method} is not allowed on {route}{allowed}"),
        allow,
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_encode_the_id_as_one_segment() {
        assert_eq!(task_location("t-1_a.b~c"), "/v1/tasks/t-1_a.b~c");
        assert_eq!(task_location("a/b c"), "/v1/tasks/a%2Fb%20c");
    }
}
