//! Pure entry points into the commit-log record codec for the fuzz targets in `fuzz/` and their
//! regression tests: the same encoder the writer uses and the decoders reads use, without a
//! store.

use crate::commitlog::{decode_commit, decode_json, encode_record};
use crate::error::DbError;
use crate::layout::encode_doc;
use crate::txn::Change;
use serde_json::Value;

/// A stored commit-log record as `(seq, changes)`.
pub fn commit_record(record: &[u8]) -> Result<(u64, Vec<Change>), DbError> {
    decode_commit(record).map(|c| (c.seq, c.changes))
}

/// A stored commit-log record as the JSON `/v1/log` serves.
pub fn commit_record_json(record: &[u8]) -> Result<Value, DbError> {
    decode_json(record)
}

/// The record the writer stores for commit `seq` at time `ts`, its images taken from documents
/// stored as the writer stores them.
pub fn encode_commit_record(seq: u64, ts: u64, changes: &[Change]) -> Vec<u8> {
    let images: Vec<_> = changes
        .iter()
        .map(|c| {
            let stored = |d: &Option<Value>| d.as_ref().map(|d| encode_doc(c.version, d));
            (stored(&c.before), stored(&c.after))
        })
        .collect();
    encode_record(seq, ts, changes, &images)
}
