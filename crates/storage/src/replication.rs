//! The replication seam: a clustered store commits each batch of its own through a replicated
//! log ([`Replicator`](crate::Replicator), implemented by `crates/cluster`) before the batch reaches the local
//! write-ahead log, and applies batches other nodes committed ([`apply_record`]) as ordinary
//! jobs. Storage only moves bytes: which node may write, and the order, are the log's business.
//!
//! # The stamp
//!
//! Every batch a replicated store commits on its own carries one extra entry, written by the
//! writer: [`STAMP_KEY`] in [`Table::Meta`], the batch's *replication index* (1, 2, 3, ... without
//! gaps over the whole cluster's history). A node applying a record stores the same entry (it
//! is part of the record), so a store always knows how far into the log it is, and a replica
//! that restarts skips the records it already holds. The entry is storage's; the database layer
//! never writes a key starting with `0xff` in that table.
//!
//! # Refusals
//!
//! [`Replicator::replicate`](crate::Replicator::replicate) may refuse a batch with [`StorageError::Unavailable`] (this node is
//! not the primary, was deposed, or the log is unreachable). Unlike other commit failures that
//! does not fail the store: the batch was neither logged nor published, so the store is exactly
//! as before it; the batch's jobs (and the one pipelined on top of it) get the error, and the
//! store goes on, applying other nodes' records or, once primary again, committing its own.

use crate::tables::{self, Table};
use crate::{StorageError, WriteTxn};

/// Where a replicated store keeps its replication index: in [`Table::Meta`], big-endian `u64`.
pub const STAMP_KEY: &[u8] = b"\xffstorage.replication_index";

/// What [`apply_record`] applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The record's replication index.
    pub index: u64,
    /// How many puts and deletes it held (the stamp included).
    pub entries: usize,
}

/// Applies a record another node's [`Replicator`](crate::Replicator) was given: every put and
/// delete, in one job, so the batch applies whole or not at all. The job's batch is then logged
/// locally but never replicated again.
///
/// Records apply in index order, each once: a record whose index the store already holds is
/// skipped (`entries: 0`), and one that does not follow the store's index is refused with
/// [`StorageError::Unavailable`], writing nothing, so a batch that failed to apply can never be
/// jumped over by the ones after it. Fails with [`StorageError::Corrupted`] on a record that
/// does not check (checksum, framing) or carries no stamp, before writing anything.
pub fn apply_record(txn: &mut WriteTxn<'_>, record: &[u8]) -> Result<Applied, StorageError> {
    let parsed = crate::wal::parse(record, 0)
        .filter(|r| r.end == record.len())
        .ok_or_else(|| StorageError::Corrupted("a replicated record does not check".into()))?;
    let mut entries = Vec::new();
    let mut index = None;
    crate::wal::decode(parsed.body, |table, key, value| {
        if table == Table::Meta && key == STAMP_KEY {
            index = value.map(tables::decode_u64).transpose()?;
        }
        entries.push((table, key.to_vec(), value.map(<[u8]>::to_vec)));
        Ok(())
    })?;
    let index =
        index.ok_or_else(|| StorageError::Corrupted("a replicated record has no stamp".into()))?;
    let held = stamp(txn)?;
    if index <= held {
        txn.mark_from_log();
        return Ok(Applied { index, entries: 0 });
    }
    if index != held + 1 {
        return Err(StorageError::Unavailable(format!(
            "replicated batch {index} does not follow this store's batch {held}"
        )));
    }
    let count = entries.len();
    for (table, key, value) in entries {
        match value {
            Some(value) => txn.put(table, key, value)?,
            None => txn.delete(table, key),
        }
    }
    txn.mark_from_log();
    Ok(Applied {
        index,
        entries: count,
    })
}

/// Calls `f` for each put (`Some(value)`) and delete (`None`) of a record, in order, without
/// applying anything; fails like [`apply_record`] on a record that does not check.
pub fn visit_record<E: From<StorageError>>(
    record: &[u8],
    mut f: impl FnMut(Table, &[u8], Option<&[u8]>) -> Result<(), E>,
) -> Result<(), E> {
    let parsed = crate::wal::parse(record, 0)
        .filter(|r| r.end == record.len())
        .ok_or_else(|| StorageError::Corrupted("a replicated record does not check".into()))?;
    let mut result = Ok(());
    crate::wal::decode(parsed.body, |table, key, value| {
        if result.is_ok() {
            result = f(table, key, value);
        }
        Ok(())
    })?;
    result
}

/// The replication index a store (or a job's view of it) holds: 0 before any replicated batch.
pub fn stamp(txn: &WriteTxn<'_>) -> Result<u64, StorageError> {
    Ok(txn.get_u64(Table::Meta, STAMP_KEY)?.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::memory;
    use crate::{Replicator, Store, StoreOptions};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    /// A log in memory: accepts records while `refuse_from` is above their index.
    #[derive(Default)]
    struct Log {
        records: Mutex<Vec<(u64, Vec<u8>)>>,
        refuse_from: AtomicU64,
    }

    impl Replicator for Log {
        fn replicate(&self, index: u64, record: &[u8]) -> Result<(), StorageError> {
            let refuse_from = self.refuse_from.load(Ordering::SeqCst);
            if refuse_from != 0 && index >= refuse_from {
                return Err(StorageError::Unavailable("refused".into()));
            }
            let mut records = self.records.lock().unwrap();
            let last = records.last().map_or(0, |r| r.0);
            assert_eq!(index, last + 1, "indexes have no gaps");
            records.push((index, record.to_vec()));
            Ok(())
        }
    }

    fn put(store: &Store, key: &str, value: &str) -> Result<(), crate::WriteError<StorageError>> {
        let (key, value) = (key.as_bytes().to_vec(), value.as_bytes().to_vec());
        store
            .submit(move |txn| txn.put(Table::Docs, key, value))
            .unwrap()
            .wait()
    }

    fn apply(store: &Store, record: Vec<u8>) -> Result<Applied, crate::WriteError<StorageError>> {
        store
            .submit(move |txn| apply_record(txn, &record))
            .unwrap()
            .wait()
    }

    /// What a primary replicates, applied on a replica, gives the same tables; a replica's
    /// applied batches are not replicated again.
    #[test]
    fn a_replica_that_applies_every_record_equals_the_primary() {
        let (primary, replica) = (memory(8, 64), memory(8, 64));
        let log = Arc::new(Log::default());
        assert!(primary.set_replicator(log.clone()));
        assert!(
            !primary.set_replicator(log.clone()),
            "only the first call counts"
        );
        let replica_log = Arc::new(Log::default());
        replica.set_replicator(replica_log.clone());
        for i in 0..50 {
            put(&primary, &format!("k{}", i % 7), &format!("v{i}")).unwrap();
        }
        let records = log.records.lock().unwrap().clone();
        assert_eq!(records.len(), 50);
        for (index, record) in records {
            assert_eq!(apply(&replica, record).unwrap().index, index);
        }
        assert!(replica_log.records.lock().unwrap().is_empty());
        let (a, b) = (primary.read().unwrap(), replica.read().unwrap());
        assert_eq!(a.digest().unwrap(), b.digest().unwrap());
        assert_eq!(a.get_u64(Table::Meta, STAMP_KEY).unwrap(), Some(50));
    }

    /// A refused batch fails its job with `unavailable`, is never visible, and leaves the store
    /// working: later batches commit once the log accepts again, and a reopened store (the
    /// local log has no hole where the refused batch was numbered) holds exactly the rest.
    #[test]
    fn a_refused_batch_changes_nothing_and_does_not_fail_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Log::default());
        {
            let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
            store.set_replicator(log.clone());
            put(&store, "a", "1").unwrap();
            log.refuse_from.store(2, Ordering::SeqCst);
            let err = put(&store, "b", "2").unwrap_err();
            assert_eq!(err.storage().map(StorageError::code), Some("unavailable"));
            assert!(store
                .read()
                .unwrap()
                .get(Table::Docs, b"b")
                .unwrap()
                .is_none());
            log.refuse_from.store(0, Ordering::SeqCst);
            put(&store, "c", "3").unwrap();
            store.close().unwrap();
        }
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let read = store.read().unwrap();
        assert!(read.get(Table::Docs, b"a").unwrap().is_some());
        assert!(read.get(Table::Docs, b"b").unwrap().is_none());
        assert!(read.get(Table::Docs, b"c").unwrap().is_some());
        assert_eq!(read.get_u64(Table::Meta, STAMP_KEY).unwrap(), Some(2));
    }

    /// Jobs pipelined behind a refused batch (they read what it wrote) are refused too.
    #[test]
    fn batches_behind_a_refused_one_are_refused() {
        let store = memory(1, 256);
        let log = Arc::new(Log::default());
        store.set_replicator(log.clone());
        log.refuse_from.store(1, Ordering::SeqCst);
        let tickets: Vec<_> = (0..40)
            .map(|i| {
                let key = format!("k{i}").into_bytes();
                store
                    .submit(move |txn| txn.put(Table::Docs, key.clone(), key))
                    .unwrap()
            })
            .collect();
        for t in tickets {
            assert_eq!(
                t.wait().unwrap_err().storage().map(StorageError::code),
                Some("unavailable")
            );
        }
        assert_eq!(store.read().unwrap().len(Table::Docs).unwrap(), 0);
        log.refuse_from.store(0, Ordering::SeqCst);
        put(&store, "x", "1").unwrap();
        assert_eq!(log.records.lock().unwrap().len(), 1);
    }

    /// Applying is idempotent and in order: a record the store holds is skipped, one that does
    /// not follow is refused and writes nothing.
    #[test]
    fn records_apply_once_and_in_index_order() {
        let (primary, replica) = (memory(1, 64), memory(8, 64));
        let log = Arc::new(Log::default());
        primary.set_replicator(log.clone());
        for i in 0..3 {
            put(&primary, &format!("k{i}"), "v").unwrap();
        }
        let records: Vec<Vec<u8>> = log
            .records
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.1.clone())
            .collect();
        let err = apply(&replica, records[1].clone()).unwrap_err();
        assert!(
            matches!(err, crate::WriteError::Job(StorageError::Unavailable(_))),
            "{err:?}"
        );
        assert_eq!(replica.read().unwrap().len(Table::Docs).unwrap(), 0);
        assert_eq!(apply(&replica, records[0].clone()).unwrap().entries, 2);
        assert_eq!(
            apply(&replica, records[0].clone()).unwrap().entries,
            0,
            "skipped"
        );
        apply(&replica, records[1].clone()).unwrap();
        apply(&replica, records[2].clone()).unwrap();
        let (a, b) = (primary.read().unwrap(), replica.read().unwrap());
        assert_eq!(a.digest().unwrap(), b.digest().unwrap());
    }

    #[test]
    fn a_damaged_record_is_refused_whole() {
        let (primary, replica) = (memory(8, 64), memory(8, 64));
        let log = Arc::new(Log::default());
        primary.set_replicator(log.clone());
        put(&primary, "a", "1").unwrap();
        let mut record = log.records.lock().unwrap()[0].1.clone();
        let last = record.len() - 1;
        record[last] ^= 1;
        let err = apply(&replica, record).unwrap_err();
        assert!(matches!(
            err,
            crate::WriteError::Job(StorageError::Corrupted(_))
        ));
        assert_eq!(replica.read().unwrap().len(Table::Docs).unwrap(), 0);
    }
}
