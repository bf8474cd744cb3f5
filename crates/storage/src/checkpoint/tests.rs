//! The checkpointer through a store: a failed checkpoint, back-pressure on the writer when the
//! checkpointer falls behind, durable and non-durable checkpoints and the log they free, the
//! per-table counts.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::testing::{log_segments, put, visible, wait_until, FailingBackend};
use crate::{Store, StoreOptions, Table};

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
    // (Everything checkpointed is part of the wait: a durable checkpoint may run while a
    // non-durable one still holds the last layers.)
    wait_until(
        "a durable checkpoint of everything with no new writes",
        || {
            let m = store.metrics();
            m.durable_checkpoints >= 1 && m.layers_bytes == 0 && log_segments(dir.path()) <= 1
        },
    );
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
