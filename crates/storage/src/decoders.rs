//! Pure entry points into the on-disk decoders (WAL records and their bodies, commit-log
//! blocks) for the fuzz targets in `fuzz/` and their regression tests: no file, no redb, no
//! state. They call the same functions recovery and reads call; nothing here is on a write path.

use crate::layer::Changes;
use crate::{StorageError, Table};

/// One decoded WAL entry: its table, key, and value (`None`: a delete).
pub type WalEntry = (Table, Vec<u8>, Option<Vec<u8>>);

/// The intact records of a WAL segment, scanned the way recovery scans one (a damaged region
/// is skipped to the next magic), each as `(batch, synced, body)`.
pub fn wal_records(segment: &[u8]) -> Vec<(u64, u64, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < segment.len() {
        match crate::wal::parse(segment, off) {
            Some(r) => {
                assert!(r.end > off, "a record advances the scan");
                out.push((r.batch, r.synced, r.body));
                off = r.end;
            }
            None => off = crate::wal::next_magic(segment, off + 1),
        }
    }
    out
}

/// The entries of a WAL record's body.
pub fn wal_body(body: &[u8]) -> Result<Vec<WalEntry>, StorageError> {
    let mut out = Vec::new();
    crate::wal::decode(body, |table, key, value| {
        out.push((table, key.to_vec(), value.map(<[u8]>::to_vec)));
        Ok(())
    })?;
    Ok(out)
}

/// The WAL record the writer would log for `entries` (the last write of a key wins), as the
/// writer frames it: magic, checksum, lengths, body.
pub fn wal_record(batch: u64, synced: u64, entries: &[WalEntry]) -> Vec<u8> {
    let mut changes = Changes::default();
    for (table, key, value) in entries {
        changes.table_mut(*table).insert(key.clone(), value.clone());
    }
    let mut out = Vec::new();
    crate::wal::encode(&mut out, batch, synced, &changes);
    out
}

/// One entry of a commit-log block: its key and value, borrowed from the block.
pub type BlockEntry<'a> = (&'a [u8], &'a [u8]);

/// The entries of a commit-log block, in order.
pub fn log_block_entries(block: &[u8]) -> Result<Vec<BlockEntry<'_>>, StorageError> {
    crate::logblocks::entries(block).collect()
}

/// A commit-log block holding `entries`, as a checkpoint writes one.
pub fn log_block(entries: &[BlockEntry<'_>]) -> Vec<u8> {
    let mut block = Vec::new();
    for (key, value) in entries {
        crate::logblocks::push_entry(&mut block, key, value);
    }
    block
}
