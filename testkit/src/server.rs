//! The fake provider's HTTP server: a real axum server on a loopback port, so clients are tested
//! through their real HTTP stack (connection handling, timeouts, headers), not through a mock.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::RngExt;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::record::{Answer, RecordedRequest, WaitTimeout};
use crate::script::{Behaviour, Latency, Reply, Script};
use crate::wire::{Rendered, Wire, estimate_tokens};

/// Requests larger than this are refused (413), as a real API would; big enough for any prompt a
/// test or benchmark sends.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// How long [`FakeProvider::shutdown`] waits for open connections before aborting the server.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A fake LLM provider on `127.0.0.1:<random port>`, speaking OpenAI chat completions and the
/// Anthropic Messages API, answering each model's requests from its [`Script`] and recording
/// every request.
///
/// Dropping it signals shutdown (hanging and delayed requests end at once); call
/// [`FakeProvider::shutdown`] to also wait until the server has stopped.
#[derive(Debug)]
pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    scripts: Mutex<HashMap<String, ModelScript>>,
    requests: Mutex<Vec<RecordedRequest>>,
    answers: Mutex<Vec<Answer>>,
    /// How many requests have arrived; `wait_for_requests` watches it.
    received: watch::Sender<usize>,
    /// How many responses were handed to their connection.
    answered: AtomicUsize,
    /// Whether requests are kept (benchmarks turn it off to keep memory flat).
    recording: AtomicBool,
    shutdown: watch::Receiver<bool>,
    next_id: AtomicU64,
    /// What `GET /props` answers (llama.cpp's server description); `None`: 404, as on every
    /// server that is not llama.cpp.
    props: Mutex<Option<Value>>,
    /// `GET /props` requests seen.
    props_requests: AtomicUsize,
}

#[derive(Debug)]
struct ModelScript {
    script: Script,
    served: usize,
}

impl FakeProvider {
    /// Starts the server. Panics if no loopback port can be bound: it is test infrastructure,
    /// and there is nothing a test could do instead. See [`FakeProvider::try_start`].
    pub async fn start() -> FakeProvider {
        match FakeProvider::try_start().await {
            Ok(p) => p,
            Err(e) => panic!("start the fake provider on 127.0.0.1: {e}"),
        }
    }

    pub async fn try_start() -> std::io::Result<FakeProvider> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            scripts: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            answers: Mutex::new(Vec::new()),
            received: watch::Sender::new(0),
            answered: AtomicUsize::new(0),
            recording: AtomicBool::new(true),
            shutdown: shutdown_rx.clone(),
            next_id: AtomicU64::new(1),
            props: Mutex::new(None),
            props_requests: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/props", get(props))
            .route(
                Wire::OpenAi.path(),
                post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| {
                    handle(Wire::OpenAi, s, h, b)
                }),
            )
            .route(
                Wire::Anthropic.path(),
                post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| {
                    handle(Wire::Anthropic, s, h, b)
                }),
            )
            .fallback(|| async {
                json_response(
                    StatusCode::NOT_FOUND,
                    &serde_json::json!({"error": {"message": "no such endpoint on the fake provider", "type": "invalid_request_error"}}),
                )
            })
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(&shared));
        let mut signal = shutdown_rx;
        let server = tokio::spawn(async move {
            let stopped = async move {
                // An error means the handle is gone: shut down as well.
                let _ = signal.wait_for(|stop| *stop).await;
            };
            // Serving only fails on listener errors; a fake has no one to report them to but
            // the test, which then sees connection errors.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        });
        Ok(FakeProvider {
            addr,
            shared,
            shutdown,
            server: Some(server),
        })
    }

    /// Answers `GET /props` as a llama.cpp server with a context window of `n_ctx` tokens and a
    /// tool-capable chat template does, so clients that discover what the server supports find
    /// llama.cpp.
    pub fn serve_llama_cpp_props(&self, n_ctx: u32) {
        self.serve_llama_cpp_props_with(n_ctx, true);
    }

    /// As [`FakeProvider::serve_llama_cpp_props`], with `chat_template_caps` saying whether the
    /// model's chat template can call tools (SmolLM2's cannot).
    pub fn serve_llama_cpp_props_with(&self, n_ctx: u32, supports_tool_calls: bool) {
        let props = serde_json::json!({
            "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
            "total_slots": 1,
            "model_path": "/models/fake.gguf",
            "chat_template_caps": {
                "supports_tools": supports_tool_calls,
                "supports_tool_calls": supports_tool_calls,
                "supports_system_role": true,
            },
            "build_info": "fake-llama.cpp",
        });
        *self
            .shared
            .props
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(props);
    }

    /// How many `GET /props` requests arrived.
    pub fn props_requests(&self) -> usize {
        self.shared.props_requests.load(Ordering::SeqCst)
    }

    /// `http://127.0.0.1:PORT`: no trailing slash and no `/v1`, like a provider's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets (or replaces) the script for requests naming `model`. Models without a script get
    /// a 404 in the wire format's error shape.
    pub fn script(&self, model: impl Into<String>, script: Script) {
        lock(&self.shared.scripts).insert(model.into(), ModelScript { script, served: 0 });
    }

    /// Scripted steps of `model` not consumed yet (0 for an unknown model).
    pub fn remaining(&self, model: &str) -> usize {
        lock(&self.shared.scripts)
            .get(model)
            .map_or(0, |m| m.script.remaining())
    }

    /// Keeps (the default) or stops keeping requests. Counting goes on either way, so
    /// [`FakeProvider::wait_for_requests`] and [`FakeProvider::request_count`] still work;
    /// benchmarks that send many large requests turn keeping off so the fake's memory stays flat.
    pub fn set_recording(&self, keep: bool) {
        self.shared.recording.store(keep, Ordering::Relaxed);
    }

    /// How many requests have arrived, kept or not.
    pub fn request_count(&self) -> usize {
        *self.shared.received.borrow()
    }

    /// Every request kept so far, in arrival order, including rejected ones.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The requests naming `model`, in arrival order.
    pub fn requests_for(&self, model: &str) -> Vec<RecordedRequest> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.model.as_deref() == Some(model))
            .cloned()
            .collect()
    }

    /// Waits until at least `n` requests have arrived (without polling), then returns the kept
    /// ones; fails after `timeout` saying how many arrived.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, WaitTimeout> {
        let mut received = self.shared.received.subscribe();
        // The watch's read guard is dropped here, before the requests are locked: `record`
        // takes the requests' lock and then the watch's write lock, so holding both the other
        // way round deadlocked a test whose provider was busy.
        let reached = tokio::time::timeout(timeout, received.wait_for(|count| *count >= n))
            .await
            .map(|waited| waited.map(|_| ()));
        match reached {
            Ok(Ok(())) => Ok(self.requests()),
            // The sender lives in `shared`, which `self` keeps alive: only the timeout is real.
            Ok(Err(_)) | Err(_) => Err(WaitTimeout {
                wanted: n,
                received: *self.shared.received.borrow(),
                timeout,
            }),
        }
    }

    /// Every answer kept so far, in the order they were sent (see [`Answer`]: a request whose
    /// client went away before it was answered has none).
    pub fn answers(&self) -> Vec<Answer> {
        lock(&self.shared.answers).clone()
    }

    /// How many requests have been answered, kept or not.
    pub fn answer_count(&self) -> usize {
        self.shared.answered.load(Ordering::SeqCst)
    }

    /// Stops the server: pending hangs and delays end at once, open connections close, and this
    /// returns when the server task is gone (aborting it after a grace period).
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

/// Poisoning only means another test thread panicked mid-update; the data is still usable for
/// assertions, and a fake must not turn one failure into many.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers one request and notes the answer. If the client goes away first, hyper drops this
/// future, so an abandoned request is recorded without an answer.
async fn props(State(shared): State<Arc<Shared>>) -> Response {
    shared.props_requests.fetch_add(1, Ordering::SeqCst);
    let props = shared
        .props
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    match props {
        Some(props) => json_response(StatusCode::OK, &props),
        None => json_response(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": {"message": "no such endpoint on the fake provider", "type": "invalid_request_error"}}),
        ),
    }
}

async fn handle(
    wire: Wire,
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (seq, response) = answer(wire, &shared, headers, body).await;
    shared.answered(seq, response.status().as_u16());
    response
}

async fn answer(wire: Wire, shared: &Shared, headers: HeaderMap, body: Bytes) -> (usize, Response) {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    let model = parsed
        .as_ref()
        .ok()
        .and_then(|b| b.get("model"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let rejection = match &parsed {
        Err(e) => Some(format!("the request body is not valid JSON: {e}")),
        Ok(b) => wire.validate(b).err(),
    };
    let seq = shared.record(RecordedRequest {
        seq: 0,
        path: wire.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parsed.unwrap_or(Value::Null),
        raw_body: raw_body.clone(),
        model: model.clone(),
        rejection: rejection.clone(),
        at: Instant::now(),
    });
    if let Some(reason) = rejection {
        return (
            seq,
            json_response(StatusCode::BAD_REQUEST, &wire.error_body(400, &reason)),
        );
    }
    let Some(model) = model else {
        return (
            seq,
            json_response(
                StatusCode::BAD_REQUEST,
                &wire.error_body(400, "model: required"),
            ),
        );
    };
    let next = {
        let mut scripts = lock(&shared.scripts);
        match scripts.get_mut(&model) {
            None => None,
            Some(m) => {
                m.served += 1;
                Some(m.script.next_behaviour().ok_or(m.served))
            }
        }
    };
    let response = match next {
        None => json_response(
            StatusCode::NOT_FOUND,
            &wire.error_body(
                404,
                &format!("The model `{model}` does not exist (no script for it on the fake provider)"),
            ),
        ),
        Some(Err(served)) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &wire.error_body(
                500,
                &format!(
                    "fake provider: the script for model `{model}` is exhausted (request {served} has no scripted behaviour)"
                ),
            ),
        ),
        Some(Ok(behaviour)) => shared.perform(wire, &model, &raw_body, behaviour).await,
    };
    (seq, response)
}

impl Shared {
    /// Counts the request and keeps it when recording; returns its `seq`, its place among all
    /// arrivals.
    fn record(&self, mut request: RecordedRequest) -> usize {
        // The count and the list change under one lock so `seq` matches arrival order.
        let mut requests = lock(&self.requests);
        self.received.send_modify(|n| {
            request.seq = *n;
            *n += 1;
        });
        let seq = request.seq;
        if self.recording.load(Ordering::Relaxed) {
            requests.push(request);
        }
        seq
    }

    /// Counts an answer and keeps it when recording.
    fn answered(&self, seq: usize, status: u16) {
        let mut answers = lock(&self.answers);
        self.answered.fetch_add(1, Ordering::SeqCst);
        if self.recording.load(Ordering::Relaxed) {
            answers.push(Answer {
                seq,
                status,
                at: Instant::now(),
            });
        }
    }

    /// Resolves when the server is shutting down.
    async fn stopping(&self) {
        let mut rx = self.shutdown.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    async fn perform(
        &self,
        wire: Wire,
        model: &str,
        raw_body: &str,
        behaviour: Behaviour,
    ) -> Response {
        let mut behaviour = behaviour;
        // Latency wrappers nest; unwrap them iteratively so the future stays non-recursive.
        loop {
            match behaviour {
                Behaviour::Delayed { latency, then } => {
                    let wait = match latency {
                        Latency::Fixed(d) => d,
                        Latency::Between(min, max) => rand::rng().random_range(min..=max),
                    };
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.stopping() => return shutting_down(wire),
                    }
                    behaviour = *then;
                }
                Behaviour::Hang => {
                    self.stopping().await;
                    return shutting_down(wire);
                }
                Behaviour::Status(s) => {
                    let status =
                        StatusCode::from_u16(s.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let mut response = match s.body {
                        Some(body) => {
                            let kind = if serde_json::from_str::<Value>(&body).is_ok() {
                                "application/json"
                            } else {
                                "text/plain; charset=utf-8"
                            };
                            (status, [(header::CONTENT_TYPE, kind)], body).into_response()
                        }
                        None => {
                            let message = format!(
                                "fake provider: scripted {} {}",
                                s.status,
                                status.canonical_reason().unwrap_or("status")
                            );
                            json_response(status, &wire.error_body(s.status, &message))
                        }
                    };
                    for (name, value) in s.headers {
                        if let (Ok(n), Ok(v)) = (
                            HeaderName::from_bytes(name.as_bytes()),
                            HeaderValue::from_str(&value),
                        ) {
                            response.headers_mut().append(n, v);
                        }
                    }
                    return response;
                }
                Behaviour::Malformed(body) => {
                    return (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                        .into_response();
                }
                Behaviour::Reply(reply) => {
                    return json_response(
                        StatusCode::OK,
                        &wire.render(&self.rendered(&reply, model, raw_body)),
                    );
                }
            }
        }
    }

    fn rendered<'a>(&self, reply: &'a Reply, model: &'a str, raw_body: &str) -> Rendered<'a> {
        let (input_tokens, output_tokens) = reply.usage.unwrap_or_else(|| {
            let out = reply.text.as_ref().map_or(0, String::len)
                + reply
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + 16)
                    .sum::<usize>();
            (estimate_tokens(raw_body.len()), estimate_tokens(out))
        });
        Rendered {
            reply,
            model,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            input_tokens,
            output_tokens,
        }
    }
}

fn shutting_down(wire: Wire) -> Response {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &wire.error_body(503, "fake provider: shutting down"),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
