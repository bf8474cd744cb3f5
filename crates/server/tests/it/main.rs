//! The server's integration tests, one test binary (each binary links the whole crate graph,
//! and linking is most of an incremental test build): the HTTP API (`api/`), authentication and
//! rules (`auth/`), the authorization model test (`auth_model.rs`), a node of a cluster against a
//! fake cluster view (`cluster.rs`), query cursors (`cursors.rs`; on collection groups
//! `group_cursors.rs`), WebSocket ingestion
//! (`ingest.rs`), live queries (`live.rs`) and triggers (`triggers.rs`), over the harness in
//! `common/`. The crash tests (`tests/crash/`, `tests/trigger_crash.rs`) stay their own
//! binaries: they kill processes and have their own gating.
//!
//! The tests of all modules run in parallel threads of this one process: nothing here may set
//! environment variables or other process-wide state.

mod api;
mod auth;
mod auth_model;
mod cluster;
mod common;
mod cursors;
mod group_cursors;
mod hostile;
mod ingest;
mod live;
mod triggers;
