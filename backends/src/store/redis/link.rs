//! Where Redis is and how the stores reach it (issue 14): one server, a Redis Cluster, or the
//! primary a set of Sentinels names — parsed from `redis.url` once, then one connection type,
//! [`Conn`], that every store module uses alike, so no store knows which deployment it runs on.
//!
//! # The three forms of `redis.url`
//! - `redis://[user:password@]host:port[/db]` (or `rediss://` for TLS): one server, through a
//!   [`ConnectionManager`] that reconnects to it in the background.
//! - `redis+cluster://[user:password@]host:port,host:port,…` (or `rediss+cluster://`): a Redis
//!   Cluster, reached through any of the listed nodes; commands go to the node that owns their
//!   key's slot. Every key of one task carries the task's hash tag, so each script and
//!   transaction touches one slot.
//! - `redis+sentinel://[user:password@]host:port,host:port,…/service[/db]` (or
//!   `rediss+sentinel://`): the primary that the listed Sentinels report for `service`. The
//!   credentials are the data nodes'; Sentinels are asked without any. After a failover the
//!   next command that fails on the old primary drops the connection, and the one after asks
//!   the Sentinels again.
//!
//! No connection resends a command on its own: a cluster connection is built with no retries,
//! so whether a failed command may be sent again is decided in one place, `RedisStore::run`,
//! which knows whether repeating it is harmless.
//!
//! A shared connection on which a command got no answer within the command timeout is replaced
//! ([`Links::stalled`]): redis-rs's cluster connection can wedge after a failover, holding every
//! later command unsent until it times out (seen in the clustered chaos run: a scheduler whose
//! every command timed out for minutes while the cluster was healthy), and a Sentinel-reported
//! primary that no longer answers is as good as gone.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::BoxFuture;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisError,
    RedisFuture, RedisResult, TlsMode, Value,
};

/// `redis.url`, understood: which deployment, and where its nodes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One server at this URL (`redis://`, `rediss://`, `redis+unix://`, `unix://`).
    Single(String),
    /// Seed nodes of a Redis Cluster, each as a full `redis://` (or `rediss://`) URL.
    Cluster(Vec<String>),
    /// The Sentinels to ask (each as a full URL without credentials) and what they watch.
    Sentinel(SentinelTarget),
}

/// What a `redis+sentinel://` URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelTarget {
    pub sentinels: Vec<String>,
    pub service: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: bool,
}

impl Deployment {
    /// Reads `url`; an error says what is wrong with it in words that name the fix (the caller
    /// adds the redacted URL).
    pub(crate) fn parse(url: &str) -> Result<Deployment, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Deployment::Single(url.to_owned()));
        };
        let (data_scheme, kind) = match scheme.to_ascii_lowercase().as_str() {
            "redis+cluster" => ("redis", Kind::Cluster),
            "rediss+cluster" => ("rediss", Kind::Cluster),
            "redis+sentinel" => ("redis", Kind::Sentinel),
            "rediss+sentinel" => ("rediss", Kind::Sentinel),
            _ => return Ok(Deployment::Single(url.to_owned())),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(format!(
                "lists an empty node; write the nodes as host:port separated by commas (e.g. \
                 `{scheme}://10.0.0.1:6379,10.0.0.2:6379`)"
            ));
        }
        for host in &hosts {
            match host.rsplit_once(':') {
                None => {
                    return Err(format!(
                        "has node `{host}` without a port; write it as host:port (Redis \
                         Cluster nodes usually listen on 6379, Sentinels on 26379)"
                    ));
                }
                Some((_, port)) if port.parse::<u16>().is_err() => {
                    return Err(format!(
                        "has port `{port}` in node `{host}`, which is not a number 0–65535"
                    ));
                }
                Some(_) => {}
            }
        }
        match kind {
            Kind::Cluster => {
                if !path.is_empty() && path != "/" && !path.starts_with('?') {
                    return Err(format!(
                        "has a database or path (`{path}`); remove it: a Redis Cluster has only \
                         database 0"
                    ));
                }
                let query = path.trim_start_matches('/');
                let credentials = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
                Ok(Deployment::Cluster(
                    hosts
                        .iter()
                        .map(|host| format!("{data_scheme}://{credentials}{host}/{query}"))
                        .collect(),
                ))
            }
            Kind::Sentinel => {
                let path = path.split('?').next().unwrap_or("");
                let mut parts = path.trim_start_matches('/').split('/');
                let service = parts.next().unwrap_or("").to_owned();
                if service.is_empty() {
                    return Err(format!(
                        "names no service; write the name the Sentinels watch after the nodes \
                         (e.g. `{scheme}://10.0.0.1:26379,10.0.0.2:26379/mymaster`)"
                    ));
                }
                let db = match parts.next() {
                    None | Some("") => 0,
                    Some(db) => db.parse().map_err(|_| {
                        format!("has database `{db}` after the service name; it must be a number")
                    })?,
                };
                let (username, password) = match userinfo {
                    None => (None, None),
                    Some(userinfo) => {
                        let (user, password) = match userinfo.split_once(':') {
                            Some((user, password)) => (user, Some(password)),
                            None => (userinfo, None),
                        };
                        (
                            Some(user).filter(|u| !u.is_empty()).map(percent_decode),
                            password.filter(|p| !p.is_empty()).map(percent_decode),
                        )
                    }
                };
                Ok(Deployment::Sentinel(SentinelTarget {
                    sentinels: hosts
                        .iter()
                        .map(|host| format!("{data_scheme}://{host}"))
                        .collect(),
                    service,
                    db,
                    username,
                    password,
                    tls: data_scheme == "rediss",
                }))
            }
        }
    }

    /// Whether the URL asks for TLS anywhere.
    pub(crate) fn uses_tls(&self) -> bool {
        match self {
            Deployment::Single(url) => url.starts_with("rediss"),
            Deployment::Cluster(nodes) => nodes.iter().any(|n| n.starts_with("rediss")),
            Deployment::Sentinel(target) => target.tls,
        }
    }
}

enum Kind {
    Cluster,
    Sentinel,
}

/// `%XX` escapes in a user name or password, as a URL parser would read them.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One connection the stores send commands on, whatever the deployment. Cheap to clone: every
/// variant is a handle to a multiplexed connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, reconnected in the background.
    Managed(ConnectionManager),
    /// A Redis Cluster: routed per key slot, nodes reconnected in the background;
    /// `generation` as for `Direct`.
    Cluster {
        generation: u64,
        conn: ClusterConnection,
    },
    /// One connection to one server (a Sentinel-reported primary, or a connection of its own
    /// for a blocking read); `generation` tells a failure on an old primary from one on the
    /// current.
    Direct {
        generation: u64,
        conn: MultiplexedConnection,
    },
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(conn) => conn.req_packed_command(cmd),
            Conn::Cluster { conn, .. } => conn.req_packed_command(cmd),
            Conn::Direct { conn, .. } => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Managed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
            Conn::Direct { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(conn) => conn.get_db(),
            Conn::Cluster { conn, .. } => conn.get_db(),
            Conn::Direct { conn, .. } => conn.get_db(),
        }
    }
}

/// Everything a store needs to open connections to its deployment.
pub(crate) struct Links {
    kind: LinkKind,
    timeout: Duration,
}

enum LinkKind {
    Single {
        client: Client,
        commands: ConnectionManager,
    },
    Cluster {
        /// Boxed: a cluster client is twice the size of the other forms' state.
        client: Box<ClusterClient>,
        /// Made on first use, then shared until it stalls; a cluster connection reconnects its
        /// nodes itself.
        commands: Replaceable<ClusterConnection>,
        /// The seed nodes, for what must talk to one node (the cancellation subscription).
        nodes: Vec<String>,
    },
    Sentinel(SentinelLinks),
}

/// The Sentinel form's state: whom to ask, and the connection to the primary they named last
/// (`None` until the next command asks the Sentinels).
struct SentinelLinks {
    sentinels: Arc<tokio::sync::Mutex<SentinelClient>>,
    primary: Replaceable<MultiplexedConnection>,
}

/// How many command timeouts making a shared connection may take. More than one: a cluster
/// connection is made by connecting to every seed and asking one for the slots, and a seed that
/// hangs costs its connection and reply timeouts before the others are asked.
const CONNECT_TIMEOUTS: u32 = 5;

/// A shared connection that can be replaced: the current one with its generation, made by the
/// first caller that finds none (the others wait and share it), and forgotten by generation, so
/// that a failure seen on an old connection never drops its replacement.
///
/// A connection is made in a task of its own, bounded by [`CONNECT_TIMEOUTS`]: the command that
/// asked may give up at its own timeout, but the connection is still made, for the next one —
/// made inside the command's time, a connection slower than one command timeout was begun
/// again by every command and never finished (the hung-primary cluster test).
struct Replaceable<T> {
    current: Arc<Mutex<Option<(u64, T)>>>,
    /// Held by the task making a connection.
    connecting: Arc<tokio::sync::Mutex<()>>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl<T: Clone + Send + 'static> Replaceable<T> {
    fn new() -> Replaceable<T> {
        Replaceable {
            current: Arc::new(Mutex::new(None)),
            connecting: Arc::new(tokio::sync::Mutex::new(())),
            generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    fn current(&self) -> Option<(u64, T)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current connection, or one `connect` makes (within `limit`) when there is none.
    async fn get<F>(&self, connect: F, limit: Duration) -> RedisResult<(u64, T)>
    where
        F: Future<Output = RedisResult<T>> + Send + 'static,
    {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let turn = self.connecting.clone().lock_owned().await;
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let (current, generation) = (self.current.clone(), self.generation.clone());
        let made = tokio::spawn(async move {
            let _turn = turn;
            let conn = tokio::time::timeout(limit, connect).await.map_err(|_| {
                RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
            })??;
            let generation = generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            *current.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((generation, conn.clone()));
            Ok((generation, conn))
        });
        made.await.map_err(|e| {
            RedisError::from((redis::ErrorKind::Client, "connecting failed", e.to_string()))
        })?
    }

    /// Forgets the connection of `generation`, if it is still the current one; whether it was.
    fn forget(&self, generation: u64) -> bool {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let is_current = current.as_ref().is_some_and(|(g, _)| *g == generation);
        if is_current {
            *current = None;
        }
        is_current
    }
}

impl Links {
    /// Builds the clients for `deployment`; nothing connects yet. Errors are configuration
    /// errors (a URL the client library refuses).
    pub(crate) fn new(deployment: &Deployment, timeout: Duration) -> RedisResult<Links> {
        let kind = match deployment {
            Deployment::Single(url) => {
                let client = Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(3)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(1));
                let commands = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
                LinkKind::Single { client, commands }
            }
            Deployment::Cluster(nodes) => {
                let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    // `RedisStore::run` decides what is sent again (see the module docs).
                    .retries(0)
                    .build()?;
                LinkKind::Cluster {
                    client: Box::new(client),
                    commands: Replaceable::new(),
                    nodes: nodes.clone(),
                }
            }
            Deployment::Sentinel(target) => LinkKind::Sentinel(SentinelLinks {
                sentinels: Arc::new(tokio::sync::Mutex::new(sentinel_client(target)?)),
                primary: Replaceable::new(),
            }),
        };
        Ok(Links { kind, timeout })
    }

    /// How long making a shared connection may take ([`CONNECT_TIMEOUTS`]).
    fn connect_limit(&self) -> Duration {
        self.timeout * CONNECT_TIMEOUTS
    }

    /// Whether this is a Redis Cluster (keys spread over primaries) rather than one primary.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.kind, LinkKind::Cluster { .. })
    }

    /// The shared connection for ordinary commands (not blocking ones). Boxed: every store
    /// call awaits it, and its type would otherwise be nested into each of theirs.
    pub(crate) fn commands(&self) -> BoxFuture<'_, RedisResult<Conn>> {
        match &self.kind {
            LinkKind::Single { commands, .. } => {
                Box::pin(std::future::ready(Ok(Conn::Managed(commands.clone()))))
            }
            LinkKind::Cluster {
                client, commands, ..
            } => Box::pin(async move {
                let client = ClusterClient::clone(client);
                let connect = async move { client.get_async_connection().await };
                let (generation, conn) = commands.get(connect, self.connect_limit()).await?;
                Ok(Conn::Cluster { generation, conn })
            }),
            LinkKind::Sentinel(links) => {
                Box::pin(links.primary(self.timeout, self.connect_limit()))
            }
        }
    }

    /// Reports that a command on `conn` failed with `error`: a Sentinel-reported primary that
    /// is gone or demoted is forgotten, so the next command asks the Sentinels again; a timeout
    /// is [`Links::stalled`]. The other forms recover by themselves.
    pub(crate) fn failed(&self, conn: &Conn, error: &RedisError) {
        if error.is_timeout() {
            return self.stalled(conn);
        }
        if let (LinkKind::Sentinel(links), Conn::Direct { generation, .. }) = (&self.kind, conn)
            && (error.is_unrecoverable_error()
                || error.is_io_error()
                || error.is_connection_dropped()
                || error.code() == Some("READONLY"))
        {
            links.primary.forget(*generation);
        }
    }

    /// Reports that a command on `conn` got no answer in time (within the command timeout, or
    /// the connection's own reply timeout): a shared
    /// cluster or Sentinel connection is replaced by the next command (see the module docs). A
    /// single server's connection manager reconnects by itself.
    pub(crate) fn stalled(&self, conn: &Conn) {
        let replaced = match (&self.kind, conn) {
            (LinkKind::Cluster { commands, .. }, Conn::Cluster { generation, .. }) => {
                commands.forget(*generation)
            }
            (LinkKind::Sentinel(links), Conn::Direct { generation, .. }) => {
                links.primary.forget(*generation)
            }
            _ => false,
        };
        if replaced {
            tracing::warn!(
                timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                "a Redis command got no answer in time; the shared connection is replaced"
            );
        }
    }

    /// A connection of its own, without a response timeout, for a command that blocks on
    /// purpose (`XREAD BLOCK`); the caller bounds it.
    pub(crate) async fn dedicated(&self) -> RedisResult<Conn> {
        let config = timed(self.timeout).set_response_timeout(None);
        match &self.kind {
            LinkKind::Single { client, .. } => Ok(Conn::Direct {
                generation: 0,
                conn: client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            }),
            LinkKind::Cluster { client, .. } => {
                let config = ClusterConfig::new().set_connection_timeout(self.timeout);
                Ok(Conn::Cluster {
                    generation: 0,
                    conn: client.get_async_connection_with_config(config).await?,
                })
            }
            LinkKind::Sentinel(links) => {
                let client = links.primary_client().await?;
                Ok(Conn::Direct {
                    generation: 0,
                    conn: client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                })
            }
        }
    }

    /// A client for one node to subscribe on, tried in turn by the caller: the server, each
    /// cluster node (a message published on any node reaches subscribers on every node), or
    /// the current primary.
    pub(crate) async fn subscription_clients(&self) -> RedisResult<Vec<Client>> {
        match &self.kind {
            LinkKind::Single { client, .. } => Ok(vec![client.clone()]),
            LinkKind::Cluster { nodes, .. } => nodes
                .iter()
                .map(|node| Client::open(node.as_str()))
                .collect(),
            LinkKind::Sentinel(links) => Ok(vec![links.primary_client().await?]),
        }
    }

    /// A client for each primary, for what must visit every node (`SCAN`); one for the single
    /// and Sentinel forms.
    pub(crate) async fn primaries(&self) -> RedisResult<Vec<Client>> {
        match &self.kind {
            LinkKind::Single { client, .. } => Ok(vec![client.clone()]),
            LinkKind::Sentinel(links) => Ok(vec![links.primary_client().await?]),
            LinkKind::Cluster { nodes, .. } => {
                let mut last = None;
                for node in nodes {
                    match cluster_primaries(node, self.timeout).await {
                        Ok(primaries) => return Ok(primaries),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    RedisError::from((redis::ErrorKind::Client, "no cluster node listed"))
                }))
            }
        }
    }
}

impl SentinelLinks {
    async fn primary(&self, timeout: Duration, limit: Duration) -> RedisResult<Conn> {
        let sentinels = self.sentinels.clone();
        let connect = async move {
            let client = sentinels.lock().await.async_get_client().await?;
            client
                .get_multiplexed_async_connection_with_config(&timed(timeout))
                .await
        };
        let (generation, conn) = self.primary.get(connect, limit).await?;
        Ok(Conn::Direct { generation, conn })
    }

    /// A client for the primary the Sentinels report now.
    async fn primary_client(&self) -> RedisResult<Client> {
        self.sentinels.lock().await.async_get_client().await
    }
}

/// Connection settings with `timeout` on connecting and on every reply.
pub(super) fn timed(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}

fn sentinel_client(target: &SentinelTarget) -> RedisResult<SentinelClient> {
    let addresses: Vec<ConnectionAddr> = target
        .sentinels
        .iter()
        .map(|url| {
            url.as_str()
                .into_connection_info()
                .map(|info| info.addr().clone())
        })
        .collect::<RedisResult<_>>()?;
    let mut builder =
        SentinelClientBuilder::new(addresses, &target.service, SentinelServerType::Master)?
            .set_client_to_redis_db(target.db);
    if let Some(username) = &target.username {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = &target.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if target.tls {
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(TlsMode::Secure);
    }
    builder.build()
}

/// The primaries a cluster node reports (`CLUSTER NODES`), each as a client with the seed
/// node's scheme and credentials.
async fn cluster_primaries(seed: &str, timeout: Duration) -> RedisResult<Vec<Client>> {
    let client = Client::open(seed)?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&timed(timeout))
        .await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await?;
    let info = client.get_connection_info();
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serving = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "handshake");
            // `ip:port@cport[,hostname]`
            let address = fields.get(1)?.split('@').next()?;
            let (host, port) = address.rsplit_once(':')?;
            let port = port.parse::<u16>().ok()?;
            serving.then(|| (host.to_owned(), port))
        })
        .map(|(host, port)| {
            let addr = match info.addr() {
                ConnectionAddr::TcpTls {
                    insecure,
                    tls_params,
                    ..
                } => ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: *insecure,
                    tls_params: tls_params.clone(),
                },
                _ => ConnectionAddr::Tcp(host, port),
            };
            Client::open(info.clone().set_addr(addr))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    /// A failure on an old connection never drops the one that replaced it.
    #[tokio::test]
    async fn a_connection_is_forgotten_only_by_its_own_generation() {
        let shared = Replaceable::<u32>::new();
        let (first, conn) = shared.get(async { Ok(7) }, LIMIT).await.unwrap();
        assert_eq!(conn, 7);
        assert_eq!(
            shared.get(async { Ok(8) }, LIMIT).await.unwrap(),
            (first, 7)
        );
        assert!(shared.forget(first));
        let (second, conn) = shared.get(async { Ok(9) }, LIMIT).await.unwrap();
        assert_eq!(conn, 9);
        assert!(!shared.forget(first), "an old generation's failure");
        assert_eq!(shared.current(), Some((second, 9)));
    }

    /// A connection slower than the command that asked for it is still made, for the next.
    #[tokio::test(start_paused = true)]
    async fn a_connection_is_made_even_when_its_caller_gave_up() {
        let shared = Replaceable::<u32>::new();
        let slow = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(5)
        };
        let gave_up = tokio::time::timeout(Duration::from_secs(1), shared.get(slow, LIMIT)).await;
        assert!(gave_up.is_err());
        let (_, conn) = shared.get(async { Ok(6) }, LIMIT).await.unwrap();
        assert_eq!(conn, 5, "the one begun earlier");
    }

    #[test]
    fn a_plain_url_is_one_server() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://u:p@h:6380/2",
            "redis+unix:///tmp/r.sock",
        ] {
            assert_eq!(
                Deployment::parse(url),
                Ok(Deployment::Single(url.to_owned()))
            );
        }
    }

    #[test]
    fn a_cluster_url_lists_its_seed_nodes_with_the_credentials_on_each() {
        assert_eq!(
            Deployment::parse("redis+cluster://u:s3cret@10.0.0.1:6379,10.0.0.2:7000"),
            Ok(Deployment::Cluster(vec![
                "redis://u:s3cret@10.0.0.1:6379/".to_owned(),
                "redis://u:s3cret@10.0.0.2:7000/".to_owned(),
            ]))
        );
        let tls = Deployment::parse("rediss+cluster://h:1").unwrap();
        assert_eq!(tls, Deployment::Cluster(vec!["rediss://h:1/".to_owned()]));
        assert!(tls.uses_tls());
    }

    #[test]
    fn a_sentinel_url_names_its_sentinels_service_and_database() {
        assert_eq!(
            Deployment::parse("redis+sentinel://:p%40ss@s1:26379,s2:26380/mymaster/3"),
            Ok(Deployment::Sentinel(SentinelTarget {
                sentinels: vec!["redis://s1:26379".to_owned(), "redis://s2:26380".to_owned()],
                service: "mymaster".to_owned(),
                db: 3,
                username: None,
                password: Some("p@ss".to_owned()),
                tls: false,
            }))
        );
    }

    #[test]
    fn malformed_node_lists_name_the_fix() {
        let cases = [
            ("redis+cluster://h1:6379,,h2:6379", "separated by commas"),
            ("redis+cluster://h1", "without a port"),
            ("redis+cluster://h1:6379/2", "only database 0"),
            ("redis+sentinel://s1:26379", "names no service"),
            ("redis+sentinel://s1:26379/m/x", "must be a number"),
        ];
        for (url, words) in cases {
            let e = Deployment::parse(url).unwrap_err();
            assert!(e.contains(words), "{url}: {e}");
        }
    }
}
