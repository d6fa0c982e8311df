//! The scheduler's HTTP API (SPEC I2): a thin adapter from HTTP to [`TaskService`], with bearer
//! authentication, JSON errors everywhere, a body size limit, SSE progress streams, health,
//! readiness and metrics.
//!
//! # Routes
//! | route | answer |
//! | --- | --- |
//! | `POST /v1/reviews`, `/v1/issue-analyses`, `/v1/scans` | `202`, `Location`, `{"id"}` |
//! | `POST /v1/scans` with `organisation` or `manifest` | `202`, `Location: /v1/scans/{id}`, `{"id"}` (a batch) |
//! | `GET /v1/scans/{id}` | the [`ScanBatchDocument`](verdict_api::batch::ScanBatchDocument) |
//! | `POST /v1/scans/{id}/resume` | `202` and the batch, driven on now |
//! | `GET /v1/tasks/{id}` | the [`TaskDocument`](verdict_api::document::TaskDocument) |
//! | `GET /v1/tasks/{id}/events` | Server-Sent Events ([`sse`]) |
//! | `GET /v1/tasks/{id}/transcripts`, `/v1/tasks/{id}/transcripts/{stage}` | `{"task_id", "transcripts"}`: every attempt's transcript (of one stage), redacted |
//! | `POST /v1/tasks/{id}/cancel` | `202` and the document; `409` once terminal |
//! | `POST /v1/webhooks/github` | signature checked first ([`webhooks`]); `202` and `{"id"}`, or `200` and why it was ignored |
//! | `GET /healthz`, `/readyz`, `/metrics` | unauthenticated probes and Prometheus text |
//!
//! Errors are `{"error": {"code", "message"}}` ([`error`]) with codes `invalid_request` (400),
//! `unauthorized` (401), `not_found` (404), `method_not_allowed` (405), `conflict` (409),
//! `payload_too_large` (413), `busy` (429), `unsupported_media_type` (415), `internal` (500),
//! `unavailable` and `overloaded` (503); every 429 and 503 carries `Retry-After`.
//!
//! # Layout
//! - [`routes`]: the handlers. [`sse`]: the event stream. [`json`]: request bodies.
//! - [`webhooks`]: GitHub deliveries, authenticated by their signature, not a bearer token.
//! - [`auth`]: bearer tokens. [`metrics`]: the API's metrics and request log. [`error`]: the
//!   error shape.

pub mod auth;
pub mod error;
pub mod json;
pub mod metrics;
pub mod routes;
pub mod sse;
pub mod webhooks;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};

pub use auth::{ApiAuth, ApiAuthError};
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use json::MAX_BODY_BYTES;
pub use sse::StreamEnd;

use crate::service::TaskService;
use metrics::HttpMetrics;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct ApiState {
    service: Arc<dyn TaskService>,
    /// The process's registry, served on `/metrics` before the API's own metrics.
    registry: prometheus::Registry,
    metrics: Option<HttpMetrics>,
    /// GitHub webhooks, when configured (a secret is set).
    webhooks: Option<Arc<webhooks::GitHubWebhooks>>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// The whole API over `service`. `metrics` is the process registry `/metrics` serves; the API's
/// own HTTP metrics are added to it on output.
pub fn router(
    service: Arc<dyn TaskService>,
    auth: ApiAuth,
    metrics: prometheus::Registry,
) -> Router {
    router_with_webhooks(service, auth, metrics, None)
}

/// [`router`], with GitHub webhooks accepted on `POST /v1/webhooks/github` when `webhooks` is set
/// (without it the route answers 404 naming the setting).
pub fn router_with_webhooks(
    service: Arc<dyn TaskService>,
    auth: ApiAuth,
    metrics: prometheus::Registry,
    webhooks: Option<webhooks::GitHubWebhooks>,
) -> Router {
    let http_metrics = match HttpMetrics::new() {
        Ok(m) => Some(m),
        Err(e) => {
            // Only a programming error (a bad metric name) gets here; serve without them.
            tracing::error!(error = %e, "HttpMetricsRegistrationError");
            None
        }
    };
    let state = ApiState {
        service,
        registry: metrics,
        metrics: http_metrics.clone(),
        webhooks: webhooks.map(Arc::new),
    };
    Router::new()
        .route("/v1/reviews", post(routes::submit_review))
        .route("/v1/issue-analyses", post(routes::submit_issue_analysis))
        .route("/v1/scans", post(routes::submit_scan))
        .route("/v1/scans/{id}", get(routes::get_scan_batch))
        .route("/v1/scans/{id}/resume", post(routes::resume_scan_batch))
        .route("/v1/tasks/{id}", get(routes::get_task))
        .route("/v1/tasks/{id}/events", get(sse::task_events))
        .route("/v1/tasks/{id}/transcripts", get(routes::get_transcripts))
        .route(
            "/v1/tasks/{id}/transcripts/{stage}",
            get(routes::get_stage_transcripts),
        )
        .route("/v1/tasks/{id}/cancel", post(routes::cancel))
        .route("/v1/webhooks/github", post(webhooks::github))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .fallback(routes::not_found)
        .with_state(state)
        // Outermost last: observe → authenticate → limit the body → shape 405s.
        .layer(from_fn(routes::json_method_not_allowed))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(from_fn_with_state(auth, auth::require_bearer))
        .layer(from_fn_with_state(http_metrics, metrics::observe))
}
