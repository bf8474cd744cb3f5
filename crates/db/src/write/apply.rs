//! [`apply`]: a prepared transaction inside its storage job, as named steps. Per write: read the
//! before-image, check the preconditions, compute the after-image, let the guard see it,
//! replace the index entries, store the document. Per commit: persist catalog marks, take the
//! next seq, append the commit-log record and prune the log, queue trigger tasks, record the
//! client mutation id.
//!
//! Every step runs on the storage writer thread inside one job: an error from any step fails
//! the job, and the storage layer undoes all of its writes (the log-pruning hint, which lives
//! in memory, excepted: a step failing after the prune asks the next prune to rescan).

use super::{set_id, WriteSettings};
use crate::catalog::{Catalog, CollectionCatalog};
use crate::commitlog::{self, StoredImages};
use crate::error::DbError;
use crate::indexer::{entries, group_entries};
use crate::known::KnownDocs;
use crate::layout::{
    decode_doc, doc_key, encode_doc, group_suffix, index_value, META_CATALOG, META_SEQ,
};
use crate::mutations;
use crate::triggers::{enqueue, Registry};
use crate::txn::{Change, ChangeOp, CommitOutcome, Guard, Write, WriteEffect, WriteResult};
use herald_query::Filter;
use herald_storage::{Table, WriteTxn};
use herald_value::{check_document, Value};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::RwLock;

/// What the write path needs besides the writes.
pub(crate) struct ApplyCtx<'a> {
    pub catalog: &'a RwLock<Catalog>,
    pub settings: &'a WriteSettings,
    pub triggers: &'a Registry,
    /// Depth of the writer in a chain of triggers: 0 for a client, the task's depth for the
    /// writes of a trigger task. The tasks this commit fires get one more.
    pub depth: u32,
    pub now_ms: u64,
    /// The caller's checks (end users' security rules), if any.
    pub guard: Option<&'a dyn Guard>,
    /// The stored documents the writes replace, read by the caller before submitting.
    pub known: Option<&'a KnownDocs>,
    /// The client mutation id the commit is recorded under, if any.
    pub mutation_id: Option<&'a str>,
}

/// What the writes applied so far add up to.
struct Applied {
    results: Vec<WriteResult>,
    changes: Vec<Change>,
    /// Per change, the stored records (version ++ JSON) of its before- and after-image: the
    /// log record copies their JSON instead of serializing the documents again.
    images: Vec<StoredImages>,
    /// A path became multikey or truncated: the catalog is persisted with the commit.
    catalog_dirty: bool,
}

/// Runs a prepared transaction inside a storage job. The documents of puts and inserts are
/// moved out of `writes` (a trigger fan-out would otherwise copy every document it writes).
///
/// With a mutation id already recorded, nothing is applied and the original outcome returns
/// (`replayed`); otherwise the id is recorded with this commit's outcome.
pub(crate) fn apply(
    txn: &mut WriteTxn<'_>,
    writes: &mut [Write],
    encoded: &mut [Option<Vec<u8>>],
    ctx: &ApplyCtx<'_>,
) -> Result<CommitOutcome, DbError> {
    if let Some(id) = ctx.mutation_id {
        if let Some((seq, results)) = mutations::lookup(txn, id)? {
            return Ok(CommitOutcome::replayed(seq, results));
        }
    }
    let seq0 = txn.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
    let mut applied = Applied {
        results: Vec::with_capacity(writes.len()),
        changes: Vec::with_capacity(writes.len()),
        images: Vec::with_capacity(writes.len()),
        catalog_dirty: false,
    };
    for (index, w) in writes.iter_mut().enumerate() {
        let supplied = match w {
            Write::Put { doc, .. } | Write::Insert { doc, .. } => Some(std::mem::take(doc)),
            Write::Update { .. } | Write::Delete { .. } => None,
        };
        let prepared = encoded.get_mut(index).and_then(Option::take);
        apply_write(txn, index, w, supplied, prepared, ctx, &mut applied)?;
    }
    if applied.catalog_dirty {
        persist_catalog(txn, ctx.catalog)?;
    }
    let Applied {
        results,
        changes,
        images,
        ..
    } = applied;
    let mut outcome = CommitOutcome {
        seq: seq0,
        results,
        changes: Vec::new(),
        record_bytes: 0,
        tasks: Vec::new(),
        replayed: false,
    };
    if !changes.is_empty() {
        let seq = seq0 + 1;
        txn.put_u64(Table::Meta, META_SEQ.to_vec(), seq)?;
        outcome.seq = seq;
        outcome.record_bytes = log_commit(txn, seq, &changes, &images, ctx)?;
        outcome.tasks = queue_tasks(txn, seq, &changes, ctx)?;
        outcome.changes = changes;
    }
    record_mutation(txn, &outcome, ctx)?;
    Ok(outcome)
}

/// One write: its result, and its change when it changed anything.
fn apply_write(
    txn: &mut WriteTxn<'_>,
    index: usize,
    w: &Write,
    supplied: Option<Value>,
    prepared: Option<Vec<u8>>,
    ctx: &ApplyCtx<'_>,
    applied: &mut Applied,
) -> Result<(), DbError> {
    let (collection, id) = w.target();
    let key = doc_key(collection, id);
    let before = read_before(txn, &key, ctx.known)?;
    check_preconditions(index, w, &before, ctx.guard)?;
    let after = compute_after(w, supplied, &before, ctx)?;
    if let Some(g) = ctx.guard {
        g.after(&WriteEffect {
            index,
            collection,
            id,
            before: before.doc.as_ref(),
            after: after.as_ref(),
            before_version: before.version,
        })?;
    }
    if before.doc.is_none() && after.is_none() {
        // A delete of a missing document: nothing changes, nothing is logged.
        applied.results.push(WriteResult {
            collection: collection.to_string(),
            id: id.to_string(),
            op: None,
            version: 0,
            record: None,
        });
        return Ok(());
    }
    applied.catalog_dirty |= replace_index_entries(
        txn,
        ctx,
        index,
        collection,
        id,
        before.doc.as_ref(),
        after.as_ref(),
    )?;
    let (op, version) = match (&before.doc, &after) {
        (None, Some(_)) => (ChangeOp::Insert, 1),
        (Some(_), Some(_)) => (ChangeOp::Update, before.version + 1),
        _ => (ChangeOp::Delete, before.version),
    };
    let after_raw = store_after(txn, key, version, after.as_ref(), prepared)?;
    let record = match w {
        Write::Update { .. } => after_raw.clone(),
        _ => None,
    };
    applied.results.push(WriteResult {
        collection: collection.to_string(),
        id: id.to_string(),
        op: Some(op),
        version,
        record,
    });
    applied.changes.push(Change {
        collection: collection.to_string(),
        id: id.to_string(),
        op,
        version,
        before: before.doc,
        after,
    });
    applied.images.push((before.raw, after_raw));
    Ok(())
}

/// The stored document a write replaces.
struct Before {
    /// Its stored record (version ++ JSON), `None` when absent.
    raw: Option<Vec<u8>>,
    doc: Option<Value>,
    /// 0 when absent.
    version: u64,
}

/// Reads the before-image. Invariant: it is the document as committed before this job plus
/// the earlier writes of the batch and of this transaction. When the caller read it already
/// (`known`, at a read point), only what was committed since that point is looked at.
fn read_before(
    txn: &WriteTxn<'_>,
    key: &[u8],
    known: Option<&KnownDocs>,
) -> Result<Before, DbError> {
    let raw = match known.and_then(|k| Some((k, k.docs.get(key)?))) {
        Some((known, read)) => txn.get_read_at(Table::Docs, key, &known.at, read.as_deref())?,
        None => txn.get(Table::Docs, key)?,
    };
    let (version, doc) = match &raw {
        Some(bytes) => {
            let (v, d) = decode_doc(bytes)?;
            (v, Some(d))
        }
        None => (0, None),
    };
    Ok(Before { raw, doc, version })
}

/// Checks what must hold before the write is computed, in this order: the guard's `before`
/// (it decides on the exact stored document), the `ifVersion` precondition, and that an insert
/// finds no document. An error fails the transaction.
fn check_preconditions(
    index: usize,
    w: &Write,
    before: &Before,
    guard: Option<&dyn Guard>,
) -> Result<(), DbError> {
    let (collection, id) = w.target();
    if let Some(g) = guard {
        g.before(index, collection, id, before.doc.as_ref(), before.version)?;
    }
    if let Some(expected) = w.if_version() {
        if expected != before.version {
            return Err(DbError::VersionConflict {
                index,
                collection: collection.to_string(),
                id: id.to_string(),
                expected,
                actual: before.version,
            });
        }
    }
    if matches!(w, Write::Insert { .. }) && before.doc.is_some() {
        return Err(DbError::AlreadyExists {
            collection: collection.to_string(),
            id: id.to_string(),
        });
    }
    Ok(())
}

/// Computes the after-image (`None`: the document is deleted). A put or insert stores what it
/// supplied (checked by `prepare`); an update's result is checked against the document limits
/// here, as only now is it known.
fn compute_after(
    w: &Write,
    supplied: Option<Value>,
    before: &Before,
    ctx: &ApplyCtx<'_>,
) -> Result<Option<Value>, DbError> {
    let now_ms = ctx.now_ms as i64;
    match w {
        Write::Put { .. } | Write::Insert { .. } => Ok(supplied),
        Write::Update {
            collection,
            id,
            update,
            upsert,
            ..
        } => {
            let doc = match &before.doc {
                Some(old) => update.apply(old, now_ms)?,
                None if *upsert => {
                    let filter = Filter::parse(&json!({ "_id": id }))?;
                    let mut doc = update.upsert_document(&filter, now_ms)?;
                    set_id(&mut doc, id)?;
                    doc
                }
                None => {
                    return Err(DbError::NotFound {
                        collection: collection.clone(),
                        id: id.clone(),
                    })
                }
            };
            check_document(&doc, &ctx.settings.limits)?;
            Ok(Some(doc))
        }
        Write::Delete { .. } => Ok(None),
    }
}

/// Replaces the index entries of the before-image with those of the after-image: deletes the
/// entries only the before-image has, adds those only the after-image has, leaves the rest.
/// Paths newly met as arrays (multikey), array or object values, or with cut strings are marked in the in-memory catalog
/// at once; returns whether it changed, so the commit persists it.
fn replace_index_entries(
    txn: &mut WriteTxn<'_>,
    ctx: &ApplyCtx<'_>,
    index: usize,
    collection: &str,
    id: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<bool, DbError> {
    let cat = ctx.catalog.read().expect("catalog lock");
    let cc = cat.collection(collection);
    let limit = cat.key_string_limit();
    let old = match before {
        Some(d) => entries(collection, id, d, cc, limit)?.keys,
        None => Default::default(),
    };
    // Entries the caller computed are valid only for the catalog they were computed with.
    let computed = ctx
        .known
        .filter(|k| k.generation == cat.generation)
        .and_then(|k| k.entries.get(index)?.take());
    let mut new = match (after, computed) {
        (Some(_), Some(computed)) => computed,
        (Some(d), None) => entries(collection, id, d, cc, limit)?,
        (None, _) => Default::default(),
    };
    for k in old.difference(&new.keys) {
        txn.delete(Table::Index, k.clone());
    }
    // Collection-group indexes of the collection's group, in the same job.
    if let Some(groups) = cat.groups.get(crate::names::group_of(collection)) {
        let group_keys = |d: Option<&Value>| match d {
            Some(d) => group_entries(collection, id, d, groups, limit),
            None => Ok(Default::default()),
        };
        let old_g = group_keys(before)?.keys;
        let new_g = group_keys(after)?;
        for k in old_g.difference(&new_g.keys) {
            txn.delete(Table::Index, k.clone());
        }
        let value = index_value(&group_suffix(collection, id));
        for k in &new_g.keys {
            if !old_g.contains(k) {
                txn.put(Table::Index, k.clone(), value.clone())?;
            }
        }
        new.truncated_paths.extend(new_g.truncated_paths);
    }
    // The new keys move into the batch (no copy); keys both images have stay put.
    for k in std::mem::take(&mut new.keys) {
        if !old.contains(&k) {
            txn.put(Table::Index, k, index_value(id))?;
        }
    }
    let known = |set: fn(&CollectionCatalog) -> &BTreeSet<String>, p: &String| {
        cc.is_some_and(|c| set(c).contains(p))
    };
    let fresh_multikey: Vec<String> = new
        .array_paths
        .into_iter()
        .filter(|p| !known(|c| &c.multikey, p))
        .collect();
    let fresh_truncated: Vec<String> = new
        .truncated_paths
        .into_iter()
        .filter(|p| !known(|c| &c.truncated, p))
        .collect();
    let fresh_arrays: Vec<String> = new
        .array_nodes
        .into_iter()
        .filter(|p| !known(|c| &c.arrays, p))
        .collect();
    let fresh_objects: Vec<String> = new
        .object_nodes
        .into_iter()
        .filter(|p| !known(|c| &c.objects, p))
        .collect();
    drop(cat);
    if fresh_multikey.is_empty()
        && fresh_truncated.is_empty()
        && fresh_arrays.is_empty()
        && fresh_objects.is_empty()
    {
        return Ok(false);
    }
    // Marking a path early is harmless (it only disables index ordering), so the in-memory
    // catalog changes now and the persisted one with this commit.
    let mut cat = ctx.catalog.write().expect("catalog lock");
    let cc = cat.collections.entry(collection.to_string()).or_default();
    cc.multikey.extend(fresh_multikey);
    cc.truncated.extend(fresh_truncated);
    cc.arrays.extend(fresh_arrays);
    cc.objects.extend(fresh_objects);
    Ok(true)
}

/// Stores the after-image under `version` (or deletes the document) and returns its stored
/// record. A put or insert stores its document as supplied, so `prepare`'s record of it
/// (`prepared`) holds with the version written in; anything else is serialized here.
fn store_after(
    txn: &mut WriteTxn<'_>,
    key: Vec<u8>,
    version: u64,
    after: Option<&Value>,
    prepared: Option<Vec<u8>>,
) -> Result<Option<Vec<u8>>, DbError> {
    let Some(doc) = after else {
        txn.delete(Table::Docs, key);
        return Ok(None);
    };
    let record = match prepared {
        Some(mut record) => {
            record[..8].copy_from_slice(&version.to_be_bytes());
            record
        }
        None => encode_doc(version, doc),
    };
    txn.put(Table::Docs, key, record.clone())?;
    Ok(Some(record))
}

/// Persists the whole in-memory catalog with this commit (it holds this job's marks).
fn persist_catalog(txn: &mut WriteTxn<'_>, catalog: &RwLock<Catalog>) -> Result<(), DbError> {
    let json =
        serde_json::to_vec(&*catalog.read().expect("catalog lock")).expect("catalog serializes");
    txn.put(Table::Meta, META_CATALOG.to_vec(), json)?;
    Ok(())
}

/// Appends the commit's log record and prunes the log; returns the record's size. Invariant:
/// a commit that changed documents has exactly one record, under its seq.
fn log_commit(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    changes: &[Change],
    images: &[StoredImages],
    ctx: &ApplyCtx<'_>,
) -> Result<usize, DbError> {
    let bytes = commitlog::append(txn, seq, ctx.now_ms, changes, images)?;
    commitlog::prune(txn, seq, ctx.now_ms, &ctx.settings.log)?;
    Ok(bytes)
}

/// Queues one task per (change, matching trigger), in this commit's transaction, so a task
/// exists exactly when its write committed. Returns the trigger uid of each task.
fn queue_tasks(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    changes: &[Change],
    ctx: &ApplyCtx<'_>,
) -> Result<Vec<u64>, DbError> {
    // After the prune moved its hint, a failure must make the next prune look again.
    enqueue(txn, ctx.triggers, seq, changes, ctx.depth, ctx.now_ms)
        .inspect_err(|_| ctx.settings.log.hint.request_rescan())
}

/// Records the client mutation id with the commit's outcome, in the commit's transaction, so
/// "applied" and "remembered" are one fact.
fn record_mutation(
    txn: &mut WriteTxn<'_>,
    outcome: &CommitOutcome,
    ctx: &ApplyCtx<'_>,
) -> Result<(), DbError> {
    let Some(id) = ctx.mutation_id else {
        return Ok(());
    };
    let retention = &ctx.settings.mutations;
    mutations::record(
        txn,
        id,
        outcome.seq,
        &outcome.results,
        ctx.now_ms,
        retention,
    )
    .inspect_err(|_| ctx.settings.log.hint.request_rescan())
}
