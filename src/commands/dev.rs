//! `verdict dev`: the scheduler and N workers in one process on the in-memory broker and stores,
//! for a newcomer's first review (SPEC I1). `verdict dev review …` runs one review to its end and
//! prints the result; plain `verdict dev` serves the API until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use anyhow::Context as _;
use verdict::dev::DevPool;
use verdict::runtime::{self, Role};
use verdict_api::submission::{ReviewSubmission, SubmissionOptions};
use verdict_backends::code_host::CodeHost;
use verdict_backends::repo::GitCredentials;
use verdict_client::milestone;
use verdict_scheduler::api::{self, ApiAuth};
use verdict_scheduler::service::TaskService;

use crate::commands::ChangeArgs;
use crate::process;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The configuration file (TOML); without it, the embedded defaults: the local model at
    /// http://127.0.0.1:8091 (start it with `ops/bin/llm serve`).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Worker consumers to run.
    #[arg(long, default_value_t = 2, global = true)]
    workers: usize,
    /// Where the API listens when serving.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    #[command(subcommand)]
    command: Option<DevCommand>,
}

#[derive(Debug, clap::Subcommand)]
enum DevCommand {
    /// Run one review to its end and print the result.
    Review(ReviewArgs),
}

#[derive(Debug, clap::Args)]
struct ReviewArgs {
    #[command(flatten)]
    change: ChangeArgs,
    /// `multi` (triage, summary, reviewers, validator) or `single` (one agentic review).
    #[arg(long, default_value = "multi", value_parser = ["multi", "single"])]
    pipeline: String,
    /// The change's title.
    #[arg(long)]
    title: Option<String>,
    /// Print the whole task document (as `GET /v1/tasks/{id}` returns it) instead of a summary.
    #[arg(long)]
    json: bool,
    /// Give up waiting after this many seconds (the task's own deadline still applies).
    #[arg(long, default_value_t = 1800)]
    wait_seconds: u64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _telemetry = crate::telemetry::init("verdict-dev", crate::telemetry::LogFormat::Human)?;
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    rt.block_on(dev(args))
}

async fn dev(args: Args) -> anyhow::Result<ExitCode> {
    let config = process::load_config(args.config.as_deref())?;
    let providers = runtime::provider_registry(&config).context("configure providers")?;
    let github = runtime::open_github(&config)?;
    let credentials = github.clone().map(|g| g as Arc<dyn GitCredentials>);
    let repositories = runtime::open_repositories(&config, Role::Dev, credentials).await?;
    let code_host = github.map(|g| g as Arc<dyn CodeHost>);
    let pool = DevPool::start(&config, providers, repositories, code_host, args.workers)?;
    let code = match args.command {
        Some(DevCommand::Review(review)) => run_review(&pool, review).await,
        None => serve(&pool, &config, args.listen).await,
    };
    pool.stop().await;
    code
}

async fn run_review(pool: &DevPool, args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let publish = args.change.publish;
    let submission = ReviewSubmission {
        pipeline: Some(args.pipeline),
        title: args.title,
        body: None,
        options: SubmissionOptions::default(),
        // A local path is given to the pool as an absolute one.
        ..args
            .change
            .into_submission(|repo| match std::fs::canonicalize(&repo) {
                Ok(path) => path.display().to_string(),
                Err(_) => repo,
            })
    };
    let submitted = pool
        .scheduler
        .submit_review(submission)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("verdict dev: task {}", submitted.id);

    // Milestones as they happen, on standard error.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.wait_seconds);
    let mut after: Option<String> = None;
    let mut closed = false;
    loop {
        let events = pool
            .scheduler
            .events(&submitted.id, after.as_deref(), Duration::from_secs(1))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for e in &events {
            eprintln!("{}", milestone::line(&e.event));
            closed |= e.event.kind == verdict_proto::wire::EventType::TaskFinished;
        }
        if let Some(last) = events.last() {
            after = Some(last.id.clone());
        }
        if closed || tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    // A publication to GitHub runs after the end (a few requests; probes when GitHub refuses).
    let settle = Duration::from_secs(if publish { 120 } else { 5 });
    let doc = pool
        .wait(&submitted.id, settle)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        crate::commands::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        crate::commands::print(&milestone::summary(&doc))?;
    }
    Ok(crate::commands::exit_for_state(doc.state))
}

async fn serve(
    pool: &DevPool,
    config: &verdict::config::Config,
    listen: std::net::SocketAddr,
) -> anyhow::Result<ExitCode> {
    let shutdown = process::shutdown_on_signal();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen on {listen} (--listen)"))?;
    let addr = listener.local_addr()?;
    let app = api::router_with_webhooks(
        pool.service(),
        ApiAuth::disabled(),
        pool.registry.clone(),
        process::webhooks(config),
    );
    crate::commands::print(&format!(
        "verdict dev: API on http://{addr} (no token; loopback only). Ctrl-C to stop.\n"
    ))?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("serve the API")?;
    Ok(ExitCode::SUCCESS)
}
