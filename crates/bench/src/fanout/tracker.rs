//! The [`Tracker`]: one slot per tweet of a phase (when it was due, sent, acknowledged, and
//! when its fan-out marker arrived), the running counters the load drivers and the sampler
//! read, and the sampled counters over time.
//!
//! Times are microseconds since the tracker's epoch; 0 means "not yet". Everything is computed
//! from the slots after the phase, so the hot path only stores a few integers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slot {
    /// When the tweet was due (open loop: its scheduled time; closed loop: when sent).
    pub due_us: u64,
    pub sent_us: u64,
    pub ack_us: u64,
    /// When its marker's `add` reached the watcher.
    pub done_us: u64,
    pub author: u32,
    pub failed: bool,
}

/// Counters at one moment (the sampler takes one every [`SAMPLE_EVERY`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub t_us: u64,
    pub scheduled: u64,
    pub acked: u64,
    pub done: u64,
    pub failed: u64,
}

impl Sample {
    /// Fan-outs acknowledged but not finished: the async modes' queue.
    pub fn backlog(&self) -> u64 {
        self.acked.saturating_sub(self.done)
    }

    /// Tweets due but not acknowledged (nor failed): the client-side wait.
    pub fn unacked(&self) -> u64 {
        self.scheduled.saturating_sub(self.acked + self.failed)
    }
}

pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub struct Tracker {
    pub epoch: Instant,
    slots: Mutex<Vec<Slot>>,
    /// Most slots (tweets) in one phase.
    cap: usize,
    scheduled: AtomicU64,
    acked: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    /// Markers whose follower count differs from the graph's.
    pub wrong: AtomicU64,
    /// Expected followers per author.
    expected: Vec<usize>,
    samples: Mutex<Vec<Sample>>,
}

impl Tracker {
    pub fn new(cap: usize, expected: Vec<usize>) -> Tracker {
        Tracker {
            epoch: Instant::now(),
            slots: Mutex::new(Vec::with_capacity(cap.min(1 << 20))),
            cap,
            scheduled: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            wrong: AtomicU64::new(0),
            expected,
            samples: Mutex::new(Vec::new()),
        }
    }

    pub fn us(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.epoch).as_micros() as u64).max(1)
    }

    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    /// Registers a tweet due at `due`; None when the phase's slots are used up.
    pub fn begin(&self, due: Instant, author: u32) -> Option<u64> {
        let mut slots = self.slots.lock().expect("slots");
        if slots.len() >= self.cap {
            return None;
        }
        slots.push(Slot {
            due_us: self.us(due),
            author,
            ..Slot::default()
        });
        self.scheduled.fetch_add(1, Ordering::Relaxed);
        Some(slots.len() as u64 - 1)
    }

    pub fn sent(&self, k: u64) {
        let now = self.now_us();
        if let Some(s) = self.slots.lock().expect("slots").get_mut(k as usize) {
            s.sent_us = now;
        }
    }

    pub fn ack(&self, k: u64, ok: bool) {
        let now = self.now_us();
        if let Some(s) = self.slots.lock().expect("slots").get_mut(k as usize) {
            if ok {
                s.ack_us = now;
            } else {
                s.failed = true;
            }
        }
        let counter = if ok { &self.acked } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the marker of tweet `k` (first arrival only) and checks its follower count.
    pub fn done(&self, k: u64, at: Instant, followers: Option<u64>) {
        let at = self.us(at);
        let mut slots = self.slots.lock().expect("slots");
        let Some(s) = slots.get_mut(k as usize) else {
            return;
        };
        if s.done_us != 0 {
            return;
        }
        s.done_us = at;
        let expected = self.expected.get(s.author as usize).copied();
        drop(slots);
        if followers.map(|f| f as usize) != expected {
            self.wrong.fetch_add(1, Ordering::Relaxed);
        }
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Sample {
        Sample {
            t_us: self.now_us(),
            scheduled: self.scheduled.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// True once every acknowledged tweet's marker arrived and nothing is in flight.
    pub fn drained(&self) -> bool {
        let c = self.counts();
        c.unacked() == 0 && c.done >= c.acked
    }

    /// Takes a sample of the counters (bounded: one per [`SAMPLE_EVERY`] for at most a day).
    pub fn sample(&self) {
        let s = self.counts();
        let mut samples = self.samples.lock().expect("samples");
        if samples.len() < 864_000 {
            samples.push(s);
        }
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }

    pub fn slots(&self) -> Vec<Slot> {
        self.slots.lock().expect("slots").clone()
    }

    /// Samples the counters every [`SAMPLE_EVERY`] until the returned handle is aborted.
    pub fn start_sampler(self: &std::sync::Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            loop {
                tick.tick().await;
                me.sample();
            }
        })
    }

    /// Waits until [`Tracker::drained`] or the timeout; returns the seconds waited and
    /// whether it drained.
    pub async fn wait_drained(&self, timeout: Duration) -> (f64, bool) {
        let start = Instant::now();
        loop {
            if self.drained() {
                return (start.elapsed().as_secs_f64(), true);
            }
            if start.elapsed() > timeout {
                return (start.elapsed().as_secs_f64(), false);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_record_the_life_of_a_tweet() {
        let t = Tracker::new(2, vec![3, 1]);
        let now = Instant::now();
        let a = t.begin(now, 0).unwrap();
        let b = t.begin(now, 1).unwrap();
        assert_eq!(t.begin(now, 0), None, "the cap holds");
        t.sent(a);
        t.ack(a, true);
        t.ack(b, false);
        assert!(!t.drained());
        t.done(a, Instant::now(), Some(3));
        t.done(a, Instant::now(), Some(3));
        let c = t.counts();
        assert_eq!((c.scheduled, c.acked, c.done, c.failed), (2, 1, 1, 1));
        assert_eq!((c.backlog(), c.unacked()), (0, 0));
        assert!(t.drained());
        assert_eq!(t.wrong.load(Ordering::Relaxed), 0);
        let s = t.slots();
        assert!(s[0].ack_us >= s[0].sent_us && s[0].done_us >= s[0].ack_us);
        assert!(s[1].failed);
        // A marker with the wrong follower count is counted.
        let t = Tracker::new(1, vec![3]);
        let k = t.begin(now, 0).unwrap();
        t.done(k, now, Some(2));
        assert_eq!(t.wrong.load(Ordering::Relaxed), 1);
    }
}
