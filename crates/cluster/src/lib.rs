//! Herald's cluster mode (issue 31): replication through a single-partition Kafka log and
//! leadership through a Kafka consumer group. `testing` runs real Kafka brokers for tests and
//! benchmarks.

pub mod testing;
