//! How full Redis is (issue 14): a watch, started by the first question, that reads every
//! primary's `used_memory` and `maxmemory` every few seconds, so the scheduler can stop
//! admitting tasks before Redis refuses writes — the tasks already accepted keep the headroom
//! they need to record their results. At `maxmemory` itself (with `noeviction`) Redis refuses
//! writes and the store reports [`crate::store::StoreError::Full`].

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use redis::Client;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::RedisStore;
use super::link::{Links, timed};
use crate::store::Capacity;

/// Between two readings.
const POLL: Duration = Duration::from_secs(2);

/// How long the list of primaries is trusted: listing them asks a cluster node or the
/// Sentinels, which a reading every two seconds need not do. A reading that fails lists them
/// again at once (a failover may have moved them).
const RELIST: Duration = Duration::from_secs(30);

/// The watch's side of the store: what the last reading found.
pub(super) type Reading = watch::Receiver<Option<String>>;

impl RedisStore {
    fn memory_pressure(&self) -> Option<String> {
        let mut watch = self
            .inner
            .memory_watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let reading = watch.get_or_insert_with(|| self.start_memory_watch());
        reading.borrow().clone()
    }

    fn start_memory_watch(&self) -> Reading {
        let (tx, rx) = watch::channel(None);
        let watcher = Watcher {
            links: Arc::clone(&self.inner.links),
            limit_percent: self.inner.config.intake_memory_percent,
            timeout: self.inner.config.command_timeout,
            shutdown: self.inner.shutdown.clone(),
            primaries: None,
            connections: HashMap::new(),
        };
        tokio::spawn(watcher.run(tx));
        rx
    }
}

impl Capacity for RedisStore {
    fn pressure(&self) -> Option<String> {
        self.memory_pressure()
    }
}

/// The background reader. It holds no reference to the store, so dropping the last store clone
/// cancels `shutdown` and ends it.
struct Watcher {
    links: Arc<Links>,
    limit_percent: u8,
    timeout: Duration,
    shutdown: CancellationToken,
    /// The primaries as last listed, and when.
    primaries: Option<(tokio::time::Instant, Vec<Client>)>,
    /// One connection per primary, kept between readings.
    connections: HashMap<String, MultiplexedConnection>,
}

/// One primary's memory.
#[derive(Debug, Clone, PartialEq)]
struct Memory {
    used: u64,
    /// 0: no limit.
    max: u64,
}

impl Watcher {
    async fn run(mut self, reading: watch::Sender<Option<String>>) {
        loop {
            let pressure = match tokio::time::timeout(self.timeout * 4, self.read()).await {
                Ok(Ok(pressure)) => pressure,
                // Redis not answering is not "full": writes will say "unavailable" themselves.
                Ok(Err(error)) => {
                    tracing::debug!(%error, "reading Redis memory failed");
                    self.primaries = None;
                    None
                }
                Err(_) => {
                    self.primaries = None;
                    None
                }
            };
            reading.send_replace(pressure);
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// The fullest primary over the limit, as a sentence; `None` when all are below it.
    async fn read(&mut self) -> redis::RedisResult<Option<String>> {
        let primaries = match &self.primaries {
            Some((listed, primaries)) if listed.elapsed() < RELIST => primaries.clone(),
            _ => {
                let primaries = self.links.primaries().await?;
                self.primaries = Some((tokio::time::Instant::now(), primaries.clone()));
                primaries
            }
        };
        let mut fullest: Option<(f64, String, Memory)> = None;
        for primary in primaries {
            let address = primary.get_connection_info().addr().to_string();
            let memory = self.memory_of(&address, &primary).await?;
            if memory.max == 0 {
                continue;
            }
            let share = memory.used as f64 / memory.max as f64;
            if fullest.as_ref().is_none_or(|(s, _, _)| share > *s) {
                fullest = Some((share, address, memory));
            }
        }
        Ok(fullest.and_then(|(share, address, memory)| {
            (share * 100.0 >= f64::from(self.limit_percent)).then(|| {
                format!(
                    "Redis at {address} holds {} MiB of its maxmemory {} MiB ({:.0} %, over \
                     redis.intake_memory_percent = {}): new tasks wait so the accepted ones can \
                     finish; raise maxmemory or lower the retention settings (redis.*_ttl_seconds)",
                    memory.used >> 20,
                    memory.max >> 20,
                    share * 100.0,
                    self.limit_percent
                )
            })
        }))
    }

    async fn memory_of(&mut self, address: &str, primary: &Client) -> redis::RedisResult<Memory> {
        let conn = match self.connections.get(address) {
            Some(conn) => conn.clone(),
            None => {
                let conn = primary
                    .get_multiplexed_async_connection_with_config(&timed(self.timeout))
                    .await?;
                self.connections.insert(address.to_owned(), conn.clone());
                conn
            }
        };
        let mut conn = conn;
        let info = redis::cmd("INFO")
            .arg("memory")
            .query_async::<String>(&mut conn)
            .await;
        match info {
            Ok(info) => Ok(parse_memory(&info)),
            Err(e) => {
                self.connections.remove(address);
                Err(e)
            }
        }
    }
}

/// `used_memory` and `maxmemory` from `INFO memory` (absent fields read as 0).
fn parse_memory(info: &str) -> Memory {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Memory {
        used: field("used_memory"),
        max: field("maxmemory"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_memory_gives_used_and_max() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n\
                    maxmemory:4194304\r\nmaxmemory_human:4.00M\r\nmaxmemory_policy:noeviction\r\n";
        assert_eq!(
            parse_memory(info),
            Memory {
                used: 1_048_576,
                max: 4_194_304
            }
        );
        assert_eq!(parse_memory(""), Memory { used: 0, max: 0 });
    }
}
