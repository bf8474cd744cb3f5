//! The change feed: every committed transaction, in seq order, for the live-query engine.
//!
//! The writer's commit hook appends each commit to a bounded in-memory ring and wakes waiters.
//! Readers ask for the commits after a seq; what has left the ring is read back from the durable
//! commit log, so a slow reader never loses a commit while the log still reaches back, and never
//! holds server memory beyond the ring's bound (that combination is `Db::commits_between`).
//!
//! The feed is the database's output and knows nothing of live queries: the live-query engine
//! (`live/`) consumes it. `clock.rs` stamps when each commit was published.

mod clock;

pub use crate::txn::Commit;
pub use clock::{CommitClock, CLOCK_SLOTS};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Commits kept in memory for the live-query engine.
pub const FEED_RING_MAX: usize = 4096;
/// Bytes of commits (as their commit-log records measure them) kept in memory.
pub const FEED_BYTES_MAX: usize = 64 << 20;
/// Bytes of commits (measured the same way) waiting for the reaper to free them: under a
/// second of a heavy write load, enough to ride out a burst without doubling what the ring
/// holds.
pub const REAPER_BYTES_MAX: usize = 16 << 20;

#[derive(Default)]
struct Ring {
    commits: VecDeque<Arc<Commit>>,
    /// Sum of `bytes` over `commits`.
    bytes: usize,
    last_seq: u64,
    /// Set by `nudge` so a waiter wakes for work other than commits.
    nudged: bool,
    /// Waiters blocked in `wait_after`: `announce` and `nudge` make the wake-up system call
    /// only if there are any.
    waiting: usize,
    /// Commits were published since the last `announce`.
    unannounced: bool,
    /// Commits that left the ring, dropped by the next waiter rather than by the writer
    /// (freeing their images is work no acknowledgement should wait for). At most
    /// `FEED_RING_MAX`; beyond that the writer drops them itself.
    evicted: Vec<Arc<Commit>>,
}

#[derive(Default)]
pub struct Feed {
    ring: Mutex<Ring>,
    cv: Condvar,
    /// When each recent commit was published (the server's notification latency metric).
    pub clock: CommitClock,
    /// Frees evicted commits off the live-query thread (started on first use).
    reaper: std::sync::OnceLock<Option<Reaper>>,
}

/// A thread in the idle scheduling class that drops the commits that left the ring.
///
/// Why: dropping a commit frees its document trees (tens of allocations per document, made by
/// the threads that parsed the writes). Under a heavy write load that was most of the
/// live-query thread's time, work no client waits for. Handed here, it runs only when no other
/// thread wants a core, so it no longer delays notifications or competes with the write path on
/// a busy machine. Bounded: at most [`REAPER_BYTES_MAX`] of commits wait for it; beyond that (the
/// machine has had no idle core for a while) the live-query thread frees them itself.
struct Reaper {
    sender: std::sync::mpsc::SyncSender<(Vec<Arc<Commit>>, usize)>,
    /// Bytes (as commits measure them) handed over and not yet freed.
    pending: Arc<AtomicUsize>,
}

impl Reaper {
    fn start() -> Option<Reaper> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<(Vec<Arc<Commit>>, usize)>(64);
        let pending = Arc::new(AtomicUsize::new(0));
        let freed = pending.clone();
        std::thread::Builder::new()
            .name("herald-feed-reaper".into())
            .spawn(move || {
                herald_storage::make_current_thread_idle(19);
                for (commits, bytes) in receiver {
                    drop(commits);
                    freed.fetch_sub(bytes, Relaxed);
                }
            })
            .ok()?;
        Some(Reaper { sender, pending })
    }

    /// Hands `commits` to the reaper, or gives them back if it is behind or gone.
    fn take(&self, commits: Vec<Arc<Commit>>) -> Result<(), Vec<Arc<Commit>>> {
        let bytes: usize = commits.iter().map(|c| c.bytes).sum();
        if self.pending.load(Relaxed) + bytes > REAPER_BYTES_MAX {
            return Err(commits);
        }
        self.pending.fetch_add(bytes, Relaxed);
        self.sender.try_send((commits, bytes)).map_err(|e| {
            self.pending.fetch_sub(bytes, Relaxed);
            match e {
                TrySendError::Full((commits, _)) | TrySendError::Disconnected((commits, _)) => {
                    commits
                }
            }
        })
    }
}

impl Feed {
    pub fn new(last_seq: u64) -> Feed {
        Feed {
            ring: Mutex::new(Ring {
                commits: VecDeque::new(),
                bytes: 0,
                last_seq,
                ..Ring::default()
            }),
            cv: Condvar::new(),
            clock: Default::default(),
            reaper: Default::default(),
        }
    }

    /// Called by the commit hook, in seq order.
    pub fn publish(&self, commit: Commit) {
        self.clock.stamp(commit.seq);
        let mut r = self.ring.lock().expect("feed lock");
        r.last_seq = r.last_seq.max(commit.seq);
        r.bytes += commit.bytes;
        r.commits.push_back(Arc::new(commit));
        // Older commits stay readable from the commit log.
        while r.commits.len() > FEED_RING_MAX || (r.bytes > FEED_BYTES_MAX && r.commits.len() > 1) {
            if let Some(old) = r.commits.pop_front() {
                r.bytes -= old.bytes;
                r.evicted.push(old);
            }
        }
        let overflow = (r.evicted.len() > FEED_RING_MAX).then(|| std::mem::take(&mut r.evicted));
        r.unannounced = true;
        drop(r);
        drop(overflow);
    }

    /// Wakes the waiters for the commits published since the last call. The writer calls it
    /// once per batch: a wake is a system call, and a batch may hold a thousand commits.
    pub fn announce(&self) {
        let mut r = self.ring.lock().expect("feed lock");
        let wake = std::mem::take(&mut r.unannounced) && r.waiting > 0;
        drop(r);
        if wake {
            self.cv.notify_all();
        }
    }

    pub fn last_seq(&self) -> u64 {
        self.ring.lock().expect("feed lock").last_seq
    }

    /// Waits until a commit after `seq` exists, `nudge` is called, or `timeout` passes;
    /// returns the last seq. The waiter frees the commits that left the ring.
    pub fn wait_after(&self, seq: u64, timeout: Duration) -> u64 {
        let mut r = self.ring.lock().expect("feed lock");
        let evicted = std::mem::take(&mut r.evicted);
        if !evicted.is_empty() {
            drop(r);
            self.free(evicted);
            r = self.ring.lock().expect("feed lock");
        }
        r.waiting += 1;
        let (mut r, _) = self
            .cv
            .wait_timeout_while(r, timeout, |r| r.last_seq <= seq && !r.nudged)
            .expect("feed lock");
        r.waiting -= 1;
        r.nudged = false;
        r.last_seq
    }

    /// Frees commits that left the ring: on the reaper thread if it keeps up, else here.
    fn free(&self, commits: Vec<Arc<Commit>>) {
        match self.reaper.get_or_init(Reaper::start) {
            Some(reaper) => drop(reaper.take(commits)),
            None => drop(commits),
        }
    }

    /// Wakes the waiter for work other than commits (a new subscription request).
    pub fn nudge(&self) {
        let mut r = self.ring.lock().expect("feed lock");
        r.nudged = true;
        let wake = r.waiting > 0;
        drop(r);
        if wake {
            self.cv.notify_all();
        }
    }

    /// The commits with seq in `(after, upto]` still in the ring, or `None` when the ring no
    /// longer reaches back to `after + 1`.
    pub fn from_ring(&self, after: u64, upto: u64) -> Option<Vec<Arc<Commit>>> {
        let r = self.ring.lock().expect("feed lock");
        if after >= upto {
            return Some(Vec::new());
        }
        let first = r.commits.front()?.seq;
        if first > after + 1 {
            return None;
        }
        Some(
            r.commits
                .iter()
                .filter(|c| c.seq > after && c.seq <= upto)
                .cloned()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(seq: u64, bytes: usize) -> Commit {
        Commit {
            seq,
            changes: Vec::new(),
            bytes,
        }
    }

    /// Commits that left the ring are freed (by the reaper) once the next waiter comes by, and
    /// the ring keeps its bound meanwhile.
    #[test]
    fn evicted_commits_are_freed_once_a_waiter_comes_by() {
        let feed = Feed::new(0);
        feed.publish(commit(1, 10));
        let watch = Arc::downgrade(&feed.from_ring(0, 1).unwrap()[0]);
        for seq in 2..=(FEED_RING_MAX as u64 + 1) {
            feed.publish(commit(seq, 10));
        }
        assert!(feed.from_ring(0, 1).is_none(), "commit 1 left the ring");
        // Held by the ring's eviction list until a waiter takes it.
        assert!(watch.upgrade().is_some());
        feed.wait_after(0, Duration::ZERO);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while watch.upgrade().is_some() {
            assert!(std::time::Instant::now() < deadline, "never freed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The reaper takes at most `REAPER_BYTES_MAX` of commits not yet freed; beyond that the
    /// caller gets them back and frees them itself.
    #[test]
    fn the_reaper_is_bounded_by_bytes() {
        let (sender, receiver) = std::sync::mpsc::sync_channel(64);
        // No thread behind it: nothing is freed, so the bound is reached.
        let reaper = Reaper {
            sender,
            pending: Arc::new(AtomicUsize::new(0)),
        };
        let half = REAPER_BYTES_MAX / 2;
        assert!(reaper.take(vec![Arc::new(commit(1, half))]).is_ok());
        assert!(reaper.take(vec![Arc::new(commit(2, half))]).is_ok());
        let back = reaper.take(vec![Arc::new(commit(3, 1))]).unwrap_err();
        assert_eq!(back[0].seq, 3);
        assert_eq!(reaper.pending.load(Relaxed), REAPER_BYTES_MAX);
        // A full channel gives commits back too, and leaves the count as it was.
        drop(receiver);
        let reaper = Reaper {
            sender: reaper.sender.clone(),
            pending: Arc::new(AtomicUsize::new(0)),
        };
        assert!(reaper.take(vec![Arc::new(commit(4, 1))]).is_err());
        assert_eq!(reaper.pending.load(Relaxed), 0);
    }
}
