//! What a submitter hands the writer and gets back: the type-erased [`Job`] (a closure over a
//! [`WriteTxn`] and the channel of its waiter), what the two queues carry ([`Msg`],
//! [`BackgroundJob`]), and the [`Ticket`] the submitter waits on or awaits.
//!
//! Not here: when jobs run and together with which (`writer.rs`, `writer/lanes.rs`).

use std::any::Any;
use std::future::{Future, IntoFuture};
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::write::WriteTxn;
use crate::{StorageError, WriteError};

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
    pub(crate) ok: bool,
    pub(crate) deliver: Deliver,
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
        // The closure (and whatever it holds: a database's jobs hold the database) goes before
        // the waiter hears, as in `Writer::finish`.
        let TypedJob { f, reply } = *self;
        drop(f);
        let _ = reply.send(Err(WriteError::Storage(err)));
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
