//! The results of `herald-bench fanout`: one struct per phase, the tables printed after each
//! mode and at the end (saturation, 80% load, CPU per 1,000 tweets, burst), the issue's
//! targets, and the JSON written to `--out`.

use super::search::{lag_allowed, Probe};
use crate::fanout::load::Mode;
use crate::fanout::stats::{Dist, Interval};
use serde_json::{json, Value};

pub struct SatResult {
    /// The highest rate a probe kept up with, or the rate given with `--rate`.
    pub rate: f64,
    /// False when `--rate` replaced the search.
    pub searched: bool,
    pub probes: Vec<Probe>,
}

pub struct LoadResult {
    pub rate: f64,
    pub secs: f64,
    pub tweets: u64,
    pub ack_rate: f64,
    /// From the scheduled send time.
    pub ack: Dist,
    pub ack_from_send: Dist,
    pub propagation: Dist,
    pub cpu_per_k: Vec<(String, f64)>,
    pub drain_secs: f64,
    pub drained: bool,
    pub errors: u64,
    pub wrong: u64,
}

pub struct BurstResult {
    /// The sustained rate the steps are relative to.
    pub rate: f64,
    pub steps: [f64; 3],
    pub intervals: Vec<Interval>,
    pub pre_burst_backlog: u64,
    pub peak_backlog: u64,
    /// Seconds after the 200% step until the backlog was back at its pre-burst peak.
    pub drained_after: Option<f64>,
    pub ack_in_burst: Dist,
    pub ack: Dist,
    pub propagation: Dist,
    pub cpu_per_k: Vec<(String, f64)>,
    pub tweets: u64,
    pub errors: u64,
    pub wrong: u64,
}

pub struct ModeResult {
    pub mode: Mode,
    pub sat: SatResult,
    pub load: LoadResult,
    pub burst: BurstResult,
}

fn cpu_json(cpu: &[(String, f64)]) -> Value {
    Value::Object(cpu.iter().map(|(n, s)| (n.clone(), json!(s))).collect())
}

fn cpu_of(cpu: &[(String, f64)], name: &str) -> Option<f64> {
    cpu.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
}

fn total_cpu(cpu: &[(String, f64)]) -> f64 {
    cpu_of(cpu, "total").unwrap_or(0.0)
}

impl ModeResult {
    pub fn json(&self) -> Value {
        let (s, l, b) = (&self.sat, &self.load, &self.burst);
        json!({
            "mode": self.mode.name(),
            "saturation": {"sustainedRate": s.rate, "searched": s.searched, "lagAllowedSeconds": s.probes.first().map(|p| lag_allowed(p.secs)),
                "probes": s.probes.iter().map(|p| json!({"rate": p.rate, "seconds": p.secs, "tweets": p.tweets,
                    "completedPerSec": p.completed_per_sec, "lagSeconds": p.lag_secs, "drained": p.drained, "keptUp": p.pass,
                    "ackFromScheduleMs": p.ack.json(), "propagationMs": p.propagation.json(),
                    "cpuSecsPer1000": cpu_json(&p.cpu_per_k), "errors": p.errors, "wrongMarkers": p.wrong}))
                    .collect::<Vec<_>>()},
            "load80": {"rate": l.rate, "seconds": l.secs, "tweets": l.tweets, "ackRate": l.ack_rate,
                "ackFromScheduleMs": l.ack.json(), "ackFromSendMs": l.ack_from_send.json(),
                "propagationMs": l.propagation.json(), "cpuSecsPer1000": cpu_json(&l.cpu_per_k),
                "drainSeconds": l.drain_secs, "drained": l.drained, "errors": l.errors, "wrongMarkers": l.wrong},
            "burst": {"sustainedRate": b.rate, "stepSeconds": b.steps, "tweets": b.tweets,
                "preBurstBacklog": b.pre_burst_backlog, "peakBacklog": b.peak_backlog,
                "drainedSecondsAfterBurst": b.drained_after, "ackInBurstMs": b.ack_in_burst.json(),
                "ackFromScheduleMs": b.ack.json(), "propagationMs": b.propagation.json(),
                "cpuSecsPer1000": cpu_json(&b.cpu_per_k), "errors": b.errors, "wrongMarkers": b.wrong,
                "intervals": b.intervals.iter().map(|i| json!({"startSec": i.start_s, "due": i.due,
                    "ackMs": i.ack.json(), "completed": i.completed, "backlog": i.backlog, "unacked": i.unacked}))
                    .collect::<Vec<_>>()},
        })
    }
}

/// The burst's per-interval table of one mode.
pub fn print_mode(r: &ModeResult) {
    let b = &r.burst;
    println!(
        "\nburst, {}: {:.0}/s for {} s, {:.0}/s for {} s, {:.0}/s for {} s (ack latency from schedule)",
        r.mode.name(),
        0.5 * b.rate,
        b.steps[0],
        2.0 * b.rate,
        b.steps[1],
        0.5 * b.rate,
        b.steps[2]
    );
    println!(
        "{:>7} {:>7} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "t s", "due", "ack p50", "ack p99", "completed", "backlog", "unacked"
    );
    for i in &b.intervals {
        println!(
            "{:>7.0} {:>7} {:>10.2} {:>10.2} {:>10} {:>9} {:>9}",
            i.start_s, i.due, i.ack.p50, i.ack.p99, i.completed, i.backlog, i.unacked
        );
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The summary tables over all modes, and the targets.
pub fn print_summary(results: &[ModeResult]) {
    println!(
        "\nsaturation (open-loop probes; kept up = every fan-out done within {:.2} s of the schedule's end)",
        results
            .iter()
            .find_map(|r| r.sat.probes.first())
            .map_or(0.0, |p| lag_allowed(p.secs))
    );
    println!(
        "{:<9} {:>9} {:>12} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "mode", "probe/s", "completed/s", "lag s", "ack p50", "ack p99", "prop p99", "result"
    );
    for r in results {
        for p in &r.sat.probes {
            println!(
                "{:<9} {:>9.1} {:>12.1} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>7}",
                r.mode.name(),
                p.rate,
                p.completed_per_sec,
                p.lag_secs,
                p.ack.p50,
                p.ack.p99,
                p.propagation.p99,
                if p.pass { "ok" } else { "behind" }
            );
        }
        println!(
            "{:<9} sustained: {:.1} tweets/s{}",
            r.mode.name(),
            r.sat.rate,
            if r.sat.searched {
                ""
            } else {
                " (given with --rate)"
            }
        );
    }
    println!("\n80% load (open loop; ack latency from the scheduled send time, ms)");
    println!(
        "{:<9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "mode",
        "rate",
        "ack p50",
        "stddev",
        "p99",
        "max",
        "send p50",
        "prop p50",
        "prop p99",
        "prop max",
        "errors"
    );
    for r in results {
        let l = &r.load;
        println!(
            "{:<9} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.1} {:>9.2} {:>9.1} {:>9.1} {:>9.1} {:>7}",
            r.mode.name(),
            l.rate,
            l.ack.p50,
            l.ack.stddev,
            l.ack.p99,
            l.ack.max,
            l.ack_from_send.p50,
            l.propagation.p50,
            l.propagation.p99,
            l.propagation.max,
            l.errors + l.wrong
        );
    }
    println!("\nCPU seconds per 1,000 tweets at 80% load (until drained)");
    println!(
        "{:<9} {:>13} {:>13} {:>13} {:>13} {:>9}",
        "mode", "herald serve", "redis-server", "queue worker", "bench client", "total"
    );
    for r in results {
        let c = &r.load.cpu_per_k;
        println!(
            "{:<9} {:>13} {:>13} {:>13} {:>13} {:>9.3}",
            r.mode.name(),
            opt(cpu_of(c, "herald serve")),
            opt(cpu_of(c, "redis-server")),
            opt(cpu_of(c, "queue worker")),
            opt(cpu_of(c, "bench client")),
            total_cpu(c)
        );
    }
    println!("\nburst (50% -> 200% -> 50% of the sustained rate)");
    println!(
        "{:<9} {:>9} {:>13} {:>13} {:>9} {:>9} {:>13} {:>9}",
        "mode",
        "burst/s",
        "ack p50 burst",
        "ack p99 burst",
        "ack max",
        "peak bkl",
        "drained after",
        "prop p99"
    );
    for r in results {
        let b = &r.burst;
        println!(
            "{:<9} {:>9.0} {:>13.2} {:>13.2} {:>9.1} {:>9} {:>13} {:>9.1}",
            r.mode.name(),
            2.0 * b.rate,
            b.ack_in_burst.p50,
            b.ack_in_burst.p99,
            b.ack.max,
            b.peak_backlog,
            b.drained_after
                .map_or("never".into(), |s| format!("{s:.1} s")),
            b.propagation.p99
        );
    }
    let get = |m: Mode| results.iter().find(|r| r.mode == m);
    if let Some(t) = get(Mode::Triggers) {
        let p50 = t.load.ack.p50;
        println!(
            "\ntarget: integrated ack p50 <= 1 ms at 80% load: {} ({p50:.2} ms)",
            if p50 <= 1.0 { "met" } else { "NOT met" }
        );
        if let Some(q) = get(Mode::Queue) {
            let (tt, qt) = (t.sat.rate, q.sat.rate);
            let (tc, qc) = (total_cpu(&t.load.cpu_per_k), total_cpu(&q.load.cpu_per_k));
            println!(
                "target: integrated throughput >= external queue ({tt:.1} vs {qt:.1}/s): {}; with less total CPU ({tc:.3} vs {qc:.3} s per 1,000): {}",
                if tt >= qt { "met" } else { "NOT met" },
                if tc < qc { "met" } else { "NOT met" }
            );
        }
    }
}
