//! What the backend test suites share: waiting with a deadline instead of sleeping, a private,
//! self-cleaning corner of the shared RabbitMQ, and a private Redis to kill and restart. Each test crate uses only part of it.

#![allow(dead_code)]

pub(crate) mod rabbitmq;
pub(crate) mod redis;
pub(crate) mod wait;
