//! How a [`Message`] travels as an AMQP message: persistent, JSON, headers as string fields; and
//! back, with the headers RabbitMQ owns kept out of the application's view.

use std::collections::BTreeMap;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::broker::{BrokerError, DEAD_LETTER_REASON_HEADER, Message};

/// `delivery_mode` 2: the broker writes the message to disk (quorum queues always do; the flag
/// also keeps it durable across any classic hop).
const PERSISTENT: u8 = 2;

const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";

/// Headers RabbitMQ writes itself. They never come back to the application as message headers
/// (the delivery count is a field of [`crate::broker::Delivery`]), and an application never sends
/// them: a copied `x-delivery-count` would make a fresh message look redelivered, and copied
/// `x-first-death-*` values would mislabel a later dead-lettering.
fn broker_owned(name: &str) -> bool {
    name == DELIVERY_COUNT_HEADER
        || name == "x-death"
        || name.starts_with("x-first-death-")
        || name.starts_with("x-last-death-")
        || name == super::topology::DELAY_HEADER
}

/// Properties of every published message; `extra` headers win over the message's own.
pub(super) fn properties(
    message: &Message,
    extra: &[(&str, String)],
) -> Result<BasicProperties, BrokerError> {
    let mut headers = FieldTable::default();
    let own = message
        .headers
        .iter()
        .filter(|(name, _)| !broker_owned(name));
    let extra = extra.iter().map(|(name, value)| (*name, value));
    for (name, value) in own.map(|(n, v)| (n.as_str(), v)).chain(extra) {
        let key = ShortString::try_new(name).map_err(|_| {
            BrokerError::Other(format!(
                "header name `{}…` is longer than AMQP's 255-byte limit; shorten it",
                name.chars().take(40).collect::<String>()
            ))
        })?;
        headers.insert(key, AMQPValue::LongString(LongString::from(value.as_str())));
    }
    Ok(BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type(ShortString::from("application/json"))
        .with_headers(headers))
}

/// The application's view of a received message's headers: text and numbers as strings; tables,
/// arrays and binary values (RabbitMQ's `x-death`) left out.
pub(super) fn headers(properties: &BasicProperties) -> BTreeMap<String, String> {
    let Some(table) = properties.headers() else {
        return BTreeMap::new();
    };
    table
        .inner()
        .iter()
        .filter(|(name, _)| !broker_owned(name.as_str()))
        .filter_map(|(name, value)| Some((name.to_string(), scalar(value)?)))
        .collect()
}

/// One header as text, including the broker's own (`x-first-death-reason`, …).
pub(super) fn raw_header(properties: &BasicProperties, name: &str) -> Option<String> {
    properties
        .headers()
        .as_ref()?
        .inner()
        .get(name)
        .and_then(scalar)
}

/// The application's view of a dead letter's headers: [`headers`], with the reason always in
/// [`DEAD_LETTER_REASON_HEADER`]. A message verdict dead-lettered carries its own; one RabbitMQ
/// dead-lettered (the delivery limit) gets the reason of its latest dead-lettering:
/// `x-last-death-reason` (RabbitMQ 3.13+), else the newest `x-death` entry (which RabbitMQ keeps
/// newest first), else `x-first-death-reason`. A message that waited out a delay queue before
/// reaching its limit has `expired` as its first reason, so the first is the last resort.
pub(super) fn dead_letter_headers(properties: &BasicProperties) -> BTreeMap<String, String> {
    let mut headers = headers(properties);
    if !headers.contains_key(DEAD_LETTER_REASON_HEADER) {
        let reason = raw_header(properties, "x-last-death-reason")
            .or_else(|| newest_death_reason(properties))
            .or_else(|| raw_header(properties, "x-first-death-reason"))
            .unwrap_or_default();
        headers.insert(DEAD_LETTER_REASON_HEADER.to_owned(), reason);
    }
    headers
}

/// The `reason` of the first entry of the `x-death` array.
fn newest_death_reason(properties: &BasicProperties) -> Option<String> {
    let table = properties.headers().as_ref()?;
    let AMQPValue::FieldArray(deaths) = table.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(newest) = deaths.as_slice().first()? else {
        return None;
    };
    newest.inner().get("reason").and_then(scalar)
}

/// Quorum queues add `x-delivery-count` from the first redelivery on; its absence on a quorum
/// queue (all of verdict's queues are) means a first delivery.
pub(super) fn delivery_count(properties: &BasicProperties) -> Option<u32> {
    let Some(table) = properties.headers() else {
        return Some(0);
    };
    match table.inner().get(DELIVERY_COUNT_HEADER) {
        None => Some(0),
        Some(value) => scalar(value).and_then(|text| text.parse().ok()),
    }
}

fn scalar(value: &AMQPValue) -> Option<String> {
    Some(match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.to_string(),
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        AMQPValue::Timestamp(n) => n.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_broker_bookkeeping_stays_out() {
        let mut message = Message {
            body: b"{}".to_vec(),
            headers: BTreeMap::new(),
        };
        message
            .headers
            .insert("traceparent".into(), "00-abc-def-01".into());
        message
            .headers
            .insert(DELIVERY_COUNT_HEADER.into(), "4".into());
        let props = properties(&message, &[("x-extra", "1".into())]).unwrap();
        assert_eq!(props.delivery_mode(), &Some(2));
        let back = headers(&props);
        assert_eq!(
            back.get("traceparent").map(String::as_str),
            Some("00-abc-def-01")
        );
        assert_eq!(back.get("x-extra").map(String::as_str), Some("1"));
        assert!(!back.contains_key(DELIVERY_COUNT_HEADER));
        assert_eq!(delivery_count(&props), Some(0));

        let mut table = FieldTable::default();
        table.insert(DELIVERY_COUNT_HEADER.into(), AMQPValue::LongLongInt(3));
        table.insert("x-death".into(), AMQPValue::FieldArray(Default::default()));
        let props = BasicProperties::default().with_headers(table);
        assert_eq!(delivery_count(&props), Some(3));
        assert!(headers(&props).is_empty());
    }

    #[test]
    fn a_dead_letter_has_its_reason_whoever_dead_lettered_it() {
        let mut own = FieldTable::default();
        own.insert(
            DEAD_LETTER_REASON_HEADER.into(),
            AMQPValue::LongString("not a JSON object".into()),
        );
        own.insert(
            "x-first-death-reason".into(),
            AMQPValue::LongString("expired".into()),
        );
        let headers = dead_letter_headers(&BasicProperties::default().with_headers(own));
        assert_eq!(headers[DEAD_LETTER_REASON_HEADER], "not a JSON object");

        // Delayed first (expired), then over the delivery limit: the newest death counts.
        let death = |reason: &str| {
            let mut entry = FieldTable::default();
            entry.insert("reason".into(), AMQPValue::LongString(reason.into()));
            AMQPValue::FieldTable(entry)
        };
        let mut broker = FieldTable::default();
        broker.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![death("delivery_limit"), death("expired")].into()),
        );
        broker.insert(
            "x-first-death-reason".into(),
            AMQPValue::LongString("expired".into()),
        );
        broker.insert("x-verdict-task".into(), AMQPValue::LongString("t1".into()));
        let headers = dead_letter_headers(&BasicProperties::default().with_headers(broker));
        assert_eq!(headers[DEAD_LETTER_REASON_HEADER], "delivery_limit");
        assert_eq!(headers["x-verdict-task"], "t1");
        assert!(!headers.contains_key("x-first-death-reason"));

        let headers = dead_letter_headers(&BasicProperties::default());
        assert_eq!(headers[DEAD_LETTER_REASON_HEADER], "");
    }

    #[test]
    fn an_overlong_header_name_is_an_error_not_a_panic() {
        let mut message = Message::default();
        message.headers.insert("h".repeat(300), "v".into());
        assert!(matches!(
            properties(&message, &[]),
            Err(BrokerError::Other(_))
        ));
    }
}
