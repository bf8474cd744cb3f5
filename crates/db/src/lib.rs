//! Herald's database layer: collections of JSON documents addressed by path, with versions,
//! automatic and composite indexes, a planner, atomic multi-document commits and the commit log.
//!
//! It sits between the pure query core (`herald-query`) and the byte-table store
//! (`herald-storage`): it is the only crate that knows both documents and storage. It knows
//! nothing of HTTP or async runtimes; callers wait on storage tickets (blocking or `.await`).
//!
//! The write path (`write.rs`) runs inside the storage layer's group-commit writer, so every
//! commit is one storage job: preconditions, documents, index entries, the next `seq`, the commit
//! record, all-or-nothing. Reads (`exec.rs`) run on one storage snapshot and report the seq they
//! reflect.

mod catalog;
mod collections;
mod db;
mod error;
mod exec;
mod indexer;
mod known;
mod layout;
pub mod live;
mod mutations;
mod names;
mod planner;
mod system;
pub mod triggers;
mod write;

pub use catalog::{CompositeIndex, IndexField, IndexState};
pub use collections::COLLECTIONS_LIST_MAX;
pub use db::{Db, DbOptions, QueryOutcome, StoredDoc, BUILD_CHUNK_DOCS, COMPOSITE_INDEXES_MAX};
pub use error::DbError;
pub use exec::{QUERY_DOCS_MAX, SORT_DOCS_MAX};
pub use herald_storage::{
    lower_current_thread_priority, make_current_thread_idle, Durability, Histogram,
    HistogramSnapshot, StoreOptions, Ticket, WriteError as WriteFailure, CACHE_BYTES_MAX,
};
pub use indexer::{COMPOSITE_ENTRIES_PER_DOC_MAX, INDEX_ENTRIES_PER_DOC_MAX};
pub use mutations::{
    check_mutation_id, MutationRetention, MUTATIONS_RETAINED_MAX, MUTATION_ID_BYTES_MAX,
    MUTATION_RETENTION_MS,
};
pub use names::{
    check_collection, check_segment, generate_id, split_document_path, COLLECTION_PATH_BYTES_MAX,
    SEGMENT_BYTES_MAX,
};
pub use planner::PlanDescription;
pub use write::{
    Change, ChangeOp, CommitOutcome, Guard, Write, WriteEffect, WriteGuard, WriteResult,
    COMMIT_WRITES_MAX, LOG_PRUNE_PER_COMMIT_MAX, LOG_PRUNE_RESCAN_EVERY,
};
