//! Herald's database layer: collections of JSON documents addressed by path, with versions,
//! automatic and composite indexes, a planner, atomic multi-document commits and the commit log.
//!
//! It sits between the pure query core (`herald-query`) and the byte-table store
//! (`herald-storage`): it is the only crate that knows both documents and storage. It knows
//! nothing of HTTP or async runtimes; callers wait on storage tickets (blocking or `.await`).
//!
//! # Modules, top to bottom
//!
//! Each module uses only modules of lower layers (a test, `layering.rs`, reads this list and
//! the `crate::` paths of the sources and fails on any other use, so there are no import
//! cycles):
//!
//! 6. `live`: the live-query engine (views, predicate index, window diffs, resume), which
//!    reads the feed and the commit log through `Db`.
//! 5. `db`: [`Db`], one database: open, reads and queries (`mod.rs`), committing
//!    (`submit.rs`), indexes and their builds (`indexes.rs`), trigger and task operations
//!    (`triggers.rs`), collections, system records; and `check`: `herald check`'s database
//!    half (documents against index entries, offline).
//! 4. `write`: the write path: [`Write`]s validated on the caller's thread (`prepare`), then
//!    applied as named steps in one storage job (`apply.rs`); `exec`: a plan run on a
//!    snapshot; and `decoders`: the commit-log codec as pure functions over bytes (fuzzing).
//! 3. `commitlog`: the commit-log record codec, appends, reads by seq ([`LogRead`]) and
//!    pruning; `feed`: the in-memory ring of recent commits for live queries; `triggers`:
//!    definitions, matching and the task queues the write path fills; `mutations`: client
//!    mutation ids; `known`: what a trigger task reads before its commit is queued;
//!    `planner`: choosing a plan.
//! 2. `txn`: the transaction vocabulary ([`Write`], [`Transaction`], [`QueueFull`],
//!    [`CommitOutcome`], [`Change`], [`Guard`]); `indexer`: a document's index entries.
//! 1. `names`: path and id rules; `layout`: the byte formats of documents and index entries;
//!    `catalog`: the index catalog.
//! 0. `error`: [`DbError`]; `clock`: [`Clock`], the wall clock commits and ages read.
//!
//! The write path runs inside the storage layer's group-commit writer, so every commit is one
//! storage job: preconditions, documents, index entries, the next `seq`, the commit record,
//! all-or-nothing. Reads (`planner/`, `exec/`) run on one storage snapshot and report the seq they
//! reflect. "The commit log no longer reaches back" is an expected outcome
//! ([`LogRead::Gone`], or [`DbError::LogGone`] where it must be an error), never `corrupt`.

mod catalog;
pub mod check;
mod clock;
mod commitlog;
mod db;
pub mod decoders;
mod error;
mod exec;
mod feed;
mod indexer;
mod known;
mod layout;
pub mod live;
mod mutations;
mod names;
mod planner;
pub mod triggers;
mod txn;
mod write;

#[cfg(test)]
mod layering;

pub use catalog::{CompositeIndex, IndexField, IndexState};
pub use clock::{Advanced, Clock};
pub use commitlog::{LogRead, LOG_PRUNE_PER_COMMIT_MAX, LOG_PRUNE_RESCAN_EVERY};
pub use db::{
    AggregateOutcome, Db, DbOptions, IndexListing, PlanResult, QueryOutcome, StateDigest,
    StoredDoc, AGGREGATE_DOCS_MAX, BUILD_CHUNK_DOCS, COLLECTIONS_LIST_MAX, COMPOSITE_INDEXES_MAX,
};
pub use error::DbError;
pub use exec::{Restrict, GROUP_COLLECTIONS_MAX, QUERY_DOCS_MAX, SORT_DOCS_MAX};
pub use herald_storage::{
    lower_current_thread_priority, make_current_thread_idle, Durability, Histogram,
    HistogramSnapshot, StoreOptions, Ticket, WriteError as WriteFailure, CACHE_BYTES_MAX,
    RESERVE_BYTES,
};
pub use indexer::{COMPOSITE_ENTRIES_PER_DOC_MAX, INDEX_ENTRIES_PER_DOC_MAX};
pub use mutations::{
    check_mutation_id, MutationRetention, MUTATIONS_RETAINED_MAX, MUTATION_ID_BYTES_MAX,
    MUTATION_RETENTION_MS,
};
pub use names::{
    check_collection, check_group, check_segment, generate_id, group_of, split_document_path,
    COLLECTION_PATH_BYTES_MAX, SEGMENT_BYTES_MAX,
};
pub use planner::{Alternative, Estimate, Explain, PlanDescription};
pub use txn::{
    Change, ChangeOp, CommitOutcome, Guard, QueueFull, Refused, Transaction, Write, WriteEffect,
    WriteGuard, WriteResult, COMMIT_WRITES_MAX,
};
