//! What a trigger task reads and computes on its own thread before its commit is queued: the
//! stored documents its writes replace (at one read point) and the index entries of the
//! documents it puts, so that the single writer only checks what changed since.

use crate::catalog::Catalog;
use crate::error::DbError;
use crate::indexer::{entries, Entries};
use crate::layout::doc_key;
use crate::txn::Write;
use herald_storage::{Store, Table};
use std::cell::Cell;
use std::collections::{hash_map, HashMap};
use std::sync::RwLock;

/// The stored records of the documents a transaction writes, read on the caller's thread at
/// one snapshot, so that the writer looks only at what was committed since (see
/// `WriteTxn::get_read_at`): in a trigger fan-out nearly every write creates a document and
/// each miss descends redb's B-tree, work that on the one writer thread delays every commit.
pub(crate) struct KnownDocs {
    pub(crate) at: herald_storage::ReadPoint,
    /// Document key -> stored record (`None`: no document).
    pub(crate) docs: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Per write, the index entries of the document a put or insert supplies, computed with
    /// the catalog of `generation` (taken by the writer, so a `Cell`).
    pub(crate) entries: Vec<Cell<Option<Entries>>>,
    pub(crate) generation: u64,
}

impl KnownDocs {
    /// Reads, at the newest snapshot, the documents `writes` (already prepared) replace, and
    /// computes the index entries of the documents they supply.
    pub(crate) fn read(
        store: &Store,
        catalog: &RwLock<Catalog>,
        writes: &[Write],
    ) -> Result<KnownDocs, DbError> {
        let (generation, entries) = {
            let cat = catalog.read().expect("catalog lock");
            let limit = cat.key_string_limit();
            let entries = writes
                .iter()
                .map(|w| {
                    let Some(doc) = w.supplied() else {
                        return Cell::new(None);
                    };
                    let (collection, id) = w.target();
                    // An error is left for the writer to find and report.
                    let computed = entries(collection, id, doc, cat.collection(collection), limit);
                    Cell::new(computed.ok())
                })
                .collect();
            (cat.generation, entries)
        };
        let read = store.read()?;
        let mut docs = HashMap::with_capacity(writes.len());
        for w in writes {
            let (collection, id) = w.target();
            let key = doc_key(collection, id);
            if let hash_map::Entry::Vacant(slot) = docs.entry(key) {
                let stored = read.get(Table::Docs, slot.key())?;
                slot.insert(stored);
            }
        }
        Ok(KnownDocs {
            at: read.point(),
            docs,
            entries,
            generation,
        })
    }
}
