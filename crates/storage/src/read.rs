//! Snapshot reads: [`ReadTxn`], a consistent MVCC view of every table as of one commit, and
//! [`ReadRange`], the lazy key-ordered iterator that scans use.
//!
//! Reads never wait for the writer and the writer never waits for reads; redb keeps the pages
//! a live snapshot needs until the snapshot is dropped. Hold a `ReadTxn` only as long as needed:
//! a long-lived one keeps old pages from being reused and so grows the file.

use std::cell::OnceCell;
use std::ops::RangeBounds;

use redb::{ReadOnlyTable, ReadableTable, ReadableTableMetadata};

use crate::tables::{self, KeyBounds, Table, TABLE_COUNT};
use crate::StorageError;

type RawTable = ReadOnlyTable<&'static [u8], &'static [u8]>;
type RawRange<'a> = redb::Range<'a, &'static [u8], &'static [u8]>;

/// A key and its value, both owned.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A read-only snapshot of the whole store as of the last commit before [`Store::read`]
/// returned. Later commits are invisible to it.
///
/// [`Store::read`]: crate::Store::read
pub struct ReadTxn {
    // Opened on first use and cached; declared before `txn` so they drop before it.
    tables: [OnceCell<RawTable>; TABLE_COUNT],
    txn: redb::ReadTransaction,
}

impl ReadTxn {
    pub(crate) fn new(txn: redb::ReadTransaction) -> Self {
        ReadTxn {
            tables: Default::default(),
            txn,
        }
    }

    fn table(&self, table: Table) -> Result<&RawTable, StorageError> {
        let cell = &self.tables[table.index()];
        if let Some(open) = cell.get() {
            return Ok(open);
        }
        let open = self.txn.open_table(table.definition())?;
        Ok(cell.get_or_init(|| open))
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let raw = self.table(table)?;
        let found = ReadableTable::get(raw, key)?;
        Ok(found.map(|guard| guard.value().to_vec()))
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
        let raw = self.table(table)?;
        ReadRange::over(raw, tables::key_bounds(&range))
    }

    /// The entries whose keys start with `prefix`, lazily, in key order.
    pub fn prefix(&self, table: Table, prefix: &[u8]) -> Result<ReadRange<'_>, StorageError> {
        let raw = self.table(table)?;
        let owned = tables::prefix_bounds(prefix);
        ReadRange::over(raw, tables::borrow_bounds(&owned))
    }

    /// The number of entries in `table` (constant time in redb).
    pub fn len(&self, table: Table) -> Result<u64, StorageError> {
        Ok(self.table(table)?.len()?)
    }
}

/// A lazy iterator over a key range of one table, yielding owned `(key, value)` pairs.
///
/// Each step reads at most one more page, so a scan over millions of keys holds only the pages
/// on its current path. After the first error it yields nothing more: redb releases before 4.3
/// could skip unreadable entries and carry on after an `Err`, and a scan that silently omits
/// data is worse than one that stops.
pub struct ReadRange<'a> {
    // `None` once exhausted or after an error.
    inner: Option<RawRange<'a>>,
}

impl<'a> ReadRange<'a> {
    pub(crate) fn over<T>(table: &'a T, bounds: KeyBounds<'_>) -> Result<Self, StorageError>
    where
        T: ReadableTable<&'static [u8], &'static [u8]>,
    {
        if tables::is_empty_range(&bounds) {
            return Ok(ReadRange { inner: None });
        }
        Ok(ReadRange {
            inner: Some(table.range::<&[u8]>(bounds)?),
        })
    }

    fn step(&mut self, item: Option<RawItem<'a>>) -> Option<Result<Entry, StorageError>> {
        match item {
            Some(Ok((key, value))) => Some(Ok((key.value().to_vec(), value.value().to_vec()))),
            Some(Err(err)) => {
                self.inner = None;
                Some(Err(err.into()))
            }
            None => {
                self.inner = None;
                None
            }
        }
    }
}

type RawItem<'a> = Result<
    (
        redb::AccessGuard<'a, &'static [u8]>,
        redb::AccessGuard<'a, &'static [u8]>,
    ),
    redb::StorageError,
>;

impl Iterator for ReadRange<'_> {
    type Item = Result<Entry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next();
        self.step(item)
    }
}

impl DoubleEndedIterator for ReadRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next_back();
        self.step(item)
    }
}

impl std::iter::FusedIterator for ReadRange<'_> {}

#[cfg(test)]
mod tests {
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
