//! The stored form of [`Table::Log`]: its entries packed in key order into blocks of about 16 KiB
//! (`log_blocks` in redb, keyed by each block's first key), appended by checkpoints and dropped
//! from the front, with a floor below which every key counts as deleted.
//!
//! The log is append-only: each checkpoint's new keys sort after every stored one, and its
//! deletes only ever remove the oldest entries (the database prunes the commit log from its
//! start). So a checkpoint appends its puts as new blocks (topping up the last block while it
//! has room) and raises the floor to its greatest deleted key; a block is removed once every key
//! in it is at or below the floor. A delete here therefore removes every stored key up to it, not
//! that key alone; [`append`] refuses a put that does not sort after the stored log.
//!
//! Why: one B-tree insert of a ~1 KB value per commit, into leaves that splits leave half full,
//! was the largest part of what the commit log cost a checkpoint under heavy ingest; a block is
//! one insert of a full 16 KiB page for about 14 records of 1 KB.
//!
//! A block is a sequence of entries, each `key length (u32 LE) ++ key ++ value length (u32 LE)
//! ++ value`. A block is closed before the entry that would take it over [`BLOCK_BYTES_MAX`]
//! (the same bound as the index runs' blocks: the redb leaf holding it fits one 16 KiB page);
//! one entry larger than that is a block of its own.

use std::collections::VecDeque;
use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::tables::{Def, Entry, KeyBounds};
use crate::{StorageError, Table};

/// The blocks: key = the block's first key, value = its entries.
pub(crate) const LOG_BLOCKS: Def = TableDefinition::new("log_blocks");

/// One entry, under [`FLOOR_KEY`]: the greatest key deleted from the log. Every key at or below
/// it is deleted, whatever block still holds it.
pub(crate) const LOG_FLOOR: Def = TableDefinition::new("log_floor");
const FLOOR_KEY: &[u8] = b"floor";

/// A block is closed before the entry that would take it over this many bytes.
pub(crate) const BLOCK_BYTES_MAX: usize = 16_128;

type RawTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;
type RawRange<'a> = redb::Range<'a, &'static [u8], &'static [u8]>;

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupted(format!("commit-log block: {what}"))
}

/// Appends one entry to a block under construction.
pub(crate) fn push_entry(block: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    block.extend_from_slice(&(key.len() as u32).to_le_bytes());
    block.extend_from_slice(key);
    block.extend_from_slice(&(value.len() as u32).to_le_bytes());
    block.extend_from_slice(value);
}

fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
    8 + key.len() + value.len()
}

/// The entries of a block, in order, borrowed from it.
pub(crate) fn entries(block: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8]), StorageError>> {
    let mut rest = block;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut take = |what: &str| -> Result<&[u8], StorageError> {
            let len = rest
                .get(..4)
                .ok_or_else(|| corrupt(what))
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)?;
            let bytes = rest.get(4..4 + len).ok_or_else(|| corrupt(what))?;
            rest = &rest[4 + len..];
            Ok(bytes)
        };
        let entry = take("key").and_then(|k| Ok((k, take("value")?)));
        if entry.is_err() {
            rest = &[];
        }
        Some(entry)
    })
}

/// The last key of a block.
fn last_key(block: &[u8]) -> Result<Vec<u8>, StorageError> {
    let mut last = None;
    for entry in entries(block) {
        last = Some(entry?.0);
    }
    last.map(<[u8]>::to_vec).ok_or_else(|| corrupt("empty"))
}

/// Writes a checkpoint's log entries (sorted by key, the newest value of each; `None` is a
/// delete) into `txn`: puts are appended after the stored log, deletes raise the floor, and
/// blocks that fall wholly below it are removed.
pub(crate) fn append<'e>(
    txn: &redb::WriteTransaction,
    entries: impl IntoIterator<Item = (&'e [u8], Option<&'e [u8]>)>,
) -> Result<(), StorageError> {
    let mut floor_table = txn.open_table(LOG_FLOOR)?;
    let old_floor = floor_table.get(FLOOR_KEY)?.map(|g| g.value().to_vec());
    let mut floor = old_floor.clone();
    let mut puts = Vec::new();
    for (key, value) in entries {
        match value {
            Some(value) => puts.push((key, value)),
            None => {
                if floor.as_deref().is_none_or(|f| key > f) {
                    floor = Some(key.to_vec());
                }
            }
        }
    }
    // A put the same checkpoint deleted again (or one below a delete of it) is not stored.
    if let Some(f) = &floor {
        puts.retain(|(key, _)| *key > f.as_slice());
    }
    let mut blocks = txn.open_table(LOG_BLOCKS)?;
    // The block under construction: its first key and bytes.
    let mut open: Option<(Vec<u8>, Vec<u8>)> = None;
    if let Some(&(first_put, _)) = puts.first() {
        if let Some((first, block)) = blocks
            .last()?
            .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
        {
            if first_put <= last_key(&block)?.as_slice() {
                return Err(StorageError::Corrupted(format!(
                    "a commit-log key ({first_put:?}) does not sort after the stored log"
                )));
            }
            if block.len() < BLOCK_BYTES_MAX {
                open = Some((first, block));
            }
        }
    }
    for (key, value) in puts {
        if let Some((first, block)) = &mut open {
            if block.len() + entry_bytes(key, value) > BLOCK_BYTES_MAX {
                blocks.insert(first.as_slice(), block.as_slice())?;
                open = None;
            }
        }
        let (_, block) = open.get_or_insert_with(|| (key.to_vec(), Vec::new()));
        push_entry(block, key, value);
    }
    if let Some((first, block)) = open {
        blocks.insert(first.as_slice(), block.as_slice())?;
    }
    if floor != old_floor {
        let floor = floor.expect("raised");
        floor_table.insert(FLOOR_KEY, floor.as_slice())?;
        // Every block whose keys are all at or below the floor: those before a block that
        // starts at or below it, and the first one after them if its own last key is.
        let mut doomed = Vec::new();
        {
            let mut iter = blocks.iter()?;
            let mut current = iter.next().transpose()?;
            while let Some((key, value)) = current {
                let next = iter.next().transpose()?;
                let below = match &next {
                    Some((next_first, _)) => next_first.value() <= floor.as_slice(),
                    None => false,
                };
                if below || last_key(value.value())?.as_slice() <= floor.as_slice() {
                    doomed.push(key.value().to_vec());
                } else {
                    break;
                }
                current = next;
            }
        }
        for key in doomed {
            blocks.remove(key.as_slice())?;
        }
    }
    Ok(())
}

/// Moves the entries of the `log` B-tree (formats up to 3) into blocks, in one transaction, and
/// empties it. Does nothing when it is empty, so it is safe to run on every open.
pub(crate) fn upgrade_log_table(db: &redb::Database) -> Result<(), StorageError> {
    let def = Table::Log.definition();
    let txn = db.begin_write()?;
    {
        let old = txn.open_table(def)?;
        if old.len()? == 0 {
            return Ok(());
        }
        // Chunks keep the memory bounded; each chunk's keys sort after the previous one's.
        let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut bytes = 0;
        let flush = |chunk: &mut Vec<(Vec<u8>, Vec<u8>)>| {
            let entries = chunk
                .iter()
                .map(|(k, v)| (k.as_slice(), Some(v.as_slice())));
            append(&txn, entries).map(|()| chunk.clear())
        };
        for item in old.iter()? {
            let (k, v) = item?;
            bytes += k.value().len() + v.value().len();
            chunk.push((k.value().to_vec(), v.value().to_vec()));
            if bytes >= 64 << 20 {
                flush(&mut chunk)?;
                bytes = 0;
            }
        }
        flush(&mut chunk)?;
    }
    txn.delete_table(def)?;
    txn.open_table(def)?;
    txn.commit()?;
    Ok(())
}

/// The stored log as of one read transaction.
pub(crate) struct LogBase {
    pub(crate) blocks: RawTable,
    pub(crate) floor: Option<Vec<u8>>,
}

impl LogBase {
    pub(crate) fn open(txn: &redb::ReadTransaction) -> Result<LogBase, StorageError> {
        let floor = txn
            .open_table(LOG_FLOOR)?
            .get(FLOOR_KEY)?
            .map(|g| g.value().to_vec());
        Ok(LogBase {
            blocks: txn.open_table(LOG_BLOCKS)?,
            floor,
        })
    }

    fn deleted(&self, key: &[u8]) -> bool {
        self.floor.as_deref().is_some_and(|f| key <= f)
    }

    /// The stored value under `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if self.deleted(key) {
            return Ok(None);
        }
        let Some((_, block)) = self.blocks.range(..=key)?.next_back().transpose()? else {
            return Ok(None);
        };
        for entry in entries(block.value()) {
            let (k, v) = entry?;
            if k == key {
                return Ok(Some(v.to_vec()));
            }
            if k > key {
                break;
            }
        }
        Ok(None)
    }

    /// The stored entries within `bounds`, lazily, from either end.
    pub(crate) fn range(&self, bounds: KeyBounds<'_>) -> Result<LogRange<'_>, StorageError> {
        // The floor raises the start.
        let start = match (&self.floor, bounds.0) {
            (Some(f), Bound::Unbounded) => Bound::Excluded(f.as_slice()),
            (Some(f), Bound::Included(s) | Bound::Excluded(s)) if s <= f.as_slice() => {
                Bound::Excluded(f.as_slice())
            }
            (_, start) => start,
        };
        let bounds = (start, bounds.1);
        if crate::tables::is_empty_range(&bounds) {
            return Ok(LogRange {
                inner: None,
                bounds: (Bound::Unbounded, Bound::Unbounded),
                front: VecDeque::new(),
                back: VecDeque::new(),
            });
        }
        // The first block that can hold the start: the last one starting at or before it.
        let first_block = match start {
            Bound::Unbounded => None,
            Bound::Included(s) | Bound::Excluded(s) => self
                .blocks
                .range(..=s)?
                .next_back()
                .transpose()?
                .map(|(k, _)| k.value().to_vec()),
        };
        let blocks_start = match &first_block {
            Some(k) => Bound::Included(k.as_slice()),
            None => match start {
                Bound::Unbounded => Bound::Unbounded,
                // Before the first block: from the first block.
                Bound::Included(s) | Bound::Excluded(s) => Bound::Included(s),
            },
        };
        // A block starting after the end holds nothing in range; one starting at an excluded
        // end neither.
        let inner = self.blocks.range::<&[u8]>((blocks_start, bounds.1))?;
        Ok(LogRange {
            inner: Some(inner),
            bounds: (bounds.0.map(<[u8]>::to_vec), bounds.1.map(<[u8]>::to_vec)),
            front: VecDeque::new(),
            back: VecDeque::new(),
        })
    }
}

/// A key range of the stored log: blocks are read as the scan reaches them, from the front or
/// the back; their entries outside the range are dropped when a block is read.
pub(crate) struct LogRange<'a> {
    // `None` once exhausted or after an error.
    inner: Option<RawRange<'a>>,
    bounds: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    // The entries of the blocks read from the front (and from the back) not yet yielded.
    front: VecDeque<Entry>,
    back: VecDeque<Entry>,
}

type Item = Result<(Vec<u8>, Option<Vec<u8>>), StorageError>;

impl LogRange<'_> {
    fn in_bounds(&self, key: &[u8]) -> bool {
        let after_start = match &self.bounds.0 {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        };
        let before_end = match &self.bounds.1 {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        };
        after_start && before_end
    }

    /// Reads the next block from `side` into that side's buffer; false when none is left.
    fn fill(&mut self, front: bool) -> Result<bool, StorageError> {
        let Some(inner) = self.inner.as_mut() else {
            return Ok(false);
        };
        let block = if front {
            inner.next()
        } else {
            inner.next_back()
        };
        let Some(block) = block.transpose()? else {
            self.inner = None;
            return Ok(false);
        };
        let mut decoded = VecDeque::new();
        for entry in entries(block.1.value()) {
            let (k, v) = entry?;
            if self.in_bounds(k) {
                decoded.push_back((k.to_vec(), v.to_vec()));
            }
        }
        if front {
            self.front = decoded;
        } else {
            self.back = decoded;
        }
        Ok(true)
    }

    fn step(&mut self, front: bool) -> Option<Item> {
        loop {
            let buffered = if front {
                self.front.pop_front()
            } else {
                self.back.pop_back()
            };
            if let Some((k, v)) = buffered {
                return Some(Ok((k, Some(v))));
            }
            match self.fill(front) {
                Ok(true) => continue,
                Ok(false) => {
                    // No block left between the ends: the other side's buffer holds the rest.
                    let rest = if front {
                        self.back.pop_front()
                    } else {
                        self.front.pop_back()
                    };
                    return rest.map(|(k, v)| Ok((k, Some(v))));
                }
                Err(err) => {
                    self.inner = None;
                    self.front.clear();
                    self.back.clear();
                    return Some(Err(err));
                }
            }
        }
    }
}

impl Iterator for LogRange<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for LogRange<'_> {
    fn next_back(&mut self) -> Option<Item> {
        self.step(false)
    }
}

#[cfg(test)]
mod tests;
