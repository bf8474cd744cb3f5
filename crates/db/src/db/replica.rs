//! A database that is one replica of a cluster's replicated log (`crates/cluster` drives it):
//! opening one without the writes a fresh store makes on its own, applying records other nodes
//! committed (and publishing the commits in them to the live-query feed, as the primary did),
//! taking over as primary, and the state digest replicas compare.
//!
//! The primary commits through the ordinary write path; its store hands each batch to the
//! cluster's `Replicator` before logging it (`herald_storage::replication`). Every other node
//! applies the same bytes with [`Db::apply_replicated`], so the tables, and everything derived
//! from them here (seq, catalog, trigger definitions, the feed), are the primary's at the same
//! replication index.

use super::{Db, Inner};
use crate::catalog::{Catalog, IndexState};
use crate::commitlog::decode_commit;
use crate::error::DbError;
use crate::indexer::{composite_index_name, field_index_name};
use crate::layout::{META_CATALOG, META_SEQ};
use crate::triggers::META_TRIGGER_PREFIX;
use crate::txn::Commit;
use crate::DbOptions;
use herald_storage::{Applied, Replicator, Table, Ticket, WriteTxn};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Called on the writer thread when an applied record changed a system record: the database
/// (a handle for the call; do not keep it) and the record's name.
pub type SystemChange = Arc<dyn Fn(&Db, &str) + Send + Sync>;

impl Db {
    /// Opens a replica: the store commits its own batches only through `replicator`, and the
    /// database makes none of the writes it makes on its own at open (a fresh store's catalog,
    /// resuming index builds) until [`promoted`](Db::promoted).
    pub fn open_replica(
        dir: &Path,
        options: DbOptions,
        replicator: Arc<dyn Replicator>,
    ) -> Result<Db, DbError> {
        Db::open_with(
            dir,
            options,
            Some(replicator),
            Arc::new(herald_storage::RealFs),
        )
    }

    /// The replication index the store holds (0 before any replicated batch).
    pub fn replication_index(&self) -> Result<u64, DbError> {
        let read = self.inner.store.read()?;
        Ok(read
            .get_u64(Table::Meta, herald_storage::STAMP_KEY)?
            .unwrap_or(0))
    }

    /// Applies a record another node committed, as one job; the ticket resolves once it is
    /// in the local log and published (its commits in the feed). A record that does not
    /// check fails with `storage_corrupted` and applies nothing.
    pub fn apply_replicated(&self, record: Vec<u8>) -> Result<Ticket<Applied, DbError>, DbError> {
        let inner = Arc::clone(&self.inner);
        let ticket = self.inner.store.submit(move |txn: &mut WriteTxn<'_>| {
            let mut seen = Seen::default();
            let applied = herald_storage::apply_record(txn, &record)?;
            // Second pass over what the record held: cheap next to applying it, and keeps
            // storage ignorant of what the keys mean.
            herald_storage::visit_record(&record, |table, key, value| {
                seen.note(table, key, value)
            })?;
            let db = Arc::clone(&inner);
            txn.on_commit(move || seen.publish(&db));
            Ok::<_, DbError>(applied)
        })?;
        Ok(ticket)
    }

    /// Called by the cluster when this node becomes the primary: reloads what is derived from
    /// the tables, then makes the writes a node makes on its own (a fresh store's catalog,
    /// resuming the index builds the catalog says are running).
    pub fn promoted(&self) -> Result<(), DbError> {
        self.reload_derived()?;
        self.inner.writable.store(true, Ordering::Release);
        let (fresh, pending) = {
            let read = self.inner.store.read()?;
            let fresh = read.get(Table::Meta, META_CATALOG)?.is_none()
                && read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0) == 0;
            let cat = self.inner.catalog.read().expect("catalog lock");
            (fresh, pending_builds(&cat))
        };
        if fresh {
            self.catalog_job(|_| Ok(()))?;
        }
        for (collection, index) in pending {
            self.spawn_build(collection, index);
        }
        Ok(())
    }

    /// Called by the cluster when this node stops being the primary.
    pub fn demoted(&self) {
        self.inner.writable.store(false, Ordering::Release);
    }

    /// Rereads the catalog and the trigger definitions from the tables (after a batch of this
    /// node's own was refused by the log, whose catalog change must not stay in memory).
    pub fn reload_derived(&self) -> Result<(), DbError> {
        let read = self.inner.store.read()?;
        if let Some(bytes) = read.get(Table::Meta, META_CATALOG)? {
            let cat: Catalog = serde_json::from_slice(&bytes)
                .map_err(|e| DbError::Corrupt(format!("catalog: {e}")))?;
            *self.inner.catalog.write().expect("catalog lock") = cat;
        }
        let registry = crate::triggers::load(&read)?;
        self.inner
            .triggers
            .replace(registry.defs().iter().map(|d| (**d).clone()).collect());
        crate::triggers::recount(&self.inner.triggers, &read)?;
        Ok(())
    }

    /// Sets what runs when an applied record changes a system record (the server reloads its
    /// keys and rules). Only the first call counts. The callback gets a handle rather than
    /// capturing one, which would keep the database open forever.
    pub fn on_replicated_system_change(&self, f: impl Fn(&Db, &str) + Send + Sync + 'static) {
        let _ = self.inner.system_change.set(Arc::new(f));
    }

    /// A digest of every table as of the latest commit, with the replication index and the
    /// seq of that snapshot: two replicas at the same index must have the same digest.
    pub fn state_digest(&self) -> Result<StateDigest, DbError> {
        let read = self.inner.store.read()?;
        Ok(StateDigest {
            index: read
                .get_u64(Table::Meta, herald_storage::STAMP_KEY)?
                .unwrap_or(0),
            seq: read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0),
            digest: read.digest()?,
        })
    }
}

impl Db {
    /// Calls `f` with every entry of every table at one snapshot, table by table in key order
    /// (a node's snapshot for another to start from), and returns that snapshot's replication
    /// index.
    pub fn for_each_entry<E: From<DbError>>(
        &self,
        mut f: impl FnMut(Table, &[u8], &[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let read = self.inner.store.read().map_err(DbError::from)?;
        let index = read
            .get_u64(Table::Meta, herald_storage::STAMP_KEY)
            .map_err(DbError::from)?
            .unwrap_or(0);
        for table in Table::ALL {
            for entry in read.range::<&[u8]>(table, ..).map_err(DbError::from)? {
                let (key, value) = entry.map_err(DbError::from)?;
                f(table, &key, &value)?;
            }
        }
        Ok(index)
    }
}

/// A store's digest at one snapshot ([`Db::state_digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    /// The replication index of the last batch the store holds.
    pub index: u64,
    /// The last committed seq.
    pub seq: u64,
    /// FNV-1a over every table's entries (`ReadTxn::digest`).
    pub digest: u64,
}

/// The index builds a catalog says are running.
pub(super) fn pending_builds(catalog: &Catalog) -> Vec<(String, String)> {
    catalog
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
        .chain(catalog.groups.iter().flat_map(|(g, list)| {
            list.iter()
                .filter(|ci| ci.state == IndexState::Building)
                .map(move |ci| {
                    (
                        crate::layout::group_scope(g),
                        crate::indexer::group_index_name(&ci.name),
                    )
                })
        }))
        .collect()
}

/// What an applied record changed that the database derives state from.
#[derive(Default)]
struct Seen {
    /// Commit-log records it added, in key (= seq) order.
    commits: Vec<(u64, Vec<u8>)>,
    catalog: Option<Vec<u8>>,
    triggers: bool,
    system: Vec<String>,
}

impl Seen {
    fn note(&mut self, table: Table, key: &[u8], value: Option<&[u8]>) -> Result<(), DbError> {
        match table {
            Table::Log => {
                if let (Some(value), Ok(seq)) = (value, <[u8; 8]>::try_from(key)) {
                    self.commits.push((u64::from_be_bytes(seq), value.to_vec()));
                }
            }
            Table::Meta if key == META_CATALOG => self.catalog = value.map(<[u8]>::to_vec),
            Table::Meta if key.starts_with(META_TRIGGER_PREFIX) => self.triggers = true,
            Table::Meta if key.starts_with(super::system::META_SYSTEM_PREFIX) => {
                let name = &key[super::system::META_SYSTEM_PREFIX.len()..];
                self.system.push(String::from_utf8_lossy(name).into_owned());
            }
            _ => {}
        }
        Ok(())
    }

    /// On the writer thread, after the batch is published: what the primary's hooks did.
    fn publish(self, db: &Arc<Inner>) {
        if let Some(bytes) = self.catalog {
            match serde_json::from_slice::<Catalog>(&bytes) {
                Ok(cat) => *db.catalog.write().expect("catalog lock") = cat,
                Err(e) => eprintln!("herald: a replicated catalog does not decode: {e}"),
            }
        }
        if self.triggers {
            match db
                .store
                .read()
                .map_err(DbError::from)
                .and_then(|r| crate::triggers::load(&r))
            {
                Ok(registry) => db
                    .triggers
                    .replace(registry.defs().iter().map(|d| (**d).clone()).collect()),
                Err(e) => eprintln!("herald: replicated trigger definitions do not load: {e}"),
            }
        }
        for (seq, record) in self.commits {
            match decode_commit(&record) {
                Ok(commit) => {
                    db.seq.fetch_max(seq, Ordering::AcqRel);
                    if !commit.changes.is_empty() {
                        db.feed.publish(Commit {
                            bytes: record.len(),
                            ..commit
                        });
                    }
                }
                Err(e) => eprintln!("herald: replicated commit {seq} does not decode: {e}"),
            }
        }
        if let Some(f) = db.system_change.get() {
            let handle = Db {
                inner: Arc::clone(db),
            };
            for name in &self.system {
                f(&handle, name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::TriggerDef;
    use crate::txn::Write;
    use herald_query::{Direction, Query};
    use herald_storage::StorageError;
    use serde_json::json;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// A log in memory that a test can close.
    #[derive(Default)]
    struct Log {
        records: Mutex<Vec<Vec<u8>>>,
        closed: AtomicBool,
    }

    impl Replicator for Log {
        fn replicate(&self, _index: u64, record: &[u8]) -> Result<(), StorageError> {
            if self.closed.load(Ordering::SeqCst) {
                return Err(StorageError::Unavailable("closed".into()));
            }
            self.records.lock().unwrap().push(record.to_vec());
            Ok(())
        }
    }

    fn put(id: &str, doc: serde_json::Value) -> Write {
        Write::Put {
            collection: "rooms/r1/messages".into(),
            id: id.into(),
            doc,
            if_version: None,
        }
    }

    /// Everything a primary commits (documents, a composite index and its build, a trigger
    /// and its tasks, system records) applied on a replica gives the same tables, the same
    /// seq, the commits in its feed, the catalog for its planner and the system-record
    /// callbacks.
    #[test]
    fn a_replica_applying_the_primarys_records_has_its_state() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = Arc::new(Log::default());
        let primary = Db::open_replica(d1.path(), DbOptions::default(), log.clone()).unwrap();
        primary.promoted().unwrap();
        let replica_log = Arc::new(Log::default());
        let replica =
            Db::open_replica(d2.path(), DbOptions::default(), replica_log.clone()).unwrap();
        let changed = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = changed.clone();
        replica.on_replicated_system_change(move |_, name| seen.lock().unwrap().push(name.into()));

        for i in 0..20 {
            primary
                .commit(vec![put(&format!("m{i}"), json!({"ts": i, "room": "r1"}))])
                .unwrap();
        }
        primary
            .create_index(
                "rooms/r1/messages",
                "by_room_ts",
                vec![
                    ("room".into(), Direction::Asc),
                    ("ts".into(), Direction::Desc),
                ],
            )
            .unwrap();
        let def = TriggerDef::parse(
            "t",
            &json!({"collection": "rooms/*/messages", "function": "(e) => {}"}),
        )
        .unwrap();
        primary.put_trigger(def).unwrap();
        primary.system_put("rules", Some(json!({"x": 1}))).unwrap();
        for i in 20..30 {
            primary
                .commit(vec![put(&format!("m{i}"), json!({"ts": i, "room": "r1"}))])
                .unwrap();
        }
        // Let the background build finish (its steps are batches of their own).
        for _ in 0..200 {
            let ready = primary
                .list_indexes("rooms/r1/messages")
                .map(|l| format!("{l:?}").contains("Ready"))
                .unwrap_or(false);
            if ready {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }

        let records = log.records.lock().unwrap().clone();
        for record in records {
            replica.apply_replicated(record).unwrap().wait().unwrap();
        }
        assert!(
            replica_log.records.lock().unwrap().is_empty(),
            "nothing replicated twice"
        );
        assert_eq!(
            replica.state_digest().unwrap(),
            primary.state_digest().unwrap()
        );
        assert_eq!(replica.seq(), primary.seq());
        let commits = replica
            .commits_between(0, replica.seq())
            .unwrap()
            .into_commits()
            .unwrap();
        assert_eq!(commits.len() as u64, primary.seq());
        assert_eq!(replica.triggers().defs().len(), 1);
        assert_eq!(changed.lock().unwrap().as_slice(), ["rules".to_string()]);
        let q = Query::parse(&json!({"filter": {"room": "r1"}, "sort": {"ts": -1}, "limit": 3}))
            .unwrap();
        let (a, b) = (
            primary.query("rooms/r1/messages", &q).unwrap(),
            replica.query("rooms/r1/messages", &q).unwrap(),
        );
        assert_eq!(a.docs, b.docs);
        assert_eq!(
            a.explain.plan, b.explain.plan,
            "the replica has the catalog"
        );
    }

    /// A replica that is not the primary refuses writes with `unavailable` and changes
    /// nothing, the catalog in memory included.
    #[test]
    fn a_replica_refuses_writes_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Log::default());
        log.closed.store(true, Ordering::SeqCst);
        let db = Db::open_replica(dir.path(), DbOptions::default(), log).unwrap();
        let err = db.commit(vec![put("a", json!({}))]).unwrap_err();
        assert_eq!(err.code(), "unavailable");
        let err = db
            .create_index(
                "c",
                "i",
                vec![("a".into(), Direction::Asc), ("b".into(), Direction::Asc)],
            )
            .unwrap_err();
        assert_eq!(err.code(), "unavailable");
        let listing = format!("{:?}", db.list_indexes("c").unwrap());
        assert!(!listing.contains("\"i\""), "{listing}");
        assert_eq!(db.seq(), 0);
        assert_eq!(db.replication_index().unwrap(), 0);
    }
}
