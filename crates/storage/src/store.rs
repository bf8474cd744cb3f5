//! [`Store`]: opening the redb file and replaying the write-ahead log, starting the writer and
//! checkpointer threads, the bounded submit queue, snapshot reads, and shutdown.

use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::checkpoint::{Checkpointer, Limits, Shared};
use crate::job::{BackgroundJob, Job, Msg, Ticket, TypedJob};
use crate::layer::Base;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::read::ReadTxn;
use crate::space::{RedbFile, Space};
use crate::tables::{Table, FORMAT_VERSION, RUN_BLOCKS, RUN_META, STATE, STATE_FORMAT};
use crate::vfs::{Open, RealFs, VFile, Vfs};
use crate::wal::{self, LogThread, Segments, Wal, WalWriter};
use crate::write::WriteTxn;
use crate::writer::{Channels, Lanes, Writer};
use crate::{StorageError, StoreOptions};
use redb::ReadableTable;

/// The name of the one database file inside the store's directory.
pub const FILE_NAME: &str = "herald.redb";

/// Named byte tables in one redb file plus a write-ahead log, read through consistent
/// snapshots and written by one group-commit writer thread. `Send + Sync`: share it behind an
/// `Arc`.
///
/// Dropping the store is the same as [`close`](Store::close) without the error.
pub struct Store {
    shared: Arc<Shared>,
    after_batch: Arc<std::sync::OnceLock<crate::writer::AfterBatch>>,
    /// Set on a replicated store (`replication.rs`).
    replicator: crate::replicator::ReplicatorSlot,
    // `None` once closing has begun; dropping the sender is what tells the writer to finish.
    queue: Option<SyncSender<Msg>>,
    /// Background jobs; bounded like the foreground queue.
    background: Option<SyncSender<BackgroundJob>>,
    /// True while the writer sleeps on the foreground queue: only then does a background job
    /// send it a `Wake`, so wake-ups never take the room client jobs need.
    writer_sleeping: Arc<std::sync::atomic::AtomicBool>,
    writer: Option<JoinHandle<Result<(), StorageError>>>,
    checkpointer: Option<JoinHandle<Result<(), StorageError>>>,
    metrics: Arc<Metrics>,
    // The queue's capacity, reported in `Overloaded`.
    write_queue_max: usize,
    /// The disk-full state (`space.rs`).
    space: Arc<Space>,
}

impl Store {
    /// Opens `dir/herald.redb`, creating the directory and the file if missing, and replays
    /// the write-ahead log left by a crash. After a crash, redb also repairs the file on open
    /// (a full scan of it unless quick repair is on), so opening can take time proportional to
    /// the file's size plus the log's.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Store, StorageError> {
        Store::open_with(dir, options, Arc::new(RealFs))
    }

    /// [`open`](Store::open) with every file operation going through `vfs`: tests pass a
    /// [`FaultFs`](crate::FaultFs) to fail operations and simulate power loss.
    pub fn open_with(
        dir: &Path,
        options: StoreOptions,
        vfs: Arc<dyn Vfs>,
    ) -> Result<Store, StorageError> {
        options.validate()?;
        vfs.create_dir_all(dir)?;
        let space = Space::new(vfs.clone(), Some(dir), options.reserve_bytes);
        let path = dir.join(FILE_NAME);
        let new = vfs.len(&path).is_err();
        let backend = RedbFile {
            inner: vfs.redb_backend(&path, true)?,
            space: Some(space.clone()),
        };
        let db = redb::Builder::new()
            .set_cache_size(options.cache_bytes_max)
            .create_with_backend(backend)?;
        if new {
            // The new file's name must be durable before a checkpoint may delete log
            // segments (and so the only other copy of what it holds).
            vfs.sync_dir(dir)?;
        }
        create_tables(&db)?;
        // Before the log's replay, which writes index runs newer than what the B-tree holds.
        crate::runs::upgrade_index_table(&db)?;
        crate::logblocks::upgrade_log_table(&db)?;
        crate::runs::remove_orphans(&db)?;
        let last_batch = wal::recover(&db, &*vfs, dir)?;
        let segments = Segments::new(vfs.clone(), dir);
        crate::wal::remove_stale_spare(&*vfs, dir)?;
        space.establish()?;
        let writer = WalWriter::new(
            vfs.clone(),
            space.clone(),
            segments.clone(),
            options.wal_segment_bytes,
            last_batch,
        );
        let file = vfs.open(&path, Open::Existing)?;
        let log = Some((segments, file));
        Store::start(db, options, Wal::File(writer), log, last_batch, space)
    }

    /// A store that lives in memory only: for tests of the layers above. `Durability` is
    /// meaningless here; everything is gone when the store is dropped.
    pub fn in_memory(options: StoreOptions) -> Result<Store, StorageError> {
        Store::with_backend(redb::backends::InMemoryBackend::new(), options)
    }

    /// A store over any redb backend, without a log; tests use one that fails on demand.
    pub(crate) fn with_backend(
        backend: impl redb::StorageBackend,
        options: StoreOptions,
    ) -> Result<Store, StorageError> {
        Store::with_wal(backend, Wal::Off, options)
    }

    pub(crate) fn with_wal(
        backend: impl redb::StorageBackend,
        wal: Wal,
        options: StoreOptions,
    ) -> Result<Store, StorageError> {
        options.validate()?;
        let db = redb::Builder::new()
            .set_cache_size(options.cache_bytes_max)
            .create_with_backend(backend)?;
        create_tables(&db)?;
        let last_batch = wal::checkpointed(&db)?;
        let space = Space::new(Arc::new(RealFs), None, 0);
        Store::start(db, options, wal, None, last_batch, space)
    }

    fn start(
        db: redb::Database,
        options: StoreOptions,
        wal: Wal,
        log: Option<(Arc<Segments>, Box<dyn VFile>)>,
        last_batch: u64,
        space: Arc<Space>,
    ) -> Result<Store, StorageError> {
        let (segments, file) = log.unzip();
        let db = Arc::new(db);
        let metrics = Arc::new(Metrics::default());
        let limits = Limits {
            checkpoint_bytes: options.checkpoint_bytes,
            checkpoint_interval: Duration::from_millis(options.checkpoint_interval_ms),
            layers_bytes_max: options.layers_bytes_max,
            durable_interval: Duration::from_millis(options.durable_checkpoint_interval_ms),
            defer: options.checkpoint_defer_factor,
        };
        let merges = Arc::new(crate::runs::merger::Merges {
            db: db.clone(),
            cache: Arc::new(crate::runs::RunCache::default()),
            metrics: metrics.clone(),
            merging: Default::default(),
            pressed: Default::default(),
        });
        let shared = Shared::new(Base::open(&*db, &merges.cache)?, limits, metrics.clone());
        let (queue, receiver) = mpsc::sync_channel(options.write_queue_max);
        let (background, background_rx) = mpsc::sync_channel(options.background_queue_max);
        let writer_sleeping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let after_batch = Arc::new(std::sync::OnceLock::new());
        let replicator: crate::replicator::ReplicatorSlot = Arc::default();
        let writer = Writer {
            replicator: replicator.clone(),
            after_batch: after_batch.clone(),
            sleeping: writer_sleeping.clone(),
            lanes: Lanes::new(
                options.batch_max,
                Duration::from_millis(options.background_batch_ms_max),
            ),
            shared: shared.clone(),
            log: LogThread::spawn(wal, metrics.clone(), replicator.clone())?,
            channels: Channels {
                queue: receiver,
                background: background_rx,
                foreground_open: true,
            },
            durability: options.durability,
            nosync_lag_max: Duration::from_millis(options.nosync_lag_ms_max),
            metrics: metrics.clone(),
            next_batch: last_batch + 1,
        };
        let checkpointer = Checkpointer {
            shared: shared.clone(),
            db,
            segments,
            file,
            merges,
        };
        let checkpointer = std::thread::Builder::new()
            .name("herald-checkpoint".into())
            .spawn(move || checkpointer.run())?;
        let writer = match std::thread::Builder::new()
            .name("herald-storage-writer".into())
            .spawn(move || writer.run())
        {
            Ok(handle) => handle,
            Err(err) => {
                shared.close();
                let _ = checkpointer.join();
                return Err(err.into());
            }
        };
        Ok(Store {
            replicator,
            after_batch,
            shared,
            queue: Some(queue),
            background: Some(background),
            writer_sleeping,
            writer: Some(writer),
            checkpointer: Some(checkpointer),
            metrics,
            write_queue_max: options.write_queue_max,
            space,
        })
    }

    /// Makes this a replicated store: from now on every batch of its own goes through
    /// `replicator` before the local log (see `replication.rs`). Set it before submitting any
    /// job; only the first call counts (returns false for later ones).
    pub fn set_replicator(&self, replicator: Arc<dyn crate::Replicator>) -> bool {
        self.replicator.set(replicator).is_ok()
    }

    /// Sets what runs on the writer thread after the commit hooks of each batch that had any
    /// (the live feed wakes its reader once per batch there, not once per commit). Only the
    /// first call counts; returns false for later ones.
    pub fn on_batch_published(&self, f: impl Fn() + Send + Sync + 'static) -> bool {
        self.after_batch.set(Box::new(f)).is_ok()
    }

    /// A consistent snapshot of every table as of the latest commit.
    pub fn read(&self) -> Result<ReadTxn, StorageError> {
        Ok(ReadTxn::new(self.shared.snapshot()))
    }

    /// Queues `job` for the writer, blocking while the queue is full (back-pressure). The
    /// ticket resolves after the batch holding the job has committed, with the job's own
    /// result; if the job returned `Err` or panicked, none of its writes were applied.
    ///
    /// The job runs on the writer thread, in submission order relative to other jobs: keep it
    /// short and free of blocking calls, since the whole batch waits for it. A job must never
    /// submit to or wait on the store itself: the writer would wait for itself. From async
    /// code, prefer [`try_submit`](Store::try_submit) (this call can block a runtime thread).
    pub fn submit<F, T, E>(&self, job: F) -> Result<Ticket<T, E>, StorageError>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (job, ticket) = package(job);
        let queue = self.queue.as_ref().ok_or(StorageError::Closed)?;
        queue
            .send(Msg::Job(job))
            .map_err(|_| StorageError::Closed)?;
        Ok(ticket)
    }

    /// Like [`submit`](Store::submit), for work no client is waiting on (trigger tasks, index
    /// builds). Background jobs run in batches of their own, taking turns with client jobs; a
    /// background batch takes jobs only while it is younger than `background_batch_ms_max` (at
    /// least one) and ends as soon as a client job waits, so a backlog of background work
    /// delays a client's write by about one background job, not by the whole backlog. Blocks
    /// while `background_queue_max` background jobs wait.
    pub fn submit_background<F, T, E>(&self, job: F) -> Result<Ticket<T, E>, StorageError>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.enqueue_background(job, false)
    }

    /// Like [`submit_background`](Store::submit_background), for a job that writes a lot (a
    /// trigger task fanning out to thousands of documents): it runs only as the first job of a
    /// batch, so client jobs queued before it never share its batch. (A client job that
    /// arrives while it runs still waits for it: there is one writer.)
    pub fn submit_background_heavy<F, T, E>(&self, job: F) -> Result<Ticket<T, E>, StorageError>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.enqueue_background(job, true)
    }

    fn enqueue_background<F, T, E>(&self, job: F, heavy: bool) -> Result<Ticket<T, E>, StorageError>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (job, ticket) = package(job);
        let background = self.background.as_ref().ok_or(StorageError::Closed)?;
        background
            .send(BackgroundJob { job, heavy })
            .map_err(|_| StorageError::Closed)?;
        // Wake the writer if it sleeps (it re-checks the background queue after saying so, and
        // the fences order that check against this job's arrival). A busy writer looks anyway.
        use std::sync::atomic::{fence, Ordering::SeqCst};
        fence(SeqCst);
        if self.writer_sleeping.swap(false, SeqCst) {
            if let Some(queue) = &self.queue {
                let _ = queue.try_send(Msg::Wake);
            }
        }
        Ok(ticket)
    }

    /// Like [`submit`](Store::submit), but fails with [`StorageError::Overloaded`] instead of
    /// waiting when the queue already holds `write_queue_max` jobs.
    pub fn try_submit<F, T, E>(&self, job: F) -> Result<Ticket<T, E>, StorageError>
    where
        F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (job, ticket) = package(job);
        let queue = self.queue.as_ref().ok_or(StorageError::Closed)?;
        queue.try_send(Msg::Job(job)).map_err(|err| match err {
            TrySendError::Full(_) => StorageError::Overloaded(self.write_queue_max),
            TrySendError::Disconnected(_) => StorageError::Closed,
        })?;
        Ok(ticket)
    }

    /// Applies every batch committed so far to redb now and waits until that is durable (the
    /// checkpointer also does this on its own, by size and age). Write-ahead-log segments that
    /// the checkpoint covers are deleted. Never needed for durability: committed batches are
    /// already durable in the log.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        self.shared.checkpoint_now()
    }

    /// The writer's and checkpointer's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        let mut snapshot = self.metrics.snapshot();
        snapshot.disk_full = self.space.is_full();
        snapshot
    }

    /// Why the store refuses writes now, if it does: the disk is full (it resumes by itself
    /// once space is freed), or a write, sync or checkpoint failed (it needs a reopen). While
    /// the disk is full, asking probes for freed space (`space.rs`), so that a caller polling
    /// it (the trigger dispatcher, health checks) sees writes resume even when no client
    /// writes.
    pub fn write_refusal(&self) -> Option<StorageError> {
        if let Some(err) = self.shared.failure() {
            return Some(err);
        }
        if self.space.is_full() {
            self.space.probe();
        }
        self.space.is_full().then(|| {
            StorageError::Full("the disk is full; writes resume once space is freed".into())
        })
    }

    /// Stops accepting jobs, lets the writer commit everything already queued, makes it
    /// durable (also in no-sync mode), checkpoints every batch into redb, deletes the log,
    /// joins both threads and closes the file.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), StorageError> {
        drop(self.queue.take());
        drop(self.background.take());
        let panicked = |what: &str| Err(StorageError::Internal(format!("the {what} panicked")));
        let written = match self.writer.take() {
            None => Ok(()),
            Some(handle) => handle.join().unwrap_or_else(|_| panicked("writer thread")),
        };
        // Only now, with the writer gone, may the checkpointer finish.
        self.shared.close();
        let checkpointed = match self.checkpointer.take() {
            None => Ok(()),
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| panicked("checkpointer thread")),
        };
        written.and(checkpointed)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Nobody is left to tell about a failed final flush; `close` reports it.
        let _ = self.shutdown();
    }
}

/// Creates every table up front so a snapshot can open any of them, even before the first
/// write to it.
fn create_tables(db: &redb::Database) -> Result<(), StorageError> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    for table in Table::ALL {
        txn.open_table(table.definition())?;
    }
    txn.open_table(RUN_BLOCKS)?;
    txn.open_table(RUN_META)?;
    txn.open_table(crate::logblocks::LOG_BLOCKS)?;
    txn.open_table(crate::logblocks::LOG_FLOOR)?;
    {
        let mut state = txn.open_table(STATE)?;
        let found = state.get(STATE_FORMAT)?.map(|g| g.value());
        match found {
            Some(v) if v > FORMAT_VERSION => {
                return Err(StorageError::NewerFormat {
                    found: v,
                    supported: FORMAT_VERSION,
                })
            }
            Some(v) if v == FORMAT_VERSION => {}
            _ => {
                state.insert(STATE_FORMAT, FORMAT_VERSION)?;
            }
        }
    }
    txn.commit()?;
    Ok(())
}

fn package<F, T, E>(f: F) -> (Box<dyn Job>, Ticket<T, E>)
where
    F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let (reply, receiver) = oneshot::channel();
    (Box::new(TypedJob { f, reply }), Ticket { reply: receiver })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::ReadableDatabase;

    fn set_format(dir: &Path, format: Option<u64>) {
        let db = redb::Database::create(dir.join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut state = txn.open_table(STATE).unwrap();
            match format {
                Some(v) => state.insert(STATE_FORMAT, v).unwrap(),
                None => state.remove(STATE_FORMAT).unwrap(),
            };
        }
        txn.commit().unwrap();
    }

    fn format_of(dir: &Path) -> Option<u64> {
        let db = redb::Database::create(dir.join(FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let state = txn.open_table(STATE).unwrap();
        let v = state.get(STATE_FORMAT).unwrap().map(|g| g.value());
        v
    }

    /// Opens (creating) the store in `dir` and closes it cleanly.
    fn create_and_close(dir: &Path) {
        Store::open(dir, StoreOptions::default())
            .unwrap()
            .close()
            .unwrap();
    }

    /// Writes `i`'s bytes as key and value, and waits for the commit.
    fn put_key(store: &Store, i: u32) {
        let key = i.to_be_bytes().to_vec();
        store
            .submit(move |txn| txn.put(Table::Docs, key.clone(), key))
            .unwrap()
            .wait()
            .unwrap();
    }

    /// `/metrics` shows the log's bytes and each synced append and durable checkpoint: an
    /// on-disk store in fsync mode times one sync per batch, an in-memory store none.
    #[test]
    fn log_syncs_and_durable_checkpoints_are_timed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        for i in 0..20u32 {
            put_key(&store, i);
        }
        store.checkpoint().unwrap();
        let m = store.metrics();
        assert!(m.log_bytes >= 20 * 8, "{}", m.log_bytes);
        assert_eq!(m.log_sync.count(), m.commits);
        assert!(m.commits >= 1);
        assert!(m.log_sync.sum_nanos > 0);
        assert!(m.durable_commit.count() >= 1);
        assert!(m.durable_commit.count() <= m.durable_checkpoints + 1);
        store.close().unwrap();

        let memory = Store::in_memory(StoreOptions::default()).unwrap();
        memory
            .submit(|txn| txn.put(Table::Docs, b"k".to_vec(), b"v".to_vec()))
            .unwrap()
            .wait()
            .unwrap();
        let m = memory.metrics();
        assert_eq!((m.log_bytes, m.log_sync.count()), (0, 0));
    }

    #[test]
    fn by_default_continuous_writes_do_not_defer_checkpoints_and_some_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        // Writes every ~5 ms for 400 ms: the writer never pauses for 50 ms, so a deferral to
        // five intervals would allow at most one or two checkpoints by age.
        let started = std::time::Instant::now();
        let mut i = 0u32;
        while started.elapsed() < std::time::Duration::from_millis(400) {
            put_key(&store, i);
            i += 1;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let m = store.metrics();
        assert!(m.checkpoints >= 3, "{} checkpoints", m.checkpoints);
        // One at least every 250 ms of pending non-durable ones.
        assert!(m.durable_checkpoints >= 1, "{m:?}");
        assert!(m.durable_checkpoints < m.checkpoints, "{m:?}");
        store.close().unwrap();
    }

    #[test]
    fn a_new_store_records_its_format() {
        let dir = tempfile::tempdir().unwrap();
        create_and_close(dir.path());
        assert_eq!(format_of(dir.path()), Some(FORMAT_VERSION));
    }

    #[test]
    fn a_store_without_a_marker_is_format_one_and_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        create_and_close(dir.path());
        set_format(dir.path(), None);
        create_and_close(dir.path());
        assert_eq!(format_of(dir.path()), Some(FORMAT_VERSION));
    }

    #[test]
    fn a_store_of_a_newer_format_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        create_and_close(dir.path());
        set_format(dir.path(), Some(FORMAT_VERSION + 1));
        let err = Store::open(dir.path(), StoreOptions::default())
            .err()
            .expect("a newer format must be refused");
        assert!(
            matches!(err, StorageError::NewerFormat { found, supported }
                if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION),
            "{err:?}"
        );
        assert_eq!(err.code(), "storage_incompatible_format");
        assert_eq!(format_of(dir.path()), Some(FORMAT_VERSION + 1));
    }
}

#[cfg(test)]
mod upgrade_tests {
    use super::*;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    /// A closed store whose `table` B-tree holds `count` entries (`entry(i)` for i in 0..count)
    /// and whose format marker says `format`, as an older build left it.
    fn store_of_format(
        dir: &std::path::Path,
        format: u64,
        table: Table,
        count: usize,
        entry: impl Fn(usize) -> (Vec<u8>, Vec<u8>),
    ) {
        Store::open(dir, StoreOptions::default())
            .unwrap()
            .close()
            .unwrap();
        let db = redb::Database::create(dir.join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut raw = txn.open_table(table.definition()).unwrap();
            for i in 0..count {
                let (k, v) = entry(i);
                raw.insert(k.as_slice(), v.as_slice()).unwrap();
            }
            txn.open_table(STATE)
                .unwrap()
                .insert(STATE_FORMAT, format)
                .unwrap();
        }
        txn.commit().unwrap();
    }

    /// A format-2 store kept index entries in the `index` B-tree: opening it moves them into a
    /// run (readable as before, the B-tree left empty), and writes after that shadow them.
    #[test]
    fn a_format_two_store_has_its_index_entries_moved_into_a_run() {
        let dir = tempfile::tempdir().unwrap();
        store_of_format(dir.path(), 2, Table::Index, 500, |i| {
            let i = i as u32;
            (format!("idx{i:04}").into_bytes(), i.to_be_bytes().to_vec())
        });
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let read = store.read().unwrap();
        assert_eq!(read.len(Table::Index).unwrap(), 500);
        assert_eq!(
            read.get(Table::Index, b"idx0042").unwrap(),
            Some(42u32.to_be_bytes().to_vec())
        );
        let keys: Vec<_> = read
            .prefix(Table::Index, b"idx04")
            .unwrap()
            .map(|e| e.unwrap().0)
            .collect();
        assert_eq!(keys.len(), 100);
        drop(read);
        store
            .submit(|txn| {
                txn.delete(Table::Index, b"idx0001".to_vec());
                Ok::<_, StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        store.checkpoint().unwrap();
        assert_eq!(
            store.read().unwrap().get(Table::Index, b"idx0001").unwrap(),
            None
        );
        store.close().unwrap();
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        assert_eq!(
            txn.open_table(Table::Index.definition())
                .unwrap()
                .len()
                .unwrap(),
            0
        );
        assert_eq!(txn.open_table(RUN_META).unwrap().len().unwrap(), 2);
        let format = txn
            .open_table(STATE)
            .unwrap()
            .get(STATE_FORMAT)
            .unwrap()
            .unwrap()
            .value();
        assert_eq!(format, FORMAT_VERSION);
    }

    /// A format-3 store kept the commit log in the `log` B-tree: opening it moves the records
    /// into blocks (readable as before, the B-tree left empty), and new records follow them.
    #[test]
    fn a_format_three_store_has_its_log_moved_into_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let key = |n: u64| n.to_be_bytes().to_vec();
        store_of_format(dir.path(), 3, Table::Log, 300, |i| {
            let n = i as u64 + 1;
            (key(n), format!("record {n}").into_bytes())
        });
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(
            store.read().unwrap().get(Table::Log, &key(42)).unwrap(),
            Some(b"record 42".to_vec())
        );
        store
            .submit(move |txn| {
                txn.put(Table::Log, key(301), b"record 301".to_vec())?;
                txn.delete(Table::Log, key(1));
                Ok::<_, StorageError>(())
            })
            .unwrap()
            .wait()
            .unwrap();
        store.checkpoint().unwrap();
        let read = store.read().unwrap();
        let records: Vec<_> = read
            .range::<&[u8]>(Table::Log, ..)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(records.len(), 300);
        assert_eq!(records[0], (key(2), b"record 2".to_vec()));
        assert_eq!(records[299], (key(301), b"record 301".to_vec()));
        drop(read);
        store.close().unwrap();
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let old = txn.open_table(Table::Log.definition()).unwrap();
        assert_eq!(old.len().unwrap(), 0);
        let format = txn
            .open_table(STATE)
            .unwrap()
            .get(STATE_FORMAT)
            .unwrap()
            .unwrap()
            .value();
        assert_eq!(format, FORMAT_VERSION);
    }
}
