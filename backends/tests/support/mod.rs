//! What the backend test suites share: waiting with a deadline instead of sleeping, and a private,
//! self-cleaning corner of the shared RabbitMQ. Each test crate uses only part of it.

#![allow(dead_code)]

pub mod rabbitmq;
pub mod wait;
