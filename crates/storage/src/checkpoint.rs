//! The state the writer, the checkpointer and readers share ([`Shared`]: the current
//! [`Snapshot`], the memory the layers hold, failure), and the checkpointer thread, which
//! applies committed layers to redb in large transactions and then drops them.
//!
//! Why: redb's copy-on-write B-tree copies, writes and checksums every page a transaction
//! touches. A batch's documents and their index entries land on hundreds of random leaves, so
//! committing every batch to redb rewrote a page for nearly every entry, and that was most of
//! the writer's time. Logging the batch to the WAL and checkpointing many batches at once
//! touches each page once per checkpoint instead of once per batch.
//!
//! Most checkpoints commit to redb without durability (`Durability::None`: the dirty pages stay
//! in redb's write buffer, nothing is written to the file or synced), and one every
//! `durable_interval` is durable. Pages that several checkpoints touch in between are written
//! once. Only a durable checkpoint lets log segments go: after a crash redb reopens at its last
//! durable checkpoint, and the log holds every batch after it.

use std::collections::binary_heap::{BinaryHeap, PeekMut};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::layer::{Base, Filter, Layer, Snapshot};
use crate::metrics::Metrics;
use crate::runs;
use crate::runs::merger::{Merges, RUNS_MAX};
use crate::tables::{Table, STATE, STATE_CHECKPOINT};
use crate::wal::Segments;
use crate::StorageError;

/// Merger threads. Each takes the newest stretch of runs that is due and not being merged, so
/// while one is in a long merge of large runs another keeps merging the small new ones. With
/// one, under sustained ingest the level-0 runs checkpoints keep writing piled up behind such a
/// merge until `RUNS_MAX`, where the checkpointer merges before it returns and writes wait for
/// it (then the layers reached their bound too).
/// The last of them takes only runs of levels below [`SMALL_LEVELS`]: with a checkpoint (and so
/// a new run) every 50 ms, two mergers both in long merges of large runs let the new ones reach
/// `RUNS_MAX` within a second.
const MERGERS: usize = 3;
/// The levels the last merger thread merges (runs of up to ~16 checkpoints' entries).
const SMALL_LEVELS: u32 = 2;

/// A checkpoint due by age waits for the writer to be idle this long (at most the interval),
/// for at most `StoreOptions::checkpoint_defer_factor` intervals of age in all.
const IDLE: Duration = Duration::from_millis(50);

/// Whether layers whose oldest is `age` old, the newest `idle_for`, are due for a checkpoint by
/// age: `None` if so, else how long to wait before asking again. Due once `interval` old and
/// the writer has been idle for [`IDLE`] (or `interval`, if shorter), or in any case once
/// `defer` intervals old: under continuous writes checkpoints are fewer and larger (each
/// B-tree page is copied fewer times), and a burst's checkpoint runs in the quiet after it
/// rather than in the next burst. With `defer` 1 a checkpoint is due once `interval` old.
fn due_by_age(
    age: Duration,
    idle_for: Duration,
    interval: Duration,
    defer: u32,
) -> Option<Duration> {
    let deferred_max = interval.saturating_mul(defer.max(1));
    let idle = IDLE.min(interval);
    if age >= deferred_max || (age >= interval && idle_for >= idle) {
        return None;
    }
    let wait = if age < interval {
        interval - age
    } else {
        (deferred_max - age).min(idle - idle_for)
    };
    Some(wait.max(Duration::from_millis(1)))
}

/// When to checkpoint, and how much memory the layers may hold.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Checkpoint once the layers hold this many bytes...
    pub(crate) checkpoint_bytes: usize,
    /// ...or once the oldest layer is this old.
    pub(crate) checkpoint_interval: Duration,
    /// The writer waits before a batch while the layers hold this many bytes.
    pub(crate) layers_bytes_max: usize,
    /// The longest redb goes without a durable checkpoint while a non-durable one is pending
    /// (zero: every checkpoint is durable).
    pub(crate) durable_interval: Duration,
    /// How many intervals of age a checkpoint may wait for a pause in the writes
    /// ([`due_by_age`]; 1: none).
    pub(crate) defer: u32,
}

/// What the writer, the checkpointer and [`Store::read`](crate::Store::read) share.
pub(crate) struct Shared {
    state: Mutex<State>,
    // Signalled when layers are published or checkpointed, a checkpoint is asked for, the
    // writer waits for room, the store fails or closes.
    changed: Condvar,
    limits: Limits,
    metrics: Arc<Metrics>,
}

struct State {
    /// What a new reader sees: redb as of the last checkpoint plus the layers after it.
    snapshot: Arc<Snapshot>,
    /// The sum of the bytes of `snapshot.layers`.
    layers_bytes: usize,
    /// The writer is waiting for a checkpoint to free memory.
    writer_waiting: bool,
    /// The writer has stopped: checkpoint everything and exit.
    closing: bool,
    /// Set by the first failure to log or checkpoint; every later batch fails with it.
    failed: Option<StorageError>,
    /// Checkpoints asked for by [`Shared::checkpoint_now`], and how many of them are done.
    requested: u64,
    served: u64,
}

impl Shared {
    pub(crate) fn new(base: Base, limits: Limits, metrics: Arc<Metrics>) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                snapshot: Arc::new(Snapshot {
                    base: Arc::new(base),
                    layers: Vec::new(),
                    filter: Arc::new(Filter::new(Filter::words_for(limits.checkpoint_bytes))),
                    covered: 0,
                }),
                layers_bytes: 0,
                writer_waiting: false,
                closing: false,
                failed: None,
                requested: 0,
                served: 0,
            }),
            changed: Condvar::new(),
            limits,
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The current snapshot: everything committed so far.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.lock().snapshot.clone()
    }

    /// The current snapshot plus `pending`, a batch the writer has logged but not yet
    /// published (its sync may still be under way): what the writer's next batch reads.
    pub(crate) fn snapshot_with(&self, pending: Option<&Arc<Layer>>) -> Arc<Snapshot> {
        let current = self.snapshot();
        match pending {
            None => current,
            Some(layer) => {
                let mut layers = Vec::with_capacity(current.layers.len() + 1);
                layers.extend(current.layers.iter().cloned());
                layers.push(layer.clone());
                Arc::new(Snapshot {
                    base: current.base.clone(),
                    layers,
                    filter: current.filter.clone(),
                    covered: current.covered,
                })
            }
        }
    }

    /// Makes a committed batch visible to new snapshots. Writer thread only.
    pub(crate) fn publish(&self, layer: Arc<Layer>) {
        let bytes = layer.bytes;
        let mut state = self.lock();
        // Into the generation's filter before any snapshot says the filter covers it (under
        // the lock, so a checkpoint cannot start a new generation in between).
        state.snapshot.filter.add(&layer);
        let mut layers = Vec::with_capacity(state.snapshot.layers.len() + 1);
        layers.extend(state.snapshot.layers.iter().cloned());
        layers.push(layer);
        // The checkpointer sleeps without a deadline while there are no layers, and until the
        // oldest one is due otherwise; wake it when that changes.
        let threshold = self.limits.checkpoint_bytes;
        let wake = layers.len() == 1
            || (state.layers_bytes < threshold && state.layers_bytes + bytes >= threshold);
        let snapshot = Arc::new(Snapshot {
            base: state.snapshot.base.clone(),
            covered: layers.len(),
            layers,
            filter: state.snapshot.filter.clone(),
        });
        let old = std::mem::replace(&mut state.snapshot, snapshot);
        state.layers_bytes += bytes;
        self.metrics.set_layers_bytes(state.layers_bytes);
        drop(state);
        drop(old);
        if wake {
            self.changed.notify_all();
        }
    }

    /// Blocks the writer while the layers hold `layers_bytes_max` or more (back-pressure: the
    /// checkpointer frees memory); fails once the store has failed.
    pub(crate) fn wait_for_room(&self) -> Result<(), StorageError> {
        let mut state = self.lock();
        let mut stalled = false;
        loop {
            if let Some(err) = &state.failed {
                return Err(err.clone());
            }
            if state.layers_bytes < self.limits.layers_bytes_max {
                break;
            }
            if !stalled {
                stalled = true;
                self.metrics.writer_stalled();
            }
            state.writer_waiting = true;
            self.changed.notify_all();
            state = self.wait(state);
        }
        state.writer_waiting = false;
        Ok(())
    }

    /// The store's failure, if it has failed.
    pub(crate) fn failure(&self) -> Option<StorageError> {
        self.lock().failed.clone()
    }

    /// Records the store's first failure: later batches fail with it, readers carry on.
    pub(crate) fn fail(&self, err: StorageError) {
        self.lock().failed.get_or_insert(err);
        self.changed.notify_all();
    }

    /// Asks for a checkpoint of everything committed so far and waits for it.
    pub(crate) fn checkpoint_now(&self) -> Result<(), StorageError> {
        let mut state = self.lock();
        state.requested += 1;
        let mine = state.requested;
        self.changed.notify_all();
        loop {
            if state.served >= mine {
                return Ok(());
            }
            if let Some(err) = &state.failed {
                return Err(err.clone());
            }
            state = self.wait(state);
        }
    }

    /// The writer has stopped: the checkpointer checkpoints what is left and exits.
    pub(crate) fn close(&self) {
        self.lock().closing = true;
        self.changed.notify_all();
    }
}

/// The newest entry of each key `layers` (oldest first) hold in `table`, in key order: what a
/// checkpoint writes. A k-way merge of the layers' maps, which are sorted already: each key is
/// read once, in order, and compared only with the other layers' current keys (a heap of one
/// per layer), so a checkpoint of n entries in k layers costs about n log k comparisons of keys
/// that are in the cache. Copying every key into one buffer and sorting it (before) cost n log n
/// comparisons and, above all, faulting in fresh pages for that buffer at every checkpoint, a
/// large share of the checkpointer's time under heavy ingest.
fn newest_sorted(layers: &[Arc<Layer>], table: Table) -> Vec<(&[u8], Option<&[u8]>)> {
    let entries = layers.iter().map(|l| l.changes.table(table).len()).sum();
    let mut out = Vec::with_capacity(entries);
    let mut iters: Vec<_> = layers
        .iter()
        .map(|l| l.changes.table(table).iter())
        .collect();
    let mut heap = BinaryHeap::with_capacity(iters.len());
    for (layer, iter) in iters.iter_mut().enumerate() {
        if let Some((key, value)) = iter.next() {
            heap.push(Head {
                key,
                value: value.as_deref(),
                layer,
            });
        }
    }
    while let Some(mut top) = heap.peek_mut() {
        let head = *top;
        // Equal keys come newest layer first: the first one wins, the older ones are skipped.
        if out
            .last()
            .is_none_or(|(key, _)| *key != head.key.as_slice())
        {
            out.push((head.key.as_slice(), head.value));
        }
        match iters[head.layer].next() {
            Some((key, value)) => {
                *top = Head {
                    key,
                    value: value.as_deref(),
                    layer: head.layer,
                }
            }
            None => drop(PeekMut::pop(top)),
        }
    }
    out
}

/// One layer's current entry in [`newest_sorted`]'s merge. The heap's greatest is the smallest
/// key and, among equal keys, the newest layer.
#[derive(Clone, Copy)]
struct Head<'a> {
    key: &'a Vec<u8>,
    value: Option<&'a [u8]>,
    layer: usize,
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(self.key).then(self.layer.cmp(&other.layer))
    }
}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Head<'_> {}

/// The checkpointer thread: applies layers to redb and then drops them from the snapshot.
pub(crate) struct Checkpointer {
    pub(crate) shared: Arc<Shared>,
    pub(crate) db: Arc<redb::Database>,
    /// `None` for in-memory stores, which have no log.
    pub(crate) segments: Option<Arc<Segments>>,
    /// The redb file (`None` in memory), for starting the writeback of what a non-durable
    /// checkpoint wrote (see [`start_writeback`]).
    pub(crate) file: Option<Box<dyn crate::vfs::VFile>>,
    /// Merging index runs (and their parsed metadata, shared with every [`Base`]).
    pub(crate) merges: Arc<Merges>,
}

/// What the checkpointer does next.
struct Job {
    /// The layers to apply, oldest first; may be empty for a durable-only checkpoint.
    layers: Vec<Arc<Layer>>,
    /// The forced checkpoint request this job serves.
    request: u64,
    /// Commit durably (and then delete the log segments it covers).
    durable: bool,
}

/// The checkpointer's record of what redb holds.
struct Progress {
    /// The last batch applied to redb, durably or not.
    applied: u64,
    /// The last batch applied durably: what redb reopens at after a crash.
    durable: u64,
    /// When the oldest non-durable checkpoint after `durable` committed.
    pending_since: Option<Instant>,
}

impl Checkpointer {
    /// Checkpoints whenever one is due until the store closes, then checkpoints everything
    /// left, with a merger thread merging index runs meanwhile. Returns the store's failure,
    /// if it had one.
    pub(crate) fn run(self) -> Result<(), StorageError> {
        let mut wakes = Vec::with_capacity(MERGERS);
        let mut mergers = Vec::with_capacity(MERGERS);
        for i in 0..MERGERS {
            let top = if i + 1 == MERGERS {
                SMALL_LEVELS
            } else {
                u32::MAX
            };
            let (wake, woken) = std::sync::mpsc::sync_channel(1);
            let merges = self.merges.clone();
            let shared = self.shared.clone();
            let merger = std::thread::Builder::new()
                .name("herald-merger".into())
                .spawn(move || {
                    // Background work at nice 10 while runs are few (`Merges::run`, `pace`).
                    if let Err(err) = merges.run(woken, top) {
                        shared.fail(err);
                    }
                })?;
            wakes.push(wake);
            mergers.push(merger);
        }
        let result = self.checkpoints(&wakes);
        drop(wakes);
        let mut merged = Ok(());
        for merger in mergers {
            if merger.join().is_err() {
                merged = Err(StorageError::Internal(
                    "the index run merger panicked".into(),
                ));
            }
        }
        result.and(merged)?;
        // Merges that committed after the final checkpoint are not durable yet: one empty
        // durable commit makes them so, so a closed store reopens exactly as it was left.
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)?;
        txn.set_quick_repair(true);
        txn.commit()?;
        Ok(())
    }

    fn checkpoints(&self, wake: &[SyncSender<()>]) -> Result<(), StorageError> {
        let mut progress = Progress {
            applied: 0,
            durable: 0,
            pending_since: None,
        };
        while let Some(job) = self.next_job(&progress)? {
            let Job {
                layers,
                request,
                durable,
            } = job;
            let last = layers.last().map_or(progress.applied, |l| l.batch);
            // A panic (a bug) fails the store like an error would, instead of leaving writers
            // and forced checkpoints waiting for a thread that is gone.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.apply(&layers, last, durable, wake)
            }))
            .unwrap_or_else(|_| Err(StorageError::Internal("the checkpointer panicked".into())));
            // The next generation's filter, allocated (1 MiB by default) outside the lock.
            let filter = Filter::new(Filter::words_for(self.shared.limits.checkpoint_bytes));
            let mut state = self.shared.lock();
            match result {
                Ok(base) => {
                    let remaining: Vec<Arc<Layer>> = state
                        .snapshot
                        .layers
                        .iter()
                        .filter(|layer| layer.batch > last)
                        .cloned()
                        .collect();
                    // A new generation: the layers left (those published while this checkpoint
                    // ran), and those published from now on.
                    remaining.iter().for_each(|layer| filter.add(layer));
                    let snapshot = Arc::new(Snapshot {
                        base: Arc::new(base),
                        covered: remaining.len(),
                        layers: remaining,
                        filter: Arc::new(filter),
                    });
                    let old = std::mem::replace(&mut state.snapshot, snapshot);
                    state.layers_bytes -= layers.iter().map(|l| l.bytes).sum::<usize>();
                    if !durable {
                        state.served = state.served.max(request);
                    }
                    let metrics = &self.shared.metrics;
                    metrics.set_layers_bytes(state.layers_bytes);
                    metrics.checkpoint_done();
                    drop(state);
                    self.shared.changed.notify_all();
                    drop(old);
                    drop(layers);
                    progress.applied = last;
                    if durable {
                        progress.durable = last;
                        progress.pending_since = None;
                        self.shared.metrics.durable_checkpoint_done();
                        if let Some(segments) = &self.segments {
                            // A segment that cannot be deleted now is retried after the next
                            // durable checkpoint; recovery skips its records meanwhile.
                            let _ = segments.delete_covered(progress.durable);
                        }
                        // A forced checkpoint returns once the segments it covers are gone.
                        let mut state = self.shared.lock();
                        state.served = state.served.max(request);
                        drop(state);
                        self.shared.changed.notify_all();
                    } else {
                        progress.pending_since.get_or_insert_with(Instant::now);
                    }
                }
                Err(err) => {
                    self.shared.metrics.commit_failed();
                    // redb refuses its file after a failed write or sync: say what to do.
                    let err = match err {
                        StorageError::Io(e) => StorageError::Io(Arc::new(std::io::Error::new(
                            e.kind(),
                            format!(
                                "a checkpoint failed ({e}); the store refuses writes until it \
                                 is reopened (restart the server), which replays the log"
                            ),
                        ))),
                        other => other,
                    };
                    state.failed.get_or_insert(err);
                    drop(state);
                    self.shared.changed.notify_all();
                }
            }
        }
        if let Some(segments) = &self.segments {
            // Closing: every batch is durably in redb now, and the writer has closed its segment.
            segments.delete_covered(u64::MAX)?;
            // Nor a recycled segment: a closed store leaves no log behind.
            segments.remove_stale_spare()?;
        }
        Ok(())
    }

    /// Waits until a checkpoint is due; returns it, or `None` once closing with nothing left
    /// (everything applied durably).
    fn next_job(&self, progress: &Progress) -> Result<Option<Job>, StorageError> {
        let shared = &self.shared;
        let limits = &shared.limits;
        let mut state = shared.lock();
        loop {
            if let Some(err) = &state.failed {
                if state.closing {
                    return Err(err.clone());
                }
                state = shared.wait(state);
                continue;
            }
            // Closing and forced checkpoints are durable; otherwise a checkpoint is durable
            // once the oldest non-durable one has waited `durable_interval`.
            let durable_due = progress.pending_since.map(|t| t.elapsed());
            let forced = state.closing || state.requested > state.served;
            // A pending non-durable checkpoint has waited long enough for its durable one.
            let overdue = durable_due.is_some_and(|d| d >= limits.durable_interval);
            let durable = forced || limits.durable_interval.is_zero() || overdue;
            let Some(oldest) = state.snapshot.layers.first() else {
                if progress.pending_since.is_some() && durable {
                    return Ok(Some(Job {
                        layers: Vec::new(),
                        request: state.requested,
                        durable: true,
                    }));
                }
                if state.served < state.requested {
                    state.served = state.requested;
                    shared.changed.notify_all();
                }
                if state.closing {
                    return Ok(None);
                }
                state = match durable_due {
                    Some(waited) => {
                        let rest = limits.durable_interval.saturating_sub(waited);
                        shared
                            .changed
                            .wait_timeout(state, rest)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    None => shared.wait(state),
                };
                continue;
            };
            let age = oldest.created.elapsed();
            let interval = limits.checkpoint_interval;
            let idle_for = state
                .snapshot
                .layers
                .last()
                .map_or(age, |l| l.created.elapsed());
            let by_age = due_by_age(age, idle_for, interval, limits.defer);
            let due = forced
                || overdue
                || state.writer_waiting
                || state.layers_bytes >= limits.checkpoint_bytes
                || by_age.is_none();
            if due {
                return Ok(Some(Job {
                    layers: state.snapshot.layers.clone(),
                    request: state.requested,
                    durable,
                }));
            }
            let wait = by_age.expect("not due");
            state = shared
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Applies `layers` (oldest first, the last one being batch `last`) to redb in one
    /// transaction that also records `last` as checkpointed, durable or not; returns redb's new
    /// state (a non-durable commit is visible to readers at once).
    fn apply(
        &self,
        layers: &[Arc<Layer>],
        last: u64,
        durable: bool,
        wake: &[SyncSender<()>],
    ) -> Result<Base, StorageError> {
        let waited = Instant::now();
        let mut txn = self.db.begin_write()?;
        self.shared.metrics.checkpoint_waited(waited.elapsed());
        if durable {
            txn.set_durability(redb::Durability::Immediate)?;
            // Saves redb's allocator state with the commit, so that a crashed file reopens
            // without a full scan. Too costly per batch; a few times a second it is cheap.
            txn.set_quick_repair(true);
        } else {
            txn.set_durability(redb::Durability::None)?;
        }
        for table in Table::ALL {
            let entries = newest_sorted(layers, table);
            if entries.is_empty() {
                continue;
            }
            let started = Instant::now();
            let count = entries.len() as u64;
            crate::placement::write_sorted(&txn, table, entries)?;
            self.shared
                .metrics
                .checkpoint_wrote(table, count, started.elapsed());
        }
        {
            let mut state = txn.open_table(STATE)?;
            state.insert(STATE_CHECKPOINT, last)?;
        }
        let started = Instant::now();
        txn.commit()?;
        if !durable {
            if let Some(file) = &self.file {
                file.start_writeback();
            }
        }
        self.shared
            .metrics
            .checkpoint_committed(started.elapsed(), durable);
        let base = Base::open(&*self.db, &self.merges.cache)?;
        self.merges.note_runs(base.runs.len());
        if base.runs.len() < RUNS_MAX {
            // The merger merges in the background; a full channel means it is awake already.
            if base.runs.len() >= runs::MERGE_WIDTH {
                for merger in wake {
                    let _ = merger.try_send(());
                }
            }
            return Ok(base);
        }
        // Merges fell behind: merge here until back under the bound (this checkpoint's
        // successor, and at the layers' bound the writer, wait meanwhile).
        while self.merges.merge_once(u32::MAX)? {
            let base = Base::open(&*self.db, &self.merges.cache)?;
            if base.runs.len() < RUNS_MAX {
                return Ok(base);
            }
        }
        Base::open(&*self.db, &self.merges.cache)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod due_tests {
    use super::{due_by_age, IDLE};
    const DEFER_FACTOR: u32 = 5;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn due_by_age5(age: Duration, idle_for: Duration, interval: Duration) -> Option<Duration> {
        due_by_age(age, idle_for, interval, DEFER_FACTOR)
    }

    #[test]
    fn without_deferral_a_checkpoint_is_due_at_the_interval() {
        let interval = ms(50);
        assert_eq!(due_by_age(ms(20), ms(0), interval, 1), Some(ms(30)));
        // Writes keep coming: due all the same.
        assert_eq!(due_by_age(ms(50), ms(0), interval, 1), None);
        assert_eq!(due_by_age(ms(80), ms(0), interval, 0), None);
    }

    #[test]
    fn a_checkpoint_waits_for_the_interval_then_for_a_quiet_moment_within_a_bound() {
        let interval = ms(200);
        // Younger than the interval: wait for the rest of it.
        assert_eq!(due_by_age5(ms(50), ms(0), interval), Some(ms(150)));
        // Old enough, and the writer has been quiet long enough: now.
        assert_eq!(due_by_age5(ms(200), IDLE, interval), None);
        assert_eq!(due_by_age5(ms(400), ms(300), interval), None);
        // Old enough, but writes keep coming: wait for quiet, at most until the bound.
        assert_eq!(due_by_age5(ms(300), ms(10), interval), Some(IDLE - ms(10)));
        assert_eq!(due_by_age5(ms(990), ms(0), interval), Some(ms(10)));
        // At the bound it runs regardless.
        assert_eq!(due_by_age5(interval * DEFER_FACTOR, ms(0), interval), None);
        // A short interval also shortens the quiet it waits for.
        assert_eq!(due_by_age5(ms(1), ms(1), ms(1)), None);
        // Never a zero wait (no busy loop).
        let almost = IDLE - Duration::from_micros(1);
        assert_eq!(due_by_age5(ms(200), almost, interval), Some(ms(1)));
    }
}

#[cfg(test)]
mod newest_tests {
    use super::newest_sorted;
    use crate::layer::{Changes, Layer};
    use crate::Table;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    fn layer(batch: u64, writes: &Writes) -> Arc<Layer> {
        let mut changes = Changes::default();
        for (k, v) in writes {
            changes.table_mut(Table::Index).insert(k.clone(), v.clone());
            // Another table's entries stay out of this table's result.
            changes.table_mut(Table::Docs).insert(b"doc".to_vec(), None);
        }
        Arc::new(Layer::new(batch, changes))
    }

    proptest! {
        /// Against a model: the batches applied to a map in order leave, per key, the value
        /// the newest batch wrote (a delete included), in key order.
        #[test]
        fn the_newest_entry_of_each_key_in_key_order(
            batches in prop::collection::vec(
                prop::collection::vec(
                    (prop::collection::vec(0u8..4, 0..4), prop::option::of(prop::collection::vec(any::<u8>(), 0..3))),
                    0..8,
                ),
                0..6,
            )
        ) {
            let layers: Vec<_> = batches.iter().enumerate().map(|(i, w)| layer(i as u64 + 1, w)).collect();
            let mut model = BTreeMap::new();
            for w in &batches {
                for (k, v) in w {
                    model.insert(k.clone(), v.clone());
                }
            }
            let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = newest_sorted(&layers, Table::Index)
                .into_iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect();
            let want: Vec<_> = model.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
