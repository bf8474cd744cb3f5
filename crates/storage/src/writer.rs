//! The group-commit writer: the type-erased [`Job`], the one writer thread's loop (drain up to
//! `batch_max` queued jobs, run them in order in one redb write transaction, commit once, then
//! resolve every waiter), the [`Ticket`] a submitter waits on, and the writer's [`Metrics`].
//!
//! Not here: opening the file and the queue itself (`store.rs`), what a job can do (`write.rs`).

use std::any::Any;
use std::future::{Future, IntoFuture};
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::error::commit_error;
use crate::write::{BaseTables, Hook, WriteTxn};
use crate::{Durability, StorageError, WriteError};

type Reply<T, E> = Result<T, WriteError<E>>;

/// What the foreground queue carries: a job, or a wake-up telling the writer that a background
/// job is waiting (so the writer can sleep on one queue).
pub(crate) enum Msg {
    Job(Box<dyn Job>),
    Wake,
}

/// A queued background job. A heavy one (a large trigger task) runs only as the first job of a
/// batch, never behind client jobs that happen to share its batch.
pub(crate) struct BackgroundJob {
    pub(crate) job: Box<dyn Job>,
    pub(crate) heavy: bool,
}

/// A queued write, its result type erased so one queue carries every kind of job.
pub(crate) trait Job: Send {
    /// Runs the job against `txn`. The writer applies `txn`'s writes only if `Ran::ok`.
    fn run(self: Box<Self>, txn: &mut WriteTxn<'_>) -> Ran;
    /// Resolves the waiter with `err` without running the job.
    fn fail(self: Box<Self>, err: StorageError);
}

/// A job that has run: whether it succeeded, and how to tell its waiter once the batch's fate
/// (`None`: committed, `Some`: failed) is known.
pub(crate) struct Ran {
    ok: bool,
    deliver: Deliver,
}

/// Tells one waiter its result, given the batch's error if it did not commit.
type Deliver = Box<dyn FnOnce(Option<&StorageError>)>;

/// The concrete job behind `Box<dyn Job>`: the caller's closure and its waiter's channel.
pub(crate) struct TypedJob<F, T, E> {
    pub(crate) f: F,
    pub(crate) reply: oneshot::Sender<Reply<T, E>>,
}

impl<F, T, E> Job for TypedJob<F, T, E>
where
    F: FnOnce(&mut WriteTxn<'_>) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    fn run(self: Box<Self>, txn: &mut WriteTxn<'_>) -> Ran {
        let TypedJob { f, reply } = *self;
        // A panicking job must not take the writer (and every other waiter) down with it; its
        // overlay is discarded like that of a job that returned `Err`.
        let outcome = match panic::catch_unwind(AssertUnwindSafe(|| f(txn))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(WriteError::Job(err)),
            Err(payload) => Err(WriteError::Storage(StorageError::JobPanicked(
                panic_message(payload.as_ref()),
            ))),
        };
        Ran {
            ok: outcome.is_ok(),
            deliver: Box::new(move |batch_error| {
                let reply_value = match batch_error {
                    None => outcome,
                    Some(err) => Err(WriteError::Storage(err.clone())),
                };
                // The waiter may have given up (dropped its ticket); that is its choice.
                let _ = reply.send(reply_value);
            }),
        }
    }

    fn fail(self: Box<Self>, err: StorageError) {
        let _ = self.reply.send(Err(WriteError::Storage(err)));
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// The promise of a submitted job's result, resolved only after the job's batch has committed
/// (and, in [`Durability::Fsync`](crate::Durability::Fsync) mode, reached the disk).
///
/// Wait from blocking code with [`wait`](Ticket::wait), or `.await` it from any async runtime.
#[must_use = "a ticket is the only way to learn whether the write committed"]
pub struct Ticket<T, E> {
    pub(crate) reply: oneshot::Receiver<Reply<T, E>>,
}

impl<T, E> Ticket<T, E> {
    /// Blocks until the job's batch has committed or failed.
    pub fn wait(self) -> Reply<T, E> {
        self.reply.recv().unwrap_or_else(|_| closed())
    }

    /// Like [`wait`](Ticket::wait), but gives up after `timeout` and returns `None`; the job
    /// still runs and the ticket can be waited on again.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Reply<T, E>> {
        match self.reply.recv_timeout(timeout) {
            Ok(reply) => Some(reply),
            Err(oneshot::RecvTimeoutError::Timeout) => None,
            Err(oneshot::RecvTimeoutError::Disconnected) => Some(closed()),
        }
    }
}

fn closed<T, E>() -> Reply<T, E> {
    // The job was dropped unrun: the writer thread is gone.
    Err(WriteError::Storage(StorageError::Closed))
}

impl<T, E> IntoFuture for Ticket<T, E> {
    type Output = Reply<T, E>;
    type IntoFuture = TicketFuture<T, E>;

    fn into_future(self) -> TicketFuture<T, E> {
        TicketFuture {
            reply: self.reply.into_future(),
        }
    }
}

/// A [`Ticket`] being awaited. Runtime-agnostic: the writer thread wakes the task's waker.
pub struct TicketFuture<T, E> {
    reply: oneshot::AsyncReceiver<Reply<T, E>>,
}

impl<T, E> Future for TicketFuture<T, E> {
    type Output = Reply<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.reply)
            .poll(cx)
            .map(|received| received.unwrap_or_else(|_| closed()))
    }
}

/// Counters the writer updates after every batch; plain atomics, cheap to read at any time.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    commits: AtomicU64,
    commit_failures: AtomicU64,
    jobs_committed: AtomicU64,
    jobs_failed: AtomicU64,
    last_batch_size: AtomicU64,
}

/// A snapshot of the writer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// Batches committed (one redb commit, and one fsync in `Fsync` mode, each).
    pub commits: u64,
    /// Batches whose commit failed; every job in them got the error.
    pub commit_failures: u64,
    /// Jobs whose writes were committed.
    pub jobs_committed: u64,
    /// Jobs that returned `Err` or panicked (their writes were discarded).
    pub jobs_failed: u64,
    /// How many jobs the most recent batch held.
    pub last_batch_size: u64,
}

impl Metrics {
    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        // Relaxed is enough: a waiter that needs the counters of its own batch is ordered after
        // the update by the reply channel.
        MetricsSnapshot {
            commits: self.commits.load(Relaxed),
            commit_failures: self.commit_failures.load(Relaxed),
            jobs_committed: self.jobs_committed.load(Relaxed),
            jobs_failed: self.jobs_failed.load(Relaxed),
            last_batch_size: self.last_batch_size.load(Relaxed),
        }
    }
}

/// The state of the one writer thread.
pub(crate) struct Writer {
    pub(crate) db: Arc<redb::Database>,
    pub(crate) queue: Receiver<Msg>,
    /// Background jobs (trigger tasks, index builds): they fill a batch after the foreground
    /// jobs, within `background_budget` of the batch's start, and at least one per batch.
    pub(crate) background: Receiver<BackgroundJob>,
    pub(crate) background_budget: Duration,
    /// Set while the writer sleeps on the foreground queue (see `Store::submit_background`).
    pub(crate) sleeping: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) durability: Durability,
    pub(crate) batch_max: usize,
    /// No-sync mode only: how long a commit may stay non-durable.
    pub(crate) nosync_lag_max: Duration,
    pub(crate) metrics: Arc<Metrics>,
}

impl Writer {
    /// Serves batches until every sender is gone and the queue is empty, so jobs queued before
    /// `close` still commit; then makes the last commits durable.
    ///
    /// In no-sync mode redb's non-durable commits stay volatile until a durable one follows,
    /// so the writer makes a batch durable once the oldest volatile commit is
    /// `nosync_lag_max` old, or commits an empty durable transaction when idle by then. That
    /// bounds what a crash can take to about `nosync_lag_max` of acknowledged writes.
    pub(crate) fn run(self) -> Result<(), StorageError> {
        // No-sync mode: when the oldest commit not yet made durable was made.
        let mut volatile_since: Option<Instant> = None;
        let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(self.batch_max);
        let mut foreground_open = true;
        // A heavy background job met while filling a batch. The client jobs queued by then
        // commit first, in a batch of their own; then the heavy job opens the next batch.
        let mut deferred: Option<Box<dyn Job>> = None;
        let mut yielded = false;
        loop {
            if deferred.is_some() {
                if !yielded {
                    yielded = true;
                    if let Some(job) = self.next_foreground(&mut foreground_open) {
                        batch.push(job);
                        self.fill_and_commit(&mut batch, &mut volatile_since, &mut deferred);
                        continue;
                    }
                }
                yielded = false;
                batch.push(deferred.take().expect("checked"));
                self.fill_and_commit(&mut batch, &mut volatile_since, &mut deferred);
                continue;
            }
            // Foreground first, then background; with neither, sleep on the foreground queue
            // (a background submission also sends a `Wake` there).
            let ready = self.next_foreground(&mut foreground_open);
            let first = match ready.or_else(|| self.background.try_recv().ok().map(|b| b.job)) {
                Some(job) => job,
                None if !foreground_open => break,
                None => {
                    // Say so before sleeping, then look once more: a background job submitted
                    // after this look sees the flag and sends a `Wake`.
                    use std::sync::atomic::{fence, Ordering::SeqCst};
                    self.sleeping.store(true, SeqCst);
                    fence(SeqCst);
                    if let Ok(b) = self.background.try_recv() {
                        self.sleeping.store(false, SeqCst);
                        batch.push(b.job);
                        self.fill_and_commit(&mut batch, &mut volatile_since, &mut deferred);
                        continue;
                    }
                    // The deadline by which the volatile commits must be made durable, if any.
                    let deadline =
                        volatile_since.and_then(|since| since.checked_add(self.nosync_lag_max));
                    let received = match deadline {
                        None => self
                            .queue
                            .recv()
                            .map_err(|_| RecvTimeoutError::Disconnected),
                        Some(deadline) => self
                            .queue
                            .recv_timeout(deadline.saturating_duration_since(Instant::now())),
                    };
                    self.sleeping.store(false, SeqCst);
                    match received {
                        Ok(Msg::Job(job)) => job,
                        Ok(Msg::Wake) => continue,
                        Err(RecvTimeoutError::Timeout) => {
                            // On failure, try again after another lag period (redb refuses
                            // writes after an I/O error, so batches report it meanwhile).
                            volatile_since = match self.make_durable() {
                                Ok(()) => None,
                                Err(_) => Some(Instant::now()),
                            };
                            continue;
                        }
                        // Closing: commit what the background queue still holds, then stop.
                        Err(RecvTimeoutError::Disconnected) => {
                            foreground_open = false;
                            continue;
                        }
                    }
                }
            };
            batch.push(first);
            self.fill_and_commit(&mut batch, &mut volatile_since, &mut deferred);
        }
        if let Some(job) = deferred.take() {
            self.commit_batch(vec![job], true, &mut None);
        }
        if volatile_since.is_some() {
            self.make_durable()?;
        }
        Ok(())
    }

    /// The next queued foreground job, if any, skipping wake-ups.
    fn next_foreground(&self, open: &mut bool) -> Option<Box<dyn Job>> {
        loop {
            match self.queue.try_recv() {
                Ok(Msg::Job(job)) => return Some(job),
                Ok(Msg::Wake) => continue,
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => {
                    *open = false;
                    return None;
                }
            }
        }
    }

    /// Adds the queued foreground jobs to `batch` (up to `batch_max`) and commits it; background
    /// jobs join inside [`commit_batch`](Writer::commit_batch).
    fn fill_and_commit(
        &self,
        batch: &mut Vec<Box<dyn Job>>,
        volatile_since: &mut Option<Instant>,
        deferred: &mut Option<Box<dyn Job>>,
    ) {
        while batch.len() < self.batch_max {
            match self.queue.try_recv() {
                Ok(Msg::Job(job)) => batch.push(job),
                Ok(Msg::Wake) => continue,
                Err(_) => break,
            }
        }
        let durable = self.durability == Durability::Fsync
            || volatile_since.is_some_and(|since| since.elapsed() >= self.nosync_lag_max);
        if self.commit_batch(std::mem::take(batch), durable, deferred) {
            if durable {
                *volatile_since = None;
            } else {
                volatile_since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Commits an empty durable transaction, which makes every earlier commit durable.
    fn make_durable(&self) -> Result<(), StorageError> {
        let result = (|| {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(redb::Durability::Immediate)?;
            txn.commit()?;
            Ok(())
        })();
        if result.is_err() {
            self.metrics.commit_failures.fetch_add(1, Relaxed);
        }
        result
    }

    /// Runs and commits one batch and resolves its tickets; returns whether it committed.
    /// Background jobs join the batch after `batch` while the budget lasts.
    fn commit_batch(
        &self,
        batch: Vec<Box<dyn Job>>,
        durable: bool,
        deferred: &mut Option<Box<dyn Job>>,
    ) -> bool {
        let mut jobs = BatchJobs {
            deferred,
            room: self.batch_max.saturating_sub(batch.len()),
            fixed: batch.into_iter(),
            background: &self.background,
            until: Instant::now() + self.background_budget,
            taken: 0,
            closed: false,
        };
        let mut ran = Vec::with_capacity(self.batch_max.min(1024));
        let mut hooks = Vec::new();
        let durability = if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        let result = self.execute(&mut jobs, &mut ran, &mut hooks, durability);
        // Jobs not run because of a failure are only those already in the batch.
        jobs.closed = true;
        let size = ran.len() as u64;
        let committed = result.is_ok();
        let failed = ran.iter().filter(|r| !r.ok).count() as u64;
        self.metrics.last_batch_size.store(size, Relaxed);
        self.metrics.jobs_failed.fetch_add(failed, Relaxed);
        match result {
            Ok(()) => {
                self.metrics.commits.fetch_add(1, Relaxed);
                self.metrics
                    .jobs_committed
                    .fetch_add(size - failed, Relaxed);
                for hook in hooks {
                    // A panicking hook is reported by the panic hook; the writer carries on.
                    let _ = panic::catch_unwind(AssertUnwindSafe(hook));
                }
                for r in ran {
                    (r.deliver)(None);
                }
            }
            Err(err) => {
                let err = commit_error(err);
                self.metrics.commit_failures.fetch_add(1, Relaxed);
                for r in ran {
                    (r.deliver)(Some(&err));
                }
                for job in jobs {
                    job.fail(err.clone());
                }
            }
        }
        committed
    }

    /// Runs jobs in order in one write transaction and commits it. Stops at the first storage
    /// error, leaving unrun jobs in `jobs`; the transaction is then dropped, which aborts it.
    fn execute(
        &self,
        jobs: &mut impl Iterator<Item = Box<dyn Job>>,
        ran: &mut Vec<Ran>,
        hooks: &mut Vec<Hook>,
        durability: redb::Durability,
    ) -> Result<(), StorageError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(durability)?;
        {
            let mut base = BaseTables::open(&txn)?;
            for job in jobs {
                let mut view = WriteTxn::new(&base);
                let outcome = job.run(&mut view);
                let (overlay, job_hooks) = view.into_parts();
                let ok = outcome.ok;
                ran.push(outcome);
                if ok {
                    base.apply(overlay)?;
                    hooks.extend(job_hooks);
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}

/// The jobs of one batch: the foreground jobs taken up front, then background jobs pulled one
/// at a time while the batch is younger than the budget (and at least one, so background work
/// always progresses), up to `batch_max` in all.
struct BatchJobs<'a> {
    fixed: std::vec::IntoIter<Box<dyn Job>>,
    background: &'a Receiver<BackgroundJob>,
    /// Where a heavy background job goes when met here: it opens the next batch instead.
    deferred: &'a mut Option<Box<dyn Job>>,
    until: Instant,
    room: usize,
    taken: usize,
    /// Set once the batch is over: no more background jobs are pulled.
    closed: bool,
}

impl Iterator for BatchJobs<'_> {
    type Item = Box<dyn Job>;

    fn next(&mut self) -> Option<Box<dyn Job>> {
        if let Some(job) = self.fixed.next() {
            return Some(job);
        }
        if self.closed || self.room == 0 || (self.taken > 0 && Instant::now() >= self.until) {
            return None;
        }
        if self.deferred.is_some() {
            return None;
        }
        let b = self.background.try_recv().ok()?;
        if b.heavy {
            *self.deferred = Some(b.job);
            return None;
        }
        self.room -= 1;
        self.taken += 1;
        Some(b.job)
    }
}

#[cfg(test)]
mod tests;
