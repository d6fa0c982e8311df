//! A credential that cannot leak by accident (SPEC R3): its `Debug` and `Display` never show the
//! value. Shared by provider keys (worker), the API token (scheduler) and clients.

use std::fmt;
use std::sync::Arc;

/// A credential. Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(Arc::from(value.into()))
    }

    /// The value, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}
