//! What an [`super::AmqpBroker`] needs to know, checked once before anything touches the network,
//! and the one place that reads the broker URL: its list of nodes (a RabbitMQ cluster) and how to
//! show it without its password (SPEC R3).

use std::fmt;
use std::time::Duration;

use verdict_proto::redact::REDACTED;

use crate::broker::BrokerError;

/// The longest accepted name prefix: every queue and exchange name is the prefix plus at most
/// ~30 bytes, and AMQP names are limited to 255 bytes.
const MAX_PREFIX_BYTES: usize = 200;

/// Settings of the RabbitMQ broker. Every process of one deployment must use the same `prefix`,
/// `delivery_limit` and `delay_buckets`: they define the shared topology, which RabbitMQ refuses
/// to redeclare with different arguments.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpConfig {
    /// `amqp://user:password@host:port/vhost` or `amqps://…`; a cluster's nodes as a list in the
    /// authority, `amqp://user:password@h1:5672,h2:5672,h3/vhost`, each `host[:port]` (the port
    /// defaults to 5672, or 5671 for `amqps`), all sharing the credentials, vhost and query. The
    /// broker connects to one node at a time and moves on to the next in the list when that one
    /// fails. Never logged with its password.
    pub url: String,
    /// Prefix of every queue and exchange name, so several deployments (or tests) can share one
    /// broker. Default `verdict`. ASCII letters, digits, `.`, `-`, `_`; at most 200 bytes.
    pub prefix: String,
    /// `x-delivery-limit` of the work queues: after this many redeliveries a message is
    /// dead-lettered as poison (RabbitMQ delivers it at most `delivery_limit + 1` times).
    /// Default 5. Set explicitly because RabbitMQ 4.0+ would otherwise default to 20 and 3.x to
    /// unlimited.
    pub delivery_limit: u32,
    /// Delay queues for [`crate::broker::Broker::publish_delayed`]; a delay is rounded up to the
    /// next bucket. Default 1 s, 5 s, 10 s, 30 s, 2 min, 10 min (10 s so that a stage deferred
    /// for a dead worker's 15 s lease comes back in two hops, not five). Whole milliseconds, at
    /// least 1 ms.
    pub delay_buckets: Vec<Duration>,
    /// Shown in RabbitMQ's connection list (`rabbitmqctl list_connections client_properties`).
    /// Default `verdict`.
    pub connection_name: String,
    /// The longest a publish takes: waiting for the connection to come back during an outage
    /// (then [`BrokerError::Connect`]), for RabbitMQ to lift a resource alarm that blocks
    /// publishing ([`BrokerError::Blocked`]) and for the publisher confirm
    /// ([`BrokerError::Unconfirmed`]). Default 30 s.
    pub publish_timeout: Duration,
    /// The longest pause between two reconnection attempts (exponential backoff with jitter,
    /// starting at 100 ms, never giving up). Default 10 s.
    pub reconnect_max_delay: Duration,
    /// Confirm-mode publisher channels per connection, each carrying one unconfirmed message at a
    /// time: how many confirmed publishes one process has in flight. Default 32.
    pub publish_channels: usize,
}

impl AmqpConfig {
    /// The defaults above, for `url`.
    pub fn new(url: impl Into<String>) -> AmqpConfig {
        AmqpConfig {
            url: url.into(),
            prefix: "verdict".to_owned(),
            delivery_limit: 5,
            delay_buckets: [1, 5, 10, 30, 120, 600]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            connection_name: "verdict".to_owned(),
            publish_timeout: Duration::from_secs(30),
            reconnect_max_delay: Duration::from_secs(10),
            publish_channels: 32,
        }
    }

    /// The URL with its password replaced by `[REDACTED]`: the only form of it that may appear in
    /// errors and logs.
    pub fn redacted_url(&self) -> String {
        redact_password(&self.url)
    }

    /// Rejects settings that would produce invalid or surprising AMQP names and arguments, and
    /// reads the URL's nodes: what the broker connects to.
    pub(super) fn validate(&self) -> Result<Vec<Node>, BrokerError> {
        let nodes = nodes(&self.url).map_err(|problem| BrokerError::Url {
            url: self.redacted_url(),
            problem,
        })?;
        let prefix = &self.prefix;
        if prefix.is_empty()
            || prefix.len() > MAX_PREFIX_BYTES
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        {
            return Err(BrokerError::Topology(format!(
                "the name prefix {prefix:?} is not usable; use 1 to {MAX_PREFIX_BYTES} ASCII \
                 letters, digits, '.', '-' or '_' (default \"verdict\")"
            )));
        }
        if self.delivery_limit == 0 {
            return Err(BrokerError::Topology(
                "delivery_limit 0 would dead-letter every message on its first redelivery; \
                 use at least 1 (default 5)"
                    .to_owned(),
            ));
        }
        if self.delay_buckets.is_empty() {
            return Err(BrokerError::Topology(
                "delay_buckets is empty; configure at least one delay (default 1s, 5s, 10s, 30s, \
                 2m, 10m)"
                    .to_owned(),
            ));
        }
        for bucket in &self.delay_buckets {
            if bucket.as_millis() == 0 || bucket.subsec_nanos() % 1_000_000 != 0 {
                return Err(BrokerError::Topology(format!(
                    "delay bucket {bucket:?} is not a whole number of milliseconds of at least \
                     1 ms; queue TTLs are set in milliseconds"
                )));
            }
        }
        if !(1..=1024).contains(&self.publish_channels) {
            return Err(BrokerError::Topology(format!(
                "publish_channels {} is outside 1 to 1024; it is how many confirm-mode channels \
                 carry publishes (default 32)",
                self.publish_channels
            )));
        }
        if self.connection_name.len() > 255 {
            return Err(BrokerError::Topology(
                "connection_name is longer than 255 bytes; shorten it".to_owned(),
            ));
        }
        Ok(nodes)
    }

    /// Replaces the password wherever a broker error might echo it.
    pub(super) fn scrub(&self, text: &str) -> String {
        let text = redact_password(text);
        match password(&self.url) {
            Some(password) if !password.is_empty() => text.replace(password, REDACTED),
            _ => text,
        }
    }
}

impl fmt::Debug for AmqpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpConfig")
            .field("url", &self.redacted_url())
            .field("prefix", &self.prefix)
            .field("delivery_limit", &self.delivery_limit)
            .field("delay_buckets", &self.delay_buckets)
            .field("connection_name", &self.connection_name)
            .field("publish_timeout", &self.publish_timeout)
            .field("reconnect_max_delay", &self.reconnect_max_delay)
            .field("publish_channels", &self.publish_channels)
            .finish()
    }
}

/// One RabbitMQ node of the broker URL.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Node {
    /// `host:port` as written (the port filled in when it was left out): no credentials, so it
    /// may be logged as it is.
    pub(super) address: String,
    /// The URL of this node alone, credentials included, for lapin.
    pub(super) url: String,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address)
    }
}

/// What is wrong with `url` as a broker URL, worded to follow the (redacted) URL in an error
/// message, or `None` when the broker can use it: the configuration's check, before anything
/// connects, and the broker's own reading are the same. The problem never quotes the password.
pub fn url_problem(url: &str) -> Option<String> {
    nodes(url).err()
}

/// An example in every error about the URL, with the node list.
const EXAMPLE: &str = "amqp://user:password@rabbitmq:5672/%2f (a cluster: \
                       amqp://user:password@rabbit-1:5672,rabbit-2:5672,rabbit-3:5672/%2f)";

/// The nodes of a broker URL, each with a URL of its own that lapin reads, in the order given.
/// The problem is worded to follow the URL in an error message, and quotes no credentials.
fn nodes(url: &str) -> Result<Vec<Node>, String> {
    if url.is_empty() {
        return Err(format!("is empty; write a URL such as {EXAMPLE}"));
    }
    if url.chars().any(char::is_whitespace) {
        return Err(format!(
            "contains whitespace; write a URL such as {EXAMPLE}"
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("is not a URL; write one such as {EXAMPLE}"));
    };
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "amqp" => 5672,
        "amqps" => 5671,
        _ => {
            return Err(format!(
                "has scheme `{scheme}`; use amqp or amqps, e.g. {EXAMPLE}"
            ));
        }
    };
    // The same split as `redact_urls`, so what is hidden there is the userinfo here.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    if hosts.is_empty() {
        return Err(format!("has no host, e.g. {EXAMPLE}"));
    }
    let mut nodes: Vec<Node> = Vec::new();
    for written in hosts.split(',') {
        let (host, port) = node(written, default_port)?;
        let address = format!("{host}:{port}");
        if nodes
            .iter()
            .any(|n| n.address.eq_ignore_ascii_case(&address))
        {
            return Err(format!(
                "lists node `{address}` twice; name each node of the cluster once"
            ));
        }
        let url = format!("{scheme}://{userinfo}{address}{tail}");
        // lapin's own reading, so that nothing it would refuse is found only when connecting.
        if let Err(error) = url.parse::<lapin::uri::AMQPUri>() {
            let error = error.replace(&url, &redact_password(&url));
            return Err(format!(
                "cannot be read as an AMQP URL for node `{address}` ({error}); check the \
                 percent-encoding of the user, password and vhost and the query parameters"
            ));
        }
        nodes.push(Node { address, url });
    }
    Ok(nodes)
}

/// One `host[:port]` of the node list.
fn node(written: &str, default_port: u16) -> Result<(&str, u16), String> {
    if written.is_empty() {
        return Err(format!(
            "has an empty entry in its node list; separate nodes with one comma each, e.g. \
             {EXAMPLE}"
        ));
    }
    if written.starts_with('[') {
        // lapin reads only host names and IPv4 addresses: an IPv6 literal would silently
        // become `localhost`.
        return Err(format!(
            "has the IPv6 address `{written}` as a node, which the AMQP client cannot connect to; \
             use a host name that resolves to it"
        ));
    }
    let (host, port) = match written.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    format!("has port `{port}`, which is not a number 1–65535, in node `{written}`")
                })?;
            (host, port)
        }
        None => (written, default_port),
    };
    if host.is_empty() {
        return Err(format!("has no host in node `{written}`, e.g. {EXAMPLE}"));
    }
    if host.contains(['@', '[', ']', ':', '%', '\\']) {
        return Err(format!(
            "has `{host}` as a host, which is not a host name or IPv4 address; write each node \
             as host[:port], e.g. {EXAMPLE}"
        ));
    }
    Ok((host, port))
}

/// The userinfo of the first `scheme://user:password@host` in `url`, split at the first `:`.
fn password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    userinfo.split_once(':').map(|(_, password)| password)
}

/// The credentials of every URL in `text` hidden (the user name stays).
fn redact_password(text: &str) -> String {
    verdict_proto::redact::redact_urls(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let config = AmqpConfig::new("amqps://svc:s3cr%40t@mq.example:5671/prod");
        assert_eq!(
            config.redacted_url(),
            "amqps://svc:[REDACTED]@mq.example:5671/prod"
        );
        assert!(!format!("{config:?}").contains("s3cr"));
        assert_eq!(
            config.scrub("login failed for s3cr%40t at amqps://svc:s3cr%40t@mq.example"),
            "login failed for [REDACTED] at amqps://svc:[REDACTED]@mq.example"
        );
        assert_eq!(
            AmqpConfig::new("amqp://127.0.0.1:5672/%2f").redacted_url(),
            "amqp://127.0.0.1:5672/%2f"
        );
        // A userinfo without a password may be a token in the user position: hidden too.
        assert_eq!(redact_password("amqp://user@h/"), "amqp://[REDACTED]@h/");
    }

    #[test]
    fn defaults_validate_and_bad_settings_say_what_to_do() {
        assert!(AmqpConfig::new("amqp://h").validate().is_ok());
        let mut config = AmqpConfig::new("amqp://h");
        config.prefix = "has space".into();
        let Err(BrokerError::Topology(text)) = config.validate() else {
            panic!("a prefix with a space must be rejected");
        };
        assert!(text.contains("ASCII letters"), "{text}");
        config.prefix = "ok".into();
        config.delay_buckets = vec![Duration::from_micros(1500)];
        assert!(config.validate().is_err());
        config.delay_buckets = vec![];
        assert!(config.validate().is_err());
        config.delay_buckets = vec![Duration::from_secs(1)];
        config.delivery_limit = 0;
        assert!(config.validate().is_err());
    }

    fn addresses(url: &str) -> Vec<String> {
        nodes(url)
            .unwrap_or_else(|problem| panic!("{url}: {problem}"))
            .into_iter()
            .map(|n| n.address)
            .collect()
    }

    #[test]
    fn a_node_list_gives_one_url_per_node_with_the_same_credentials_vhost_and_query() {
        let listed = nodes("amqp://svc:p%40ss@h1:5672,h2:5673,h3/prod%2fa?heartbeat=10").unwrap();
        let urls: Vec<_> = listed.iter().map(|n| n.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "amqp://svc:p%40ss@h1:5672/prod%2fa?heartbeat=10",
                "amqp://svc:p%40ss@h2:5673/prod%2fa?heartbeat=10",
                "amqp://svc:p%40ss@h3:5672/prod%2fa?heartbeat=10",
            ]
        );
        // The address is what logs show: no credentials.
        assert_eq!(format!("{:?}", listed[0]), "h1:5672");
        // One host is a list of one; amqps defaults to 5671; no userinfo is fine.
        assert_eq!(addresses("amqp://rabbit"), ["rabbit:5672"]);
        assert_eq!(
            addresses("AMQPS://u:p@10.0.0.1,10.0.0.2:5999/"),
            ["10.0.0.1:5671", "10.0.0.2:5999"]
        );
        assert_eq!(
            nodes("amqps://u:p@10.0.0.1").unwrap()[0].url,
            "amqps://u:p@10.0.0.1:5671"
        );
        let config = AmqpConfig::new("amqp://guest:guest@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/%2f");
        assert_eq!(config.validate().unwrap().len(), 3);
    }

    #[test]
    fn a_bad_node_list_names_the_problem_and_the_fix() {
        let cases = [
            ("", "is empty; write a URL such as amqp://"),
            ("rabbit", "is not a URL"),
            ("amqp://h 1", "contains whitespace"),
            ("http://rabbit:5672", "has scheme `http`; use amqp or amqps"),
            ("amqp://u:p@/%2f", "has no host"),
            ("amqp://u:p@h1,,h3/", "has an empty entry in its node list"),
            ("amqp://u:p@h1,/", "has an empty entry in its node list"),
            ("amqp://h1:5672,:5673", "has no host in node `:5673`"),
            (
                "amqp://rabbit:56x2",
                "has port `56x2`, which is not a number 1–65535",
            ),
            ("amqp://h1,h2:0", "has port `0`"),
            ("amqp://h1,h2:70000", "has port `70000`"),
            ("amqp://[::1]:5672", "IPv6 address `[::1]:5672`"),
            ("amqp://a:b:5672", "has `a:b` as a host"),
            ("amqp://h1:5672,H1/", "lists node `H1:5672` twice"),
            ("amqp://h1,h1:5672", "lists node `h1:5672` twice"),
        ];
        for (url, expected) in cases {
            let problem = url_problem(url).unwrap_or_else(|| panic!("{url:?} was accepted"));
            assert!(problem.contains(expected), "{url:?}: {problem}");
        }
        assert_eq!(url_problem("amqp://u:p@h1:1,h2:2,h3:3/v"), None);
    }

    #[test]
    fn a_refused_url_never_shows_its_password() {
        let url = "amqp://svc:hunter22@h1:5672,h2:5x/%2f";
        let problem = url_problem(url).unwrap();
        assert!(!problem.contains("hunter22"), "{problem}");
        let config = AmqpConfig::new(url);
        assert_eq!(
            config.redacted_url(),
            "amqp://svc:[REDACTED]@h1:5672,h2:5x/%2f"
        );
        let error = config.validate().unwrap_err();
        let BrokerError::Url {
            url: shown,
            problem,
        } = &error
        else {
            panic!("expected a URL error, got {error:?}");
        };
        assert_eq!(shown, "amqp://svc:[REDACTED]@h1:5672,h2:5x/%2f");
        assert!(problem.contains("has port `5x`"), "{problem}");
        assert!(!error.to_string().contains("hunter22"), "{error}");
        assert!(!format!("{error:?}").contains("hunter22"), "{error:?}");
        // A password that is also written elsewhere in an error is scrubbed there too.
        let config = AmqpConfig::new("amqp://svc:hunter22@h1,h2/%2f");
        assert_eq!(
            config.scrub("h2: login refused for hunter22"),
            "h2: login refused for [REDACTED]"
        );
    }
}
