//! Process telemetry set up once at start: structured JSON logs on stderr (SPEC O5) and
//! OpenTelemetry tracing (O2) — spans always carry W3C trace context so it crosses the queue;
//! they are exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-specific
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, configured by the standard `OTEL_*` variables.
//!
//! Export never holds a process up: spans go to a batch processor on its own thread (a full
//! queue drops spans rather than block), each export has the exporter's timeout, and the flush
//! at exit waits at most [`FLUSH_AT_EXIT`] — a collector that is down or hangs costs spans, never
//! a stage or a shutdown. Logs and spans are filtered separately: `VERDICT_LOG` decides what is
//! printed, `VERDICT_TRACE` (default `info`) what is exported, so a quiet interactive command
//! still exports its spans.

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How long the spans still queued at exit may take to be sent.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Flushes spans on drop, within [`FLUSH_AT_EXIT`].
#[derive(Debug)]
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let provider = self.provider.clone();
        let (done, flushed) = std::sync::mpsc::channel();
        // The SDK's shutdown waits for the exporter; a collector that never answers must not
        // keep the process from ending.
        let spawned = std::thread::Builder::new()
            .name("otel-flush".into())
            .spawn(move || {
                let _ = provider.shutdown();
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = flushed.recv_timeout(FLUSH_AT_EXIT);
        }
    }
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// One JSON object per line: services (scheduler, worker).
    Json,
    /// Compact human lines: interactive commands (`verdict dev`).
    Human,
}

/// Whether spans are exported: an OTLP endpoint variable is set, and neither
/// `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns export off.
fn export_configured(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).filter(|s| !s.trim().is_empty());
    let endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT")
        .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .is_some();
    let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let none = set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    endpoint && !disabled && !none
}

/// A warning for an `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` this build does not speak: verdict
/// exports OTLP over HTTP with protobuf only, and says so rather than exit.
fn unsupported_protocol(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .iter()
    .find_map(|name| var(name).map(|v| (name, v)))
    .filter(|(_, v)| v.trim() != "http/protobuf")
    .map(|(name, v)| {
        format!(
            "{name}={v} is not supported: spans are exported as OTLP over HTTP with protobuf \
                 (set it to http/protobuf, and point the endpoint at the collector's HTTP port, \
                 usually 4318)"
        )
    })
}

/// Installs the global subscriber. `VERDICT_LOG` is the log filter (e.g. `verdict_worker=debug`);
/// without it, `info` for services and `error` for interactive commands, whose progress is
/// already printed as milestones. `VERDICT_TRACE` filters exported spans (default `info`).
/// `service` names the process in traces unless `OTEL_SERVICE_NAME` does.
pub(crate) fn init(service: &str, format: LogFormat) -> anyhow::Result<Telemetry> {
    let default = match format {
        LogFormat::Json => "info",
        LogFormat::Human => "error",
    };
    let logs = EnvFilter::try_from_env("VERDICT_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let spans = EnvFilter::try_from_env("VERDICT_TRACE").unwrap_or_else(|_| EnvFilter::new("info"));
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| service.to_owned());
    let mut builder = SdkTracerProvider::builder()
        .with_id_generator(verdict_backends::trace::TaskSpanIds::default())
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        );
    let env = |name: &str| std::env::var(name).ok();
    let export = export_configured(env);
    if export {
        // Endpoint, headers, timeout and compression come from the standard OTEL_* variables.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .context("configure the OTLP exporter (OTEL_EXPORTER_OTLP_* variables)")?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    // Task spans are recorded through the global provider, by code that has no handle on this one.
    opentelemetry::global::set_tracer_provider(provider.clone());
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("verdict"))
        .with_filter(spans);
    let fmt = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(logs)
            .boxed(),
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .compact()
            .with_writer(std::io::stderr)
            .with_filter(logs)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .try_init()
        .context("install the tracing subscriber")?;
    if export && let Some(warning) = unsupported_protocol(env) {
        tracing::warn!("{warning}");
    }
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn spans_are_exported_when_an_endpoint_is_set_and_export_is_not_turned_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(!export_configured(vars(&[])));
        assert!(!export_configured(vars(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            " "
        )])));
        assert!(export_configured(vars(&[endpoint])));
        assert!(export_configured(vars(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )])));
        assert!(!export_configured(vars(&[
            endpoint,
            ("OTEL_SDK_DISABLED", "TRUE")
        ])));
        assert!(export_configured(vars(&[
            endpoint,
            ("OTEL_SDK_DISABLED", "false")
        ])));
        assert!(!export_configured(vars(&[
            endpoint,
            ("OTEL_TRACES_EXPORTER", "none")
        ])));
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_is_named_with_the_fix() {
        assert_eq!(unsupported_protocol(vars(&[])), None);
        let http = ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
        assert_eq!(unsupported_protocol(vars(&[http])), None);
        let warning =
            unsupported_protocol(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).unwrap();
        assert!(
            warning.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
            "{warning}"
        );
        assert!(
            warning.contains("http/protobuf") && warning.contains("4318"),
            "{warning}"
        );
        // The traces-specific variable wins.
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json");
        let warning = unsupported_protocol(vars(&[traces, http])).unwrap();
        assert!(
            warning.starts_with("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"),
            "{warning}"
        );
    }
}
