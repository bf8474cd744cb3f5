//! The on-disk decoders on damaged bytes: WAL segments and record bodies, commit-log blocks,
//! commit-log records. Each decodes without panicking or allocating more than its input
//! implies, and what it accepts encodes back to what it read.

use herald_db::decoders::{commit_record, commit_record_json, encode_commit_record};
use herald_storage::decoders::{
    log_block as encode_block, log_block_entries, wal_body, wal_record, wal_records, WalEntry,
};
use std::collections::BTreeMap;

/// A WAL segment (recovery's scan), and the same bytes as one record's body: an accepted body
/// re-encodes (last write of a key wins, tables and keys in order) to a record that scans and
/// decodes to the same entries.
pub fn wal(data: &[u8]) {
    for (_, _, body) in wal_records(data) {
        let _ = wal_body(body);
    }
    let Ok(entries) = wal_body(data) else { return };
    let mut model: BTreeMap<(usize, Vec<u8>), WalEntry> = BTreeMap::new();
    for e in &entries {
        model.insert((e.0.index(), e.1.clone()), e.clone());
    }
    let want: Vec<WalEntry> = model.into_values().collect();
    let record = wal_record(7, 3, &entries);
    let scanned = wal_records(&record);
    assert_eq!(scanned.len(), 1, "one record scans as one");
    let (batch, synced, body) = scanned[0];
    assert_eq!((batch, synced), (7, 3));
    assert_eq!(wal_body(body).expect("an encoded body decodes"), want);
}

/// A commit-log block: an accepted block re-encodes to the same bytes.
pub fn log_block(data: &[u8]) {
    let Ok(entries) = log_block_entries(data) else {
        return;
    };
    assert_eq!(encode_block(&entries), data, "a block re-encodes to itself");
}

/// A commit-log record: an accepted record re-encodes (as the writer encodes it) to one that
/// decodes to the same commit.
pub fn commit_log(data: &[u8]) {
    let _ = commit_record_json(data);
    let Ok((seq, changes)) = commit_record(data) else {
        return;
    };
    let ts = u64::from_be_bytes(
        data[..8]
            .try_into()
            .expect("an accepted record has its time"),
    );
    let again = encode_commit_record(seq, ts, &changes);
    let (seq2, changes2) = commit_record(&again).expect("an encoded record decodes");
    assert_eq!(seq2, seq);
    assert_eq!(changes2.len(), changes.len());
    for (a, b) in changes.iter().zip(&changes2) {
        assert_eq!(
            (&a.collection, &a.id, a.op, a.version, &a.before, &a.after),
            (&b.collection, &b.id, b.op, b.version, &b.before, &b.after)
        );
    }
}
