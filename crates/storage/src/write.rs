//! What a write job sees: [`WriteTxn`], one job's writes into the batch so far (undone if it
//! fails), and [`WriteRange`], the merged view its scans return.
//!
//! A job reads through three levels, newest first: the batch so far (the writes of the earlier
//! jobs of its batch that succeeded, and its own), the layers of committed batches not yet
//! checkpointed, and redb. Its puts and deletes go straight into the batch, each remembering
//! what it replaced; on `Err` or panic the writer puts those back in reverse order, so a failed
//! job leaves no trace, and the jobs after it never see its writes. (A private overlay folded
//! into the batch on success cost every write a second ordered insert, a visible share of the
//! writer's time in bursts of small upserts.)

use std::ops::RangeBounds;

use std::cell::OnceCell;

use crate::layer::{key_hash, sorted_newest, Changes, ReadPoint, Snapshot, APPENDED_TABLE};
use crate::merge::{Merged, Side};
use crate::tables::{self, Entry, KeyBounds, Table, TableMap};
use crate::StorageError;

/// One write of a job, to undo: the key and what the batch held under it before (`None`:
/// nothing; `Some(None)`: a delete).
type Undo = (Table, Vec<u8>, Option<Option<Vec<u8>>>);

/// Runs on the writer thread after the batch commits, before any waiter is told.
pub(crate) type Hook = Box<dyn FnOnce()>;

/// The write side of one job: reads see the batch so far plus this job's own writes; writes go
/// into the batch and are undone if the job fails.
///
/// Memory: the batch holds everything the job writes (and the undo list a copy of each key it
/// wrote outside the index table), so a job's size is bounded by what the caller puts in it
/// (the database layer's document and transaction limits).
pub struct WriteTxn<'a> {
    snapshot: &'a Snapshot,
    batch: &'a mut Changes,
    undo: Vec<Undo>,
    /// How many appended index writes the batch held when the job started: undoing the job
    /// truncates back to it (index writes are appended, not put in a map: `Changes`).
    appended_at_start: usize,
    /// The batch's appended index writes as a map, built by the first index range scan after
    /// a write (rare inside write jobs: index builds) and dropped by the next write.
    appended_map: OnceCell<TableMap>,
    hooks: Vec<Hook>,
    /// The job wrote something (see `Changes::local`).
    wrote: bool,
    /// The job applied a replicated record (`replication::apply_record`).
    from_log: bool,
}

impl<'a> WriteTxn<'a> {
    pub(crate) fn new(snapshot: &'a Snapshot, batch: &'a mut Changes) -> Self {
        WriteTxn {
            snapshot,
            appended_at_start: batch.appended().len(),
            batch,
            undo: Vec::new(),
            appended_map: OnceCell::new(),
            hooks: Vec::new(),
            wrote: false,
            from_log: false,
        }
    }

    /// Says that this job's writes are a replicated record's, not the store's own.
    pub(crate) fn mark_from_log(&mut self) {
        self.from_log = true;
    }

    /// Ends the job: keeps its writes and returns its hooks if it succeeded, else restores the
    /// batch as it was before the job and drops the hooks.
    pub(crate) fn finish(self, ok: bool) -> Vec<Hook> {
        if ok {
            if self.from_log {
                self.batch.from_log = true;
            } else if self.wrote {
                self.batch.local = true;
            }
            return self.hooks;
        }
        self.batch.truncate_appended(self.appended_at_start);
        for (table, key, previous) in self.undo.into_iter().rev() {
            let map = self.batch.table_mut(table);
            match previous {
                Some(value) => {
                    map.insert(key, value);
                }
                None => {
                    map.remove(&key);
                }
            }
        }
        Vec::new()
    }

    fn write(&mut self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.wrote = true;
        if table == APPENDED_TABLE {
            self.appended_map.take();
            self.batch.append(key, value);
            return;
        }
        let previous = self.batch.table_mut(table).insert(key.clone(), value);
        self.undo.push((table, key, previous));
    }

    /// What the batch so far (with this job's writes) says about `key`: `Some(None)` for a
    /// delete, `None` if it does not mention the key.
    fn pending(&self, table: Table, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if table == APPENDED_TABLE {
            let newest = self.batch.appended().iter().rev().find(|(k, _)| k == key);
            if let Some((_, value)) = newest {
                return Some(value.clone());
            }
        }
        self.batch.table(table).get(key).cloned()
    }

    /// The value under `key` as this job would leave it.
    pub fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(pending) = self.pending(table, key) {
            return Ok(pending);
        }
        self.snapshot.get(table, key)
    }

    /// The value under `key` as this job would leave it, given `read`: what a [`ReadTxn`]
    /// at `at` returned for it. When `at` is an ancestor of the job's snapshot, only the
    /// batches committed since `at` (in memory, a few) and this batch are looked at, and `read`
    /// is the answer if none of them wrote `key`; otherwise (a checkpoint has replaced redb's
    /// state since `at`) this is [`get`](WriteTxn::get). So callers may read on their own
    /// thread what a job will need and spare the writer the reads that reach redb (in a trigger
    /// fan-out, a quarter of the writer's time went to the before-images of new documents).
    ///
    /// [`ReadTxn`]: crate::ReadTxn
    pub fn get_read_at(
        &self,
        table: Table,
        key: &[u8],
        at: &ReadPoint,
        read: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(pending) = self.pending(table, key) {
            return Ok(pending);
        }
        let Some(newer) = self.snapshot.layers_since(at) else {
            return self.snapshot.get(table, key);
        };
        let hash = key_hash(key);
        for layer in newer.iter().rev() {
            if let Some(pending) = layer.get(table, key, hash) {
                return Ok(pending.clone());
            }
        }
        Ok(read.map(<[u8]>::to_vec))
    }

    /// A counter stored with [`encode_u64`](crate::encode_u64).
    pub fn get_u64(&self, table: Table, key: &[u8]) -> Result<Option<u64>, StorageError> {
        self.get(table, key)?
            .map(|bytes| tables::decode_u64(&bytes))
            .transpose()
    }

    /// Sets `key` to `value`. Fails only if the entry exceeds
    /// [`ENTRY_BYTES_MAX`](crate::ENTRY_BYTES_MAX).
    pub fn put(
        &mut self,
        table: Table,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<(), StorageError> {
        let (key, value) = (key.into(), value.into());
        tables::check_entry(&key, &value)?;
        self.write(table, key, Some(value));
        Ok(())
    }

    /// Stores a counter with [`encode_u64`](crate::encode_u64).
    pub fn put_u64(
        &mut self,
        table: Table,
        key: impl Into<Vec<u8>>,
        n: u64,
    ) -> Result<(), StorageError> {
        self.put(table, key, tables::encode_u64(n))
    }

    /// Removes `key` (a no-op if it is absent).
    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.write(table, key.into(), None);
    }

    /// The entries in `range` as this job would leave them, lazily, in key order.
    ///
    /// The iterator borrows the `WriteTxn`, so writing while scanning does not compile:
    /// collect the keys to change first, then write.
    pub fn range<K: AsRef<[u8]>>(
        &self,
        table: Table,
        range: impl RangeBounds<K>,
    ) -> Result<WriteRange<'_>, StorageError> {
        self.merged(table, tables::key_bounds(&range))
    }

    /// The entries whose keys start with `prefix`, as this job would leave them.
    pub fn prefix(&self, table: Table, prefix: &[u8]) -> Result<WriteRange<'_>, StorageError> {
        let owned = tables::prefix_bounds(prefix);
        self.merged(table, tables::borrow_bounds(&owned))
    }

    fn merged(&self, table: Table, bounds: KeyBounds<'_>) -> Result<WriteRange<'_>, StorageError> {
        let map = self.batch.table(table);
        let inner = if table == APPENDED_TABLE && !self.batch.appended().is_empty() {
            let appended = self.appended_map.get_or_init(|| {
                sorted_newest(self.batch.appended().to_vec())
                    .into_iter()
                    .collect()
            });
            self.snapshot.merged(table, bounds, &[map, appended])?
        } else {
            self.snapshot.merged(table, bounds, &[map])?
        };
        Ok(WriteRange { inner })
    }

    /// Runs `hook` on the writer thread once this job's batch has committed and before any
    /// waiter of the batch is resolved; hooks run in job order. Dropped if the job fails or the
    /// batch does not commit. A hook must not block: it holds up every later commit (hand work
    /// to a bounded queue with `try_send`).
    pub fn on_commit(&mut self, hook: impl FnOnce() + 'static) {
        self.hooks.push(Box::new(hook));
    }
}

/// A job's view of a key range: everything committed, merged with the batch so far and the
/// job's pending writes (newer writes win, deletes hide). Lazy and double-ended.
pub struct WriteRange<'a> {
    inner: Merged<'a>,
}

impl Iterator for WriteRange<'_> {
    type Item = Result<Entry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.step(Side::Front)
    }
}

impl DoubleEndedIterator for WriteRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.step(Side::Back)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use proptest::prelude::*;

    use crate::{Entry, StorageError, Store, StoreOptions, Table, WriteTxn};

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;

    fn run<T: Send + 'static>(
        store: &Store,
        job: impl FnOnce(&mut WriteTxn<'_>) -> Result<T, StorageError> + Send + 'static,
    ) -> T {
        store.submit(job).unwrap().wait().unwrap()
    }

    #[test]
    fn a_job_reads_its_own_writes_over_the_batch() {
        let store = Store::in_memory(StoreOptions::default()).unwrap();
        run(&store, |txn| {
            txn.put(Table::Docs, b"a", b"1")?;
            txn.put(Table::Docs, b"b", b"2")?;
            txn.put(Table::Docs, b"c", b"3")
        });
        let seen = run(&store, |txn| {
            txn.put(Table::Docs, b"b", b"two")?;
            txn.delete(Table::Docs, b"c");
            txn.put(Table::Docs, b"d", b"4")?;
            txn.put_u64(Table::Meta, b"seq", 7)?;
            let got = (txn.get(Table::Docs, b"b")?, txn.get(Table::Docs, b"c")?);
            let all: Vec<Entry> = txn
                .range::<&[u8]>(Table::Docs, ..)?
                .collect::<Result<_, _>>()?;
            Ok((got, all, txn.get_u64(Table::Meta, b"seq")?))
        });
        assert_eq!(seen.0, (Some(b"two".to_vec()), None));
        let keys: Vec<_> = seen
            .1
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(keys, [(&b"a"[..], &b"1"[..]), (b"b", b"two"), (b"d", b"4")]);
        assert_eq!(seen.2, Some(7));
    }

    #[test]
    fn a_value_read_at_a_point_stands_until_a_later_batch_writes_its_key() {
        let store = Store::in_memory(StoreOptions {
            checkpoint_interval_ms: 3_600_000,
            ..StoreOptions::default()
        })
        .unwrap();
        let empty = store.read().unwrap().point();
        run(&store, |txn| {
            txn.put(Table::Docs, b"a", b"1")?;
            txn.put(Table::Docs, b"b", b"1")
        });
        let at = store.read().unwrap().point();
        let get = |at: &crate::ReadPoint, key: &'static [u8], read: Option<&'static [u8]>| {
            let at = at.clone();
            run(&store, move |txn| {
                txn.get_read_at(Table::Docs, key, &at, read)
            })
        };
        // Nothing wrote the keys since the point: what was read there is the answer (a
        // stand-in shows that the store was not read again).
        assert_eq!(
            get(&at, b"a", Some(b"stand-in")),
            Some(b"stand-in".to_vec())
        );
        assert_eq!(get(&at, b"zz", None), None);
        // A point before every layer: the layers since decide.
        assert_eq!(get(&empty, b"a", None), Some(b"1".to_vec()));
        // Batches committed after the point win over what was read at it.
        run(&store, |txn| {
            txn.put(Table::Docs, b"b", b"2")?;
            txn.delete(Table::Docs, b"a");
            Ok(())
        });
        assert_eq!(get(&at, b"b", Some(b"1")), Some(b"2".to_vec()));
        assert_eq!(get(&at, b"a", Some(b"1")), None);
        // So do the job's own writes and its batch's.
        let at2 = at.clone();
        let own = run(&store, move |txn| {
            txn.put(Table::Docs, b"c", b"3")?;
            txn.get_read_at(Table::Docs, b"c", &at2, None)
        });
        assert_eq!(own, Some(b"3".to_vec()));
        // Once a checkpoint has replaced redb's state the point is no ancestor of the job's
        // snapshot: the store is read, whatever the caller read.
        store.checkpoint().unwrap();
        assert_eq!(get(&at, b"b", Some(b"stand-in")), Some(b"2".to_vec()));
        assert_eq!(get(&at, b"a", Some(b"stand-in")), None);
        assert_eq!(get(&empty, b"c", None), Some(b"3".to_vec()));
    }

    #[test]
    fn oversized_entries_fail_at_put() {
        let store = Store::in_memory(StoreOptions::default()).unwrap();
        let err = store
            .submit(|txn| {
                let big = vec![0u8; crate::ENTRY_BYTES_MAX];
                txn.put(Table::Docs, b"k", big)
            })
            .unwrap()
            .wait()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "entry of 1073741825 bytes exceeds the limit of 1073741824 bytes"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Delete(u8),
    }

    /// Keys from a small alphabet (including 0x00 and 0xFF) so puts, deletes and bounds collide.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0x7f, 0xff]), 0..3)
    }

    fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
        prop_oneof![
            Just(Bound::Unbounded),
            key().prop_map(Bound::Included),
            key().prop_map(Bound::Excluded),
        ]
    }

    fn cases() -> u32 {
        std::env::var("HERALD_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128)
    }

    /// Reads `iter` taking from the front where `pattern` says true and from the back otherwise,
    /// so that the two ends meet in the middle.
    fn drain<I>(mut iter: I, pattern: &[bool]) -> Result<Vec<Vec<u8>>, StorageError>
    where
        I: DoubleEndedIterator<Item = Result<Entry, StorageError>>,
    {
        let (mut front, mut back) = (Vec::new(), Vec::new());
        for &from_front in pattern.iter().cycle() {
            let next = if from_front {
                iter.next()
            } else {
                iter.next_back()
            };
            match next {
                Some(entry) => {
                    let (k, v) = entry?;
                    let mut item = k;
                    item.extend_from_slice(b"=");
                    item.extend_from_slice(&v);
                    if from_front {
                        front.push(item)
                    } else {
                        back.push(item)
                    }
                }
                None => break,
            }
        }
        back.reverse();
        front.extend(back);
        Ok(front)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// `WriteTxn::range` agrees with a BTreeMap model of "batch so far + this job's writes",
        /// read from either end or both.
        #[test]
        fn merged_range_matches_model(
            committed in prop::collection::btree_map(key(), any::<u8>(), 0..12),
            ops in prop::collection::vec(prop_oneof![
                (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Put(k % 8, v)),
                any::<u8>().prop_map(|k| Op::Delete(k % 8)),
            ], 0..12),
            start in bound(),
            end in bound(),
            pattern in prop::collection::vec(any::<bool>(), 1..4),
        ) {
            let store = Store::in_memory(StoreOptions::default()).unwrap();
            let mut model: Model = committed.iter().map(|(k, v)| (k.clone(), vec![*v])).collect();
            let first = model.clone();
            run(&store, move |txn| {
                for (k, v) in first {
                    txn.put(Table::Index, k, v)?;
                }
                Ok(())
            });
            // Ops address keys drawn from the committed ones and a few fresh ones.
            let mut universe: Vec<Vec<u8>> = committed.keys().cloned().collect();
            universe.extend([vec![], vec![1], vec![0xff, 0xff], vec![2, 0]]);
            let ops: Vec<(Vec<u8>, Option<u8>)> = ops.iter().map(|op| match op {
                Op::Put(k, v) => (universe[*k as usize % universe.len()].clone(), Some(*v)),
                Op::Delete(k) => (universe[*k as usize % universe.len()].clone(), None),
            }).collect();
            for (k, v) in &ops {
                match v {
                    Some(v) => model.insert(k.clone(), vec![*v]),
                    None => model.remove(k),
                };
            }
            let bounds = (start.clone(), end.clone());
            let pattern_job = pattern.clone();
            let got = run(&store, move |txn| {
                for (k, v) in ops {
                    match v {
                        Some(v) => txn.put(Table::Index, k, [v])?,
                        None => txn.delete(Table::Index, k),
                    }
                }
                drain(txn.range(Table::Index, bounds)?, &pattern_job)
            });
            let empty = crate::tables::is_empty_range(&crate::tables::key_bounds(&(start.clone(), end.clone())));
            let expected: Vec<Vec<u8>> = if empty {
                Vec::new()
            } else {
                model.range((start, end)).map(|(k, v)| [k.as_slice(), b"=", v].concat()).collect()
            };
            prop_assert_eq!(got, expected);
        }
    }
}
