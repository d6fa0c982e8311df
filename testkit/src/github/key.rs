//! The GitHub App private key tests sign JWTs with: a test fixture only, generated once for this
//! repository with `openssl genrsa -traditional 2048`, never a credential for anything real.

/// A 2048-bit RSA key in PKCS#1 PEM (`BEGIN RSA PRIVATE KEY`, the form GitHub hands out), for
/// [`crate::github::FakeGitHub::install_app`] and the client under test. A test fixture only.
pub const TEST_APP_PRIVATE_KEY: &str = include_str!("test-app-key.pem");
