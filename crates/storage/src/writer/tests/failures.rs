//! A log that cannot be written: every job of the batch learns it, and the store refuses later
//! writes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::testing::{put, stall, visible};
use crate::{Store, StoreOptions, Table};

#[test]
fn a_failed_commit_reaches_every_job_of_the_batch() {
    // The commit point is the write-ahead log, so that is the disk that breaks here.
    let fail = Arc::new(AtomicBool::new(false));
    let store = Store::with_wal(
        redb::backends::InMemoryBackend::new(),
        crate::wal::Wal::Failing(fail.clone()),
        StoreOptions::default(),
    )
    .unwrap();
    put(&store, b"before").wait().unwrap();
    let (stalled, release) = stall(&store);
    let mut tickets: Vec<_> = (0..2u8).map(|i| put(&store, &[i])).collect();
    // The batch's last job breaks the disk, so the batch runs fine and then fails to commit.
    tickets.push(
        store
            .submit(move |txn| {
                fail.store(true, Ordering::SeqCst);
                txn.put(Table::Docs, b"last", b"last")
            })
            .unwrap(),
    );
    drop(release);
    stalled.wait().unwrap();
    for t in tickets {
        assert_eq!(
            t.wait().unwrap_err().storage().unwrap().code(),
            "storage_io"
        );
    }
    let m = store.metrics();
    assert_eq!((m.commits, m.commit_failures, m.last_batch_size), (2, 1, 3));
    assert!(visible(&store, b"before") && !visible(&store, &[0]) && !visible(&store, b"last"));
    // The store refuses further writes after an I/O error; later jobs get that error too.
    let later = put(&store, b"later").wait().unwrap_err();
    assert_eq!(later.storage().unwrap().code(), "storage_io");
}
