//! The commit log: one record per commit that changed documents, keyed by its `seq`, holding
//! every change's before- and after-image. Live queries read it back when a commit has left the
//! feed's ring; it is pruned to a retention count and age.
//!
//! - `codec.rs`: the record's byte format (on disk; it must not change).
//! - `prune.rs`: the bounded per-commit pruning and the hint that keeps it off a scan.
//! - here: the key, appending a record, and reading records back by seq, where "the log no
//!   longer reaches back" is an expected outcome ([`LogRead::Gone`]), not an error.
//!
//! Depends on the transaction vocabulary (`txn`) and errors only.

mod codec;
mod prune;

pub(crate) use codec::{decode_commit, decode_json, encode_record, StoredImages};
pub(crate) use prune::{prune, LogRetention};
pub use prune::{LOG_PRUNE_PER_COMMIT_MAX, LOG_PRUNE_RESCAN_EVERY};

use crate::error::DbError;
use crate::txn::{Change, Commit};
use herald_storage::{ReadTxn, Table, WriteTxn};
use serde_json::Value;
use std::sync::Arc;

/// The key of the record of commit `seq`: big-endian, so the log's order is seq order.
pub(crate) fn log_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Appends the record of commit `seq` (committed at `ts_ms`) with the stored records of its
/// changes' images; returns the record's size.
pub(crate) fn append(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    ts_ms: u64,
    changes: &[Change],
    images: &[StoredImages],
) -> Result<usize, DbError> {
    let record = encode_record(seq, ts_ms, changes, images);
    let bytes = record.len();
    txn.put(Table::Log, log_key(seq).to_vec(), record)?;
    Ok(bytes)
}

/// The commits `(after, upto]`, or why the log cannot give them all.
#[derive(Debug)]
pub enum LogRead {
    /// Every commit of the range, in seq order (empty when `after >= upto`).
    Commits(Vec<Arc<Commit>>),
    /// The log no longer reaches back to `after + 1` (pruned, or never held it): an expected
    /// state for a reader that fell behind the retention, which answers with a fresh result.
    /// `floor` is the oldest seq the log still holds (`None`: it holds none).
    Gone { after: u64, floor: Option<u64> },
}

impl LogRead {
    /// The commits, or [`DbError::LogGone`] for a caller that cannot go on without them.
    pub fn into_commits(self) -> Result<Vec<Arc<Commit>>, DbError> {
        match self {
            LogRead::Commits(c) => Ok(c),
            LogRead::Gone { after, floor } => Err(DbError::LogGone { after, floor }),
        }
    }
}

/// Reads the commits `(after, upto]` at one snapshot. Seqs are gap-free, so the log reaches
/// back exactly when every seq of the range is there.
pub(crate) fn read_commits(read: &ReadTxn, after: u64, upto: u64) -> Result<LogRead, DbError> {
    if after >= upto {
        return Ok(LogRead::Commits(Vec::new()));
    }
    let mut commits = Vec::with_capacity((upto - after).min(1024) as usize);
    for entry in read.range(
        Table::Log,
        log_key(after + 1).as_slice()..=log_key(upto).as_slice(),
    )? {
        let (_, v) = entry?;
        commits.push(Arc::new(decode_commit(&v)?));
    }
    let complete =
        commits.len() as u64 == upto - after && commits.first().is_some_and(|c| c.seq == after + 1);
    if complete {
        Ok(LogRead::Commits(commits))
    } else {
        Ok(LogRead::Gone {
            after,
            floor: first(read)?,
        })
    }
}

/// The records with seq in `[from, to]`, as stored JSON.
pub(crate) fn read_json(read: &ReadTxn, from: u64, to: u64) -> Result<Vec<Value>, DbError> {
    let mut out = Vec::new();
    for entry in read.range(
        Table::Log,
        log_key(from).as_slice()..=log_key(to).as_slice(),
    )? {
        let (_, v) = entry?;
        out.push(decode_json(&v)?);
    }
    Ok(out)
}

/// The oldest seq still in the log (`None` when empty).
pub(crate) fn first(read: &ReadTxn) -> Result<Option<u64>, DbError> {
    let first = read.range::<&[u8]>(Table::Log, ..)?.next().transpose()?;
    Ok(first.map(|(k, _)| u64::from_be_bytes(k.as_slice().try_into().unwrap_or([0; 8]))))
}
