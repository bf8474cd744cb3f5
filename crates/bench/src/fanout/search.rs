//! The saturation phase of `herald-bench fanout`: the highest rate a mode sustains, found with
//! open-loop probes (doubling from a start rate, then bisecting), not with a closed loop.
//!
//! A closed loop measures the wrong thing once acknowledgements are cheaper than fan-outs: the
//! posters are acknowledged thousands of times a second, the queue floods, and the fan-outs
//! completed within the window (competing with that flood) say little about the rate the mode
//! keeps up with when tweets arrive at it. A probe here sends at a fixed rate for `secs` and
//! passes when the mode kept up: every fan-out it was sent finished within
//! [`lag_allowed`] of the schedule's end (so the backlog at the end was at most that much
//! work), with no errors and no wrong timelines.

use super::report::SatResult;
use super::rig::{run_open_loop, Rig};
use super::stats::{self, Dist};
use super::tracker::Slot;
use super::workload::Graph;
use super::{load, FanoutOptions};
use std::sync::atomic::Ordering;

/// How the saturation search probes.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// The first probe's rate (tweets/s); probes double from here while they pass.
    pub start: f64,
    /// No probe above this rate.
    pub max: f64,
    /// Seconds of each probe.
    pub secs: f64,
    /// Bisections between the highest passing and the lowest failing rate.
    pub bisect_steps: u32,
}

/// One probe: an open loop at `rate` for `secs`.
#[derive(Debug, Clone)]
pub struct Probe {
    pub rate: f64,
    pub secs: f64,
    pub tweets: u64,
    /// Fan-outs completed within the probe's window, per second.
    pub completed_per_sec: f64,
    /// From the schedule's end to the last fan-out's completion (0 if before it).
    pub lag_secs: f64,
    pub drained: bool,
    pub ack: Dist,
    pub propagation: Dist,
    pub cpu_per_k: Vec<(String, f64)>,
    pub errors: u64,
    pub wrong: u64,
    pub pass: bool,
}

/// The longest a probe's last fan-out may complete after the schedule's end and still count
/// as kept up: half a second plus 5% of the probe (a backlog of at most that much work).
pub fn lag_allowed(secs: f64) -> f64 {
    0.5 + 0.05 * secs
}

/// Runs the probes against `rig` and returns them with the highest passing rate. Fails when
/// no probe down to the bisection's floor passed.
pub async fn search(
    rig: &mut Rig,
    mode: load::Mode,
    opts: &FanoutOptions,
    graph: &Graph,
) -> Result<SatResult, String> {
    let o = opts.search;
    let mut probes: Vec<Probe> = Vec::new();
    let mut best: Option<f64> = None;
    let mut failed: Option<f64> = None;
    let mut rate = o.start;
    while rate <= o.max {
        let p = probe(rig, mode, opts, graph, rate, probes.len()).await?;
        let pass = p.pass;
        probes.push(p);
        if !pass {
            failed = Some(rate);
            break;
        }
        best = Some(rate);
        rate *= 2.0;
    }
    if let Some(mut hi) = failed {
        let mut lo = best.unwrap_or(0.0);
        for _ in 0..o.bisect_steps {
            let mid = (lo + hi) / 2.0;
            if mid < 1.0 {
                break;
            }
            let p = probe(rig, mode, opts, graph, mid, probes.len()).await?;
            if p.pass {
                lo = mid;
                best = Some(mid);
            } else {
                hi = mid;
            }
            probes.push(p);
        }
    }
    match best {
        Some(rate) => Ok(SatResult {
            rate,
            searched: true,
            probes,
        }),
        None => Err(format!(
            "{}: no probe kept up, down to {:.1} tweets/s",
            mode.name(),
            probes.last().map_or(o.start, |p| p.rate)
        )),
    }
}

/// Seconds from `end_us` to the last completed fan-out of `slots` (0 if none was later).
fn lag_after(slots: &[Slot], end_us: u64) -> f64 {
    let last_done = slots.iter().map(|s| s.done_us).max().unwrap_or(0);
    last_done.saturating_sub(end_us) as f64 / 1e6
}

async fn probe(
    rig: &mut Rig,
    mode: load::Mode,
    opts: &FanoutOptions,
    graph: &Graph,
    rate: f64,
    n: usize,
) -> Result<Probe, String> {
    let m = mode.name();
    let secs = opts.search.secs;
    eprintln!("herald-bench fanout: {m}: saturation probe {n}: {rate:.1} tweets/s for {secs} s");
    let steps = [load::Step { rate, secs }];
    let (ran, start_us) = run_open_loop(rig, &format!("{m}-sat{n}"), opts, graph, &steps).await?;
    let slots = ran.tracker.slots();
    let end_us = start_us + (secs * 1e6) as u64;
    let completed = slots
        .iter()
        .filter(|s| s.done_us > 0 && s.done_us <= end_us)
        .count() as f64;
    let lag_secs = lag_after(&slots, end_us);
    let tweets = slots.iter().filter(|s| s.ack_us > 0).count() as u64;
    let errors = ran.errors + ran.watch_errors;
    let wrong = ran.tracker.wrong.load(Ordering::Relaxed);
    let pass = ran.drained && errors == 0 && wrong == 0 && lag_secs <= lag_allowed(secs);
    let p = Probe {
        rate,
        secs,
        tweets,
        completed_per_sec: completed / secs,
        lag_secs,
        drained: ran.drained,
        ack: stats::ack_from_due(&slots),
        propagation: stats::propagation(&slots),
        cpu_per_k: stats::per_thousand(&ran.cpu, tweets),
        errors,
        wrong,
        pass,
    };
    eprintln!(
        "herald-bench fanout: {m}: probe {n}: {} (last fan-out {:.2} s after the schedule's end, allowed {:.2}; ack p50 {:.2} ms)",
        if pass { "kept up" } else { "fell behind" },
        p.lag_secs,
        lag_allowed(secs),
        p.ack.p50
    );
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::{lag_after, lag_allowed, Slot};

    fn done_at(done_us: u64) -> Slot {
        Slot {
            due_us: 1,
            sent_us: 1,
            ack_us: 2,
            done_us,
            author: 0,
            failed: false,
        }
    }

    #[test]
    fn the_lag_is_the_last_completion_after_the_schedule() {
        let end = 10_000_000;
        assert_eq!(lag_after(&[done_at(5), done_at(end - 1)], end), 0.0);
        let slots = [done_at(end + 1_500_000), done_at(3), done_at(end + 200_000)];
        assert_eq!(lag_after(&slots, end), 1.5);
        assert!(lag_after(&slots, end) > lag_allowed(10.0));
        assert!(lag_after(&slots[1..], end) <= lag_allowed(10.0));
    }
}
