//! `POST /v1/webhooks/github`: a delivery is authenticated by its `X-Hub-Signature-256` before
//! anything else is read (no bearer token: GitHub cannot send one), then read by
//! [`verdict_policy::webhook`] and submitted. A redelivery names the task the first delivery made.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use verdict_backends::secret::Secret;

use super::ApiState;
use super::error::ApiError;
use verdict_policy::webhook::{self, Action, WebhookPolicy};

/// The path prefix of webhook routes (not behind bearer authentication).
pub(crate) const PREFIX: &str = "/v1/webhooks/";

/// What the webhook route needs: the shared secret and the policy.
#[derive(Debug, Clone)]
pub struct GitHubWebhooks {
    pub secret: Secret,
    pub policy: WebhookPolicy,
}

pub(crate) async fn github(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(hooks) = state.webhooks.as_deref() else {
        return Err(ApiError::not_found(
            "GitHub webhooks are not enabled on this scheduler; set [github] webhook_secret_env and restart",
        ));
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Nothing of the body is read before the signature holds.
    webhook::verify(
        hooks.secret.expose().as_bytes(),
        &body,
        header("x-hub-signature-256"),
    )
    .map_err(|e| ApiError::unauthorized(e.to_string(), true))?;
    let event = header("x-github-event").ok_or_else(|| {
        ApiError::invalid(webhook::WebhookError::MissingHeader("X-GitHub-Event").to_string())
    })?;
    let delivery = header("x-github-delivery").ok_or_else(|| {
        ApiError::invalid(webhook::WebhookError::MissingHeader("X-GitHub-Delivery").to_string())
    })?;
    let action = webhook::interpret(event, delivery, &body, &hooks.policy)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let submitted = match action {
        Action::Ping => return Ok((StatusCode::OK, Json(json!({"ok": true}))).into_response()),
        Action::Ignore(reason) => {
            tracing::info!(event, delivery, %reason, "webhook ignored");
            return Ok((StatusCode::OK, Json(json!({"ignored": reason}))).into_response());
        }
        // GitHub does not deliver again by itself: a delivery refused as busy would be a review
        // never made, so deliveries are admitted past intake's backlog.
        Action::Review(mut s) => {
            s.options.past_backlog = true;
            state.service.submit_review(*s).await?
        }
        Action::IssueAnalysis(mut s) => {
            s.options.past_backlog = true;
            state.service.submit_issue_analysis(*s).await?
        }
    };
    tracing::info!(event, delivery, task = %submitted.id, "webhook accepted");
    Ok((StatusCode::ACCEPTED, Json(submitted)).into_response())
}
