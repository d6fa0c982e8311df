//! The chaos suite's own RabbitMQ and Redis, never the shared ones: the suite stops, kills and
//! restarts them mid-run — a single node of each, or a three-node RabbitMQ cluster and a Redis
//! Cluster. They live in `verdict_testkit::services`, shared with the other tests that need
//! private services; each is killed when its guard drops, however the test ends.

pub(crate) use verdict_testkit::services::{
    PrivateRabbit, PrivateRedis, RabbitCluster, RedisCluster,
};
