//! Answers of the other HTTP endpoints: health, the collection listing, the document
//! endpoints' metadata, API keys, rules, and the acknowledgements of admin changes. Each is
//! a small object whose member names are the contract (docs/protocol.md); documents stay
//! `Value`.

use crate::decode::Decode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

macro_rules! decode {
    ($($ty:ident: $what:literal;)*) => {
        $(impl Decode for $ty {
            const WHAT: &'static str = $what;
        })*
    };
}

/// `GET /v1/health`: `{"status":"ok","seq"}`, the last committed seq, and `writes` only while
/// the store refuses writes (reads are still served): the error code writes get now
/// (`storage_full`: the disk is full, writes resume by themselves once space is freed; any
/// other: the store failed and needs a restart) and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub status: HealthStatus,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<WriteRefusal>,
}

/// Why a server refuses writes now (in [`Health`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteRefusal {
    pub code: String,
    pub message: String,
}

/// A serving server is `ok` (one that is not does not answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Ok,
}

/// `GET /v1/collections`: a page of collection names in byte order; `more` when the page is
/// full (ask again with `after` the last name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionList {
    pub collections: Vec<CollectionInfo>,
    pub more: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionInfo {
    pub name: String,
}

/// `PUT /v1/docs/{path}` and `POST /v1/docs/{collection}`: the document's id and new version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocWritten {
    pub id: String,
    pub version: u64,
    pub seq: u64,
}

/// `PATCH /v1/docs/{path}`: the document after the update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocUpdated {
    pub doc: Option<Value>,
    pub version: u64,
    pub seq: u64,
}

/// `DELETE /v1/docs/{path}`: whether a document was there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocDeleted {
    pub deleted: bool,
    pub seq: u64,
}

/// An API key as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyInfo {
    pub id: String,
    pub name: String,
    /// `admin` or `service`.
    pub role: String,
    /// Milliseconds since the epoch.
    pub created_at: u64,
}

/// `POST /v1/keys`: the new key with its secret, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyCreated {
    pub id: String,
    pub name: String,
    pub role: String,
    pub created_at: u64,
    pub key: String,
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

/// `DELETE /v1/keys/{id}`: the id revoked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRevoked {
    pub revoked: String,
}

/// `PUT /v1/rules`: how many rules the stored set has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesSet {
    pub rules: u64,
}

/// `DELETE /v1/indexes/{name}`: `{"dropped":true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexDropped {
    pub dropped: bool,
}

/// `PUT /v1/indexes/exemptions`: `{"ok":true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExemptionsSet {
    pub ok: bool,
}

/// `DELETE /v1/triggers/{name}`: the name deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerDeleted {
    pub deleted: String,
}

/// `POST /v1/triggers/{name}/dead/retry`: how many dead letters went back into the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadRetried {
    pub retried: u64,
}

/// `POST /v1/triggers/{name}/dead/purge`: how many dead letters were deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadPurged {
    pub purged: u64,
}

/// `GET /v1/cluster`: the cluster as this node sees it. A single node (no cluster configured)
/// answers one node, itself, as `primary`, with `cluster` null and `epoch` 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The cluster's name (`--cluster`), `null` for a single node.
    pub cluster: Option<String>,
    /// This node's id.
    pub node_id: String,
    /// The current primary's epoch (0 before any claim, and for a single node).
    pub epoch: u64,
    /// The primary's node id, `null` when none is known.
    pub primary: Option<String>,
    pub nodes: Vec<NodeStatus>,
    /// The matching grid across machines (`--grid-rows` / `--grid-partitions` with
    /// `--cluster`), `null` without one.
    pub grid: Option<GridStatus>,
}

/// The matching grid as one node sees it (docs/cluster.md, "Matching grid").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GridStatus {
    /// Query partitions.
    pub rows: u32,
    /// Write partitions.
    pub partitions: u32,
    /// The cells this node runs.
    pub running: Vec<GridCell>,
    /// The cells this node's subscriptions wait on (every cell of the rows holding its views).
    pub waiting: Vec<GridCell>,
}

/// One cell of [`GridStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GridCell {
    pub row: u32,
    pub part: u32,
    /// The seq the cell has matched (for a cell waited on: claimed for this node's views).
    pub seq: u64,
    /// How many seqs it is behind this node's applied seq.
    pub lag_seqs: u64,
    /// Views it matches (for a cell waited on: this node's views in its row).
    pub views: u64,
    /// The node that runs it (for a cell waited on: the last one heard from), when known.
    pub node: Option<String>,
}

/// One node of [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeStatus {
    pub id: String,
    /// Its HTTP base URL (`http://host:port`).
    pub url: String,
    pub role: NodeRole,
    /// The last seq it applied (as last heard).
    pub applied_seq: u64,
    /// How many seqs it is behind the primary.
    pub lag_seqs: u64,
    /// How long ago this node last heard of it, in milliseconds (0 for itself).
    pub last_seen_ms: u64,
}

/// `GET /v1/cluster/digest`: a digest of every table of this node's store and the replication
/// index and seq it is at. Two nodes at the same index must have the same digest; tests and
/// operators compare them (it reads the whole store: not for frequent polling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StateDigest {
    /// The replication index of the last batch the store holds (0 on a single node).
    pub index: u64,
    /// The last committed seq it holds.
    pub seq: u64,
    /// 16 hex digits.
    pub digest: String,
}

/// A node's role in [`NodeStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    Primary,
    Follower,
    /// No primary known, or taking over.
    Candidate,
}

decode! {
    ClusterStatus: "a cluster status";
    StateDigest: "a state digest";
    Health: "a health answer";
    CollectionList: "a collection listing";
    DocWritten: "a document write's answer";
    DocUpdated: "a document update's answer";
    DocDeleted: "a document delete's answer";
    KeyInfo: "an API key";
    KeyCreated: "a created API key";
    KeyList: "an API key listing";
    KeyRevoked: "a key revocation's answer";
    RulesSet: "a rules answer";
    IndexDropped: "an index drop's answer";
    ExemptionsSet: "an exemptions answer";
    TriggerDeleted: "a trigger deletion's answer";
    DeadRetried: "a dead-letter retry's answer";
    DeadPurged: "a dead-letter purge's answer";
}
