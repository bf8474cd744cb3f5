//! What the database's trigger operations (`Db` methods in `db/triggers.rs`) speak: their
//! bounds, what completing or failing a task returns, where definitions are stored, loading
//! them at open.

use crate::error::DbError;
use crate::triggers::def::TriggerDef;
use crate::triggers::registry::Registry;
use crate::triggers::task::{dead_prefix, queue_prefix};
use crate::txn::CommitOutcome;
use herald_storage::{ReadTxn, Table};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Most writes one trigger task may commit (a fan-out to many followers is one task).
pub const TASK_WRITES_MAX: usize = 10_000;
/// A task with more writes than this commits as a heavy background job: alone at the head of
/// a batch, never sharing one with client writes queued before it.
pub const TASK_WRITES_HEAVY: usize = 256;
/// Most dead letters moved or deleted per storage job.
pub const DEAD_CHUNK_MAX: usize = 500;
/// Most dead letters one listing returns.
pub const DEAD_LIST_MAX: usize = 1000;

pub(crate) const META_TRIGGER_PREFIX: &[u8] = b"trigger\0";
pub(crate) const META_TRIGGER_UID: &[u8] = b"trigger_uid";

pub(crate) fn meta_key(name: &str) -> Vec<u8> {
    let mut k = META_TRIGGER_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// A document version a task read, to be re-checked when the task commits.
#[derive(Debug, Clone)]
pub struct ReadCheck {
    pub collection: String,
    pub id: String,
    /// 0 when the document did not exist.
    pub version: u64,
}

/// How completing a task ended.
#[derive(Debug)]
pub enum TaskDone {
    /// The task's writes (if any) committed and the task left its queue.
    Done(Option<CommitOutcome>),
    /// The task was no longer queued (its trigger was deleted, or it already ran).
    Gone,
}

/// How failing a task ended.
#[derive(Debug, PartialEq, Eq)]
pub enum TaskFailed {
    /// It stays queued and runs again at this time (ms since the epoch).
    Retry {
        not_before_ms: u64,
    },
    /// It used up its attempts and moved to the dead letters.
    Dead,
    Gone,
}

/// Loads the stored definitions and counts each queue and dead-letter list.
pub(crate) fn load(read: &ReadTxn) -> Result<Registry, DbError> {
    let mut defs = BTreeMap::new();
    for entry in read.prefix(Table::Meta, META_TRIGGER_PREFIX)? {
        let (_, v) = entry?;
        let mut def: TriggerDef = serde_json::from_slice(&v)
            .map_err(|e| DbError::Corrupt(format!("trigger definition: {e}")))?;
        def.prepare()?;
        defs.insert(def.name.clone(), def);
    }
    let registry = Registry::new(defs);
    recount(&registry, read)?;
    Ok(registry)
}

/// Sets every trigger's pending and dead counters to what the queues in `read` hold (the
/// counters are kept by the commit hooks of this node's own writes; a replica's queues change
/// through replication, so it counts them when it needs them right).
pub(crate) fn recount(registry: &Registry, read: &ReadTxn) -> Result<(), DbError> {
    for def in registry.defs().iter() {
        let stats = registry.stats(def.uid);
        let count = |p: Vec<u8>| read.prefix(Table::Tasks, &p).map(|r| r.count() as i64);
        stats
            .pending
            .store(count(queue_prefix(def.uid))?, Ordering::Release);
        stats
            .dead
            .store(count(dead_prefix(def.uid))?, Ordering::Release);
    }
    Ok(())
}

pub(crate) fn bad_label(label: &str) -> DbError {
    DbError::BadRequest(format!(
        "'{}' is not a task id (expected \"seq.n\")",
        label.escape_debug()
    ))
}
