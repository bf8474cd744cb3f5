//! Index runs: the `index` table's entries as immutable sorted runs of compressed blocks in
//! two redb tables, instead of one B-tree entry each (docs/storage.md, "Index runs").
//!
//! Why: a checkpoint inserted every index entry into redb's B-tree one by one, on random leaves,
//! many per document; that was a large part of the checkpointer's CPU and most of the pages its
//! durable commits wrote. A checkpoint now writes its index entries (already
//! sorted) as one new run: a few 16 KiB values appended to `index_run_blocks`, one metadata
//! value in `index_runs`. Runs of one level are merged into one run of the next level once
//! there are [`MERGE_WIDTH`] of them (tiered merging), so each entry is rewritten about once
//! per level and a read looks at a few runs per level.
//!
//! Invariants:
//! - A run never changes once written. Runs are ordered by `order`: where two runs hold the
//!   same key, the one with the higher order is newer and wins; a delete entry hides older
//!   runs' entries.
//! - A run is listed (its metadata written) and its inputs unlisted in one redb write
//!   transaction (a checkpoint, a merge's swap, recovery), so a crash leaves either the old
//!   run set or the new one; a merge's blocks may be written earlier, and its inputs' blocks
//!   deleted later, in transactions of their own, under file numbers nothing lists (removed on
//!   open if a crash orphans them). A reader
//!   holding a read transaction keeps seeing exactly the runs (and blocks) of its transaction.
//! - A merged run takes the order of the newest run it replaces, so it sits exactly where its
//!   inputs sat relative to every other run. Deletes are dropped only when a merge includes the
//!   oldest run (nothing older is left for them to hide). Concurrent merges take disjoint
//!   stretches of runs (`merger.rs`).
//! - Levels never increase from the oldest run to the newest, so merges only ever combine
//!   adjacent runs.

pub(crate) mod block;
pub(crate) mod merger;

use std::collections::{HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use redb::{ReadOnlyTable, ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::tables::{KeyBounds, RUN_BLOCKS, RUN_META, STATE, STATE_NEXT_RUN};
use crate::StorageError;
pub(crate) use block::RunMeta;
use block::{corrupt, BlockCursor, BlockWriter, RunValue, BLOCK_BYTES};

/// How many runs of one level are merged into one run of the next.
pub(crate) const MERGE_WIDTH: usize = 4;

type RawTable = ReadOnlyTable<&'static [u8], &'static [u8]>;
type WriteTable<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

/// The key of a run's block: the run's file number, then the block's number, big-endian.
fn block_key(file: u64, block: usize) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&file.to_be_bytes());
    key[8..].copy_from_slice(&(block as u32).to_be_bytes());
    key
}

fn load_block(blocks: &RawTable, run: &RunMeta, block: usize) -> Result<Vec<u8>, StorageError> {
    let found = blocks.get(block_key(run.file, block).as_slice())?;
    let guard =
        found.ok_or_else(|| corrupt(&format!("block {block} of run {} is missing", run.file)))?;
    Ok(guard.value().to_vec())
}

/// Parsed run metadata by file number, shared by every snapshot: the metadata of a run never
/// changes, and parsing a large run's block index at every checkpoint would be waste.
#[derive(Default)]
pub(crate) struct RunCache {
    runs: Mutex<HashMap<u64, Arc<RunMeta>>>,
}

impl RunCache {
    /// The runs listed in `meta`, oldest first; forgets cached runs no longer listed.
    pub(crate) fn load(&self, meta: &RawTable) -> Result<Vec<Arc<RunMeta>>, StorageError> {
        let mut cache = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut runs = Vec::new();
        for item in meta.iter()? {
            let (key, value) = item?;
            let order = crate::tables::decode_u64(key.value())?;
            let file = RunMeta::decode_file(value.value())?;
            let run = match cache.get(&file) {
                Some(run) if run.order == order => run.clone(),
                _ => {
                    let run = Arc::new(RunMeta::decode(order, value.value())?);
                    cache.insert(file, run.clone());
                    run
                }
            };
            runs.push(run);
        }
        if cache.len() > runs.len() {
            cache.retain(|file, _| runs.iter().any(|r| r.file == *file));
        }
        Ok(runs)
    }
}

/// What `runs` (oldest first) say about `key`: the newest run that holds it decides.
/// `None` if no run mentions it, `Some(None)` if the newest mention is a delete.
pub(crate) fn get(
    blocks: &RawTable,
    runs: &[Arc<RunMeta>],
    key: &[u8],
) -> Result<Option<RunValue>, StorageError> {
    for run in runs.iter().rev() {
        if key < run.first_keys[0].as_slice() || key > run.last_key.as_slice() {
            continue;
        }
        let block = run
            .first_keys
            .partition_point(|first| first.as_slice() <= key)
            - 1;
        let mut cursor = BlockCursor::new(load_block(blocks, run, block)?);
        while let Some((k, v)) = cursor.next_entry()? {
            match k.cmp(key) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(v.map(<[u8]>::to_vec))),
                std::cmp::Ordering::Greater => break,
            }
        }
    }
    Ok(None)
}

fn after_start(key: &[u8], start: &Bound<Vec<u8>>) -> bool {
    match start {
        Bound::Included(s) => key >= s.as_slice(),
        Bound::Excluded(s) => key > s.as_slice(),
        Bound::Unbounded => true,
    }
}

fn before_end(key: &[u8], end: &Bound<Vec<u8>>) -> bool {
    match end {
        Bound::Included(e) => key <= e.as_slice(),
        Bound::Excluded(e) => key < e.as_slice(),
        Bound::Unbounded => true,
    }
}

/// One run's entries within a key range, lazily and from either end: blocks are read as the
/// scan reaches them; from the front they decode one entry at a time, from the back a block at
/// a time (prefix compression only decodes forwards). Stops after the first error.
pub(crate) struct RunRange<'a> {
    blocks: &'a RawTable,
    run: Arc<RunMeta>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// Blocks `lo..hi` are not yet read from either end.
    lo: usize,
    hi: usize,
    front: Option<BlockCursor>,
    /// Entries decoded from the back, all within the range.
    back: VecDeque<(Vec<u8>, RunValue)>,
    done: bool,
}

type RunItem = Result<(Vec<u8>, RunValue), StorageError>;

impl<'a> RunRange<'a> {
    pub(crate) fn new(blocks: &'a RawTable, run: Arc<RunMeta>, bounds: KeyBounds<'_>) -> Self {
        let firsts = &run.first_keys;
        let lo = match bounds.0 {
            Bound::Unbounded => 0,
            Bound::Included(s) | Bound::Excluded(s) => firsts
                .partition_point(|f| f.as_slice() <= s)
                .saturating_sub(1),
        };
        let hi = match bounds.1 {
            Bound::Unbounded => firsts.len(),
            Bound::Included(e) => firsts.partition_point(|f| f.as_slice() <= e),
            Bound::Excluded(e) => firsts.partition_point(|f| f.as_slice() < e),
        };
        RunRange {
            blocks,
            start: bounds.0.map(<[u8]>::to_vec),
            end: bounds.1.map(<[u8]>::to_vec),
            done: lo >= hi,
            lo,
            hi,
            run,
            front: None,
            back: VecDeque::new(),
        }
    }

    /// True when no block of the run can hold a key of the range.
    pub(crate) fn is_empty(&self) -> bool {
        self.done
    }

    fn fail(&mut self, err: StorageError) -> Option<RunItem> {
        self.done = true;
        Some(Err(err))
    }

    fn in_range(&self, key: &[u8]) -> bool {
        after_start(key, &self.start) && before_end(key, &self.end)
    }
}

impl Iterator for RunRange<'_> {
    type Item = RunItem;

    fn next(&mut self) -> Option<RunItem> {
        loop {
            if self.done {
                return None;
            }
            if let Some(cursor) = &mut self.front {
                match cursor.next_entry() {
                    Err(err) => return self.fail(err),
                    Ok(Some((key, value))) => {
                        if !after_start(key, &self.start) {
                            continue;
                        }
                        if !before_end(key, &self.end) {
                            // Sorted: nothing after this is in range either.
                            self.done = true;
                            return None;
                        }
                        return Some(Ok((key.to_vec(), value.map(<[u8]>::to_vec))));
                    }
                    Ok(None) => self.front = None,
                }
            }
            if self.lo < self.hi {
                match load_block(self.blocks, &self.run, self.lo) {
                    Ok(data) => self.front = Some(BlockCursor::new(data)),
                    Err(err) => return self.fail(err),
                }
                self.lo += 1;
                continue;
            }
            let next = self.back.pop_front();
            if next.is_none() {
                self.done = true;
            }
            return next.map(Ok);
        }
    }
}

impl DoubleEndedIterator for RunRange<'_> {
    fn next_back(&mut self) -> Option<RunItem> {
        loop {
            if self.done {
                return None;
            }
            if let Some(entry) = self.back.pop_back() {
                return Some(Ok(entry));
            }
            let rest = if self.lo < self.hi {
                self.hi -= 1;
                load_block(self.blocks, &self.run, self.hi).and_then(|d| BlockCursor::new(d).rest())
            } else if let Some(mut cursor) = self.front.take() {
                cursor.rest()
            } else {
                self.done = true;
                return None;
            };
            match rest {
                Ok(entries) => {
                    let kept = entries.into_iter().filter(|(k, _)| self.in_range(k));
                    self.back = kept.collect();
                }
                Err(err) => return self.fail(err),
            }
        }
    }
}

/// One run's entries in order, forwards only, without an allocation per entry: what merges
/// read.
struct RunScan<'a> {
    blocks: &'a RawTable,
    run: &'a RunMeta,
    next_block: usize,
    cursor: Option<BlockCursor>,
}

impl<'a> RunScan<'a> {
    fn new(blocks: &'a RawTable, run: &'a RunMeta) -> Self {
        RunScan {
            blocks,
            run,
            next_block: 0,
            cursor: None,
        }
    }

    /// Moves to the next entry; false at the end of the run.
    fn advance(&mut self) -> Result<bool, StorageError> {
        loop {
            if let Some(cursor) = &mut self.cursor {
                if cursor.advance()? {
                    return Ok(true);
                }
            }
            if self.next_block == self.run.first_keys.len() {
                self.cursor = None;
                return Ok(false);
            }
            let data = load_block(self.blocks, self.run, self.next_block)?;
            self.cursor = Some(BlockCursor::new(data));
            self.next_block += 1;
        }
    }

    fn key(&self) -> &[u8] {
        self.cursor.as_ref().expect("advanced").key()
    }

    fn value(&self) -> Option<&[u8]> {
        self.cursor.as_ref().expect("advanced").value()
    }
}

/// Builds one run's blocks in memory; the caller stores them ([`RunWriter::take_blocks`], in
/// as many transactions as it likes) and lists the run ([`RunWriter::finish`]).
pub(crate) struct RunWriter {
    file: u64,
    block: BlockWriter,
    /// Finished blocks not yet taken: (block key, bytes).
    pending: Vec<([u8; 12], Vec<u8>)>,
    pending_bytes: usize,
    first_keys: Vec<Vec<u8>>,
    last_key: Vec<u8>,
    entries: u64,
    bytes: u64,
}

impl RunWriter {
    pub(crate) fn new(file: u64) -> Self {
        RunWriter {
            file,
            block: BlockWriter::default(),
            pending: Vec::new(),
            pending_bytes: 0,
            first_keys: Vec::new(),
            last_key: Vec::new(),
            entries: 0,
            bytes: 0,
        }
    }

    /// Appends an entry; keys must strictly increase.
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        if self.block.is_empty() {
            self.first_keys.push(key.to_vec());
        }
        if !self.block.push_if_fits(key, value) {
            self.close_block();
            self.first_keys.push(key.to_vec());
            self.block.push(key, value);
        }
        self.entries += 1;
    }

    fn close_block(&mut self) {
        // The run's last key so far is the block's: taken, not copied for every entry.
        std::mem::swap(&mut self.last_key, self.block.last_key_mut());
        let data = self.block.take();
        self.bytes += data.len() as u64;
        self.pending_bytes += data.len();
        let key = block_key(self.file, self.first_keys.len() - 1);
        self.pending.push((key, data));
    }

    /// Bytes of finished blocks not yet taken.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Stores the finished blocks not yet stored into `blocks`.
    pub(crate) fn store_blocks(&mut self, blocks: &mut WriteTable<'_>) -> Result<(), StorageError> {
        for (key, data) in self.pending.drain(..) {
            blocks.insert(key.as_slice(), data.as_slice())?;
        }
        self.pending_bytes = 0;
        Ok(())
    }

    /// Closes the last block (store it with [`store_blocks`](RunWriter::store_blocks)); the
    /// run's metadata, or `None` if it has no entries.
    pub(crate) fn finish(&mut self, order: u64, level: u32) -> Option<RunMeta> {
        if !self.block.is_empty() {
            self.close_block();
        }
        if self.entries == 0 {
            return None;
        }
        Some(RunMeta {
            order,
            file: self.file,
            level,
            entries: self.entries,
            bytes: self.bytes,
            first_keys: std::mem::take(&mut self.first_keys),
            last_key: std::mem::take(&mut self.last_key),
        })
    }
}

/// Takes the next run file number from the store's state (orders come from the same counter).
fn next_number(txn: &WriteTransaction) -> Result<u64, StorageError> {
    let mut state = txn.open_table(STATE)?;
    let next = state.get(STATE_NEXT_RUN)?.map_or(1, |g| g.value());
    state.insert(STATE_NEXT_RUN, next + 1)?;
    Ok(next)
}

/// Writes `entries` (strictly increasing keys; `None` values are deletes) as a new run, newer
/// than every run so far, at `level`. Returns its metadata (`None` if there were no entries).
pub(crate) fn append<'e>(
    txn: &WriteTransaction,
    entries: impl IntoIterator<Item = (&'e [u8], Option<&'e [u8]>)>,
    level: u32,
) -> Result<Option<RunMeta>, StorageError> {
    let number = next_number(txn)?;
    let mut writer = RunWriter::new(number);
    for (key, value) in entries {
        writer.push(key, value);
    }
    let run = writer.finish(number, level);
    writer.store_blocks(&mut txn.open_table(RUN_BLOCKS)?)?;
    let Some(run) = run else {
        return Ok(None);
    };
    let mut meta = txn.open_table(RUN_META)?;
    meta.insert(
        crate::tables::encode_u64(run.order).as_slice(),
        run.encode().as_slice(),
    )?;
    Ok(Some(run))
}

/// Which runs (a range of positions in `runs`, oldest first) to merge next, if any: the newest
/// stretch of adjacent runs of one level, none of them `busy` (being merged already), once it
/// holds [`MERGE_WIDTH`] runs (all of it, up to twice that). Merging a stretch of level `L`
/// into one run of level `L + 1` keeps levels from increasing towards newer runs: the run just
/// older than the stretch is of a higher level, or of level `L` and busy becoming `L + 1`.
#[cfg(test)]
pub(crate) fn merge_plan(
    runs: &[Arc<RunMeta>],
    busy: impl Fn(&RunMeta) -> bool,
) -> Option<std::ops::Range<usize>> {
    merge_plan_below(runs, busy, u32::MAX)
}

/// [`merge_plan`] among the runs of levels below `top` only (those are the newest runs, since
/// levels never increase towards newer runs).
pub(crate) fn merge_plan_below(
    runs: &[Arc<RunMeta>],
    busy: impl Fn(&RunMeta) -> bool,
    top: u32,
) -> Option<std::ops::Range<usize>> {
    let mut end = runs.len();
    while end > 0 {
        if busy(&runs[end - 1]) {
            end -= 1;
            continue;
        }
        let level = runs[end - 1].level;
        if level >= top {
            return None;
        }
        let mut start = end - 1;
        while start > 0
            && end - start < 2 * MERGE_WIDTH
            && runs[start - 1].level == level
            && !busy(&runs[start - 1])
        {
            start -= 1;
        }
        if end - start >= MERGE_WIDTH {
            return Some(start..end);
        }
        end = start;
    }
    None
}

/// What a merge did, for the metrics.
pub(crate) struct Merge {
    pub(crate) entries_in: u64,
    /// Entries of the merged run (deletes dropped at the bottom, shadowed entries dropped).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) entries_out: u64,
}

/// A merge writes its blocks in transactions of about this many bytes, so that checkpoints,
/// which need redb's one write transaction, wait for at most one of them.
const MERGE_CHUNK_BYTES: usize = 4 << 20;
/// A merge deletes its inputs' blocks this many per transaction (unit tests: a few, so that
/// they take several).
const DELETE_CHUNK_BLOCKS: usize = if cfg!(test) {
    3
} else {
    MERGE_CHUNK_BYTES / BLOCK_BYTES
};

/// Merges `inputs` (adjacent runs, oldest first, read through `blocks` of a read transaction
/// that lists them) into one run of the next level and deletes them. The new run's blocks are
/// written in transactions of [`MERGE_CHUNK_BYTES`] under a new file number that no metadata
/// lists until the one that lists the run and unlists the inputs; a crash before that leaves
/// unlisted blocks, which [`remove_orphans`] deletes on open. The inputs' blocks are deleted in
/// transactions of their own after it (a crash in between leaves them unlisted too). Deletes
/// are dropped when `bottom` (no run is older than the inputs). None of these commits is
/// durable by itself: the next durable checkpoint makes them so, and until then a crash reopens
/// with the inputs, which hold the same entries.
/// `between_chunks` runs after each chunk's commit (the merger threads adjust their priority
/// there).
pub(crate) fn merge(
    db: &redb::Database,
    blocks: &RawTable,
    inputs: &[Arc<RunMeta>],
    bottom: bool,
    between_chunks: &dyn Fn(),
) -> Result<Merge, StorageError> {
    let begin = || -> Result<WriteTransaction, StorageError> {
        let mut txn = db.begin_write()?;
        txn.set_durability(redb::Durability::None)?;
        Ok(txn)
    };
    let newest = inputs.last().expect("a merge has inputs");
    let level = inputs.iter().map(|r| r.level).max().unwrap_or(0) + 1;
    let number = {
        let txn = begin()?;
        let number = next_number(&txn)?;
        txn.commit()?;
        number
    };
    let mut sources = Vec::with_capacity(inputs.len());
    for run in inputs {
        let mut scan = RunScan::new(blocks, run);
        if scan.advance()? {
            sources.push(scan);
        }
    }
    let mut writer = RunWriter::new(number);
    while !sources.is_empty() {
        // The smallest key among the sources; on a tie the newest source (last) wins.
        let mut winner = 0;
        for i in 1..sources.len() {
            if sources[i].key() <= sources[winner].key() {
                winner = i;
            }
        }
        let value = sources[winner].value();
        if value.is_some() || !bottom {
            writer.push(sources[winner].key(), value);
        }
        // Older sources' entries for the same key are hidden by the winner.
        for i in (0..winner).rev() {
            if sources[i].key() == sources[winner].key() && !sources[i].advance()? {
                sources.remove(i);
                winner -= 1;
            }
        }
        if !sources[winner].advance()? {
            sources.remove(winner);
        }
        if writer.pending_bytes() >= MERGE_CHUNK_BYTES {
            let txn = begin()?;
            writer.store_blocks(&mut txn.open_table(RUN_BLOCKS)?)?;
            txn.commit()?;
            between_chunks();
        }
    }
    let entries_in = inputs.iter().map(|r| r.entries).sum();
    let merged = writer.finish(newest.order, level);
    let txn = begin()?;
    {
        let mut out = txn.open_table(RUN_BLOCKS)?;
        writer.store_blocks(&mut out)?;
        // The inputs are unlisted and the merged run (if anything is left) takes the newest
        // input's order; the inputs' blocks go in the transactions after this one.
        let mut meta = txn.open_table(RUN_META)?;
        for run in inputs {
            meta.remove(crate::tables::encode_u64(run.order).as_slice())?;
        }
        if let Some(run) = &merged {
            meta.insert(
                crate::tables::encode_u64(run.order).as_slice(),
                run.encode().as_slice(),
            )?;
        }
    }
    txn.commit()?;
    // Unlisted blocks, deleted a chunk per transaction: removing a large merge's inputs (tens of
    // thousands of blocks) in one transaction held redb's only write transaction, which every
    // checkpoint needs, for as long. A crash before the last chunk leaves unlisted blocks,
    // which `remove_orphans` deletes on open.
    let blocks: Vec<[u8; 12]> = inputs
        .iter()
        .flat_map(|run| (0..run.first_keys.len()).map(|block| block_key(run.file, block)))
        .collect();
    for chunk in blocks.chunks(DELETE_CHUNK_BLOCKS) {
        let txn = begin()?;
        {
            let mut out = txn.open_table(RUN_BLOCKS)?;
            for key in chunk {
                out.remove(key.as_slice())?;
            }
        }
        txn.commit()?;
    }
    Ok(Merge {
        entries_in,
        entries_out: merged.as_ref().map_or(0, |r| r.entries),
    })
}

/// Deletes blocks that no listed run owns: what a merge interrupted by a crash had written.
pub(crate) fn remove_orphans(db: &redb::Database) -> Result<u64, StorageError> {
    let txn = db.begin_write()?;
    let mut removed = 0;
    {
        let meta = txn.open_table(RUN_META)?;
        let mut listed = std::collections::HashSet::new();
        for item in meta.iter()? {
            let (_, value) = item?;
            listed.insert(RunMeta::decode_file(value.value())?);
        }
        let mut blocks = txn.open_table(RUN_BLOCKS)?;
        let mut orphans = Vec::new();
        for item in blocks.iter()? {
            let (key, _) = item?;
            let key = key.value();
            let file = crate::tables::decode_u64(key.get(..8).unwrap_or_default())?;
            if !listed.contains(&file) {
                orphans.push(key.to_vec());
            }
        }
        for key in orphans {
            blocks.remove(key.as_slice())?;
            removed += 1;
        }
    }
    if removed == 0 {
        txn.abort()?;
    } else {
        txn.commit()?;
    }
    Ok(removed)
}

/// The level for the one run an upgrade writes: the level it would have reached by merges of
/// checkpoint-sized runs, so it is not merged again soon.
pub(crate) fn level_for(entries: u64) -> u32 {
    const CHECKPOINT_ENTRIES: u64 = 1 << 16;
    let mut level = 0;
    let mut size = CHECKPOINT_ENTRIES;
    while entries > size && level < 16 {
        size = size.saturating_mul(MERGE_WIDTH as u64);
        level += 1;
    }
    level
}

/// Moves whatever the `index` B-tree still holds (a store written by a build before index
/// runs) into one run, in one transaction. Afterwards the B-tree stays empty.
pub(crate) fn upgrade_index_table(db: &redb::Database) -> Result<(), StorageError> {
    let def = crate::Table::Index.definition();
    let txn = db.begin_write()?;
    let entries: Vec<(Vec<u8>, Vec<u8>)> = {
        let table = txn.open_table(def)?;
        if table.len()? == 0 {
            return Ok(());
        }
        table
            .iter()?
            .map(|item| item.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
            .collect::<Result<_, _>>()?
    };
    // It must be older than every run; a store with both was never written by any build.
    if txn.open_table(RUN_META)?.len()? != 0 {
        return Err(corrupt("the index table and index runs are both non-empty"));
    }
    let level = level_for(entries.len() as u64);
    append(
        &txn,
        entries
            .iter()
            .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
        level,
    )?;
    txn.delete_table(def)?;
    txn.open_table(def)?;
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests;
