//! The in-memory side of the store: [`Changes`] (puts and deletes per table, for one job or one
//! batch), [`Layer`] (a committed batch's changes: in the write-ahead log, not yet checkpointed
//! into redb), [`Base`] (redb as of one checkpoint) and [`Snapshot`] (a base plus the layers
//! committed after it: what readers, and the writer's jobs, read).
//!
//! Not here: merging key ranges across a snapshot's levels (`merge.rs`), publishing layers and
//! checkpointing them (`checkpoint.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use redb::{ReadOnlyTable, ReadableDatabase, ReadableTableMetadata};

use crate::merge::Merged;
use crate::tables::{self, KeyBounds, Table, TABLE_COUNT};
use crate::StorageError;

/// One table's pending changes: key -> `Some(value)` for a put, `None` for a delete.
pub(crate) type TableMap = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

type RawTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// What an entry costs in memory beyond its key and value bytes: its share of a B-tree node,
/// two `Vec` headers and the allocator's rounding. An estimate; it only has to be in the right
/// range for the memory bound to mean something.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Puts and deletes, per table.
#[derive(Default)]
pub(crate) struct Changes {
    maps: [TableMap; TABLE_COUNT],
}

impl Changes {
    pub(crate) fn table(&self, table: Table) -> &TableMap {
        &self.maps[table.index()]
    }

    pub(crate) fn table_mut(&mut self, table: Table) -> &mut TableMap {
        &mut self.maps[table.index()]
    }

    /// Every table's map, in [`Table::ALL`] order.
    pub(crate) fn tables(&self) -> impl Iterator<Item = (Table, &TableMap)> {
        Table::ALL.into_iter().zip(self.maps.iter())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.maps.iter().all(BTreeMap::is_empty)
    }

    /// An estimate of the memory these changes hold.
    pub(crate) fn bytes(&self) -> usize {
        self.maps
            .iter()
            .flat_map(|map| map.iter())
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES)
            .sum()
    }
}

/// One committed batch: logged in the WAL and visible to readers, but not yet in redb.
/// Immutable once published; shared by every snapshot taken before it is checkpointed.
pub(crate) struct Layer {
    /// The batch's number: WAL records and checkpoints count batches.
    pub(crate) batch: u64,
    pub(crate) changes: Changes,
    /// Per table, which keys the layer may hold: a point lookup skips most layers without
    /// searching their maps.
    blooms: [Bloom; TABLE_COUNT],
    /// `changes.bytes()`, counted once.
    pub(crate) bytes: usize,
    pub(crate) created: Instant,
}

impl Layer {
    pub(crate) fn new(batch: u64, changes: Changes) -> Layer {
        let blooms = std::array::from_fn(|i| Bloom::new(&changes.maps[i]));
        Layer {
            batch,
            bytes: changes.bytes() + blooms.iter().map(Bloom::bytes).sum::<usize>(),
            blooms,
            changes,
            created: Instant::now(),
        }
    }

    /// What the layer says about `key` (whose [`key_hash`] is `hash`): `Some(None)` for a
    /// delete, `None` if it does not mention the key.
    fn get(&self, table: Table, key: &[u8], hash: u64) -> Option<&Option<Vec<u8>>> {
        if !self.blooms[table.index()].may_contain(hash) {
            return None;
        }
        self.changes.table(table).get(key)
    }
}

/// A Bloom filter over one table's keys in one layer: about 24 bits per key, 3 bits per key all
/// in one 64-bit word chosen by the hash (a blocked filter), so 0.1-0.3% of the layers that
/// lack a key are searched anyway. At 10 bits per key it was 0.4-1.5%, and the map lookups of
/// those false positives were most of the writer's time in `Snapshot::get` during inserts (a
/// point lookup checks every in-memory layer, up to a second of batches). One word per probe
/// instead of three scattered ones: the scattered probes were a visible share of those reads.
struct Bloom {
    words: Vec<u64>,
}

impl Bloom {
    const BITS_PER_KEY: usize = 24;

    fn new(map: &TableMap) -> Bloom {
        if map.is_empty() {
            return Bloom { words: Vec::new() };
        }
        let words = (map.len() * Self::BITS_PER_KEY)
            .div_ceil(64)
            .next_power_of_two();
        let mut bloom = Bloom {
            words: vec![0; words],
        };
        for key in map.keys() {
            let (word, mask) = bloom.probe(key_hash(key));
            bloom.words[word] |= mask;
        }
        bloom
    }

    /// The word a hash selects (low bits) and the three bits within it (high bits).
    fn probe(&self, hash: u64) -> (usize, u64) {
        let word = (hash as usize) & (self.words.len() - 1);
        let mask =
            (1 << ((hash >> 40) & 63)) | (1 << ((hash >> 46) & 63)) | (1 << ((hash >> 52) & 63));
        (word, mask)
    }

    fn may_contain(&self, hash: u64) -> bool {
        if self.words.is_empty() {
            return false;
        }
        let (word, mask) = self.probe(hash);
        self.words[word] & mask == mask
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// A fast 64-bit hash of a key, for the Bloom filters (not for anything adversarial: a
/// collision only costs a map lookup).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (key.len() as u64) ^ 0x243F_6A88_85A3_08D3;
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        h = (h ^ word).wrapping_mul(K).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(last))
            .wrapping_mul(K)
            .rotate_left(29);
    }
    // MurmurHash3's finalizer, so every input bit reaches every output bit.
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// redb as of one checkpoint: every table of one read transaction, opened once and shared by
/// all snapshots until the next checkpoint replaces it.
pub(crate) struct Base {
    // Declared before `_txn` so the tables drop first.
    tables: Vec<RawTable>,
    _txn: redb::ReadTransaction,
}

impl Base {
    pub(crate) fn open(db: &redb::Database) -> Result<Base, StorageError> {
        let txn = db.begin_read()?;
        let tables = Table::ALL
            .iter()
            .map(|t| txn.open_table(t.definition()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Base { tables, _txn: txn })
    }

    fn table(&self, table: Table) -> &RawTable {
        &self.tables[table.index()]
    }
}

/// A consistent view of the whole store: redb as of the last checkpoint plus every batch
/// committed after it, oldest first. Later layers hide earlier ones and redb; a delete in a
/// layer hides the key.
pub(crate) struct Snapshot {
    pub(crate) base: Arc<Base>,
    pub(crate) layers: Vec<Arc<Layer>>,
}

impl Snapshot {
    /// The value under `key`: the newest layer that mentions the key decides, else redb.
    pub(crate) fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if !self.layers.is_empty() {
            let hash = key_hash(key);
            for layer in self.layers.iter().rev() {
                if let Some(pending) = layer.get(table, key, hash) {
                    return Ok(pending.clone());
                }
            }
        }
        let found = self.base.table(table).get(key)?;
        Ok(found.map(|guard| guard.value().to_vec()))
    }

    /// The entries of `bounds` merged across redb, the layers and then `newer` (maps that are
    /// newer still: a batch in progress and a job's overlay), lazily and in key order.
    pub(crate) fn merged<'a>(
        &'a self,
        table: Table,
        bounds: KeyBounds<'_>,
        newer: &[&'a TableMap],
    ) -> Result<Merged<'a>, StorageError> {
        if tables::is_empty_range(&bounds) {
            return Ok(Merged::empty());
        }
        let base = self.base.table(table).range::<&[u8]>(bounds)?;
        let maps = self
            .layers
            .iter()
            .map(|layer| layer.changes.table(table))
            .chain(newer.iter().copied());
        Ok(Merged::new(base, maps, bounds))
    }

    /// The number of entries in `table`: redb's count (constant time) corrected by every key
    /// the layers mention, which costs one redb lookup per such key.
    pub(crate) fn len(&self, table: Table) -> Result<u64, StorageError> {
        let raw = self.base.table(table);
        let mut newest: BTreeMap<&[u8], bool> = BTreeMap::new();
        for layer in self.layers.iter().rev() {
            for (key, value) in layer.changes.table(table) {
                newest.entry(key.as_slice()).or_insert(value.is_some());
            }
        }
        let mut len = raw.len()?;
        for (key, present) in newest {
            let before = raw.get(key)?.is_some();
            match (before, present) {
                (false, true) => len += 1,
                (true, false) => len -= 1,
                _ => {}
            }
        }
        Ok(len)
    }
}

#[cfg(test)]
mod bloom_tests {
    use super::*;

    fn map(keys: impl Iterator<Item = Vec<u8>>) -> TableMap {
        keys.map(|k| (k, Some(Vec::new()))).collect()
    }

    /// Every key of the layer passes (no false negatives), and few absent keys do.
    #[test]
    fn holds_every_key_and_few_others() {
        for n in [1usize, 7, 64, 1000, 20_000] {
            let keys = map((0..n).map(|i| format!("coll\0idx\0{i:08}").into_bytes()));
            let bloom = Bloom::new(&keys);
            assert!(
                keys.keys().all(|k| bloom.may_contain(key_hash(k))),
                "n = {n}"
            );
            let absent = 20_000;
            let passed = (0..absent)
                .filter(|i| bloom.may_contain(key_hash(format!("coll\0idx\0x{i:08}").as_bytes())))
                .count();
            assert!(
                passed * 100 < absent,
                "n = {n}: {passed} of {absent} absent keys pass"
            );
        }
        assert!(!Bloom::new(&TableMap::new()).may_contain(key_hash(b"k")));
    }
}
