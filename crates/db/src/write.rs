//! The write path: a transaction of document writes applied inside one storage job.
//!
//! Checks that do not need the stored state (paths, document shape and limits, `_id`) run on the
//! caller's thread before the job is queued; the job reads the current documents, checks
//! `ifVersion` preconditions, computes the new documents, replaces their index entries, assigns
//! the next commit `seq` and appends the commit record. If anything fails the job returns an
//! error and the storage layer discards all of its writes: a transaction applies entirely or not
//! at all, and a failed transaction consumes no `seq`.

use crate::catalog::{Catalog, CollectionCatalog};
use crate::error::DbError;
use crate::indexer::entries;
use crate::layout::{
    decode_doc, doc_key, encode_doc, index_value, log_key, META_CATALOG, META_SEQ,
};
use crate::names::{check_collection, check_segment, generate_id};
use crate::triggers::{enqueue, Registry};
use herald_query::{Filter, Update};
use herald_storage::{Table, WriteTxn};
use herald_value::{check_document, DocumentLimits, Value};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::RwLock;

/// Most writes in one transaction.
pub const COMMIT_WRITES_MAX: usize = 500;
/// Most commit-log records deleted by one commit when pruning (keeps commits short).
pub const LOG_PRUNE_PER_COMMIT_MAX: usize = 64;

/// Once in this many commits the log pruning scans from the log's start (see `prune_log`).
/// Rare: such a scan passes every record deleted since the last checkpoint in every in-memory
/// layer, which took ~45% of the writer's time at 4,096 (a fan-out past a million commits).
pub const LOG_PRUNE_RESCAN_EVERY: u64 = 1 << 20;

/// One write of a transaction.
#[derive(Debug, Clone)]
pub enum Write {
    /// Create or replace the document.
    Put {
        collection: String,
        id: String,
        doc: Value,
        if_version: Option<u64>,
    },
    /// Create the document; fails if it exists. Without an id, one is generated.
    Insert {
        collection: String,
        id: Option<String>,
        doc: Value,
    },
    /// Apply update operators (or a replacement); with `upsert`, create it when missing.
    Update {
        collection: String,
        id: String,
        update: Update,
        upsert: bool,
        if_version: Option<u64>,
    },
    Delete {
        collection: String,
        id: String,
        if_version: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
}

impl ChangeOp {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "insert",
            ChangeOp::Update => "update",
            ChangeOp::Delete => "delete",
        }
    }
}

/// What one write did. `op` is `None` for a delete of a missing document.
#[derive(Debug, Clone)]
pub struct WriteResult {
    pub collection: String,
    pub id: String,
    pub op: Option<ChangeOp>,
    /// The version after the write (for deletes: the version that was deleted; 0 if none).
    pub version: u64,
    /// The stored record (version ++ JSON) of the document after an update, read with
    /// [`WriteResult::doc`]; `None` after a put, an insert or a delete, whose caller already has
    /// what it wrote. Bytes, not a `Value`: copying them is one allocation on the writer, where
    /// a copied document tree cost one per field and string (~4% of the writer's time in a
    /// burst of small upserts), for a document only `PATCH` answers with.
    pub record: Option<Vec<u8>>,
}

impl WriteResult {
    /// The document after an update (see [`WriteResult::record`]).
    pub fn doc(&self) -> Option<Value> {
        let (_, doc) = decode_doc(self.record.as_deref()?).ok()?;
        Some(doc)
    }
}

/// One committed change to one document, as the commit log records it.
#[derive(Debug, Clone)]
pub struct Change {
    pub collection: String,
    pub id: String,
    pub op: ChangeOp,
    pub version: u64,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct CommitOutcome {
    /// The commit's seq; for a transaction that changed nothing, the seq it observed.
    pub seq: u64,
    pub results: Vec<WriteResult>,
    /// What the commit changed, for the live-query feed. The commit hook moves them there, so
    /// the outcome a submitter receives has none.
    pub changes: Vec<Change>,
    /// Size of the commit record in bytes (0 when nothing changed): what the commit costs to
    /// hold in memory, for bounding the live-query feed.
    pub record_bytes: usize,
    /// The trigger uid of each task this commit enqueued.
    pub tasks: Vec<u64>,
    /// True when the commit's mutation id was already known: nothing was applied, and `seq` and
    /// `results` (without documents) are those of the original commit.
    pub replayed: bool,
}

impl CommitOutcome {
    pub(crate) fn replayed(seq: u64, results: Vec<WriteResult>) -> CommitOutcome {
        CommitOutcome {
            seq,
            results,
            changes: Vec::new(),
            record_bytes: 0,
            tasks: Vec::new(),
            replayed: true,
        }
    }
}

/// What one write of a transaction did, for a [`Guard`]: the document before and after it
/// (`None`: absent), as computed inside the storage job.
#[derive(Debug, Clone, Copy)]
pub struct WriteEffect<'a> {
    /// The write's position in the transaction.
    pub index: usize,
    pub collection: &'a str,
    pub id: &'a str,
    pub before: Option<&'a Value>,
    pub after: Option<&'a Value>,
    /// The version of `before` (0 when absent).
    pub before_version: u64,
}

/// Checks each write of a transaction inside its storage job, in order: `before` when the
/// stored document a write replaces has been read (before anything else about the write is
/// checked or computed), `after` once its new document is computed. An error fails the whole
/// transaction. Runs on the storage writer thread, so it must be quick and not block.
pub trait Guard: Send + Sync {
    fn before(
        &self,
        index: usize,
        collection: &str,
        id: &str,
        before: Option<&Value>,
        before_version: u64,
    ) -> Result<(), DbError>;
    fn after(&self, effect: &WriteEffect<'_>) -> Result<(), DbError>;
}

/// A shared [`Guard`].
pub type WriteGuard = std::sync::Arc<dyn Guard>;

/// Settings the job needs.
#[derive(Debug, Clone)]
pub struct WriteSettings {
    pub limits: DocumentLimits,
    pub log_retention_count: u64,
    pub log_retention_age_ms: u64,
    pub mutations: crate::mutations::MutationRetention,
    /// Where `prune_log` starts looking. Only the writer thread uses it.
    pub log_prune: std::sync::Arc<LogPruneHint>,
}

/// What the last `prune_log` learned about the oldest retained commit-log record.
#[derive(Debug)]
pub struct LogPruneHint {
    /// The seq at which the next prune starts: the oldest record it last saw kept, or one past
    /// the last it deleted.
    from: std::sync::atomic::AtomicU64,
    /// A commit time no later than that of the record at `from` (and so, commit times never
    /// going back, of every later record) when the last prune stopped at it because it was
    /// kept, else `u64::MAX`. While that time is within the retention age, no record from
    /// `from` on is too old, so a commit can skip the scan and the prune need not read the
    /// record it stops at. (Should the clock go back, a record is kept longer, never pruned
    /// early.)
    kept_ts: std::sync::atomic::AtomicU64,
    /// Set when a job failed after its prune moved the hint (its deletes were undone, so
    /// records below `from` may remain): the next prune scans from the log's start.
    rescan: std::sync::atomic::AtomicBool,
}

impl Default for LogPruneHint {
    fn default() -> LogPruneHint {
        LogPruneHint {
            from: 0.into(),
            kept_ts: u64::MAX.into(),
            rescan: false.into(),
        }
    }
}

impl LogPruneHint {
    /// Makes the next prune scan from the log's start: for a job that fails after
    /// [`apply`] pruned (its undone deletes may leave records below the hint).
    pub(crate) fn request_rescan(&self) {
        self.rescan
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Moves the hint past records without deleting them, as a job that pruned and then
    /// failed leaves it.
    #[cfg(test)]
    pub(crate) fn skip_ahead(&self, n: u64) {
        self.from.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        self.kept_ts
            .store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Per write, the stored record of a put or inserted document (`encode_doc` with version 0;
/// [`apply`] writes the version in): serialized by [`prepare`] on the caller's thread, so the
/// one storage writer does not (it was ~9% of its time during HTTP inserts). `None` for
/// updates and deletes, whose documents only the writer knows.
pub type Encoded = Vec<Option<Vec<u8>>>;

/// Validates what can be validated without the store, fills in generated ids and `_id`, and
/// serializes put and inserted documents ([`Encoded`]).
/// `writes_max` is [`COMMIT_WRITES_MAX`] for clients and `TASK_WRITES_MAX` for trigger tasks.
pub fn prepare(
    writes: &mut [Write],
    limits: &DocumentLimits,
    writes_max: usize,
) -> Result<Encoded, DbError> {
    if writes.is_empty() {
        return Err(DbError::BadRequest(
            "a commit needs at least one write".into(),
        ));
    }
    if writes.len() > writes_max {
        return Err(DbError::LimitExceeded(format!(
            "a commit may hold at most {writes_max} writes"
        )));
    }
    for w in writes.iter_mut() {
        match w {
            Write::Put {
                collection,
                id,
                doc,
                ..
            } => {
                check_collection(collection)?;
                check_segment(id, "document id")?;
                set_id(doc, id)?;
                check_document(doc, limits)?;
            }
            Write::Insert {
                collection,
                id,
                doc,
            } => {
                check_collection(collection)?;
                let chosen = match (id.take(), doc.get("_id")) {
                    (Some(i), _) => i,
                    (None, Some(Value::String(s))) => s.clone(),
                    (None, Some(other)) => {
                        return Err(DbError::BadRequest(format!(
                            "_id must be a string, got {other}"
                        )));
                    }
                    (None, None) => generate_id(),
                };
                check_segment(&chosen, "document id")?;
                set_id(doc, &chosen)?;
                check_document(doc, limits)?;
                *id = Some(chosen);
            }
            Write::Update { collection, id, .. } | Write::Delete { collection, id, .. } => {
                check_collection(collection)?;
                check_segment(id, "document id")?;
            }
        }
    }
    Ok(writes
        .iter()
        .map(|w| match w {
            Write::Put { doc, .. } | Write::Insert { doc, .. } => Some(encode_doc(0, doc)),
            Write::Update { .. } | Write::Delete { .. } => None,
        })
        .collect())
}

/// Puts `_id` first in the document; an `_id` that contradicts `id` is an error.
fn set_id(doc: &mut Value, id: &str) -> Result<(), DbError> {
    let Value::Object(m) = doc else {
        return Err(DbError::BadDocument(
            herald_value::DocumentError::NotAnObject,
        ));
    };
    match m.get("_id") {
        Some(Value::String(s)) if s == id => {}
        Some(other) => {
            return Err(DbError::IdMismatch {
                path: id.to_string(),
                body: other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string()),
            })
        }
        None => {}
    }
    if m.keys().next().map(String::as_str) != Some("_id") {
        // Moves an existing `_id` (equal to `id`, checked above) or inserts one, first.
        m.shift_insert(0, "_id".into(), Value::String(id.to_string()));
    }
    Ok(())
}

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
    pub known: Option<&'a crate::known::KnownDocs>,
}

/// Runs a prepared transaction inside a storage job. The documents of puts and inserts are
/// moved out of `writes` (copying them cost ~10% of the writer's time in a trigger fan-out).
pub(crate) fn apply(
    txn: &mut WriteTxn<'_>,
    writes: &mut [Write],
    encoded: &mut [Option<Vec<u8>>],
    ctx: &ApplyCtx<'_>,
) -> Result<CommitOutcome, DbError> {
    let (catalog, settings, now_ms) = (ctx.catalog, ctx.settings, ctx.now_ms);
    let seq0 = txn.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
    let mut results = Vec::with_capacity(writes.len());
    let mut changes = Vec::with_capacity(writes.len());
    // Per change, the stored records (version ++ JSON) of its before- and after-image: the log
    // record copies their JSON instead of serializing the documents again.
    let mut images = Vec::with_capacity(writes.len());
    let mut catalog_dirty = false;
    for (index, w) in writes.iter_mut().enumerate() {
        let mut supplied = match w {
            Write::Put { doc, .. } | Write::Insert { doc, .. } => Some(std::mem::take(doc)),
            Write::Update { .. } | Write::Delete { .. } => None,
        };
        let w = &*w;
        let (collection, id, if_version) = match w {
            Write::Put {
                collection,
                id,
                if_version,
                ..
            }
            | Write::Update {
                collection,
                id,
                if_version,
                ..
            }
            | Write::Delete {
                collection,
                id,
                if_version,
                ..
            } => (collection, id.as_str(), *if_version),
            Write::Insert { collection, id, .. } => {
                (collection, id.as_deref().expect("prepared"), None)
            }
        };
        let key = doc_key(collection, id);
        let current_raw = match ctx.known.and_then(|k| Some((k, k.docs.get(&key)?))) {
            Some((known, read)) => {
                txn.get_read_at(Table::Docs, &key, &known.at, read.as_deref())?
            }
            None => txn.get(Table::Docs, &key)?,
        };
        let current = match &current_raw {
            Some(bytes) => Some(decode_doc(bytes)?),
            None => None,
        };
        let actual = current.as_ref().map_or(0, |(v, _)| *v);
        if let Some(g) = ctx.guard {
            g.before(
                index,
                collection,
                id,
                current.as_ref().map(|(_, d)| d),
                actual,
            )?;
        }
        if let Some(expected) = if_version {
            if expected != actual {
                return Err(DbError::VersionConflict {
                    index,
                    collection: collection.clone(),
                    id: id.to_string(),
                    expected,
                    actual,
                });
            }
        }
        let new_doc: Option<Value> = match w {
            Write::Put { .. } => supplied.take(),
            Write::Insert { .. } => {
                if current.is_some() {
                    return Err(DbError::AlreadyExists {
                        collection: collection.clone(),
                        id: id.to_string(),
                    });
                }
                supplied.take()
            }
            Write::Update { update, upsert, .. } => {
                let doc = match &current {
                    Some((_, old)) => update.apply(old, now_ms as i64)?,
                    None if *upsert => {
                        let filter = Filter::parse(&json!({ "_id": id }))?;
                        let mut doc = update.upsert_document(&filter, now_ms as i64)?;
                        set_id(&mut doc, id)?;
                        doc
                    }
                    None => {
                        return Err(DbError::NotFound {
                            collection: collection.clone(),
                            id: id.to_string(),
                        })
                    }
                };
                check_document(&doc, &settings.limits)?;
                Some(doc)
            }
            Write::Delete { .. } => None,
        };
        let before = current.map(|(_, d)| d);
        if let Some(g) = ctx.guard {
            g.after(&WriteEffect {
                index,
                collection,
                id,
                before: before.as_ref(),
                after: new_doc.as_ref(),
                before_version: actual,
            })?;
        }
        if before.is_none() && new_doc.is_none() {
            results.push(WriteResult {
                collection: collection.clone(),
                id: id.to_string(),
                op: None,
                version: 0,
                record: None,
            });
            continue;
        }
        // Replace the index entries of the before-image with those of the after-image.
        {
            let cat = catalog.read().expect("catalog lock");
            let cc = cat.collection(collection);
            let limit = cat.key_string_limit();
            let old = match &before {
                Some(d) => entries(collection, id, d, cc, limit)?.keys,
                None => Default::default(),
            };
            let computed = ctx
                .known
                .filter(|k| k.generation == cat.generation)
                .and_then(|k| k.entries.get(index)?.take());
            let mut new = match (&new_doc, computed) {
                (Some(_), Some(computed)) => computed,
                (Some(d), None) => entries(collection, id, d, cc, limit)?,
                (None, _) => Default::default(),
            };
            for k in old.difference(&new.keys) {
                txn.delete(Table::Index, k.clone());
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
            drop(cat);
            if !fresh_multikey.is_empty() || !fresh_truncated.is_empty() {
                // Marking a path multikey or truncated early is harmless (it only disables
                // index ordering), so the in-memory catalog changes now and the persisted one
                // with this commit.
                let mut cat = catalog.write().expect("catalog lock");
                let cc = cat.collections.entry(collection.clone()).or_default();
                cc.multikey.extend(fresh_multikey);
                cc.truncated.extend(fresh_truncated);
                catalog_dirty = true;
            }
        }
        let (op, version) = match (&before, &new_doc) {
            (None, Some(_)) => (ChangeOp::Insert, 1),
            (Some(_), Some(_)) => (ChangeOp::Update, actual + 1),
            _ => (ChangeOp::Delete, actual),
        };
        let after_raw = match &new_doc {
            Some(d) => {
                // A put or insert stores its document as supplied, so `prepare`'s record of it
                // holds; anything else is serialized here.
                let prepared = match w {
                    Write::Put { .. } | Write::Insert { .. } => {
                        encoded.get_mut(index).and_then(Option::take)
                    }
                    Write::Update { .. } | Write::Delete { .. } => None,
                };
                let encoded = match prepared {
                    Some(mut record) => {
                        record[..8].copy_from_slice(&version.to_be_bytes());
                        record
                    }
                    None => encode_doc(version, d),
                };
                txn.put(Table::Docs, key, encoded.clone())?;
                Some(encoded)
            }
            None => {
                txn.delete(Table::Docs, key);
                None
            }
        };
        let record = match w {
            Write::Update { .. } => after_raw.clone(),
            _ => None,
        };
        images.push((current_raw, after_raw));
        results.push(WriteResult {
            collection: collection.clone(),
            id: id.to_string(),
            op: Some(op),
            version,
            record,
        });
        changes.push(Change {
            collection: collection.clone(),
            id: id.to_string(),
            op,
            version,
            before,
            after: new_doc,
        });
    }
    if catalog_dirty {
        let json = serde_json::to_vec(&*catalog.read().expect("catalog lock"))
            .expect("catalog serializes");
        txn.put(Table::Meta, META_CATALOG.to_vec(), json)?;
    }
    if changes.is_empty() {
        return Ok(CommitOutcome {
            seq: seq0,
            results,
            changes,
            record_bytes: 0,
            tasks: Vec::new(),
            replayed: false,
        });
    }
    let seq = seq0 + 1;
    txn.put_u64(Table::Meta, META_SEQ.to_vec(), seq)?;
    let record = encode_log_record_from_stored(seq, now_ms, &changes, &images);
    let record_bytes = record.len();
    txn.put(Table::Log, log_key(seq).to_vec(), record)?;
    prune_log(txn, seq, now_ms, settings)?;
    let tasks = enqueue(txn, ctx.triggers, seq, &changes, ctx.depth, now_ms)
        .inspect_err(|_| settings.log_prune.request_rescan())?;
    Ok(CommitOutcome {
        seq,
        results,
        changes,
        record_bytes,
        tasks,
        replayed: false,
    })
}

/// The reference encoding of the log record (serde, from the documents; test only): the
/// writer's `encode_log_record_from_stored` must match it byte for byte.
#[cfg(test)]
#[derive(serde::Serialize)]
struct LoggedChange<'a> {
    collection: &'a str,
    id: &'a str,
    op: &'static str,
    version: u64,
    before: &'a Option<Value>,
    after: &'a Option<Value>,
}

#[cfg(test)]
#[derive(serde::Serialize)]
struct LogRecord<'a> {
    seq: u64,
    ts: u64,
    changes: Vec<LoggedChange<'a>>,
}

/// `ts (u64 BE)` then the JSON record `{"seq","ts","changes":[...]}`.
#[cfg(test)]
fn encode_log_record(seq: u64, ts: u64, changes: &[Change]) -> Vec<u8> {
    let changes = changes
        .iter()
        .map(|c| LoggedChange {
            collection: &c.collection,
            id: &c.id,
            op: c.op.as_str(),
            version: c.version,
            before: &c.before,
            after: &c.after,
        })
        .collect();
    let mut out = ts.to_be_bytes().to_vec();
    serde_json::to_writer(&mut out, &LogRecord { seq, ts, changes }).expect("JSON");
    out
}

/// The stored records of a change's before- and after-image (`encode_doc`: version ++ JSON).
type StoredImages = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What [`encode_log_record`] writes, with each image's JSON copied from its stored record
/// (which `encode_doc` serialized from the same `Value`, so the bytes are the same).
fn encode_log_record_from_stored(
    seq: u64,
    ts: u64,
    changes: &[Change],
    images: &[StoredImages],
) -> Vec<u8> {
    use std::io::Write as _;
    let image_bytes: usize = images
        .iter()
        .map(|(b, a)| b.as_ref().map_or(0, Vec::len) + a.as_ref().map_or(0, Vec::len))
        .sum();
    let mut out = Vec::with_capacity(64 + image_bytes + 96 * changes.len());
    out.extend_from_slice(&ts.to_be_bytes());
    let image = |out: &mut Vec<u8>, stored: &Option<Vec<u8>>| match stored {
        Some(record) => out.extend_from_slice(&record[8..]),
        None => out.extend_from_slice(b"null"),
    };
    write!(out, "{{\"seq\":{seq},\"ts\":{ts},\"changes\":[").expect("Vec");
    for (i, (c, (before, after))) in changes.iter().zip(images).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"collection\":");
        serde_json::to_writer(&mut out, &c.collection).expect("JSON");
        out.extend_from_slice(b",\"id\":");
        serde_json::to_writer(&mut out, &c.id).expect("JSON");
        write!(
            out,
            ",\"op\":\"{}\",\"version\":{},\"before\":",
            c.op.as_str(),
            c.version
        )
        .expect("Vec");
        image(&mut out, before);
        out.extend_from_slice(b",\"after\":");
        image(&mut out, after);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

/// Deletes log records beyond the retention count or age, a bounded number per commit.
///
/// It starts at `log_prune.from`, not at the log's first key: a scan from the start passes every
/// record deleted since the last checkpoint (deletes stay in the in-memory layers until then),
/// and once the log reached its retention count that made every commit slower as the writer
/// fell behind (RockBench at 4,000 events/s fell to 2,000/s after a million commits). A hint
/// advanced by a commit that then failed could leave records behind, so after such a failure
/// (`LogPruneHint::request_rescan`), while there is no hint yet, and once every
/// `LOG_PRUNE_RESCAN_EVERY` commits (for a job that panicked) the scan starts at the beginning.
///
/// With a hint, no range is scanned at all: records are keyed by their seq, one per commit, so
/// those at least the retention count old are deleted by key without being read, and the first
/// one younger than that is read by key only to check its age. (A range scan merges every
/// in-memory layer; once past the retention count it ran on every commit and cost ~150-200 us
/// each with a few hundred layers, most of a small commit's time on the writer.)
fn prune_log(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    now_ms: u64,
    s: &WriteSettings,
) -> Result<(), DbError> {
    use std::sync::atomic::Ordering::Relaxed;
    let prunable = |old_seq: u64, ts: u64| {
        seq - old_seq >= s.log_retention_count || now_ms.saturating_sub(ts) > s.log_retention_age_ms
    };
    let rescan =
        s.log_prune.rescan.swap(false, Relaxed) || seq.is_multiple_of(LOG_PRUNE_RESCAN_EVERY);
    let from = s.log_prune.from.load(Relaxed).min(seq);
    if rescan || from == 0 {
        return prune_log_scan(txn, seq, s, prunable);
    }
    // The record the last prune kept is still kept: nothing after it can go either.
    let kept_ts = s.log_prune.kept_ts.load(Relaxed);
    if kept_ts != u64::MAX && from < seq && !prunable(from, kept_ts) {
        return Ok(());
    }
    let mut next = from;
    let mut next_kept_ts = u64::MAX;
    let mut deleted = 0;
    while next < seq && deleted < LOG_PRUNE_PER_COMMIT_MAX {
        if seq - next < s.log_retention_count {
            // Within the count: kept unless too old. Once the log holds its retention count,
            // every commit deletes the oldest record and stops at the next one: it is not read
            // (at 20,000 commits/s that read was ~7% of a core) while `kept_ts`, a lower bound
            // of its commit time, says it is young enough.
            if kept_ts != u64::MAX && !prunable(next, kept_ts) {
                next_kept_ts = kept_ts;
                break;
            }
            let key = log_key(next);
            // No record under this seq (the hint was behind): nothing to delete.
            if let Some(v) = txn.get(Table::Log, &key)? {
                let ts = record_ts(&v);
                if !prunable(next, ts) {
                    next_kept_ts = ts;
                    break;
                }
                txn.delete(Table::Log, key.to_vec());
            }
        } else {
            txn.delete(Table::Log, log_key(next).to_vec());
        }
        next += 1;
        deleted += 1;
    }
    s.log_prune.from.store(next, Relaxed);
    s.log_prune.kept_ts.store(next_kept_ts, Relaxed);
    Ok(())
}

/// The commit time at the start of a stored log record (0 if it is too short to hold one).
fn record_ts(v: &[u8]) -> u64 {
    v.get(..8)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// [`prune_log`] from the log's first key, reading every record it passes: finds where the log
/// really starts, whatever the hint says.
fn prune_log_scan(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    s: &WriteSettings,
    prunable: impl Fn(u64, u64) -> bool,
) -> Result<(), DbError> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut doomed = Vec::new();
    let mut next_from = None;
    let mut next_kept_ts = u64::MAX;
    for entry in txn.range(Table::Log, log_key(0).to_vec()..log_key(seq).to_vec())? {
        let (k, v) = entry?;
        let old_seq = u64::from_be_bytes(
            k.as_slice()
                .try_into()
                .map_err(|_| DbError::Corrupt("log key".into()))?,
        );
        let ts = record_ts(&v);
        let keep = !prunable(old_seq, ts);
        if keep || doomed.len() >= LOG_PRUNE_PER_COMMIT_MAX {
            next_from = Some(old_seq);
            if keep {
                next_kept_ts = ts;
            }
            break;
        }
        next_from = Some(old_seq + 1);
        doomed.push(k);
    }
    for k in doomed {
        txn.delete(Table::Log, k);
    }
    if let Some(next) = next_from {
        s.log_prune.from.store(next, Relaxed);
    }
    s.log_prune.kept_ts.store(next_kept_ts, Relaxed);
    Ok(())
}

#[cfg(test)]
mod log_record_tests {
    use super::*;

    /// The borrowed encoding writes exactly what the `json!` form did (the commit log's format
    /// is on disk, so it must not change).
    #[test]
    fn log_record_format_is_unchanged() {
        let changes = vec![
            Change {
                collection: "c".into(),
                id: "a".into(),
                op: ChangeOp::Update,
                version: 2,
                before: Some(json!({"_id": "a", "n": 1, "z": [1, {"b": null}]})),
                after: Some(json!({"_id": "a", "n": 2})),
            },
            Change {
                collection: "c/x/d".into(),
                id: "b\"q".into(),
                op: ChangeOp::Delete,
                version: 1,
                before: Some(json!({"_id": "b\"q"})),
                after: None,
            },
        ];
        let old: Vec<Value> = changes
            .iter()
            .map(|c| {
                json!({"collection": c.collection, "id": c.id, "op": c.op.as_str(), "version": c.version,
                       "before": c.before, "after": c.after})
            })
            .collect();
        let mut expected = 77u64.to_be_bytes().to_vec();
        serde_json::to_writer(&mut expected, &json!({"seq": 9, "ts": 77, "changes": old})).unwrap();
        assert_eq!(encode_log_record(9, 77, &changes), expected);
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
            "[a-z\"\\\\\u{0}-\u{1f}\u{e9}\u{1f600}]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::vec(("[a-z\"\u{e9}]{0,4}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The log record built from the stored records is byte for byte the one serialized
        /// from the documents, with the before-image parsed back from its stored record as the
        /// writer does (so serializing a parsed stored document gives back its bytes).
        #[test]
        fn the_record_from_stored_images_is_the_serialized_one(
            before in proptest::option::of(json_value()),
            after in proptest::option::of(json_value()),
            id in "[a-z\"\u{e9}/]{1,6}",
            version in 0u64..u64::MAX,
            seq in 0u64..u64::MAX,
            ts in 0u64..u64::MAX,
        ) {
            let before_stored = before.as_ref().map(|d| crate::layout::encode_doc(version, d));
            let after_stored = after.as_ref().map(|d| crate::layout::encode_doc(version, d));
            let change = Change {
                collection: "c/x\"y".into(),
                id,
                op: ChangeOp::Update,
                version,
                before: before_stored
                    .as_ref()
                    .map(|b| crate::layout::decode_doc(b).unwrap().1),
                after,
            };
            let changes = vec![change.clone(), change];
            let images = vec![
                (before_stored.clone(), after_stored.clone()),
                (before_stored, after_stored),
            ];
            proptest::prop_assert_eq!(
                encode_log_record_from_stored(seq, ts, &changes, &images),
                encode_log_record(seq, ts, &changes)
            );
        }
    }
}

#[cfg(test)]
mod set_id_tests {
    use super::*;

    #[test]
    fn the_id_comes_first_and_the_other_fields_keep_their_order() {
        for (mut doc, id) in [
            (json!({"a": 1, "_id": "x", "b": 2}), "x"),
            (json!({"a": 1, "b": 2}), "x"),
            (json!({"_id": "x", "a": 1, "b": 2}), "x"),
        ] {
            set_id(&mut doc, id).unwrap();
            let keys: Vec<&str> = doc
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["_id", "a", "b"]);
            assert_eq!(doc["_id"], "x");
        }
        let mut doc = json!({"a": 1, "_id": "y"});
        assert!(matches!(
            set_id(&mut doc, "x"),
            Err(DbError::IdMismatch { .. })
        ));
    }
}
