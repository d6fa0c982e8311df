//! Heartbeat leases on Redis: `P alive:{holder}` set with a `PX` expiry at every beat, so the
//! lease lapses on Redis's clock when the beats stop.

use std::time::Duration;

use super::{RedisStore, Replay, millis};
use crate::BoxFuture;
use crate::store::{Liveness, StoreError};

impl Liveness for RedisStore {
    fn beat<'a>(
        &'a self,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = self.key("alive", holder);
            // A replayed SET only renews the lease again.
            let _: () = self
                .query(
                    "beat",
                    &key,
                    Replay::Safe,
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(1)
                        .arg("PX")
                        .arg(millis(lease).max(1)),
                )
                .await?;
            Ok(())
        })
    }

    fn alive<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let key = self.key("alive", holder);
            let exists: i64 = self
                .query(
                    "read a lease",
                    &key,
                    Replay::Safe,
                    redis::cmd("EXISTS").arg(&key),
                )
                .await?;
            Ok(exists == 1)
        })
    }

    fn leave<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = self.key("alive", holder);
            let _: i64 = self
                .query(
                    "end a lease",
                    &key,
                    Replay::Safe,
                    redis::cmd("DEL").arg(&key),
                )
                .await?;
            Ok(())
        })
    }
}
