//! Tests of the group-commit writer: batching, per-job rollback, delivery after commit, the
//! bounded queue, commit failures and shutdown.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::{Durability, StorageError, Store, StoreOptions, Table, Ticket, WriteError, WriteTxn};

type Reply = Result<(), WriteError<StorageError>>;

pub(super) fn memory(batch_max: usize, write_queue_max: usize) -> Store {
    Store::in_memory(StoreOptions {
        batch_max,
        write_queue_max,
        ..StoreOptions::default()
    })
    .unwrap()
}

pub(super) fn put(store: &Store, key: &[u8]) -> Ticket<(), StorageError> {
    let key = key.to_vec();
    store
        .submit(move |txn| txn.put(Table::Docs, key.clone(), key))
        .unwrap()
}

fn visible(store: &Store, key: &[u8]) -> bool {
    store
        .read()
        .unwrap()
        .get(Table::Docs, key)
        .unwrap()
        .is_some()
}

/// A job that puts `name` and, once committed, sends `name` to `order`: tests read the order
/// of commits from it.
fn recorded(
    order: &mpsc::Sender<&'static str>,
    name: &'static str,
) -> impl FnOnce(&mut WriteTxn<'_>) -> Result<(), StorageError> + Send + 'static {
    let order = order.clone();
    move |txn: &mut WriteTxn<'_>| {
        txn.put(Table::Docs, name.as_bytes().to_vec(), b"x".to_vec())?;
        txn.on_commit(move || order.send(name).unwrap());
        Ok(())
    }
}

/// Occupies the writer with a job that blocks until the returned sender fires (or is dropped),
/// so the jobs submitted meanwhile queue up into the next batch. Returns once the job runs.
pub(super) fn stall(store: &Store) -> (Ticket<(), StorageError>, mpsc::Sender<()>) {
    let (started_tx, started) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let ticket = store
        .submit(move |_txn| {
            started_tx.send(()).unwrap();
            let _ = released.recv();
            Ok(())
        })
        .unwrap();
    started.recv().unwrap();
    (ticket, release)
}

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
fn background_jobs_yield_to_foreground_jobs() {
    // A zero budget: each batch takes its foreground jobs and exactly one background job.
    let store = Store::in_memory(StoreOptions {
        background_batch_ms_max: 0,
        ..StoreOptions::default()
    })
    .unwrap();
    let (order_tx, order) = mpsc::channel();
    let (stalled, release) = stall(&store);
    let job = |name: &'static str| recorded(&order_tx, name);
    let background: Vec<_> = ["b1", "b2", "b3"]
        .into_iter()
        .map(|n| store.submit_background(job(n)).unwrap())
        .collect();
    let foreground = store.submit(job("f1")).unwrap();
    drop(release);
    stalled.wait().unwrap();
    foreground.wait().unwrap();
    for t in background {
        t.wait().unwrap();
    }
    // The stalled batch took one background job when the stall ended; the foreground job,
    // queued after the other two, goes first in the next batch, which takes one more.
    let seen: Vec<&str> = order.try_iter().collect();
    assert_eq!(seen, ["b1", "f1", "b2", "b3"]);
    assert!(["b1", "b2", "b3", "f1"]
        .iter()
        .all(|k| visible(&store, k.as_bytes())));
}

#[test]
fn a_waiting_client_job_ends_the_background_work_of_a_batch_within_its_budget() {
    // A budget no test machine exhausts: without a client job waiting, one batch would take
    // every background job.
    let store = Store::in_memory(StoreOptions {
        background_batch_ms_max: 60_000,
        ..StoreOptions::default()
    })
    .unwrap();
    let (order_tx, order) = mpsc::channel();
    let (client_tx, client_rx) = mpsc::channel::<Ticket<(), StorageError>>();
    let job = |name: &'static str| recorded(&order_tx, name);
    let (stalled, release) = stall(&store);
    let store = Arc::new(store);
    // b1 submits the client job while it runs: the client job waits in the queue when the
    // batch looks for its next background job.
    let b1 = {
        let handle = store.clone();
        let inner = job("b1");
        let f1 = job("f1");
        store
            .submit_background(move |txn: &mut WriteTxn<'_>| {
                client_tx.send(handle.submit(f1).unwrap()).unwrap();
                inner(txn)
            })
            .unwrap()
    };
    let rest: Vec<_> = ["b2", "b3"]
        .into_iter()
        .map(|n| store.submit_background(job(n)).unwrap())
        .collect();
    drop(release);
    stalled.wait().unwrap();
    b1.wait().unwrap();
    client_rx.recv().unwrap().wait().unwrap();
    for t in rest {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    assert_eq!(seen, ["b1", "f1", "b2", "b3"]);
}

#[test]
fn client_jobs_never_share_a_batch_with_background_jobs_and_the_two_take_turns() {
    let store = memory(1024, 1024);
    let (order_tx, order) = mpsc::channel();
    let job = |name: &'static str| recorded(&order_tx, name);
    let (stalled, release) = stall(&store);
    let before = store.metrics().commits;
    let tickets = vec![
        store.submit_background(job("b1")).unwrap(),
        store.submit_background(job("b2")).unwrap(),
        store.submit(job("f1")).unwrap(),
        store.submit(job("f2")).unwrap(),
    ];
    drop(release);
    stalled.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    // The stalled client batch took no background job; background had the next turn and
    // stopped after one job because clients waited; the clients' batch held both of them
    // and nothing else; then the last background job.
    assert_eq!(seen, ["b1", "f1", "f2", "b2"]);
    // stall (counted before its commit or after, so 3 or 4), [b1], [f1, f2], [b2]
    let batches = store.metrics().commits - before;
    assert!((3..=4).contains(&batches), "{batches} batches");
}

#[test]
fn a_heavy_background_job_runs_after_the_queued_client_jobs_in_a_batch_of_its_own() {
    let store = memory(1024, 1024);
    let (order_tx, order) = mpsc::channel();
    let (stalled, release) = stall(&store);
    let job = |name: &'static str| recorded(&order_tx, name);
    let heavy = store.submit_background_heavy(job("heavy")).unwrap();
    let light = store.submit_background(job("light")).unwrap();
    let client = store.submit(job("client")).unwrap();
    drop(release);
    stalled.wait().unwrap();
    for t in [heavy, light, client] {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    // The heavy job was met first while the stalled batch filled up; the client job, queued
    // meanwhile, still commits before it, in a batch without it.
    let pos = |n: &str| seen.iter().position(|s| *s == n).unwrap();
    assert!(pos("client") < pos("heavy"), "{seen:?}");
}

#[test]
fn background_jobs_never_fill_the_foreground_queue() {
    // Many background jobs while the writer is busy leave the one-slot foreground queue free.
    let store = memory(1024, 1);
    let (stalled, release) = stall(&store);
    let queued: Vec<_> = (0..100u32)
        .map(|i| {
            store
                .submit_background(move |txn| {
                    txn.put(Table::Docs, i.to_be_bytes().to_vec(), b"1".to_vec())
                })
                .unwrap()
        })
        .collect();
    let client = store.try_submit(|_txn| Ok::<(), StorageError>(()));
    assert!(
        client.is_ok(),
        "a client job found the queue full of wake-ups"
    );
    drop(release);
    stalled.wait().unwrap();
    client.unwrap().wait().unwrap();
    for t in queued {
        t.wait().unwrap();
    }
}

#[test]
fn background_jobs_wake_an_idle_writer_and_commit_on_close() {
    let store = memory(1024, 1024);
    let t = store
        .submit_background(|txn| txn.put(Table::Docs, b"bg".to_vec(), b"1".to_vec()))
        .unwrap();
    t.wait_timeout(Duration::from_secs(10))
        .expect("an idle writer picks up a background job")
        .unwrap();
    assert!(visible(&store, b"bg"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let (stalled, release) = stall(&store);
    let queued: Vec<_> = (0..50u32)
        .map(|i| {
            store
                .submit_background(move |txn| {
                    txn.put(Table::Docs, i.to_be_bytes().to_vec(), b"1".to_vec())
                })
                .unwrap()
        })
        .collect();
    drop(release);
    drop(stalled);
    store.close().unwrap();
    for t in queued {
        t.wait().unwrap();
    }
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.read().unwrap().len(Table::Docs).unwrap(), 50);
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

/// An in-memory backend whose writes and syncs fail while `fail` is set.
#[derive(Debug)]
struct FailingBackend {
    inner: redb::backends::InMemoryBackend,
    fail: Arc<AtomicBool>,
}

impl FailingBackend {
    fn check(&self) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected disk failure"));
        }
        Ok(())
    }
}

impl redb::StorageBackend for FailingBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

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

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Store>();
    send::<crate::ReadTxn>();
    send::<Ticket<Vec<u8>, StorageError>>();
    send::<crate::TicketFuture<Vec<u8>, StorageError>>();
}

#[test]
fn a_failed_checkpoint_fails_later_writes_but_reads_go_on() {
    let fail = Arc::new(AtomicBool::new(false));
    let backend = FailingBackend {
        inner: redb::backends::InMemoryBackend::new(),
        fail: fail.clone(),
    };
    // Checkpoints only when asked, so the test decides which batches reach redb.
    let options = StoreOptions {
        checkpoint_interval_ms: 3_600_000,
        ..StoreOptions::default()
    };
    let store = Store::with_backend(backend, options).unwrap();
    put(&store, b"before").wait().unwrap();
    store.checkpoint().unwrap();
    put(&store, b"layered").wait().unwrap();
    fail.store(true, Ordering::SeqCst);
    assert_eq!(store.checkpoint().unwrap_err().code(), "storage_io");
    // Committed writes stay readable, from redb and from memory.
    assert!(visible(&store, b"before") && visible(&store, b"layered"));
    // Like a failed commit, a failed checkpoint refuses further writes until reopened.
    let later = put(&store, b"later").wait().unwrap_err();
    assert_eq!(later.storage().unwrap().code(), "storage_io");
    assert!(!visible(&store, b"later"));
    let m = store.metrics();
    assert_eq!((m.checkpoints, m.commit_failures), (1, 2));
}

/// An in-memory backend whose writes wait while the gate is shut: a disk too slow for the
/// checkpointer to keep up.
#[derive(Debug)]
struct GatedBackend {
    inner: redb::backends::InMemoryBackend,
    gate: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl redb::StorageBackend for GatedBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let (shut, changed) = &*self.gate;
        let mut guard = shut.lock().unwrap();
        while *guard {
            guard = changed.wait(guard).unwrap();
        }
        drop(guard);
        self.inner.write(offset, data)
    }
}

#[test]
fn the_writer_waits_for_the_checkpointer_when_the_layers_are_full() {
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let set_gate = |shut: bool| {
        *gate.0.lock().unwrap() = shut;
        gate.1.notify_all();
    };
    let backend = GatedBackend {
        inner: redb::backends::InMemoryBackend::new(),
        gate: gate.clone(),
    };
    let max = 64 << 10;
    let options = StoreOptions {
        checkpoint_bytes: 1 << 10,
        checkpoint_interval_ms: 1,
        // Every checkpoint durable, so each one writes to the slow disk.
        durable_checkpoint_interval_ms: 0,
        layers_bytes_max: max,
        ..StoreOptions::default()
    };
    let store = Arc::new(Store::with_backend(backend, options).unwrap());
    set_gate(true);
    // Each write is a batch of its own of about 4 KiB, so about 16 fill the layers.
    let writes = 64u32;
    let submitter = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..writes {
                store
                    .submit(move |txn| txn.put(Table::Docs, i.to_be_bytes(), vec![7u8; 4096]))
                    .unwrap()
                    .wait()
                    .unwrap();
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.metrics().writer_stalls == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never waited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    let stalled = store.metrics();
    assert!(
        !submitter.is_finished(),
        "writes went on while the layers were full"
    );
    // Bounded: the limit plus at most the one batch that crossed it.
    assert!(
        stalled.layers_bytes >= max as u64 && stalled.layers_bytes < (max + 8192) as u64,
        "{stalled:?}"
    );
    assert!(stalled.jobs_committed < u64::from(writes));
    set_gate(false);
    submitter.join().unwrap();
    store.checkpoint().unwrap();
    let done = store.metrics();
    assert_eq!(
        (done.jobs_committed, done.layers_bytes),
        (u64::from(writes), 0)
    );
    assert!((0..writes).all(|i| visible(&store, &i.to_be_bytes())));
}

#[test]
fn a_long_heavy_job_does_not_hold_back_the_acknowledgement_of_the_batch_before_it() {
    // On disk, so the client job's batch really waits for a log sync while the writer moves
    // on (the pipelined case).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let started = std::time::Instant::now();
    let client = put(&store, b"client");
    let heavy = store
        .submit_background_heavy(|txn: &mut WriteTxn<'_>| {
            std::thread::sleep(Duration::from_millis(400));
            txn.put(Table::Docs, b"heavy".to_vec(), b"x".to_vec())
        })
        .unwrap();
    client.wait().unwrap();
    let client_done = started.elapsed();
    heavy.wait().unwrap();
    let heavy_done = started.elapsed();
    assert!(
        client_done + Duration::from_millis(300) < heavy_done,
        "the client's write was acknowledged at {client_done:?}, the heavy job at {heavy_done:?}"
    );
    store.close().unwrap();
}

/// The write-ahead-log segment files in `dir`.
fn log_segments(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("wal-") && name.ends_with(".log")
        })
        .count()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An on-disk store that checkpoints every millisecond, durably once a pending non-durable
/// checkpoint is `durable_ms` old, with 1 KiB log segments.
fn checkpointing_store(durable_ms: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        checkpoint_interval_ms: 1,
        durable_checkpoint_interval_ms: durable_ms,
        wal_segment_bytes: 1 << 10,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), options).unwrap();
    (dir, store)
}

#[test]
fn non_durable_checkpoints_keep_the_log_until_a_durable_one_covers_it() {
    let (dir, store) = checkpointing_store(3_600_000);
    for i in 0u32..64 {
        store
            .submit(move |txn| txn.put(Table::Docs, i.to_be_bytes(), vec![1u8; 256]))
            .unwrap()
            .wait()
            .unwrap();
    }
    wait_until("every batch checkpointed", || {
        let m = store.metrics();
        m.layers_bytes == 0 && m.checkpoints >= 2
    });
    let m = store.metrics();
    assert_eq!(m.durable_checkpoints, 0, "{m:?}");
    // Everything is in redb (not yet durably), readable from there...
    assert!((0u32..64).all(|i| visible(&store, &i.to_be_bytes())));
    // ...and every segment is kept: a crash now reopens redb before these batches.
    let kept = log_segments(dir.path());
    assert!(kept > 8, "{kept} segments");
    store.checkpoint().unwrap();
    assert!(store.metrics().durable_checkpoints >= 1);
    let left = log_segments(dir.path());
    assert!(left <= 1, "covered segments deleted: {left} of {kept} left");
    assert!((0u32..64).all(|i| visible(&store, &i.to_be_bytes())));
}

#[test]
fn a_pending_non_durable_checkpoint_becomes_durable_on_its_own() {
    let (dir, store) = checkpointing_store(50);
    for i in 0u32..16 {
        put(&store, &i.to_be_bytes()).wait().unwrap();
    }
    // No more writes: the checkpointer must still make redb durable and free the log.
    wait_until("a durable checkpoint with no new writes", || {
        store.metrics().durable_checkpoints >= 1 && log_segments(dir.path()) <= 1
    });
    assert_eq!(store.metrics().layers_bytes, 0);
}

#[test]
fn a_reopened_store_has_every_batch_after_non_durable_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        checkpoint_interval_ms: 1,
        durable_checkpoint_interval_ms: 3_600_000,
        ..StoreOptions::default()
    };
    {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        for i in 0u32..32 {
            put(&store, &i.to_be_bytes()).wait().unwrap();
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), options).unwrap();
    assert!((0u32..32).all(|i| visible(&store, &i.to_be_bytes())));
}

#[test]
fn checkpoints_count_the_entries_they_write_per_table() {
    let (_dir, store) = checkpointing_store(3_600_000);
    for i in 0u32..20 {
        store
            .submit(move |txn| {
                txn.put(Table::Docs, i.to_be_bytes(), vec![1u8; 64])?;
                txn.put(Table::Index, [b'a', i as u8], vec![0u8])?;
                txn.put(Table::Index, [b'b', i as u8], vec![0u8])
            })
            .unwrap()
            .wait()
            .unwrap();
    }
    // Every key is written once, so the counts do not depend on how many checkpoints ran.
    store.checkpoint().unwrap();
    let m = store.metrics();
    let tables: Vec<(&str, u64)> = m.checkpoint_tables().map(|(t, n, _)| (t, n)).collect();
    assert_eq!(
        tables,
        [
            ("docs", 20),
            ("index", 40),
            ("log", 0),
            ("meta", 0),
            ("tasks", 0)
        ],
        "{m:?}"
    );
    let docs_and_index: u64 = m.checkpoint_tables().take(2).map(|(_, _, ns)| ns).sum();
    assert!(docs_and_index > 0 && m.checkpoint_commit_nanos > 0, "{m:?}");
}
