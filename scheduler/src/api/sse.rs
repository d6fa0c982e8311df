//! `GET /v1/tasks/{id}/events`: a task's progress as Server-Sent Events (SPEC O3). The stream
//! replays what is stored (from the start, or after `Last-Event-ID` / `?after=`), then follows
//! live, and closes with one `end` event once the task is terminal and nothing more is stored.
//!
//! Wire format, one SSE message per stored event: `id:` the stored position (what a client sends
//! back as `Last-Event-ID`), `event:` the event's `type` (`triage-fallback`, …), `data:` the
//! `ProgressEvent` JSON. `event: end` carries [`StreamEnd`]; `event: error` carries the error
//! body when the backend fails mid-stream, after which the stream closes and the client resumes
//! from its last id.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
pub use verdict_api::http::{END_EVENT, ERROR_EVENT, StreamEnd};
use verdict_backends::store::StoredEvent;
use verdict_proto::wire::EventType;

use super::ApiState;
use super::error::ApiError;
use super::routes::task_id;
use crate::service::{ServiceError, TaskService};
use verdict_api::document::TaskDocument;

/// How long one read waits for new events before the stream re-checks the task's state.
const FOLLOW_WAIT: Duration = Duration::from_secs(15);
/// How long a terminal task's stream waits for its closing event before ending without it (the
/// writer crashed between storing the state and appending the events).
const CLOSING_WAIT: Duration = Duration::from_secs(1);
/// Idle time after which a keep-alive comment is sent, so proxies and clients see a live stream.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    /// Resume after this stored event id (the `Last-Event-ID` header wins when both are sent,
    /// since a reconnecting client sends the newer position there).
    #[serde(default)]
    after: Option<String>,
}

/// The wire name of an event type (its serde spelling, e.g. `triage-fallback`).
pub fn event_name(kind: EventType) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{kind:?}"),
    }
}

pub(crate) async fn task_events(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    let query = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .or(query.0.after.filter(|a| !a.is_empty()));
    // Fail with a 404 before the stream starts; afterwards only an `error` event can say so.
    state.service.task(&id).await?;
    let follow = Follow {
        service: state.service.clone(),
        id,
        after,
        buffered: VecDeque::new(),
        finished: false,
        saw_closing: false,
    };
    let stream = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok::<Event, Infallible>(event), follow))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// One client's position in one task's stream.
struct Follow {
    service: Arc<dyn TaskService>,
    id: String,
    after: Option<String>,
    buffered: VecDeque<StoredEvent>,
    finished: bool,
    /// The task's closing event (`task-finished`) has been read.
    saw_closing: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(stored) = self.buffered.pop_front() {
                self.after = Some(stored.id.clone());
                return Some(progress(&stored));
            }
            if self.finished {
                return None;
            }
            match self.step().await {
                Ok(None) => {}
                Ok(Some(end)) => {
                    self.finished = true;
                    return Some(end);
                }
                Err(e) => {
                    self.finished = true;
                    tracing::warn!(error = %e, "TaskEventsStreamError");
                    return Some(error(e));
                }
            }
        }
    }

    /// Buffers the next events, or returns the `end` event when the task is over.
    async fn step(&mut self) -> Result<Option<Event>, ServiceError> {
        if self.read(Duration::ZERO).await? {
            return Ok(None);
        }
        let doc = self.service.task(&self.id).await?;
        if doc.state.is_terminal() {
            // The record turns terminal a moment before its closing events are appended; wait
            // briefly for them so the stream never ends short of `task-finished`.
            let wait = if self.saw_closing {
                Duration::ZERO
            } else {
                CLOSING_WAIT
            };
            if self.read(wait).await? {
                return Ok(None);
            }
            return Ok(Some(end(&doc)));
        }
        self.read(FOLLOW_WAIT).await?;
        Ok(None)
    }

    /// Reads what follows the current position; whether anything came.
    async fn read(&mut self, wait: Duration) -> Result<bool, ServiceError> {
        let batch = self
            .service
            .events(&self.id, self.after.as_deref(), wait)
            .await?;
        let any = !batch.is_empty();
        self.saw_closing |= batch
            .iter()
            .any(|e| e.event.kind == EventType::TaskFinished);
        self.buffered.extend(batch);
        Ok(any)
    }
}

fn progress(stored: &StoredEvent) -> Event {
    let mut event = Event::default().event(event_name(stored.event.kind));
    // An id with a line break would break the framing (and axum panics on it); such an event is
    // still sent, only not resumable by id.
    if !stored.id.contains(['\n', '\r', '\0']) {
        event = event.id(stored.id.as_str());
    }
    match event.json_data(&stored.event) {
        Ok(event) => event,
        Err(e) => error(ServiceError::Unavailable(format!(
            "event {} could not be encoded: {e}",
            stored.id
        ))),
    }
}

fn end(doc: &TaskDocument) -> Event {
    let end = StreamEnd {
        state: doc.state,
        reason: doc.reason.clone(),
    };
    let event = Event::default().event(END_EVENT);
    match serde_json::to_string(&end) {
        Ok(data) => event.data(data),
        Err(_) => event.data(format!(r#"{{"state":"{}"}}"#, doc.state.as_str())),
    }
}

fn error(e: ServiceError) -> Event {
    let body = ApiError::from(e).body();
    let event = Event::default().event(ERROR_EVENT);
    match serde_json::to_string(&body) {
        Ok(data) => event.data(data),
        Err(_) => event.data(r#"{"error":{"code":"internal","message":"stream failed"}}"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_the_wire_type() {
        assert_eq!(event_name(EventType::TriageFallback), "triage-fallback");
        assert_eq!(event_name(EventType::ProtocolRepair), "protocol-repair");
        assert_eq!(event_name(EventType::StageStarted), "stage-started");
    }
}
