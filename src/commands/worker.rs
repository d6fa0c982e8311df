//! `verdict worker`: a stateless stage executor process — consumes stage requests from RabbitMQ,
//! runs them, records results in Redis, publishes them back; `/metrics`, `/healthz`, `/readyz`
//! on `worker.metrics_listen`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use verdict::runtime::{self, Assembly, Backends, Role};

use crate::process::{self, Ready};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (TOML); without it, the embedded defaults plus VERDICT_*
    /// overrides.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Interactive stages in flight at once (overrides worker.concurrency).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    concurrency: Option<u16>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _telemetry = crate::telemetry::init("verdict-worker", crate::telemetry::LogFormat::Json)?;
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    rt.block_on(work(args))
}

async fn work(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = process::load_config(args.config.as_deref())?;
    if let Some(c) = args.concurrency {
        config.worker.concurrency = usize::from(c);
    }
    let worker_id = runtime::process_id(Role::Worker);
    let shutdown = process::shutdown_on_signal();
    let providers = runtime::provider_registry(&config).context("configure providers")?;
    let assembly = Assembly::new(
        &config,
        Backends::connect(&config, &worker_id, Role::Worker).await?,
    );
    let consumer = assembly.worker(worker_id.clone(), providers)?;
    let broker = assembly.backends().broker.clone();

    let ready = Ready::default();
    let probe = {
        let (ready, broker) = (ready.clone(), broker.clone());
        Arc::new(move || {
            let h = broker.health();
            ready.get() && h.connected && h.consumers_alive
        })
    };
    let health_shutdown = tokio_util::sync::CancellationToken::new();
    let addr = process::serve_health(
        config.worker.metrics_listen,
        assembly.registry().clone(),
        probe,
        health_shutdown.clone(),
    )
    .await?;
    tracing::info!(%addr, worker = %worker_id, "WorkerStarted");
    crate::commands::print(&format!(
        "verdict worker {worker_id} metrics on http://{addr}\n"
    ))?;

    ready.set(true);
    let stopping = {
        let (ready, shutdown) = (ready.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.cancelled().await;
            // Q4: readiness fails first, so no new traffic is routed here while we drain.
            ready.set(false);
        })
    };
    consumer
        .run(shutdown)
        .await
        .context("consume stage requests")?;
    let unsettled = broker.shutdown(config.worker.shutdown_grace).await;
    if unsettled > 0 {
        tracing::warn!(
            unsettled,
            "deliveries left unsettled at shutdown; the broker redelivers them"
        );
    }
    health_shutdown.cancel();
    let _ = stopping.await;
    Ok(ExitCode::SUCCESS)
}
