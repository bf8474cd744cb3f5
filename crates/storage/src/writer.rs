//! The group-commit writer: the one writer thread's loop (take a batch of queued jobs, run them
//! in order against the current snapshot, have the log thread write the batch's changes to the
//! WAL with one sync, publish them as a layer, then resolve every waiter).
//!
//! Not here: which jobs a batch takes (`writer/lanes.rs`), jobs and tickets (`job.rs`), opening
//! the file and the queues (`store.rs`), what a job can do (`write.rs`), the log (`wal/`),
//! getting layers into redb (`checkpoint.rs`).

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::Shared;
use crate::error::commit_error;
use crate::job::{BackgroundJob, Job, Msg, Ran};
use crate::layer::{Changes, Layer};
use crate::replicator::ReplicatorSlot;
use crate::wal::{LogRequest, LogThread};
use crate::write::{Hook, WriteTxn};
use crate::{Durability, StorageError};
pub(crate) use lanes::Lanes;
use lanes::{Queues, Woke};

mod lanes;

/// Called on the writer thread once a batch's hooks have run (a batch without hooks skips it).
pub(crate) type AfterBatch = Box<dyn Fn() + Send + Sync>;

/// The state of the one writer thread.
pub(crate) struct Writer {
    pub(crate) shared: Arc<Shared>,
    /// Runs once after each committed batch's hooks (see `Store::on_batch_published`).
    pub(crate) after_batch: Arc<std::sync::OnceLock<AfterBatch>>,
    pub(crate) log: LogThread,
    /// The client and background queues.
    pub(crate) channels: Channels,
    /// Set while the writer sleeps on the foreground queue (see `Store::submit_background`).
    pub(crate) sleeping: Arc<std::sync::atomic::AtomicBool>,
    /// Which lane, client or background, each batch's jobs come from ([`Lanes`]).
    pub(crate) lanes: Lanes<Box<dyn Job>>,
    pub(crate) durability: Durability,
    /// No-sync mode only: how long a logged batch may stay non-durable.
    pub(crate) nosync_lag_max: Duration,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The number the next batch that writes something gets.
    pub(crate) next_batch: u64,
    /// Set on a replicated store (see `replication.rs`); the log thread holds it too.
    pub(crate) replicator: ReplicatorSlot,
}

/// A batch whose jobs have run and whose fate is not yet known: its record may be with the
/// log thread.
struct InFlight {
    size: u64,
    ran: Vec<Ran>,
    hooks: Vec<Hook>,
    /// Jobs not run because the store had already failed.
    unrun: Vec<Box<dyn Job>>,
    /// What the batch wrote, if anything: published once logged.
    layer: Option<Arc<Layer>>,
    /// The log thread owes a reply for this batch.
    logged: bool,
    /// The record was synced (no-sync mode decides per batch).
    synced: bool,
    /// Known before the reply: the store had failed, or the batch before this one (whose
    /// writes this one read) failed.
    error: Option<StorageError>,
}

/// What the writer found to do next.
enum Next {
    Jobs(Vec<Box<dyn Job>>),
    /// Nothing queued while a batch is in flight: finish it.
    Idle,
    /// No-sync mode: the oldest unsynced batch reached `nosync_lag_max` while idle.
    SyncDue,
    /// Every sender is gone and the queue is empty.
    Closed,
}

impl Writer {
    /// Serves batches until every sender is gone and the queue is empty, so jobs queued before
    /// `close` still commit; then has the log thread make the log durable and stop.
    ///
    /// Pipelined: while the log thread writes and syncs batch N, the writer runs the jobs of
    /// batch N+1 against a view that includes N. N is published to readers, its hooks run and
    /// its waiters are told only once its record is durable (the writer looks for that between
    /// N+1's jobs); if that fails, N+1 fails too.
    ///
    /// In no-sync mode a batch is acknowledged once written to the log file, before it is
    /// synced; a batch is synced once the oldest unsynced one is `nosync_lag_max` old (alone,
    /// when idle by then). That bounds what an operating-system crash or power loss can take
    /// to about `nosync_lag_max` of acknowledged writes.
    pub(crate) fn run(mut self) -> Result<(), StorageError> {
        // No-sync mode: when the oldest batch not yet synced was logged.
        let mut volatile_since: Option<Instant> = None;
        let mut in_flight: Option<InFlight> = None;
        loop {
            let jobs = match self.next(in_flight.is_some(), volatile_since) {
                Next::Jobs(jobs) => jobs,
                Next::Idle => {
                    let batch = in_flight
                        .take()
                        .expect("idle only while a batch is in flight");
                    let _ = self.finish(batch, None, &mut volatile_since);
                    continue;
                }
                Next::SyncDue => {
                    self.sync();
                    volatile_since = None;
                    continue;
                }
                Next::Closed => break,
            };
            if self.lanes.take_heavy_next() {
                // A heavy job may run for a long time; the batch in flight is acknowledged
                // first rather than after it (this batch gives up pipelining).
                if let Some(previous) = in_flight.take() {
                    let _ = self.finish(previous, None, &mut volatile_since);
                }
            }
            let sync = self.durability == Durability::Fsync
                || volatile_since.is_some_and(|since| since.elapsed() >= self.nosync_lag_max);
            let mut batch = self.execute(jobs, &mut in_flight, &mut volatile_since, sync);
            // Tickets resolve in batch order: the batch before this one first.
            if let Some(previous) = in_flight.take() {
                if let Err(err) = self.finish(previous, None, &mut volatile_since) {
                    // This batch read what that one wrote: it cannot commit either (if it
                    // was logged, the log thread refuses it too).
                    batch.error.get_or_insert(err);
                }
            }
            if batch.logged {
                in_flight = Some(batch);
            } else {
                // Nothing to wait for (it wrote nothing, or failed before logging).
                let _ = self.finish(batch, None, &mut volatile_since);
            }
        }
        if let Some(batch) = in_flight.take() {
            let _ = self.finish(batch, None, &mut volatile_since);
        }
        let LogThread {
            requests, handle, ..
        } = self.log;
        drop(requests);
        let closed = handle
            .join()
            .unwrap_or_else(|_| Err(StorageError::Internal("the log thread panicked".into())));
        if let Err(err) = &closed {
            self.shared.fail(err.clone());
        }
        closed
    }

    /// Waits for work: blocks only when no batch is in flight (then wakes for the no-sync
    /// deadline and for background jobs too); otherwise takes what is queued or reports `Idle`.
    /// Which jobs a batch takes is [`Lanes`]' policy.
    fn next(&mut self, busy: bool, volatile_since: Option<Instant>) -> Next {
        let first = loop {
            if let Some(job) = self.lanes.first(&mut self.channels) {
                break job;
            }
            if busy {
                return Next::Idle;
            }
            if !self.channels.foreground_open {
                return Next::Closed;
            }
            // Say so before sleeping, then look once more: a background job submitted after
            // this look sees the flag and sends a `Wake`.
            use std::sync::atomic::{fence, Ordering::SeqCst};
            self.sleeping.store(true, SeqCst);
            fence(SeqCst);
            if let Ok(b) = self.channels.background.try_recv() {
                self.sleeping.store(false, SeqCst);
                break self.lanes.woke(Woke::Background(b.job, b.heavy));
            }
            let received =
                match volatile_since.and_then(|since| since.checked_add(self.nosync_lag_max)) {
                    None => self
                        .channels
                        .queue
                        .recv()
                        .map_err(|_| RecvTimeoutError::Disconnected),
                    Some(deadline) => self
                        .channels
                        .queue
                        .recv_timeout(deadline.saturating_duration_since(Instant::now())),
                };
            self.sleeping.store(false, SeqCst);
            match received {
                Ok(Msg::Job(job)) => break self.lanes.woke(Woke::Client(job)),
                Ok(Msg::Wake) => continue,
                Err(RecvTimeoutError::Timeout) => return Next::SyncDue,
                // Closing: commit what the background queue still holds, then stop.
                Err(RecvTimeoutError::Disconnected) => self.channels.foreground_open = false,
            }
        };
        Next::Jobs(self.lanes.batch(&mut self.channels, first))
    }

    /// Syncs the log while idle; a failure fails the store (after a failed fsync, what
    /// reached the disk is unknown).
    fn sync(&mut self) {
        let result = match self.log.requests.send(LogRequest::Sync) {
            Ok(()) => self.reply(),
            Err(_) => Err(log_gone()),
        };
        if let Err(err) = result {
            self.metrics.commit_failed();
            self.shared.fail(err);
        }
    }

    fn reply(&self) -> Result<(), StorageError> {
        self.log.replies.recv().unwrap_or_else(|_| Err(log_gone()))
    }

    /// Runs jobs in order against the current snapshot plus the batch in flight (logged, not
    /// yet published), folding each successful job's overlay into the batch, and hands what the
    /// batch wrote to the log thread. Between jobs it finishes the batch in flight as soon as
    /// its record is durable. Runs nothing once the store has failed.
    fn execute(
        &mut self,
        jobs: Vec<Box<dyn Job>>,
        in_flight: &mut Option<InFlight>,
        volatile_since: &mut Option<Instant>,
        sync: bool,
    ) -> InFlight {
        let mut batch = InFlight {
            size: jobs.len() as u64,
            ran: Vec::with_capacity(jobs.len()),
            hooks: Vec::new(),
            unrun: Vec::new(),
            layer: None,
            logged: false,
            synced: sync,
            error: None,
        };
        if let Err(err) = self.shared.wait_for_room() {
            batch.unrun = jobs;
            batch.error = Some(err);
            return batch;
        }
        if in_flight.as_ref().is_some_and(|b| b.error.is_some()) {
            // Known to fail (a replica's refusal): no new job may read what it wrote.
            let failed = in_flight.take().expect("checked");
            let _ = self.finish(failed, None, volatile_since);
        }
        let pending = in_flight.as_ref().and_then(|b| b.layer.as_ref());
        let snapshot = self.shared.snapshot_with(pending);
        let mut changes = Changes::default();
        // Only a background batch takes more background jobs; its first job counts as taken.
        let mut pull = self.lanes.pull(jobs.len(), Instant::now());
        let mut jobs = jobs.into_iter();
        loop {
            let job = jobs.next().or_else(|| {
                self.lanes
                    .pull_background(&mut self.channels, &mut pull, Instant::now())
            });
            let Some(job) = job else { break };
            let mut view = WriteTxn::new(&snapshot, &mut changes);
            let outcome = job.run(&mut view);
            batch.hooks.extend(view.finish(outcome.ok));
            batch.ran.push(outcome);
            if in_flight.is_some() {
                if let Ok(reply) = self.log.replies.try_recv() {
                    let previous = in_flight.take().expect("checked");
                    if let Err(err) = self.finish(previous, Some(reply), volatile_since) {
                        // This batch read what that one wrote: it cannot commit either.
                        batch.error = Some(err);
                        break;
                    }
                }
            }
        }
        // Only jobs taken up front can be left unrun (a failure stops pulling background jobs).
        batch.unrun.extend(jobs);
        batch.size = (batch.ran.len() + batch.unrun.len()) as u64;
        if changes.is_empty() || batch.error.is_some() {
            return batch;
        }
        // A replicated store's own batch carries the next replication index.
        let mut replicate = None;
        if changes.local && self.replicator.get().is_some() {
            let mut view = WriteTxn::new(&snapshot, &mut changes);
            let stamped = crate::replication::stamp(&view).and_then(|index| {
                view.put_u64(crate::Table::Meta, crate::STAMP_KEY, index + 1)?;
                Ok(index + 1)
            });
            let ok = stamped.is_ok();
            let _ = view.finish(ok);
            match stamped {
                Ok(index) => replicate = Some(index),
                Err(err) => {
                    batch.error = Some(err);
                    return batch;
                }
            }
        }
        drop(snapshot);
        let mut layer = Layer::new(self.next_batch, changes);
        layer.replicate = replicate;
        let layer = Arc::new(layer);
        self.next_batch += 1;
        let request = LogRequest::Append {
            layer: layer.clone(),
            sync,
        };
        match self.log.requests.send(request) {
            Ok(()) => batch.logged = true,
            Err(_) => batch.error = Some(log_gone()),
        }
        batch.layer = Some(layer);
        batch
    }

    /// Waits for the batch's record to be logged (unless `reply` already says how that went),
    /// then publishes it, runs its hooks and resolves its tickets; or, if anything failed, fails the store and every job of the
    /// batch. Returns the batch's error, if any.
    fn finish(
        &mut self,
        batch: InFlight,
        reply: Option<Result<(), StorageError>>,
        volatile_since: &mut Option<Instant>,
    ) -> Result<(), StorageError> {
        let mut result = match batch.error {
            Some(err) => Err(err),
            None => Ok(()),
        };
        if batch.logged {
            let logged = reply.unwrap_or_else(|| self.reply());
            if result.is_ok() {
                result = logged;
            }
        }
        let failed = batch.ran.iter().filter(|r| !r.ok).count() as u64;
        self.metrics
            .batch_resolved(batch.size, failed, result.is_ok());
        match result {
            Ok(()) => {
                if let Some(layer) = batch.layer {
                    self.shared.publish(layer);
                    if batch.synced {
                        *volatile_since = None;
                    } else {
                        volatile_since.get_or_insert_with(Instant::now);
                    }
                }
                let hooks = !batch.hooks.is_empty();
                for hook in batch.hooks {
                    // A panicking hook is reported by the panic hook; the writer carries on.
                    let _ = panic::catch_unwind(AssertUnwindSafe(hook));
                }
                if let (true, Some(after)) = (hooks, self.after_batch.get()) {
                    let _ = panic::catch_unwind(AssertUnwindSafe(after));
                }
                for r in batch.ran {
                    (r.deliver)(None);
                }
                Ok(())
            }
            Err(err) => {
                // What the jobs' hooks hold goes before any waiter hears: a waiter that then
                // drops its last handle on the store must not leave the writer holding the
                // last one (a database's hooks hold the database), or the writer would drop
                // the store and join itself.
                drop(batch.hooks);
                let err = commit_error(err);
                if let StorageError::Unavailable(_) | StorageError::Full(_) = err {
                    // A replica's refusal or a full disk: the batch was neither logged nor
                    // published, so the store is as it was before it, and its number is free
                    // again.
                    if let Some(layer) = &batch.layer {
                        self.next_batch = self.next_batch.min(layer.batch);
                    }
                } else {
                    self.shared.fail(err.clone());
                }
                for r in batch.ran {
                    (r.deliver)(Some(&err));
                }
                for job in batch.unrun {
                    job.fail(err.clone());
                }
                Err(err)
            }
        }
    }
}

fn log_gone() -> StorageError {
    StorageError::Internal("the log thread is gone".into())
}

/// The writer's two queues; as [`Queues`], never blocking and skipping wake-ups.
pub(crate) struct Channels {
    /// Client jobs, and the wake-ups background submitters send a sleeping writer.
    pub(crate) queue: Receiver<Msg>,
    /// Background jobs (trigger tasks, index builds).
    pub(crate) background: Receiver<BackgroundJob>,
    /// False once every foreground sender is gone (closing): the writer then drains the
    /// background queue and stops.
    pub(crate) foreground_open: bool,
}

impl Queues<Box<dyn Job>> for Channels {
    fn client(&mut self) -> Option<Box<dyn Job>> {
        loop {
            match self.queue.try_recv() {
                Ok(Msg::Job(job)) => return Some(job),
                Ok(Msg::Wake) => continue,
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => {
                    self.foreground_open = false;
                    return None;
                }
            }
        }
    }

    fn background(&mut self) -> Option<(Box<dyn Job>, bool)> {
        let b = self.background.try_recv().ok()?;
        Some((b.job, b.heavy))
    }
}

#[cfg(test)]
mod tests;
