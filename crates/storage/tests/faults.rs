//! Defined behaviour under disk faults, one test per behaviour, on [`FaultFs`]: a full disk
//! (refused with `storage_full`, reads go on, writes resume by themselves once space returns,
//! the reserve lets a checkpoint and a clean close finish), a failed fsync (nothing
//! unacknowledged survives it, every later write is refused until a reopen), a read error
//! (`storage_corrupted` naming the table, never the damaged bytes), a power cut that tears the
//! log's tail (recovery drops it) and `check` (finds a damaged log record; refuses a store that
//! is open); and a failed batch releases what its jobs and hooks hold before its waiters hear.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use herald_storage::{
    check, Fault, FaultFs, Op, StorageError, Store, StoreOptions, Table, WriteError,
};

const DIR: &str = "/store";

fn options() -> StoreOptions {
    StoreOptions {
        reserve_bytes: 256 << 10,
        // Checkpoints only when a test asks, so each test knows what is in redb.
        checkpoint_interval_ms: 3_600_000,
        checkpoint_bytes: usize::MAX / 2,
        // Small segments: rotations, spares and recycling happen within a test.
        wal_segment_bytes: 256 << 10,
        ..StoreOptions::default()
    }
}

fn open(fs: &FaultFs, options: StoreOptions) -> Result<Store, StorageError> {
    Store::open_with(Path::new(DIR), options, Arc::new(fs.clone()))
}

/// Puts `key` = `value` in the docs table and waits; the storage error, if any.
fn put(store: &Store, key: &str, value: &[u8]) -> Result<(), StorageError> {
    let (key, value) = (key.as_bytes().to_vec(), value.to_vec());
    store
        .submit(move |txn| txn.put(Table::Docs, key, value))?
        .wait()
        .map_err(|err| match err {
            WriteError::Job(e) | WriteError::Storage(e) => e,
        })
}

fn get(store: &Store, key: &str) -> Option<Vec<u8>> {
    store
        .read()
        .unwrap()
        .get(Table::Docs, key.as_bytes())
        .unwrap()
}

fn assert_clean(fs: &FaultFs) {
    let report = check(Path::new(DIR), Arc::new(fs.clone()), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "check found {:?}", report.findings);
}

#[test]
fn a_full_disk_refuses_writes_with_storage_full_and_resumes_when_space_returns() {
    let fs = FaultFs::new(1);
    let store = open(&fs, options()).unwrap();
    put(&store, "before", b"1").unwrap();
    // A disk just big enough for what is there and a few records more.
    fs.set_capacity(Some(fs.used() + 4096));
    let value = vec![7u8; 1000];
    let mut acked = Vec::new();
    let err = (0..100)
        .find_map(|i| {
            let key = format!("k{i}");
            match put(&store, &key, &value) {
                Ok(()) => {
                    acked.push(key);
                    None
                }
                Err(err) => Some(err),
            }
        })
        .expect("the disk filled");
    assert_eq!(err.code(), "storage_full", "{err}");
    assert!(store.metrics().disk_full);
    assert_eq!(
        store.write_refusal().map(|e| e.code()),
        Some("storage_full")
    );
    // Refused again while full (the probe cannot retake the reserve), reads carry on.
    assert_eq!(
        put(&store, "refused", b"x").unwrap_err().code(),
        "storage_full"
    );
    assert_eq!(get(&store, "before").as_deref(), Some(&b"1"[..]));
    assert!(acked.iter().all(|k| get(&store, k).is_some()));
    assert_eq!(get(&store, "refused"), None);
    // Space returns: asking why writes are refused probes, and finds none (no write needed:
    // the trigger dispatcher resumes this way); the next write goes through, without a reopen.
    fs.set_capacity(None);
    assert!(store.write_refusal().is_none());
    assert!(!store.metrics().disk_full);
    put(&store, "after", b"2").unwrap();
    // Power loss: everything acknowledged is there, nothing refused is.
    let fs = fs.reboot(false);
    drop(store);
    let store = open(&fs, options()).unwrap();
    for key in acked.iter().map(String::as_str).chain(["before", "after"]) {
        assert!(get(&store, key).is_some(), "{key} was acknowledged");
    }
    assert_eq!(get(&store, "refused"), None);
    store.close().unwrap();
    assert_clean(&fs);
}

#[test]
fn enospc_on_a_log_write_refuses_that_batch_and_the_store_goes_on() {
    let fs = FaultFs::new(2);
    let store = open(&fs, options()).unwrap();
    put(&store, "a", b"1").unwrap();
    fs.fail(Op::Write, 1, Fault::NoSpace, false);
    assert_eq!(put(&store, "b", b"2").unwrap_err().code(), "storage_full");
    assert_eq!(get(&store, "b"), None);
    // The probe retakes the reserve (the disk has room): the next write commits.
    put(&store, "c", b"3").unwrap();
    let fs = fs.reboot(true);
    drop(store);
    let store = open(&fs, options()).unwrap();
    assert!(get(&store, "a").is_some() && get(&store, "c").is_some());
    assert_eq!(get(&store, "b"), None, "a refused write came back");
    store.close().unwrap();
    assert_clean(&fs);
}

/// Linux drops the pages an fsync failed to write and then reports the next fsync as a
/// success: a store that retried the sync and carried on would acknowledge writes whose
/// predecessor is gone. This one refuses every write after a failed sync.
#[test]
fn a_failed_fsync_refuses_later_writes_and_loses_nothing_acknowledged() {
    let fs = FaultFs::new(3);
    let store = open(&fs, options()).unwrap();
    put(&store, "a", b"1").unwrap();
    fs.fail(Op::Sync, 1, Fault::Io, false);
    let err = put(&store, "b", b"2").unwrap_err();
    assert_eq!(err.code(), "storage_io", "{err}");
    let err = put(&store, "c", b"3").unwrap_err();
    assert_eq!(
        err.code(),
        "storage_io",
        "a write after a failed fsync: {err}"
    );
    assert_eq!(store.write_refusal().map(|e| e.code()), Some("storage_io"));
    assert!(get(&store, "a").is_some(), "reads go on");
    assert_eq!(get(&store, "b"), None);
    let fs = fs.reboot(false);
    drop(store);
    let store = open(&fs, options()).unwrap();
    assert!(get(&store, "a").is_some());
    assert_eq!(get(&store, "b"), None, "an unacknowledged write survived");
    assert_eq!(get(&store, "c"), None, "an unacknowledged write survived");
    put(&store, "d", b"4").unwrap();
    store.close().unwrap();
    assert_clean(&fs);
}

#[test]
fn a_checkpoint_and_a_clean_close_succeed_on_a_full_disk_thanks_to_the_reserve() {
    for (reserve, expect_ok) in [(8 << 20, true), (0, false)] {
        let fs = FaultFs::new(4);
        let options = StoreOptions {
            reserve_bytes: reserve,
            ..options()
        };
        let store = open(&fs, options.clone()).unwrap();
        let value = vec![9u8; 4000];
        // Enough in the log that checkpointing it grows redb's file (submitted together, so
        // that they share batches and syncs).
        let tickets: Vec<_> = (0..1000)
            .map(|i| {
                let (key, value) = (format!("k{i:04}").into_bytes(), value.clone());
                store
                    .submit(move |txn| txn.put(Table::Docs, key, value))
                    .unwrap()
            })
            .collect();
        for ticket in tickets {
            ticket.wait().unwrap();
        }
        // Full: the log has just enough room left for a few records.
        fs.set_capacity(Some(fs.used() + 8192));
        while put(&store, "x", &value).is_ok() {}
        let checkpointed = store.checkpoint();
        assert_eq!(
            checkpointed.is_ok(),
            expect_ok,
            "reserve {reserve}: {checkpointed:?} {:?} used {}",
            fs.injected(),
            fs.used()
        );
        if expect_ok {
            store.close().unwrap();
            let fs = fs.reboot(false);
            fs.set_capacity(None);
            let store = open(&fs, options).unwrap();
            assert_eq!(get(&store, "k0999").as_deref(), Some(&value[..]));
            store.close().unwrap();
            assert_clean(&fs);
        }
    }
}

#[test]
fn a_read_error_is_storage_corrupted_naming_the_table() {
    let fs = FaultFs::new(5);
    let small_cache = StoreOptions {
        cache_bytes_max: 0,
        ..options()
    };
    let store = open(&fs, small_cache.clone()).unwrap();
    for i in 0..50 {
        put(&store, &format!("k{i}"), &[1u8; 3000]).unwrap();
    }
    store.close().unwrap();
    let store = open(&fs, small_cache).unwrap();
    fs.fail(Op::Read, 1, Fault::Io, true);
    let err = store
        .read()
        .unwrap()
        .get(Table::Docs, b"k7")
        .expect_err("the read failed");
    assert_eq!(err.code(), "storage_corrupted", "{err}");
    assert!(err.to_string().contains("table docs"), "{err}");
    let scan = store.read().unwrap();
    let scanned: Result<Vec<_>, _> = scan
        .range::<&[u8]>(Table::Docs, ..)
        .and_then(|r| r.collect());
    let err = scanned.expect_err("the scan failed");
    assert_eq!(err.code(), "storage_corrupted", "{err}");
    fs.heal();
    // redb refuses its file after an I/O error until a reopen, but the store serves what is
    // not in redb yet, and the log still takes writes.
    put(&store, "new", b"1").unwrap();
    assert!(get(&store, "new").is_some());
    drop(store);
    let store = open(&fs, options()).unwrap();
    assert!(get(&store, "k7").is_some(), "a reopen reads again");
}

/// Power lost in the middle of the log's sync, and the unsynced record reaching the disk torn
/// at a random byte: recovery drops the torn tail, keeps every acknowledged batch.
#[test]
fn a_power_cut_during_a_log_sync_tears_the_tail_and_recovery_drops_it() {
    for seed in 0..20u64 {
        let fs = FaultFs::new(seed);
        let store = open(&fs, options()).unwrap();
        let cut_at = 1 + seed % 7;
        fs.fail(Op::Sync, cut_at, Fault::PowerCut, false);
        let mut acked = Vec::new();
        for i in 0..20 {
            let key = format!("k{i}");
            if put(&store, &key, &vec![i as u8; 100 + 37 * i]).is_ok() {
                acked.push(key);
            } else {
                break;
            }
        }
        let fs = fs.reboot(true);
        drop(store);
        let store = open(&fs, options()).unwrap();
        for key in &acked {
            assert!(get(&store, key).is_some(), "seed {seed}: {key} lost");
        }
        store.close().unwrap();
        assert_clean(&fs);
    }
}

#[test]
fn check_reports_a_damaged_log_record_that_was_followed_by_a_synced_one() {
    let fs = FaultFs::new(6);
    let store = open(&fs, options()).unwrap();
    for i in 0..5 {
        put(&store, &format!("k{i}"), b"value").unwrap();
    }
    let fs = fs.reboot(false);
    drop(store);
    assert_clean(&fs);
    // Flip a byte inside the second record (the first is 32 + its body long).
    let segment = fs
        .names()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("wal-0"))
        .expect("a segment");
    let mut bytes = herald_storage::Vfs::read(&fs, &segment).unwrap();
    let second = bytes.windows(4).skip(1).position(|w| w == b"HWAL").unwrap() + 1;
    bytes[second + 40] ^= 0xFF;
    let file = herald_storage::Vfs::open(&fs, &segment, herald_storage::Open::Existing).unwrap();
    file.write_at(0, &bytes).unwrap();
    file.sync_data().unwrap();
    let report = check(Path::new(DIR), Arc::new(fs.clone()), &mut |_, _| {}).unwrap();
    assert!(!report.is_clean());
    assert!(
        report.findings[0].0.contains("write-ahead log"),
        "{report:?}"
    );
    let err = open(&fs, options()).err().expect("opening fails");
    assert_eq!(err.code(), "storage_corrupted", "{err}");
}

#[test]
fn check_refuses_a_store_that_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    put(&store, "a", b"1").unwrap();
    let real = Arc::new(herald_storage::RealFs);
    let err = check(dir.path(), real.clone(), &mut |_, _| {}).unwrap_err();
    assert_eq!(err.code(), "storage_locked", "{err}");
    store.close().unwrap();
    let report = check(dir.path(), real, &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// Regression (found by the tmpfs test): a log spare that did not fit stayed, half written,
/// holding the disk's last free bytes until the next rotation, and a checkpoint meanwhile ran
/// out of space and failed the store. A spare is now prepared only with room for it beside the
/// reserve, and a failed one is deleted at once.
#[test]
fn a_log_spare_that_does_not_fit_is_not_left_holding_the_disk() {
    let fs = FaultFs::new(7);
    let options = StoreOptions {
        wal_segment_bytes: 8 << 20,
        reserve_bytes: 2 << 20,
        ..options()
    };
    let store = open(&fs, options).unwrap();
    // Room for the log to pass the 1 MiB after which a spare is prepared, not for a spare.
    fs.set_capacity(Some(fs.used() + (5 << 20)));
    for i in 0..300 {
        let _ = put(&store, &format!("k{i}"), &[5u8; 10_000]);
        if i % 20 == 0 {
            // Checkpoints as by age: what one has to write stays well below the reserve.
            store.checkpoint().unwrap();
        }
    }
    let spare = |fs: &FaultFs| {
        fs.names()
            .iter()
            .any(|p| p.to_string_lossy().ends_with("wal-spare.tmp"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        assert!(!spare(&fs), "a spare holds the disk: {:?}", fs.injected());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let used = fs.used();
    store
        .checkpoint()
        .unwrap_or_else(|e| panic!("{e}: used {used} {:?}", fs.injected()));
    assert!(store
        .write_refusal()
        .is_none_or(|e| e.code() == "storage_full"));
}

#[test]
fn a_store_opened_on_a_full_disk_reads_and_refuses_writes_until_space_returns() {
    let fs = FaultFs::new(8);
    let store = open(&fs, options()).unwrap();
    put(&store, "a", b"1").unwrap();
    store.close().unwrap();
    let reserve = Path::new(DIR).join(herald_storage::RESERVE_NAME);
    herald_storage::Vfs::remove_file(&fs, &reserve).unwrap();
    fs.set_capacity(Some(fs.used() + 1000));
    let store = open(&fs, options()).unwrap();
    assert_eq!(get(&store, "a").as_deref(), Some(&b"1"[..]));
    assert_eq!(put(&store, "b", b"2").unwrap_err().code(), "storage_full");
    fs.set_capacity(None);
    put(&store, "b", b"2").unwrap();
    store.close().unwrap();
    assert_clean(&fs);
}

/// Sets its flag when dropped, slowly: a waiter that returns before the drop finished sees the
/// flag still unset.
struct SlowDrop(Arc<AtomicBool>);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A database's jobs and commit hooks hold the database, and so the store. If the writer
/// dropped them only after resolving the tickets, a waiter that then dropped its last handle
/// left the writer holding the last one: the writer dropped the store and joined itself
/// ("failed to join thread: Resource deadlock avoided", found by the database's fault
/// schedules).
#[test]
fn a_failed_batch_releases_its_jobs_and_hooks_before_its_waiters_hear() {
    let fs = FaultFs::new(10);
    let store = open(&fs, options()).unwrap();
    put(&store, "a", b"1").unwrap();
    fs.fail(Op::Sync, 1, Fault::Io, false);
    // A job that ran, in a batch whose sync failed: its hook is dropped, never run.
    let hook_dropped = Arc::new(AtomicBool::new(false));
    let guard = SlowDrop(hook_dropped.clone());
    let ticket = store
        .submit(move |txn| {
            txn.put(Table::Docs, b"b".to_vec(), b"2".to_vec())?;
            txn.on_commit(move || drop(guard));
            Ok::<_, StorageError>(())
        })
        .unwrap();
    assert!(ticket.wait().is_err(), "the sync failed");
    assert!(
        hook_dropped.load(Ordering::SeqCst),
        "the hook of a failed batch is released before its waiter hears"
    );
    // A job the failed store refuses without running it.
    let job_dropped = Arc::new(AtomicBool::new(false));
    let guard = SlowDrop(job_dropped.clone());
    if let Ok(ticket) = store.submit(move |_txn| {
        drop(guard);
        Ok::<_, StorageError>(())
    }) {
        assert!(ticket.wait().is_err(), "the store has failed");
    }
    assert!(
        job_dropped.load(Ordering::SeqCst),
        "a refused job is released before its waiter hears"
    );
}
