//! `herald check`: offline verification of a data directory. The storage layer checks its
//! files (`herald_storage::check`: the write-ahead log, redb, index runs and commit-log
//! blocks); this adds the database's own invariants, read from the same snapshot:
//!
//! - every document decodes;
//! - every index entry names a document that exists;
//! - every document has every index entry its fields call for (skipped for a collection
//!   with an index build under way, whose entries are still being written).

use std::path::Path;
use std::sync::Arc;

use herald_storage::{ReadTxn, Report, StorageError, Table};

use crate::catalog::{Catalog, IndexState};
use crate::indexer::{entries, group_entries};
use crate::layout::{
    decode_doc, doc_key, index_entry_id, scope_group, split_group_suffix, META_CATALOG,
};

/// At most this many findings of one kind are described; the rest are counted.
const DESCRIBED_MAX: u64 = 20;

/// Checks the store in `dir` (see the module docs). `Err`: it could not be checked at all (no
/// store there, or a server has it open).
pub fn check(dir: &Path) -> Result<Report, StorageError> {
    herald_storage::check(dir, Arc::new(herald_storage::RealFs), &mut check_database)
}

/// The database's invariants over `txn` (see the module docs), as findings in `report`.
pub fn check_database(txn: &ReadTxn, report: &mut Report) {
    if let Err(err) = check_indexes(txn, report) {
        report.damaged(format!("checking documents against indexes: {err}"));
    }
}

/// Counts findings of one kind, describing the first few.
struct Kind {
    what: &'static str,
    count: u64,
}

impl Kind {
    fn found(&mut self, report: &mut Report, detail: impl FnOnce() -> String) {
        self.count += 1;
        if self.count <= DESCRIBED_MAX {
            report.damaged(detail());
        }
    }

    fn finish(self, report: &mut Report) {
        if self.count > DESCRIBED_MAX {
            report.damaged(format!(
                "{} more of: {}",
                self.count - DESCRIBED_MAX,
                self.what
            ));
        }
    }
}

fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(120).collect()
}

fn check_indexes(txn: &ReadTxn, report: &mut Report) -> Result<(), crate::DbError> {
    let catalog: Catalog = match txn.get(Table::Meta, META_CATALOG)? {
        Some(bytes) => match serde_json::from_slice(&bytes) {
            Ok(catalog) => catalog,
            Err(err) => {
                report.damaged(format!("the index catalog does not decode: {err}"));
                return Ok(());
            }
        },
        None => Catalog::default(),
    };
    let limit = catalog.key_string_limit();
    let mut bad_docs = Kind {
        what: "a document that does not decode",
        count: 0,
    };
    let mut missing = Kind {
        what: "a document missing from an index",
        count: 0,
    };
    let mut orphans = Kind {
        what: "an index entry whose document does not exist",
        count: 0,
    };
    let (mut docs, mut expected) = (0u64, 0u64);
    for item in txn.range::<&[u8]>(Table::Docs, ..)? {
        let (key, value) = item?;
        docs += 1;
        let Some(split) = key.iter().position(|&b| b == 0) else {
            bad_docs.found(report, || {
                format!("document key {:?} has no collection", shown(&key))
            });
            continue;
        };
        let (collection, id) = (
            String::from_utf8_lossy(&key[..split]).into_owned(),
            String::from_utf8_lossy(&key[split + 1..]).into_owned(),
        );
        let doc = match decode_doc(&value) {
            Ok((_, doc)) => doc,
            Err(err) => {
                bad_docs.found(report, || format!("document {collection}/{id}: {err}"));
                continue;
            }
        };
        let cc = catalog.collection(&collection);
        let building = cc.is_some_and(|c| {
            !c.building_fields.is_empty()
                || c.composites
                    .iter()
                    .any(|ci| ci.state == IndexState::Building)
        });
        if building {
            continue;
        }
        let Ok(mut want) = entries(&collection, &id, &doc, cc, limit) else {
            continue; // over the entry limit: such a document was never accepted
        };
        // Its collection group's indexes, unless one of them is being built.
        if let Some(groups) = catalog.groups.get(crate::names::group_of(&collection)) {
            if groups.iter().any(|ci| ci.state == IndexState::Building) {
                continue;
            }
            if let Ok(g) = group_entries(&collection, &id, &doc, groups, limit) {
                want.keys.extend(g.keys);
            }
        }
        for entry in &want.keys {
            expected += 1;
            if txn.get(Table::Index, entry)?.is_none() {
                missing.found(report, || {
                    format!(
                        "document {collection}/{id} is missing from the index (entry {:?})",
                        shown(entry)
                    )
                });
            }
        }
    }
    let mut index_entries = 0u64;
    for item in txn.range::<&[u8]>(Table::Index, ..)? {
        let (key, value) = item?;
        index_entries += 1;
        let collection = key.split(|&b| b == 0).next().unwrap_or_default();
        let collection = String::from_utf8_lossy(collection).into_owned();
        let id = match index_entry_id(&key, &value) {
            Ok(id) => id.to_owned(),
            Err(err) => {
                orphans.found(report, || format!("index entry {:?}: {err}", shown(&key)));
                continue;
            }
        };
        // A collection-group entry names its document by `id 0x00 path`.
        let (collection, id) = match scope_group(&collection) {
            None => (collection, id),
            Some(_) => match split_group_suffix(&id) {
                Ok((c, i)) => (c.to_string(), i.to_string()),
                Err(err) => {
                    orphans.found(report, || format!("index entry {:?}: {err}", shown(&key)));
                    continue;
                }
            },
        };
        if txn.get(Table::Docs, &doc_key(&collection, &id))?.is_none() {
            orphans.found(report, || {
                format!(
                    "index entry {:?} names document {collection}/{id}, which does not exist",
                    shown(&key)
                )
            });
        }
    }
    report.note(format!(
        "documents: {docs} read, {expected} index entries they call for looked up; index: \
         {index_entries} entries, each document looked up"
    ));
    bad_docs.finish(report);
    missing.finish(report);
    orphans.finish(report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, DbOptions, Write};
    use herald_storage::{Store, StoreOptions};
    use serde_json::json;

    fn findings(dir: &Path) -> Vec<String> {
        let report = check(dir).unwrap();
        report.findings.into_iter().map(|f| f.0).collect()
    }

    /// Removes one entry straight from the store, as damage would.
    fn remove(dir: &Path, table: Table, pick: impl Fn(&[u8]) -> bool) {
        let store = Store::open(dir, StoreOptions::default()).unwrap();
        let key = store
            .read()
            .unwrap()
            .range::<&[u8]>(table, ..)
            .unwrap()
            .map(|e| e.unwrap().0)
            .find(|k| pick(k))
            .expect("an entry to remove");
        store
            .submit(move |txn| {
                txn.delete(table, key);
                Ok::<_, StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        store.close().unwrap();
    }

    #[test]
    fn check_finds_index_entries_without_documents_and_documents_missing_from_indexes() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), DbOptions::default()).unwrap();
            for (id, n) in [("a", 1), ("b", 2)] {
                db.commit(vec![Write::Put {
                    collection: "c".into(),
                    id: id.into(),
                    doc: json!({ "n": n, "tag": "x" }),
                    if_version: None,
                }])
                .unwrap();
            }
        }
        assert_eq!(findings(dir.path()), Vec::<String>::new());
        remove(dir.path(), Table::Docs, |k| k == b"c\0a");
        let found = findings(dir.path());
        assert!(
            found
                .iter()
                .any(|f| f.contains("names document c/a, which does not exist")),
            "{found:?}"
        );
        // One of document b's entries goes too.
        remove(dir.path(), Table::Index, |k| {
            k.starts_with(b"c\0") && k.ends_with(b"b")
        });
        let found = findings(dir.path());
        assert!(
            found
                .iter()
                .any(|f| f.contains("document c/b is missing from the index")),
            "{found:?}"
        );
    }

    /// Collection-group index entries (`*/group ...`, naming `id 0x00 path`) are checked like
    /// a collection's: a healthy store has no finding, a lost group entry is one.
    #[test]
    fn check_knows_collection_group_index_entries() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), DbOptions::default()).unwrap();
            db.create_group_index(
                "m",
                "a_n",
                vec![
                    ("a".into(), herald_query::Direction::Asc),
                    ("n".into(), herald_query::Direction::Desc),
                ],
            )
            .unwrap();
            for c in ["m", "r/x/m"] {
                db.commit(vec![Write::Put {
                    collection: c.into(),
                    id: "d".into(),
                    doc: json!({"a": 1, "n": 2}),
                    if_version: None,
                }])
                .unwrap();
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while db.list_group_indexes("m").unwrap()[0].state != IndexState::Ready {
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            db.close().unwrap();
        }
        assert_eq!(findings(dir.path()), Vec::<String>::new());
        remove(dir.path(), Table::Index, |k| {
            k.starts_with(b"*/m\0") && k.ends_with(b"r/x/m/d")
        });
        let found = findings(dir.path());
        assert!(
            found
                .iter()
                .any(|f| f.contains("document r/x/m/d is missing from the index")),
            "{found:?}"
        );
    }
}
