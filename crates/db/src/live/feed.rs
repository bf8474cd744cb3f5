//! The change feed: every committed transaction, in seq order, for the live-query engine.
//!
//! The writer's commit hook appends each commit to a bounded in-memory ring and wakes waiters.
//! Readers ask for the commits after a seq; what has left the ring is read back from the durable
//! commit log, so a slow reader never loses a commit while the log still reaches back, and never
//! holds server memory beyond the ring's bound.

use crate::write::{Change, ChangeOp};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Commits kept in memory for the live-query engine.
pub const FEED_RING_MAX: usize = 4096;
/// Bytes of commits (as their commit-log records measure them) kept in memory.
pub const FEED_BYTES_MAX: usize = 64 << 20;

/// One committed transaction.
#[derive(Debug, Clone)]
pub struct Commit {
    pub seq: u64,
    pub changes: Vec<Change>,
    /// Approximate memory it holds (its commit record's size).
    pub bytes: usize,
}

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
    pub clock: super::clock::CommitClock,
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
            drop(evicted);
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

/// Rebuilds a commit from its commit-log record.
pub fn commit_from_log(record: &Value) -> Option<Commit> {
    let seq = record.get("seq")?.as_u64()?;
    let mut changes = Vec::new();
    for c in record.get("changes")?.as_array()? {
        let op = match c.get("op")?.as_str()? {
            "insert" => ChangeOp::Insert,
            "update" => ChangeOp::Update,
            _ => ChangeOp::Delete,
        };
        let image = |k: &str| c.get(k).filter(|v| !v.is_null()).cloned();
        changes.push(Change {
            collection: c.get("collection")?.as_str()?.to_string(),
            id: c.get("id")?.as_str()?.to_string(),
            op,
            version: c.get("version")?.as_u64()?,
            before: image("before"),
            after: image("after"),
        });
    }
    Some(Commit {
        seq,
        changes,
        bytes: 0,
    })
}
