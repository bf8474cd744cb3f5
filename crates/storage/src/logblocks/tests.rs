//! Tests of the commit log's blocks: a model test of appends, floor raises, point reads and
//! ranges read from both ends; the order check; the upgrade from the `log` B-tree; and the
//! same through a whole store (layers, checkpoints, reopen).

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use redb::ReadableDatabase;

use super::*;
use crate::{Store, StoreOptions};

fn memory_db() -> redb::Database {
    let db = redb::Builder::new()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(LOG_BLOCKS).unwrap();
    txn.open_table(LOG_FLOOR).unwrap();
    txn.open_table(Table::Log.definition()).unwrap();
    txn.commit().unwrap();
    db
}

fn key(n: u64) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

fn value(n: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n as usize + i) as u8).collect()
}

/// One checkpoint: `puts` new keys after the last one (with these value lengths), then deletes
/// of keys up to `prune_to` (in the same checkpoint, as the database's prune does).
#[derive(Debug, Clone)]
struct Step {
    lens: Vec<usize>,
    prune: Option<u64>,
}

fn step() -> impl Strategy<Value = Step> {
    let len = prop_oneof![
        8 => 0usize..1500,
        1 => 15_000usize..20_000,
    ];
    (
        prop::collection::vec(len, 0..40),
        prop::option::weighted(0.4, 0u64..100),
    )
        .prop_map(|(lens, prune)| Step { lens, prune })
}

fn bound(b: u8, k: u64) -> Bound<Vec<u8>> {
    match b % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(k)),
        _ => Bound::Excluded(key(k)),
    }
}

fn in_range(range: &(Bound<Vec<u8>>, Bound<Vec<u8>>), k: &[u8]) -> bool {
    use std::ops::RangeBounds;
    range.contains(&k.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// After every checkpoint, point reads and ranges (forward, backward, and from both ends at
    /// once) equal a map of what was put and not deleted; blocks stay within their bound
    /// unless one entry is larger; blocks below the floor are gone.
    #[test]
    fn reads_equal_the_model(steps in prop::collection::vec(step(), 1..12),
                             probes in prop::collection::vec((any::<u8>(), 0u64..400, any::<u8>(), 0u64..400, any::<u64>()), 8)) {
        let db = memory_db();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut next = 1u64;
        let mut deleted_to = 0u64;
        for step in steps {
            let mut entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            if let Some(p) = step.prune {
                // The prune deletes seqs from where it stopped up to `p` (if below `next`).
                let to = (deleted_to + p).min(next - 1);
                for n in deleted_to + 1..=to {
                    entries.push((key(n), None));
                    model.remove(&key(n));
                }
                deleted_to = deleted_to.max(to);
            }
            for len in &step.lens {
                let v = value(next, *len);
                entries.push((key(next), Some(v.clone())));
                model.insert(key(next), v);
                next += 1;
            }
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let txn = db.begin_write().unwrap();
            append(&txn, entries.iter().map(|(k, v)| (k.as_slice(), v.as_deref()))).unwrap();
            txn.commit().unwrap();

            let read = db.begin_read().unwrap();
            let base = LogBase::open(&read).unwrap();
            for n in 0..next + 2 {
                prop_assert_eq!(base.get(&key(n)).unwrap(), model.get(&key(n)).cloned(), "get {}", n);
            }
            let mut stored_blocks = 0;
            for block in base.blocks.iter().unwrap() {
                let (first, block) = block.unwrap();
                let block = block.value();
                let count = entries_of(block).len();
                prop_assert!(block.len() <= BLOCK_BYTES_MAX || count == 1);
                // Every block holds at least one key above the floor.
                prop_assert!(key(deleted_to).as_slice() < last_key(block).unwrap().as_slice());
                let first_entry = entries_of(block)[0].0.clone();
                prop_assert_eq!(first_entry.as_slice(), first.value());
                stored_blocks += 1;
            }
            prop_assert!(model.is_empty() == (stored_blocks == 0));
            for &(b0, k0, b1, k1, pattern) in &probes {
                let range = (bound(b0, k0), bound(b1, k1));
                let expected: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| in_range(&range, k))
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                let borrowed = (range.0.as_ref().map(Vec::as_slice), range.1.as_ref().map(Vec::as_slice));
                if crate::tables::is_empty_range(&borrowed) {
                    continue;
                }
                let forward: Vec<_> = base.range(borrowed).unwrap().map(Result::unwrap).collect();
                prop_assert_eq!(&forward, &expected);
                let mut backward: Vec<_> = base.range(borrowed).unwrap().rev().map(Result::unwrap).collect();
                backward.reverse();
                prop_assert_eq!(&backward, &expected);
                // From both ends, in the pattern's order.
                let mut both = base.range(borrowed).unwrap();
                let (mut head, mut tail) = (Vec::new(), Vec::new());
                for i in 0.. {
                    let item = if pattern >> (i % 64) & 1 == 0 { both.next().map(|e| (true, e)) } else { both.next_back().map(|e| (false, e)) };
                    match item {
                        Some((true, e)) => head.push(e.unwrap()),
                        Some((false, e)) => tail.push(e.unwrap()),
                        None => break,
                    }
                }
                tail.reverse();
                head.extend(tail);
                prop_assert_eq!(&head, &expected);
            }
        }
    }
}

fn entries_of(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    entries(block)
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

#[test]
fn a_put_that_does_not_sort_after_the_log_is_refused() {
    let db = memory_db();
    let txn = db.begin_write().unwrap();
    append(&txn, [(key(5).as_slice(), Some(b"five".as_slice()))]).unwrap();
    txn.commit().unwrap();
    for k in [3, 5] {
        let txn = db.begin_write().unwrap();
        let err = append(&txn, [(key(k).as_slice(), Some(b"x".as_slice()))]).unwrap_err();
        assert!(matches!(err, StorageError::Corrupted(_)), "{err:?}");
    }
}

#[test]
fn small_checkpoints_top_up_the_last_block() {
    let db = memory_db();
    for n in 1..=100 {
        let txn = db.begin_write().unwrap();
        append(&txn, [(key(n).as_slice(), Some(value(n, 100).as_slice()))]).unwrap();
        txn.commit().unwrap();
    }
    let read = db.begin_read().unwrap();
    let base = LogBase::open(&read).unwrap();
    // 100 entries of 116 bytes: one block of ~16 KB and the rest in a second.
    assert_eq!(
        base.blocks.len().unwrap(),
        100 * 116 / BLOCK_BYTES_MAX as u64 + 1
    );
    assert_eq!(
        base.range((Bound::Unbounded, Bound::Unbounded))
            .unwrap()
            .count(),
        100
    );
}

#[test]
fn the_log_btree_of_an_older_format_is_moved_into_blocks() {
    let db = memory_db();
    let txn = db.begin_write().unwrap();
    {
        let mut old = txn.open_table(Table::Log.definition()).unwrap();
        for n in 1..=500 {
            old.insert(key(n).as_slice(), value(n, 300).as_slice())
                .unwrap();
        }
    }
    txn.commit().unwrap();
    upgrade_log_table(&db).unwrap();
    // Twice: the second finds the B-tree empty and does nothing.
    upgrade_log_table(&db).unwrap();
    let read = db.begin_read().unwrap();
    assert_eq!(
        read.open_table(Table::Log.definition())
            .unwrap()
            .len()
            .unwrap(),
        0
    );
    let base = LogBase::open(&read).unwrap();
    let all: Vec<_> = base
        .range((Bound::Unbounded, Bound::Unbounded))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(all.len(), 500);
    for (i, (k, v)) in all.into_iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!((k, v), (key(n), Some(value(n, 300))));
    }
}

/// Through a store: the log read merges layers and blocks, survives checkpoints and a reopen,
/// and a prune's deletes hide their keys before and after the checkpoint.
#[test]
fn a_store_reads_its_log_through_layers_blocks_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let check = |store: &Store, from: u64, to: u64| {
        let read = store.read().unwrap();
        let keys: Vec<u64> = read
            .range::<&[u8]>(Table::Log, ..)
            .unwrap()
            .map(|e| u64::from_be_bytes(e.unwrap().0.try_into().unwrap()))
            .collect();
        assert_eq!(keys, (from..=to).collect::<Vec<_>>());
        assert_eq!(
            read.get(Table::Log, &key(from)).unwrap(),
            Some(value(from, 700))
        );
        assert_eq!(read.get(Table::Log, &key(from - 1)).unwrap(), None);
        let last = read.range::<&[u8]>(Table::Log, ..).unwrap().next_back();
        assert_eq!(last.unwrap().unwrap().0, key(to));
    };
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    for n in 1..=300u64 {
        store
            .submit(move |txn| {
                txn.put(Table::Log, key(n), value(n, 700))?;
                if n > 100 {
                    txn.delete(Table::Log, key(n - 100));
                }
                Ok::<_, StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        if n % 97 == 0 {
            store.checkpoint().unwrap();
        }
    }
    check(&store, 201, 300);
    store.checkpoint().unwrap();
    check(&store, 201, 300);
    store.close().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    check(&store, 201, 300);
    store.close().unwrap();
}

/// A damaged block is an error for the reads that reach it, never a panic or a silent gap.
#[test]
fn a_damaged_block_is_an_error_not_a_panic() {
    let db = memory_db();
    let txn = db.begin_write().unwrap();
    append(
        &txn,
        (1..=3u64)
            .map(|n| (key(n), value(n, 100)))
            .collect::<Vec<_>>()
            .iter()
            .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
    )
    .unwrap();
    {
        // The block's last entry claims more bytes than it holds.
        let mut blocks = txn.open_table(LOG_BLOCKS).unwrap();
        let mut block = blocks
            .get(key(1).as_slice())
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        let len = block.len();
        block[len - 104..len - 100].copy_from_slice(&1000u32.to_le_bytes());
        blocks.insert(key(1).as_slice(), block.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    let read = db.begin_read().unwrap();
    let base = LogBase::open(&read).unwrap();
    assert_eq!(base.get(&key(1)).unwrap(), Some(value(1, 100)));
    assert!(matches!(base.get(&key(3)), Err(StorageError::Corrupted(_))));
    let all: Vec<_> = base
        .range((Bound::Unbounded, Bound::Unbounded))
        .unwrap()
        .collect();
    assert!(all.iter().any(Result::is_err), "{all:?}");
    // Appending after it fails too (its last key cannot be read), rather than guessing.
    let txn = db.begin_write().unwrap();
    assert!(append(&txn, [(key(4).as_slice(), Some(b"x".as_slice()))]).is_err());
}
