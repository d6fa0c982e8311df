//! The connections to RabbitMQ and their recovery (SPEC Q5). A broker holds two, each in a
//! [`LinkCell`] with a supervisor task of its own that owns the current connection, notices its
//! loss, reconnects with backoff forever (until close) and publishes the new [`Link`] to everyone
//! waiting for it. Every attempt goes through the URL's nodes in turn, starting with the node
//! after the one tried last, so losing a node moves the connection to the next one.
//!
//! Two connections, one for publishing and one for consuming, because of RabbitMQ's resource
//! alarms: a node low on memory or disk blocks every connection that publishes, and lapin then
//! writes nothing at all on it — no acks, no channel opens, no heartbeats. On a connection of
//! their own, consumers keep acknowledging through an alarm, so the queues drain and the alarm
//! can clear. The publishing connection records RabbitMQ's `connection.blocked` and its reason,
//! which publishing waits out (up to its deadline) and [`crate::broker::Broker::pressure`]
//! reports.
//!
//! An explicit loop rather than lapin's `enable_auto_recover`: lapin gives up after a fixed number
//! of attempts, reconnects only to the node it was given and replays only what this connection
//! declared, while a consumer cancelled by the broker (queue deleted) needs the same
//! re-declare-and-consume path anyway. Every channel of a lost connection is dead, so ackers from
//! before the loss report themselves stale (their `ack` returns `Ok(false)`) and the broker
//! redelivers those messages.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::{Stream, StreamExt};
use lapin::types::LongString;
use lapin::{Connection, ConnectionProperties, Event};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Shared;
use super::config::Node;
use crate::broker::BrokerError;

/// How often the supervisor looks at the connection state even without an event: a safety net
/// under lapin's error events, cheap because it reads local state only.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The first pause between two rounds of reconnection attempts.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(100);

/// The longest one node may take to accept a connection (TCP, TLS, AMQP handshake): a node that
/// is unreachable without refusing (a dropped route, a half-dead host) must not hold up the
/// nodes after it in the list.
const NODE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a waiting caller looks at the connection state besides being woken: lapin may know
/// of a loss or an unblock before the supervisor has acted on it.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The publisher channels, delayed publishes and declaring the topology.
    Publishing,
    /// Subscriptions and their acknowledgements, reading dead letters and queue counts.
    Consuming,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Publishing => "publishing",
            Role::Consuming => "consuming",
        })
    }
}

/// One established connection. A new connection is a new `Link` with a higher generation, so
/// holders of the old one can tell they must reopen their channels.
pub(super) struct Link {
    pub(super) generation: u64,
    pub(super) connection: Connection,
    /// The node it is connected to, `host:port`.
    pub(super) node: String,
    /// That node's place in the URL's list.
    pub(super) node_index: usize,
}

impl Link {
    pub(super) fn is_connected(&self) -> bool {
        self.connection.status().connected()
    }
}

/// A connection's events (`connection.blocked` and `unblocked`, errors), read by its supervisor.
type Events = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// A connection just made, before it becomes a [`Link`].
struct Established {
    connection: Connection,
    node: usize,
    events: Events,
}

/// One of the broker's connections over its lifetime: the current [`Link`] and what its
/// supervisor needs.
pub(super) struct LinkCell {
    role: Role,
    /// The current connection; `None` while reconnecting or after close.
    current: watch::Sender<Option<Arc<Link>>>,
    generation: AtomicU64,
    /// Wakes the supervisor when a caller saw a connection error.
    nudge: Notify,
    /// The index of the node the next connection attempt starts with.
    next_node: AtomicUsize,
    /// RabbitMQ's reason for blocking the current connection, from `connection.blocked` until
    /// `connection.unblocked` (or the next connection).
    blocked: watch::Sender<Option<String>>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl LinkCell {
    /// A cell whose first connection attempt starts with node `first_node`.
    pub(super) fn new(role: Role, first_node: usize) -> LinkCell {
        LinkCell {
            role,
            current: watch::Sender::new(None),
            generation: AtomicU64::new(0),
            nudge: Notify::new(),
            next_node: AtomicUsize::new(first_node),
            blocked: watch::Sender::new(None),
            supervisor: Mutex::new(None),
        }
    }

    pub(super) fn current(&self) -> Option<Arc<Link>> {
        self.current.borrow().clone()
    }

    pub(super) fn is_connected(&self) -> bool {
        self.current().is_some_and(|link| link.is_connected())
    }

    /// Asks the supervisor to look at the connection now (a caller saw an error).
    pub(super) fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Why RabbitMQ blocks the current connection, while it does. lapin's own state decides (it
    /// stops writing while blocked); the reason is what RabbitMQ sent with `connection.blocked`.
    pub(super) fn blocked_reason(&self) -> Option<String> {
        let link = self.current()?;
        if !link.connection.status().blocked() {
            return None;
        }
        let reason = self.blocked.borrow().clone();
        Some(reason.unwrap_or_else(|| "RabbitMQ resource alarm".to_owned()))
    }

    /// The next connection attempt starts with node `index`.
    pub(super) fn start_with(&self, index: usize) {
        self.next_node.store(index, Ordering::SeqCst);
    }

    /// Wakes on every `connection.blocked` and `connection.unblocked`.
    pub(super) fn blocked_changes(&self) -> watch::Receiver<Option<String>> {
        self.blocked.subscribe()
    }

    /// Ends this cell's connection: its supervisor first (the caller has cancelled
    /// [`Shared::closing`]), then the connection, within `goodbye`.
    pub(super) async fn close(&self, goodbye: Duration) {
        let supervisor = self
            .supervisor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
        if let Some(link) = self.current.send_replace(None) {
            let close = link.connection.close(200, "verdict shutting down".into());
            let _ = tokio::time::timeout(goodbye, close).await;
        }
    }

    /// Makes `connection` (to node `node`) the current link, as a new generation.
    fn install(&self, connection: Connection, node: usize, nodes: &[Node]) -> Arc<Link> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.blocked.send_replace(None);
        let link = Arc::new(Link {
            generation,
            connection,
            node: nodes
                .get(node)
                .map(|n| n.address.clone())
                .unwrap_or_default(),
            node_index: node,
        });
        self.current.send_replace(Some(Arc::clone(&link)));
        link
    }
}

/// Makes `role`'s first connection and starts its supervisor. Fails when no node accepts it.
pub(super) async fn start(shared: &Arc<Shared>, role: Role) -> Result<Arc<Link>, BrokerError> {
    let Established {
        connection,
        node,
        events,
    } = establish(shared, role).await?;
    let cell = shared.cell(role);
    let link = cell.install(connection, node, &shared.nodes);
    let supervisor = tokio::spawn(supervise(Arc::clone(shared), role, events));
    *cell
        .supervisor
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(supervisor);
    Ok(link)
}

/// One round through the nodes, starting with the one after the node tried last: the first that
/// accepts the connection (and, for publishing, the topology) is connected to. Fails with every
/// node's reason when none does, or at once when the topology is refused (every node would
/// refuse it: it is the cluster's).
async fn establish(shared: &Shared, role: Role) -> Result<Established, BrokerError> {
    let cell = shared.cell(role);
    let attempt = |index: usize| connect_node(shared, role, index);
    match in_turn(&cell.next_node, shared.nodes.len(), attempt).await {
        Ok(established) => Ok(established),
        Err(failures) => {
            let mut reasons = Vec::new();
            for (index, error) in failures {
                let address = shared
                    .nodes
                    .get(index)
                    .map(|n| n.address.as_str())
                    .unwrap_or_default();
                match error {
                    BrokerError::Connect { reason, .. } => {
                        reasons.push(format!("{address}: {reason}"));
                    }
                    refused => return Err(refused),
                }
            }
            let which = if reasons.len() > 1 {
                "no node of the cluster accepted the connection"
            } else {
                "the node did not accept the connection"
            };
            Err(BrokerError::Connect {
                url: shared.config.redacted_url(),
                reason: format!("{which} ({role}): {}", reasons.join("; ")),
            })
        }
    }
}

/// Tries `attempt` on each of `count` nodes in turn, from the node `cursor` names, and leaves
/// `cursor` at the node after the last one tried: the next round starts after the node that was
/// connected to, or that failed, last. Stops at the first success, or at an error other than
/// [`BrokerError::Connect`], which another node would give too. Returns the errors by node index.
async fn in_turn<T, F, Fut>(
    cursor: &AtomicUsize,
    count: usize,
    mut attempt: F,
) -> Result<T, Vec<(usize, BrokerError)>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<T, BrokerError>>,
{
    let mut failures = Vec::new();
    for _ in 0..count {
        let index = cursor.load(Ordering::SeqCst) % count;
        cursor.store((index + 1) % count, Ordering::SeqCst);
        match attempt(index).await {
            Ok(value) => return Ok(value),
            Err(error) => {
                let final_for_all = !matches!(error, BrokerError::Connect { .. });
                failures.push((index, error));
                if final_for_all {
                    break;
                }
            }
        }
    }
    Err(failures)
}

/// Connects to one node and, for publishing, declares the topology there.
async fn connect_node(
    shared: &Shared,
    role: Role,
    index: usize,
) -> Result<Established, BrokerError> {
    let config = &shared.config;
    let Some(node) = shared.nodes.get(index) else {
        return Err(BrokerError::Other(format!(
            "node {index} is not in the broker URL; this is a bug in verdict's broker"
        )));
    };
    let down = |reason: String| BrokerError::Connect {
        url: config.redacted_url(),
        reason: config.scrub(&reason),
    };
    let name = format!("{} {role}", config.connection_name);
    let properties = ConnectionProperties::default().with_connection_name(LongString::from(name));
    let connection = tokio::time::timeout(
        NODE_CONNECT_TIMEOUT,
        Connection::connect(&node.url, properties),
    )
    .await
    .map_err(|_| down(format!("no answer within {NODE_CONNECT_TIMEOUT:?}")))?
    .map_err(|e| down(e.to_string()))?;
    // Listening before anything is sent: lapin passes an event only to listeners that exist.
    let events: Events = Box::pin(connection.events_listener());
    if role == Role::Publishing
        && let Err(error) = shared.topology.declare(&connection, config).await
    {
        let _ = connection.close(200, "topology refused".into()).await;
        return Err(match error {
            BrokerError::Closed(reason) => down(reason),
            refused => refused,
        });
    }
    Ok(Established {
        connection,
        node: index,
        events,
    })
}

impl Shared {
    pub(super) fn cell(&self, role: Role) -> &LinkCell {
        match role {
            Role::Publishing => &self.publishing,
            Role::Consuming => &self.consuming,
        }
    }

    /// `role`'s current link once it is connected; waits through an outage until `deadline` (or
    /// for as long as it takes, without one).
    pub(super) async fn wait_link(
        &self,
        role: Role,
        deadline: Option<Instant>,
    ) -> Result<Arc<Link>, BrokerError> {
        let mut changes = self.cell(role).current.subscribe();
        loop {
            if self.closing.is_cancelled() {
                return Err(BrokerError::Closed(
                    "the broker connection was shut down".to_owned(),
                ));
            }
            let current = changes.borrow_and_update().clone();
            if let Some(link) = current
                && link.is_connected()
            {
                return Ok(link);
            }
            tokio::select! {
                _ = changes.changed() => {}
                // Polled as well: a dead connection may not have been replaced yet.
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
                _ = self.closing.cancelled() => {}
                _ = until(deadline) => {
                    return Err(BrokerError::Connect {
                        url: self.config.redacted_url(),
                        reason: format!(
                            "not reconnected ({role}) within {:?} (publish_timeout); every node \
                             is unreachable or refusing the connection",
                            self.config.publish_timeout
                        ),
                    });
                }
            }
        }
    }

    /// Returns once `link` is not blocked (or no longer connected: the caller then meets the
    /// loss); fails with [`BrokerError::Blocked`] at `deadline`.
    pub(super) async fn wait_unblocked(
        &self,
        link: &Link,
        route: &str,
        deadline: Instant,
    ) -> Result<(), BrokerError> {
        let cell = self.cell(Role::Publishing);
        let mut changes = cell.blocked_changes();
        while link.is_connected() && link.connection.status().blocked() {
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
                _ = self.closing.cancelled() => {
                    return Err(BrokerError::Closed(
                        "the broker connection was shut down".to_owned(),
                    ));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(self.blocked(route));
                }
            }
        }
        Ok(())
    }

    /// The error of a publish to `route` that RabbitMQ held back until the deadline.
    pub(super) fn blocked(&self, route: &str) -> BrokerError {
        let reason = self
            .cell(Role::Publishing)
            .blocked_reason()
            .unwrap_or_else(|| "RabbitMQ resource alarm".to_owned());
        BrokerError::Blocked {
            route: route.to_owned(),
            reason,
        }
    }
}

/// Runs until [`Shared::closing`]: watches `role`'s connection and replaces it when it dies.
async fn supervise(shared: Arc<Shared>, role: Role, mut events: Events) {
    let cell = shared.cell(role);
    loop {
        let Some(link) = cell.current() else {
            return;
        };
        if !watch_connection(&shared, cell, &link, &mut events).await {
            return;
        }
        cell.current.send_replace(None);
        cell.blocked.send_replace(None);
        tracing::warn!(
            url = %shared.config.redacted_url(),
            node = link.node,
            connection = %role,
            generation = link.generation,
            "AMQP connection lost; reconnecting, starting with the next node"
        );
        drop(link);
        let Some(established) = reconnect(&shared, role).await else {
            return;
        };
        events = established.events;
        let link = cell.install(established.connection, established.node, &shared.nodes);
        tracing::info!(
            url = %shared.config.redacted_url(),
            node = link.node,
            connection = %role,
            generation = link.generation,
            "AMQP connection re-established"
        );
    }
}

/// `true` when the connection is gone, `false` when closing was requested first. Records
/// `connection.blocked` and `connection.unblocked` on the way.
async fn watch_connection(
    shared: &Shared,
    cell: &LinkCell,
    link: &Link,
    events: &mut Events,
) -> bool {
    let mut events_open = true;
    loop {
        if !link.is_connected() {
            return true;
        }
        tokio::select! {
            _ = shared.closing.cancelled() => return false,
            _ = cell.nudge.notified() => {}
            event = events.next(), if events_open => match event {
                None => events_open = false,
                Some(Event::ConnectionBlocked(reason)) => {
                    let reason = format!("RabbitMQ resource alarm: {reason}");
                    tracing::warn!(
                        node = link.node,
                        connection = %cell.role,
                        reason,
                        "RabbitMQ blocked the connection: publishing waits until the alarm \
                         clears (free memory or disk on the broker, or raise its watermark)"
                    );
                    cell.blocked.send_replace(Some(reason));
                }
                Some(Event::ConnectionUnblocked) => {
                    tracing::info!(
                        node = link.node,
                        connection = %cell.role,
                        "RabbitMQ unblocked the connection; publishing resumes"
                    );
                    cell.blocked.send_replace(None);
                }
                Some(_) => {}
            },
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
    }
}

/// Rounds through the nodes with backoff between rounds until one accepts, or until closing.
async fn reconnect(shared: &Shared, role: Role) -> Option<Established> {
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(RECONNECT_MIN_DELAY)
        .with_max_delay(shared.config.reconnect_max_delay)
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        if shared.closing.is_cancelled() {
            return None;
        }
        let attempt = tokio::select! {
            attempt = establish(shared, role) => attempt,
            // A connect attempt can hang on an unreachable host; close must not wait for it.
            _ = shared.closing.cancelled() => return None,
        };
        match attempt {
            Ok(established) => return Some(established),
            Err(error) => {
                tracing::warn!(%error, connection = %role, "AMQP reconnection attempt failed");
                let delay = delays.next().unwrap_or(shared.config.reconnect_max_delay);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shared.closing.cancelled() => return None,
                }
            }
        }
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn down() -> BrokerError {
        BrokerError::Connect {
            url: "amqp://h".to_owned(),
            reason: "connection refused".to_owned(),
        }
    }

    /// Runs one round over `count` nodes where the nodes in `up` accept; returns the node
    /// connected to (if any) and the order tried.
    async fn round(
        cursor: &AtomicUsize,
        count: usize,
        up: &[usize],
    ) -> (Option<usize>, Vec<usize>) {
        let tried = Mutex::new(Vec::new());
        let outcome = in_turn(cursor, count, |index| {
            tried.lock().unwrap().push(index);
            let accepts = up.contains(&index);
            async move { if accepts { Ok(index) } else { Err(down()) } }
        })
        .await;
        (outcome.ok(), tried.into_inner().unwrap())
    }

    #[tokio::test]
    async fn nodes_are_tried_in_turn_from_the_one_after_the_last_tried() {
        let cursor = AtomicUsize::new(1);
        // Start-up: node 1 answers at once.
        assert_eq!(round(&cursor, 3, &[0, 1, 2]).await, (Some(1), vec![1]));
        // Node 1 is lost: the next round starts after it.
        assert_eq!(round(&cursor, 3, &[0, 2]).await, (Some(2), vec![2]));
        // Nodes 2 and 0 are down: 0 is tried and passed, 1 answers.
        assert_eq!(round(&cursor, 3, &[1]).await, (Some(1), vec![0, 1]));
        // Every node down: each is tried once, and the next round goes on where this one ended.
        assert_eq!(round(&cursor, 3, &[]).await, (None, vec![2, 0, 1]));
        assert_eq!(round(&cursor, 3, &[1]).await, (Some(1), vec![2, 0, 1]));
        // One node: always that one.
        let single = AtomicUsize::new(0);
        assert_eq!(round(&single, 1, &[]).await, (None, vec![0]));
        assert_eq!(round(&single, 1, &[0]).await, (Some(0), vec![0]));
    }

    #[tokio::test]
    async fn a_refused_topology_is_not_asked_of_the_other_nodes() {
        let cursor = AtomicUsize::new(0);
        let tried = Mutex::new(Vec::new());
        let outcome: Result<(), _> = in_turn(&cursor, 3, |index| {
            tried.lock().unwrap().push(index);
            async move {
                Err(if index == 0 {
                    down()
                } else {
                    BrokerError::Topology("queue exists with other arguments".to_owned())
                })
            }
        })
        .await;
        let failures = outcome.unwrap_err();
        assert_eq!(tried.into_inner().unwrap(), [0, 1]);
        assert!(matches!(failures[1], (1, BrokerError::Topology(_))));
        assert_eq!(cursor.load(Ordering::SeqCst), 2);
    }
}
