//! The JavaScript worker threads: `--trigger-workers` dedicated OS threads, each with its own
//! sandbox, running in Linux's idle scheduling class, below every thread that serves clients.
//!
//! Why dedicated threads: trigger functions are CPU work nobody waits on, while a client's write
//! waits for the HTTP workers and the storage writer. On a machine whose cores the fan-out keeps
//! busy, threads of equal priority share the CPU evenly and a client's acknowledgement queues
//! behind JavaScript (measured: ack p50 17.7 ms at 80% load in the quick fan-out bench; 7.2 ms
//! with the JavaScript at nice 10). At nice 10 a client's thread that woke behind a JavaScript
//! thread could still wait for that thread's slice; in the idle class (`SCHED_IDLE`) it preempts
//! at once (the full bench at 640 tweets/s: ack p50 1.15 / 1.17 ms against 1.55 / 1.79 at nice
//! 10, alternating runs; fan-outs complete later under load, as the integrated-queues design
//! intends: the backlog waits, the client does not). tokio's blocking pool cannot hold such
//! threads: its threads serve other blocking work too, and a thread cannot leave the idle class
//! without privileges.
//!
//! What keeps an idle thread from stalling client work: a JavaScript thread holds no lock that a
//! client's thread waits on while it computes (reads take a snapshot under a short lock; the
//! task's writes commit through the writer's queue, a channel).

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use tokio::sync::mpsc::{channel, Receiver, Sender};

/// The nice value of the JavaScript threads where the idle class is not available (0 is
/// normal; 19 the lowest priority).
pub const SCRIPT_THREAD_NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed pool of low-priority threads. Jobs queue in a channel bounded by the number of
/// threads; callers bound their concurrency themselves (the dispatcher's `js_slots`), so a full
/// queue only delays a caller, it never grows.
pub struct ScriptPool {
    queue: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ScriptPool {
    pub fn start(workers: usize) -> Arc<ScriptPool> {
        let workers = workers.max(1);
        let (tx, rx) = channel::<Job>(workers);
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..workers)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("herald-js-{i}"))
                    .spawn(move || worker(&rx))
                    .expect("spawn a JavaScript worker thread")
            })
            .collect();
        Arc::new(ScriptPool {
            queue: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        })
    }

    /// Runs `f` on a pool thread and returns its result; `None` if the pool has stopped or `f`
    /// panicked.
    pub async fn run<T, F>(&self, f: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        let sender = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        // The channel holds at most one job per thread; a caller waits for room.
        sender.send(job).await.ok()?;
        rx.await.ok()
    }

    /// Stops taking jobs and waits for the threads to finish the ones they hold. Blocking.
    pub fn stop(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    herald_db::make_current_thread_idle(SCRIPT_THREAD_NICE);
    loop {
        // Hold the lock only to take a job, so the other threads can take the next one.
        let job = match rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .blocking_recv()
        {
            Some(job) => job,
            None => return,
        };
        // A panicking job drops its reply sender (the caller sees `None`); the thread goes on.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_jobs_on_named_idle_class_threads_and_survives_a_panic() {
        let pool = ScriptPool::start(2);
        let (name, policy) = pool
            .run(|| {
                let name = std::thread::current().name().map(str::to_string);
                // SAFETY: no arguments but the calling thread's id (0).
                let policy = unsafe { libc::sched_getscheduler(0) };
                (name, policy)
            })
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("herald-js-"));
        if cfg!(target_os = "linux") {
            assert_eq!(policy, libc::SCHED_IDLE);
        }
        assert_eq!(pool.run(|| -> u32 { panic!("boom") }).await, None);
        let many: Vec<_> = (0..32u32).map(|i| pool.run(move || i * 2)).collect();
        let mut sum = 0;
        for f in many {
            sum += f.await.unwrap();
        }
        assert_eq!(sum, (0..32).map(|i| i * 2).sum::<u32>());
        pool.stop();
        assert_eq!(pool.run(|| 1).await, None);
    }
}
