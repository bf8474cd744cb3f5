//! Listing the collections that hold documents, by skip-scan over the `docs` table: one seek
//! per collection, never a read of every document.
//!
//! Document keys are `collection 0x00 id` (`layout.rs`), so the keys of one collection are one
//! contiguous range and the first key at or after any position names the next collection. After
//! reading it, the scan seeks to `collection 0x01` (the end of that collection's prefix) and
//! reads one key again. A collection exists exactly while it holds a document.

use super::Db;
use crate::error::DbError;
use crate::layout::{collection_prefix, prefix_end};
use herald_storage::{ReadTxn, Table};

/// Most collection names one call returns (page on with `after`).
pub const COLLECTIONS_LIST_MAX: usize = 10_000;

impl Db {
    /// The names of collections holding at least one document, in byte order, starting after
    /// `after` (exclusive), at most `limit` (capped at [`COLLECTIONS_LIST_MAX`]) of them.
    pub fn list_collections(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, DbError> {
        let read = self.inner.store.read()?;
        Ok(skip_scan(&read, after, limit.min(COLLECTIONS_LIST_MAX))?.0)
    }
}

/// The collections after `after`, and how many entries were read to find them (one per
/// collection, plus one that ends the scan early or finds nothing): the cost the tests pin.
pub(super) fn skip_scan(
    read: &ReadTxn,
    after: Option<&str>,
    limit: usize,
) -> Result<(Vec<String>, usize), DbError> {
    let mut names = Vec::new();
    let mut reads = 0;
    // The first key past every document of `after` (all its keys start `after 0x00`).
    let mut from = match after {
        Some(a) => prefix_end(&collection_prefix(a)),
        None => Vec::new(),
    };
    while names.len() < limit {
        let Some(entry) = read.range(Table::Docs, from.as_slice()..)?.next() else {
            break;
        };
        reads += 1;
        let (key, _) = entry?;
        let end = key.iter().position(|&b| b == 0).ok_or_else(|| {
            DbError::Corrupt("document key without a collection separator".into())
        })?;
        let name = std::str::from_utf8(&key[..end])
            .map_err(|_| DbError::Corrupt("collection path is not UTF-8".into()))?;
        from = prefix_end(&collection_prefix(name));
        names.push(name.to_string());
    }
    Ok((names, reads))
}

#[cfg(test)]
mod tests {
    use super::skip_scan;
    use crate::{Db, DbOptions, Durability, Write};
    use serde_json::json;

    fn put(c: &str, id: &str) -> Write {
        Write::Put {
            collection: c.into(),
            id: id.into(),
            doc: json!({"n": 1}),
            if_version: None,
        }
    }

    #[test]
    fn skip_scan_reads_one_key_per_collection_and_pages() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            DbOptions {
                durability: Durability::NoSync,
                ..DbOptions::default()
            },
        )
        .unwrap();
        assert!(db.list_collections(None, 100).unwrap().is_empty());
        // Many documents in a few collections; "a" and "a/x/b" share a byte prefix, and "a!"
        // sorts between "a\0..." keys and "a/..." ones.
        for c in ["a", "users"] {
            db.commit((0..300).map(|i| put(c, &format!("d{i:03}"))).collect())
                .unwrap();
        }
        db.commit(vec![put("a!", "x"), put("a/x/b", "y")]).unwrap();

        let read = db.inner.store.read().unwrap();
        let (names, reads) = skip_scan(&read, None, 100).unwrap();
        assert_eq!(names, ["a", "a!", "a/x/b", "users"]);
        assert_eq!(reads, 4, "one read per collection, not per document");
        assert_eq!(db.list_collections(None, 2).unwrap(), ["a", "a!"]);
        assert_eq!(
            db.list_collections(Some("a!"), 100).unwrap(),
            ["a/x/b", "users"]
        );
        assert!(db.list_collections(Some("users"), 100).unwrap().is_empty());

        // A collection whose last document is deleted is gone.
        db.commit(vec![Write::Delete {
            collection: "a!".into(),
            id: "x".into(),
            if_version: None,
        }])
        .unwrap();
        assert_eq!(
            db.list_collections(None, 100).unwrap(),
            ["a", "a/x/b", "users"]
        );
    }
}
