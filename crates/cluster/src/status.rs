//! A node's role, and the status record each node publishes about itself on `<cluster>.nodes`.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its claim is the log's latest: it commits writes.
    Primary,
    /// Another node is the primary; this one applies the log.
    Follower,
    /// No primary is known yet, or this node is taking over.
    Candidate,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
        }
    }
}

/// What a node says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub id: String,
    pub url: String,
    pub role: String,
    pub epoch: u64,
    pub applied_seq: u64,
    pub applied_index: u64,
    /// Milliseconds since the Unix epoch when the node said this.
    pub at_ms: u64,
    pub kafka_error: Option<String>,
}

/// Milliseconds since the Unix epoch (status timestamps).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A node's role as its status says it.
pub fn role_of(status: &NodeStatus) -> Role {
    match status.role.as_str() {
        "primary" => Role::Primary,
        "follower" => Role::Follower,
        _ => Role::Candidate,
    }
}
