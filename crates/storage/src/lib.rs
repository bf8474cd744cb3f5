//! Herald's storage layer: named byte tables in one redb file, consistent snapshot reads, and
//! one group-commit writer thread per store. It knows nothing of documents or queries.
//!
//! # The file and the tables
//!
//! A [`Store`] is one redb file, `herald.redb`, in the directory given to [`Store::open`]
//! (created if missing). redb is a copy-on-write B-tree store with ACID transactions and MVCC
//! readers; this crate is a thin layer over it, not a page store. The file holds the tables of
//! [`Table`]: `docs`, `index`, `log`, `meta` and `tasks`. In each, keys and values are byte
//! strings and keys sort in byte order, so the database layer's order-preserving key codec
//! turns range scans into query order. redb takes an exclusive lock on the file: a second
//! `Store` on the same directory fails with [`StorageError::Locked`].
//!
//! # Reads
//!
//! [`Store::read`] returns a [`ReadTxn`]: a snapshot of every table as of the latest commit,
//! with `get`, `range`, `prefix` and `len`. Scans are lazy, double-ended iterators
//! ([`ReadRange`]) that read a page at a time. Readers never block the writer or each other.
//!
//! # Writes: the group-commit loop
//!
//! Writes are closures ("jobs") submitted with [`Store::submit`] or [`Store::try_submit`]; each
//! returns a [`Ticket`]. One writer thread per store loops:
//!
//! 1. block for the first queued job, then take whatever else is queued, up to `batch_max`;
//! 2. open one redb write transaction and run the jobs in submission order, each with a
//!    [`WriteTxn`]: its reads see the batch so far and its own writes; its writes are buffered
//!    in a per-job overlay;
//! 3. after each job: on `Ok`, copy its overlay into the transaction; on `Err` or a panic,
//!    drop the overlay. A failed job leaves no writes behind and later jobs never see them;
//! 4. commit once (one fsync in [`Durability::Fsync`] mode);
//! 5. run the jobs' [`on_commit`](WriteTxn::on_commit) hooks in order, then resolve every
//!    ticket in order. If the transaction cannot be committed, every job of the batch (and
//!    any not yet run) resolves to that [`StorageError`] and nothing of the batch is written.
//!
//! Jobs submitted with [`Store::submit_background`] (work no client waits on: trigger tasks,
//! index builds) wait in a second queue and join a batch after its foreground jobs, only while
//! the batch is younger than a small budget (at least one per batch, so they always progress).
//! A backlog of background work therefore delays a client's write by about that budget plus
//! one background job, not by the whole backlog. A heavy background job
//! ([`Store::submit_background_heavy`]) runs only at the head of a batch, after the foreground
//! jobs queued before it have committed without it.
//!
//! So a ticket never resolves before its writes are durable: acknowledged means durable. While
//! one batch is being fsynced the next one queues up, which is where the batching comes from;
//! no linger delay is added.
//!
//! Per-job rollback is an overlay rather than redb savepoints because
//! `WriteTransaction::ephemeral_savepoint` refuses to run once any table has been opened in
//! the transaction, which is always the case after the first job of a batch.
//!
//! # Durability modes
//!
//! - [`Durability::Fsync`] (default): a ticket resolves after its batch's commit has been
//!   fsynced. A crash (even power loss, given honest disks) loses no acknowledged write.
//! - [`Durability::NoSync`]: the explicit, weaker mode. Batches use redb's non-durable
//!   commits (no fsync), and a ticket resolves as soon as its batch commits. redb keeps such
//!   commits volatile until a durable commit follows, so the writer makes one durable once the
//!   oldest volatile commit is `nosync_lag_ms_max` old (an empty durable commit if idle). A
//!   crash may lose the acknowledged writes of about that last stretch, but never corrupts the
//!   file and never loses part of a batch: on reopen the store is exactly as of some earlier
//!   commit. Closing the store cleanly makes everything durable.
//!
//! # Bounds
//!
//! | what | bound | default |
//! |---|---|---|
//! | jobs waiting in the submit queue | `StoreOptions::write_queue_max` | [`WRITE_QUEUE_MAX`] |
//! | jobs in one batch (one transaction) | `StoreOptions::batch_max` | [`BATCH_MAX`] |
//! | background jobs waiting | `StoreOptions::background_queue_max` | [`BACKGROUND_QUEUE_MAX`] |
//! | background work per batch | `StoreOptions::background_batch_ms_max` | [`BACKGROUND_BATCH_MS_MAX`] |
//! | redb page cache | `StoreOptions::cache_bytes_max` | [`CACHE_BYTES_MAX`] |
//! | time a no-sync commit stays volatile | `StoreOptions::nosync_lag_ms_max` | [`NOSYNC_LAG_MS_MAX`] |
//! | one key plus value | [`ENTRY_BYTES_MAX`] | 1 GiB |
//!
//! At most `write_queue_max + background_queue_max + batch_max` jobs exist at once: queued plus
//! in flight. A full
//! queue blocks [`Store::submit`] and fails [`Store::try_submit`] with
//! [`StorageError::Overloaded`]. A job's overlay holds what the job writes until it returns,
//! so its size is the caller's to bound.
//!
//! # Shutdown
//!
//! [`Store::close`] (or dropping the store) stops accepting jobs, lets the writer commit every
//! job already queued, makes the last commit durable, joins the thread and closes the file.
//!
//! # Tests
//!
//! Unit tests sit beside the code. `tests/crash.rs` re-runs its own test binary as a writer
//! process, kills it with SIGKILL at a random moment, reopens the store and checks that every
//! write the child had acknowledged is there, and that the tables a job wrote together agree.
//! Some cycles kill the next child while it repairs the crashed file. It runs 20 cycles by
//! default (a few seconds); `HERALD_CRASH_CYCLES=1000 cargo test -p herald-storage --test
//! crash` runs more (the slow suite, `HERALD_SLOW=1 scripts/test`, does that). A second test
//! kills a no-sync child and checks that only about the last `nosync_lag_ms_max` of
//! acknowledged writes can be lost. SIGKILL tests process crashes; surviving power loss rests
//! on redb's fsync-based commit, which these tests cannot simulate.

mod error;
mod read;
mod store;
mod tables;
mod write;
mod writer;

pub use error::{StorageError, WriteError};
pub use read::{Entry, ReadRange, ReadTxn};
pub use store::{Store, FILE_NAME};
pub use tables::{decode_u64, encode_u64, Table, ENTRY_BYTES_MAX, TABLE_COUNT};
pub use write::{WriteRange, WriteTxn};
pub use writer::{MetricsSnapshot, Ticket, TicketFuture};

/// Default bound on jobs waiting for the writer.
pub const WRITE_QUEUE_MAX: usize = 4096;

/// Default bound on jobs per batch, i.e. per redb transaction and fsync.
pub const BATCH_MAX: usize = 1024;

/// Default bound on background jobs waiting for the writer.
pub const BACKGROUND_QUEUE_MAX: usize = 1024;

/// Default time budget, per batch, for background jobs after the foreground ones.
pub const BACKGROUND_BATCH_MS_MAX: u64 = 4;

/// Default size of redb's page cache, in bytes (redb's own default).
pub const CACHE_BYTES_MAX: usize = 1 << 30;

/// Default bound, in no-sync mode, on how long a commit stays non-durable.
pub const NOSYNC_LAG_MS_MAX: u64 = 1000;

/// When a write counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A ticket resolves only after its batch is fsynced. Acknowledged means durable.
    #[default]
    Fsync,
    /// A ticket resolves after its batch commits, without waiting for fsync; a durable commit
    /// follows within about `StoreOptions::nosync_lag_ms_max`. A crash may lose the
    /// acknowledged writes of that last stretch (whole batches, newest first) but never
    /// corrupts the file. Choose it only explicitly, for throughput over durability.
    NoSync,
}

/// How a store is opened. `StoreOptions::default()` is durable with the default bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    pub durability: Durability,
    /// Jobs that may wait for the writer; must be at least 1.
    pub write_queue_max: usize,
    /// Jobs per batch (one transaction, one fsync); must be at least 1.
    pub batch_max: usize,
    /// redb's page cache, in bytes.
    pub cache_bytes_max: usize,
    /// No-sync mode only: the longest a commit stays non-durable, in milliseconds.
    pub nosync_lag_ms_max: u64,
    /// Background jobs that may wait for the writer; must be at least 1.
    pub background_queue_max: usize,
    /// How long a batch keeps taking background jobs after its foreground ones (at least one
    /// background job is taken per batch whatever the budget).
    pub background_batch_ms_max: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::Fsync,
            write_queue_max: WRITE_QUEUE_MAX,
            batch_max: BATCH_MAX,
            cache_bytes_max: CACHE_BYTES_MAX,
            nosync_lag_ms_max: NOSYNC_LAG_MS_MAX,
            background_queue_max: BACKGROUND_QUEUE_MAX,
            background_batch_ms_max: BACKGROUND_BATCH_MS_MAX,
        }
    }
}

impl StoreOptions {
    fn validate(&self) -> Result<(), StorageError> {
        // A zero-capacity sync_channel is a rendezvous, and a zero batch would never commit.
        if self.write_queue_max == 0 || self.batch_max == 0 || self.background_queue_max == 0 {
            return Err(StorageError::InvalidOptions(
                "write_queue_max, batch_max and background_queue_max must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
