//! Helpers the crate's unit tests share: small stores, one-key jobs, a writer held busy, a
//! redb backend that fails on demand, polling for what background threads do.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::{StorageError, Store, StoreOptions, Table, Ticket, WriteTxn};

pub(crate) fn memory(batch_max: usize, write_queue_max: usize) -> Store {
    Store::in_memory(StoreOptions {
        batch_max,
        write_queue_max,
        ..StoreOptions::default()
    })
    .unwrap()
}

pub(crate) fn put(store: &Store, key: &[u8]) -> Ticket<(), StorageError> {
    let key = key.to_vec();
    store
        .submit(move |txn| txn.put(Table::Docs, key.clone(), key))
        .unwrap()
}

pub(crate) fn visible(store: &Store, key: &[u8]) -> bool {
    store
        .read()
        .unwrap()
        .get(Table::Docs, key)
        .unwrap()
        .is_some()
}

/// A job that puts `name` and, once committed, sends `name` to `order`: tests read the order
/// of commits from it.
pub(crate) fn recorded(
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
pub(crate) fn stall(store: &Store) -> (Ticket<(), StorageError>, mpsc::Sender<()>) {
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

/// The write-ahead-log segment files in `dir`.
pub(crate) fn log_segments(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("wal-") && name.ends_with(".log")
        })
        .count()
}

pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An in-memory backend whose writes and syncs fail while `fail` is set.
#[derive(Debug)]
pub(crate) struct FailingBackend {
    pub(crate) inner: redb::backends::InMemoryBackend,
    pub(crate) fail: Arc<AtomicBool>,
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
