//! [`Db`]: one database in one directory. Opens the store, loads the index catalog and the
//! triggers, and offers point reads, queries with plans and explain, and reads of the commit
//! history. Its other operations are one file each: committing (`submit.rs`), indexes
//! (`indexes.rs`), triggers and tasks (`triggers.rs`), listing collections (`collections.rs`),
//! system records (`system.rs`).

mod aggregate;
mod collections;
mod group_aggregate;
mod group_indexes;
mod group_query;
mod indexes;
mod query;
mod replica;
mod submit;
mod system;
mod triggers;

pub use aggregate::{AggregateOutcome, AGGREGATE_DOCS_MAX};
pub use collections::COLLECTIONS_LIST_MAX;
pub(crate) use group_query::check_group_query;
pub use indexes::IndexListing;
pub use query::PlanResult;
pub use replica::StateDigest;

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::commitlog::{self, LogRead, LogRetention};
use crate::error::DbError;
use crate::feed::Feed;
use crate::indexer::STRING_KEY_BYTES_MAX;
use crate::layout::{decode_doc, doc_key, META_CATALOG, META_SEQ};
use crate::mutations::MutationRetention;
use crate::names::{check_collection, check_segment};
use crate::planner::Explain;
use crate::triggers::Registry;
use crate::txn::{Commit, CommitOutcome};
use crate::write::WriteSettings;
use herald_storage::{Durability, Store, StoreOptions, Table, Vfs};
use herald_value::{DocumentLimits, Value};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

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
    /// The wall clock of commit times and retention ages (the system clock unless a test
    /// passes a manual one).
    pub clock: Clock,
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
            clock: Clock::system(),
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
    /// How the query ran (the plan and its cost).
    pub explain: Explain,
}

#[derive(Clone)]
pub struct Db {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    /// Committed transactions for the live-query engine, fed by the commit hook.
    pub(crate) feed: Arc<Feed>,
    pub(crate) catalog: RwLock<Catalog>,
    /// The last committed seq, advanced by the writer after each commit.
    pub(crate) seq: AtomicU64,
    pub(crate) settings: WriteSettings,
    /// Trigger definitions the write path matches, with their counters.
    pub(crate) triggers: Registry,
    /// Commit times and the ages retention and trigger status compare with.
    pub(crate) clock: Clock,
    /// Told when an applied record changes a system record (`replica.rs`).
    pub(crate) system_change: std::sync::OnceLock<replica::SystemChange>,
    /// False on a replica that is not the primary (`replica.rs`): jobs that change in-memory
    /// state inside the job (the catalog's) refuse to run, since the log would refuse them.
    pub(crate) writable: std::sync::atomic::AtomicBool,
}

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
            db.feed.publish(Commit {
                seq,
                changes,
                bytes,
            });
        }
        db.triggers.tasks_committed(&tasks);
    }
}

impl Db {
    pub fn open(dir: &Path, options: DbOptions) -> Result<Db, DbError> {
        Db::open_with(dir, options, None, Arc::new(herald_storage::RealFs))
    }

    /// [`open`](Db::open) with every file operation going through `vfs`: tests pass a
    /// [`FaultFs`](herald_storage::FaultFs) to fail operations and simulate power loss.
    pub fn open_on(dir: &Path, options: DbOptions, vfs: Arc<dyn Vfs>) -> Result<Db, DbError> {
        Db::open_with(dir, options, None, vfs)
    }

    fn open_with(
        dir: &Path,
        options: DbOptions,
        replicator: Option<Arc<dyn herald_storage::Replicator>>,
        vfs: Arc<dyn Vfs>,
    ) -> Result<Db, DbError> {
        let mut store_opts = options.store.clone();
        store_opts.durability = options.durability;
        let store = Store::open_with(dir, store_opts, vfs)?;
        let replica = replicator.is_some();
        if let Some(replicator) = replicator {
            store.set_replicator(replicator);
        }
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
                    shapes_tracked: true,
                    ..Catalog::default()
                },
                true,
            ),
            None => (Catalog::default(), false),
        };
        let triggers = crate::triggers::load(&read)?;
        drop(read);
        let pending = replica::pending_builds(&catalog);
        let db = Db {
            inner: Arc::new(Inner {
                store,
                feed: Arc::new(Feed::new(seq)),
                catalog: RwLock::new(catalog),
                seq: AtomicU64::new(seq),
                settings: WriteSettings {
                    limits: options.limits,
                    log: LogRetention {
                        count: options.log_retention_count.max(1),
                        age_ms: options.log_retention_age.as_millis() as u64,
                        hint: Default::default(),
                    },
                    mutations: MutationRetention {
                        retained_max: options.mutations.retained_max.max(1),
                        ..options.mutations
                    },
                },
                triggers,
                clock: options.clock.clone(),
                system_change: Default::default(),
                writable: std::sync::atomic::AtomicBool::new(!replica),
            }),
        };
        // One wake of the live feed's reader per batch, after the batch's commits are in it.
        // (The callback holds the feed, not the database: the writer thread must never own
        // the last reference to the store it runs in.)
        let feed = Arc::clone(&db.inner.feed);
        db.inner.store.on_batch_published(move || feed.announce());
        if replica {
            // A replica writes nothing of its own until it is the primary (`Db::promoted`).
            return Ok(db);
        }
        if new_store {
            db.catalog_job(|_| Ok(()))?; // persists the key limit before any entry is written
        }
        // Builds interrupted by a shutdown or crash resume where the catalog says.
        for (collection, index) in pending {
            db.spawn_build(collection, index);
        }
        Ok(db)
    }

    /// The database's wall clock (the one in its options), for callers that compare times
    /// with the ones it records.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Counters of the storage writer (commits, jobs, last batch size).
    pub fn storage_metrics(&self) -> herald_storage::MetricsSnapshot {
        self.inner.store.metrics()
    }

    /// Why the store refuses writes now, if it does (reads still work): the disk is full
    /// (`storage_full`, resumes by itself once space is freed) or the store failed (needs a
    /// restart). See docs/storage.md, "Faults".
    pub fn write_refusal(&self) -> Option<herald_storage::StorageError> {
        self.inner.store.write_refusal()
    }

    /// The change feed (committed transactions in seq order).
    pub fn feed(&self) -> &Feed {
        &self.inner.feed
    }

    /// The commits with seq in `(after, upto]`, from memory or else from the commit log, or
    /// [`LogRead::Gone`] when the log no longer reaches back to `after + 1`.
    pub fn commits_between(&self, after: u64, upto: u64) -> Result<LogRead, DbError> {
        if let Some(c) = self.inner.feed.from_ring(after, upto) {
            return Ok(LogRead::Commits(c));
        }
        commitlog::read_commits(&self.inner.store.read()?, after, upto)
    }

    /// The last committed seq.
    pub fn seq(&self) -> u64 {
        self.inner.seq.load(Ordering::Acquire)
    }

    pub fn limits(&self) -> &DocumentLimits {
        &self.inner.settings.limits
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

    /// The commit-log records with seq in `[from, to]`, as stored JSON.
    pub fn log_range(&self, from: u64, to: u64) -> Result<Vec<Value>, DbError> {
        commitlog::read_json(&self.inner.store.read()?, from, to)
    }

    /// The oldest seq still in the commit log (None when empty).
    pub fn log_first(&self) -> Result<Option<u64>, DbError> {
        commitlog::first(&self.inner.store.read()?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::Write;
    use serde_json::json;

    /// A job that pruned and then failed leaves the hint past records it did not delete; a
    /// requested rescan finds them, and the log is back to its window.
    #[test]
    fn a_requested_rescan_prunes_what_a_failed_job_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let opts = DbOptions {
            log_retention_count: 5,
            log_retention_age: std::time::Duration::from_secs(3600),
            // No checkpoint during the test: in the stored log a delete raises the floor, so a
            // checkpoint would drop the records left below the hint by itself, and the count
            // of stray records would depend on timing.
            store: herald_storage::StoreOptions {
                checkpoint_interval_ms: 3_600_000,
                checkpoint_bytes: usize::MAX,
                ..DbOptions::default().store
            },
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
        db.inner.settings.log.hint.skip_ahead(3);
        for i in 20..30 {
            put(i);
        }
        // Three records below the hint stay behind...
        assert_eq!(db.log_range(0, 1000).unwrap().len(), 8);
        // ...until a rescan.
        db.inner.settings.log.hint.request_rescan();
        let last = put(30).seq;
        assert_eq!(db.log_first().unwrap(), Some(last - 4));
        assert_eq!(db.log_range(0, 1000).unwrap().len(), 5);
    }
}
