//! Snapshot reads: [`ReadTxn`], a consistent view of every table as of one commit, and
//! [`ReadRange`], the lazy key-ordered iterator that scans use.
//!
//! A snapshot is redb as of the last checkpoint plus the batches committed since (in-memory
//! layers, see `layer.rs`). Taking one is a mutex acquisition and a few reference-count
//! increments; reads never wait for the writer or the checkpointer, and neither waits for
//! reads. Hold a `ReadTxn` only as long as needed: it keeps its layers in memory and its redb
//! pages from being reused after the next checkpoint.

use std::ops::RangeBounds;
use std::sync::Arc;

use crate::layer::{ReadPoint, Snapshot};
use crate::merge::{Merged, Side};
use crate::tables::{self, Entry, Table};
use crate::StorageError;

/// A read-only snapshot of the whole store as of the last commit before [`Store::read`]
/// returned. Later commits are invisible to it.
///
/// [`Store::read`]: crate::Store::read
pub struct ReadTxn {
    snapshot: Arc<Snapshot>,
}

impl ReadTxn {
    pub(crate) fn new(snapshot: Arc<Snapshot>) -> Self {
        ReadTxn { snapshot }
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.snapshot
            .get(table, key)
            .map_err(|err| damaged(table, Some(key), err))
    }

    /// Where this transaction reads, for a write job that reuses values read here (see
    /// [`WriteTxn::get_read_at`](crate::WriteTxn::get_read_at)).
    pub fn point(&self) -> ReadPoint {
        self.snapshot.point()
    }

    /// A counter stored with [`encode_u64`](crate::encode_u64).
    pub fn get_u64(&self, table: Table, key: &[u8]) -> Result<Option<u64>, StorageError> {
        self.get(table, key)?
            .map(|bytes| tables::decode_u64(&bytes))
            .transpose()
    }

    /// The entries whose keys fall in `range`, lazily, in key order (`.rev()` for descending).
    ///
    /// Bounds may be any byte-like type: `txn.range(t, b"a".as_slice()..b"c".as_slice())`,
    /// `txn.range(t, start_vec..)`; a full scan is `txn.range::<&[u8]>(t, ..)`.
    pub fn range<K: AsRef<[u8]>>(
        &self,
        table: Table,
        range: impl RangeBounds<K>,
    ) -> Result<ReadRange<'_>, StorageError> {
        let inner = self
            .snapshot
            .merged(table, tables::key_bounds(&range), &[])
            .map_err(|err| damaged(table, None, err))?;
        Ok(ReadRange { inner, table })
    }

    /// The entries whose keys start with `prefix`, lazily, in key order.
    pub fn prefix(&self, table: Table, prefix: &[u8]) -> Result<ReadRange<'_>, StorageError> {
        let owned = tables::prefix_bounds(prefix);
        let inner = self
            .snapshot
            .merged(table, tables::borrow_bounds(&owned), &[])
            .map_err(|err| damaged(table, Some(prefix), err))?;
        Ok(ReadRange { inner, table })
    }

    /// A digest of every entry of every table (64-bit FNV-1a over table, key and value, in key
    /// order): equal stores have equal digests wherever their entries are placed (B-tree, runs,
    /// layers). Reads everything; for tests and cluster checks, not for hot paths.
    pub fn digest(&self) -> Result<u64, StorageError> {
        const PRIME: u64 = 0x0100_0000_01b3;
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(PRIME);
            }
        };
        for table in Table::ALL {
            for entry in self.range::<&[u8]>(table, ..)? {
                let (key, value) = entry?;
                eat(&[table.index() as u8]);
                eat(&(key.len() as u64).to_le_bytes());
                eat(&key);
                eat(&(value.len() as u64).to_le_bytes());
                eat(&value);
            }
        }
        Ok(hash)
    }

    /// The number of entries in `table`. Constant time in redb, plus one lookup per key written
    /// since the last checkpoint.
    pub fn len(&self, table: Table) -> Result<u64, StorageError> {
        self.snapshot.len(table)
    }
}

/// A lazy iterator over a key range of one table, yielding owned `(key, value)` pairs.
///
/// Each step reads at most one more redb page, so a scan over millions of keys holds only the
/// pages on its current path. After the first error it yields nothing more: redb releases
/// before 4.3 could skip unreadable entries and carry on after an `Err`, and a scan that
/// silently omits data is worse than one that stops.
pub struct ReadRange<'a> {
    inner: Merged<'a>,
    table: Table,
}

impl Iterator for ReadRange<'_> {
    type Item = Result<Entry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let table = self.table;
        Some(
            self.inner
                .step(Side::Front)?
                .map_err(|e| damaged(table, None, e)),
        )
    }
}

impl DoubleEndedIterator for ReadRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let table = self.table;
        Some(
            self.inner
                .step(Side::Back)?
                .map_err(|e| damaged(table, None, e)),
        )
    }
}

/// A read that failed because the disk returned an error or the bytes are not what was
/// written: [`StorageError::Corrupted`], naming the table (and the key, if one was asked for)
/// so that an operator knows what is damaged. The damaged bytes themselves are never returned.
/// Other errors pass unchanged.
fn damaged(table: Table, key: Option<&[u8]>, err: StorageError) -> StorageError {
    let at = match key {
        Some(key) => {
            let shown: String = String::from_utf8_lossy(key).chars().take(120).collect();
            format!("table {}, key {shown:?}", table.name())
        }
        None => format!("table {}", table.name()),
    };
    match err {
        StorageError::Io(e) => StorageError::Corrupted(format!("reading {at}: {e}")),
        StorageError::Corrupted(msg) if !msg.starts_with("reading table ") => {
            StorageError::Corrupted(format!("reading {at}: {msg}"))
        }
        other => other,
    }
}

impl std::iter::FusedIterator for ReadRange<'_> {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use proptest::prelude::*;

    use crate::{Store, StoreOptions, Table};

    fn store_with(entries: &[(&[u8], &[u8])]) -> Store {
        let store = Store::in_memory(StoreOptions::default()).unwrap();
        let owned: Vec<(Vec<u8>, Vec<u8>)> = entries
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        store
            .submit(move |txn| {
                for (k, v) in owned {
                    txn.put(Table::Docs, k, v)?;
                }
                Ok::<_, crate::StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        store
    }

    fn keys(iter: impl Iterator<Item = Result<super::Entry, crate::StorageError>>) -> Vec<Vec<u8>> {
        iter.map(|e| e.unwrap().0).collect()
    }

    #[test]
    fn get_range_and_prefix_follow_byte_order() {
        let entries: [(&[u8], &[u8]); 6] = [
            (b"b", b"2"),
            (b"a", b"1"),
            (b"ab", b"12"),
            (b"a\xff", b"1f"),
            (b"a\xff\xff", b"1ff"),
            (b"c", b"3"),
        ];
        let store = store_with(&entries);
        let r = store.read().unwrap();
        assert_eq!(r.get(Table::Docs, b"ab").unwrap(), Some(b"12".to_vec()));
        assert_eq!(r.get(Table::Docs, b"zz").unwrap(), None);
        assert_eq!(
            r.get(Table::Index, b"ab").unwrap(),
            None,
            "tables are separate keyspaces"
        );
        assert_eq!(r.len(Table::Docs).unwrap(), 6);

        let all = keys(r.range::<&[u8]>(Table::Docs, ..).unwrap());
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert_eq!(all.len(), 6);

        let mid = keys(
            r.range(Table::Docs, b"ab".as_slice()..b"c".as_slice())
                .unwrap(),
        );
        assert_eq!(
            mid,
            [
                b"ab".to_vec(),
                b"a\xff".to_vec(),
                b"a\xff\xff".to_vec(),
                b"b".to_vec()
            ]
        );
        let pre = keys(r.prefix(Table::Docs, b"a").unwrap());
        assert_eq!(pre.len(), 4);
        assert_eq!(keys(r.prefix(Table::Docs, b"a\xff").unwrap()).len(), 2);
        let back = keys(r.prefix(Table::Docs, b"a").unwrap().rev());
        assert_eq!(back.first().unwrap(), b"a\xff\xff");
        assert!(r
            .range(Table::Docs, b"c".as_slice()..b"a".as_slice())
            .unwrap()
            .next()
            .is_none());
    }

    /// Reads `iter` from the front where `pattern` says true and from the back otherwise, so
    /// the two ends meet in the middle.
    fn drain<I>(mut iter: I, pattern: &[bool]) -> Vec<(Vec<u8>, Vec<u8>)>
    where
        I: DoubleEndedIterator<Item = Result<super::Entry, crate::StorageError>>,
    {
        let (mut front, mut back) = (Vec::new(), Vec::new());
        for &from_front in pattern.iter().cycle() {
            let next = if from_front {
                iter.next()
            } else {
                iter.next_back()
            };
            match next {
                Some(entry) if from_front => front.push(entry.unwrap()),
                Some(entry) => back.push(entry.unwrap()),
                None => break,
            }
        }
        back.reverse();
        front.extend(back);
        front
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// One batch (its own layer): puts (`Some`) and deletes (`None`) of small keys.
        Batch(Vec<(u8, Option<u8>)>),
        /// Apply every layer so far to redb.
        Checkpoint,
    }

    fn key_of(k: u8) -> Vec<u8> {
        // Keys of length 1 and 2 so that prefixes and bounds interleave.
        if k < 6 {
            vec![k]
        } else {
            vec![k % 6, k]
        }
    }

    fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
        prop_oneof![
            Just(Bound::Unbounded),
            (0u8..12).prop_map(|k| Bound::Included(key_of(k))),
            (0u8..12).prop_map(|k| Bound::Excluded(key_of(k))),
        ]
    }

    fn cases() -> u32 {
        std::env::var("HERALD_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// Reads through any mix of checkpointed data (redb) and un-checkpointed layers,
        /// with overwrites and deletes at every level, agree with a BTreeMap model: `get`,
        /// `len`, and ranges read from either end or both, by readers and by a write job
        /// (whose own pending writes form one more level).
        #[test]
        fn reads_merge_layers_and_redb_like_a_model(
            steps in prop::collection::vec(prop_oneof![
                4 => prop::collection::vec((0u8..12, prop::option::of(any::<u8>())), 1..6)
                    .prop_map(Step::Batch),
                1 => Just(Step::Checkpoint),
            ], 0..24),
            pending in prop::collection::vec((0u8..12, prop::option::of(any::<u8>())), 0..4),
            ranges in prop::collection::vec(
                (bound(), bound(), prop::collection::vec(any::<bool>(), 1..4)), 1..5),
        ) {
            let store = Store::in_memory(StoreOptions {
                checkpoint_interval_ms: 3_600_000,
                ..StoreOptions::default()
            })
            .unwrap();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for step in steps {
                match step {
                    Step::Checkpoint => store.checkpoint().unwrap(),
                    Step::Batch(ops) => {
                        for (k, v) in &ops {
                            match v {
                                Some(v) => model.insert(key_of(*k), vec![*v]),
                                None => model.remove(&key_of(*k)),
                            };
                        }
                        store
                            .submit(move |txn| {
                                for (k, v) in ops {
                                    match v {
                                        Some(v) => txn.put(Table::Index, key_of(k), [v])?,
                                        None => txn.delete(Table::Index, key_of(k)),
                                    }
                                }
                                Ok::<_, crate::StorageError>(())
                            })
                            .unwrap()
                            .wait()
                            .unwrap();
                    }
                }
            }
            let read = store.read().unwrap();
            for k in 0u8..12 {
                prop_assert_eq!(read.get(Table::Index, &key_of(k)).unwrap(), model.get(&key_of(k)).cloned());
            }
            prop_assert_eq!(read.len(Table::Index).unwrap(), model.len() as u64);
            let expect = |model: &BTreeMap<Vec<u8>, Vec<u8>>, start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>| {
                let bounds = (start.clone(), end.clone());
                if crate::tables::is_empty_range(&crate::tables::key_bounds(&bounds)) {
                    return Vec::new();
                }
                model.range(bounds).map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
            };
            for (start, end, pattern) in &ranges {
                let got = drain(read.range(Table::Index, (start.clone(), end.clone())).unwrap(), pattern);
                prop_assert_eq!(got, expect(&model, start, end));
            }
            // A write job sees the same, plus its own pending writes.
            let mut with_pending = model.clone();
            for (k, v) in &pending {
                match v {
                    Some(v) => with_pending.insert(key_of(*k), vec![*v]),
                    None => with_pending.remove(&key_of(*k)),
                };
            }
            let job_ranges = ranges.clone();
            let seen = store
                .submit(move |txn| {
                    for (k, v) in pending {
                        match v {
                            Some(v) => txn.put(Table::Index, key_of(k), [v])?,
                            None => txn.delete(Table::Index, key_of(k)),
                        }
                    }
                    let mut seen = Vec::new();
                    for (start, end, pattern) in job_ranges {
                        seen.push(drain(txn.range(Table::Index, (start, end))?, &pattern));
                    }
                    // Fail, so the pending writes never commit.
                    Err::<(), _>(crate::StorageError::Commit(format!("{seen:?}")))
                })
                .unwrap()
                .wait()
                .unwrap_err();
            let expected: Vec<_> = ranges.iter().map(|(s, e, _)| expect(&with_pending, s, e)).collect();
            prop_assert_eq!(
                seen.to_string(),
                crate::WriteError::<crate::StorageError>::Job(crate::StorageError::Commit(format!("{expected:?}"))).to_string()
            );
            // The failed job left nothing behind.
            prop_assert_eq!(read.len(Table::Index).unwrap(), store.read().unwrap().len(Table::Index).unwrap());
        }
    }

    #[test]
    fn a_snapshot_does_not_see_later_commits() {
        let store = store_with(&[(b"k", b"old")]);
        let before = store.read().unwrap();
        store
            .submit(|txn| txn.put(Table::Docs, b"k", b"new"))
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            before.get(Table::Docs, b"k").unwrap(),
            Some(b"old".to_vec())
        );
        let after = store.read().unwrap();
        assert_eq!(after.get(Table::Docs, b"k").unwrap(), Some(b"new".to_vec()));
    }
}
