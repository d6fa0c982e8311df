//! What every long-running verdict process shares: configuration loading with warnings logged,
//! the shutdown signal (SIGTERM/SIGINT → a cancellation token, SPEC Q4), and the small HTTP
//! surface of workers (`/metrics`, `/healthz`, `/readyz`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use verdict::config::Config;
use verdict_scheduler::api::webhooks::GitHubWebhooks;

/// Loads and validates the configuration (file or embedded default, plus `VERDICT_*`
/// overrides), logging its warnings.
pub(crate) fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let config = Config::from_process(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in &config.warnings {
        tracing::warn!(key = %w.key, "{}", w.message);
    }
    Ok(config)
}

/// A token cancelled on the first SIGTERM or SIGINT.
pub(crate) fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        tracing::info!("shutdown requested");
        t.cancel();
    });
    token
}

/// Serves `/metrics`, `/healthz` and `/readyz` (ready while `ready` holds) on `addr` until
/// `shutdown`; returns the bound address.
pub(crate) async fn serve_health(
    addr: SocketAddr,
    registry: prometheus::Registry,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    shutdown: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move { verdict_worker::metrics::render(&registry) }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready() {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr} (worker.metrics_listen)"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Ok(bound)
}

/// A readiness flag that turns false on shutdown (Q4: readiness fails first).
#[derive(Debug, Clone, Default)]
pub(crate) struct Ready(Arc<AtomicBool>);

impl Ready {
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// GitHub webhook intake as `[github]` configures it: served only with a webhook secret.
pub(crate) fn webhooks(config: &Config) -> Option<GitHubWebhooks> {
    let github = config.github.as_ref()?;
    let Some(secret) = github.webhook_secret.clone() else {
        tracing::info!(
            "github.webhook_secret_env and webhook_secret_file are unset: POST /v1/webhooks/github is not served"
        );
        return None;
    };
    Some(GitHubWebhooks {
        secret,
        policy: github.policy.clone(),
    })
}
