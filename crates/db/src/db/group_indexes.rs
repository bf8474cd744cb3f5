//! Composite indexes of collection-group scope (`Db::create_group_index`): declared per group
//! name, kept by every write to a collection whose last segment is that name (`write/apply.rs`,
//! the same storage job as the write), and filled in the background for the documents that
//! existed before, collection by collection, in bounded chunks, then marked ready.

use super::collections::skip_scan;
use super::indexes::{add_declared, declared, remove_declared};
use super::{Db, BUILD_CHUNK_DOCS};
use crate::catalog::{CompositeIndex, IndexState};
use crate::error::DbError;
use crate::indexer::{group_entries, group_index_name};
use crate::layout::{
    collection_prefix, decode_doc, doc_key, group_scope, group_suffix, index_entry_id,
    index_prefix, index_value, prefix_end, split_group_suffix,
};
use crate::names::{check_group, group_of};
use herald_query::Direction;
use herald_storage::{Table, WriteTxn};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Collections one page of the build's skip-scan lists.
const BUILD_COLLECTIONS_PAGE: usize = 1024;

impl Db {
    /// Declares a composite index over every collection of `group` (existing and future); it
    /// is filled in the background and used by group queries once ready.
    pub fn create_group_index(
        &self,
        group: &str,
        name: &str,
        fields: Vec<(String, Direction)>,
    ) -> Result<CompositeIndex, DbError> {
        check_group(group)?;
        // One field is allowed here: a group has no automatic single-field index, and
        // `(ts desc)` alone serves "the newest N across the group".
        let index = declared(name, fields, 1, "a collection-group index")?;
        let (g, idx) = (group.to_string(), index.clone());
        self.catalog_job(move |cat| {
            add_declared(cat.groups.entry(g).or_default(), idx, "collection group")
        })?;
        self.spawn_build(group_scope(group), group_index_name(name));
        Ok(index)
    }

    /// Drops a group-scoped index; its entries are removed in the background.
    pub fn drop_group_index(&self, group: &str, name: &str) -> Result<(), DbError> {
        check_group(group)?;
        let (g, n) = (group.to_string(), name.to_string());
        self.catalog_job(move |cat| {
            let list = cat
                .groups
                .get_mut(&g)
                .ok_or_else(|| DbError::IndexNotFound(n.clone()))?;
            remove_declared(list, n)?;
            if list.is_empty() {
                cat.groups.remove(&g);
            }
            Ok(())
        })?;
        let db = self.clone();
        let (g, prefix) = (
            group.to_string(),
            index_prefix(&group_scope(group), &group_index_name(name)),
        );
        std::thread::spawn(move || {
            if let Err(e) = db.drop_stale_group_entries(&prefix) {
                eprintln!("herald: removing a dropped group index's entries on {g} failed: {e}");
            }
        });
        Ok(())
    }

    /// The group-scoped composite indexes of `group`.
    pub fn list_group_indexes(&self, group: &str) -> Result<Vec<CompositeIndex>, DbError> {
        check_group(group)?;
        let cat = self.inner.catalog.read().expect("catalog lock");
        Ok(cat.groups.get(group).cloned().unwrap_or_default())
    }

    /// Fills group index `index` (`g:name`) of `group` for the documents of every collection
    /// of the group, then marks it ready.
    pub(super) fn build_group(&self, group: &str, index: &str) -> Result<(), DbError> {
        let name = index.strip_prefix("g:").unwrap_or(index).to_string();
        let prefix = index_prefix(&group_scope(group), index);
        self.drop_stale_group_entries(&prefix)?;
        // Cut strings met, per collection: marked with the index's completion.
        let mut truncated: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let read = self.inner.store.read()?;
            let (names, _) = skip_scan(&read, after.as_deref(), BUILD_COLLECTIONS_PAGE)?;
            drop(read);
            let Some(last) = names.last().cloned() else {
                break;
            };
            for coll in names.into_iter().filter(|c| group_of(c) == group) {
                let cut = self.build_group_collection(&coll, group, &name, &prefix)?;
                if !cut.is_empty() {
                    truncated.entry(coll).or_default().extend(cut);
                }
            }
            after = Some(last);
        }
        let g = group.to_string();
        self.catalog_job(move |cat| {
            for (coll, paths) in truncated {
                cat.collections
                    .entry(coll)
                    .or_default()
                    .truncated
                    .extend(paths);
            }
            if let Some(list) = cat.groups.get_mut(&g) {
                for c in list.iter_mut().filter(|c| c.name == name) {
                    c.state = IndexState::Ready;
                }
            }
            Ok(())
        })
    }

    /// Writes the entries of one collection's documents into one group index, in chunks;
    /// returns the paths where a string was cut.
    fn build_group_collection(
        &self,
        coll: &str,
        group: &str,
        name: &str,
        prefix: &[u8],
    ) -> Result<BTreeSet<String>, DbError> {
        let mut cursor = collection_prefix(coll);
        let mut cut = BTreeSet::new();
        loop {
            let inner = Arc::clone(&self.inner);
            let (coll, g, n, pfx, start) = (
                coll.to_string(),
                group.to_string(),
                name.to_string(),
                prefix.to_vec(),
                cursor.clone(),
            );
            let (next, paths) = self
                .inner
                .store
                .submit_background(move |txn: &mut WriteTxn<'_>| {
                    let end = prefix_end(&collection_prefix(&coll));
                    let mut batch = Vec::new();
                    for entry in txn
                        .range(Table::Docs, start.as_slice()..end.as_slice())?
                        .take(BUILD_CHUNK_DOCS)
                    {
                        batch.push(entry?);
                    }
                    let cat = inner.catalog.read().expect("catalog lock").clone();
                    let Some(ci) = cat
                        .groups
                        .get(&g)
                        .and_then(|l| l.iter().find(|c| c.name == n))
                    else {
                        return Ok::<_, DbError>((None, BTreeSet::new())); // dropped meanwhile
                    };
                    let mut paths = BTreeSet::new();
                    for (key, v) in &batch {
                        let (_, doc) = decode_doc(v)?;
                        let id = crate::layout::id_of_doc_key(key, &coll)?;
                        let e = group_entries(
                            &coll,
                            id,
                            &doc,
                            std::slice::from_ref(ci),
                            cat.key_string_limit(),
                        )?;
                        let value = index_value(&group_suffix(&coll, id));
                        for k in e.keys.into_iter().filter(|k| k.starts_with(&pfx)) {
                            txn.put(Table::Index, k, value.clone())?;
                        }
                        paths.extend(e.truncated_paths);
                    }
                    let next = batch.last().map(|(k, _)| {
                        let mut n = k.clone();
                        n.push(0);
                        n
                    });
                    Ok((next, paths))
                })?
                .wait()?;
            cut.extend(paths);
            match next {
                Some(n) => cursor = n,
                None => return Ok(cut),
            }
        }
    }

    /// Deletes the entries under a group index's `prefix` that the documents they name would
    /// not have now (all of them once the index is dropped).
    fn drop_stale_group_entries(&self, prefix: &[u8]) -> Result<(), DbError> {
        self.sweep_index(prefix, |txn, cat, batch| {
            for (key, value) in batch {
                let suffix = index_entry_id(key, value)?;
                let (coll, id) = split_group_suffix(suffix)?;
                let groups = cat.groups.get(group_of(coll));
                let current = match (txn.get(Table::Docs, &doc_key(coll, id))?, groups) {
                    (Some(raw), Some(groups)) => {
                        let (_, doc) = decode_doc(&raw)?;
                        group_entries(coll, id, &doc, groups, cat.key_string_limit())
                            .is_ok_and(|e| e.keys.contains(key))
                    }
                    _ => false,
                };
                if !current {
                    txn.delete(Table::Index, key.clone());
                }
            }
            Ok(())
        })
    }
}
