//! Who is calling: the `Authorization` header read as GitHub reads it — a personal access token,
//! an installation token the fake issued, or a GitHub App JWT (RS256, verified with ring against
//! the app's public key, claims checked by GitHub's rules) — plus the helpers that make the
//! credentials: installation tokens, and app JWTs for tests.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::distr::{Alphanumeric, SampleString};
use ring::signature::{
    KeyPair, RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, RsaKeyPair, UnparsedPublicKey,
};
use serde_json::{Value, json};

use super::clock;
use super::model::AuthKind;
use super::state::{RepoKey, State};

/// GitHub's words for a JWT it cannot use (malformed, wrong algorithm, bad signature) and for
/// anything that is not a JWT where one is required.
pub(crate) const JWT_UNDECODABLE: &str = "A JSON web token could not be decoded";

/// The longest JWT lifetime GitHub accepts (`exp - iat`), and how far `iat` may lie ahead of its
/// clock.
const JWT_MAX_LIFETIME_SECS: i64 = 600;
const JWT_IAT_LEEWAY_SECS: i64 = 60;

/// The credential a request carried, with what the fake knows about it.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    None,
    Pat {
        login: String,
    },
    Installation {
        app_id: u64,
        repos: BTreeSet<RepoKey>,
        expired: bool,
    },
    Jwt {
        app_id: u64,
    },
    /// A JWT the fake refused, with GitHub's status and words.
    BadJwt {
        status: StatusCode,
        message: String,
    },
    Unknown,
}

impl Credential {
    pub(super) fn kind(&self) -> AuthKind {
        match self {
            Credential::None => AuthKind::None,
            Credential::Pat { .. } => AuthKind::Token,
            Credential::Installation { .. } => AuthKind::Installation,
            Credential::Jwt { .. } => AuthKind::Jwt,
            Credential::BadJwt { .. } | Credential::Unknown => AuthKind::Invalid,
        }
    }
}

/// The login an installation token acts as (GitHub: the app's slug with `[bot]`).
pub(crate) fn app_login(app_id: u64) -> String {
    format!("fake-app-{app_id}[bot]")
}

/// The value after `Bearer ` or `token ` (schemes are case-insensitive); `Err(())` for a header
/// with another scheme, `Ok(None)` when there is no header.
pub(crate) fn presented_token(headers: &HeaderMap) -> Result<Option<String>, ()> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = String::from_utf8_lossy(value.as_bytes());
    let (scheme, token) = value.trim().split_once(' ').ok_or(())?;
    if scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token") {
        Ok(Some(token.trim().to_owned()))
    } else {
        Err(())
    }
}

/// Classifies the request's credential against what the fake accepts, at `now`.
pub(crate) fn classify(
    state: &State,
    presented: Result<Option<&str>, ()>,
    now: SystemTime,
) -> Credential {
    let token = match presented {
        Ok(None) => return Credential::None,
        Err(()) => return Credential::Unknown,
        Ok(Some(token)) => token,
    };
    if let Some(login) = state.pats.get(token) {
        return Credential::Pat {
            login: login.clone(),
        };
    }
    if let Some(issued) = state.issued.get(token) {
        return Credential::Installation {
            app_id: issued.app_id,
            repos: issued.repos.clone(),
            expired: now >= issued.expires_at,
        };
    }
    if looks_like_jwt(token) {
        return match verify_jwt(state, token, clock::unix_seconds(now)) {
            Ok(app_id) => Credential::Jwt { app_id },
            Err((status, message)) => Credential::BadJwt { status, message },
        };
    }
    Credential::Unknown
}

fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The app id of a JWT GitHub would accept, or GitHub's refusal.
fn verify_jwt(state: &State, token: &str, now: i64) -> Result<u64, (StatusCode, String)> {
    let undecodable = || (StatusCode::UNAUTHORIZED, JWT_UNDECODABLE.to_owned());
    let mut parts = token.split('.');
    let (Some(head), Some(payload), Some(signature)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(undecodable());
    };
    let decode_json = |part: &str| -> Option<Value> {
        let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
        serde_json::from_slice(&bytes).ok()
    };
    let header = decode_json(head).ok_or_else(undecodable)?;
    if header.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(undecodable());
    }
    let claims = decode_json(payload).ok_or_else(undecodable)?;
    let app_id = match claims.get("iss") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(undecodable)?;
    let app = state
        .apps
        .get(&app_id)
        .ok_or((StatusCode::NOT_FOUND, "Integration not found".to_owned()))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| undecodable())?;
    let signed = &token[..head.len() + 1 + payload.len()];
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &app.public_key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| undecodable())?;
    let refused = |message: &str| (StatusCode::UNAUTHORIZED, message.to_owned());
    let iat = claims.get("iat").and_then(Value::as_i64).ok_or_else(|| {
        refused(
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
        )
    })?;
    let exp = claims.get("exp").and_then(Value::as_i64).ok_or_else(|| {
        refused(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        )
    })?;
    if iat > now + JWT_IAT_LEEWAY_SECS {
        return Err(refused("'Issued at' claim ('iat') is in the future"));
    }
    if exp <= now {
        return Err(refused(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        ));
    }
    if exp - iat > JWT_MAX_LIFETIME_SECS {
        return Err(refused(
            "'Expiration time' claim ('exp') is too far in the future",
        ));
    }
    Ok(app_id)
}

/// The DER public key (PKCS#1 `RSAPublicKey`, what ring verifies with) of an RSA private key in
/// PEM: `BEGIN RSA PRIVATE KEY` (PKCS#1, as GitHub hands out) or `BEGIN PRIVATE KEY` (PKCS#8).
pub(crate) fn public_key_der(private_key_pem: &str) -> Result<Vec<u8>, String> {
    Ok(key_pair(private_key_pem)?.public_key().as_ref().to_vec())
}

fn key_pair(pem: &str) -> Result<RsaKeyPair, String> {
    let (label, der) = pem_body(pem)?;
    let parsed = match label.as_str() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        other => {
            return Err(format!(
                "a PEM labelled `{other}` is not an RSA private key; pass `BEGIN RSA PRIVATE KEY` (PKCS#1) or `BEGIN PRIVATE KEY` (PKCS#8)"
            ));
        }
    };
    parsed.map_err(|e| format!("the RSA private key was rejected ({e})"))
}

/// The label and decoded body of the first PEM block.
fn pem_body(pem: &str) -> Result<(String, Vec<u8>), String> {
    let begin = pem
        .find("-----BEGIN ")
        .ok_or("no `-----BEGIN …-----` line: not a PEM key")?;
    let rest = &pem[begin + "-----BEGIN ".len()..];
    let (label, rest) = rest
        .split_once("-----")
        .ok_or("a malformed `-----BEGIN …-----` line")?;
    let end_marker = format!("-----END {label}-----");
    let end = rest
        .find(&end_marker)
        .ok_or_else(|| format!("no `{end_marker}` line"))?;
    let body: String = rest[..end].split_whitespace().collect();
    let der = STANDARD
        .decode(body)
        .map_err(|e| format!("the PEM body is not base64 ({e})"))?;
    Ok((label.to_owned(), der))
}

/// A new installation token: `ghs_` and 36 letters and digits, like GitHub's.
pub(crate) fn new_installation_token() -> String {
    format!("ghs_{}", Alphanumeric.sample_string(&mut rand::rng(), 36))
}

/// Signs `claims` as an RS256 JWT with the RSA key in `private_key_pem` (PKCS#1 or PKCS#8 PEM),
/// for tests that need a JWT with particular claims (an expired one, a foreign issuer, …).
/// Panics on a key ring cannot use: it is test infrastructure.
pub fn sign_app_jwt(private_key_pem: &str, claims: &Value) -> String {
    let pair = match key_pair(private_key_pem) {
        Ok(pair) => pair,
        Err(e) => panic!("sign a GitHub App JWT: {e}"),
    };
    let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{head}.{body}");
    let mut signature = vec![0; pair.public().modulus_len()];
    if let Err(e) = pair.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    ) {
        panic!("sign a GitHub App JWT: {e}");
    }
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// A JWT for `app_id` as GitHub recommends making one: issued 60 s ago, expiring in 9 minutes.
pub fn app_jwt(app_id: u64, private_key_pem: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    sign_app_jwt(
        private_key_pem,
        &json!({"iss": app_id.to_string(), "iat": now.saturating_sub(60), "exp": now + 540}),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::github::TEST_APP_PRIVATE_KEY;

    #[test]
    fn the_test_key_is_pkcs1_and_verifies_its_own_signatures() {
        assert!(TEST_APP_PRIVATE_KEY.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let public = public_key_der(TEST_APP_PRIVATE_KEY).unwrap();
        let jwt = sign_app_jwt(TEST_APP_PRIVATE_KEY, &json!({"iss": 1}));
        let (signed, signature) = jwt.rsplit_once('.').unwrap();
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &public)
            .verify(
                signed.as_bytes(),
                &URL_SAFE_NO_PAD.decode(signature).unwrap(),
            )
            .unwrap();
    }

    #[test]
    fn pem_errors_say_what_is_wrong() {
        assert!(
            public_key_der("nope")
                .unwrap_err()
                .contains("not a PEM key")
        );
        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(
            public_key_der(cert)
                .unwrap_err()
                .contains("not an RSA private key")
        );
    }

    #[test]
    fn tokens_look_like_githubs() {
        let token = new_installation_token();
        assert_eq!(token.len(), 40);
        assert!(token.starts_with("ghs_"));
        assert_ne!(token, new_installation_token());
    }

    #[test]
    fn schemes() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_token(&headers), Ok(None));
        headers.insert(header::AUTHORIZATION, "token abc".parse().unwrap());
        assert_eq!(presented_token(&headers), Ok(Some("abc".to_owned())));
        headers.insert(header::AUTHORIZATION, "bearer  xyz ".parse().unwrap());
        assert_eq!(presented_token(&headers), Ok(Some("xyz".to_owned())));
        headers.insert(header::AUTHORIZATION, "Basic dXNlcjpwYXNz".parse().unwrap());
        assert_eq!(presented_token(&headers), Err(()));
    }
}
