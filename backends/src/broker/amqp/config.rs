//! What an [`super::AmqpBroker`] needs to know, checked once before anything touches the network,
//! and the one place that knows how to show the broker URL without its password (SPEC R3).

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
    /// `amqp://user:password@host:port/vhost` or `amqps://…`. Never logged with its password.
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
    /// next bucket. Default 1 s, 5 s, 30 s, 2 min, 10 min. Whole milliseconds, at least 1 ms.
    pub delay_buckets: Vec<Duration>,
    /// Shown in RabbitMQ's connection list (`rabbitmqctl list_connections client_properties`).
    /// Default `verdict`.
    pub connection_name: String,
    /// How long a publish waits for the connection to come back during an outage before it
    /// fails with [`BrokerError::Connect`]. Default 30 s.
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
            delay_buckets: [1, 5, 30, 120, 600]
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

    /// Rejects settings that would produce invalid or surprising AMQP names and arguments.
    pub(super) fn validate(&self) -> Result<(), BrokerError> {
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
                "delay_buckets is empty; configure at least one delay (default 1s, 5s, 30s, 2m, \
                 10m)"
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
        Ok(())
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
        assert_eq!(AmqpConfig::new("amqp://h").validate(), Ok(()));
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
}
