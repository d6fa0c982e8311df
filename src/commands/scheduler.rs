//! `verdict scheduler`: the task owner process — the HTTP API, the results loop and the sweeper,
//! on RabbitMQ and Redis.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use verdict_scheduler::api::{self, ApiAuth};
use verdict_scheduler::engine::{Scheduler, SchedulerDeps};
use verdict_scheduler::metrics::SchedulerMetrics;
use verdict_scheduler::runtime;
use verdict_worker::clock::SystemClock;

use crate::process;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file (TOML); without it, the embedded defaults plus VERDICT_*
    /// overrides.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _telemetry =
        crate::telemetry::init("verdict-scheduler", crate::telemetry::LogFormat::Json)?;
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    let config = process::load_config(args.config.as_deref())?;
    let token = config
        .api
        .require_token()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .cloned();
    let auth = match token {
        Some(token) => ApiAuth::new([token]).context("API token")?,
        None => {
            tracing::warn!(
                "api.allow_unauthenticated is set: the API accepts requests without a token"
            );
            ApiAuth::disabled()
        }
    };
    let shutdown = process::shutdown_on_signal();

    let (broker, store) =
        process::connect_backends(&config, &runtime::process_id("scheduler")).await?;
    let repositories = process::open_repositories(&config, "scheduler").await?;
    let registry = prometheus::Registry::new();
    let scheduler = Scheduler::new(
        SchedulerDeps {
            broker: broker.clone(),
            documents: store.clone(),
            events: store.clone(),
            cancels: store.clone(),
            inputs: store.clone(),
            repositories,
            clock: Arc::new(SystemClock),
            metrics: SchedulerMetrics::register(&registry)?,
        },
        runtime::scheduler_settings(&config),
    );

    let listener = tokio::net::TcpListener::bind(config.api.listen)
        .await
        .with_context(|| format!("listen on {} (api.listen)", config.api.listen))?;
    let addr = listener.local_addr()?;
    let app = api::router(Arc::new(scheduler.clone()), auth, registry);
    tracing::info!(%addr, "SchedulerListening");
    // Scripts and tests read the bound address (api.listen may use port 0).
    crate::commands::print(&format!("verdict scheduler listening on http://{addr}\n"))?;

    let api_shutdown = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { api_shutdown.cancelled().await })
            .await
    });
    scheduler
        .run(shutdown.clone())
        .await
        .context("consume stage results")?;
    shutdown.cancel();
    let _ = server.await;
    broker.close().await;
    Ok(ExitCode::SUCCESS)
}
