//! `[github]`: where pull requests and issues come from and reviews go (docs/github.md) —
//! the API and web URLs (GitHub or GitHub Enterprise), the credentials (a GitHub App or a
//! personal token), the webhook secret, what webhook deliveries start and what publication posts.
//! Checked here like every other table: each error names the key and the fix.

use std::fmt;
use std::time::Duration;

use verdict_policy::webhook::{WebhookFilters, WebhookPolicy};
use verdict_worker::provider::Secret;

use super::ConfigError;
use super::defaults as d;
use super::raw::RawGitHub;
use super::validate::{Ctx, SecretForm, quote, secret, url_parts};

/// `[github]`, validated. `Debug` never shows a secret.
#[derive(Debug, Clone)]
pub struct GitHubConfig {
    /// The REST API root: `https://api.github.com`, or `https://HOST/api/v3` on GitHub Enterprise.
    pub api_url: String,
    /// The web root pull-request URLs are on: `https://github.com`, or the Enterprise host.
    pub web_url: String,
    /// `web_url`'s host (and port), lowercase: what a pull-request URL must name.
    pub web_host: String,
    pub credentials: GitHubCredentials,
    /// Verifies webhook deliveries; without it `POST /v1/webhooks/github` is not served.
    pub webhook_secret: Option<Secret>,
    /// Per API request.
    pub timeout: Duration,
    /// What webhook deliveries start, and whether their results are published.
    pub policy: WebhookPolicy,
    /// `false`: a model's approve is posted as a comment, never as an approval.
    pub approve: bool,
    /// Post a neutral comment for a degraded review (SPEC G3); otherwise only the status says it.
    pub degraded_comment: bool,
    /// The commit status's context.
    pub status_context: String,
    /// A status's link, `{id}` replaced by the task id.
    pub details_url: Option<String>,
    /// Apply an issue analysis's suggested labels that the repository defines.
    pub apply_labels: bool,
    /// The lowest confidence of a suggested label that is applied.
    pub label_min_confidence: f64,
}

/// How verdict authenticates to GitHub.
#[derive(Clone)]
pub enum GitHubCredentials {
    /// A personal access token (classic or fine-grained).
    Token(Secret),
    /// A GitHub App: its id and private key (PEM); installation tokens are made from them.
    App { app_id: u64, private_key: Secret },
}

impl fmt::Debug for GitHubCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitHubCredentials::Token(_) => f.write_str("Token([REDACTED])"),
            GitHubCredentials::App { app_id, .. } => f
                .debug_struct("App")
                .field("app_id", app_id)
                .field("private_key", &"[REDACTED]")
                .finish(),
        }
    }
}

/// `[github]` when the table is present, validated.
pub(super) fn github(raw: RawGitHub, ctx: &Ctx<'_>) -> Result<Option<GitHubConfig>, ConfigError> {
    if raw == RawGitHub::default() {
        return Ok(None);
    }
    let credentials = credentials(&raw, ctx)?;
    let api_url = root_url(
        ctx,
        "github.api_url",
        raw.api_url.unwrap_or_else(|| d::GITHUB_API_URL.to_owned()),
    )?;
    let web_url = match raw.web_url {
        Some(url) => root_url(ctx, "github.web_url", url)?,
        None => default_web_url(&api_url),
    };
    let web_host = url_parts(&web_url)
        .map(|p| match p.port {
            Some(port) => format!("{}:{port}", p.host),
            None => p.host.to_owned(),
        })
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (webhook_secret, _) = secret(
        ctx,
        ("github.webhook_secret_env", raw.webhook_secret_env.clone()),
        (
            "github.webhook_secret_file",
            raw.webhook_secret_file.clone(),
        ),
        None,
        SecretForm::FirstLine,
    )?;
    if webhook_secret.is_none()
        && let Some(var) = &raw.webhook_secret_env
    {
        return Err(ctx.err(
            "github.webhook_secret_env",
            Some(quote(var)),
            "names a variable that is not set or empty; export the webhook's secret in it (the one entered on GitHub)",
        ));
    }
    let pipeline = match ctx.text("github.pipeline", raw.pipeline)? {
        Some(p) if p == "multi" || p == "single" => Some(p),
        Some(other) => {
            return Err(ctx.err(
                "github.pipeline",
                Some(quote(&other)),
                "is not a review pipeline; use multi (staged review) or single (one agentic review)",
            ));
        }
        None => None,
    };
    let label_min_confidence = raw
        .label_min_confidence
        .unwrap_or(d::GITHUB_LABEL_MIN_CONFIDENCE);
    if !(0.0..=1.0).contains(&label_min_confidence) {
        return Err(ctx.err(
            "github.label_min_confidence",
            Some(label_min_confidence.to_string()),
            "is out of range 0–1; set it between 0 and 1",
        ));
    }
    let status_context = ctx
        .text("github.status_context", raw.status_context)?
        .unwrap_or_else(|| d::GITHUB_STATUS_CONTEXT.to_owned());
    let details_url = match ctx.text("github.details_url", raw.details_url)? {
        Some(url) if !(url.starts_with("https://") || url.starts_with("http://")) => {
            return Err(ctx.err(
                "github.details_url",
                Some(quote(&url)),
                "is not an http(s) URL; write e.g. https://verdict.example/v1/tasks/{id}",
            ));
        }
        other => other,
    };
    let filters = WebhookFilters {
        review_drafts: raw.review_drafts.unwrap_or(false),
        ignore_bots: raw.ignore_bots.unwrap_or(true),
        ignore_authors: ctx.names(
            "github.ignore_authors",
            raw.ignore_authors.unwrap_or_default(),
        )?,
        ignore_titles: ctx.names(
            "github.ignore_titles",
            raw.ignore_titles.unwrap_or_else(|| {
                d::GITHUB_IGNORE_TITLES
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect()
            }),
        )?,
        ignore_labels: ctx.names(
            "github.ignore_labels",
            raw.ignore_labels.unwrap_or_default(),
        )?,
    };
    Ok(Some(GitHubConfig {
        api_url,
        web_url,
        web_host,
        credentials,
        webhook_secret,
        timeout: ctx.seconds(
            "github.timeout_seconds",
            raw.timeout_seconds,
            d::GITHUB_TIMEOUT_SECONDS,
            1,
        )?,
        policy: WebhookPolicy {
            filters,
            pipeline,
            publish: raw.publish.unwrap_or(true),
            analyse_issues: raw.analyse_issues.unwrap_or(true),
        },
        approve: raw.approve.unwrap_or(true),
        degraded_comment: raw.degraded_comment.unwrap_or(false),
        status_context,
        details_url,
        apply_labels: raw.apply_labels.unwrap_or(false),
        label_min_confidence,
    }))
}

/// Exactly one way to authenticate: a personal token, or an App.
fn credentials(raw: &RawGitHub, ctx: &Ctx<'_>) -> Result<GitHubCredentials, ConfigError> {
    let (token, token_source) = secret(
        ctx,
        ("github.token_env", raw.token_env.clone()),
        ("github.token_file", raw.token_file.clone()),
        None,
        SecretForm::FirstLine,
    )?;
    let (key, key_source) = secret(
        ctx,
        (
            "github.app_private_key_env",
            raw.app_private_key_env.clone(),
        ),
        (
            "github.app_private_key_file",
            raw.app_private_key_file.clone(),
        ),
        None,
        SecretForm::Whole,
    )?;
    let app_id: Option<u64> = raw
        .app_id
        .map(|id| ctx.num("github.app_id", Some(id), id, 1, None))
        .transpose()?;
    match (token_source.is_some(), app_id, key_source.is_some()) {
        (true, None, false) => token.map(GitHubCredentials::Token).ok_or_else(|| {
            ctx.err(
                "github.token_env",
                raw.token_env.as_deref().map(quote),
                "names a variable that is not set or empty; export the token in it",
            )
        }),
        (false, Some(app_id), true) => key
            .map(|private_key| GitHubCredentials::App {
                app_id,
                private_key,
            })
            .ok_or_else(|| {
                ctx.err(
                    "github.app_private_key_env",
                    raw.app_private_key_env.as_deref().map(quote),
                    "names a variable that is not set or empty; put the App's private key (PEM) in it, or use app_private_key_file",
                )
            }),
        (false, Some(_), false) => Err(ctx.err(
            "github.app_id",
            raw.app_id.map(|id| id.to_string()),
            "needs the App's private key too; set github.app_private_key_file (or app_private_key_env)",
        )),
        (false, None, true) => Err(ctx.err(
            "github.app_id",
            None,
            "is required with an App private key; set it to the App's id (its settings page shows it)",
        )),
        (true, _, _) => Err(ctx.err(
            "github.token_env",
            None,
            "cannot be combined with GitHub App credentials; keep either the token or app_id with its private key",
        )),
        (false, None, false) => Err(ctx.err(
            "github",
            None,
            "has no credentials; set token_env or token_file (a personal access token), or app_id with app_private_key_file (a GitHub App) — see docs/github.md",
        )),
    }
}

/// An http(s) URL without credentials, query or fragment, without its trailing `/`.
fn root_url(ctx: &Ctx<'_>, key: &str, url: String) -> Result<String, ConfigError> {
    let bad = |problem: &str| ctx.err(key, Some(quote(&url)), problem.to_owned());
    let Some(parts) = url_parts(&url) else {
        return Err(bad(
            "is not a URL; write one such as https://api.github.com",
        ));
    };
    if parts.scheme != "https" && parts.scheme != "http" {
        return Err(bad(
            "must be an https:// URL (http:// only for a local test server)",
        ));
    }
    if parts.userinfo {
        return Err(bad(
            "must not carry credentials; set github.token_env or the App's key instead",
        ));
    }
    if parts.host.is_empty() || url.contains(['?', '#']) || url.chars().any(char::is_whitespace) {
        return Err(bad(
            "must be a plain URL with a host and no query, e.g. https://ghe.example.com/api/v3",
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// github.com's web root for its API; an Enterprise server's API host otherwise.
fn default_web_url(api_url: &str) -> String {
    match url_parts(api_url) {
        Some(p) if p.host.eq_ignore_ascii_case("api.github.com") => "https://github.com".to_owned(),
        Some(p) => match p.port {
            Some(port) => format!("{}://{}:{port}", p.scheme, p.host),
            None => format!("{}://{}", p.scheme, p.host),
        },
        None => api_url.to_owned(),
    }
}
