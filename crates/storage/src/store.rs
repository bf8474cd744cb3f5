//! [`Store`]: opening the redb file, creating the tables, starting the writer thread, the
//! bounded submit queue, snapshot reads, and shutdown.

use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::read::ReadTxn;
use crate::tables::Table;
use crate::write::WriteTxn;
use crate::writer::{BackgroundJob, Job, Metrics, MetricsSnapshot, Msg, Ticket, TypedJob, Writer};
use crate::{StorageError, StoreOptions};

/// The name of the one database file inside the store's directory.
pub const FILE_NAME: &str = "herald.redb";

/// Named byte tables in one redb file, read through MVCC snapshots and written by one
/// group-commit writer thread. `Send + Sync`: share it behind an `Arc`.
///
/// Dropping the store is the same as [`close`](Store::close) without the error.
pub struct Store {
    db: Arc<redb::Database>,
    // `None` once closing has begun; dropping the sender is what tells the writer to finish.
    queue: Option<SyncSender<Msg>>,
    /// Background jobs; bounded like the foreground queue.
    background: Option<SyncSender<BackgroundJob>>,
    /// True while the writer sleeps on the foreground queue: only then does a background job
    /// send it a `Wake`, so wake-ups never take the room client jobs need.
    writer_sleeping: Arc<std::sync::atomic::AtomicBool>,
    writer: Option<JoinHandle<Result<(), StorageError>>>,
    metrics: Arc<Metrics>,
    // The queue's capacity, reported in `Overloaded`.
    write_queue_max: usize,
}

impl Store {
    /// Opens `dir/herald.redb`, creating the directory and the file if missing. After a crash,
    /// redb repairs the file on open (a full scan of it unless quick repair is on), so opening
    /// can take time proportional to the file's size.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Store, StorageError> {
        options.validate()?;
        std::fs::create_dir_all(dir)?;
        let db = redb::Builder::new()
            .set_cache_size(options.cache_bytes_max)
            .create(dir.join(FILE_NAME))?;
        Store::start(db, options)
    }

    /// A store that lives in memory only: for tests of the layers above. `Durability` is
    /// meaningless here; everything is gone when the store is dropped.
    pub fn in_memory(options: StoreOptions) -> Result<Store, StorageError> {
        Store::with_backend(redb::backends::InMemoryBackend::new(), options)
    }

    /// A store over any redb backend; tests use one that fails on demand.
    pub(crate) fn with_backend(
        backend: impl redb::StorageBackend,
        options: StoreOptions,
    ) -> Result<Store, StorageError> {
        options.validate()?;
        let db = redb::Builder::new()
            .set_cache_size(options.cache_bytes_max)
            .create_with_backend(backend)?;
        Store::start(db, options)
    }

    fn start(db: redb::Database, options: StoreOptions) -> Result<Store, StorageError> {
        // Create every table up front so a read snapshot can open any of them, even before
        // the first write to it.
        let txn = db.begin_write()?;
        for table in Table::ALL {
            txn.open_table(table.definition())?;
        }
        txn.commit()?;

        let db = Arc::new(db);
        let metrics = Arc::new(Metrics::default());
        let (queue, receiver) = mpsc::sync_channel(options.write_queue_max);
        let (background, background_rx) = mpsc::sync_channel(options.background_queue_max);
        let writer_sleeping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = Writer {
            sleeping: writer_sleeping.clone(),
            db: db.clone(),
            queue: receiver,
            background: background_rx,
            background_budget: std::time::Duration::from_millis(options.background_batch_ms_max),
            durability: options.durability,
            batch_max: options.batch_max,
            nosync_lag_max: std::time::Duration::from_millis(options.nosync_lag_ms_max),
            metrics: metrics.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("herald-storage-writer".into())
            .spawn(move || writer.run())?;
        Ok(Store {
            db,
            queue: Some(queue),
            background: Some(background),
            writer_sleeping,
            writer: Some(handle),
            metrics,
            write_queue_max: options.write_queue_max,
        })
    }

    /// A consistent snapshot of every table as of the latest commit.
    pub fn read(&self) -> Result<ReadTxn, StorageError> {
        use redb::ReadableDatabase;
        Ok(ReadTxn::new(self.db.begin_read()?))
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
    /// builds). Background jobs run after the queued foreground jobs of a batch, only while
    /// the batch is younger than `background_batch_ms_max` (and at least one per batch), so a
    /// backlog of background work delays a client's write by about that budget, not by the
    /// whole backlog. Blocks while `background_queue_max` background jobs wait.
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

    /// The writer's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Stops accepting jobs, lets the writer commit everything already queued, makes it
    /// durable (also in no-sync mode), joins the writer thread and closes the file.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), StorageError> {
        drop(self.queue.take());
        drop(self.background.take());
        match self.writer.take() {
            None => Ok(()),
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(StorageError::Internal("the writer thread panicked".into()))
            }),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Nobody is left to tell about a failed final flush; `close` reports it.
        let _ = self.shutdown();
    }
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
