//! The one way verdict talks to GitHub's REST API: octocrab's generic calls (routes, its
//! `GitHubError` for failures, its `Page` for `Link` pagination) on a reqwest client built the
//! way the provider clients are (ring as the rustls provider, connect timeout, `verdict/<version>`
//! user agent), with the credential of each request set per request (an App uses a different
//! token per installation), a timeout on every exchange, reads retried on transient failures and
//! writes never.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderValue, Method, Uri};
use octocrab::service::middleware::base_uri::BaseUriLayer;
use octocrab::service::middleware::reqwest_connector::ReqwestConnector;
use octocrab::{AuthState, FromResponse, Octocrab, OctocrabBuilder, Page};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error;
use crate::code_host::CodeHostError;
use crate::secret::Secret;

/// Items per page of a list (GitHub's maximum).
const PER_PAGE: u32 = 100;

/// Pages read of one list at most: a runaway `Link` chain must not loop forever.
const MAX_PAGES: usize = 100;

/// How many times a read is tried again after a transient failure.
const READ_RETRIES: usize = 2;

/// Redirects a read follows, on the API's own host only.
const MAX_REDIRECTS: usize = 3;

/// The connect timeout, unless the configured timeout is shorter.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the API client could not be built.
#[derive(Debug)]
pub(super) enum BuildError {
    /// The URL is not one octocrab's base URI accepts.
    BaseUri(String),
    /// reqwest refused the client configuration (no TLS roots, say).
    Http(String),
}

/// GitHub's REST API at one base URL.
#[derive(Debug)]
pub(super) struct Api {
    /// Follows same-host redirects (a renamed repository answers reads with a 301).
    reads: Octocrab,
    /// Follows no redirect: a write must not land somewhere else, or twice.
    writes: Octocrab,
    /// `host[:port]` of the base URL: credentials are only sent there.
    authority: String,
    timeout: Duration,
}

impl Api {
    /// A client for the API at `base_url` (already checked: http(s), a host, no query), each
    /// exchange bounded by `timeout`. Spawns octocrab's request buffer, so it must run inside the
    /// tokio runtime that will use it.
    pub(super) fn new(base_url: &reqwest::Url, timeout: Duration) -> Result<Api, BuildError> {
        let base = base_url.as_str().trim_end_matches('/');
        let uri: Uri = base
            .parse()
            .map_err(|e: http::uri::InvalidUri| BuildError::BaseUri(e.to_string()))?;
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_ascii_lowercase())
            .ok_or_else(|| BuildError::BaseUri("no host".to_owned()))?;
        let host = base_url.host_str().unwrap_or_default().to_owned();
        let same_host = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS || attempt.url().host_str() != Some(&host) {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        let reads = octocrab(uri.clone(), http_client(timeout, same_host)?);
        let writes = octocrab(
            uri,
            http_client(timeout, reqwest::redirect::Policy::none())?,
        );
        Ok(Api {
            reads,
            writes,
            authority,
            timeout,
        })
    }

    /// `GET route` (a path under the base URL), tried again on transient failures.
    pub(super) async fn get<R: DeserializeOwned + Send>(
        &self,
        route: &str,
        credential: &Secret,
        what: &str,
    ) -> Result<R, CodeHostError> {
        let uri = self.route(route, what)?;
        read_with_retries(|| {
            self.exchange::<(), R>(
                &self.reads,
                Method::GET,
                uri.clone(),
                None,
                credential,
                what,
            )
        })
        .await
    }

    /// Every item of the list at `route`, page by page along GitHub's `Link` headers.
    pub(super) async fn get_all<R: DeserializeOwned + Send>(
        &self,
        route: &str,
        credential: &Secret,
        what: &str,
    ) -> Result<Vec<R>, CodeHostError> {
        let separator = if route.contains('?') { '&' } else { '?' };
        let mut next = Some(self.route(&format!("{route}{separator}per_page={PER_PAGE}"), what)?);
        let mut items = Vec::new();
        let mut pages = 0;
        while let Some(uri) = next.take() {
            pages += 1;
            if pages > MAX_PAGES {
                return Err(CodeHostError::Protocol {
                    reason: format!("{what}: more than {MAX_PAGES} pages"),
                });
            }
            let mut page: Page<R> = read_with_retries(|| {
                self.exchange::<(), Page<R>>(
                    &self.reads,
                    Method::GET,
                    uri.clone(),
                    None,
                    credential,
                    what,
                )
            })
            .await?;
            items.append(&mut page.items);
            next = page.next.map(|uri| self.own(uri, what)).transpose()?;
        }
        Ok(items)
    }

    /// `POST route` with a JSON body; never retried (it may have landed).
    pub(super) async fn post<B: Serialize + Sync, R: DeserializeOwned + Send>(
        &self,
        route: &str,
        body: &B,
        credential: &Secret,
        what: &str,
    ) -> Result<R, CodeHostError> {
        let uri = self.route(route, what)?;
        self.exchange(
            &self.writes,
            Method::POST,
            uri,
            Some(body),
            credential,
            what,
        )
        .await
    }

    /// `DELETE route`; never retried.
    pub(super) async fn delete<R: DeserializeOwned + Send>(
        &self,
        route: &str,
        credential: &Secret,
        what: &str,
    ) -> Result<R, CodeHostError> {
        let uri = self.route(route, what)?;
        self.exchange::<(), R>(&self.writes, Method::DELETE, uri, None, credential, what)
            .await
    }

    /// A path under the base URL (octocrab's base-URI layer puts the base, path included, in
    /// front).
    fn route(&self, route: &str, what: &str) -> Result<Uri, CodeHostError> {
        route.parse().map_err(|e| CodeHostError::Protocol {
            reason: format!("{what}: the request path `{route}` is not a URI: {e}"),
        })
    }

    /// A URL GitHub gave (a next page), accepted only on the API's own host, so a credential
    /// never goes anywhere else.
    fn own(&self, uri: Uri, what: &str) -> Result<Uri, CodeHostError> {
        match uri.authority() {
            Some(a) if a.as_str().eq_ignore_ascii_case(&self.authority) => Ok(uri),
            None => Ok(uri),
            Some(other) => Err(CodeHostError::Protocol {
                reason: format!(
                    "{what}: the next page is on another host ({other}, the API is {})",
                    self.authority
                ),
            }),
        }
    }

    /// One request and its answer, within the timeout; dropping the future abandons it.
    async fn exchange<B: Serialize + ?Sized + Sync, R: FromResponse + Send>(
        &self,
        client: &Octocrab,
        method: Method,
        uri: Uri,
        body: Option<&B>,
        credential: &Secret,
        what: &str,
    ) -> Result<R, CodeHostError> {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", credential.expose()))
            .map_err(|_| CodeHostError::Protocol {
            reason: format!(
                "{what}: the credential contains characters not allowed in an HTTP header"
            ),
        })?;
        authorization.set_sensitive(true);
        let request = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(AUTHORIZATION, authorization)
            .header(ACCEPT, "application/vnd.github+json");
        let fail = |e| error::from_octocrab(e, what, credential);
        let answer = async {
            let request = client.build_request(request, body).map_err(fail)?;
            let response = client.execute(request).await.map_err(fail)?;
            let response = octocrab::map_github_error(response).await.map_err(fail)?;
            R::from_response(response).await.map_err(fail)
        };
        tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| error::timed_out(what, self.timeout))?
    }
}

/// Runs `read` again (after a short, jittered pause) while it fails transiently: 5xx, connection
/// trouble, timeouts. A rate limit is not retried here: the caller waits as GitHub asked.
async fn read_with_retries<T, F, Fut>(read: F) -> Result<T, CodeHostError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CodeHostError>>,
{
    read.retry(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(1))
            .with_max_times(READ_RETRIES)
            .with_jitter(),
    )
    .sleep(tokio::time::sleep)
    .when(|e| matches!(e, CodeHostError::Unavailable { .. }))
    .await
}

/// Octocrab over `client` with only the base-URI layer (which keeps a base path such as
/// GitHub Enterprise's `/api/v3`): no octocrab user agent, redirects or retries of its own.
fn octocrab(base: Uri, client: reqwest::Client) -> Octocrab {
    let built = OctocrabBuilder::new_empty()
        .with_service(ReqwestConnector::new(client))
        .with_layer(&BaseUriLayer::new(base))
        .with_auth(AuthState::None)
        .build();
    match built {
        Ok(octocrab) => octocrab,
        Err(never) => match never {},
    }
}

/// The reqwest client: ring installed as the rustls provider (reqwest is built without one), a
/// connect timeout, the whole-exchange timeout, `redirects`, and a `verdict/<version>` user
/// agent (GitHub refuses requests without one).
fn http_client(
    timeout: Duration,
    redirects: reqwest::redirect::Policy,
) -> Result<reqwest::Client, BuildError> {
    // Err means a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(timeout.min(CONNECT_TIMEOUT))
        .timeout(timeout)
        .redirect(redirects)
        .user_agent(concat!("verdict/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| BuildError::Http(e.to_string()))
}
