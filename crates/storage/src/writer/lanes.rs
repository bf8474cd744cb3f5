//! The writer's lane policy: which jobs, client or background, the next batch takes. A pure
//! state machine over two non-blocking queues ([`Queues`]) and a clock reading passed in: no
//! threads, no channels, no IO, so every rule is tested on its own below. The writer thread
//! (`writer.rs`) does the blocking, the sleeping and the running of jobs.
//!
//! The rules, and why:
//! - A batch holds client jobs or background jobs, never both: a client's acknowledgement waits
//!   for its own batch's sync, not for background work that happened to share it (while a
//!   client batch syncs, the next, background, batch already runs, pipelined).
//! - When both lanes wait they take turns, batch by batch, so neither starves.
//! - A client batch takes every queued client job up to `batch_max`. A background batch starts
//!   with one background job and takes more while it runs, up to `batch_max` jobs in all and
//!   only within `budget` of its start, and stops as soon as a client job waits: a client then
//!   waits for at most the background job running when it came, plus its own batch's sync. At
//!   least one background job runs per background batch, so background work always progresses.
//! - A heavy background job (a large trigger task) only ever opens a batch, and the client jobs
//!   queued when it was met get a batch without it first. Its batch is not pipelined: the
//!   writer acknowledges the batch in flight before running it ([`Lanes::take_heavy_next`]).

use std::time::{Duration, Instant};

/// The writer's two queues, as the policy sees them. Neither call blocks.
pub(crate) trait Queues<J> {
    /// The next queued client job, if any.
    fn client(&mut self) -> Option<J>;
    /// The next queued background job and whether it is heavy, if any.
    fn background(&mut self) -> Option<(J, bool)>;
}

/// A job the writer received while it slept because nothing was queued.
pub(crate) enum Woke<J> {
    Client(J),
    /// A background job and whether it is heavy.
    Background(J, bool),
}

/// Where the current batch's jobs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Client,
    Background,
}

/// The lane policy's state between batches.
pub(crate) struct Lanes<J> {
    /// Jobs per batch.
    batch_max: usize,
    /// How long a background batch keeps taking background jobs after its start.
    budget: Duration,
    /// The lane of the batch being built or run; background jobs have the next turn after a
    /// client batch.
    lane: Lane,
    /// A heavy background job met while the other lane had the turn or a background batch was
    /// filling: it opens a later batch.
    deferred: Option<J>,
    /// Whether the client jobs queued when `deferred` was met have had their batch.
    yielded: bool,
    /// The batch just started opens with a heavy job.
    heavy_next: bool,
    /// A client job taken from its queue to see whether one waits; the next client job.
    peeked: Option<J>,
}

/// How many background jobs the batch being run may still take, and until when.
pub(crate) struct Pull {
    room: usize,
    until: Instant,
    taken: usize,
}

impl<J> Lanes<J> {
    /// `batch_max` must be at least 1.
    pub(crate) fn new(batch_max: usize, budget: Duration) -> Lanes<J> {
        assert!(batch_max >= 1, "a batch holds at least one job");
        Lanes {
            batch_max,
            budget,
            lane: Lane::Background,
            deferred: None,
            yielded: false,
            heavy_next: false,
            peeked: None,
        }
    }

    /// The first job of the next batch, if one is queued (or deferred); decides the batch's
    /// lane.
    pub(crate) fn first(&mut self, queues: &mut impl Queues<J>) -> Option<J> {
        loop {
            if self.deferred.is_some() {
                if !self.yielded {
                    self.yielded = true;
                    if let Some(job) = self.next_client(queues) {
                        return Some(self.start(job, Lane::Client));
                    }
                }
                self.yielded = false;
                self.heavy_next = true;
                let heavy = self.deferred.take().expect("checked");
                return Some(self.start(heavy, Lane::Background));
            }
            if self.lane == Lane::Client {
                if let Some((job, heavy)) = queues.background() {
                    if heavy {
                        // Clients queued before it get their batch first.
                        self.deferred = Some(job);
                        continue;
                    }
                    return Some(self.start(job, Lane::Background));
                }
            }
            if let Some(job) = self.next_client(queues) {
                return Some(self.start(job, Lane::Client));
            }
            let (job, heavy) = queues.background()?;
            // No client job waits: a heavy job may start at once.
            return Some(self.woke(Woke::Background(job, heavy)));
        }
    }

    /// The first job of the next batch when the writer had to wait for one.
    pub(crate) fn woke(&mut self, woke: Woke<J>) -> J {
        match woke {
            Woke::Client(job) => self.start(job, Lane::Client),
            Woke::Background(job, heavy) => {
                self.heavy_next = heavy;
                self.start(job, Lane::Background)
            }
        }
    }

    fn start(&mut self, job: J, lane: Lane) -> J {
        self.lane = lane;
        job
    }

    /// The jobs the batch opened by `first` takes up front: a client batch every queued
    /// client job up to `batch_max`; a background batch only its first (it pulls more as it
    /// runs, [`Lanes::pull_background`]).
    pub(crate) fn batch(&mut self, queues: &mut impl Queues<J>, first: J) -> Vec<J> {
        let mut jobs = Vec::with_capacity(self.batch_max.min(1024));
        jobs.push(first);
        while self.lane == Lane::Client && jobs.len() < self.batch_max {
            match self.next_client(queues) {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        jobs
    }

    /// Whether the batch just started opens with a heavy job (asked once per batch).
    pub(crate) fn take_heavy_next(&mut self) -> bool {
        std::mem::take(&mut self.heavy_next)
    }

    /// What the batch just started, holding `taken` jobs, may pull while it runs from `now`.
    pub(crate) fn pull(&self, taken: usize, now: Instant) -> Pull {
        Pull {
            room: match self.lane {
                Lane::Client => 0,
                Lane::Background => self.batch_max.saturating_sub(taken),
            },
            until: now + self.budget,
            taken,
        }
    }

    /// The next background job for the running batch, if it may take one at `now`. A heavy
    /// job is not taken: it is deferred to open a later batch.
    pub(crate) fn pull_background(
        &mut self,
        queues: &mut impl Queues<J>,
        pull: &mut Pull,
        now: Instant,
    ) -> Option<J> {
        if pull.room == 0 || self.deferred.is_some() {
            return None;
        }
        if pull.taken > 0 && now >= pull.until {
            return None;
        }
        if pull.taken > 0 && self.client_waiting(queues) {
            return None;
        }
        let (job, heavy) = queues.background()?;
        if heavy {
            self.deferred = Some(job);
            return None;
        }
        pull.room -= 1;
        pull.taken += 1;
        Some(job)
    }

    fn next_client(&mut self, queues: &mut impl Queues<J>) -> Option<J> {
        self.peeked.take().or_else(|| queues.client())
    }

    /// Whether a client job is queued (kept in `peeked`, so it stays first in line).
    fn client_waiting(&mut self, queues: &mut impl Queues<J>) -> bool {
        if self.peeked.is_none() {
            self.peeked = queues.client();
        }
        self.peeked.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Client jobs are `c0, c1, ...`, background ones `b0, b1, ...`, heavy ones `h0, ...`.
    #[derive(Default)]
    struct Fake {
        client: VecDeque<String>,
        background: VecDeque<(String, bool)>,
    }

    impl Fake {
        fn with(client: usize, background: &[&str]) -> Fake {
            Fake {
                client: (0..client).map(|i| format!("c{i}")).collect(),
                background: background
                    .iter()
                    .map(|b| (b.to_string(), b.starts_with('h')))
                    .collect(),
            }
        }
    }

    impl Queues<String> for Fake {
        fn client(&mut self) -> Option<String> {
            self.client.pop_front()
        }
        fn background(&mut self) -> Option<(String, bool)> {
            self.background.pop_front()
        }
    }

    const BUDGET: Duration = Duration::from_millis(4);

    /// Runs batches until both queues are empty, each batch pulling background jobs at the
    /// instant `clock(job index in batch)` after its start; returns each batch's jobs and
    /// whether it opened with a heavy job.
    fn batches(
        lanes: &mut Lanes<String>,
        q: &mut Fake,
        clock: impl Fn(usize) -> Duration,
    ) -> Vec<(Vec<String>, bool)> {
        let mut out = Vec::new();
        while let Some(first) = lanes.first(q) {
            let heavy = lanes.take_heavy_next();
            let mut jobs = lanes.batch(q, first);
            let start = Instant::now();
            let mut pull = lanes.pull(jobs.len(), start);
            while let Some(job) = lanes.pull_background(q, &mut pull, start + clock(jobs.len())) {
                jobs.push(job);
            }
            out.push((jobs, heavy));
            assert!(out.len() < 1000, "no end");
        }
        out
    }

    fn names(batches: &[(Vec<String>, bool)]) -> Vec<String> {
        batches.iter().map(|(jobs, _)| jobs.join(" ")).collect()
    }

    fn no_time(_: usize) -> Duration {
        Duration::ZERO
    }

    #[test]
    fn with_both_lanes_empty_there_is_no_batch() {
        let mut lanes = Lanes::<String>::new(8, BUDGET);
        assert!(lanes.first(&mut Fake::default()).is_none());
    }

    #[test]
    fn client_jobs_alone_fill_batches_up_to_the_bound() {
        let mut lanes = Lanes::new(4, BUDGET);
        let mut q = Fake::with(10, &[]);
        let got = names(&batches(&mut lanes, &mut q, no_time));
        assert_eq!(got, ["c0 c1 c2 c3", "c4 c5 c6 c7", "c8 c9"]);
    }

    #[test]
    fn background_jobs_alone_fill_batches_up_to_the_bound_within_the_budget() {
        let mut lanes = Lanes::new(3, BUDGET);
        let mut q = Fake::with(0, &["b0", "b1", "b2", "b3"]);
        let got = names(&batches(&mut lanes, &mut q, no_time));
        assert_eq!(got, ["b0 b1 b2", "b3"]);
    }

    #[test]
    fn a_background_batch_stops_pulling_at_its_budget_but_runs_at_least_one_job() {
        let mut lanes = Lanes::new(100, BUDGET);
        let mut q = Fake::with(0, &["b0", "b1", "b2", "b3", "b4"]);
        // Each job takes 2 ms: the budget of 4 ms is spent after two.
        let got = names(&batches(&mut lanes, &mut q, |taken| {
            Duration::from_millis(2 * taken as u64)
        }));
        assert_eq!(got, ["b0 b1", "b2 b3", "b4"]);
        // A first job that alone takes longer than the budget still runs, one per batch.
        let mut q = Fake::with(0, &["b0", "b1"]);
        let got = names(&batches(&mut lanes, &mut q, |_| BUDGET * 10));
        assert_eq!(got, ["b0", "b1"]);
    }

    #[test]
    fn when_both_lanes_wait_they_take_turns() {
        let mut lanes = Lanes::new(2, BUDGET);
        let mut q = Fake::with(5, &["b0", "b1", "b2", "b3", "b4", "b5"]);
        let got = names(&batches(&mut lanes, &mut q, no_time));
        // A client batch first, then a background batch that stops at once because a client
        // job waits (after the one job it always runs), and so on.
        assert_eq!(got, ["c0 c1", "b0", "c2 c3", "b1", "c4", "b2 b3", "b4 b5"]);
    }

    #[test]
    fn a_client_job_arriving_ends_a_background_batch() {
        let mut lanes = Lanes::new(100, BUDGET);
        let mut q = Fake::with(0, &["b0", "b1", "b2"]);
        let first = lanes.first(&mut q).unwrap();
        let mut jobs = lanes.batch(&mut q, first);
        let now = Instant::now();
        let mut pull = lanes.pull(jobs.len(), now);
        jobs.extend(lanes.pull_background(&mut q, &mut pull, now));
        q.client.push_back("c0".into());
        assert!(lanes.pull_background(&mut q, &mut pull, now).is_none());
        assert_eq!(jobs, ["b0", "b1"]);
        // The client job it looked at is not lost: it opens the next batch.
        let next = lanes.first(&mut q).unwrap();
        assert_eq!(lanes.batch(&mut q, next), ["c0"]);
    }

    #[test]
    fn a_client_batch_never_pulls_background_jobs() {
        let mut lanes = Lanes::new(100, BUDGET);
        let mut q = Fake::with(1, &["b0"]);
        let first = lanes.first(&mut q).unwrap();
        let jobs = lanes.batch(&mut q, first);
        let now = Instant::now();
        let mut pull = lanes.pull(jobs.len(), now);
        assert!(lanes.pull_background(&mut q, &mut pull, now).is_none());
        assert_eq!(jobs, ["c0"]);
    }

    #[test]
    fn a_heavy_job_with_no_client_waiting_opens_a_batch_at_once() {
        let mut lanes = Lanes::new(100, BUDGET);
        let mut q = Fake::with(0, &["h0", "b0"]);
        let got = batches(&mut lanes, &mut q, no_time);
        // It is the batch's first job and the writer is told; lighter jobs may follow it.
        assert_eq!(got, [(vec!["h0".to_string(), "b0".to_string()], true)]);
    }

    #[test]
    fn a_heavy_job_met_while_pulling_opens_its_own_batch_after_the_queued_clients() {
        let mut lanes = Lanes::new(100, BUDGET);
        let mut q = Fake::with(0, &["b0", "h0", "b1"]);
        let first = lanes.first(&mut q).unwrap();
        let mut jobs = lanes.batch(&mut q, first);
        let now = Instant::now();
        let mut pull = lanes.pull(jobs.len(), now);
        while let Some(job) = lanes.pull_background(&mut q, &mut pull, now) {
            jobs.push(job);
        }
        // Met while this batch filled: deferred, and it ends the batch's pulls.
        assert_eq!(jobs, ["b0"]);
        // Clients that queued meanwhile have a batch without it first.
        q.client.extend(["c0".to_string(), "c1".to_string()]);
        let got = batches(&mut lanes, &mut q, no_time);
        assert_eq!(
            got,
            [
                (vec!["c0".to_string(), "c1".to_string()], false),
                (vec!["h0".to_string(), "b1".to_string()], true),
            ]
        );
    }

    #[test]
    fn a_heavy_job_whose_turn_comes_after_a_client_batch_lets_waiting_clients_go_first() {
        let mut lanes = Lanes::new(2, BUDGET);
        let mut q = Fake::with(4, &["h0"]);
        let got = batches(&mut lanes, &mut q, no_time);
        // After the first client batch it is the background lane's turn, but the heavy job
        // yields once to the clients still queued, then runs alone at the head of its batch.
        assert_eq!(
            got,
            [
                (vec!["c0".to_string(), "c1".to_string()], false),
                (vec!["c2".to_string(), "c3".to_string()], false),
                (vec!["h0".to_string()], true),
            ]
        );
    }

    #[test]
    fn a_heavy_job_yields_once_not_forever() {
        let mut lanes = Lanes::new(1, BUDGET);
        let mut q = Fake::with(1, &["h0"]);
        assert_eq!(lanes.first(&mut q).as_deref(), Some("c0"));
        assert!(!lanes.take_heavy_next());
        // The background lane's turn: the heavy job is deferred and yields to the client
        // queue, which has since refilled.
        q.client.extend(["c1".to_string(), "c2".to_string()]);
        assert_eq!(lanes.first(&mut q).as_deref(), Some("c1"));
        // Yielded once: it runs now although c2 still waits.
        assert_eq!(lanes.first(&mut q).as_deref(), Some("h0"));
        assert!(lanes.take_heavy_next());
        assert_eq!(lanes.first(&mut q).as_deref(), Some("c2"));
    }

    #[test]
    fn a_job_the_writer_woke_for_opens_a_batch_of_its_lane() {
        let mut lanes = Lanes::new(8, BUDGET);
        let mut q = Fake::with(2, &[]);
        let first = lanes.woke(Woke::Client("w".to_string()));
        assert_eq!(lanes.batch(&mut q, first), ["w", "c0", "c1"]);
        let first = lanes.woke(Woke::Background("h".to_string(), true));
        assert!(lanes.take_heavy_next());
        q.background.push_back(("b0".to_string(), false));
        let jobs = lanes.batch(&mut q, first);
        assert_eq!(jobs, ["h"]);
        let now = Instant::now();
        let mut pull = lanes.pull(jobs.len(), now);
        assert_eq!(
            lanes.pull_background(&mut q, &mut pull, now).as_deref(),
            Some("b0")
        );
    }
}
