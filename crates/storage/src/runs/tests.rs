//! Tests of the index runs: the merge policy, merges dropping deletes only at the bottom, and
//! a model test of reads through checkpoints and merges, including snapshots taken before a
//! merge and read after it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;
use redb::ReadableDatabase;

use super::*;
use crate::{Store, StoreOptions, Table};

fn meta(order: u64, level: u32) -> Arc<RunMeta> {
    Arc::new(RunMeta {
        order,
        file: order,
        level,
        entries: 1,
        bytes: 1,
        first_keys: vec![b"a".to_vec()],
        last_key: b"a".to_vec(),
    })
}

/// Runs of these levels, oldest first.
fn levels(ls: &[u32]) -> Vec<Arc<RunMeta>> {
    ls.iter()
        .enumerate()
        .map(|(i, &l)| meta(i as u64, l))
        .collect()
}

#[test]
fn the_newest_runs_of_one_level_merge_once_there_are_enough() {
    let idle = |_: &RunMeta| false;
    assert_eq!(merge_plan(&[], idle), None);
    assert_eq!(merge_plan(&levels(&[0, 0, 0]), idle), None);
    assert_eq!(merge_plan(&levels(&[0, 0, 0, 0]), idle), Some(0..4));
    assert_eq!(merge_plan(&levels(&[2, 1, 1, 0, 0, 0]), idle), None);
    assert_eq!(merge_plan(&levels(&[2, 1, 0, 0, 0, 0]), idle), Some(2..6));
    assert_eq!(merge_plan(&levels(&[2, 1, 1, 1, 1]), idle), Some(1..5));
    // An older stretch is merged when the newest is too short.
    assert_eq!(merge_plan(&levels(&[1, 1, 1, 1, 0, 0]), idle), Some(0..4));
    // At most twice the width at once: the newest ones.
    let many = levels(&[0; 11]);
    assert_eq!(merge_plan(&many, idle), Some(3..11));
    // Runs being merged are skipped, and split stretches.
    let busy = |r: &RunMeta| r.order >= 4;
    assert_eq!(
        merge_plan(&levels(&[1, 1, 1, 1, 1, 1, 1, 1]), busy),
        Some(0..4)
    );
    let busy = |r: &RunMeta| r.order == 2;
    assert_eq!(merge_plan(&levels(&[0, 0, 0, 0, 0, 0]), busy), None);
}

#[test]
fn upgrade_levels_grow_with_size() {
    assert_eq!(level_for(0), 0);
    assert_eq!(level_for(1 << 16), 0);
    assert_eq!(level_for((1 << 16) + 1), 1);
    assert_eq!(level_for(1 << 18), 1);
    assert_eq!(level_for(u64::MAX), 16);
}

fn memory_db() -> redb::Database {
    let db = redb::Builder::new()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(RUN_BLOCKS).unwrap();
    txn.open_table(RUN_META).unwrap();
    txn.commit().unwrap();
    db
}

fn append_all(db: &redb::Database, entries: &[(&[u8], Option<&[u8]>)]) {
    let txn = db.begin_write().unwrap();
    append(&txn, entries.iter().copied(), 0).unwrap();
    txn.commit().unwrap();
}

fn listed(db: &redb::Database) -> Vec<Arc<RunMeta>> {
    let read = db.begin_read().unwrap();
    RunCache::default()
        .load(&read.open_table(RUN_META).unwrap())
        .unwrap()
}

fn merge_all(db: &redb::Database, bottom: bool) -> Merge {
    let runs = listed(db);
    let read = db.begin_read().unwrap();
    let blocks = read.open_table(RUN_BLOCKS).unwrap();
    merge(db, &blocks, &runs, bottom, &|| {}).unwrap()
}

fn block_count(db: &redb::Database) -> u64 {
    let read = db.begin_read().unwrap();
    read.open_table(RUN_BLOCKS).unwrap().len().unwrap()
}

#[test]
fn a_merge_keeps_the_newest_entry_and_drops_deletes_only_at_the_bottom() {
    for bottom in [false, true] {
        let db = memory_db();
        let long = vec![b'v'; 100];
        append_all(
            &db,
            &[(b"a", Some(b"1")), (b"b", Some(&long)), (b"c", Some(b"3"))],
        );
        append_all(&db, &[(b"b", None), (b"c", Some(b"new")), (b"d", None)]);
        let merge = merge_all(&db, bottom);
        assert_eq!(merge.entries_in, 6);
        let runs = listed(&db);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].level, 1);
        assert_eq!(
            runs[0].order, 2,
            "the merged run takes the newest input's order"
        );
        let read = db.begin_read().unwrap();
        let blocks = read.open_table(RUN_BLOCKS).unwrap();
        let all: Vec<_> = RunRange::new(
            &blocks,
            runs[0].clone(),
            (Bound::Unbounded, Bound::Unbounded),
        )
        .map(Result::unwrap)
        .collect();
        let mut expected = vec![
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"b".to_vec(), None),
            (b"c".to_vec(), Some(b"new".to_vec())),
            (b"d".to_vec(), None),
        ];
        if bottom {
            expected.retain(|(_, v)| v.is_some());
        }
        assert_eq!(all, expected, "bottom = {bottom}");
        assert_eq!(merge.entries_out, expected.len() as u64);
        // The inputs' blocks are gone; only the merged run's remain.
        assert_eq!(block_count(&db), runs[0].first_keys.len() as u64);
    }
}

#[test]
fn merging_away_everything_leaves_no_run() {
    let db = memory_db();
    append_all(&db, &[(b"a", Some(b"1"))]);
    append_all(&db, &[(b"a", None)]);
    let merge = merge_all(&db, true);
    assert_eq!(merge.entries_out, 0);
    assert!(listed(&db).is_empty());
    assert_eq!(block_count(&db), 0);
}

#[test]
fn a_damaged_block_is_an_error_on_read() {
    let db = memory_db();
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (format!("key{i:04}").into_bytes(), vec![1; 10]))
        .collect();
    let txn = db.begin_write().unwrap();
    append(
        &txn,
        entries
            .iter()
            .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
        0,
    )
    .unwrap();
    txn.commit().unwrap();
    let run = listed(&db).remove(0);
    assert!(run.first_keys.len() > 3);
    let txn = db.begin_write().unwrap();
    txn.open_table(RUN_BLOCKS)
        .unwrap()
        .insert(block_key(run.file, 1).as_slice(), [0xFFu8; 3].as_slice())
        .unwrap();
    txn.commit().unwrap();
    let read = db.begin_read().unwrap();
    let blocks = read.open_table(RUN_BLOCKS).unwrap();
    let results: Vec<_> =
        RunRange::new(&blocks, run.clone(), (Bound::Unbounded, Bound::Unbounded)).collect();
    let err = results.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.code(), "storage_corrupted");
    assert!(results[..results.len() - 1].iter().all(Result::is_ok));
    let key = run.first_keys[1].clone();
    assert!(get(&blocks, &[run], &key).is_err());
}

/// A store that checkpoints only when asked.
fn store() -> Store {
    Store::in_memory(StoreOptions {
        checkpoint_interval_ms: 3_600_000,
        ..StoreOptions::default()
    })
    .unwrap()
}

#[test]
fn checkpoints_add_runs_and_merges_bound_them() {
    let store = store();
    for round in 0..70u32 {
        store
            .submit(move |txn| {
                for i in 0..20u32 {
                    let key = format!("k{:05}", (round * 7 + i * 13) % 500).into_bytes();
                    if i % 5 == 0 {
                        txn.delete(Table::Index, key);
                    } else {
                        txn.put(Table::Index, key, round.to_be_bytes())?;
                    }
                }
                Ok::<_, crate::StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        store.checkpoint().unwrap();
    }
    // The merger thread merges in the background: 70 level-0 runs come down to at most
    // MERGE_WIDTH - 1 per level (three levels).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        store.checkpoint().unwrap(); // refreshes the gauge
        let m = store.metrics();
        if m.index_runs <= 3 * (MERGE_WIDTH as u64 - 1) {
            assert!(m.index_run_merges >= 8, "{m:?}");
            assert!(m.index_runs >= 1);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "merges never caught up: {m:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn blocks_no_run_lists_are_removed_and_listed_ones_kept() {
    let db = memory_db();
    append_all(&db, &[(b"a", Some(b"1")), (b"b", Some(b"2"))]);
    let kept = block_count(&db);
    let txn = db.begin_write().unwrap();
    {
        let mut blocks = txn.open_table(RUN_BLOCKS).unwrap();
        for block in 0..3 {
            blocks
                .insert(block_key(999, block).as_slice(), b"orphan".as_slice())
                .unwrap();
        }
    }
    txn.commit().unwrap();
    assert_eq!(remove_orphans(&db).unwrap(), 3);
    assert_eq!(block_count(&db), kept);
    assert_eq!(remove_orphans(&db).unwrap(), 0);
    let read = db.begin_read().unwrap();
    let blocks = read.open_table(RUN_BLOCKS).unwrap();
    assert_eq!(
        get(&blocks, &listed(&db), b"b").unwrap(),
        Some(Some(b"2".to_vec()))
    );
}

#[derive(Debug, Clone)]
enum Step {
    /// One batch of puts (`Some`) and deletes (`None`) of index keys.
    Batch(Vec<(u16, Option<u8>)>),
    Checkpoint,
    /// Keep a snapshot, to read at the end (after later checkpoints and merges).
    Snapshot,
}

fn key_of(k: u16) -> Vec<u8> {
    // Long shared prefixes (as index keys have) and keys that are prefixes of others.
    let mut key = b"coll\0field\0".to_vec();
    key.extend_from_slice(format!("{}", k % 97).as_bytes());
    if k >= 97 {
        key.push(b'/');
        key.extend_from_slice(&k.to_be_bytes());
    }
    key
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0u16..300).prop_map(|k| Bound::Included(key_of(k))),
        (0u16..300).prop_map(|k| Bound::Excluded(key_of(k))),
    ]
}

fn cases() -> u32 {
    std::env::var("HERALD_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(64, |n: u32| n / 2 + 1)
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn check(read: &crate::ReadTxn, model: &Model, ranges: &[Bounds]) -> Result<(), TestCaseError> {
    for k in (0u16..300).step_by(7) {
        prop_assert_eq!(
            read.get(Table::Index, &key_of(k)).unwrap(),
            model.get(&key_of(k)).cloned()
        );
    }
    prop_assert_eq!(read.len(Table::Index).unwrap(), model.len() as u64);
    for (start, end) in ranges {
        let bounds = (start.clone(), end.clone());
        let expected: Vec<_> = if crate::tables::is_empty_range(&crate::tables::key_bounds(&bounds))
        {
            Vec::new()
        } else {
            model
                .range(bounds.clone())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let forward: Vec<_> = read
            .range(Table::Index, bounds.clone())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        prop_assert_eq!(&forward, &expected);
        let mut backward: Vec<_> = read
            .range(Table::Index, bounds.clone())
            .unwrap()
            .rev()
            .map(Result::unwrap)
            .collect();
        backward.reverse();
        prop_assert_eq!(&backward, &expected);
        // Both ends at once, meeting in the middle.
        let mut both = read.range(Table::Index, bounds).unwrap();
        let (mut front, mut back) = (Vec::new(), Vec::new());
        while let Some(e) = both.next() {
            front.push(e.unwrap());
            match both.next_back() {
                Some(e) => back.push(e.unwrap()),
                None => break,
            }
        }
        back.reverse();
        front.extend(back);
        prop_assert_eq!(&front, &expected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Reads through index runs (multi-block: unit tests use tiny blocks), merges of every
    /// level and the in-memory layers agree with a BTreeMap model, both for the current
    /// snapshot and for snapshots taken earlier and read after later merges.
    #[test]
    fn reads_through_runs_and_merges_match_a_model(
        steps in prop::collection::vec(prop_oneof![
            5 => prop::collection::vec((0u16..300, prop::option::of(any::<u8>())), 1..25)
                .prop_map(Step::Batch),
            4 => Just(Step::Checkpoint),
            1 => Just(Step::Snapshot),
        ], 1..90),
        ranges in prop::collection::vec((bound(), bound()), 1..4),
    ) {
        let store = store();
        let mut model = Model::new();
        let mut kept = Vec::new();
        for step in steps {
            match step {
                Step::Checkpoint => store.checkpoint().unwrap(),
                Step::Snapshot => kept.push((store.read().unwrap(), model.clone())),
                Step::Batch(ops) => {
                    for (k, v) in &ops {
                        match v {
                            Some(v) => model.insert(key_of(*k), vec![*v; 1 + (*k as usize % 5)]),
                            None => model.remove(&key_of(*k)),
                        };
                    }
                    store
                        .submit(move |txn| {
                            for (k, v) in ops {
                                match v {
                                    Some(v) => txn.put(Table::Index, key_of(k), vec![v; 1 + (k as usize % 5)])?,
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
        check(&store.read().unwrap(), &model, &ranges)?;
        for (read, model) in &kept {
            check(read, model, &ranges)?;
        }
        store.checkpoint().unwrap();
        check(&store.read().unwrap(), &model, &ranges)?;
    }
}

/// Every block a run writer makes stays within `BLOCK_BYTES` (so that, at the real size, the
/// redb leaf holding it fits a 16 KiB page), except a block of one entry larger than that; and
/// blocks are not cut short either: each but the last would have overflowed with the next entry.
#[test]
fn run_blocks_stay_within_the_block_size() {
    use super::block::BLOCK_BYTES;
    let mut writer = RunWriter::new(1);
    let mut entries = Vec::new();
    for i in 0..2_000u32 {
        let key = format!("coll/idx/{:08}/{}", i, "x".repeat((i % 23) as usize));
        let value = (i % 3 == 0).then(|| vec![b'v'; (i % 50) as usize]);
        entries.push((key.into_bytes(), value));
    }
    // One entry alone larger than a block.
    entries.push((b"coll/zz".to_vec(), Some(vec![b'b'; BLOCK_BYTES * 2])));
    for (key, value) in &entries {
        writer.push(key, value.as_deref());
    }
    let meta = writer.finish(1, 0).expect("entries were written");
    assert_eq!(meta.entries, entries.len() as u64);
    let blocks: Vec<&Vec<u8>> = writer.pending.iter().map(|(_, data)| data).collect();
    assert!(blocks.len() > 10, "{} blocks", blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let one_entry = BlockCursor::new(block.to_vec()).rest().unwrap().len() == 1;
        assert!(
            block.len() <= BLOCK_BYTES || one_entry,
            "block {i}: {} bytes",
            block.len()
        );
    }
    let mut decoded = Vec::new();
    for block in &blocks {
        decoded.extend(BlockCursor::new(block.to_vec()).rest().unwrap());
    }
    assert_eq!(decoded, entries);
    // Not cut short: each block is closed only because the next entry would not fit.
    for pair in blocks.windows(2) {
        let mut replay = super::block::BlockWriter::default();
        for (key, value) in BlockCursor::new(pair[0].to_vec()).rest().unwrap() {
            replay.push(&key, value.as_deref());
        }
        let next = BlockCursor::new(pair[1].to_vec()).rest().unwrap();
        assert!(replay.would_overflow(&next[0].0, next[0].1.as_deref()));
    }
}

#[test]
fn a_plan_below_a_level_takes_only_newer_runs() {
    let idle = |_: &RunMeta| false;
    let runs = levels(&[2, 2, 2, 2, 1, 1, 1, 1, 0, 0]);
    assert_eq!(merge_plan_below(&runs, idle, u32::MAX), Some(4..8));
    assert_eq!(merge_plan_below(&runs, idle, 2), Some(4..8));
    assert_eq!(merge_plan_below(&runs, idle, 1), None);
    let runs = levels(&[2, 2, 2, 2]);
    assert_eq!(merge_plan_below(&runs, idle, 2), None);
    assert_eq!(merge_plan_below(&runs, idle, 3), Some(0..4));
}
