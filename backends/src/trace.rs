//! W3C trace context across the queue (SPEC O2): the publisher injects `traceparent`/`tracestate`
//! from the current span into message headers; the consumer makes them the parent of its span,
//! so one trace runs task → stage → AI call across processes.
//!
//! Without an OpenTelemetry layer installed, spans carry no trace context and nothing is
//! injected: propagation costs nothing when tracing export is off.
//!
//! A task outlives any one span of any one process (it is admitted by one scheduler, run by
//! workers, finished by whichever scheduler applies its last result), so its root span is made in
//! two halves: [`open_task`] chooses the span's ids at admission and keeps them on the task
//! record, every later span of the task is their child, and [`close_task`] records the span with
//! those ids — from admission to the end — once the task ends ([`TaskSpanIds`] is the id
//! generator that lets the SDK take chosen ids).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::SystemTime;
pub use verdict_proto::wire::trace_id;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanId, TraceId, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
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

/// Copies a kept context (`traceparent`, `tracestate`) into a message's headers.
pub fn copy(context: &BTreeMap<String, String>, headers: &mut BTreeMap<String, String>) {
    for key in ["traceparent", "tracestate"] {
        if let Some(value) = context.get(key) {
            headers.insert(key.to_owned(), value.clone());
        }
    }
}

/// Makes the context carried by `headers` the parent of `span` (no-op without one).
pub fn set_parent(span: &tracing::Span, headers: &BTreeMap<String, String>) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

thread_local! {
    /// The ids [`close_task`] asks the SDK to give the span it is building on this thread.
    static CHOSEN: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// The process's span id generator: random ids, except for the task span [`close_task`] records,
/// whose ids were chosen at admission. Install it on the tracer provider
/// (`SdkTracerProvider::builder().with_id_generator(TaskSpanIds::default())`).
#[derive(Debug, Default)]
pub struct TaskSpanIds {
    random: RandomIdGenerator,
}

impl IdGenerator for TaskSpanIds {
    fn new_trace_id(&self) -> TraceId {
        match CHOSEN.with(Cell::get) {
            Some((trace, _)) => trace,
            None => self.random.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match CHOSEN.with(Cell::get) {
            Some((_, span)) => span,
            None => self.random.new_span_id(),
        }
    }
}

/// The context of a new task's root span, chosen now and recorded by [`close_task`] when the task
/// ends: keep it on the task record; spans of the task anywhere are its children ([`set_parent`],
/// [`copy`]). Sampled, so the whole task is traced.
pub fn open_task() -> BTreeMap<String, String> {
    let ids = RandomIdGenerator::default();
    let traceparent = format!("00-{}-{}-01", ids.new_trace_id(), ids.new_span_id());
    BTreeMap::from([("traceparent".to_owned(), traceparent)])
}

/// Records the task's root span — named `name`, from `started` to now, with `attributes` — under
/// the ids [`open_task`] chose, through the global tracer provider (a no-op when none is
/// installed, or when `context` names no ids).
pub fn close_task(
    context: &BTreeMap<String, String>,
    name: &'static str,
    started: SystemTime,
    attributes: &[(&'static str, &str)],
) {
    let Some(ids) = chosen_ids(context) else {
        return;
    };
    let tracer = opentelemetry::global::tracer("verdict");
    let builder = tracer
        .span_builder(name)
        .with_start_time(started)
        .with_attributes(
            attributes
                .iter()
                .map(|(key, value)| KeyValue::new(*key, (*value).to_owned())),
        );
    CHOSEN.with(|c| c.set(Some(ids)));
    // The root has no parent: an empty context, whatever span is current on this thread.
    let mut span = tracer.build_with_context(builder, &Context::new());
    CHOSEN.with(|c| c.set(None));
    opentelemetry::trace::Span::end(&mut span);
}

/// The trace and span ids of a kept context's `traceparent`.
fn chosen_ids(context: &BTreeMap<String, String>) -> Option<(TraceId, SpanId)> {
    let mut fields = context.get("traceparent")?.split('-');
    let (_version, trace, span) = (fields.next()?, fields.next()?, fields.next()?);
    let trace = TraceId::from_hex(trace)
        .ok()
        .filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span)
        .ok()
        .filter(|s| *s != SpanId::INVALID)?;
    Some((trace, span))
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
            let mut kept = BTreeMap::new();
            inject_span(&publisher, &mut kept);
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

    /// Collects what the simple processor exports, to look at span structure.
    #[derive(Debug, Clone, Default)]
    struct Collected(std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

    impl opentelemetry_sdk::trace::SpanExporter for Collected {
        async fn export(
            &self,
            batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    #[test]
    fn a_task_span_opened_at_admission_is_recorded_at_its_end_as_the_root_of_its_children() {
        let collected = Collected::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_id_generator(TaskSpanIds::default())
            .with_simple_exporter(collected.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let admitted = SystemTime::now() - std::time::Duration::from_secs(30);
        let kept = open_task();
        tracing::subscriber::with_default(subscriber, || {
            let stage = tracing::info_span!("stage");
            set_parent(&stage, &kept);
            drop(stage);
            // Closed while an unrelated span is current: the task span is still a root.
            let unrelated = tracing::info_span!("unrelated");
            let _g = unrelated.enter();
            close_task(&kept, "task", admitted, &[("state", "done")]);
        });
        // A span built with no chosen ids afterwards gets fresh random ones.
        let after = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(after, || drop(tracing::info_span!("after")));

        let spans = collected.0.lock().unwrap().clone();
        let named = |n: &str| spans.iter().find(|s| s.name == n).cloned().unwrap();
        let (task, stage, after) = (named("task"), named("stage"), named("after"));
        let (trace, span) = chosen_ids(&kept).unwrap();
        assert_eq!(task.span_context.trace_id(), trace);
        assert_eq!(task.span_context.span_id(), span);
        assert_eq!(
            task.parent_span_id,
            SpanId::INVALID,
            "the task span is the root"
        );
        assert_eq!(
            task.start_time, admitted,
            "it spans the task from admission"
        );
        assert!(task.attributes.contains(&KeyValue::new("state", "done")));
        assert_eq!(stage.span_context.trace_id(), trace);
        assert_eq!(stage.parent_span_id, span, "the stage is the task's child");
        assert_ne!(after.span_context.span_id(), span);
        assert_ne!(after.span_context.trace_id(), trace);
        assert_eq!(trace_id(&kept), Some(trace.to_string()));
    }

    #[test]
    fn closing_a_context_without_ids_records_nothing() {
        assert_eq!(chosen_ids(&BTreeMap::new()), None);
        let zero = BTreeMap::from([(
            "traceparent".to_owned(),
            format!("00-{}-{}-01", "0".repeat(32), "1".repeat(16)),
        )]);
        assert_eq!(chosen_ids(&zero), None);
        close_task(&zero, "task", SystemTime::now(), &[]);
    }
}
