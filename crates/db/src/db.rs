//! [`Db`]: one database in one directory. Opens the store, loads the index catalog, and offers
//! commits (group-committed through the storage writer), point reads, queries with plans and
//! explain, index management with background builds, and the commit log.

use crate::catalog::{Catalog, CompositeIndex, IndexField, IndexState};
use crate::error::DbError;
use crate::exec::{execute, Examined};
use crate::indexer::{composite_index_name, entries, field_index_name, STRING_KEY_BYTES_MAX};
use crate::layout::{
    collection_prefix, decode_doc, doc_key, index_entry_id, index_prefix, index_value, log_key,
    META_CATALOG, META_SEQ,
};
use crate::mutations::{self, check_mutation_id, MutationRetention};
use crate::names::{check_collection, check_segment};
use crate::planner::plan;
use crate::write::{
    apply, prepare, ApplyCtx, CommitOutcome, Write, WriteGuard, WriteSettings, COMMIT_WRITES_MAX,
};
use herald_query::{Direction, Query};
use herald_storage::{Durability, Store, StoreOptions, Table, Ticket, WriteTxn};
use herald_value::{DocumentLimits, FieldPath, Value};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most composite indexes per collection.
pub const COMPOSITE_INDEXES_MAX: usize = 64;
/// Documents indexed per background build step (one storage job each).
pub const BUILD_CHUNK_DOCS: usize = 500;

#[derive(Debug, Clone)]
pub struct DbOptions {
    pub durability: Durability,
    pub limits: DocumentLimits,
    /// Commit-log records kept, at most (older ones are pruned).
    pub log_retention_count: u64,
    /// Commit-log records older than this are pruned.
    pub log_retention_age: Duration,
    /// How many client mutation ids are remembered, and for how long (see `mutations.rs`).
    pub mutations: MutationRetention,
    pub store: StoreOptions,
    /// Strings longer than this many bytes are cut in index entries of a store created with
    /// these options (an existing store keeps the limit it was created with).
    pub string_key_bytes_max: usize,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            durability: Durability::Fsync,
            limits: DocumentLimits::default(),
            log_retention_count: 1_000_000,
            log_retention_age: Duration::from_secs(24 * 3600),
            mutations: MutationRetention::default(),
            store: StoreOptions::default(),
            string_key_bytes_max: STRING_KEY_BYTES_MAX,
        }
    }
}

/// A document as stored: the JSON and its version.
#[derive(Debug, Clone)]
pub struct StoredDoc {
    pub doc: Value,
    pub version: u64,
}

#[derive(Debug, Clone)]
pub struct QueryOutcome {
    pub docs: Vec<Value>,
    /// The commit the result reflects.
    pub seq: u64,
    pub explain: Value,
}

#[derive(Clone)]
pub struct Db {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    /// Committed transactions for the live-query engine, fed by the commit hook.
    pub(crate) feed: Arc<crate::live::Feed>,
    pub(crate) catalog: RwLock<Catalog>,
    /// The last committed seq, advanced by the writer after each commit.
    pub(crate) seq: AtomicU64,
    pub(crate) settings: WriteSettings,
    /// Trigger definitions the write path matches, with their counters.
    pub(crate) triggers: crate::triggers::Registry,
}

/// Why [`Db::try_submit_or_return`] did not queue a transaction, with its writes when the
/// write queue was only full (`overloaded`), so they can be retried without a copy.
pub type Refused = (DbError, Option<Vec<Write>>);

/// What runs after a commit that changed documents, on the writer thread in commit order:
/// advance the seq, publish to the live-query feed, count the tasks it queued. The changes
/// move into the hook (the feed owns them), so `outcome.changes` is empty afterwards: copying
/// every before- and after-image of every commit cost the writer measurable time.
pub(crate) fn publish_hook(
    inner: &Arc<Inner>,
    outcome: &mut CommitOutcome,
) -> impl FnOnce() + 'static {
    let db = Arc::clone(inner);
    let seq = outcome.seq;
    let changes = (!outcome.changes.is_empty()).then(|| std::mem::take(&mut outcome.changes));
    let bytes = outcome.record_bytes;
    let tasks = outcome.tasks.clone();
    move || {
        db.seq.fetch_max(seq, Ordering::AcqRel);
        if let Some(changes) = changes {
            db.feed.publish(crate::live::Commit {
                seq,
                changes,
                bytes,
            });
        }
        db.triggers.tasks_committed(&tasks);
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Db {
    pub fn open(dir: &Path, options: DbOptions) -> Result<Db, DbError> {
        let mut store_opts = options.store.clone();
        store_opts.durability = options.durability;
        let store = Store::open(dir, store_opts)?;
        let read = store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        // A new store cuts long strings in index entries; a store that already has commits
        // but no catalog predates the limit and keeps whole strings (its entries hold them).
        let (catalog, new_store): (Catalog, bool) = match read.get(Table::Meta, META_CATALOG)? {
            Some(bytes) => (
                serde_json::from_slice(&bytes)
                    .map_err(|e| DbError::Corrupt(format!("catalog: {e}")))?,
                false,
            ),
            None if seq == 0 => (
                Catalog {
                    string_key_bytes_max: Some(options.string_key_bytes_max),
                    ..Catalog::default()
                },
                true,
            ),
            None => (Catalog::default(), false),
        };
        let triggers = crate::triggers::load(&read)?;
        drop(read);
        let pending: Vec<(String, String)> = catalog
            .collections
            .iter()
            .flat_map(|(c, cc)| {
                let composites = cc
                    .composites
                    .iter()
                    .filter(|ci| ci.state == IndexState::Building)
                    .map(move |ci| (c.clone(), composite_index_name(&ci.name)));
                let fields = cc
                    .building_fields
                    .iter()
                    .map(move |p| (c.clone(), field_index_name(p)));
                composites.chain(fields).collect::<Vec<_>>()
            })
            .collect();
        let db = Db {
            inner: Arc::new(Inner {
                store,
                feed: Arc::new(crate::live::Feed::new(seq)),
                catalog: RwLock::new(catalog),
                seq: AtomicU64::new(seq),
                settings: WriteSettings {
                    limits: options.limits,
                    log_retention_count: options.log_retention_count.max(1),
                    log_retention_age_ms: options.log_retention_age.as_millis() as u64,
                    mutations: MutationRetention {
                        retained_max: options.mutations.retained_max.max(1),
                        ..options.mutations
                    },
                    log_prune: Default::default(),
                },
                triggers,
            }),
        };
        // One wake of the live feed's reader per batch, after the batch's commits are in it.
        // (The callback holds the feed, not the database: the writer thread must never own
        // the last reference to the store it runs in.)
        let feed = Arc::clone(&db.inner.feed);
        db.inner.store.on_batch_published(move || feed.announce());
        if new_store {
            db.catalog_job(|_| Ok(()))?; // persists the key limit before any entry is written
        }
        // Builds interrupted by a shutdown or crash resume where the catalog says.
        for (collection, index) in pending {
            db.spawn_build(collection, index);
        }
        Ok(db)
    }

    /// Counters of the storage writer (commits, jobs, last batch size).
    pub fn storage_metrics(&self) -> herald_storage::MetricsSnapshot {
        self.inner.store.metrics()
    }

    /// The change feed (committed transactions in seq order).
    pub fn feed(&self) -> &crate::live::Feed {
        &self.inner.feed
    }

    /// The commits with seq in `(after, upto]`, from memory or else from the commit log.
    /// `None` when the log no longer reaches back to `after + 1`.
    pub fn commits_between(
        &self,
        after: u64,
        upto: u64,
    ) -> Result<Option<Vec<Arc<crate::live::Commit>>>, DbError> {
        if let Some(c) = self.inner.feed.from_ring(after, upto) {
            return Ok(Some(c));
        }
        let records = self.log_range(after + 1, upto)?;
        let commits: Vec<Arc<crate::live::Commit>> = records
            .iter()
            .filter_map(crate::live::commit_from_log)
            .map(Arc::new)
            .collect();
        // Seqs are gap-free, so the log reaches back exactly when every seq is there.
        let complete = commits.len() as u64 == upto - after
            && commits.first().is_some_and(|c| c.seq == after + 1);
        Ok(complete.then_some(commits))
    }

    /// The last committed seq.
    pub fn seq(&self) -> u64 {
        self.inner.seq.load(Ordering::Acquire)
    }

    pub fn limits(&self) -> &DocumentLimits {
        &self.inner.settings.limits
    }

    /// Queues an atomic transaction; the ticket resolves once it is durable (or failed). Blocks
    /// while the write queue is full.
    pub fn submit(&self, writes: Vec<Write>) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        self.enqueue(writes, None, true)
    }

    /// Like [`submit`](Db::submit), but fails with `overloaded` instead of blocking when the
    /// write queue is full (for async callers, which must not block).
    pub fn try_submit(
        &self,
        writes: Vec<Write>,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        self.enqueue(writes, None, false)
    }

    /// Like [`try_submit`](Db::try_submit), for a commit carrying a client mutation id: if the
    /// id was recorded by an earlier commit (within retention), nothing is applied and the
    /// ticket resolves to that commit's seq and results with `replayed: true`; otherwise the
    /// writes apply and the id is recorded in the same storage transaction.
    /// With a `guard`, as [`try_submit_guarded`](Db::try_submit_guarded); a replayed commit
    /// is not checked again (it was checked when it applied).
    pub fn try_submit_mutation(
        &self,
        writes: Vec<Write>,
        mutation_id: Option<String>,
        guard: Option<WriteGuard>,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        if let Some(id) = &mutation_id {
            check_mutation_id(id)?;
        }
        self.enqueue_guarded(writes, mutation_id, false, guard)
    }

    /// Like [`try_submit`](Db::try_submit), with `guard` checking each write inside the storage
    /// job, on the exact stored document it replaces and the document it computes: an error
    /// from the guard fails the whole transaction (nothing applied, no seq consumed). The
    /// server's security rules use this, so a rule decides on the very before-image the write
    /// replaces.
    pub fn try_submit_guarded(
        &self,
        writes: Vec<Write>,
        guard: WriteGuard,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        self.enqueue_guarded(writes, None, false, Some(guard))
    }

    /// Like [`try_submit`](Db::try_submit), but when the write queue is full hands the writes
    /// back (prepared: generated ids stay chosen) with the `overloaded` error, so a caller that
    /// retries later (bulk ingest) need not clone every write before trying.
    pub fn try_submit_or_return(
        &self,
        mut writes: Vec<Write>,
    ) -> Result<Ticket<CommitOutcome, DbError>, Refused> {
        let encoded = match prepare(&mut writes, &self.inner.settings.limits, COMMIT_WRITES_MAX) {
            Ok(encoded) => encoded,
            Err(e) => return Err((e, None)),
        };
        let writes = Arc::new(writes);
        match self.enqueue_prepared(Arc::clone(&writes), encoded, None, false, None) {
            Ok(ticket) => Ok(ticket),
            // A refused job is dropped before the error returns, so ours is the only handle.
            Err(e) => Err((e, Arc::try_unwrap(writes).ok())),
        }
    }

    fn enqueue(
        &self,
        writes: Vec<Write>,
        mutation_id: Option<String>,
        block: bool,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        self.enqueue_guarded(writes, mutation_id, block, None)
    }

    fn enqueue_guarded(
        &self,
        mut writes: Vec<Write>,
        mutation_id: Option<String>,
        block: bool,
        guard: Option<WriteGuard>,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        let encoded = prepare(&mut writes, &self.inner.settings.limits, COMMIT_WRITES_MAX)?;
        self.enqueue_prepared(Arc::new(writes), encoded, mutation_id, block, guard)
    }

    fn enqueue_prepared(
        &self,
        mut writes: Arc<Vec<Write>>,
        mut encoded: crate::write::Encoded,
        mutation_id: Option<String>,
        block: bool,
        guard: Option<WriteGuard>,
    ) -> Result<Ticket<CommitOutcome, DbError>, DbError> {
        let inner = Arc::clone(&self.inner);
        let job = move |txn: &mut WriteTxn<'_>| {
            let now_ms = now_ms();
            if let Some(id) = &mutation_id {
                if let Some((seq, results)) = mutations::lookup(txn, id)? {
                    return Ok(CommitOutcome::replayed(seq, results));
                }
            }
            let ctx = ApplyCtx {
                catalog: &inner.catalog,
                settings: &inner.settings,
                triggers: &inner.triggers,
                depth: 0,
                now_ms,
                guard: guard.as_deref(),
                known: None,
            };
            // The writes are ours alone once the submitter has let go of them (it keeps a
            // handle only to get them back from a full queue); otherwise apply a copy.
            let mut owned;
            let writes = match Arc::get_mut(&mut writes) {
                Some(w) => w,
                None => {
                    owned = (*writes).clone();
                    &mut owned
                }
            };
            let mut outcome = apply(txn, writes, &mut encoded, &ctx)?;
            if let Some(id) = &mutation_id {
                let retention = &inner.settings.mutations;
                mutations::record(txn, id, outcome.seq, &outcome.results, now_ms, retention)
                    .inspect_err(|_| inner.settings.log_prune.request_rescan())?;
            }
            // Hooks run in commit order on the writer thread, so the feed sees seqs in order.
            txn.on_commit(publish_hook(&inner, &mut outcome));
            Ok(outcome)
        };
        let ticket = if block {
            self.inner.store.submit(job)?
        } else {
            self.inner.store.try_submit(job)?
        };
        Ok(ticket)
    }

    /// Commits an atomic transaction and waits until it is durable.
    pub fn commit(&self, writes: Vec<Write>) -> Result<CommitOutcome, DbError> {
        Ok(self.submit(writes)?.wait()?)
    }

    pub fn get(&self, collection: &str, id: &str) -> Result<Option<StoredDoc>, DbError> {
        check_collection(collection)?;
        check_segment(id, "document id")?;
        let read = self.inner.store.read()?;
        match read.get(Table::Docs, &doc_key(collection, id))? {
            Some(bytes) => {
                let (version, doc) = decode_doc(&bytes)?;
                Ok(Some(StoredDoc { doc, version }))
            }
            None => Ok(None),
        }
    }

    /// Runs a query at one consistent snapshot and reports which commit it reflects.
    pub fn query(&self, collection: &str, query: &Query) -> Result<QueryOutcome, DbError> {
        check_collection(collection)?;
        let read = self.inner.store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        let chosen = {
            let cat = self.inner.catalog.read().expect("catalog lock");
            plan(
                collection,
                query,
                cat.collection(collection),
                cat.key_string_limit(),
            )
        };
        let (
            docs,
            Examined {
                keys,
                docs: docs_examined,
            },
        ) = execute(&read, collection, query, &chosen)?;
        let explain = json!({"plan": chosen.describe(), "keysExamined": keys, "docsExamined": docs_examined, "returned": docs.len()});
        Ok(QueryOutcome { docs, seq, explain })
    }

    /// The commit-log records with seq in `[from, to]`, as stored JSON.
    pub fn log_range(&self, from: u64, to: u64) -> Result<Vec<Value>, DbError> {
        let read = self.inner.store.read()?;
        let mut out = Vec::new();
        for entry in read.range(
            Table::Log,
            log_key(from).as_slice()..=log_key(to).as_slice(),
        )? {
            let (_, v) = entry?;
            out.push(
                serde_json::from_slice(&v[8..])
                    .map_err(|e| DbError::Corrupt(format!("log record: {e}")))?,
            );
        }
        Ok(out)
    }

    /// The oldest seq still in the commit log (None when empty).
    pub fn log_first(&self) -> Result<Option<u64>, DbError> {
        let read = self.inner.store.read()?;
        let first = read.range::<&[u8]>(Table::Log, ..)?.next().transpose()?;
        Ok(first.map(|(k, _)| u64::from_be_bytes(k.as_slice().try_into().unwrap_or([0; 8]))))
    }

    /// Declares a composite index; it is filled in the background and used once ready.
    pub fn create_index(
        &self,
        collection: &str,
        name: &str,
        fields: Vec<(String, Direction)>,
    ) -> Result<Value, DbError> {
        check_collection(collection)?;
        check_segment(name, "index name")?;
        if fields.len() < 2 || fields.len() > 8 {
            return Err(DbError::BadIndex(
                "a composite index has 2 to 8 fields".into(),
            ));
        }
        for (p, _) in &fields {
            FieldPath::parse(p).map_err(|e| DbError::BadIndex(e.to_string()))?;
            if p == "_id" {
                return Err(DbError::BadIndex(
                    "_id cannot be part of a composite index".into(),
                ));
            }
        }
        let index = CompositeIndex {
            name: name.to_string(),
            fields: fields
                .into_iter()
                .map(|(path, direction)| IndexField { path, direction })
                .collect(),
            state: IndexState::Building,
        };
        let (coll, idx) = (collection.to_string(), index.clone());
        self.catalog_job(move |cat| {
            let cc = cat.collections.entry(coll).or_default();
            if cc.composites.iter().any(|c| c.name == idx.name) {
                return Err(DbError::IndexExists(idx.name.clone()));
            }
            if cc.composites.len() >= COMPOSITE_INDEXES_MAX {
                return Err(DbError::LimitExceeded(format!(
                    "at most {COMPOSITE_INDEXES_MAX} composite indexes per collection"
                )));
            }
            cc.composites.push(idx);
            Ok(())
        })?;
        self.spawn_build(collection.to_string(), composite_index_name(name));
        Ok(index_json(&index))
    }

    pub fn drop_index(&self, collection: &str, name: &str) -> Result<(), DbError> {
        check_collection(collection)?;
        let (coll, n) = (collection.to_string(), name.to_string());
        self.catalog_job(move |cat| {
            let cc = cat
                .collections
                .get_mut(&coll)
                .ok_or_else(|| DbError::IndexNotFound(n.clone()))?;
            let before = cc.composites.len();
            cc.composites.retain(|c| c.name != n);
            if cc.composites.len() == before {
                return Err(DbError::IndexNotFound(n));
            }
            Ok(())
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

    pub fn list_indexes(&self, collection: &str) -> Result<Value, DbError> {
        check_collection(collection)?;
        let cat = self.inner.catalog.read().expect("catalog lock");
        let cc = cat.collection(collection).cloned().unwrap_or_default();
        Ok(json!({
            "collection": collection,
            "composite": cc.composites.iter().map(index_json).collect::<Vec<_>>(),
            "exemptions": cc.exemptions,
            "building": cc.building_fields,
        }))
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
    fn catalog_job<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Catalog) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, DbError> {
        let inner = Arc::clone(&self.inner);
        let ticket = self.inner.store.submit(move |txn: &mut WriteTxn<'_>| {
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
    fn spawn_build(&self, collection: String, index: String) {
        let db = self.clone();
        std::thread::Builder::new()
            .name(format!("herald-build-{index}"))
            .spawn(move || {
                if let Err(e) = db.build(&collection, &index) {
                    eprintln!("herald: building index {index} on {collection} failed: {e}");
                }
            })
            .expect("spawn index builder");
    }

    fn build(&self, collection: &str, index: &str) -> Result<(), DbError> {
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
        let end = crate::layout::prefix_end(prefix);
        let mut cursor = prefix.to_vec();
        loop {
            let inner = Arc::clone(&self.inner);
            let (coll, start, end) = (collection.to_string(), cursor.clone(), end.clone());
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
                    let mut cc = cat.collection(&coll).cloned().unwrap_or_default();
                    cc.building_fields.clear();
                    for (key, value) in &batch {
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

    /// Stops the writer after queued work and closes the file.
    pub fn close(self) -> Result<(), DbError> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.store.close()?),
            // Other handles (a builder thread) still exist; the store closes when they drop.
            Err(_) => Ok(()),
        }
    }
}

fn index_json(ci: &CompositeIndex) -> Value {
    json!({
        "name": ci.name,
        "fields": ci.fields.iter().map(|f| json!({"path": f.path, "order": if f.direction == Direction::Asc { 1 } else { -1 }})).collect::<Vec<_>>(),
        "state": ci.state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::Write;

    /// A job that pruned and then failed leaves the hint past records it did not delete; a
    /// requested rescan finds them, and the log is back to its window.
    #[test]
    fn a_requested_rescan_prunes_what_a_failed_job_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let opts = DbOptions {
            log_retention_count: 5,
            log_retention_age: std::time::Duration::from_secs(3600),
            ..DbOptions::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let put = |i: u64| {
            db.commit(vec![Write::Put {
                collection: "c".into(),
                id: "a".into(),
                doc: json!({ "i": i }),
                if_version: None,
            }])
            .unwrap()
        };
        for i in 0..20 {
            put(i);
        }
        assert_eq!(db.log_range(0, 1000).unwrap().len(), 5);
        db.inner.settings.log_prune.skip_ahead(3);
        for i in 20..30 {
            put(i);
        }
        // Three records below the hint stay behind...
        assert_eq!(db.log_range(0, 1000).unwrap().len(), 8);
        // ...until a rescan.
        db.inner.settings.log_prune.request_rescan();
        let last = put(30).seq;
        assert_eq!(db.log_first().unwrap(), Some(last - 4));
        assert_eq!(db.log_range(0, 1000).unwrap().len(), 5);
    }

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
            assert_eq!(out.explain["plan"]["type"], "index", "{}", out.explain);
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
                if count() == n
                    && db.list_indexes("c").unwrap()["composite"][0]["state"] != "building"
                {
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
        assert_eq!(out.docs.len(), 3, "{}", out.explain);
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
