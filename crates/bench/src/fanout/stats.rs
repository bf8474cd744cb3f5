//! Statistics of a phase, computed from the tracker's slots and samples afterwards: latency
//! distributions (hdrhistogram), the burst's per-interval rows, the time the backlog took to
//! drain, and CPU seconds per 1,000 tweets.

use crate::fanout::tracker::{Sample, Slot};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// A latency distribution in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Dist {
    pub n: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    pub stddev: f64,
}

impl Dist {
    pub fn of(values_us: impl IntoIterator<Item = u64>) -> Dist {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("histogram");
        for v in values_us {
            h.saturating_record(v.max(1));
        }
        if h.is_empty() {
            return Dist::default();
        }
        let ms = |us: f64| us / 1000.0;
        Dist {
            n: h.len(),
            p50: ms(h.value_at_quantile(0.5) as f64),
            p99: ms(h.value_at_quantile(0.99) as f64),
            max: ms(h.max() as f64),
            mean: ms(h.mean()),
            stddev: ms(h.stdev()),
        }
    }

    pub fn json(&self) -> Value {
        json!({"n": self.n, "p50": self.p50, "p99": self.p99, "max": self.max, "mean": self.mean, "stddev": self.stddev})
    }
}

fn acked(slots: &[Slot]) -> impl Iterator<Item = &Slot> {
    slots.iter().filter(|s| s.ack_us > 0)
}

/// Acknowledgement latency from when each tweet was due (open loop: its scheduled time, so
/// time spent waiting to be sent counts: no coordinated omission).
pub fn ack_from_due(slots: &[Slot]) -> Dist {
    Dist::of(acked(slots).map(|s| s.ack_us.saturating_sub(s.due_us)))
}

/// Acknowledgement latency from when each request was sent.
pub fn ack_from_send(slots: &[Slot]) -> Dist {
    Dist::of(acked(slots).map(|s| s.ack_us.saturating_sub(s.sent_us)))
}

/// Propagation delay: acknowledgement to marker arrival (0 if the marker came first).
pub fn propagation(slots: &[Slot]) -> Dist {
    Dist::of(
        acked(slots)
            .filter(|s| s.done_us > 0)
            .map(|s| s.done_us.saturating_sub(s.ack_us)),
    )
}

/// One interval of the burst table.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub start_s: f64,
    /// Tweets due in the interval, and their acknowledgement latency from due.
    pub due: u64,
    pub ack: Dist,
    /// Markers that arrived in the interval.
    pub completed: u64,
    /// At the interval's end: acknowledged but unfinished fan-outs, and due but unacknowledged
    /// tweets.
    pub backlog: u64,
    pub unacked: u64,
}

/// Splits `[start_us, end_us)` into intervals of `width_us`.
pub fn intervals(
    slots: &[Slot],
    samples: &[Sample],
    start_us: u64,
    end_us: u64,
    width_us: u64,
) -> Vec<Interval> {
    let width_us = width_us.max(1);
    let n = end_us.saturating_sub(start_us).div_ceil(width_us) as usize;
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut due = vec![0u64; n];
    let mut completed = vec![0u64; n];
    let index = |t: u64| -> Option<usize> {
        (t >= start_us && t < end_us).then(|| ((t - start_us) / width_us) as usize)
    };
    for s in slots {
        if let Some(i) = index(s.due_us) {
            due[i] += 1;
            if s.ack_us > 0 {
                lat[i].push(s.ack_us.saturating_sub(s.due_us));
            }
        }
        if let Some(i) = index(s.done_us).filter(|_| s.done_us > 0) {
            completed[i] += 1;
        }
    }
    (0..n)
        .map(|i| {
            let end = start_us + (i as u64 + 1) * width_us;
            // The last sample taken at or before the interval's end.
            let at_end = samples
                .iter()
                .take_while(|s| s.t_us <= end)
                .last()
                .copied()
                .unwrap_or_default();
            Interval {
                start_s: (i as u64 * width_us) as f64 / 1e6,
                due: due[i],
                ack: Dist::of(std::mem::take(&mut lat[i])),
                completed: completed[i],
                backlog: at_end.backlog(),
                unacked: at_end.unacked(),
            }
        })
        .collect()
}

/// Seconds from `from_us` until the backlog (acknowledged but unfinished fan-outs, plus
/// tweets due but unacknowledged) is back at or below `threshold`; None if it never is.
pub fn drained_after(samples: &[Sample], from_us: u64, threshold: u64) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.t_us >= from_us)
        .find(|s| s.backlog() + s.unacked() <= threshold)
        .map(|s| (s.t_us - from_us) as f64 / 1e6)
}

/// The largest backlog (fan-outs plus unacknowledged tweets) among samples in a time range.
pub fn peak_backlog(samples: &[Sample], from_us: u64, to_us: u64) -> u64 {
    samples
        .iter()
        .filter(|s| s.t_us >= from_us && s.t_us < to_us)
        .map(|s| s.backlog() + s.unacked())
        .max()
        .unwrap_or(0)
}

/// CPU seconds per 1,000 tweets, per process and in total (the last entry).
pub fn per_thousand(cpu: &[(String, f64)], tweets: u64) -> Vec<(String, f64)> {
    let k = tweets.max(1) as f64 / 1000.0;
    let mut out: Vec<(String, f64)> = cpu.iter().map(|(n, s)| (n.clone(), s / k)).collect();
    out.push(("total".into(), cpu.iter().map(|(_, s)| s).sum::<f64>() / k));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(due: u64, ack: u64, done: u64) -> Slot {
        Slot {
            due_us: due,
            sent_us: due,
            ack_us: ack,
            done_us: done,
            ..Slot::default()
        }
    }

    #[test]
    fn distributions_in_milliseconds() {
        let d = Dist::of([1000, 2000, 3000, 4000]);
        assert_eq!(d.n, 4);
        assert!((d.p50 - 2.0).abs() < 0.01, "{d:?}");
        assert!((d.max - 4.0).abs() < 0.01);
        assert!((d.mean - 2.5).abs() < 0.01);
        assert!((d.stddev - 1.118).abs() < 0.01);
        assert_eq!(Dist::of([]), Dist::default());
    }

    #[test]
    fn latencies_are_measured_from_due_and_propagation_from_ack() {
        let slots = [slot(0, 5_000, 9_000), slot(10, 20, 0), slot(7, 0, 0)];
        assert_eq!(ack_from_due(&slots).n, 2);
        assert!((ack_from_due(&slots).max - 5.0).abs() < 0.01);
        let p = propagation(&slots);
        assert_eq!(p.n, 1);
        assert!((p.p50 - 4.0).abs() < 0.01);
    }

    #[test]
    fn intervals_count_due_completed_and_backlog() {
        let slots = [
            slot(100, 200, 1_500_000),
            slot(900_000, 950_000, 1_200_000),
            slot(1_100_000, 1_150_000, 0),
        ];
        let samples = [
            Sample {
                t_us: 1_000_000,
                scheduled: 2,
                acked: 2,
                done: 0,
                failed: 0,
            },
            Sample {
                t_us: 2_000_000,
                scheduled: 3,
                acked: 3,
                done: 2,
                failed: 0,
            },
        ];
        let rows = intervals(&slots, &samples, 0, 2_000_000, 1_000_000);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].due, rows[0].completed, rows[0].backlog), (2, 0, 2));
        assert_eq!((rows[1].due, rows[1].completed, rows[1].backlog), (1, 2, 1));
        assert_eq!(rows[1].start_s, 1.0);
        assert_eq!(rows[0].ack.n, 2);
    }

    #[test]
    fn drain_and_peak_follow_the_samples() {
        let s = |t, acked, done| Sample {
            t_us: t,
            scheduled: acked,
            acked,
            done,
            failed: 0,
        };
        let samples = [s(0, 5, 4), s(100, 50, 10), s(200, 60, 58), s(300, 61, 61)];
        assert_eq!(peak_backlog(&samples, 0, 300), 40);
        assert_eq!(drained_after(&samples, 100, 2), Some(100e-6));
        assert_eq!(drained_after(&samples, 100, 0), Some(200e-6));
        assert_eq!(drained_after(&samples, 400, 0), None);
    }

    #[test]
    fn cpu_per_thousand_tweets_with_a_total() {
        let cpu = vec![("a".to_string(), 2.0), ("b".to_string(), 1.0)];
        let per = per_thousand(&cpu, 500);
        assert_eq!(
            per,
            vec![("a".into(), 4.0), ("b".into(), 2.0), ("total".into(), 6.0)]
        );
    }
}
