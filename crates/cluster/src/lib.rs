//! Herald's cluster mode: every node runs the same database; one, the primary, commits
//! writes, and each of its storage batches goes through a single-partition Kafka topic that
//! every node reads in the same order and applies. Leadership comes from a Kafka consumer
//! group, fencing from the log itself (`arbiter.rs`). docs/cluster.md has the argument.
//!
//! - `record.rs`: the log's records and their bytes.
//! - `arbiter.rs`: the pure rule every reader applies to them.
//! - `shared.rs`: what a node's threads share, the store's `Replicator`, stepping down.
//! - `node.rs`: starting a node (or bootstrapping it from a snapshot) and its public API.
//! - `reader.rs`: follows the log: applies, promotes, demotes, claims, saves the position.
//! - `election.rs`: the leadership group.
//! - `members.rs`: publishing and reading node statuses (`status.rs`) for `GET /v1/cluster`.
//! - `snapshot.rs`: a store as one file, for a node that starts where the log no longer reaches.
//! - `kafka.rs`: topics and client configurations.
//! - `grid/`: the matching grid across machines (cells, the queries registry, the front end).
//! - `testing.rs`: real Kafka brokers for tests and benchmarks.

pub mod arbiter;
mod election;
pub mod grid;
pub mod kafka;
mod members;
mod node;
mod reader;
pub mod record;
mod shared;
pub mod snapshot;
mod status;
pub mod testing;

pub use members::STATUS_INTERVAL;
pub use node::{Node, StartError};
pub use shared::Role;
pub use status::{now_ms, role_of, NodeStatus};

use std::time::Duration;

/// How a node joins its cluster (`herald serve --cluster ...`).
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Kafka bootstrap servers, `host:port[,host:port...]`.
    pub bootstrap: String,
    /// The cluster's name: the prefix of its topics and groups.
    pub cluster: String,
    /// This node's id, unique in the cluster.
    pub node_id: String,
    /// The HTTP base URL other nodes forward writes to (`http://10.0.0.7:7070`).
    pub url: String,
    /// Replication factor of the topics the cluster creates (existing topics keep theirs).
    pub replication_factor: i32,
    /// The leadership group's session timeout: how long a dead primary goes unnoticed.
    pub session_timeout: Duration,
    /// How long a write may wait for the log before it fails with `unavailable`.
    pub write_timeout: Duration,
    /// The matching grid's shape (`--grid-rows`, `--grid-partitions`): the node then runs
    /// grid cells and its live queries match through the grid (`grid::Grid`).
    pub grid: Option<grid::Shape>,
    /// How long a front end's grid lease lives without renewal: past it, another node removes
    /// the views of a front end that died for good (`grid/lease.rs`). Every node of a cluster
    /// should use the same value.
    pub grid_lease: Duration,
}

impl ClusterOptions {
    pub fn new(bootstrap: &str, cluster: &str, node_id: &str, url: &str) -> ClusterOptions {
        ClusterOptions {
            bootstrap: bootstrap.into(),
            cluster: cluster.into(),
            node_id: node_id.into(),
            url: url.into(),
            replication_factor: 1,
            session_timeout: Duration::from_millis(3000),
            write_timeout: Duration::from_millis(5000),
            grid: None,
            grid_lease: grid::LEASE_DEFAULT,
        }
    }
}
