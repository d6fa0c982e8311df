//! Heartbeat leases (issue 11): a process proves it is alive by beating before its lease
//! lapses, so another process takes over its work only when it is gone, never because the work
//! is slow. The lease runs on the store's clock (Redis's own expiry), so processes whose clocks
//! disagree still agree on whether a lease has lapsed.

use std::time::Duration;

use super::StoreError;
use crate::BoxFuture;

/// Who is alive, by lease.
pub trait Liveness: Send + Sync + std::fmt::Debug {
    /// `holder` is alive for `lease` from now; a later beat replaces an earlier one.
    fn beat<'a>(
        &'a self,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Whether `holder`'s last beat's lease is still running.
    fn alive<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// `holder` stops being alive now (it is stopping and has given its work back).
    fn leave<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}
