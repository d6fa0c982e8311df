//! The exchanges, queues and bindings verdict uses on RabbitMQ, declared idempotently by whichever
//! process starts first, always with the same arguments (SPEC Q1).
//!
//! ```text
//!  publish(Stages(p)) ─▶ {prefix}.stages (direct) ─ interactive ─▶ {prefix}.stages.interactive
//!                                                 ─ bulk ────────▶ {prefix}.stages.bulk
//!                                                 ─ results ─────▶ {prefix}.results (exchange)
//!  publish(Results) ───▶ {prefix}.results (direct) ─ results ─────▶ {prefix}.results (queue)
//!  publish_delayed ────▶ {prefix}.delay (headers, verdict-delay-ms) ───▶ {prefix}.delay.<ms>
//!                         … TTL expires: dead-lettered to {prefix}.stages, routing key kept
//!  poison / dead_letter ▶ {prefix}.dlx (fanout) ─────────────────────▶ {prefix}.dead
//! ```
//!
//! Delay queues dead-letter to one exchange, `{prefix}.stages`; the exchange-to-exchange binding
//! `results` from it to `{prefix}.results` is what lets a delayed result find its queue too.
//! Every queue is a durable quorum queue. Work and delay queues dead-letter at-least-once, which
//! RabbitMQ only allows with `x-overflow=reject-publish`.

use lapin::options::QueueDeclareOptions;
use lapin::options::{ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Connection, ExchangeKind};
use verdict_proto::wire::Priority;

use super::config::AmqpConfig;
use crate::broker::{BrokerError, Route};

/// The header that selects a delay queue on the `{prefix}.delay` headers exchange. Not `x-…`:
/// a headers exchange ignores binding arguments starting with `x-` (unless `x-match` is
/// `all-with-x`), so such a binding would match every message and copy it into every bucket.
pub(super) const DELAY_HEADER: &str = "verdict-delay-ms";

/// The header earlier versions bound the delay queues with; their bindings matched every message
/// and are removed when the topology is declared.
const LEGACY_DELAY_HEADER: &str = "x-verdict-delay-ms";

/// Every name and argument of one deployment's topology.
#[derive(Debug, Clone)]
pub(super) struct Topology {
    prefix: String,
    delivery_limit: u32,
    /// Sorted, deduplicated.
    delay_buckets_ms: Vec<u64>,
}

impl Topology {
    pub(super) fn new(config: &AmqpConfig) -> Topology {
        let mut delay_buckets_ms: Vec<u64> = config
            .delay_buckets
            .iter()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .collect();
        delay_buckets_ms.sort_unstable();
        delay_buckets_ms.dedup();
        Topology {
            prefix: config.prefix.clone(),
            delivery_limit: config.delivery_limit,
            delay_buckets_ms,
        }
    }

    pub(super) fn stages_exchange(&self) -> String {
        format!("{}.stages", self.prefix)
    }

    pub(super) fn results_exchange(&self) -> String {
        format!("{}.results", self.prefix)
    }

    pub(super) fn delay_exchange(&self) -> String {
        format!("{}.delay", self.prefix)
    }

    pub(super) fn dead_letter_exchange(&self) -> String {
        format!("{}.dlx", self.prefix)
    }

    pub(super) fn dead_letter_queue(&self) -> String {
        format!("{}.dead", self.prefix)
    }

    /// The exchange a route is published to.
    pub(super) fn exchange(&self, route: Route) -> String {
        match route {
            Route::Stages(_) => self.stages_exchange(),
            Route::Results => self.results_exchange(),
            Route::DeadLetters => self.dead_letter_exchange(),
        }
    }

    pub(super) fn queue(&self, route: Route) -> String {
        match route {
            Route::Stages(Priority::Interactive) => format!("{}.stages.interactive", self.prefix),
            Route::Stages(Priority::Bulk) => format!("{}.stages.bulk", self.prefix),
            Route::Results => format!("{}.results", self.prefix),
            Route::DeadLetters => self.dead_letter_queue(),
        }
    }

    pub(super) fn delay_queue(&self, millis: u64) -> String {
        format!("{}.delay.{millis}", self.prefix)
    }

    /// Every delay queue's name.
    pub(super) fn delay_queues(&self) -> Vec<String> {
        self.delay_buckets_ms
            .iter()
            .map(|ms| self.delay_queue(*ms))
            .collect()
    }

    /// The bucket a delay goes to ([`crate::broker::bucket_at_least`]).
    pub(super) fn bucket_for(&self, delay_ms: u64) -> u64 {
        crate::broker::bucket_at_least(&self.delay_buckets_ms, delay_ms)
    }

    /// The longest bucket within a limit ([`crate::broker::bucket_at_most`]).
    pub(super) fn bucket_within(&self, limit_ms: u64) -> u64 {
        crate::broker::bucket_at_most(&self.delay_buckets_ms, limit_ms)
    }

    /// Declares everything; safe to run any number of times from any number of processes with
    /// the same settings. Runs on its own channel, because a refused declaration closes the
    /// channel it was made on.
    pub(super) async fn declare(
        &self,
        connection: &Connection,
        config: &AmqpConfig,
    ) -> Result<(), BrokerError> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| BrokerError::Closed(config.scrub(&format!("open a channel: {e}"))))?;
        let result = self.declare_on(&channel).await;
        // A refused declaration has already closed the channel; closing it again only fails.
        let _ = channel
            .close(200, ShortString::from("topology declared"))
            .await;
        result
    }

    async fn declare_on(&self, channel: &lapin::Channel) -> Result<(), BrokerError> {
        let stages = self.stages_exchange();
        let results = self.results_exchange();
        let delay = self.delay_exchange();
        let dlx = self.dead_letter_exchange();

        exchange(channel, &stages, ExchangeKind::Direct).await?;
        exchange(channel, &results, ExchangeKind::Direct).await?;
        exchange(channel, &delay, ExchangeKind::Headers).await?;
        exchange(channel, &dlx, ExchangeKind::Fanout).await?;

        let dead = self.dead_letter_queue();
        queue(channel, &dead, quorum()).await?;
        bind(channel, &dead, &dlx, "", FieldTable::default()).await?;

        for (route, key) in [
            (Route::Stages(Priority::Interactive), "interactive"),
            (Route::Stages(Priority::Bulk), "bulk"),
            (Route::Results, "results"),
        ] {
            let name = self.queue(route);
            queue(channel, &name, self.work_queue_arguments()).await?;
            bind(
                channel,
                &name,
                &self.exchange(route),
                key,
                FieldTable::default(),
            )
            .await?;
        }
        channel
            .exchange_bind(
                name(&results)?,
                name(&stages)?,
                ShortString::from("results"),
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| refused("exchange binding", &format!("{stages} → {results}"), &e))?;

        for millis in &self.delay_buckets_ms {
            let name = self.delay_queue(*millis);
            queue(channel, &name, self.delay_queue_arguments(*millis)).await?;
            bind(channel, &name, &delay, "", selector(DELAY_HEADER, *millis)).await?;
            channel
                .queue_unbind(
                    self::name(&name)?,
                    self::name(&delay)?,
                    ShortString::from(""),
                    selector(LEGACY_DELAY_HEADER, *millis),
                )
                .await
                .map_err(|e| refused("binding removal", &format!("{delay} → {name}"), &e))?;
        }
        Ok(())
    }

    /// Stage and result queues: poison messages go to the dead-letter exchange after
    /// `delivery_limit` redeliveries, without a window where they could be lost.
    fn work_queue_arguments(&self) -> FieldTable {
        let mut args = self.dead_lettering(&self.dead_letter_exchange());
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(self.delivery_limit)),
        );
        args
    }

    /// Delay queues have no consumers: messages wait out the TTL, then dead-letter back to the
    /// work exchange under their original routing key.
    fn delay_queue_arguments(&self, millis: u64) -> FieldTable {
        let mut args = self.dead_lettering(&self.stages_exchange());
        args.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(i64::try_from(millis).unwrap_or(i64::MAX)),
        );
        args
    }

    fn dead_lettering(&self, target: &str) -> FieldTable {
        let mut args = quorum();
        args.insert("x-dead-letter-exchange".into(), string(target));
        args.insert("x-dead-letter-strategy".into(), string("at-least-once"));
        args.insert("x-overflow".into(), string("reject-publish"));
        args
    }
}

/// The headers-exchange binding arguments that select the bucket of `millis`.
fn selector(header: &str, millis: u64) -> FieldTable {
    let mut selector = FieldTable::default();
    selector.insert("x-match".into(), string("all"));
    selector.insert(header.into(), string(&millis.to_string()));
    selector
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), string("quorum"));
    args
}

fn string(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

/// Names are validated through the prefix, so this only fails on a bug; still no panic.
fn name(value: &str) -> Result<ShortString, BrokerError> {
    ShortString::try_new(value)
        .map_err(|e| BrokerError::Topology(format!("name {value:?} is not a valid AMQP name: {e}")))
}

async fn exchange(
    channel: &lapin::Channel,
    exchange: &str,
    kind: ExchangeKind,
) -> Result<(), BrokerError> {
    let options = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(name(exchange)?, kind, options, FieldTable::default())
        .await
        .map_err(|e| refused("exchange", exchange, &e))
}

async fn queue(
    channel: &lapin::Channel,
    queue: &str,
    arguments: FieldTable,
) -> Result<(), BrokerError> {
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(name(queue)?, options, arguments)
        .await
        .map(|_| ())
        .map_err(|e| refused("queue", queue, &e))
}

async fn bind(
    channel: &lapin::Channel,
    queue: &str,
    exchange: &str,
    key: &str,
    arguments: FieldTable,
) -> Result<(), BrokerError> {
    channel
        .queue_bind(
            name(queue)?,
            name(exchange)?,
            name(key)?,
            QueueBindOptions::default(),
            arguments,
        )
        .await
        .map_err(|e| refused("binding", &format!("{exchange} → {queue}"), &e))
}

/// A refused declaration names the object and the fix; anything else is a lost channel.
fn refused(what: &str, object: &str, error: &lapin::Error) -> BrokerError {
    if let lapin::ErrorKind::ProtocolError(amqp) = error.kind() {
        if matches!(
            amqp.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)
        ) {
            return BrokerError::Topology(format!(
                "{what} `{object}` already exists with different arguments ({}); another \
                 deployment or an older version declared it. Align prefix, delivery_limit and \
                 delay_buckets with the processes that declared it, or delete it (for a queue: \
                 `rabbitmqctl delete_queue {object}`, which drops its messages) and restart",
                amqp.get_message()
            ));
        }
        return BrokerError::Topology(format!(
            "the broker refused to declare {what} `{object}`: {}; check the user's configure \
             permission on the vhost",
            amqp.get_message()
        ));
    }
    BrokerError::Closed(format!("declare {what} `{object}`: {error}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_delay_goes_to_the_smallest_bucket_that_is_long_enough() {
        let mut config = AmqpConfig::new("amqp://h");
        config.delay_buckets = vec![Duration::from_secs(30), Duration::from_secs(1)];
        let topology = Topology::new(&config);
        assert_eq!(topology.bucket_for(1), 1000);
        assert_eq!(topology.bucket_for(1000), 1000);
        assert_eq!(topology.bucket_for(1001), 30_000);
        assert_eq!(topology.bucket_for(3_600_000), 30_000);
        assert_eq!(topology.bucket_within(29_999), 1000);
        assert_eq!(topology.bucket_within(30_000), 30_000);
        assert_eq!(topology.bucket_within(3_600_000), 30_000);
        assert_eq!(
            topology.bucket_within(1),
            1000,
            "the shortest when none is that short"
        );
    }

    #[test]
    fn names_carry_the_prefix() {
        let mut config = AmqpConfig::new("amqp://h");
        config.prefix = "t1".into();
        let topology = Topology::new(&config);
        assert_eq!(
            topology.queue(Route::Stages(Priority::Bulk)),
            "t1.stages.bulk"
        );
        assert_eq!(topology.queue(Route::Results), "t1.results");
        assert_eq!(topology.delay_queue(5000), "t1.delay.5000");
        assert_eq!(topology.dead_letter_queue(), "t1.dead");
        assert_eq!(topology.queue(Route::DeadLetters), "t1.dead");
        assert_eq!(topology.exchange(Route::DeadLetters), "t1.dlx");
    }
}
