//! What the store counts about itself: [`Metrics`] (plain atomics the writer, the log thread,
//! the checkpointer and the mergers update, one method per event) and [`MetricsSnapshot`] (what
//! [`Store::metrics`](crate::Store::metrics) returns and the server's `/metrics` renders), plus
//! the latency [`Histogram`] two of them are.
//!
//! Every counter is defined, documented and updated here; the other modules only say what
//! happened. The Prometheus names live with the server's renderer (`crates/server`), which maps
//! each snapshot field to one name: renaming a field here is an API change, not a metric change.

mod histogram;

pub use histogram::{Histogram, HistogramSnapshot};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::tables::{Table, TABLE_COUNT};

/// The store's counters; cheap to update from any thread and to read at any time.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    commits: AtomicU64,
    commit_failures: AtomicU64,
    jobs_committed: AtomicU64,
    jobs_failed: AtomicU64,
    last_batch_size: AtomicU64,
    checkpoints: AtomicU64,
    durable_checkpoints: AtomicU64,
    layers_bytes: AtomicU64,
    writer_stalls: AtomicU64,
    /// Per table (in [`Table::ALL`] order): entries checkpointed into redb, and the time their
    /// writes took.
    checkpoint_entries: [AtomicU64; TABLE_COUNT],
    checkpoint_nanos: [AtomicU64; TABLE_COUNT],
    /// Time checkpoints spent committing their redb transactions (page writes, and the sync of
    /// durable ones).
    checkpoint_commit_nanos: AtomicU64,
    /// Time checkpoints waited for redb's one write transaction (held by a merge's chunk).
    checkpoint_wait_nanos: AtomicU64,
    /// Index runs listed after the last checkpoint or merge plan, merges done, entries they
    /// read, and time.
    index_runs: AtomicU64,
    run_merges: AtomicU64,
    run_merge_entries: AtomicU64,
    run_merge_nanos: AtomicU64,
    /// Bytes appended to the log, and how long each synced append (write and `fdatasync`)
    /// or lone sync took.
    log_bytes: AtomicU64,
    log_sync: Histogram,
    /// How long each durable checkpoint's redb commit (its page writes and sync) took.
    durable_commit: Histogram,
}

impl Metrics {
    /// The writer resolved a batch of `size` jobs, `failed` of which returned `Err` or
    /// panicked; `committed` says whether the batch itself committed.
    pub(crate) fn batch_resolved(&self, size: u64, failed: u64, committed: bool) {
        self.last_batch_size.store(size, Relaxed);
        self.jobs_failed.fetch_add(failed, Relaxed);
        if committed {
            self.commits.fetch_add(1, Relaxed);
            self.jobs_committed.fetch_add(size - failed, Relaxed);
        } else {
            self.commit_failures.fetch_add(1, Relaxed);
        }
    }

    /// A lone log sync or a checkpoint failed (the store fails with it).
    pub(crate) fn commit_failed(&self) {
        self.commit_failures.fetch_add(1, Relaxed);
    }

    /// The writer waited for a checkpoint to free memory before a batch.
    pub(crate) fn writer_stalled(&self) {
        self.writer_stalls.fetch_add(1, Relaxed);
    }

    /// The layers not yet checkpointed now hold `bytes` (an estimate).
    pub(crate) fn set_layers_bytes(&self, bytes: usize) {
        self.layers_bytes.store(bytes as u64, Relaxed);
    }

    /// A checkpoint began its redb transaction after waiting `waited` for it.
    pub(crate) fn checkpoint_waited(&self, waited: Duration) {
        self.checkpoint_wait_nanos.fetch_add(nanos(waited), Relaxed);
    }

    /// A checkpoint wrote `entries` entries of `table` in `took`.
    pub(crate) fn checkpoint_wrote(&self, table: Table, entries: u64, took: Duration) {
        self.checkpoint_entries[table.index()].fetch_add(entries, Relaxed);
        self.checkpoint_nanos[table.index()].fetch_add(nanos(took), Relaxed);
    }

    /// A checkpoint's redb commit took `took`; a durable one is also a histogram observation.
    pub(crate) fn checkpoint_committed(&self, took: Duration, durable: bool) {
        if durable {
            self.durable_commit.observe(took);
        }
        self.checkpoint_commit_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// A checkpoint's layers left the snapshot (it is counted once readers no longer need
    /// them).
    pub(crate) fn checkpoint_done(&self) {
        self.checkpoints.fetch_add(1, Relaxed);
    }

    /// A durable checkpoint is done (log segments it covers may go).
    pub(crate) fn durable_checkpoint_done(&self) {
        self.durable_checkpoints.fetch_add(1, Relaxed);
    }

    /// The store lists `runs` index runs.
    pub(crate) fn set_index_runs(&self, runs: usize) {
        self.index_runs.store(runs as u64, Relaxed);
    }

    /// A merge of index runs read `entries` entries in `took`.
    pub(crate) fn run_merged(&self, entries: u64, took: Duration) {
        self.run_merges.fetch_add(1, Relaxed);
        self.run_merge_entries.fetch_add(entries, Relaxed);
        self.run_merge_nanos.fetch_add(nanos(took), Relaxed);
    }

    /// The log thread appended `bytes` to the log.
    pub(crate) fn log_appended(&self, bytes: u64) {
        self.log_bytes.fetch_add(bytes, Relaxed);
    }

    /// A synced append or a lone sync of the log took `took`.
    pub(crate) fn log_synced(&self, took: Duration) {
        self.log_sync.observe(took);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        // Relaxed is enough: a waiter that needs the counters of its own batch is ordered after
        // the update by the reply channel.
        MetricsSnapshot {
            commits: self.commits.load(Relaxed),
            commit_failures: self.commit_failures.load(Relaxed),
            jobs_committed: self.jobs_committed.load(Relaxed),
            jobs_failed: self.jobs_failed.load(Relaxed),
            last_batch_size: self.last_batch_size.load(Relaxed),
            checkpoints: self.checkpoints.load(Relaxed),
            durable_checkpoints: self.durable_checkpoints.load(Relaxed),
            layers_bytes: self.layers_bytes.load(Relaxed),
            writer_stalls: self.writer_stalls.load(Relaxed),
            checkpoint_entries: self.checkpoint_entries.each_ref().map(|a| a.load(Relaxed)),
            checkpoint_nanos: self.checkpoint_nanos.each_ref().map(|a| a.load(Relaxed)),
            checkpoint_commit_nanos: self.checkpoint_commit_nanos.load(Relaxed),
            checkpoint_wait_nanos: self.checkpoint_wait_nanos.load(Relaxed),
            index_runs: self.index_runs.load(Relaxed),
            disk_full: false,
            index_run_merges: self.run_merges.load(Relaxed),
            index_run_merge_entries: self.run_merge_entries.load(Relaxed),
            index_run_merge_nanos: self.run_merge_nanos.load(Relaxed),
            log_bytes: self.log_bytes.load(Relaxed),
            log_sync: self.log_sync.snapshot(),
            durable_commit: self.durable_commit.snapshot(),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A snapshot of the store's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// Batches committed (one WAL append, and one fsync in `Fsync` mode, each).
    pub commits: u64,
    /// Batches whose commit failed (every job in them got the error), and failed checkpoints.
    pub commit_failures: u64,
    /// Jobs whose writes were committed.
    pub jobs_committed: u64,
    /// Jobs that returned `Err` or panicked (their writes were discarded).
    pub jobs_failed: u64,
    /// How many jobs the most recent batch held.
    pub last_batch_size: u64,
    /// Checkpoints done: committed batches applied to redb in one transaction.
    pub checkpoints: u64,
    /// Of those, the durable ones (redb synced; log segments they cover may be deleted).
    pub durable_checkpoints: u64,
    /// Memory held by committed batches not yet checkpointed (an estimate), in bytes.
    pub layers_bytes: u64,
    /// Times the writer waited for a checkpoint because the layers held `layers_bytes_max`.
    pub writer_stalls: u64,
    /// Per table (in [`Table::ALL`] order): entries checkpointed into redb (after the newest of
    /// each key was kept), and nanoseconds their inserts and removes took.
    pub checkpoint_entries: [u64; TABLE_COUNT],
    pub checkpoint_nanos: [u64; TABLE_COUNT],
    /// Nanoseconds checkpoints spent committing their redb transactions.
    pub checkpoint_commit_nanos: u64,
    /// Nanoseconds checkpoints waited for redb's write transaction, which merges take too.
    pub checkpoint_wait_nanos: u64,
    /// Index runs the store holds (as of the last checkpoint).
    pub index_runs: u64,
    /// The disk is full: writes are refused until space is freed (`space.rs`). Filled in by
    /// `Store::metrics`.
    pub disk_full: bool,
    /// Merges of index runs done, the entries they read, and the nanoseconds they took
    /// (reading, writing and committing).
    pub index_run_merges: u64,
    pub index_run_merge_entries: u64,
    pub index_run_merge_nanos: u64,
    /// Bytes appended to the write-ahead log.
    pub log_bytes: u64,
    /// Each synced log append (write and `fdatasync`: what a batch waits for in `Fsync`
    /// mode), and each lone sync.
    pub log_sync: HistogramSnapshot,
    /// Each durable checkpoint's redb commit: writing the pages non-durable checkpoints left in
    /// redb's buffer, and syncing the file. The log's syncs meanwhile share the disk with it.
    pub durable_commit: HistogramSnapshot,
}

impl MetricsSnapshot {
    /// Per table: its name, the entries checkpointed into it, and the nanoseconds that took.
    pub fn checkpoint_tables(&self) -> impl Iterator<Item = (&'static str, u64, u64)> + '_ {
        Table::ALL.iter().map(|t| {
            (
                t.name(),
                self.checkpoint_entries[t.index()],
                self.checkpoint_nanos[t.index()],
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_lands_in_its_fields() {
        let m = Metrics::default();
        m.batch_resolved(5, 2, true);
        m.batch_resolved(3, 1, false);
        m.commit_failed();
        m.writer_stalled();
        m.set_layers_bytes(1000);
        m.checkpoint_waited(Duration::from_nanos(7));
        m.checkpoint_wrote(Table::Log, 4, Duration::from_nanos(9));
        m.checkpoint_committed(Duration::from_nanos(11), false);
        m.checkpoint_committed(Duration::from_nanos(13), true);
        m.checkpoint_done();
        m.durable_checkpoint_done();
        m.set_index_runs(6);
        m.run_merged(100, Duration::from_nanos(17));
        m.log_appended(64);
        m.log_synced(Duration::from_millis(1));
        let s = m.snapshot();
        let mut entries = [0; TABLE_COUNT];
        entries[Table::Log.index()] = 4;
        let mut nanos = [0; TABLE_COUNT];
        nanos[Table::Log.index()] = 9;
        assert_eq!(
            (
                s.commits,
                s.commit_failures,
                s.jobs_committed,
                s.jobs_failed
            ),
            (1, 2, 3, 3)
        );
        assert_eq!(s.last_batch_size, 3);
        assert_eq!((s.checkpoints, s.durable_checkpoints), (1, 1));
        assert_eq!((s.layers_bytes, s.writer_stalls), (1000, 1));
        assert_eq!((s.checkpoint_entries, s.checkpoint_nanos), (entries, nanos));
        assert_eq!(
            (s.checkpoint_commit_nanos, s.checkpoint_wait_nanos),
            (24, 7)
        );
        assert_eq!(s.durable_commit.count(), 1);
        assert_eq!(
            (s.index_runs, s.index_run_merges, s.index_run_merge_entries),
            (6, 1, 100)
        );
        assert_eq!(s.index_run_merge_nanos, 17);
        assert_eq!((s.log_bytes, s.log_sync.count()), (64, 1));
        let log = s.checkpoint_tables().find(|t| t.0 == "log");
        assert_eq!(log, Some(("log", 4, 9)));
    }
}
