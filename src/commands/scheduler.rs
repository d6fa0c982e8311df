//! `verdict scheduler`: the task owner process — the HTTP API, the results loop and the sweeper,
//! on RabbitMQ and Redis.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use verdict::runtime::{self, Assembly, Backends, Role};
use verdict_scheduler::api::{self, ApiAuth};

use crate::process;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (TOML); without it, the embedded defaults plus VERDICT_*
    /// overrides.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
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

    let name = runtime::process_id(Role::Scheduler);
    let assembly = Assembly::new(
        &config,
        Backends::connect(&config, &name, Role::Scheduler).await?,
    );
    let scheduler = assembly.scheduler()?;

    let listener = tokio::net::TcpListener::bind(config.api.listen)
        .await
        .with_context(|| format!("listen on {} (api.listen)", config.api.listen))?;
    let addr = listener.local_addr()?;
    let webhooks = process::webhooks(&config);
    let app = api::router_with_webhooks(
        Arc::new(scheduler.clone()),
        auth,
        assembly.registry().clone(),
        webhooks,
    );
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
    // Every result taken was settled before `run` returned.
    assembly
        .backends()
        .broker
        .shutdown(std::time::Duration::ZERO)
        .await;
    Ok(ExitCode::SUCCESS)
}
