//! The API's client, for the CLI (`verdict submit`, `verdict tail`) and for programs: submit,
//! look up and cancel tasks, and follow a task's events over SSE — resuming with
//! `Last-Event-ID` after a dropped connection, a few times with backoff, until `event: end`.
//!
//! The SSE wire format is parsed here on top of reqwest's chunk reading (no stream
//! dependencies). Every error names the server, the status and the API's error message.

use std::collections::VecDeque;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{RequestBuilder, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use verdict_proto::secret::Secret;
use verdict_proto::wire::ProgressEvent;
use verdict_proto::wire::StoredEvent;

use verdict_api::document::TaskDocument;
use verdict_api::http::{
    END_EVENT, ERROR_EVENT, ErrorBody, MAX_BODY_BYTES, StreamEnd, batch_location, path_segment,
    task_location,
};
use verdict_api::submission::{
    IssueAnalysisSubmission, ReviewSubmission, ScanSubmission, Submitted,
};

/// Time allowed for one request that is not a stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest SSE line or message accepted; events are small, so more is a broken server.
const MAX_SSE_MESSAGE_BYTES: usize = 8 * MAX_BODY_BYTES;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
    #[error("cannot reach {server}: {reason}")]
    Transport { server: String, reason: String },
    /// The API answered with an error status; `code` and `message` are its JSON error.
    #[error("{server} answered {status} ({code}): {message}")]
    Api {
        server: String,
        status: u16,
        code: String,
        message: String,
    },
    #[error("{server} sent a response this client cannot read: {reason}")]
    Protocol { server: String, reason: String },
    #[error(
        "lost the event stream of task {task} from {server} after {reconnects} reconnects: {reason}"
    )]
    StreamLost {
        server: String,
        task: String,
        reconnects: usize,
        reason: String,
    },
}

impl ClientError {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// How an event stream recovers from dropped connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Reconnects in a row without receiving an event before giving up.
    pub max_reconnects: usize,
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// A stream silent for this long is considered dropped (the server sends keep-alives every
    /// 10 s).
    pub idle_timeout: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            max_reconnects: 5,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl ReconnectPolicy {
    fn backoff(&self) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_reconnects)
            .with_jitter()
            .build()
    }
}

/// A client of one verdict server.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    /// The base URL as given, without a trailing slash; paths are appended to it.
    base: String,
    /// The base URL as shown in errors (no userinfo).
    server: String,
    token: Option<Secret>,
    reconnect: ReconnectPolicy,
    /// How long a submission answered 429 (intake busy) keeps being made again, each time after
    /// the server's `Retry-After`.
    busy_patience: Duration,
}

/// The default of [`ApiClient::with_busy_patience`].
const BUSY_PATIENCE: Duration = Duration::from_secs(600);
/// The wait after a 429 that named none.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

impl ApiClient {
    /// A client of the server at `base_url` (`http(s)://host[:port][/prefix]`), sending `token`
    /// as a bearer token when given.
    pub fn new(base_url: &str, token: Option<String>) -> Result<ApiClient, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            reason: reason.to_owned(),
        };
        let base = base_url.trim().trim_end_matches('/');
        let url = Url::parse(base).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("a server URL takes no query or fragment"));
        }
        let mut shown = url.clone();
        // Errors must not repeat credentials pasted into the URL.
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        // reqwest is built without a default crypto provider; an Err means one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("verdict/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(ApiClient {
            http,
            base: base.to_owned(),
            server: shown.as_str().trim_end_matches('/').to_owned(),
            token: token.filter(|t| !t.is_empty()).map(Secret::new),
            reconnect: ReconnectPolicy::default(),
            busy_patience: BUSY_PATIENCE,
        })
    }

    /// Replaces how long submissions wait out a busy server (default 10 minutes; zero gives the
    /// 429 back at once).
    pub fn with_busy_patience(mut self, patience: Duration) -> ApiClient {
        self.busy_patience = patience;
        self
    }

    /// Replaces how event streams reconnect.
    pub fn with_reconnect(mut self, policy: ReconnectPolicy) -> ApiClient {
        self.reconnect = policy;
        self
    }

    /// The server as errors name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    pub async fn submit_review(&self, s: &ReviewSubmission) -> Result<Submitted, ClientError> {
        self.submit("/v1/reviews", s).await
    }

    pub async fn submit_issue_analysis(
        &self,
        s: &IssueAnalysisSubmission,
    ) -> Result<Submitted, ClientError> {
        self.submit("/v1/issue-analyses", s).await
    }

    pub async fn submit_scan(&self, s: &ScanSubmission) -> Result<Submitted, ClientError> {
        self.submit("/v1/scans", s).await
    }

    /// A scan batch (an organisation or a manifest); its id names it in [`ApiClient::scan_batch`].
    pub async fn submit_scan_batch(
        &self,
        s: &verdict_api::submission::ScanBatchSubmission,
    ) -> Result<Submitted, ClientError> {
        self.submit("/v1/scans", s).await
    }

    /// The scan batch with its members and counts.
    pub async fn scan_batch(
        &self,
        id: &str,
    ) -> Result<verdict_api::batch::ScanBatchDocument, ClientError> {
        let req = self.http.get(self.url(&batch_location(id)));
        self.call(req).await
    }

    /// Drives the scan batch on now; the batch as it is.
    pub async fn resume_scan_batch(
        &self,
        id: &str,
    ) -> Result<verdict_api::batch::ScanBatchDocument, ClientError> {
        let req = self
            .http
            .post(self.url(&format!("{}/resume", batch_location(id))));
        self.call(req).await
    }

    /// The task document.
    pub async fn task(&self, id: &str) -> Result<TaskDocument, ClientError> {
        let req = self.http.get(self.url(&task_location(id)));
        self.call(req).await
    }

    /// The task's transcripts, of every stage or of `stage` only.
    pub async fn transcripts(
        &self,
        id: &str,
        stage: Option<&str>,
    ) -> Result<verdict_api::document::TranscriptsDocument, ClientError> {
        let mut path = format!("{}/transcripts", task_location(id));
        if let Some(stage) = stage {
            path.push('/');
            path.push_str(&path_segment(stage));
        }
        let req = self.http.get(self.url(&path));
        self.call(req).await
    }

    /// Requests cancellation; the document as it is now.
    pub async fn cancel(&self, id: &str) -> Result<TaskDocument, ClientError> {
        let req = self
            .http
            .post(self.url(&format!("{}/cancel", task_location(id))));
        self.call(req).await
    }

    /// Follows the task's events from after `after` (`None`: from the start) until `end`.
    pub fn events(&self, id: &str, after: Option<String>) -> EventStream {
        EventStream {
            client: self.clone(),
            task: id.to_owned(),
            last_id: after,
            response: None,
            parser: SseParser::default(),
            backoff: self.reconnect.backoff(),
            reconnects: 0,
            done: false,
        }
    }

    /// Posts a submission. A 429, or a 503 with `Retry-After`, means the server created nothing
    /// and will have room later, so the same submission is made again after its `Retry-After`,
    /// for up to `busy_patience`.
    async fn submit<T: Serialize>(&self, path: &str, body: &T) -> Result<Submitted, ClientError> {
        let give_up = tokio::time::Instant::now() + self.busy_patience;
        loop {
            let (status, retry_after, body) = self
                .exchange(self.http.post(self.url(path)).json(body))
                .await?;
            // A 503 that names a wait is a backend out of room (Redis full, RabbitMQ alarmed) or
            // down (a Redis failover): nothing was created either (a record half-written is
            // undone or adopted), so it is waited out the same way.
            let wait_named = retry_after.is_some();
            let retry_after = retry_after.unwrap_or(DEFAULT_RETRY_AFTER);
            if (status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && wait_named))
                && tokio::time::Instant::now() + retry_after < give_up
            {
                tracing::info!(
                    server = %self.server,
                    wait_seconds = retry_after.as_secs(),
                    "the server is busy; submitting again after its Retry-After"
                );
                tokio::time::sleep(retry_after).await;
                continue;
            }
            return self.read(status, &body);
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorised(&self, req: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(token) => req.bearer_auth(token.expose()),
            None => req,
        }
    }

    fn transport(&self, e: &reqwest::Error) -> ClientError {
        ClientError::Transport {
            server: self.server.clone(),
            reason: describe(e),
        }
    }

    /// Sends a request and reads a JSON answer, or the API's error.
    async fn call<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T, ClientError> {
        let (status, _, body) = self.exchange(req).await?;
        self.read(status, &body)
    }

    /// Sends a request with credentials and the time limit; its status, its `Retry-After` in
    /// seconds, if any, and its body.
    async fn exchange(
        &self,
        req: RequestBuilder,
    ) -> Result<(StatusCode, Option<Duration>, Vec<u8>), ClientError> {
        let response = self
            .authorised(req)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.map_err(|e| self.transport(&e))?;
        Ok((status, retry_after, body.to_vec()))
    }

    /// A JSON answer, or the API's error.
    fn read<T: DeserializeOwned>(&self, status: StatusCode, body: &[u8]) -> Result<T, ClientError> {
        if !status.is_success() {
            return Err(self.api_error(status, body));
        }
        serde_json::from_slice(body).map_err(|e| ClientError::Protocol {
            server: self.server.clone(),
            reason: format!("the {status} answer is not the expected JSON: {e}"),
        })
    }

    fn api_error(&self, status: StatusCode, body: &[u8]) -> ClientError {
        let (code, message) = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) => (b.error.code, b.error.message),
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let message = if text.is_empty() {
                    status.canonical_reason().unwrap_or("no message").to_owned()
                } else {
                    text.chars().take(300).collect()
                };
                ("unknown".to_owned(), message)
            }
        };
        ClientError::Api {
            server: self.server.clone(),
            status: status.as_u16(),
            code,
            message,
        }
    }
}

/// The transport error with its causes, which reqwest keeps in the source chain.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One item of a task's event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A progress event with its stored position.
    Event(StoredEvent),
    /// An event this build cannot decode (a newer server's type): its SSE id, name and data.
    Unknown {
        id: Option<String>,
        kind: String,
        data: String,
    },
    /// The task is over; the stream has ended.
    End(StreamEnd),
}

/// A task's events as a pull API: call [`EventStream::next`] until it returns `None`.
#[derive(Debug)]
pub struct EventStream {
    client: ApiClient,
    task: String,
    /// The last id received (or the resume point given): sent as `Last-Event-ID`.
    last_id: Option<String>,
    response: Option<reqwest::Response>,
    parser: SseParser,
    backoff: ExponentialBackoff,
    /// Reconnects since the last event.
    reconnects: usize,
    done: bool,
}

impl EventStream {
    /// The next item; `None` after `end`. Reconnects on its own; an error means the stream
    /// cannot go on (the task does not exist, the token is refused, the server stayed away).
    pub async fn next(&mut self) -> Result<Option<StreamItem>, ClientError> {
        loop {
            if self.done {
                return Ok(None);
            }
            if let Some(message) = self.parser.pop() {
                if let Some(item) = self.handle(message).await? {
                    return Ok(Some(item));
                }
                continue;
            }
            let idle = self.client.reconnect.idle_timeout;
            let Some(response) = self.response.as_mut() else {
                self.connect().await?;
                continue;
            };
            match tokio::time::timeout(idle, response.chunk()).await {
                Ok(Ok(Some(bytes))) => {
                    if let Err(reason) = self.parser.push(&bytes) {
                        return Err(ClientError::Protocol {
                            server: self.client.server.clone(),
                            reason,
                        });
                    }
                }
                Ok(Ok(None)) => {
                    self.dropped("the server closed the stream before `end`".to_owned())
                        .await?;
                }
                Ok(Err(e)) => self.dropped(describe(&e)).await?,
                Err(_) => {
                    self.dropped(format!("no data for {} s", idle.as_secs()))
                        .await?;
                }
            }
        }
    }

    /// The id to resume after (the last event's).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    async fn handle(&mut self, message: SseMessage) -> Result<Option<StreamItem>, ClientError> {
        match message.event.as_str() {
            END_EVENT => {
                let end = serde_json::from_str::<StreamEnd>(&message.data).map_err(|e| {
                    ClientError::Protocol {
                        server: self.client.server.clone(),
                        reason: format!("the `end` event is not a task state: {e}"),
                    }
                })?;
                self.done = true;
                self.response = None;
                Ok(Some(StreamItem::End(end)))
            }
            ERROR_EVENT => {
                let reason = match serde_json::from_str::<ErrorBody>(&message.data) {
                    Ok(b) => format!("{} ({})", b.error.message, b.error.code),
                    Err(_) => message.data,
                };
                self.dropped(format!("the server reported: {reason}"))
                    .await?;
                Ok(None)
            }
            kind => {
                if let Some(id) = &message.id {
                    self.last_id = Some(id.clone());
                }
                // Progress: the server is alive and moving, so the reconnect budget starts over.
                self.reconnects = 0;
                self.backoff = self.client.reconnect.backoff();
                match serde_json::from_str::<ProgressEvent>(&message.data) {
                    Ok(event) => Ok(Some(StreamItem::Event(StoredEvent {
                        id: message.id.unwrap_or_default(),
                        event,
                    }))),
                    Err(_) => Ok(Some(StreamItem::Unknown {
                        id: message.id,
                        kind: kind.to_owned(),
                        data: message.data,
                    })),
                }
            }
        }
    }

    async fn connect(&mut self) -> Result<(), ClientError> {
        let client = &self.client;
        let url = client.url(&format!("{}/events", task_location(&self.task)));
        let mut req = client.http.get(url).header(ACCEPT, "text/event-stream");
        if let Some(id) = &self.last_id {
            req = req.header("Last-Event-ID", id.as_str());
        }
        let response = match client.authorised(req).send().await {
            Ok(r) => r,
            Err(e) => return self.dropped(describe(&e)).await,
        };
        let status = response.status();
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            let body = response.bytes().await.unwrap_or_default();
            let reason = self.client.api_error(status, &body).to_string();
            return self.dropped(reason).await;
        }
        if !status.is_success() {
            let body = response.bytes().await.unwrap_or_default();
            return Err(self.client.api_error(status, &body));
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_sse {
            return Err(ClientError::Protocol {
                server: self.client.server.clone(),
                reason: "the events endpoint did not answer with `text/event-stream`".to_owned(),
            });
        }
        self.parser.reset_partial();
        self.response = Some(response);
        Ok(())
    }

    /// The connection is gone: wait out the next backoff delay, or give up when none is left.
    async fn dropped(&mut self, reason: String) -> Result<(), ClientError> {
        self.response = None;
        self.parser.reset_partial();
        match self.backoff.next() {
            Some(delay) => {
                self.reconnects += 1;
                tracing::debug!(task = %self.task, reason, ?delay, "EventStreamReconnecting");
                tokio::time::sleep(delay).await;
                Ok(())
            }
            None => Err(ClientError::StreamLost {
                server: self.client.server.clone(),
                task: self.task.clone(),
                reconnects: self.reconnects,
                reason,
            }),
        }
    }
}

/// One dispatched SSE message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SseMessage {
    /// The `event:` name; `message` when none was given.
    event: String,
    data: String,
    /// This message's own `id:` field.
    id: Option<String>,
}

/// An incremental parser of the SSE wire format (WHATWG HTML, "event stream interpretation"):
/// lines end in LF, CRLF or CR; `:` starts a comment; a blank line dispatches; `data:` lines
/// are joined with LF; one space after the colon is dropped.
#[derive(Debug, Default)]
struct SseParser {
    /// Bytes after the last complete line.
    line: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
    ready: VecDeque<SseMessage>,
}

impl SseParser {
    fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.line.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(offset) = self.line[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + offset;
            let eol = if self.line[end] == b'\r' {
                match self.line.get(end + 1) {
                    // A CR at the end of the chunk may be half of a CRLF.
                    None => break,
                    Some(b'\n') => 2,
                    Some(_) => 1,
                }
            } else {
                1
            };
            let text = String::from_utf8_lossy(&self.line[start..end]).into_owned();
            self.line_complete(&text);
            start = end + eol;
        }
        self.line.drain(..start);
        if self.line.len() + self.data.len() > MAX_SSE_MESSAGE_BYTES {
            return Err(format!(
                "an event is larger than {MAX_SSE_MESSAGE_BYTES} bytes"
            ));
        }
        Ok(())
    }

    fn line_complete(&mut self, line: &str) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        let event = self.event.take();
        let id = self.id.take();
        if !self.has_data {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        self.has_data = false;
        if data.ends_with('\n') {
            data.pop();
        }
        self.ready.push_back(SseMessage {
            event: event
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "message".to_owned()),
            data,
            id,
        });
    }

    fn pop(&mut self) -> Option<SseMessage> {
        self.ready.pop_front()
    }

    /// Forgets a half-received message (the connection it came on is gone); complete ones stay.
    fn reset_partial(&mut self) {
        self.line.clear();
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.id = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseMessage> {
        let mut p = SseParser::default();
        for c in chunks {
            p.push(c).unwrap();
        }
        std::iter::from_fn(|| p.pop()).collect()
    }

    fn msg(event: &str, data: &str, id: Option<&str>) -> SseMessage {
        SseMessage {
            event: event.into(),
            data: data.into(),
            id: id.map(str::to_owned),
        }
    }

    #[test]
    fn parses_fields_comments_and_multiline_data() {
        let got = parse_all(&[b": keep-alive\n\nid: 1-0\nevent: triage-fallback\ndata: {\"a\":1}\n\ndata:x\ndata: y\n\n"]);
        assert_eq!(
            got,
            vec![
                msg("triage-fallback", "{\"a\":1}", Some("1-0")),
                msg("message", "x\ny", None),
            ]
        );
    }

    #[test]
    fn lines_split_across_chunks_and_every_line_ending() {
        let got = parse_all(&[b"id: 7\r", b"\nevent: e", b"nd\rdata: {}\r\n", b"\r\n"]);
        assert_eq!(got, vec![msg("end", "{}", Some("7"))]);
    }

    #[test]
    fn utf8_split_across_chunks_survives() {
        let text = "data: Triage — fallback\n\n".as_bytes();
        let (a, b) = text.split_at(15); // inside the em dash
        assert_eq!(
            parse_all(&[a, b]),
            vec![msg("message", "Triage — fallback", None)]
        );
    }

    #[test]
    fn a_message_without_data_is_not_dispatched() {
        assert!(parse_all(&[b"event: end\n\n"]).is_empty());
    }

    #[test]
    fn an_unterminated_message_is_dropped_on_reset() {
        let mut p = SseParser::default();
        p.push(b"data: done\n\ndata: half").unwrap();
        p.reset_partial();
        p.push(b"\n\n").unwrap();
        let got: Vec<_> = std::iter::from_fn(|| p.pop()).collect();
        assert_eq!(got, vec![msg("message", "done", None)]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::default();
        let chunk = vec![b'x'; MAX_SSE_MESSAGE_BYTES + 1];
        assert!(p.push(&chunk).is_err());
    }

    #[test]
    fn urls_are_checked_and_credentials_hidden() {
        let c = ApiClient::new("http://user:pw@127.0.0.1:8080/", None).unwrap();
        assert_eq!(c.server(), "http://127.0.0.1:8080");
        assert_eq!(
            c.url("/v1/reviews"),
            "http://user:pw@127.0.0.1:8080/v1/reviews"
        );
        let e = ApiClient::new("ftp://host", None).unwrap_err();
        assert!(e.to_string().contains("http or https"), "{e}");
        assert!(ApiClient::new("not a url", None).is_err());
    }
}
