//! Awaiting a condition with a deadline: tests never sleep to wait for something to happen.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Upper bound for anything that should happen "promptly"; generous for a loaded 2-core machine
/// running several builds at once.
pub(crate) const PROMPTLY: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test after [`PROMPTLY`].
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PROMPTLY, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `condition` every few milliseconds until it holds, failing the test after [`PROMPTLY`].
pub(crate) async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PROMPTLY;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
