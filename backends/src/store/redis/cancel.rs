//! Task cancellation on Redis: a mark per cancelled task (the source of truth, checked before
//! work starts) and a pub/sub notice so running stages stop promptly. The subscription lives on
//! a connection of its own, kept alive by a background task that reconnects and resubscribes.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::StreamExt;
use std::sync::Arc;

use super::link::Links;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::{RedisStore, Replay, millis};
use crate::BoxFuture;
use crate::store::{CancelSignals, StoreError};

/// Notices buffered per subscriber before it lags (and must fall back to `is_cancelled`).
const FEED_CAPACITY: usize = 1024;

/// How often an idle subscription is pinged, so a silently dead link is noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The running subscription: subscribers attach to `notices`; `live` says whether Redis is
/// currently subscribed (notices published while it is not are missed).
pub(super) struct Feed {
    notices: broadcast::Sender<String>,
    live: watch::Receiver<bool>,
}

impl RedisStore {
    async fn request_task_cancel(&self, task_id: &str) -> Result<(), StoreError> {
        let key = self.tagged_key("cancel", task_id, None);
        // The mark first, then the notice: a subscriber woken by it finds the mark. Two
        // commands, not one pipeline: a cluster routes PUBLISH by its channel's slot, which is
        // not the mark's. Marking twice and notifying twice are both harmless.
        let () = self
            .query(
                "request cancel",
                &key,
                Replay::Safe,
                redis::cmd("SET")
                    .arg(&key)
                    .arg("1")
                    .arg("PX")
                    .arg(millis(self.inner.config.cancel_ttl)),
            )
            .await?;
        let channel = self.cancel_channel();
        let _receivers: i64 = self
            .query(
                "notify cancel",
                &channel,
                Replay::Safe,
                redis::cmd("PUBLISH").arg(&channel).arg(task_id),
            )
            .await?;
        Ok(())
    }

    async fn task_is_cancelled(&self, task_id: &str) -> Result<bool, StoreError> {
        let key = self.tagged_key("cancel", task_id, None);
        self.query(
            "check cancel",
            &key,
            Replay::Safe,
            redis::cmd("EXISTS").arg(&key),
        )
        .await
    }

    fn cancel_channel(&self) -> String {
        format!("{}cancel", self.inner.config.prefix)
    }

    /// Attaches to the feed (starting it on first use) and waits, up to the command timeout,
    /// until the subscription is live, so that a cancellation requested after this returns is
    /// delivered.
    async fn subscribe_cancels(&self) -> Result<broadcast::Receiver<String>, StoreError> {
        let (receiver, mut live) = {
            let mut feed = self
                .inner
                .cancel_feed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let feed = feed.get_or_insert_with(|| self.start_feed());
            (feed.notices.subscribe(), feed.live.clone())
        };
        let timeout = self.inner.config.command_timeout;
        match tokio::time::timeout(timeout, live.wait_for(|live| *live)).await {
            Ok(Ok(_)) => Ok(receiver),
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "cancel subscription: the store is shutting down".into(),
            )),
            Err(_) => Err(StoreError::Unavailable(format!(
                "cancel subscription on {}: not established within {timeout:?}; retrying in the background",
                self.inner.config.redacted_url()
            ))),
        }
    }

    fn start_feed(&self) -> Feed {
        let (notices, _) = broadcast::channel(FEED_CAPACITY);
        let (live_tx, live) = watch::channel(false);
        let subscription = Subscription {
            links: Arc::clone(&self.inner.links),
            channel: self.cancel_channel(),
            notices: notices.clone(),
            live: live_tx,
            timeout: self.inner.config.command_timeout,
            redacted_url: self.inner.config.redacted_url(),
            shutdown: self.inner.shutdown.clone(),
        };
        tokio::spawn(subscription.run());
        Feed { notices, live }
    }
}

/// The background side of the feed. It holds no reference to the store, so dropping the last
/// store clone cancels `shutdown` and ends it.
struct Subscription {
    links: Arc<Links>,
    channel: String,
    notices: broadcast::Sender<String>,
    live: watch::Sender<bool>,
    timeout: Duration,
    redacted_url: String,
    shutdown: CancellationToken,
}

impl Subscription {
    async fn run(self) {
        let mut backoff = reconnect_backoff();
        loop {
            match self.subscribed().await {
                Ok(pubsub) => {
                    backoff = reconnect_backoff();
                    self.live.send_replace(true);
                    let stop = self.forward(pubsub).await;
                    self.live.send_replace(false);
                    if stop {
                        return;
                    }
                    tracing::warn!(
                        redis = %self.redacted_url,
                        "cancel subscription lost; reconnecting"
                    );
                }
                Err(error) => {
                    tracing::warn!(
                        redis = %self.redacted_url,
                        %error,
                        "cancel subscription failed; retrying"
                    );
                }
            }
            let wait = backoff.next().unwrap_or(Duration::from_secs(5));
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn subscribed(&self) -> Result<redis::aio::PubSub, String> {
        // Any node will do: a cluster carries a message published on one node to subscribers
        // on every node. The first that takes the subscription is kept.
        let attempt = async {
            let mut last = None;
            for client in self.links.subscription_clients().await? {
                let subscribed = async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&self.channel).await?;
                    Ok::<_, redis::RedisError>(pubsub)
                };
                match subscribed.await {
                    Ok(pubsub) => return Ok(pubsub),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "no Redis node to subscribe on"))
            }))
        };
        tokio::select! {
            () = self.shutdown.cancelled() => Err("shutting down".into()),
            r = tokio::time::timeout(self.timeout, attempt) => match r {
                Ok(Ok(pubsub)) => Ok(pubsub),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no reply within {:?}", self.timeout)),
            },
        }
    }

    /// Forwards notices until the connection ends (returns `false`) or the store is dropped
    /// (returns `true`).
    async fn forward(&self, pubsub: redis::aio::PubSub) -> bool {
        let (mut sink, mut messages) = pubsub.split();
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        keepalive.tick().await;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return true,
                message = messages.next() => match message {
                    Some(message) => {
                        if let Ok(task_id) = message.get_payload::<String>() {
                            // No subscriber right now is fine: the mark remains.
                            let _ = self.notices.send(task_id);
                        }
                    }
                    None => return false,
                },
                _ = keepalive.tick() => {
                    let ping = tokio::time::timeout(self.timeout, sink.ping::<redis::Value>());
                    if !matches!(ping.await, Ok(Ok(_))) {
                        return false;
                    }
                }
            }
        }
    }
}

fn reconnect_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

impl CancelSignals for RedisStore {
    fn request_cancel<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.request_task_cancel(task_id))
    }

    fn is_cancelled<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.task_is_cancelled(task_id))
    }

    fn subscribe(&self) -> BoxFuture<'_, Result<broadcast::Receiver<String>, StoreError>> {
        Box::pin(self.subscribe_cancels())
    }
}
