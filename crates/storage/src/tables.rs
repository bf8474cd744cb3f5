//! The named byte tables, their redb definitions, and key-range helpers shared by reads and
//! writes (bounds conversion, prefix ranges, the big-endian u64 codec).
//!
//! Storage does not know what the tables hold; the names only reserve a keyspace for each of
//! the database layer's concerns so that a scan of one never walks another's keys.

use std::ops::{Bound, RangeBounds};

use redb::TableDefinition;

use crate::ENTRY_BYTES_MAX;

/// A key and its value, both owned.
pub type Entry = (Vec<u8>, Vec<u8>);

/// One table's pending changes: key -> `Some(value)` for a put, `None` for a delete.
pub(crate) type TableMap = std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One of the store's tables. Keys and values are byte strings; keys sort in byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Documents by encoded path.
    Docs,
    /// Secondary index entries (the encoded key carries everything; values are usually empty).
    Index,
    /// The commit log, keyed by big-endian seq.
    Log,
    /// Small named values: counters such as the commit seq, format markers, settings.
    Meta,
    /// Durable trigger queues.
    Tasks,
}

/// How many tables there are; per-table arrays are indexed by [`Table::index`].
pub const TABLE_COUNT: usize = 5;

impl Table {
    /// Every table, in index order.
    pub const ALL: [Table; TABLE_COUNT] = [
        Table::Docs,
        Table::Index,
        Table::Log,
        Table::Meta,
        Table::Tasks,
    ];

    /// The table's name inside the redb file. Changing one is a file-format change.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Docs => "docs",
            Table::Index => "index",
            Table::Log => "log",
            Table::Meta => "meta",
            Table::Tasks => "tasks",
        }
    }

    /// Position in [`Table::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    pub(crate) const fn definition(self) -> Def {
        TableDefinition::new(self.name())
    }
}

/// Every table has byte-string keys and values.
pub(crate) type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// The blocks of the index runs (`runs.rs`): key = run file number and block number.
pub(crate) const RUN_BLOCKS: Def = TableDefinition::new("index_run_blocks");

/// The index runs' metadata: key = the run's order (big-endian u64), value = `RunMeta`.
pub(crate) const RUN_META: Def = TableDefinition::new("index_runs");

/// The storage layer's own bookkeeping, beside the user tables: [`STATE_CHECKPOINT`] and
/// [`STATE_FORMAT`].
pub(crate) const STATE: TableDefinition<'static, &'static str, u64> =
    TableDefinition::new("storage_state");

/// The number of the last write-ahead-log batch applied to redb.
pub(crate) const STATE_CHECKPOINT: &str = "checkpointed_batch";

/// The next index run file number (and order).
pub(crate) const STATE_NEXT_RUN: &str = "next_run";

/// The store's on-disk format version, written when a store is created or first opened by a
/// build that knows it.
pub(crate) const STATE_FORMAT: &str = "format";

/// The format this build writes and reads: 4 = redb plus a write-ahead log that may hold
/// acknowledged batches not yet in redb, with the `index` table's entries in index runs and the
/// `log` table's in log blocks (both B-trees stay empty). Format 3 kept the log's records in
/// the B-tree, format 2 the index entries too; opening either moves them out (`logblocks.rs`,
/// `runs::upgrade_index_table`). (Format 1, redb alone with every batch a redb
/// transaction, had no marker; a store without one is format 1 and is upgraded in place,
/// which is safe because format 1 never leaves a log behind.) A build refuses a store whose
/// format is newer than it knows, so it can never ignore a log it does not understand.
pub const FORMAT_VERSION: u64 = 4;

/// A key range with borrowed bounds, the form both redb and `BTreeMap` accept.
pub(crate) type KeyBounds<'k> = (Bound<&'k [u8]>, Bound<&'k [u8]>);

/// Borrows any range over byte-like keys (`Vec<u8>`, `&[u8]`, `[u8; N]`, ...) as `KeyBounds`.
pub(crate) fn key_bounds<'a, K: AsRef<[u8]> + 'a>(range: &'a impl RangeBounds<K>) -> KeyBounds<'a> {
    (
        range.start_bound().map(AsRef::as_ref),
        range.end_bound().map(AsRef::as_ref),
    )
}

/// True when no key can lie in the range. `BTreeMap::range` panics on such ranges and redb's
/// handling of them has changed between releases, so both paths check this first.
pub(crate) fn is_empty_range(bounds: &KeyBounds<'_>) -> bool {
    match bounds {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e))
        | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
        _ => false,
    }
}

/// The range of all keys starting with `prefix`, as owned bounds (borrow with [`borrow_bounds`]).
pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (Bound::Included(prefix.to_vec()), prefix_end(prefix))
}

pub(crate) fn borrow_bounds(owned: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> KeyBounds<'_> {
    (
        owned.0.as_ref().map(Vec::as_slice),
        owned.1.as_ref().map(Vec::as_slice),
    )
}

/// The smallest key greater than every key that starts with `prefix`: drop trailing 0xFF bytes
/// and increment the last remaining byte. No such key exists when the prefix is all 0xFF (or
/// empty), and the range is then unbounded above.
fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xFF {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

/// Encodes a counter so that byte order equals numeric order.
pub fn encode_u64(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Decodes [`encode_u64`]'s output; anything that is not exactly 8 bytes is corruption.
pub fn decode_u64(bytes: &[u8]) -> Result<u64, crate::StorageError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        crate::StorageError::Corrupted(format!(
            "expected an 8-byte u64, found {} bytes",
            bytes.len()
        ))
    })?;
    Ok(u64::from_be_bytes(array))
}

/// Rejects entries over [`ENTRY_BYTES_MAX`] at the moment a job writes them.
pub(crate) fn check_entry(key: &[u8], value: &[u8]) -> Result<(), crate::StorageError> {
    let bytes = key.len() + value.len();
    if bytes > ENTRY_BYTES_MAX {
        return Err(crate::StorageError::EntryTooLarge {
            bytes,
            limit: ENTRY_BYTES_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_indexes_match_all() {
        for (i, t) in Table::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
        let mut names: Vec<_> = Table::ALL.iter().map(|t| t.name()).collect();
        names.dedup();
        assert_eq!(names.len(), TABLE_COUNT);
    }

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Bound::Excluded(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Bound::Excluded(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), Bound::Unbounded);
        assert_eq!(prefix_end(b""), Bound::Unbounded);
    }

    #[test]
    fn empty_ranges_are_detected() {
        let b = |s: &'static [u8]| Bound::Included(s);
        let x = |s: &'static [u8]| Bound::Excluded(s);
        assert!(is_empty_range(&(b(b"b"), b(b"a"))));
        assert!(!is_empty_range(&(b(b"a"), b(b"a"))));
        assert!(is_empty_range(&(b(b"a"), x(b"a"))));
        assert!(is_empty_range(&(x(b"a"), x(b"a"))));
        assert!(!is_empty_range(&(Bound::Unbounded, x(b"a"))));
    }

    #[test]
    fn u64_codec_round_trips_in_order() {
        assert!(encode_u64(255) < encode_u64(256));
        assert_eq!(decode_u64(&encode_u64(u64::MAX)).unwrap(), u64::MAX);
        assert_eq!(
            decode_u64(b"short").unwrap_err().code(),
            "storage_corrupted"
        );
    }
}
