//! The HTTP API's own metrics and request log (SPEC O1, O5), in one place so dashboards can be
//! checked against this file. Labels are bounded: the route *template* (`/v1/tasks/{id}`, never a
//! raw path or a task id), a closed set of methods, and the status code.
//!
//! Durations are measured to the response head: for the SSE stream that is the time to start
//! streaming, not the life of the stream.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// The route label of requests no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Metrics of one router, on a registry of their own so that building several routers over
/// one process registry (tests, `verdict dev`) never collides.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    registry: Registry,
    /// `verdict_http_requests_total{route, method, status}`
    pub requests: IntCounterVec,
    /// `verdict_http_request_duration_seconds{route, method}`
    pub duration: HistogramVec,
}

impl HttpMetrics {
    pub fn new() -> Result<HttpMetrics, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "verdict_http_requests_total",
                "HTTP requests served by the API, by route template, method and status.",
            ),
            &["route", "method", "status"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "verdict_http_request_duration_seconds",
                "Time from receiving an API request to sending its response head, by route template and method.",
            ),
            &["route", "method"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(HttpMetrics {
            registry,
            requests,
            duration,
        })
    }

    /// The Prometheus text of `process` followed by these metrics.
    pub fn render(&self, process: &Registry) -> Result<String, prometheus::Error> {
        let mut families = process.gather();
        families.extend(self.registry.gather());
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// A method as a bounded label: anything outside the standard set is `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware: counts, times and logs every request by route template. The query string and
/// headers (the bearer token) are never logged.
pub(crate) async fn observe(
    State(metrics): State<Option<HttpMetrics>>,
    req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED_ROUTE.to_owned(), |p| p.as_str().to_owned());
    let method = method_label(req.method());
    let response = next.run(req).await;
    let elapsed = start.elapsed();
    let status = response.status();
    if let Some(m) = &metrics {
        m.requests
            .with_label_values(&[route.as_str(), method, status.as_str()])
            .inc();
        m.duration
            .with_label_values(&[route.as_str(), method])
            .observe(elapsed.as_secs_f64());
    }
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    // Probes and scrapes arrive every few seconds; at info level they would drown the log.
    if matches!(route.as_str(), "/healthz" | "/readyz" | "/metrics") && status.is_success() {
        tracing::debug!(
            method,
            route = route.as_str(),
            status = status.as_u16(),
            latency_ms,
            "HttpRequestServed"
        );
    } else {
        tracing::info!(
            method,
            route = route.as_str(),
            status = status.as_u16(),
            latency_ms,
            "HttpRequestServed"
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_build_and_render_after_the_process_registry() {
        let m = HttpMetrics::new().unwrap();
        m.requests
            .with_label_values(&["/v1/tasks/{id}", "GET", "200"])
            .inc();
        let process = Registry::new();
        let text = m.render(&process).unwrap();
        assert!(text.contains(
            r#"verdict_http_requests_total{method="GET",route="/v1/tasks/{id}",status="200"} 1"#
        ));
    }

    #[test]
    fn unusual_methods_share_one_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
    }
}
