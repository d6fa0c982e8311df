//! W3C trace context across the queue (SPEC O2): the publisher injects `traceparent`/`tracestate`
//! from the current span into message headers; the consumer makes them the parent of its span,
//! so one trace runs task → stage → AI call across processes.
//!
//! Without an OpenTelemetry layer installed, spans carry no trace context and nothing is
//! injected: propagation costs nothing when tracing export is off.

use std::collections::BTreeMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut BTreeMap<String, String>);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct HeaderExtractor<'a>(&'a BTreeMap<String, String>);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes the current span's context into `headers` (`traceparent`, `tracestate`).
pub fn inject(headers: &mut BTreeMap<String, String>) {
    inject_span(&tracing::Span::current(), headers);
}

/// Writes `span`'s context into `headers` (`traceparent`, `tracestate`); nothing when tracing
/// export is off.
pub fn inject_span(span: &tracing::Span, headers: &mut BTreeMap<String, String>) {
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// `span`'s context as headers, to be kept (a task record keeps its task span's) and made the
/// parent of spans later, elsewhere ([`set_parent`]), or carried by messages ([`copy`]).
pub fn context_of(span: &tracing::Span) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    inject_span(span, &mut headers);
    headers
}

/// Copies a kept context (`traceparent`, `tracestate`) into a message's headers.
pub fn copy(context: &BTreeMap<String, String>, headers: &mut BTreeMap<String, String>) {
    for key in ["traceparent", "tracestate"] {
        if let Some(value) = context.get(key) {
            headers.insert(key.to_owned(), value.clone());
        }
    }
}

/// The trace id a kept context names (the second field of `traceparent`), for operators to find
/// a task's trace.
pub fn trace_id(context: &BTreeMap<String, String>) -> Option<String> {
    let traceparent = context.get("traceparent")?;
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id != "0".repeat(32))
        .then(|| id.to_owned())
}

/// Makes the context carried by `headers` the parent of `span` (no-op without one).
pub fn set_parent(span: &tracing::Span, headers: &BTreeMap<String, String>) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn context_round_trips_through_headers() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let tracer = provider.tracer("test");
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::with_default(subscriber, || {
            let publisher = tracing::info_span!("publish");
            let _g = publisher.enter();
            let mut headers = BTreeMap::new();
            inject(&mut headers);
            let traceparent = headers.get("traceparent").cloned().unwrap();
            assert!(traceparent.starts_with("00-"), "{traceparent}");

            let consumer = tracing::info_span!("process");
            set_parent(&consumer, &headers);
            let publisher_trace = publisher.context().span().span_context().trace_id();
            let consumer_trace = consumer.context().span().span_context().trace_id();
            assert_eq!(
                publisher_trace, consumer_trace,
                "one trace across the queue"
            );

            // A context kept (on a task record) parents spans later and travels in messages.
            let kept = context_of(&publisher);
            assert_eq!(trace_id(&kept), Some(publisher_trace.to_string()));
            let mut message = BTreeMap::new();
            copy(&kept, &mut message);
            let later = tracing::info_span!("later");
            set_parent(&later, &message);
            assert_eq!(
                later.context().span().span_context().trace_id(),
                publisher_trace
            );
        });
        assert_eq!(trace_id(&BTreeMap::new()), None, "no export, no trace id");
    }
}
