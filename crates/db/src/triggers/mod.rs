//! Triggers on durable queues inside the database (design.md, "Triggers (integrated queues)").
//!
//! A trigger names a collection pattern, the operations it listens to and an optional filter.
//! When a commit changes a matching document, the write path puts one task per (change,
//! trigger) into that trigger's queue in the `tasks` table, in the same storage transaction as
//! the change itself (invariant 5): a task exists exactly when its write committed. The
//! client's acknowledgement does not wait for the task to run.
//!
//! This module is what the write path needs (definitions, matching, the queues) and sits
//! below it; the operations on triggers and tasks are `Db` methods in `db/triggers.rs`.
//!
//! Running tasks is the server's job (it owns the script engine, the HTTP client and the
//! worker pool); this module gives it what exactly-once effects need:
//! [`Db::complete_task`](crate::Db::complete_task) commits the task's writes and deletes the
//! task in one transaction, after re-checking the versions of the documents the task read, and
//! [`Db::fail_task`](crate::Db::fail_task) records a failed attempt (retry later, or move to the
//! dead letters). A task that is no longer queued completes as `Gone` and applies nothing, so
//! a task can never apply its effects twice, even if it is run twice.
//!
//! One queue per trigger (a key prefix), so a cascade of triggers never waits on itself; a
//! chain deeper than [`TRIGGER_DEPTH_MAX`] fails the task that would extend it.

mod def;
mod ops;
mod registry;
mod task;

pub use def::{
    check_pattern, pattern_matches, Action, TriggerDef, ATTEMPTS_MAX_DEFAULT, ATTEMPTS_MAX_LIMIT,
    FUNCTION_SOURCE_BYTES_MAX, TRIGGERS_MAX,
};
pub(crate) use ops::{bad_label, load, meta_key, recount, META_TRIGGER_PREFIX, META_TRIGGER_UID};
pub use ops::{
    ReadCheck, TaskDone, TaskFailed, DEAD_CHUNK_MAX, DEAD_LIST_MAX, TASK_WRITES_HEAVY,
    TASK_WRITES_MAX,
};
pub use registry::{RecentError, Registry, TriggerStats, TriggerStatus, RECENT_ERRORS_MAX};
pub(crate) use task::{dead_prefix, enqueue, queue_prefix};
pub use task::{DeadLetter, Task, TaskId, TRIGGER_DEPTH_MAX};
