//! Tests of the write-ahead log: record format and damage, replay after crashes, segments,
//! spares and recycled segments.

use std::fs;
use std::path::Path;

use super::*;
use crate::vfs::RealFs;
use crate::{Store, StoreOptions};

fn changes(key: &[u8], value: Option<&[u8]>) -> Changes {
    let mut changes = Changes::default();
    changes
        .table_mut(Table::Docs)
        .insert(key.to_vec(), value.map(<[u8]>::to_vec));
    changes
}

/// A store holding `a` (batch 1, checkpointed) and no log, as after a clean close.
fn closed_store(dir: &Path) {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    store
        .submit(|txn| txn.put(Table::Docs, b"a", b"1"))
        .unwrap()
        .wait()
        .unwrap();
    store.close().unwrap();
    assert!(
        list_segments(&RealFs, dir).unwrap().is_empty(),
        "close leaves no log"
    );
}

/// A record to write: batch, synced, and one Docs entry (key, `None` for a delete).
type Spec<'a> = (u64, u64, &'a [u8], Option<&'a [u8]>);

/// Records for `specs`, concatenated, and where each one starts.
fn records(specs: &[Spec<'_>]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for &(batch, synced, key, value) in specs {
        starts.push(out.len());
        encode(&mut out, batch, synced, &changes(key, value));
    }
    (out, starts)
}

fn docs(dir: &Path) -> Result<Vec<crate::Entry>, StorageError> {
    let store = Store::open(dir, StoreOptions::default())?;
    let read = store.read()?;
    let all = read
        .range::<&[u8]>(Table::Docs, ..)?
        .collect::<Result<Vec<_>, _>>()?;
    drop(read);
    store.close()?;
    Ok(all)
}

fn entry(k: &[u8], v: &[u8]) -> crate::Entry {
    (k.to_vec(), v.to_vec())
}

#[test]
fn records_round_trip_and_damage_is_detected() {
    let mut both = changes(b"k", Some(b"v"));
    both.table_mut(Table::Index).insert(b"gone".to_vec(), None);
    let mut bytes = Vec::new();
    encode(&mut bytes, 7, 6, &both);
    let record = parse(&bytes, 0).unwrap();
    assert_eq!(
        (record.batch, record.synced, record.end),
        (7, 6, bytes.len())
    );
    let mut seen = Vec::new();
    decode(record.body, |t, k, v| {
        seen.push((t, k.to_vec(), v.map(<[u8]>::to_vec)));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            (Table::Docs, b"k".to_vec(), Some(b"v".to_vec())),
            (Table::Index, b"gone".to_vec(), None)
        ]
    );
    for i in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[i] ^= 0x40;
        assert!(
            parse(&damaged, 0).is_none(),
            "flipped byte {i} went unnoticed"
        );
    }
    assert!(
        parse(&bytes[..bytes.len() - 1], 0).is_none(),
        "a torn record"
    );
}

#[test]
fn replay_applies_records_after_the_checkpoint_and_ignores_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    // Batch 1 again (already checkpointed: skipped), 2 and 3 intact, 4 torn mid-write.
    let (mut log, starts) = records(&[
        (1, 0, b"a", Some(b"stale")),
        (2, 1, b"b", Some(b"2")),
        (3, 2, b"a", None),
        (4, 3, b"c", Some(b"4")),
    ]);
    log.truncate(starts[3] + 40);
    fs::write(segment_path(dir.path(), 1), &log).unwrap();
    assert_eq!(docs(dir.path()).unwrap(), [entry(b"b", b"2")]);
    assert!(list_segments(&RealFs, dir.path()).unwrap().is_empty());

    // The store goes on from batch 4 and the replayed state survives the next restart.
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store
        .submit(|txn| txn.put(Table::Docs, b"c", b"new"))
        .unwrap()
        .wait()
        .unwrap();
    drop(store);
    assert_eq!(
        docs(dir.path()).unwrap(),
        [entry(b"b", b"2"), entry(b"c", b"new")]
    );
    assert_eq!(checkpointed(&redb_of(dir.path())).unwrap(), 4);
}

fn redb_of(dir: &Path) -> redb::Database {
    redb::Database::open(dir.join(crate::FILE_NAME)).unwrap()
}

#[test]
fn a_damaged_record_that_a_later_record_says_was_durable_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    let (mut log, starts) = records(&[
        (2, 1, b"b", Some(b"2")),
        (3, 2, b"c", Some(b"3")),
        (4, 3, b"d", Some(b"4")),
    ]);
    log[starts[1] + 40] ^= 1;
    fs::write(segment_path(dir.path(), 2), &log).unwrap();
    let err = docs(dir.path()).unwrap_err();
    assert_eq!(err.code(), "storage_corrupted", "{err}");
    // Nothing was applied and the log is kept for inspection.
    assert_eq!(checkpointed(&redb_of(dir.path())).unwrap(), 1);
    assert_eq!(list_segments(&RealFs, dir.path()).unwrap().len(), 1);
}

#[test]
fn a_hole_in_unsynced_records_ends_the_replay() {
    // No-sync mode after a power loss: batch 3 never reached the disk but 4, written
    // before 3 was synced (its `synced` is 2), did. Neither can apply.
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    let (mut log, starts) = records(&[
        (2, 1, b"b", Some(b"2")),
        (3, 1, b"c", Some(b"3")),
        (4, 2, b"d", Some(b"4")),
    ]);
    log[starts[1]..starts[2]].fill(0);
    fs::write(segment_path(dir.path(), 2), &log).unwrap();
    assert_eq!(
        docs(dir.path()).unwrap(),
        [entry(b"a", b"1"), entry(b"b", b"2")]
    );
}

#[test]
fn replay_reads_every_segment_in_order() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    let (first, _) = records(&[(2, 1, b"b", Some(b"2")), (3, 2, b"c", Some(b"3"))]);
    let (second, _) = records(&[(4, 3, b"b", None), (5, 4, b"d", Some(b"5"))]);
    fs::write(segment_path(dir.path(), 2), &first).unwrap();
    fs::write(segment_path(dir.path(), 4), &second).unwrap();
    assert_eq!(
        docs(dir.path()).unwrap(),
        [entry(b"a", b"1"), entry(b"c", b"3"), entry(b"d", b"5")]
    );
}

#[test]
fn a_busy_log_moves_into_a_zero_filled_spare_and_replays_through_its_zeros() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    let segment_bytes = 2 * SPARE_AFTER_BYTES;
    let mut w = test_writer(
        Segments::new(Arc::new(RealFs), dir.path()),
        segment_bytes,
        1,
    );
    let value = vec![7u8; 64 << 10];
    let mut batch = 1u64;
    let mut append = |w: &mut WalWriter| {
        batch += 1;
        w.append(batch, &changes(&batch.to_be_bytes(), Some(&value)), true)
            .unwrap();
        batch
    };
    // Past SPARE_AFTER_BYTES a spare is prepared; once it is ready the growing segment
    // gives way to it.
    let mut appended = 0;
    while !w.active.as_ref().is_some_and(|a| a.preallocated) {
        appended = append(&mut w);
        assert!(appended < 10_000, "the log never moved into a spare");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let active = w.active.as_ref().unwrap();
    assert_eq!(fs::metadata(&active.path).unwrap().len(), segment_bytes);
    // Fill it past its end, into the next spare.
    let first_spare = active.path.clone();
    while w.active.as_ref().unwrap().path == first_spare {
        appended = append(&mut w);
    }
    assert!(w.active.as_ref().unwrap().len > 0);
    // A crash: no finish. The current segment ends in zeros, and a spare may be on disk.
    if let Some(spare) = w.spare.take() {
        spare.join().unwrap().unwrap();
        assert!(dir.path().join(SPARE_NAME).exists());
    }
    drop(w);
    let all = docs(dir.path()).unwrap();
    assert_eq!(all.len() as u64, appended, "a plus batches 2..={appended}");
    assert!(all.iter().any(|(k, _)| k[..] == appended.to_be_bytes()));
    // Recovery and close leave neither segments nor a spare behind.
    assert!(list_segments(&RealFs, dir.path()).unwrap().is_empty());
    assert!(!dir.path().join(SPARE_NAME).exists());
}

/// A segment a durable checkpoint covered becomes the next spare; after a crash, recovery
/// replays the new records written into it and none of the old ones after them.
#[test]
fn a_recycled_segment_replays_only_its_new_records() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path());
    let segments = Segments::new(Arc::new(RealFs), dir.path());
    let closed = |s: &Arc<Segments>| s.closed.lock().unwrap().clone();
    let mut w = test_writer(segments.clone(), 2 * SPARE_AFTER_BYTES, 1);
    let value = vec![7u8; 64 << 10];
    let mut batch = 1u64;
    let mut append = |w: &mut WalWriter| {
        batch += 1;
        w.append(batch, &changes(&batch.to_be_bytes(), Some(&value)), true)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(200));
        batch
    };
    while closed(&segments).len() < 2 {
        append(&mut w);
    }
    let covered = closed(&segments)
        .iter()
        .map(|(_, last)| *last)
        .max()
        .unwrap();
    // A durable checkpoint covered them: recorded by hand, without their documents, so a
    // stale record replayed would show as a document.
    {
        let db = redb::Database::create(dir.path().join(crate::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(STATE)
            .unwrap()
            .insert(STATE_CHECKPOINT, covered)
            .unwrap();
        txn.commit().unwrap();
    }
    segments.delete_covered(covered).unwrap();
    assert!(recycled_path(dir.path(), 0).exists());
    // The spare is made of it, then the log rotates into that spare.
    let mut last = 0;
    while recycled_path(dir.path(), 0).exists() {
        last = append(&mut w);
        assert!(last < 10_000, "the recycled segment never became a spare");
    }
    let before = w.active.as_ref().unwrap().path.clone();
    while w.active.as_ref().unwrap().path == before {
        last = append(&mut w);
    }
    assert!(w.active.as_ref().unwrap().preallocated);
    for _ in 0..3 {
        last = append(&mut w);
    }
    // A crash: no finish. The active segment holds 3-4 new records, then old ones.
    if let Some(spare) = w.spare.take() {
        let _ = spare.join();
    }
    drop(w);
    let keys: Vec<u64> = docs(dir.path())
        .unwrap()
        .into_iter()
        .filter(|(k, _)| k.len() == 8)
        .map(|(k, _)| u64::from_be_bytes(k.try_into().unwrap()))
        .collect();
    let expected: Vec<u64> = (covered + 1..=last).collect();
    assert_eq!(keys, expected);
    assert!((0..RECYCLED_MAX).all(|slot| !recycled_path(dir.path(), slot).exists()));
    assert!(!dir.path().join(SPARE_NAME).exists());
}

/// Covered segments fill the recycled slots, the rest are deleted; a spare takes a slot's
/// file; open and close remove every one (and the single file older builds kept).
#[test]
fn covered_segments_fill_the_recycled_slots_and_spares_take_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let segment = |i: usize| {
        let path = d.join(format!("wal-{i:020}.log"));
        fs::write(&path, vec![0u8; SPARE_AFTER_BYTES as usize]).unwrap();
        path
    };
    let small = d.join("wal-small.log");
    fs::write(&small, b"x").unwrap();
    retire(&RealFs, d, &small).unwrap();
    assert!(
        !small.exists() && !recycled_path(d, 0).exists(),
        "too small to keep"
    );
    let paths: Vec<PathBuf> = (0..RECYCLED_MAX + 2).map(segment).collect();
    for path in &paths {
        retire(&RealFs, d, path).unwrap();
    }
    assert!(paths.iter().all(|p| !p.exists()));
    assert!((0..RECYCLED_MAX).all(|slot| recycled_path(d, slot).exists()));
    let spare = prepare_spare(&RealFs, d, 2 * SPARE_AFTER_BYTES).unwrap();
    assert_eq!(
        fs::metadata(&spare).unwrap().len(),
        SPARE_AFTER_BYTES,
        "a slot's file, not zeros"
    );
    assert_eq!(
        (0..RECYCLED_MAX)
            .filter(|&s| recycled_path(d, s).exists())
            .count(),
        RECYCLED_MAX - 1
    );
    fs::write(d.join(RECYCLED_OLD_NAME), b"").unwrap();
    remove_stale_spare(&RealFs, d).unwrap();
    assert_eq!(fs::read_dir(d).unwrap().count(), 0);
}

#[test]
fn close_deletes_the_spare() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            wal_segment_bytes: 2 * SPARE_AFTER_BYTES,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    for i in 0..40u32 {
        store
            .submit(move |txn| txn.put(Table::Docs, i.to_be_bytes(), vec![1u8; 64 << 10]))
            .unwrap()
            .wait()
            .unwrap();
    }
    store.close().unwrap();
    assert!(list_segments(&RealFs, dir.path()).unwrap().is_empty());
    assert!(!dir.path().join(SPARE_NAME).exists());
}

/// A writer on the real file system with no disk-space reserve.
fn test_writer(segments: Arc<Segments>, segment_bytes: u64, last_batch: u64) -> WalWriter {
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let space = Space::new(vfs.clone(), None, 0);
    WalWriter::new(vfs, space, segments, segment_bytes, last_batch)
}
