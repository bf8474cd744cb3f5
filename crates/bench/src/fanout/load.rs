//! The load drivers: how each mode posts a tweet ([`Target`]) and the open loop that sends at
//! fixed intervals through a rate schedule (saturation probes, 80% load, burst).
//!
//! The open loop registers each tweet at its scheduled time and measures from there, so a tweet
//! that waits for a free request slot or a late pacer is charged the wait (no coordinated
//! omission). Requests in flight are bounded by a semaphore of [`INFLIGHT_MAX`] permits.

use crate::fanout::app::{fan_out, insert_tweet, push_job};
use crate::fanout::markers::MarkerWatch;
use crate::fanout::tracker::Tracker;
use crate::fanout::workload::Tweet;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most tweets in flight at once in the open loop.
pub const INFLIGHT_MAX: usize = 512;
/// Errors printed per phase (the rest are only counted).
const ERRORS_PRINTED_MAX: u64 = 5;

/// The three ways of getting a tweet fanned out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The client inserts the tweet, then fans it out itself before acknowledging.
    Sync,
    /// The client inserts the tweet and LPUSHes a job for the worker process.
    Queue,
    /// The client inserts the tweet; a trigger in Herald fans it out.
    Triggers,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Queue => "queue",
            Mode::Triggers => "triggers",
        }
    }

    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "sync" => Ok(Mode::Sync),
            "queue" => Ok(Mode::Queue),
            "triggers" => Ok(Mode::Triggers),
            _ => Err(format!("unknown mode {s:?} (sync, queue, triggers)")),
        }
    }
}

/// Where and how a mode posts.
pub struct Target {
    pub mode: Mode,
    pub http: reqwest::Client,
    pub base: String,
    pub redis: Option<redis::aio::MultiplexedConnection>,
}

impl Target {
    /// Posts one tweet; Ok when the mode counts it acknowledged.
    pub async fn post(&self, t: &Tweet) -> Result<(), String> {
        insert_tweet(&self.http, &self.base, t).await?;
        match self.mode {
            Mode::Sync => fan_out(&self.http, &self.base, t).await.map(|_| ()),
            Mode::Queue => {
                let mut redis = self.redis.clone().ok_or("queue mode without Redis")?;
                push_job(&mut redis, t).await
            }
            Mode::Triggers => Ok(()),
        }
    }
}

/// What one phase posts through, and where it records.
pub struct Phase {
    pub target: Arc<Target>,
    pub tracker: Arc<Tracker>,
    pub watch: Arc<MarkerWatch>,
    pub users: usize,
    pub seed: u64,
    pub errors: AtomicU64,
}

impl Phase {
    fn error(&self, e: &str) {
        if self.errors.fetch_add(1, Ordering::Relaxed) < ERRORS_PRINTED_MAX {
            eprintln!("herald-bench: {e}");
        }
    }

    /// Sends tweet `k` (registered in the tracker) and records its acknowledgement.
    async fn send(&self, k: u64, author: u32, rng: &mut impl Rng) {
        if let Err(e) = self.watch.ensure(k).await {
            self.error(&e);
        }
        let tweet = Tweet::new(
            self.watch.tweet_id(k),
            author,
            self.watch.bucket_run(k),
            rng,
        );
        self.tracker.sent(k);
        let r = self.target.post(&tweet).await;
        if let Err(e) = &r {
            self.error(e);
        }
        self.tracker.ack(k, r.is_ok());
    }
}

/// A step of an open-loop schedule: this many tweets per second for this many seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub rate: f64,
    pub secs: f64,
}

/// Due times (seconds from the start) of a schedule: evenly spaced within each step.
pub fn schedule(steps: &[Step]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut t0 = 0.0;
    for s in steps {
        let n = (s.rate * s.secs).round().max(0.0) as u64;
        out.extend((0..n).map(|i| t0 + i as f64 / s.rate));
        t0 += s.secs;
    }
    out
}

/// Sends on the schedule of `steps`; returns the start (tracker time) once every send is
/// acknowledged or failed.
///
/// The pacing runs on a thread of its own with `std::thread::sleep`, which wakes within tens of
/// microseconds: tokio's timer has a resolution of one millisecond, so pacing on it sent each
/// tweet up to a millisecond late and charged that to the server.
pub async fn open_loop(phase: &Arc<Phase>, steps: &[Step]) -> u64 {
    let dues = schedule(steps);
    let permits = Arc::new(tokio::sync::Semaphore::new(INFLIGHT_MAX));
    let start = Instant::now();
    let start_us = phase.tracker.us(start);
    let pacer = {
        let (phase, permits) = (phase.clone(), permits.clone());
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("bench-pacer".into())
            .spawn(move || pace(&phase, &permits, &runtime, start, &dues))
            .expect("spawn the pacer")
    };
    let _ = tokio::task::spawn_blocking(move || pacer.join()).await;
    let _ = permits.acquire_many(INFLIGHT_MAX as u32).await;
    start_us
}

/// The open loop's pacer thread: at each due time, takes a request slot and spawns the send.
fn pace(
    phase: &Arc<Phase>,
    permits: &Arc<tokio::sync::Semaphore>,
    runtime: &tokio::runtime::Handle,
    start: Instant,
    dues: &[f64],
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(phase.seed);
    for &due in dues {
        let due = start + Duration::from_secs_f64(due);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => runtime
                .block_on(permits.clone().acquire_owned())
                .expect("open"),
        };
        let author = rng.gen_range(0..phase.users) as u32;
        let Some(k) = phase.tracker.begin(due, author) else {
            break;
        };
        let seed = rng.gen::<u64>();
        let phase = phase.clone();
        runtime.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            phase.send(k, author, &mut rng).await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_space_sends_evenly_per_step() {
        let s = schedule(&[
            Step {
                rate: 2.0,
                secs: 1.0,
            },
            Step {
                rate: 4.0,
                secs: 0.5,
            },
        ]);
        assert_eq!(s, vec![0.0, 0.5, 1.0, 1.25]);
        assert!(schedule(&[Step {
            rate: 0.0,
            secs: 3.0
        }])
        .is_empty());
    }

    #[test]
    fn modes_parse_by_name() {
        for m in [Mode::Sync, Mode::Queue, Mode::Triggers] {
            assert_eq!(Mode::parse(m.name()), Ok(m));
        }
        assert!(Mode::parse("kafka").is_err());
    }
}
