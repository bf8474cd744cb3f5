//! The matching grid across machines: cluster nodes run the cells of a Q x W grid of live-query
//! matching (query partitions x write partitions), assigned by Kafka consumer groups, and the
//! front ends (the nodes holding subscriptions) collect their views' matches from a topic.
//! docs/cluster.md ("Matching grid") has the argument.
//!
//! - `wire.rs`: the records on the grid's topics.
//! - `coverage.rs`: the front end's pure release rule (when a seq's matches are complete).

pub mod coverage;
pub mod wire;
