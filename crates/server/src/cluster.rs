//! The server's view of the cluster it is part of: a small trait the replication crate
//! (herald-cluster) implements, so the HTTP layer (write forwarding, `minSeq` waits,
//! `GET /v1/cluster`, the trigger dispatcher's role check) compiles and is tested without Kafka.
//!
//! `AppState::cluster` is `None` on a single node: everything behaves as before clusters
//! existed, and `GET /v1/cluster` answers a one-node status ([`single_node_status`]).

use herald_protocol::{ClusterStatus, NodeRole, NodeStatus};
use std::time::Duration;

/// This node's role, as the replication log last told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Commits writes (and runs triggers).
    Primary,
    /// Applies the primary's records; forwards writes to it.
    Follower,
    /// No primary known, or this node is taking over: writes are `unavailable`.
    Candidate,
}

impl Role {
    /// The wire form (`/v1/cluster`).
    pub fn node_role(self) -> NodeRole {
        match self {
            Role::Primary => NodeRole::Primary,
            Role::Follower => NodeRole::Follower,
            Role::Candidate => NodeRole::Candidate,
        }
    }

    /// The value of the `herald_cluster_role` gauge: 0 candidate, 1 follower, 2 primary.
    pub fn gauge(self) -> u8 {
        match self {
            Role::Candidate => 0,
            Role::Follower => 1,
            Role::Primary => 2,
        }
    }
}

/// What the server needs to know of the cluster. Implementations answer from memory (every
/// method is called on request paths and must not block).
pub trait ClusterView: Send + Sync + 'static {
    fn role(&self) -> Role;
    /// The primary's HTTP base URL ("http://127.0.0.1:7071"), when known and not this node.
    fn primary_url(&self) -> Option<String>;
    /// This node's id.
    fn node_id(&self) -> String;
    /// The body of GET /v1/cluster.
    fn status(&self) -> ClusterStatus;
    /// Writes a snapshot of this node's store for a node that starts from it
    /// (`GET /v1/cluster/snapshot`; blocking: called off the async threads).
    fn write_snapshot(&self, out: &mut dyn std::io::Write) -> Result<(), String> {
        let _ = out;
        Err("this node cannot give snapshots".into())
    }
}

/// The node id a single node reports.
pub const SINGLE_NODE_ID: &str = "local";

/// `GET /v1/cluster` on a single node: itself, the primary, with `cluster` null and epoch 0.
pub fn single_node_status(url: String, seq: u64) -> ClusterStatus {
    ClusterStatus {
        cluster: None,
        node_id: SINGLE_NODE_ID.into(),
        epoch: 0,
        primary: Some(SINGLE_NODE_ID.into()),
        nodes: vec![NodeStatus {
            id: SINGLE_NODE_ID.into(),
            url,
            role: NodeRole::Primary,
            applied_seq: seq,
            lag_seqs: 0,
            last_seen_ms: 0,
        }],
        grid: None,
    }
}

/// Longest a read waits for its `minSeq` (and a forwarded write for its own seq) to be applied
/// on this node. Replication lag is normally milliseconds; past this the node is too far
/// behind to serve the read, and says `unavailable` so the client retries (possibly elsewhere).
pub const MIN_SEQ_WAIT: Duration = Duration::from_secs(5);

/// Longest a forwarded write may take, from sending to the primary's last byte. Generous: a
/// `/v1/bulk` body streams through the follower at the client's pace.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest to wait for a connection to the primary.
pub const FORWARD_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The client that forwards writes to the primary (`api::forward`; one per server, so its
/// connections to the primary are pooled).
pub fn forward_client() -> reqwest::Client {
    crate::http_client_builder()
        .connect_timeout(FORWARD_CONNECT_TIMEOUT)
        .timeout(FORWARD_TIMEOUT)
        .build()
        .expect("an HTTP client with default TLS-free settings builds")
}

/// Longest pause between two looks at the applied seq while waiting.
const SEQ_POLL_MAX: Duration = Duration::from_millis(10);

/// Waits until `applied()` reaches `seq` or `bound` passes; whether it was reached.
///
/// Polls with a short, growing pause rather than blocking in `Feed::wait_after`: that wait
/// consumes the feed's `nudge`, which the live-query engine's thread relies on, and it would
/// hold a blocking thread per waiting request. A read that is already satisfied (the usual
/// case, and always on a single node without a `minSeq` ahead of it) returns at once.
pub async fn wait_for(applied: impl Fn() -> u64, seq: u64, bound: Duration) -> bool {
    if applied() >= seq {
        return true;
    }
    let deadline = tokio::time::Instant::now() + bound;
    let mut pause = Duration::from_millis(1);
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return applied() >= seq;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        if applied() >= seq {
            return true;
        }
        pause = (pause * 2).min(SEQ_POLL_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn wait_for_returns_once_the_seq_is_applied_or_the_bound_passes() {
        let seq = Arc::new(AtomicU64::new(3));
        let s = seq.clone();
        let applied = move || s.load(Ordering::Acquire);
        assert!(wait_for(&applied, 3, Duration::ZERO).await);
        assert!(!wait_for(&applied, 4, Duration::from_millis(30)).await);
        let s2 = seq.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            s2.store(9, Ordering::Release);
        });
        assert!(wait_for(&applied, 9, Duration::from_secs(5)).await);
    }

    #[test]
    fn a_single_node_is_its_own_primary() {
        let s = single_node_status("http://127.0.0.1:7070".into(), 5);
        assert_eq!(s.primary.as_deref(), Some(SINGLE_NODE_ID));
        assert_eq!(s.nodes[0].role, NodeRole::Primary);
        assert_eq!(s.nodes[0].applied_seq, 5);
    }
}
