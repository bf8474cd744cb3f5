//! Tests of index writes in a batch: appended rather than put in the batch's map (`Changes`),
//! seen by later jobs of the batch and undone with a failed job.

use crate::testing::{memory, put, stall};
use crate::{Entry, StorageError, Table, WriteTxn};

/// Index writes are appended to the batch, not put in its map (`Changes`): jobs of the batch
/// still see the earlier jobs' writes (point reads, and range scans in both directions, also
/// after a job's own later write), the last write of a key wins, and a failed job's appended
/// writes are undone, whether it returned `Err` or panicked.
#[test]
fn index_writes_of_a_batch_are_seen_by_its_later_jobs_and_undone_with_a_failed_job() {
    let store = memory(1024, 1024);
    put(&store, b"committed").wait().unwrap();
    store
        .submit(|txn| txn.put(Table::Index, b"i/old", b"0"))
        .unwrap()
        .wait()
        .unwrap();
    let (stalled, release) = stall(&store);
    let first = store
        .submit(|txn| {
            txn.put(Table::Index, b"i/b", b"1")?;
            txn.put(Table::Index, b"i/a", b"1")?;
            txn.put(Table::Index, b"i/b", b"2")?;
            txn.delete(Table::Index, b"i/old");
            Ok::<_, StorageError>(())
        })
        .unwrap();
    let failing = store
        .submit(|txn| {
            txn.put(Table::Index, b"i/a", b"bad")?;
            txn.put(Table::Index, b"i/c", b"bad")?;
            txn.put(Table::Index, b"i/old", b"bad")?;
            Err::<(), _>(StorageError::Commit("refused".into()))
        })
        .unwrap();
    let panicking = store
        .submit(|txn: &mut WriteTxn<'_>| -> Result<(), StorageError> {
            txn.delete(Table::Index, b"i/b");
            let scanned = txn.range::<&[u8]>(Table::Index, ..)?.count();
            assert_eq!(scanned, 1, "its own delete is seen");
            panic!("job bug");
        })
        .unwrap();
    let seen = store
        .submit(|txn| {
            let scan = |txn: &WriteTxn<'_>, back: bool| -> Result<Vec<Entry>, StorageError> {
                let range = txn.range::<&[u8]>(Table::Index, ..)?;
                if back {
                    range.rev().collect()
                } else {
                    range.collect()
                }
            };
            let before = scan(txn, false)?;
            let backwards = scan(txn, true)?;
            let points = [
                txn.get(Table::Index, b"i/b")?,
                txn.get(Table::Index, b"i/old")?,
            ];
            txn.put(Table::Index, b"i/d", b"3")?;
            let after = scan(txn, false)?;
            Ok::<_, StorageError>((before, backwards, points, after))
        })
        .unwrap();
    drop(release);
    stalled.wait().unwrap();
    first.wait().unwrap();
    assert!(failing.wait().is_err());
    assert!(panicking.wait().is_err());
    let (before, backwards, points, after) = seen.wait().unwrap();
    let e = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
    assert_eq!(before, [e(b"i/a", b"1"), e(b"i/b", b"2")]);
    assert_eq!(backwards, [e(b"i/b", b"2"), e(b"i/a", b"1")]);
    assert_eq!(points, [Some(b"2".to_vec()), None]);
    assert_eq!(after, [e(b"i/a", b"1"), e(b"i/b", b"2"), e(b"i/d", b"3")]);
    let read = store.read().unwrap();
    let committed: Vec<Entry> = read
        .range::<&[u8]>(Table::Index, ..)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(committed, after, "committed");
    assert_eq!(store.metrics().last_batch_size, 4, "one batch");
}
