//! Herald's wire protocol: every message and body that crosses the network, as serde types,
//! and the one table of error codes. The types here are the definition of the contract;
//! `docs/protocol.md` explains it and `testdata/protocol/` holds examples of every message kind
//! that the Rust and the TypeScript tests both check.
//!
//! - [`client`]: WebSocket messages from the client (`auth`, `subscribe`, `unsubscribe`,
//!   `write`), tagged by `op`.
//! - [`server`]: messages to the client (`initial`, `changes`, `reset`, `error`, `heartbeat`,
//!   `auth`, `written`), tagged by `type`, borrowing what they carry.
//! - [`write`]: one write, the commit body and reply (a bulk line is one [`Write`]).
//! - [`query`]: the query body, the SSE parameters, `explain`.
//! - [`admin`]: index, exemption and trigger definitions.
//! - [`event`]: what a trigger function or webhook receives.
//! - [`replies`]: the admin endpoints' answers (index listings, trigger status, dead letters).
//! - [`service`]: the other endpoints' answers (health, collections, document metadata, keys,
//!   rules, acknowledgements).
//! - [`error`]: [`ErrorCode`] (HTTP status, WebSocket close code, retryable) and [`ErrorBody`].
//! - [`decode`]: [`Decode`], which decodes any of them with the stable code a bad one gets.
//!
//! Unknown members are refused by the types (`deny_unknown_fields`). Documents, filters, sorts,
//! projections and updates stay `serde_json::Value`: herald-query parses them with its own
//! codes. Library crates (db, query, storage) know nothing of this crate: the server converts
//! their types into these.

pub mod admin;
pub mod aggregate;
pub mod client;
pub mod decode;
pub mod error;
pub mod event;
pub mod kinds;
pub mod limits;
pub mod query;
pub mod replies;
pub mod server;
pub mod service;
pub mod write;

pub use admin::{
    DeadSelection, ExemptionsBody, IndexBody, IndexField, KeyBody, TriggerBody, Webhook,
};
pub use aggregate::{AggregateBody, AggregateExplain, AggregateReply};
pub use client::{ClientMessage, Subscribe, WriteRequest};
pub use decode::{Decode, ProtocolError};
pub use error::{error_code_rows, ErrorBody, ErrorCode, ErrorCodeRow, ErrorDetail, UnknownCode};
pub use event::{TriggerEvent, WebhookCall};
pub use query::{
    Alternative, Estimate, Explain, PlanDescription, QueryBody, QueryParts, QueryReply,
    SubscribeParams,
};
pub use replies::{
    DeadLetter, DeadLetters, IndexInfo, IndexList, IndexState, TriggerError, TriggerInfo,
    TriggerList, TriggerQueue, TriggerStatus,
};
pub use server::{
    ChangeEvent, EventKind, ServerMessage, WriteError, WrittenFailed, WrittenOk, WrittenResult,
};
pub use service::{
    ClusterStatus, CollectionInfo, CollectionList, DeadPurged, DeadRetried, DocDeleted, DocUpdated,
    DocWritten, ExemptionsSet, GridCell, GridStatus, Health, HealthStatus, IndexDropped,
    KeyCreated, KeyInfo, KeyList, KeyRevoked, NodeRole, NodeStatus, RulesSet, StateDigest,
    TriggerDeleted, WriteRefusal,
};
pub use write::{CommitBody, CommitReply, CommitResult, Write, WriteItem, WriteOp};
