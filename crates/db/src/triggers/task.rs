//! Trigger tasks: what a queued task holds, how it is keyed in the `tasks` table, and how the
//! write path enqueues tasks in the same storage transaction as the write that fires them.
//!
//! Keys (all integers big-endian, so byte order is commit order):
//!
//! - queue:       `'q' ++ trigger uid (u64) ++ seq (u64) ++ n (u32)` -> task JSON
//! - dead letter: `'d' ++ trigger uid (u64) ++ seq (u64) ++ n (u32)` -> task JSON
//!
//! `seq` is the commit that fired the task and `n` numbers the tasks of that commit, so one
//! trigger's queue is in commit order, and a task keeps its identity (`seq.n`) through retries,
//! dead-lettering and re-queueing.

use crate::error::DbError;
use crate::triggers::registry::Registry;
use crate::txn::Change;
use herald_storage::{Table, WriteTxn};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest chain of triggers firing triggers: a task at this depth may not fire another.
pub const TRIGGER_DEPTH_MAX: u32 = 16;

const QUEUE: u8 = b'q';
const DEAD: u8 = b'd';

/// A task's identity: the trigger's queue, the firing commit, and its place in that commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    pub uid: u64,
    pub seq: u64,
    pub n: u32,
}

impl TaskId {
    pub fn queue_key(&self) -> Vec<u8> {
        self.key(QUEUE)
    }

    pub fn dead_key(&self) -> Vec<u8> {
        self.key(DEAD)
    }

    fn key(&self, kind: u8) -> Vec<u8> {
        let mut k = Vec::with_capacity(21);
        k.push(kind);
        k.extend_from_slice(&self.uid.to_be_bytes());
        k.extend_from_slice(&self.seq.to_be_bytes());
        k.extend_from_slice(&self.n.to_be_bytes());
        k
    }

    pub fn from_key(key: &[u8]) -> Result<TaskId, DbError> {
        if key.len() != 21 {
            return Err(DbError::Corrupt("task key length".into()));
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(key[r].try_into().expect("8"));
        Ok(TaskId {
            uid: u(1..9),
            seq: u(9..17),
            n: u32::from_be_bytes(key[17..21].try_into().expect("4")),
        })
    }

    /// The id the API shows: `"seq.n"`, stable for the task's whole life.
    pub fn label(&self) -> String {
        format!("{}.{}", self.seq, self.n)
    }

    pub fn parse_label(uid: u64, label: &str) -> Option<TaskId> {
        let (seq, n) = label.split_once('.')?;
        Some(TaskId {
            uid,
            seq: seq.parse().ok()?,
            n: n.parse().ok()?,
        })
    }
}

/// The key prefix of one trigger's queue.
pub fn queue_prefix(uid: u64) -> Vec<u8> {
    let mut k = vec![QUEUE];
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// The key prefix of one trigger's dead letters.
pub fn dead_prefix(uid: u64) -> Vec<u8> {
    let mut k = vec![DEAD];
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// A queued task: the change that fired it, and its retry state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub trigger: String,
    pub seq: u64,
    pub collection: String,
    pub id: String,
    pub op: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// 1 for a task fired by a client's write, one more for each trigger in between.
    pub depth: u32,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Not to be run before this time (ms since the epoch); 0 = now.
    pub not_before_ms: u64,
    pub created_ms: u64,
    pub last_error: Option<String>,
}

/// A dead letter: a task that used up its attempts, with its id.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub id: TaskId,
    pub task: Task,
}

impl Task {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a task serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Task, DbError> {
        serde_json::from_slice(bytes).map_err(|e| DbError::Corrupt(format!("task: {e}")))
    }
}

/// Puts one task per (change, firing trigger) into the queues, inside the commit's storage
/// job. `depth` is the depth of the write's origin (0 for a client). Returns the uid of each
/// task enqueued, for the pending counters.
pub(crate) fn enqueue(
    txn: &mut WriteTxn<'_>,
    registry: &Registry,
    seq: u64,
    changes: &[Change],
    depth: u32,
    now_ms: u64,
) -> Result<Vec<u64>, DbError> {
    let defs = registry.defs();
    if defs.is_empty() {
        return Ok(Vec::new());
    }
    let mut enqueued = Vec::new();
    let mut n: u32 = 0;
    for c in changes {
        for def in defs.iter() {
            if !def.fires(&c.collection, c.op, c.before.as_ref(), c.after.as_ref()) {
                continue;
            }
            if depth >= TRIGGER_DEPTH_MAX {
                return Err(DbError::TriggerDepth(TRIGGER_DEPTH_MAX));
            }
            let task = Task {
                trigger: def.name.clone(),
                seq,
                collection: c.collection.clone(),
                id: c.id.clone(),
                op: c.op.as_str().to_string(),
                before: c.before.clone(),
                after: c.after.clone(),
                depth: depth + 1,
                attempts: 0,
                not_before_ms: 0,
                created_ms: now_ms,
                last_error: None,
            };
            let id = TaskId {
                uid: def.uid,
                seq,
                n,
            };
            n += 1;
            txn.put(Table::Tasks, id.queue_key(), task.encode())?;
            enqueued.push(def.uid);
        }
    }
    Ok(enqueued)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_commit_order_and_round_trip() {
        let a = TaskId {
            uid: 7,
            seq: 9,
            n: 3,
        };
        let b = TaskId {
            uid: 7,
            seq: 10,
            n: 0,
        };
        assert!(a.queue_key() < b.queue_key());
        assert!(a.queue_key().starts_with(&queue_prefix(7)));
        assert!(!a.queue_key().starts_with(&queue_prefix(8)));
        assert_eq!(TaskId::from_key(&a.dead_key()).unwrap(), a);
        assert_eq!(TaskId::parse_label(7, &a.label()), Some(a));
        assert_eq!(TaskId::parse_label(7, "x.1"), None);
    }
}
