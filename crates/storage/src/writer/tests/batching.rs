//! The group-commit writer through a store: batching, per-job rollback, hooks and delivery
//! after commit, the bounded queue, awaiting tickets, shutdown.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::testing::{memory, put, stall, visible};
use crate::{Durability, StorageError, Store, StoreOptions, Table, Ticket, WriteError, WriteTxn};

type Reply = Result<(), WriteError<StorageError>>;

#[test]
fn queued_jobs_share_one_commit() {
    let store = memory(1024, 1024);
    let (stalled, release) = stall(&store);
    let tickets: Vec<_> = (0..200u32).map(|i| put(&store, &i.to_be_bytes())).collect();
    drop(release);
    stalled.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    let m = store.metrics();
    // One commit for the stall, one for all 200 jobs queued behind it.
    assert_eq!(
        (m.commits, m.jobs_committed, m.last_batch_size),
        (2, 201, 200)
    );
}

#[test]
fn batch_max_splits_a_backlog() {
    let store = memory(8, 1024);
    let (stalled, release) = stall(&store);
    let tickets: Vec<_> = (0..20u32).map(|i| put(&store, &i.to_be_bytes())).collect();
    drop(release);
    stalled.wait().unwrap();
    tickets.into_iter().for_each(|t| t.wait().unwrap());
    let m = store.metrics();
    assert_eq!(
        (m.commits, m.last_batch_size),
        (1 + 3, 4),
        "batches of 8, 8 and 4"
    );
}

#[test]
fn concurrent_submitters_are_batched() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    let (threads, per_thread) = (4u32, 50u32);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    put(&store, &(t * 1000 + i).to_be_bytes()).wait().unwrap();
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let m = store.metrics();
    assert_eq!(m.jobs_committed, u64::from(threads * per_thread));
    // With fsync'd commits and four waiting submitters, jobs pile up behind each commit.
    assert!(m.commits < m.jobs_committed, "no batching: {m:?}");
}

#[test]
fn a_failed_job_leaves_no_writes_while_its_batch_mates_commit() {
    let store = memory(1024, 1024);
    let (stalled, release) = stall(&store);
    let a = put(&store, b"a");
    let failing = store
        .submit(|txn| {
            txn.put(Table::Docs, b"b", b"b")?;
            txn.put(Table::Meta, b"counter", b"1")?;
            assert!(
                txn.get(Table::Docs, b"b")?.is_some(),
                "a job sees its own writes"
            );
            Err::<(), _>(StorageError::Commit("refused by the job".into()))
        })
        .unwrap();
    let c = store
        .submit(|txn| {
            // Later jobs see earlier successful jobs of the batch, never a failed one's writes.
            let a_seen = txn.get(Table::Docs, b"a")?.is_some();
            let b_seen = txn.get(Table::Docs, b"b")?.is_some();
            txn.put(Table::Docs, b"c", b"c")?;
            Ok::<_, StorageError>((a_seen, b_seen))
        })
        .unwrap();
    drop(release);
    stalled.wait().unwrap();
    a.wait().unwrap();
    assert!(matches!(
        failing.wait(),
        Err(WriteError::Job(StorageError::Commit(_)))
    ));
    assert_eq!(c.wait().unwrap(), (true, false));
    let m = store.metrics();
    assert_eq!(
        (m.commits, m.jobs_failed, m.last_batch_size),
        (2, 1, 3),
        "one batch"
    );
    assert!(visible(&store, b"a") && visible(&store, b"c"));
    assert!(!visible(&store, b"b"));
    assert_eq!(
        store.read().unwrap().get(Table::Meta, b"counter").unwrap(),
        None
    );
}

/// A failed job's writes go into the batch and are undone: keys it overwrote or deleted get
/// back what the earlier jobs of the batch left there (several writes to one key included), and
/// keys it created disappear, whether it returned `Err` or panicked.
#[test]
fn a_failed_job_restores_what_earlier_jobs_of_its_batch_wrote() {
    let store = memory(1024, 1024);
    let (stalled, release) = stall(&store);
    let first = store
        .submit(|txn| {
            txn.put(Table::Docs, b"x", b"x1")?;
            txn.put(Table::Docs, b"y", b"y1")?;
            txn.put(Table::Meta, b"m", b"m1")
        })
        .unwrap();
    let failing = store
        .submit(|txn| {
            txn.put(Table::Docs, b"x", b"x2")?;
            txn.put(Table::Docs, b"x", b"x3")?;
            txn.delete(Table::Docs, b"y");
            txn.put(Table::Docs, b"new", b"n")?;
            txn.delete(Table::Meta, b"m");
            txn.put(Table::Meta, b"m", b"m2")?;
            Err::<(), _>(StorageError::Commit("refused".into()))
        })
        .unwrap();
    let panicking = store
        .submit(|txn: &mut WriteTxn<'_>| -> Result<(), StorageError> {
            txn.put(Table::Docs, b"y", b"y9")?;
            txn.put(Table::Docs, b"other", b"o")?;
            panic!("job bug");
        })
        .unwrap();
    let seen = store
        .submit(|txn| {
            let get = |t, k: &[u8]| txn.get(t, k);
            Ok::<_, StorageError>([
                get(Table::Docs, b"x")?,
                get(Table::Docs, b"y")?,
                get(Table::Docs, b"new")?,
                get(Table::Docs, b"other")?,
                get(Table::Meta, b"m")?,
            ])
        })
        .unwrap();
    drop(release);
    stalled.wait().unwrap();
    first.wait().unwrap();
    assert!(failing.wait().is_err());
    assert!(panicking.wait().is_err());
    let expected = [
        Some(b"x1".to_vec()),
        Some(b"y1".to_vec()),
        None,
        None,
        Some(b"m1".to_vec()),
    ];
    assert_eq!(seen.wait().unwrap(), expected, "seen within the batch");
    let read = store.read().unwrap();
    let committed = [
        read.get(Table::Docs, b"x").unwrap(),
        read.get(Table::Docs, b"y").unwrap(),
        read.get(Table::Docs, b"new").unwrap(),
        read.get(Table::Docs, b"other").unwrap(),
        read.get(Table::Meta, b"m").unwrap(),
    ];
    assert_eq!(committed, expected, "committed");
    assert_eq!(store.metrics().last_batch_size, 4, "one batch");
}

#[test]
fn a_panicking_job_is_contained() {
    let store = memory(1024, 1024);
    let (stalled, release) = stall(&store);
    let panics = store
        .submit(|txn: &mut WriteTxn<'_>| -> Result<(), StorageError> {
            txn.put(Table::Docs, b"p", b"p")?;
            panic!("job bug");
        })
        .unwrap();
    let after = put(&store, b"q");
    drop(release);
    stalled.wait().unwrap();
    match panics.wait() {
        Err(WriteError::Storage(e)) => assert_eq!(
            (e.code(), e.to_string().contains("job bug")),
            ("job_panicked", true)
        ),
        other => panic!("expected job_panicked, got {other:?}"),
    }
    after.wait().unwrap();
    assert!(!visible(&store, b"p") && visible(&store, b"q"));
    put(&store, b"r").wait().unwrap();
}

#[test]
fn a_ticket_resolves_only_after_its_batch_commits() {
    let store = memory(1024, 1024);
    let (stalled, release) = stall(&store);
    let first = put(&store, b"first");
    // In the same batch, a later job holds the commit back until released.
    let (hold_release, hold) = mpsc::channel::<()>();
    let holder = store
        .submit(move |_txn| {
            let _ = hold.recv();
            Ok::<_, StorageError>(())
        })
        .unwrap();
    drop(release);
    stalled.wait().unwrap();
    // `first` has run and succeeded, but its batch has not committed: no answer yet.
    assert!(first.wait_timeout(Duration::from_millis(100)).is_none());
    assert!(!visible(&store, b"first"));
    drop(hold_release);
    // The moment the ticket resolves, a fresh snapshot sees the write.
    first.wait().unwrap();
    assert!(visible(&store, b"first"));
    holder.wait().unwrap();
}

#[test]
fn hooks_run_in_order_after_commit_and_before_waiters() {
    let store = memory(1024, 1024);
    let (events_tx, events) = mpsc::channel();
    let (stalled, release) = stall(&store);
    let tickets: Vec<Ticket<(), StorageError>> = (0..3)
        .map(|i| {
            let events_tx = events_tx.clone();
            store
                .submit(move |txn| {
                    txn.on_commit(move || events_tx.send(i).unwrap());
                    if i == 1 {
                        return Err(StorageError::Commit("no".into()));
                    }
                    Ok(())
                })
                .unwrap()
        })
        .collect();
    drop(release);
    stalled.wait().unwrap();
    let results: Vec<Reply> = tickets.into_iter().map(Ticket::wait).collect();
    assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok());
    // Both hooks had run by the time the first waiter woke; the failed job's hook never runs.
    assert_eq!(events.try_iter().collect::<Vec<_>>(), [0, 2]);
}

#[test]
fn try_submit_reports_overloaded_when_the_queue_is_full() {
    let store = memory(1024, 2);
    let (stalled, release) = stall(&store);
    let queued: Vec<_> = (0..2u8)
        .map(|i| {
            store
                .try_submit(move |txn| txn.put(Table::Docs, [i], [i]))
                .unwrap()
        })
        .collect();
    let err = store
        .try_submit(|_txn| Ok::<_, StorageError>(()))
        .err()
        .unwrap();
    assert_eq!(
        (err.code(), err.to_string().contains("2 queued")),
        ("overloaded", true)
    );
    drop(release);
    stalled.wait().unwrap();
    queued.into_iter().for_each(|t| t.wait().unwrap());
    // Room again once the writer has drained the queue.
    store
        .try_submit(|_txn| Ok::<_, StorageError>(()))
        .unwrap()
        .wait()
        .unwrap();
}

#[test]
fn tickets_can_be_awaited() {
    let store = memory(1024, 1024);
    let ticket = store
        .submit(|txn| txn.put(Table::Docs, b"k", b"v").map(|()| 42))
        .unwrap();
    assert_eq!(block_on(ticket.into_future()).unwrap(), 42);
    assert!(visible(&store, b"k"));
}

/// A minimal executor: polls on the current thread, parking until the writer wakes it.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

use std::future::IntoFuture;

#[test]
fn close_commits_every_queued_job_and_reopen_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let (stalled, release) = stall(&store);
    let tickets: Vec<_> = (0..10u8).map(|i| put(&store, &[i])).collect();
    // Release the writer only after `close` has begun, so the jobs are still queued then.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(release);
    });
    store.close().unwrap();
    releaser.join().unwrap();
    stalled.wait().unwrap();
    tickets.into_iter().for_each(|t| t.wait().unwrap());
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!((0..10u8).all(|i| visible(&store, &[i])));
}

#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let err = Store::open(dir.path(), StoreOptions::default())
        .err()
        .unwrap();
    assert_eq!(err.code(), "storage_locked");
}

#[test]
fn nosync_writes_survive_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        durability: Durability::NoSync,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("nested/dir"), options.clone()).unwrap();
    (0..5u8).for_each(|i| put(&store, &[i]).wait().unwrap());
    drop(store);
    let store = Store::open(&dir.path().join("nested/dir"), options).unwrap();
    assert!((0..5u8).all(|i| visible(&store, &[i])));
}

#[test]
fn zero_bounds_are_refused() {
    let err = Store::in_memory(StoreOptions {
        batch_max: 0,
        ..StoreOptions::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.code(), "invalid_options");
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Store>();
    send::<crate::ReadTxn>();
    send::<Ticket<Vec<u8>, StorageError>>();
    send::<crate::TicketFuture<Vec<u8>, StorageError>>();
}
