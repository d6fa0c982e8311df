//! The chaos suite's own RabbitMQ node and Redis server, never the shared ones: the suite stops,
//! kills and restarts them mid-run. They live in `verdict_testkit::services`, shared with the
//! other tests that need private services; each is killed when its guard drops, however the test
//! ends.

pub use verdict_testkit::services::{PrivateRabbit, PrivateRedis};
