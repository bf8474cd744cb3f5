//! Index management on [`Db`]: composite indexes and automatic-index exemptions, changed by
//! catalog jobs on the writer thread, filled by background builds in bounded chunks, and the
//! removal of entries no index has any more.

use super::{Db, BUILD_CHUNK_DOCS, COMPOSITE_INDEXES_MAX};
use crate::catalog::{Catalog, CompositeIndex, IndexField, IndexState};
use crate::error::DbError;
use crate::indexer::{composite_index_name, entries, field_index_name};
use crate::layout::{
    collection_prefix, decode_doc, doc_key, index_entry_id, index_prefix, index_value, META_CATALOG,
};
use crate::names::{check_collection, check_segment};
use herald_query::Direction;
use herald_storage::{Table, WriteTxn};
use herald_value::FieldPath;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long an index build that met a full disk waits before it tries again.
const BUILD_FULL_RETRY: Duration = Duration::from_secs(1);

/// A composite index as declared (building): its name checked, 1 or 2 (`min_fields`) to 8 field
/// paths, none of them `_id`. Shared by collection and collection-group indexes.
pub(super) fn declared(
    name: &str,
    fields: Vec<(String, Direction)>,
    min_fields: usize,
    what: &str,
) -> Result<CompositeIndex, DbError> {
    check_segment(name, "index name")?;
    if fields.len() < min_fields || fields.len() > 8 {
        return Err(DbError::BadIndex(format!(
            "{what} has {min_fields} to 8 fields"
        )));
    }
    for (p, _) in &fields {
        FieldPath::parse(p).map_err(|e| DbError::BadIndex(e.to_string()))?;
        if p == "_id" {
            return Err(DbError::BadIndex(
                "_id cannot be part of a composite index".into(),
            ));
        }
    }
    Ok(CompositeIndex {
        name: name.to_string(),
        fields: fields
            .into_iter()
            .map(|(path, direction)| IndexField { path, direction })
            .collect(),
        state: IndexState::Building,
    })
}

/// Adds a declared index to a scope's list (a collection's or a group's), unless the name is
/// taken or the list is full.
pub(super) fn add_declared(
    list: &mut Vec<CompositeIndex>,
    idx: CompositeIndex,
    scope: &str,
) -> Result<(), DbError> {
    if list.iter().any(|c| c.name == idx.name) {
        return Err(DbError::IndexExists(idx.name));
    }
    if list.len() >= COMPOSITE_INDEXES_MAX {
        return Err(DbError::LimitExceeded(format!(
            "at most {COMPOSITE_INDEXES_MAX} composite indexes per {scope}"
        )));
    }
    list.push(idx);
    Ok(())
}

/// Removes a declared index from a scope's list by name (`IndexNotFound` when absent).
pub(super) fn remove_declared(list: &mut Vec<CompositeIndex>, name: String) -> Result<(), DbError> {
    let before = list.len();
    list.retain(|c| c.name != name);
    if list.len() == before {
        return Err(DbError::IndexNotFound(name));
    }
    Ok(())
}

impl Db {
    /// Declares a composite index; it is filled in the background and used once ready.
    /// Returns the index as declared (building).
    pub fn create_index(
        &self,
        collection: &str,
        name: &str,
        fields: Vec<(String, Direction)>,
    ) -> Result<CompositeIndex, DbError> {
        check_collection(collection)?;
        let index = declared(name, fields, 2, "a composite index")?;
        let (coll, idx) = (collection.to_string(), index.clone());
        let declared = self.catalog_job(move |cat| {
            let cc = cat.collections.entry(coll).or_default();
            add_declared(&mut cc.composites, idx, "collection")
        });
        if let Err(e) = declared {
            // A catalog change is in memory from when its job ran, before the batch was logged
            // (`catalog_job`): a declaration whose batch the store refused (a full disk) is
            // visible already and the next catalog write persists it. Build it, then: the
            // build waits for space, and a retried declaration finds the index.
            let visible = self
                .inner
                .catalog
                .read()
                .expect("catalog lock")
                .collection(collection)
                .is_some_and(|cc| cc.composites.iter().any(|c| c.name == name));
            if visible && matches!(e, DbError::Storage(_)) {
                self.spawn_build(collection.to_string(), composite_index_name(name));
            }
            return Err(e);
        }
        self.spawn_build(collection.to_string(), composite_index_name(name));
        Ok(index)
    }

    pub fn drop_index(&self, collection: &str, name: &str) -> Result<(), DbError> {
        check_collection(collection)?;
        let (coll, n) = (collection.to_string(), name.to_string());
        self.catalog_job(move |cat| {
            let cc = cat
                .collections
                .get_mut(&coll)
                .ok_or_else(|| DbError::IndexNotFound(n.clone()))?;
            remove_declared(&mut cc.composites, n)
        })?;
        // Entries of a dropped index are garbage; remove them in the background. Only those
        // no index has (not a plain delete of the prefix): an index created again under the
        // same name meanwhile keeps its entries.
        let db = self.clone();
        let (coll, prefix) = (
            collection.to_string(),
            index_prefix(collection, &composite_index_name(name)),
        );
        std::thread::spawn(move || {
            if let Err(e) = db.drop_stale_entries(&coll, &prefix) {
                eprintln!("herald: removing a dropped index's entries on {coll} failed: {e}");
            }
        });
        Ok(())
    }

    /// Replaces the automatic-index exemptions of a collection. Newly exempt paths stop being
    /// used at once; paths no longer exempt are rebuilt in the background before use.
    pub fn set_exemptions(&self, collection: &str, exemptions: Vec<String>) -> Result<(), DbError> {
        check_collection(collection)?;
        for p in &exemptions {
            FieldPath::parse(p).map_err(|e| DbError::BadIndex(e.to_string()))?;
        }
        let coll = collection.to_string();
        let lifted = self.catalog_job(move |cat| {
            let cc = cat.collections.entry(coll).or_default();
            let new: std::collections::BTreeSet<String> = exemptions.into_iter().collect();
            let lifted: Vec<String> = cc.exemptions.difference(&new).cloned().collect();
            cc.building_fields.extend(lifted.iter().cloned());
            cc.exemptions = new;
            Ok(lifted)
        })?;
        for p in lifted {
            self.spawn_build(collection.to_string(), field_index_name(&p));
        }
        Ok(())
    }

    /// The composite indexes, exemptions and rebuilding automatic indexes of a collection.
    pub fn list_indexes(&self, collection: &str) -> Result<IndexListing, DbError> {
        check_collection(collection)?;
        let cat = self.inner.catalog.read().expect("catalog lock");
        let cc = cat.collection(collection).cloned().unwrap_or_default();
        Ok(IndexListing {
            collection: collection.to_string(),
            composite: cc.composites,
            exemptions: cc.exemptions.into_iter().collect(),
            building: cc.building_fields.into_iter().collect(),
        })
    }

    /// Runs a catalog change as a storage job. The change is applied to the in-memory catalog
    /// when the job runs, on the writer thread, and the whole catalog is persisted with it.
    ///
    /// Why not in a commit hook: a write in the same batch may mark a path multikey in memory
    /// (and persist the catalog) between this job and its hook, and a hook that installed a
    /// copy taken earlier would drop that mark, in memory and, through the write's persisted
    /// copy, the other way round on disk. Every catalog change happens on the writer thread in
    /// job order, so each persisted copy includes all earlier ones. (If the batch then fails to
    /// commit, memory is ahead of the file until the next catalog write persists it; the
    /// changes are all safe to see early.)
    pub(super) fn catalog_job<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Catalog) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, DbError> {
        let inner = Arc::clone(&self.inner);
        let ticket = self.inner.store.submit(move |txn: &mut WriteTxn<'_>| {
            if !inner.writable.load(std::sync::atomic::Ordering::Acquire) {
                // The change would be in memory before the log refused the batch.
                return Err(DbError::Storage(herald_storage::StorageError::Unavailable(
                    "this node is not the primary".into(),
                )));
            }
            let mut cat = inner.catalog.write().expect("catalog lock");
            let mut next = cat.clone();
            let out = change(&mut next)?;
            next.generation += 1;
            txn.put(
                Table::Meta,
                META_CATALOG.to_vec(),
                serde_json::to_vec(&next).expect("catalog JSON"),
            )?;
            *cat = next;
            Ok::<T, DbError>(out)
        })?;
        Ok(ticket.wait()?)
    }

    /// Fills an index for the documents that existed before it, in chunks, then marks it ready.
    ///
    /// On a full disk the build waits and starts again once the store takes writes (as a
    /// restart would resume it), so an index does not stay "building" after space returns.
    /// While it waits it holds only a weak handle: a database closed meanwhile ends it.
    pub(super) fn spawn_build(&self, collection: String, index: String) {
        let weak = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name(format!("herald-build-{index}"))
            .spawn(move || loop {
                let Some(inner) = weak.upgrade() else { return };
                let db = Db { inner };
                match db.build(&collection, &index) {
                    Ok(()) => return,
                    Err(e) if e.code() == "storage_full" => {
                        eprintln!(
                            "herald: building index {index} on {collection} waits for disk \
                             space: {e}"
                        );
                        drop(db);
                        std::thread::sleep(BUILD_FULL_RETRY);
                    }
                    Err(e) => {
                        eprintln!("herald: building index {index} on {collection} failed: {e}");
                        return;
                    }
                }
            })
            .expect("spawn index builder");
    }

    fn build(&self, collection: &str, index: &str) -> Result<(), DbError> {
        if let Some(group) = crate::layout::scope_group(collection) {
            return self.build_group(group, index);
        }
        // A field's build covers the indexes of the paths below it too (an exemption of `m`
        // also exempts `m.k`).
        let mut prefixes = vec![index_prefix(collection, index)];
        if index.starts_with("f:") {
            let mut below = prefixes[0].clone();
            below.pop();
            below.push(b'.');
            prefixes.push(below);
        }
        for prefix in &prefixes {
            self.drop_stale_entries(collection, prefix)?;
        }
        let mut cursor = collection_prefix(collection);
        // Paths along which the built entries met arrays or cut strings: recorded with the
        // index's completion, before the planner may use it (documents written meanwhile
        // record their own).
        let (mut multikey, mut truncated) = (BTreeSet::new(), BTreeSet::new());
        let (mut arrays, mut objects) = (BTreeSet::new(), BTreeSet::new());
        loop {
            let inner = Arc::clone(&self.inner);
            let (coll, pfx, start) = (collection.to_string(), prefixes.clone(), cursor.clone());
            let next = self
                .inner
                .store
                .submit_background(move |txn: &mut WriteTxn<'_>| {
                    let end = crate::layout::prefix_end(&collection_prefix(&coll));
                    let mut batch = Vec::new();
                    for entry in txn
                        .range(Table::Docs, start.as_slice()..end.as_slice())?
                        .take(BUILD_CHUNK_DOCS)
                    {
                        batch.push(entry?);
                    }
                    let cat = inner.catalog.read().expect("catalog lock").clone();
                    let mut cc = cat.collection(&coll).cloned().unwrap_or_default();
                    cc.building_fields.clear(); // compute entries as if the build were done
                    let mut paths = crate::indexer::Entries::default();
                    for (key, v) in &batch {
                        let (_, doc) = decode_doc(v)?;
                        let id = crate::layout::id_of_doc_key(key, &coll)?;
                        let e = entries(&coll, id, &doc, Some(&cc), cat.key_string_limit())?;
                        for k in e.keys {
                            if pfx.iter().any(|p| k.starts_with(p)) {
                                txn.put(Table::Index, k, index_value(id))?;
                            }
                        }
                        paths.array_paths.extend(e.array_paths);
                        paths.truncated_paths.extend(e.truncated_paths);
                        paths.array_nodes.extend(e.array_nodes);
                        paths.object_nodes.extend(e.object_nodes);
                    }
                    let next = batch.last().map(|(k, _)| {
                        let mut n = k.clone();
                        n.push(0);
                        n
                    });
                    Ok::<_, DbError>((next, paths))
                })?
                .wait()?;
            let (next, paths) = next;
            multikey.extend(paths.array_paths);
            truncated.extend(paths.truncated_paths);
            arrays.extend(paths.array_nodes);
            objects.extend(paths.object_nodes);
            match next {
                Some(n) => cursor = n,
                None => break,
            }
        }
        let (coll, idx) = (collection.to_string(), index.to_string());
        self.catalog_job(move |cat| {
            if let Some(cc) = cat.collections.get_mut(&coll) {
                cc.multikey.extend(multikey);
                cc.truncated.extend(truncated);
                cc.arrays.extend(arrays);
                cc.objects.extend(objects);
                if let Some(name) = idx.strip_prefix("c:") {
                    for c in cc.composites.iter_mut().filter(|c| c.name == name) {
                        c.state = IndexState::Ready;
                    }
                } else if let Some(path) = idx.strip_prefix("f:") {
                    cc.building_fields.remove(path);
                }
            }
            Ok(())
        })
    }

    /// Deletes the entries under `prefix` (one index, or the indexes below a path) that the
    /// documents they name would not have now. Entries written before a path was exempted
    /// stay behind while it is exempt (writes no longer list them, so no write deletes them);
    /// a rebuilt index must not keep them, or a document changed meanwhile is found under its
    /// old value too. Never deletes a current entry, so writes and other builds may run along.
    fn drop_stale_entries(&self, collection: &str, prefix: &[u8]) -> Result<(), DbError> {
        let coll = collection.to_string();
        self.sweep_index(prefix, move |txn, cat, batch| {
            let mut cc = cat.collection(&coll).cloned().unwrap_or_default();
            cc.building_fields.clear();
            for (key, value) in batch {
                let id = index_entry_id(key, value)?;
                let current = match txn.get(Table::Docs, &doc_key(&coll, id))? {
                    Some(raw) => {
                        let (_, doc) = decode_doc(&raw)?;
                        entries(&coll, id, &doc, Some(&cc), cat.key_string_limit())
                            .is_ok_and(|e| e.keys.contains(key))
                    }
                    None => false,
                };
                if !current {
                    txn.delete(Table::Index, key.clone());
                }
            }
            Ok(())
        })
    }

    /// Walks the index entries under `prefix` in background jobs of at most
    /// [`BUILD_CHUNK_DOCS`] entries each; `sweep` gets every chunk, with the catalog as of its
    /// job, and deletes what it finds stale. Shared by collection and collection-group indexes.
    pub(super) fn sweep_index<F>(&self, prefix: &[u8], sweep: F) -> Result<(), DbError>
    where
        F: Fn(&mut WriteTxn<'_>, &Catalog, &[(Vec<u8>, Vec<u8>)]) -> Result<(), DbError>
            + Send
            + Sync
            + 'static,
    {
        let end = crate::layout::prefix_end(prefix);
        let sweep = Arc::new(sweep);
        let mut cursor = prefix.to_vec();
        loop {
            let inner = Arc::clone(&self.inner);
            let sweep = Arc::clone(&sweep);
            let (start, end) = (cursor.clone(), end.clone());
            let next = self
                .inner
                .store
                .submit_background(move |txn: &mut WriteTxn<'_>| {
                    let mut batch = Vec::new();
                    for entry in txn
                        .range(Table::Index, start.as_slice()..end.as_slice())?
                        .take(BUILD_CHUNK_DOCS)
                    {
                        batch.push(entry?);
                    }
                    let cat = inner.catalog.read().expect("catalog lock").clone();
                    sweep(txn, &cat, &batch)?;
                    Ok::<_, DbError>(batch.last().map(|(k, _)| {
                        let mut n = k.clone();
                        n.push(0);
                        n
                    }))
                })?
                .wait()?;
            match next {
                Some(n) => cursor = n,
                None => return Ok(()),
            }
        }
    }

    /// Deletes every key of `table` under `prefix` in the background, in bounded chunks.
    pub(crate) fn spawn_delete_prefix(&self, table: Table, prefix: Vec<u8>) {
        let db = self.clone();
        std::thread::spawn(move || loop {
            let pfx = prefix.clone();
            let done = db
                .inner
                .store
                .submit_background(move |txn: &mut WriteTxn<'_>| {
                    let keys: Vec<Vec<u8>> = txn
                        .prefix(table, &pfx)?
                        .take(BUILD_CHUNK_DOCS)
                        .map(|e| e.map(|(k, _)| k))
                        .collect::<Result<_, _>>()?;
                    let done = keys.len() < BUILD_CHUNK_DOCS;
                    for k in keys {
                        txn.delete(table, k);
                    }
                    Ok::<_, DbError>(done)
                });
            match done.map(|t| t.wait()) {
                Ok(Ok(false)) => continue,
                _ => break,
            }
        });
    }
}

/// A collection's indexes as [`Db::list_indexes`] reports them; sets in their sorted order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexListing {
    pub collection: String,
    pub composite: Vec<CompositeIndex>,
    pub exemptions: Vec<String>,
    /// Field paths whose automatic index is being rebuilt after an exemption was lifted.
    pub building: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::STRING_KEY_BYTES_MAX;
    use crate::txn::Write;
    use crate::DbOptions;
    use herald_query::Query;
    use serde_json::{json, Value};

    /// A store from before strings were cut (commits, but no catalog) keeps whole strings in
    /// its index entries after an upgrade: its existing entries are found, new ones match them.
    #[test]
    fn a_store_from_before_cut_strings_keeps_them_whole() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(STRING_KEY_BYTES_MAX * 2);
        let put = |db: &Db, id: &str, s: String| {
            db.commit(vec![Write::Put {
                collection: "c".into(),
                id: id.into(),
                doc: json!({ "s": s }),
                if_version: None,
            }])
            .unwrap();
        };
        let db = Db::open(dir.path(), whole_limit_ignored()).unwrap();
        put(&db, "old", long.clone());
        // Make it look like a store written before the catalog recorded the limit.
        db.inner
            .store
            .submit(|txn: &mut WriteTxn<'_>| {
                txn.delete(Table::Meta, META_CATALOG.to_vec());
                Ok::<_, DbError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        db.close().unwrap();

        let db = Db::open(dir.path(), DbOptions::default()).unwrap();
        assert_eq!(
            db.inner.catalog.read().unwrap().key_string_limit(),
            usize::MAX
        );
        put(&db, "new", format!("{long}y"));
        let q = |filter: Value| {
            let out = db
                .query("c", &Query::parse(&json!({ "filter": filter })).unwrap())
                .unwrap();
            assert_eq!(out.explain.plan.kind(), "index", "{:?}", out.explain);
            out.docs
                .iter()
                .map(|d| d["_id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(q(json!({ "s": long })), ["old"]);
        assert_eq!(q(json!({ "s": {"$gt": long} })), ["new"]);
        db.close().unwrap();

        // A new store records the default limit and cuts.
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), DbOptions::default()).unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), whole_limit_ignored()).unwrap();
        assert_eq!(
            db.inner.catalog.read().unwrap().key_string_limit(),
            STRING_KEY_BYTES_MAX
        );
        db.close().unwrap();
    }

    /// Index entries store the length of the id their key ends with, not the id again, and
    /// give the id back.
    #[test]
    fn index_entries_hold_the_id_length_not_the_id() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), DbOptions::default()).unwrap();
        db.commit(vec![Write::Put {
            collection: "c".into(),
            id: "doc-1".into(),
            doc: json!({"_id": "doc-1", "a": 1, "t": ["x", "y"]}),
            if_version: None,
        }])
        .unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = db
            .inner
            .store
            .read()
            .unwrap()
            .prefix(Table::Index, &collection_prefix("c"))
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(entries.len(), 3, "a, and t's two elements");
        for (key, value) in &entries {
            assert_eq!(value, &index_value("doc-1"));
            assert_eq!(index_entry_id(key, value).unwrap(), "doc-1");
        }
        db.close().unwrap();
    }

    /// Removing a dropped index's entries never removes those of an index created again
    /// under the same name (a plain delete of the prefix, run late, emptied the new index).
    #[test]
    fn a_late_cleanup_of_a_dropped_index_keeps_a_new_one_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), DbOptions::default()).unwrap();
        let docs: Vec<Value> = (0..3)
            .map(|i| json!({"_id": format!("d{i}"), "a": i, "b": 2 - i}))
            .collect();
        db.commit(
            docs.iter()
                .map(|d| Write::Put {
                    collection: "c".into(),
                    id: d["_id"].as_str().unwrap().into(),
                    doc: d.clone(),
                    if_version: None,
                })
                .collect(),
        )
        .unwrap();
        let prefix = index_prefix("c", &composite_index_name("x"));
        let count = || {
            db.inner
                .store
                .read()
                .unwrap()
                .prefix(Table::Index, &prefix)
                .unwrap()
                .count()
        };
        let wait_for = |n: usize| {
            for _ in 0..500 {
                let composite = db.list_indexes("c").unwrap().composite;
                if count() == n && composite.iter().all(|c| c.state != IndexState::Building) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            panic!("{} entries, expected {n}", count());
        };
        let asc = |f: &str| (f.to_string(), Direction::Asc);
        db.create_index("c", "x", vec![asc("a"), asc("b")]).unwrap();
        wait_for(3);
        db.drop_index("c", "x").unwrap();
        wait_for(0);
        db.create_index("c", "x", vec![asc("b"), asc("a")]).unwrap();
        wait_for(3);
        // The dropped index's cleanup, had it run only now.
        db.drop_stale_entries("c", &prefix).unwrap();
        assert_eq!(count(), 3);
        let q = Query::parse(&json!({"filter": {"b": {"$gte": 0}, "a": {"$gte": 0}}})).unwrap();
        let out = db.query("c", &q).unwrap();
        assert_eq!(out.docs.len(), 3, "{:?}", out.explain);
        db.close().unwrap();
    }

    /// Options asking for whole strings (a new store takes them, an existing one ignores them).
    fn whole_limit_ignored() -> DbOptions {
        DbOptions {
            string_key_bytes_max: usize::MAX,
            ..DbOptions::default()
        }
    }
}
