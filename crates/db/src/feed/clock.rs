//! When each recent commit was published to the change feed, for the server's notification
//! latency metric (commit -> message handed to a subscriber's socket).
//!
//! Lock-free on purpose: the feed's publish stamps a slot, and every live message sent may look
//! one up, so neither may contend on the feed's mutex. A fixed ring of [`CLOCK_SLOTS`] slots
//! indexed by `seq % CLOCK_SLOTS`, each a tiny seqlock (seq cleared, time written, seq set), so a
//! reader never pairs a seq with another commit's time; a seq overwritten since reads `None`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Commits whose publish time is remembered (older ones read `None`).
pub const CLOCK_SLOTS: usize = 4096;

struct Slot {
    /// The seq the slot's time belongs to; 0 while being written or never written.
    seq: AtomicU64,
    /// Nanoseconds since the clock's `origin`.
    nanos: AtomicU64,
}

pub struct CommitClock {
    origin: Instant,
    slots: Box<[Slot]>,
}

impl Default for CommitClock {
    fn default() -> Self {
        CommitClock {
            origin: Instant::now(),
            slots: (0..CLOCK_SLOTS)
                .map(|_| Slot {
                    seq: AtomicU64::new(0),
                    nanos: AtomicU64::new(0),
                })
                .collect(),
        }
    }
}

impl CommitClock {
    /// Records that `seq` is published now. Called in seq order by one thread (the commit hook).
    pub fn stamp(&self, seq: u64) {
        let slot = &self.slots[(seq % CLOCK_SLOTS as u64) as usize];
        let nanos = self.origin.elapsed().as_nanos() as u64;
        slot.seq.store(0, Ordering::SeqCst);
        slot.nanos.store(nanos, Ordering::SeqCst);
        slot.seq.store(seq, Ordering::SeqCst);
    }

    /// How long ago `seq` was published, if it is still remembered.
    pub fn since(&self, seq: u64) -> Option<Duration> {
        let slot = &self.slots[(seq % CLOCK_SLOTS as u64) as usize];
        if seq == 0 || slot.seq.load(Ordering::SeqCst) != seq {
            return None;
        }
        let nanos = slot.nanos.load(Ordering::SeqCst);
        if slot.seq.load(Ordering::SeqCst) != seq {
            return None;
        }
        let now = self.origin.elapsed().as_nanos() as u64;
        Some(Duration::from_nanos(now.saturating_sub(nanos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_recent_seqs_only() {
        let c = CommitClock::default();
        assert_eq!(c.since(1), None);
        c.stamp(1);
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.since(1).unwrap() >= Duration::from_millis(2));
        c.stamp(1 + CLOCK_SLOTS as u64);
        assert_eq!(c.since(1), None, "overwritten by a later seq");
        assert!(c.since(1 + CLOCK_SLOTS as u64).is_some());
    }
}
