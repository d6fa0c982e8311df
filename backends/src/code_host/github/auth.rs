//! GitHub App authentication: the App's JWT (RS256, signed with ring — not jsonwebtoken, whose
//! backends pull in the `rsa` crate, RUSTSEC-2023-0071, or aws-lc's C build) is used for exactly
//! two calls, finding a repository's installation and exchanging it for an installation token;
//! every other request carries that token. Installations are cached per repository and tokens
//! per installation until five minutes before they expire, each fetched single-flight: however
//! many calls wait, one exchange happens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use verdict_proto::publication::RepoId;

use super::client::Api;
use super::wire;
use crate::clock::Clock;
use crate::code_host::CodeHostError;
use crate::secret::Secret;

/// How long before its expiry an installation token is replaced.
pub(super) const REFRESH_MARGIN_SECS: u64 = 5 * 60;

/// The JWT's `iat` is this far in the past, for clocks that run behind GitHub's.
const CLOCK_SKEW_SECS: u64 = 60;

/// The JWT's lifetime after now (GitHub allows at most ten minutes).
const JWT_LIFETIME_SECS: u64 = 9 * 60;

/// Why a private key was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeyProblem {
    NotPem,
    Encrypted,
    OtherKind(String),
    Base64(String),
    Rejected {
        format: &'static str,
        reason: String,
    },
}

/// A GitHub App's id and private key.
pub(super) struct AppKey {
    app_id: u64,
    key: RsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppKey")
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

impl AppKey {
    /// The key from the PEM GitHub hands out: PKCS#1 (`BEGIN RSA PRIVATE KEY`, what GitHub
    /// generates) or PKCS#8 (`BEGIN PRIVATE KEY`, what `openssl pkcs8 -topk8 -nocrypt` makes).
    pub(super) fn from_pem(app_id: u64, pem: &Secret) -> Result<AppKey, KeyProblem> {
        let (label, der) = pem_block(pem.expose())?;
        let key = match label {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der).map_err(|e| KeyProblem::Rejected {
                format: "PKCS#1",
                reason: e.to_string(),
            })?,
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der).map_err(|e| KeyProblem::Rejected {
                format: "PKCS#8",
                reason: e.to_string(),
            })?,
            "ENCRYPTED PRIVATE KEY" => return Err(KeyProblem::Encrypted),
            other => return Err(KeyProblem::OtherKind(other.to_owned())),
        };
        Ok(AppKey {
            app_id,
            key,
            rng: SystemRandom::new(),
        })
    }

    /// The App's JWT at `now` (Unix seconds).
    pub(super) fn jwt(&self, now: u64) -> Result<Secret, CodeHostError> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iat": now.saturating_sub(CLOCK_SKEW_SECS),
            "exp": now + JWT_LIFETIME_SECS,
            "iss": self.app_id.to_string(),
        });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| CodeHostError::Unavailable {
                reason: "the GitHub App JWT could not be signed (no system randomness)".to_owned(),
            })?;
        Ok(Secret::new(format!(
            "{signed}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        )))
    }

    pub(super) fn app_id(&self) -> u64 {
        self.app_id
    }
}

/// The label and DER bytes of the first PEM block in `text`.
fn pem_block(text: &str) -> Result<(&str, Vec<u8>), KeyProblem> {
    let begin = text.find("-----BEGIN ").ok_or(KeyProblem::NotPem)?;
    let rest = &text[begin + "-----BEGIN ".len()..];
    let (label, rest) = rest.split_once("-----").ok_or(KeyProblem::NotPem)?;
    let end_marker = format!("-----END {label}-----");
    let body = &rest[..rest.find(&end_marker).ok_or(KeyProblem::NotPem)?];
    if body.contains("Proc-Type:") || body.contains("DEK-Info:") {
        return Err(KeyProblem::Encrypted);
    }
    let base64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = STANDARD
        .decode(base64)
        .map_err(|e| KeyProblem::Base64(e.to_string()))?;
    Ok((label, der))
}

/// An installation token and when to stop using it.
#[derive(Clone)]
struct Token {
    value: Secret,
    /// Unix seconds: [`REFRESH_MARGIN_SECS`] before GitHub's `expires_at`.
    refresh_at: u64,
}

/// One value per key, fetched once however many callers ask at the same time.
type Slots<K, V> = Mutex<HashMap<K, Arc<tokio::sync::Mutex<Option<V>>>>>;

/// A GitHub App's installations and their tokens (see the module documentation).
#[derive(Debug)]
pub(super) struct App {
    key: AppKey,
    clock: Arc<dyn Clock>,
    installations: Slots<RepoId, u64>,
    tokens: Slots<u64, Token>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("refresh_at", &self.refresh_at)
            .finish_non_exhaustive()
    }
}

fn slot<K: std::hash::Hash + Eq + Clone, V>(
    slots: &Slots<K, V>,
    key: &K,
) -> Arc<tokio::sync::Mutex<Option<V>>> {
    let mut map = slots.lock().unwrap_or_else(PoisonError::into_inner);
    map.entry(key.clone()).or_default().clone()
}

impl App {
    pub(super) fn new(key: AppKey, clock: Arc<dyn Clock>) -> App {
        App {
            key,
            clock,
            installations: Mutex::default(),
            tokens: Mutex::default(),
        }
    }

    pub(super) fn app_id(&self) -> u64 {
        self.key.app_id()
    }

    fn now(&self) -> u64 {
        self.clock.now_unix_ms() / 1000
    }

    /// The installation token for `repo`: cached, or looked up and exchanged now.
    pub(super) async fn token(&self, api: &Api, repo: &RepoId) -> Result<Secret, CodeHostError> {
        let installation = self.installation(api, repo).await?;
        self.installation_token(api, repo, installation).await
    }

    /// The installation token for organisation `org` (its installation looked up with
    /// `GET /orgs/{org}/installation`, cached under the organisation with an empty name, which
    /// no repository has).
    pub(super) async fn organisation_token(
        &self,
        api: &Api,
        org: &str,
    ) -> Result<Secret, CodeHostError> {
        let key = RepoId {
            owner: org.to_owned(),
            name: String::new(),
        };
        let installation = {
            let slot = slot(&self.installations, &key);
            let mut held = slot.lock().await;
            match *held {
                Some(id) => id,
                None => {
                    let jwt = self.key.jwt(self.now())?;
                    let found: wire::Installation = api
                        .get(
                            &format!("/orgs/{org}/installation"),
                            &jwt,
                            &format!(
                                "the installation of GitHub App {} on organisation {org}",
                                self.key.app_id()
                            ),
                        )
                        .await?;
                    *held = Some(found.id);
                    found.id
                }
            }
        };
        self.installation_token(api, &key, installation).await
    }

    /// The token of `installation` (found for `repo`): cached, or exchanged now.
    async fn installation_token(
        &self,
        api: &Api,
        repo: &RepoId,
        installation: u64,
    ) -> Result<Secret, CodeHostError> {
        let slot = slot(&self.tokens, &installation);
        // Held across the exchange: the callers behind it find the fresh token.
        let mut held = slot.lock().await;
        if let Some(token) = held.as_ref().filter(|t| self.now() < t.refresh_at) {
            return Ok(token.value.clone());
        }
        let jwt = self.key.jwt(self.now())?;
        let what = format!(
            "the installation {installation} of GitHub App {} (for {repo})",
            self.key.app_id()
        );
        let issued: wire::AccessToken = match api
            .post(
                &format!("/app/installations/{installation}/access_tokens"),
                &serde_json::json!({}),
                &jwt,
                &what,
            )
            .await
        {
            Ok(issued) => issued,
            Err(e) => {
                if matches!(e, CodeHostError::NotFound { .. }) {
                    // Uninstalled (and maybe installed again under a new id): look it up anew.
                    self.forget_installation(repo);
                }
                return Err(e);
            }
        };
        let expires_at = chrono::DateTime::parse_from_rfc3339(&issued.expires_at)
            .map_err(|e| CodeHostError::Protocol {
                reason: format!(
                    "{what}: the token's expires_at `{}` is not an RFC 3339 time: {e}",
                    issued.expires_at
                ),
            })?
            .timestamp();
        let token = Token {
            value: Secret::new(issued.token),
            refresh_at: u64::try_from(expires_at)
                .unwrap_or(0)
                .saturating_sub(REFRESH_MARGIN_SECS),
        };
        let value = token.value.clone();
        *held = Some(token);
        Ok(value)
    }

    /// The installation covering `repo`, looked up once with the App's JWT.
    async fn installation(&self, api: &Api, repo: &RepoId) -> Result<u64, CodeHostError> {
        let slot = slot(&self.installations, repo);
        let mut held = slot.lock().await;
        if let Some(id) = *held {
            return Ok(id);
        }
        let jwt = self.key.jwt(self.now())?;
        let found: wire::Installation = api
            .get(
                &format!("/repos/{}/{}/installation", repo.owner, repo.name),
                &jwt,
                &format!(
                    "the installation of GitHub App {} on {repo}",
                    self.key.app_id()
                ),
            )
            .await?;
        *held = Some(found.id);
        Ok(found.id)
    }

    /// Forgets `token` after GitHub refused it (revoked before its expiry), so the next call
    /// exchanges a new one.
    pub(super) async fn invalidate(&self, token: &Secret) {
        let slots: Vec<_> = {
            let map = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            map.values().cloned().collect()
        };
        for slot in slots {
            let mut held = slot.lock().await;
            if held.as_ref().is_some_and(|t| &t.value == token) {
                *held = None;
            }
        }
    }

    fn forget_installation(&self, repo: &RepoId) {
        let mut map = self
            .installations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.remove(repo);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    /// A 2048-bit test key, generated for these tests only (`openssl genrsa -traditional 2048`).
    const PKCS1: &str = include_str!("test-key-pkcs1.pem");
    /// The same key as PKCS#8 (`openssl pkcs8 -topk8 -nocrypt`).
    const PKCS8: &str = include_str!("test-key-pkcs8.pem");

    fn decode(part: &str) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn the_jwt_is_rs256_with_githubs_claims_and_verifies() {
        for pem in [PKCS1, PKCS8] {
            let key = AppKey::from_pem(4242, &Secret::new(pem)).unwrap();
            let jwt = key.jwt(1_700_000_000).unwrap();
            let parts: Vec<&str> = jwt.expose().split('.').collect();
            assert_eq!(parts.len(), 3);
            assert_eq!(
                decode(parts[0]),
                serde_json::json!({"alg": "RS256", "typ": "JWT"})
            );
            assert_eq!(
                decode(parts[1]),
                serde_json::json!({"iat": 1_699_999_940_u64, "exp": 1_700_000_540_u64, "iss": "4242"})
            );
            let public = UnparsedPublicKey::new(
                &RSA_PKCS1_2048_8192_SHA256,
                key.key.public().as_ref().to_vec(),
            );
            let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
            public
                .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
                .unwrap();
        }
    }

    #[test]
    fn keys_that_are_not_unencrypted_rsa_pems_are_refused_with_the_reason() {
        assert_eq!(
            AppKey::from_pem(1, &Secret::new("not a key")).unwrap_err(),
            KeyProblem::NotPem
        );
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert_eq!(
            AppKey::from_pem(1, &Secret::new(encrypted)).unwrap_err(),
            KeyProblem::Encrypted
        );
        let legacy = PKCS1.replace(
            "-----BEGIN RSA PRIVATE KEY-----\n",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\n",
        );
        assert_eq!(
            AppKey::from_pem(1, &Secret::new(legacy)).unwrap_err(),
            KeyProblem::Encrypted
        );
        let ec = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(
            AppKey::from_pem(1, &Secret::new(ec)).unwrap_err(),
            KeyProblem::OtherKind("EC PRIVATE KEY".into())
        );
        // A PKCS#8 body under a PKCS#1 label: the format is named.
        let mislabelled = PKCS8.replace("PRIVATE KEY", "RSA PRIVATE KEY");
        assert!(matches!(
            AppKey::from_pem(1, &Secret::new(mislabelled)).unwrap_err(),
            KeyProblem::Rejected {
                format: "PKCS#1",
                ..
            }
        ));
        let garbled = PKCS1.replacen("MII", "M*I", 1);
        assert!(matches!(
            AppKey::from_pem(1, &Secret::new(garbled)).unwrap_err(),
            KeyProblem::Base64(_)
        ));
    }

    #[test]
    fn debug_shows_no_key() {
        let key = AppKey::from_pem(7, &Secret::new(PKCS1)).unwrap();
        assert_eq!(format!("{key:?}"), "AppKey { app_id: 7, .. }");
    }
}
