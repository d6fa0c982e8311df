//! Process telemetry set up once at start: structured JSON logs on stderr (SPEC O5) and
//! OpenTelemetry tracing (O2) — spans always carry W3C trace context so it crosses the queue;
//! they are exported over OTLP/HTTP only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Flushes spans on drop (the batch exporter sends what it holds).
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line: services (scheduler, worker).
    Json,
    /// Compact human lines: interactive commands (`verdict dev`).
    Human,
}

/// Installs the global subscriber. `VERDICT_LOG` is the filter (e.g. `verdict_worker=debug`);
/// without it, `info` for services and `error` for interactive commands, whose progress is
/// already printed as milestones.
pub fn init(service: &str, format: LogFormat) -> anyhow::Result<Telemetry> {
    let default = match format {
        LogFormat::Json => "info",
        LogFormat::Human => "error",
    };
    let filter = EnvFilter::try_from_env("VERDICT_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let mut builder = SdkTracerProvider::builder().with_resource(
        Resource::builder()
            .with_service_name(service.to_owned())
            .build(),
    );
    if let Ok(endpoint) = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .with_context(|| format!("configure the OTLP exporter for {endpoint}"))?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("verdict"));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let installed = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Human => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .compact()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    installed.context("install the tracing subscriber")?;
    Ok(Telemetry { provider })
}
