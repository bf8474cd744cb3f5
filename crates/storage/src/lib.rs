//! Herald's storage layer: named byte tables in one redb file, a write-ahead log, consistent
//! snapshot reads, and one group-commit writer thread per store. It knows nothing of documents
//! or queries.
//!
//! # Why a write-ahead log in front of redb
//!
//! redb is a copy-on-write B-tree: a transaction copies, writes and checksums every page it
//! touches. A document insert writes the document and its index entries, which land on random
//! leaves, so when every batch was its own redb transaction nearly every entry cost a whole
//! page copy plus its write and checksum at commit, and the writer thread spent most of its
//! time in B-tree inserts and commits. Now a batch is made durable by appending one record to a
//! log and syncing it; redb receives the batches later, many at once, on another thread (a
//! checkpoint), so a page touched by many batches is copied and written once per checkpoint
//! instead of once per batch (`herald-bench insert-load 64` measures it; `docs/storage.md`
//! has the figures).
//!
//! # The files and the tables
//!
//! A [`Store`] lives in the directory given to [`Store::open`] (created if missing):
//! `herald.redb`, and write-ahead-log segments `wal-<first batch>.log` beside it. redb is a
//! copy-on-write B-tree store with ACID transactions and MVCC readers; this crate is a thin
//! layer over it, not a page store. The file holds the tables of [`Table`]: `docs`, `index`,
//! `log`, `meta` and `tasks`, plus the crate's own `storage_state` (the number of the last
//! checkpointed batch). The `index` table's entries are kept as sorted runs of compressed
//! blocks in two more redb tables, not as B-tree entries (`runs/`), and the `log` table's as
//! blocks appended in key order with a floor below which keys are deleted (`logblocks.rs`).
//! In each table, keys and values are byte strings and keys sort in byte order, so the
//! database layer's order-preserving key codec turns range scans into query order. redb takes
//! an exclusive lock on the file: a second `Store` on the same directory fails with
//! [`StorageError::Locked`] (which also protects the log).
//!
//! # Writes: the group-commit loop
//!
//! Writes are closures ("jobs") submitted with [`Store::submit`] or [`Store::try_submit`]; each
//! returns a [`Ticket`]. One writer thread per store loops:
//!
//! 1. take the first queued job, then whatever else is queued, up to `batch_max`;
//! 2. run the jobs in submission order, each with a [`WriteTxn`] whose reads see everything
//!    committed (the current snapshot), the batch so far and the job's own writes; its writes
//!    are buffered in a per-job overlay;
//! 3. after each job: on `Ok`, fold its overlay into the batch; on `Err` or a panic, drop the
//!    overlay. A failed job leaves no writes behind and later jobs never see them;
//! 4. hand the batch's changes to the log thread, which appends them as one checksummed record
//!    to the active segment and fdatasyncs it (one sync per batch in [`Durability::Fsync`]);
//! 5. once the record is durable: publish the batch as an immutable in-memory *layer* (new
//!    snapshots see it), run the jobs' [`on_commit`](WriteTxn::on_commit) hooks in order,
//!    then resolve every ticket in order. If the record cannot be written or synced, every job
//!    of the batch (and any not yet run) resolves to that [`StorageError`], nothing of the
//!    batch becomes visible, and the store refuses all later writes (what reached the disk
//!    after a failed write or fsync is unknown); reopen it.
//!
//! Jobs submitted with [`Store::submit_background`] (work no client waits on: trigger tasks,
//! index builds) wait in a second queue. A batch holds client jobs or background jobs, never
//! both, and when both wait the two take turns. A background batch takes more background jobs
//! only while it is younger than a small budget, and stops as soon as a client job waits (it
//! runs at least one, so background work always progresses): a backlog of background work
//! delays a client's write by at most one background job plus its own batch's sync, not by the
//! whole backlog. A heavy background job ([`Store::submit_background_heavy`]) runs only at the
//! head of a batch, after the client jobs queued before it have had a batch without it. The
//! whole policy is one pure type, `writer/lanes.rs`.
//!
//! So a ticket never resolves before its writes are durable: acknowledged means durable. The
//! loop is pipelined: while the log thread syncs batch N, the writer already runs batch N+1's
//! jobs against a view that includes N (and looks, between jobs, for N's sync to finish so
//! that N's tickets do not wait for N+1). If N fails, N+1 fails too. A batch that starts with a
//! heavy background job is not pipelined: N is acknowledged before that job runs. Batches form by
//! themselves while a sync is under way; no linger delay is added.
//!
//! Per-job rollback is an overlay because the batch is not a redb transaction at all any more
//! (and redb's `ephemeral_savepoint` refused to run once a table had been opened anyway).
//!
//! # Reads
//!
//! [`Store::read`] returns a [`ReadTxn`]: redb as of the last checkpoint (one shared read
//! transaction) plus the layers committed after it, taken together under a small mutex, so it
//! is a consistent snapshot of every table as of the latest commit. `get` skips every layer
//! published since the last checkpoint when one shared Bloom filter over their keys rules the
//! key out, and otherwise looks through the layers newest first (a per-layer Bloom filter
//! skips most of them); then redb. `range`
//! and `prefix` are lazy, double-ended merges ([`ReadRange`]) of redb and the layers in which a
//! newer layer's write or delete hides older entries, and a layer's map is only searched once
//! the scan reaches its first (or last) key; `len` is redb's count corrected by one lookup per
//! key the layers mention. Readers never block the writer or each other.
//!
//! # Checkpoints
//!
//! A checkpointer thread applies layers to redb in one transaction, newest value
//! per key, in key order (the `index` table's as one new run, which merger threads later
//! merge with others), and records the last batch it applied in `storage_state` in the same
//! transaction. It then swaps the snapshot new readers get (redb after the checkpoint plus the
//! layers after it) and deletes the log segments the checkpoint covers. It runs when the layers
//! hold `checkpoint_bytes`, when the oldest is `checkpoint_interval_ms` old (with a
//! `checkpoint_defer_factor` above 1, only once the writer has paused for 50 ms or the oldest
//! is that many intervals old), when the writer waits for memory, or on [`Store::checkpoint`]. If a checkpoint fails, the store refuses
//! further writes (like a failed commit); what was committed stays readable and is in the log.
//!
//! # Recovery
//!
//! [`Store::open`] reads the last checkpointed batch from redb, replays every intact log record
//! after it into redb in one transaction, in batch order, records the new checkpoint, and only
//! then deletes the log. A record is checked whole (length, CRC-32, consecutive batch numbers),
//! so a batch applies entirely or not at all. A torn record at the end of the log (the batch
//! whose write or sync the crash interrupted, never acknowledged) is ignored. A damaged record
//! followed by a record that says it had been synced is [`StorageError::Corrupted`]: an
//! acknowledged batch is missing. Replaying records that were written but never acknowledged
//! is allowed: their writers were never told either way. A crash during recovery just
//! repeats it.
//!
//! # Durability modes
//!
//! - [`Durability::Fsync`] (default): a ticket resolves after its batch's log record has been
//!   fdatasynced. A crash (even power loss, given honest disks) loses no acknowledged write.
//! - [`Durability::NoSync`]: the explicit, weaker mode. A ticket resolves once its batch's
//!   record has been written to the log file (the operating system's page cache), before any
//!   sync; the writer syncs the log once the oldest unsynced batch is `nosync_lag_ms_max` old
//!   (alone, if idle by then). A process crash loses nothing; an operating-system crash or power
//!   loss may lose the acknowledged writes of about that last stretch (whole batches, newest
//!   first) but never leaves part of a batch. Closing the store cleanly makes everything
//!   durable. Checkpoints are durable in both modes.
//!
//! # Bounds
//!
//! | what | bound | default |
//! |---|---|---|
//! | jobs waiting in the submit queue | `StoreOptions::write_queue_max` | [`WRITE_QUEUE_MAX`] |
//! | jobs in one batch (one log record and sync) | `StoreOptions::batch_max` | [`BATCH_MAX`] |
//! | background jobs waiting | `StoreOptions::background_queue_max` | [`BACKGROUND_QUEUE_MAX`] |
//! | background work per batch | `StoreOptions::background_batch_ms_max` | [`BACKGROUND_BATCH_MS_MAX`] |
//! | redb page cache | `StoreOptions::cache_bytes_max` | [`CACHE_BYTES_MAX`] |
//! | time a no-sync commit stays volatile | `StoreOptions::nosync_lag_ms_max` | [`NOSYNC_LAG_MS_MAX`] |
//! | layers that trigger a checkpoint, by size | `StoreOptions::checkpoint_bytes` | [`CHECKPOINT_BYTES`] |
//! | layers that trigger a checkpoint, by age | `StoreOptions::checkpoint_interval_ms` | [`CHECKPOINT_INTERVAL_MS`] |
//! | intervals a checkpoint waits for a pause in writes | `StoreOptions::checkpoint_defer_factor` | [`CHECKPOINT_DEFER_FACTOR`] |
//! | a pending non-durable checkpoint's age before a durable one | `StoreOptions::durable_checkpoint_interval_ms` | [`DURABLE_CHECKPOINT_INTERVAL_MS`] |
//! | memory held by layers not yet checkpointed | `StoreOptions::layers_bytes_max` | [`LAYERS_BYTES_MAX`] |
//! | one log segment file | `StoreOptions::wal_segment_bytes` | [`WAL_SEGMENT_BYTES`] |
//! | one key plus value | [`ENTRY_BYTES_MAX`] | 1 GiB |
//! | index runs (past it a checkpoint merges before it returns) | `runs::merger::RUNS_MAX` | 20 |
//!
//! At most `write_queue_max + background_queue_max + 2 * batch_max` jobs exist at once: queued,
//! in flight and being synced. A full queue blocks [`Store::submit`] and fails [`Store::try_submit`] with
//! [`StorageError::Overloaded`]. A job's overlay holds what the job writes until it returns,
//! so its size is the caller's to bound. Layers are counted by an estimate of their memory
//! (keys, values and per-entry overhead); when they hold `layers_bytes_max`, the writer waits
//! for the checkpointer before starting another batch, so they exceed it by at most one batch.
//! Log segments not yet deleted hold about what the layers hold plus one segment.
//!
//! # Shutdown
//!
//! [`Store::close`] (or dropping the store) stops accepting jobs, lets the writer commit every
//! job already queued, syncs the log, checkpoints every layer into redb, deletes the log, joins
//! the threads and closes the file.
//!
//! # Tests
//!
//! Unit tests sit beside the code, among them a property test of reads through random
//! batches, deletes and checkpoints against a `BTreeMap` model, recovery from torn, damaged
//! and out-of-order logs, and the writer waiting on a checkpointer held up by a slow disk.
//! `tests/crash.rs` re-runs its own test binary as a writer process, kills it with SIGKILL at
//! a random moment, reopens the store and checks that every write the child had acknowledged
//! is there, that the tables a job wrote together agree, and that closing leaves no log. Each
//! child checkpoints never (so everything must come back from the log), very often (kills land
//! around checkpoints and segment deletions) or by default; some cycles kill the next child
//! while it replays or repairs. It runs 20 cycles by default (a few seconds);
//! `HERALD_CRASH_CYCLES=1000 cargo test -p herald-storage --test crash` runs more (the slow
//! suite, `HERALD_SLOW=1 scripts/test`, does that). A second test kills a no-sync child and
//! checks that only about the last `nosync_lag_ms_max` of acknowledged writes can be lost.
//! SIGKILL tests process crashes. Full disks, failed syncs, read errors and power loss are
//! simulated on [`FaultFs`]: `tests/faults.rs` has one test per defined behaviour and
//! `tests/fault_schedules.rs` random workloads under random faults (docs/storage.md, "Faults").
//!
//! # Faults
//!
//! `ENOSPC` on the write path refuses the batch with [`StorageError::Full`] and leaves the
//! store as it was (`space.rs`); a failed fsync fails the store (step 5 above); a read error is
//! [`StorageError::Corrupted`] naming the table and key (`read.rs`).
//!
//! # Modules, bottom up
//!
//! A module imports only from the crate root (options and bounds) and the modules above it in
//! this list; there are no import cycles.
//!
//! 1. `error` ([`StorageError`]), `tables` ([`Table`], [`Entry`], a table's pending changes,
//!    key ranges, the u64 codec), `keysort`, `metrics` (every counter and [`MetricsSnapshot`]),
//!    `vfs` ([`Vfs`], the one seam every file operation goes through; [`RealFs`]) and `fault`
//!    ([`FaultFs`], the fault-injecting one tests use); then `space` (the disk-full state, the
//!    reserve, and `RedbFile`, redb's backend wrapped).
//! 2. `runs/` and `logblocks`: the stored forms of the `index` and `log` tables in redb.
//! 3. `placement`: which table is stored how; the one function that writes a table's sorted
//!    entries there (checkpoints and the log's replay).
//! 4. `merge`: lazy, double-ended merged scans over redb, runs, blocks and in-memory maps.
//! 5. `layer`: `Changes`, `Layer`, `Base`, `Snapshot` (reads by the placement).
//! 6. `read` ([`ReadTxn`]) and `write` ([`WriteTxn`]); then `job` (jobs and [`Ticket`]s).
//! 7. `wal/` (records, segments, the log thread, recovery) and then `checkpoint` (the state the
//!    threads share and the checkpointer, which deletes the segments it covers).
//! 8. `writer` (the writer thread) with `writer/lanes` (which jobs a batch takes: pure).
//! 9. `store` ([`Store`]): opens the file, replays the log, starts the threads; `check`
//!    ([`check()`]): `herald check`'s offline verification.
//!
//! `testing` holds helpers the unit tests share.

mod check;
mod checkpoint;
pub mod decoders;
mod error;
mod fault;
mod job;
mod keysort;
mod layer;
mod logblocks;
mod merge;
mod metrics;
mod placement;
mod read;
mod replication;
mod replicator;
mod runs;
mod space;
mod store;
mod tables;
#[cfg(test)]
mod testing;
mod vfs;
mod wal;
mod write;
mod writer;

pub use check::{check, Finding, Report};
pub use error::{StorageError, WriteError};
pub use fault::{run_schedule, schedule_seeds, Fault, FaultFs, Op};
pub use job::{Ticket, TicketFuture};
pub use layer::ReadPoint;
pub use metrics::{Histogram, HistogramSnapshot, MetricsSnapshot};
pub use read::{ReadRange, ReadTxn};
pub use replication::{apply_record, stamp, visit_record, Applied, STAMP_KEY};
pub use replicator::Replicator;
pub use space::RESERVE_NAME;
pub use store::{Store, FILE_NAME};
pub use tables::{decode_u64, encode_u64, Entry, Table, FORMAT_VERSION, TABLE_COUNT};
pub use vfs::{is_no_space, Open, RealFs, VFile, Vfs};
pub use write::{WriteRange, WriteTxn};

/// The largest key plus value, in bytes, that one entry may hold. redb's own ceiling is about
/// 3.75 GiB per pair; this is far below it so that a runaway value fails its own job instead of
/// a whole batch, and far above any document limit the database layer will set.
pub const ENTRY_BYTES_MAX: usize = 1 << 30;

/// Default bound on jobs waiting for the writer.
pub const WRITE_QUEUE_MAX: usize = 4096;

/// Default bound on jobs per batch, i.e. per log record and sync.
pub const BATCH_MAX: usize = 1024;

/// Default bound on background jobs waiting for the writer.
pub const BACKGROUND_QUEUE_MAX: usize = 1024;

/// Default time budget of a background batch: it takes more background jobs only this long after
/// its start.
pub const BACKGROUND_BATCH_MS_MAX: u64 = 4;

/// Default size of redb's page cache, in bytes (redb's own default).
pub const CACHE_BYTES_MAX: usize = 1 << 30;

/// Default bound, in no-sync mode, on how long a commit stays non-durable.
pub const NOSYNC_LAG_MS_MAX: u64 = 1000;

/// Default memory held by committed batches not yet in redb that triggers a checkpoint.
pub const CHECKPOINT_BYTES: usize = 64 << 20;

/// Default age of the oldest committed batch not yet in redb that triggers a checkpoint.
pub const CHECKPOINT_INTERVAL_MS: u64 = 50;

/// Default for how many checkpoint intervals a checkpoint due by age may wait for the writer
/// to pause (1: it does not wait).
pub const CHECKPOINT_DEFER_FACTOR: u32 = 1;

/// Default longest time redb goes without a durable checkpoint while a non-durable one is
/// pending. Checkpoints in between commit to redb without syncing; the log keeps every batch
/// after the last durable one (what a restart after a crash replays). The durable one writes
/// and syncs everything since, and the log's syncs queue behind that sync: the shorter the
/// interval, the shorter the stall, but each sync costs a device cache flush
/// (docs/storage.md, "Durable checkpoints").
pub const DURABLE_CHECKPOINT_INTERVAL_MS: u64 = 250;

/// Default bound on the memory held by committed batches not yet in redb; at it, the writer
/// waits for the checkpointer before starting another batch.
pub const LAYERS_BYTES_MAX: usize = 256 << 20;

/// Default size at which the writer starts a new write-ahead-log segment file.
pub const WAL_SEGMENT_BYTES: u64 = 64 << 20;

/// Default size of the disk-space reserve (`space.rs`): freed when the disk fills, so that the
/// checkpoints of what was committed and a clean shutdown can still write.
pub const RESERVE_BYTES: u64 = 64 << 20;

/// When a write counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A ticket resolves only after its batch is fsynced. Acknowledged means durable.
    #[default]
    Fsync,
    /// A ticket resolves once its batch is written to the log file, without waiting for
    /// fsync; a sync follows within about `StoreOptions::nosync_lag_ms_max`. A process crash
    /// loses nothing; an operating-system crash or power loss may lose the acknowledged writes
    /// of that last stretch (whole batches, newest first) but never leaves part of a batch.
    /// Choose it only explicitly, for throughput over durability.
    NoSync,
}

/// How a store is opened. `StoreOptions::default()` is durable with the default bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    pub durability: Durability,
    /// Jobs that may wait for the writer; must be at least 1.
    pub write_queue_max: usize,
    /// Jobs per batch (one log record, one fsync); must be at least 1.
    pub batch_max: usize,
    /// redb's page cache, in bytes.
    pub cache_bytes_max: usize,
    /// No-sync mode only: the longest a commit stays non-durable, in milliseconds.
    pub nosync_lag_ms_max: u64,
    /// Background jobs that may wait for the writer; must be at least 1.
    pub background_queue_max: usize,
    /// How long a background batch keeps taking background jobs after its start, in ms (at
    /// least one background job is taken per batch whatever the budget).
    pub background_batch_ms_max: u64,
    /// Checkpoint once committed batches not yet in redb hold this many bytes (estimated).
    pub checkpoint_bytes: usize,
    /// Checkpoint once the oldest committed batch not yet in redb is this old, in ms, and (see
    /// `checkpoint_defer_factor`) the writer has paused.
    pub checkpoint_interval_ms: u64,
    /// With a factor above 1, a checkpoint due by age waits for the writer to pause for 50 ms
    /// (or `checkpoint_interval_ms`, if shorter), at most this many intervals of age: fewer,
    /// larger checkpoints under continuous writes. 1: no waiting.
    pub checkpoint_defer_factor: u32,
    /// Make a checkpoint durable once the oldest non-durable one is this old, in ms (0: every
    /// checkpoint is durable). Bounds how much log a restart after a crash replays.
    pub durable_checkpoint_interval_ms: u64,
    /// The most bytes committed batches not yet in redb may hold before the writer waits for
    /// the checkpointer (overshoot: at most one batch).
    pub layers_bytes_max: usize,
    /// Size at which the writer starts a new write-ahead-log segment.
    pub wal_segment_bytes: u64,
    /// The disk-space reserve kept beside the files (0: none); see `space.rs`.
    pub reserve_bytes: u64,
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
            checkpoint_bytes: CHECKPOINT_BYTES,
            checkpoint_interval_ms: CHECKPOINT_INTERVAL_MS,
            checkpoint_defer_factor: CHECKPOINT_DEFER_FACTOR,
            durable_checkpoint_interval_ms: DURABLE_CHECKPOINT_INTERVAL_MS,
            layers_bytes_max: LAYERS_BYTES_MAX,
            wal_segment_bytes: WAL_SEGMENT_BYTES,
            reserve_bytes: RESERVE_BYTES,
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
        if self.checkpoint_bytes == 0 || self.layers_bytes_max == 0 || self.wal_segment_bytes == 0 {
            return Err(StorageError::InvalidOptions(
                "checkpoint_bytes, layers_bytes_max and wal_segment_bytes must be at least 1"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Lowers the calling thread's CPU priority to `nice` (0 normal, 19 lowest), for threads doing
/// work no client waits on, so that threads serving clients run first on a busy machine. Linux
/// only (there a nice value belongs to one thread); elsewhere, and on failure, it does nothing:
/// priority is an optimisation, never needed for correctness. A thread cannot raise its priority
/// again without privileges.
pub fn lower_current_thread_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority has no memory-safety preconditions; who = 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class, for CPU-heavy work no client waits
/// on: such a thread runs when no normal thread wants the core and is preempted at once when
/// one wakes, which a nice value does not promise (a thread at nice 10 or 19 still takes its
/// slice before a client's thread that wakes behind it). Returns whether it took effect;
/// elsewhere, or if refused, it lowers the thread to `fallback_nice` instead.
///
/// Only for threads that hold no lock a client's thread waits for while they compute (an idle
/// thread preempted inside such a lock would hold it until a core is free).
pub fn make_current_thread_idle(fallback_nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call; pid 0 is the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
            return true;
        }
    }
    lower_current_thread_priority(fallback_nice);
    false
}
