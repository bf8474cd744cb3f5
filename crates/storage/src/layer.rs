//! The in-memory side of the store: [`Changes`] (puts and deletes per table, for one job or one
//! batch), [`Layer`] (a committed batch's changes: in the write-ahead log, not yet checkpointed
//! into redb), [`Base`] (redb as of one checkpoint) and [`Snapshot`] (a base plus the layers
//! committed after it: what readers, and the writer's jobs, read).
//!
//! Not here: merging key ranges across a snapshot's levels (`merge.rs`), publishing layers and
//! checkpointing them (`checkpoint.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Instant;

use redb::{ReadOnlyTable, ReadableTableMetadata};

use std::ops::Bound;

use crate::logblocks::LogBase;
use crate::merge::{BaseRange, Merged, Side, Source};
use crate::placement::{placement, Placement};
use crate::runs::{self, RunCache, RunMeta, RunRange};
use crate::tables::{self, KeyBounds, Table, TableMap, RUN_BLOCKS, RUN_META, TABLE_COUNT};
use crate::StorageError;

type RawTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// What an entry costs in memory beyond its key and value bytes: its share of a B-tree node,
/// two `Vec` headers and the allocator's rounding. An estimate; it only has to be in the right
/// range for the memory bound to mean something.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Puts and deletes, per table.
///
/// Writes to [`Table::Index`] are appended to `appended` in write order and sorted into the
/// map once, by [`settle`](Changes::settle), when the batch becomes a [`Layer`]. A document
/// has ~30 index entries and a batch's jobs almost never read the index back, so one sort per
/// batch replaces an ordered insert per entry (with the comparisons along the map's path, the
/// largest part of the storage writer's time at high ingest rates), and a failed job is undone
/// by truncating the vector rather than by a copy of every key it wrote.
#[derive(Default)]
pub(crate) struct Changes {
    maps: [TableMap; TABLE_COUNT],
    /// Index writes not yet in `maps`, oldest first (a later write of a key wins).
    appended: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// A job of the batch that succeeded wrote something of its own (not a replicated record):
    /// a replicated store must replicate the batch.
    pub(crate) local: bool,
    /// A job of the batch applied a replicated record (`replication.rs`).
    pub(crate) from_log: bool,
}

/// The one table whose writes go to [`Changes::appended`].
pub(crate) const APPENDED_TABLE: Table = Table::Index;

impl Changes {
    /// The table's map. For [`APPENDED_TABLE`] that misses the writes not yet settled: readers
    /// of a batch in progress use [`appended`](Changes::appended) too (`write.rs`).
    pub(crate) fn table(&self, table: Table) -> &TableMap {
        &self.maps[table.index()]
    }

    /// The index writes not yet settled into the map, oldest first.
    pub(crate) fn appended(&self) -> &[(Vec<u8>, Option<Vec<u8>>)] {
        &self.appended
    }

    /// Appends a write to [`APPENDED_TABLE`].
    pub(crate) fn append(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.appended.push((key, value));
    }

    /// Forgets the appended writes after the first `len` (a failed job's).
    pub(crate) fn truncate_appended(&mut self, len: usize) {
        self.appended.truncate(len);
    }

    /// Moves the appended writes into the map, the last write of each key winning.
    pub(crate) fn settle(&mut self) {
        if self.appended.is_empty() {
            return;
        }
        let appended = sorted_newest(std::mem::take(&mut self.appended));
        let map = &mut self.maps[APPENDED_TABLE.index()];
        if map.is_empty() {
            // Sorted and unique: the map is built in one pass, not by an insert per entry.
            *map = appended.into_iter().collect();
        } else {
            map.extend(appended);
        }
    }

    pub(crate) fn table_mut(&mut self, table: Table) -> &mut TableMap {
        &mut self.maps[table.index()]
    }

    /// Every table's map, in [`Table::ALL`] order.
    pub(crate) fn tables(&self) -> impl Iterator<Item = (Table, &TableMap)> {
        Table::ALL.into_iter().zip(self.maps.iter())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.appended.is_empty() && self.maps.iter().all(BTreeMap::is_empty)
    }

    /// An estimate of the memory these changes hold.
    pub(crate) fn bytes(&self) -> usize {
        let cost = |(k, v): (&Vec<u8>, &Option<Vec<u8>>)| {
            k.len() + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES
        };
        self.maps
            .iter()
            .flat_map(|map| map.iter())
            .map(cost)
            .sum::<usize>()
            + self
                .appended
                .iter()
                .map(|(k, v)| cost((k, v)))
                .sum::<usize>()
    }
}

/// `writes` (oldest first) sorted by key, keeping the last write of each key.
pub(crate) fn sorted_newest(
    mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    // Stable: equal keys stay oldest first, so the last of each run is the newest.
    let order = crate::keysort::key_order(&writes.iter().map(|w| &w.0).collect::<Vec<_>>());
    let mut out: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::with_capacity(writes.len());
    for i in order {
        let w = std::mem::take(&mut writes[i]);
        match out.last_mut() {
            Some(last) if last.0 == w.0 => *last = w,
            _ => out.push(w),
        }
    }
    out
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
    /// Per table, which [`segment`]s its keys may start with: a range scan within one segment
    /// (one collection's documents or index entries) skips the layers that never wrote to it.
    segments: [Bloom; TABLE_COUNT],
    /// [`Filter::hash`] of every key the layer mentions, in every table: what publishing the
    /// layer adds to its generation's [`Filter`], and what a checkpoint adds to the next one.
    filter_hashes: Vec<u64>,
    /// `changes.bytes()` and the filters, counted once.
    pub(crate) bytes: usize,
    pub(crate) created: Instant,
    /// The batch's replication index, when it must go through the store's `Replicator` before
    /// the local log (a batch of its own on a replicated store).
    pub(crate) replicate: Option<u64>,
}

impl Layer {
    pub(crate) fn new(batch: u64, mut changes: Changes) -> Layer {
        changes.settle();
        let mut filter_hashes = Vec::new();
        let blooms = std::array::from_fn(|i| {
            if !point_filtered(Table::ALL[i]) {
                return Bloom::new(&[]);
            }
            let hashes: Vec<u64> = changes.maps[i].keys().map(|k| key_hash(k)).collect();
            filter_hashes.extend(hashes.iter().map(|&h| Filter::hash(Table::ALL[i], h)));
            Bloom::new(&hashes)
        });
        let segments = std::array::from_fn(|i| Bloom::new(&segment_hashes(&changes.maps[i])));
        Layer {
            batch,
            bytes: changes.bytes()
                + blooms.iter().map(Bloom::bytes).sum::<usize>()
                + segments.iter().map(Bloom::bytes).sum::<usize>()
                + filter_hashes.len() * 8,
            blooms,
            segments,
            filter_hashes,
            changes,
            created: Instant::now(),
            replicate: None,
        }
    }

    /// What the layer says about `key` (whose [`key_hash`] is `hash`): `Some(None)` for a
    /// delete, `None` if it does not mention the key.
    pub(crate) fn get(&self, table: Table, key: &[u8], hash: u64) -> Option<&Option<Vec<u8>>> {
        if point_filtered(table) && !self.blooms[table.index()].may_contain(hash) {
            return None;
        }
        self.changes.table(table).get(key)
    }

    /// Whether the layer may hold keys of `table` in a range whose keys all start with the
    /// segment hashed as `segment` (`None`: the range is not within one segment).
    fn may_hold_segment(&self, table: Table, segment: Option<u64>) -> bool {
        segment.is_none_or(|hash| self.segments[table.index()].may_contain(hash))
    }
}

/// Whether point lookups in `table` go through Bloom filters (per layer and the shared
/// [`Filter`]). Not for [`Table::Index`]: the database reads its entries by range (a point
/// read there is rare and searches every layer's map), and a 1 KB document has ~30 of them, so
/// hashing them cost the writer more than any lookup saved, and they filled the shared filter
/// that the documents' existence checks rely on.
fn point_filtered(table: Table) -> bool {
    table != Table::Index
}

/// A key's first segment: its bytes up to and including the first 0x00, or `None` if it has
/// none. The database layer's document and index keys start with `collection 0x00`, so a
/// segment is a collection; storage only relies on byte order.
fn segment(key: &[u8]) -> Option<&[u8]> {
    key.iter().position(|&b| b == 0).map(|end| &key[..=end])
}

/// The [`key_hash`] of every distinct [`segment`] of a map's keys (keys sort by segment first,
/// so equal segments are adjacent).
fn segment_hashes(map: &TableMap) -> Vec<u64> {
    let mut hashes = Vec::new();
    let mut last: Option<&[u8]> = None;
    for key in map.keys() {
        let Some(seg) = segment(key) else { continue };
        if last != Some(seg) {
            hashes.push(key_hash(seg));
            last = Some(seg);
        }
    }
    hashes
}

/// The segment every key of `bounds` starts with, if the range is within one: the start's
/// segment `S = P 0x00`, when the end lies at or before `P 0x01` (excluded) or before it
/// (included). Every key `k` with `S <= k < P 0x01` starts with `P` followed by 0x00, so a
/// layer with no key of segment `S` has nothing in the range.
fn range_segment(bounds: &KeyBounds<'_>) -> Option<u64> {
    let start = match bounds.0 {
        Bound::Included(k) | Bound::Excluded(k) => k,
        Bound::Unbounded => return None,
    };
    let seg = segment(start)?;
    // `end` against `P 0x01`, compared in place: this runs for every range scan.
    let limit = seg[..seg.len() - 1].iter().chain(std::iter::once(&1u8));
    let within = match bounds.1 {
        Bound::Excluded(end) => end.iter().cmp(limit).is_le(),
        Bound::Included(end) => end.iter().cmp(limit).is_lt(),
        Bound::Unbounded => false,
    };
    within.then(|| key_hash(seg))
}

/// A Bloom filter over one table's keys in one layer: about 24 bits per key, 3 bits per key all
/// in one 64-bit word chosen by the hash (a blocked filter), so few of the layers that lack a
/// key are searched anyway. With fewer bits per key the map lookups of those false positives
/// were most of the writer's time in `Snapshot::get` during inserts (a
/// point lookup checks every in-memory layer, up to a second of batches). One word per probe
/// instead of three scattered ones: the scattered probes were a visible share of those reads.
struct Bloom {
    words: Vec<u64>,
}

impl Bloom {
    const BITS_PER_KEY: usize = 24;

    /// The filter of the keys whose [`key_hash`]es are `hashes`.
    fn new(hashes: &[u64]) -> Bloom {
        if hashes.is_empty() {
            return Bloom { words: Vec::new() };
        }
        let words = (hashes.len() * Self::BITS_PER_KEY)
            .div_ceil(64)
            .next_power_of_two();
        let mut bloom = Bloom {
            words: vec![0; words],
        };
        for &hash in hashes {
            let (word, mask) = bloom.probe(hash);
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

/// One Bloom filter over every key of every layer published since a checkpoint (a
/// generation), in all tables. A point lookup whose key it does not hold skips all those layers
/// at once instead of probing each layer's own filter: with up to a second of batches in
/// memory, one probe per layer was a large share of the writer's time during inserts. Bits are
/// only ever set, so a snapshot may share its generation's filter with later snapshots: they
/// only add false positives for it. A checkpoint starts a new generation holding the layers it
/// left. Fixed size: past the keys it was sized for, it passes more absent keys, which then take
/// the per-layer path (slower, never wrong).
pub(crate) struct Filter {
    words: Box<[AtomicU64]>,
}

impl Filter {
    /// A filter of `words` 64-bit words (a power of two, at least 1).
    pub(crate) fn new(words: usize) -> Filter {
        let words = words.max(1).next_power_of_two();
        Filter {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The words for layers of up to `checkpoint_bytes`: ~270 bytes of layer per key in the
    /// HTTP insert benchmark, so about two keys per word at the checkpoint threshold; 8 KiB to
    /// 1 MiB.
    pub(crate) fn words_for(checkpoint_bytes: usize) -> usize {
        (checkpoint_bytes / 512).clamp(1 << 10, 1 << 17)
    }

    /// A key's hash in this filter: its [`key_hash`] made distinct per table.
    pub(crate) fn hash(table: Table, key_hash: u64) -> u64 {
        key_hash ^ (table.index() as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// The word a hash selects (low bits) and the three bits within it (high bits).
    fn probe(&self, hash: u64) -> (&AtomicU64, u64) {
        let word = &self.words[(hash as usize) & (self.words.len() - 1)];
        let mask =
            (1 << ((hash >> 40) & 63)) | (1 << ((hash >> 46) & 63)) | (1 << ((hash >> 52) & 63));
        (word, mask)
    }

    /// Adds every key of `layer`. Before the layer is in any snapshot that claims this filter
    /// covers it; the state mutex orders that for readers.
    pub(crate) fn add(&self, layer: &Layer) {
        for &hash in &layer.filter_hashes {
            let (word, mask) = self.probe(hash);
            word.fetch_or(mask, Relaxed);
        }
    }

    fn may_contain(&self, hash: u64) -> bool {
        let (word, mask) = self.probe(hash);
        word.load(Relaxed) & mask == mask
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
    /// The index runs of this transaction, oldest first, and the table of their blocks.
    pub(crate) runs: Vec<Arc<RunMeta>>,
    pub(crate) run_blocks: RawTable,
    /// The commit log's blocks and floor (`logblocks.rs`).
    pub(crate) log: LogBase,
    _txn: redb::ReadTransaction,
}

impl Base {
    pub(crate) fn open(
        db: &(impl redb::ReadableDatabase + ?Sized),
        cache: &RunCache,
    ) -> Result<Base, StorageError> {
        let txn = db.begin_read()?;
        let tables = Table::ALL
            .iter()
            .map(|t| txn.open_table(t.definition()))
            .collect::<Result<Vec<_>, _>>()?;
        let runs = cache.load(&txn.open_table(RUN_META)?)?;
        let run_blocks = txn.open_table(RUN_BLOCKS)?;
        let log = LogBase::open(&txn)?;
        Ok(Base {
            tables,
            runs,
            run_blocks,
            log,
            _txn: txn,
        })
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
    /// Holds every key of `layers[..covered]` (the layers after them, such as the writer's
    /// batch still being synced, are always probed one by one).
    pub(crate) filter: Arc<Filter>,
    pub(crate) covered: usize,
}

/// Where a read happened: a snapshot's redb state and its newest layer, without keeping either
/// alive. A job on the writer can tell from it which committed batches are newer than the read
/// (see [`WriteTxn::get_read_at`](crate::WriteTxn::get_read_at)).
#[derive(Clone)]
pub struct ReadPoint {
    base: Weak<Base>,
    layers: usize,
    newest: Option<Weak<Layer>>,
}

impl Snapshot {
    /// This snapshot as a [`ReadPoint`].
    pub(crate) fn point(self: &Arc<Self>) -> ReadPoint {
        ReadPoint {
            base: Arc::downgrade(&self.base),
            layers: self.layers.len(),
            newest: self.layers.last().map(Arc::downgrade),
        }
    }

    /// The layers this snapshot has that the snapshot `at` describes did not, newest last; `None`
    /// if `at` is not an ancestor of this snapshot (a checkpoint has replaced its redb state
    /// since, or it is not this store's).
    pub(crate) fn layers_since(&self, at: &ReadPoint) -> Option<&[Arc<Layer>]> {
        if !std::ptr::eq(Arc::as_ptr(&self.base), at.base.as_ptr()) || self.layers.len() < at.layers
        {
            return None;
        }
        let same_newest = match (&at.newest, at.layers.checked_sub(1)) {
            (None, None) => true,
            (Some(newest), Some(i)) => std::ptr::eq(Arc::as_ptr(&self.layers[i]), newest.as_ptr()),
            _ => false,
        };
        same_newest.then(|| &self.layers[at.layers..])
    }

    /// The value under `key`: the newest layer that mentions the key decides, else redb.
    pub(crate) fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if !self.layers.is_empty() {
            let hash = key_hash(key);
            let layers =
                if !point_filtered(table) || self.filter.may_contain(Filter::hash(table, hash)) {
                    &self.layers[..]
                } else {
                    &self.layers[self.covered..]
                };
            for layer in layers.iter().rev() {
                if let Some(pending) = layer.get(table, key, hash) {
                    return Ok(pending.clone());
                }
            }
        }
        match placement(table) {
            Placement::Runs => {
                if let Some(found) = runs::get(&self.base.run_blocks, &self.base.runs, key)? {
                    return Ok(found);
                }
            }
            Placement::Blocks => return self.base.log.get(key),
            Placement::Tree => {}
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
        let place = placement(table);
        let mut sources = if place == Placement::Blocks {
            vec![Source::Log(self.base.log.range(bounds)?)]
        } else {
            vec![Source::Redb(BaseRange::new(
                self.base.table(table).range::<&[u8]>(bounds)?,
            ))]
        };
        if place == Placement::Runs {
            let blocks = &self.base.run_blocks;
            sources.extend(self.base.runs.iter().filter_map(|run| {
                let range = RunRange::new(blocks, run.clone(), bounds);
                (!range.is_empty()).then_some(Source::Run(range))
            }));
        }
        let segment = range_segment(&bounds);
        let maps = self
            .layers
            .iter()
            .filter(|layer| layer.may_hold_segment(table, segment))
            .map(|layer| layer.changes.table(table))
            .chain(newer.iter().copied());
        Ok(Merged::new(sources, maps, bounds))
    }

    /// The number of entries in `table`: redb's count (constant time) corrected by every key
    /// the layers mention, which costs one redb lookup per such key.
    /// Index runs and log blocks have no count: for a table stored there this scans the whole
    /// table.
    pub(crate) fn len(&self, table: Table) -> Result<u64, StorageError> {
        if placement(table) != Placement::Tree {
            let mut all = self.merged(table, (Bound::Unbounded, Bound::Unbounded), &[])?;
            let mut len = 0;
            while let Some(entry) = all.step(Side::Front) {
                entry?;
                len += 1;
            }
            return Ok(len);
        }
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
            let hashes: Vec<u64> = keys.keys().map(|k| key_hash(k)).collect();
            let bloom = Bloom::new(&hashes);
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
        assert!(!Bloom::new(&[]).may_contain(key_hash(b"k")));
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;
    use proptest::prelude::*;
    use std::ops::RangeBounds;

    fn bound(kind: u8, key: &[u8]) -> Bound<&[u8]> {
        match kind % 3 {
            0 => Bound::Included(key),
            1 => Bound::Excluded(key),
            _ => Bound::Unbounded,
        }
    }

    fn in_bounds(key: &[u8], bounds: &KeyBounds<'_>) -> bool {
        (bounds.0, bounds.1).contains(&key)
    }

    #[test]
    fn collection_and_index_ranges_are_within_one_segment() {
        let hash = Some(key_hash(b"follows\0"));
        let prefix = b"follows\0".as_slice();
        let end = b"follows\x01".as_slice();
        assert_eq!(
            range_segment(&(Bound::Included(prefix), Bound::Excluded(end))),
            hash
        );
        let index = b"follows\0f:followee\0\x05u7".as_slice();
        let index_end = b"follows\0f:followee\0\x05u8".as_slice();
        assert_eq!(
            range_segment(&(Bound::Included(index), Bound::Excluded(index_end))),
            hash
        );
        // `follows 0x01` itself has no segment, so an included end there is not within one.
        assert_eq!(
            range_segment(&(Bound::Included(prefix), Bound::Included(end))),
            None
        );
        assert_eq!(
            range_segment(&(Bound::Included(prefix), Bound::Unbounded)),
            None
        );
        assert_eq!(
            range_segment(&(Bound::Included(b"follow".as_slice()), Bound::Excluded(end))),
            None
        );
    }

    /// A layer holding a key in range always passes: whenever a range is said to lie within
    /// one segment, every key in it has that segment.
    #[test]
    fn no_layer_with_a_key_in_range_is_skipped() {
        let alphabet = prop::sample::select(vec![0u8, 1, b'a', b'b', 0xFF]);
        let key = prop::collection::vec(alphabet, 0..6);
        proptest!(|(keys in prop::collection::vec(key.clone(), 1..20), start in key.clone(),
                    end in key, kinds in (0u8..3, 0u8..3))| {
            let bounds = (bound(kinds.0, &start), bound(kinds.1, &end));
            let mut changes = Changes::default();
            for k in &keys {
                changes.table_mut(Table::Index).insert(k.clone(), None);
            }
            let layer = Layer::new(1, changes);
            let segment = range_segment(&bounds);
            for k in keys.iter().filter(|k| in_bounds(k, &bounds)) {
                if let Some(hash) = segment {
                    prop_assert_eq!(segment_of(k), Some(hash), "{:?} in {:?}", k, bounds);
                }
                prop_assert!(layer.may_hold_segment(Table::Index, segment));
            }
        });
    }

    fn segment_of(key: &[u8]) -> Option<u64> {
        segment(key).map(key_hash)
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;
    use crate::{Store, StoreOptions};

    /// A filter holds every key added to it, in the table it was added for.
    #[test]
    fn holds_every_added_key() {
        let mut changes = Changes::default();
        for i in 0..5_000u32 {
            let key = format!("doc{i}").into_bytes();
            changes.table_mut(Table::Docs).insert(key, Some(Vec::new()));
        }
        let layer = Layer::new(1, changes);
        let filter = Filter::new(Filter::words_for(64 << 10));
        filter.add(&layer);
        for i in 0..5_000u32 {
            let hash = key_hash(format!("doc{i}").as_bytes());
            assert!(
                filter.may_contain(Filter::hash(Table::Docs, hash)),
                "doc{i}"
            );
        }
        let passed = (0..5_000u32)
            .filter(|i| {
                let hash = key_hash(format!("doc{i}").as_bytes());
                filter.may_contain(Filter::hash(Table::Index, hash))
            })
            .count();
        assert!(
            passed < 500,
            "{passed} of 5,000 keys pass for another table"
        );
    }

    fn key(i: u64) -> Vec<u8> {
        format!("k{i}").into_bytes()
    }

    /// Jobs submitted without waiting, in batches of a few jobs (so a batch reads while the
    /// one before it is still being synced and not yet published), with checkpoints every
    /// millisecond (so filter generations start while layers remain). Job `i` writes key `i`
    /// and reads keys written 1 to 300 jobs earlier, and readers read keys already
    /// acknowledged: a filter that misses a layer's key would hide it.
    #[test]
    fn reads_see_every_layer_across_filter_generations() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            StoreOptions {
                batch_max: 4,
                checkpoint_interval_ms: 1,
                checkpoint_bytes: 8 << 10,
                // Non-durable checkpoints (no fsync) change the filter generations just as
                // well, and do not slow down when the disk does: with a durable one every
                // 5 ms, a full test run's fsync load once left fewer than ten in the test.
                durable_checkpoint_interval_ms: 10_000,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let n = 4_000u64;
        let acked = std::sync::atomic::AtomicU64::new(0);
        // Set when the submitting side ends, even by a failed assertion, so the reader stops.
        let done = std::sync::atomic::AtomicBool::new(false);
        struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for SetOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        let checks = std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut checks = 0u64;
                loop {
                    let finished = done.load(Relaxed);
                    let upto = acked.load(Relaxed);
                    let read = store.read().unwrap();
                    for i in [upto.saturating_sub(1), upto / 2, upto.saturating_sub(37)] {
                        if i < upto {
                            assert_eq!(read.get(Table::Docs, &key(i)).unwrap(), Some(key(i)));
                            checks += 1;
                        }
                    }
                    if finished {
                        return checks;
                    }
                }
            });
            let _done = SetOnDrop(&done);
            let mut tickets = std::collections::VecDeque::new();
            for i in 0..n {
                let ticket = store
                    .submit(move |txn| {
                        for back in [1, 2, 3, 5, 17, 64, 300] {
                            if let Some(j) = i.checked_sub(back) {
                                if txn.get(Table::Docs, &key(j))? != Some(key(j)) {
                                    return Ok(Some(j));
                                }
                            }
                        }
                        txn.put(Table::Docs, key(i), key(i))?;
                        Ok::<_, crate::StorageError>(None)
                    })
                    .unwrap();
                tickets.push_back(ticket);
                // Up to 64 jobs in flight, so batches overlap their syncs.
                while tickets.len() > 64 || (i + 1 == n && !tickets.is_empty()) {
                    let missed = tickets.pop_front().unwrap().wait().unwrap();
                    assert_eq!(missed, None, "a job did not see an earlier job's write");
                    acked.fetch_add(1, Relaxed);
                }
            }
            drop(_done);
            reader.join().unwrap()
        });
        assert!(checks > 0);
        assert!(
            store.metrics().checkpoints > 10,
            "checkpoints ran during the test"
        );
    }
}

#[cfg(test)]
mod settle_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model: appended writes settle into the map a map insert per write would
        /// have left (the last write of each key wins, deletes included), also on top of
        /// entries the map already held.
        #[test]
        fn settled_writes_equal_inserting_them_in_order(
            before in prop::collection::vec((prop::collection::vec(0u8..3, 0..3), prop::option::of(any::<u8>())), 0..6),
            writes in prop::collection::vec((prop::collection::vec(0u8..3, 0..3), prop::option::of(any::<u8>())), 0..40),
        ) {
            let mut changes = Changes::default();
            let mut model = TableMap::new();
            for (k, v) in &before {
                changes.table_mut(APPENDED_TABLE).insert(k.clone(), v.map(|v| vec![v]));
                model.insert(k.clone(), v.map(|v| vec![v]));
            }
            for (k, v) in &writes {
                changes.append(k.clone(), v.map(|v| vec![v]));
                model.insert(k.clone(), v.map(|v| vec![v]));
            }
            changes.settle();
            prop_assert!(changes.appended().is_empty());
            prop_assert_eq!(changes.table(APPENDED_TABLE), &model);
        }
    }
}
