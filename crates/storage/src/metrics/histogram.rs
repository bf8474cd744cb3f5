//! A lock-free latency histogram with fixed buckets, rendered in the Prometheus text format:
//! the store's log syncs and durable checkpoints, and the server's notification latency.
//!
//! Recording is one atomic add per bucket and one for the sum, so a hot path never contends on
//! it; reading takes a [`HistogramSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Bucket upper bounds, in seconds (plus the implicit `+Inf`).
pub const BUCKETS_SECONDS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Buckets plus the one above the last bound.
const SLOTS: usize = BUCKETS_SECONDS.len() + 1;

/// Observations of a duration, counted per bucket.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations at or below each bound, then above the last one (not cumulative).
    counts: [AtomicU64; SLOTS],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let slot = BUCKETS_SECONDS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS_SECONDS.len());
        self.counts[slot].fetch_add(1, Relaxed);
        self.sum_nanos
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.counts.each_ref().map(|c| c.load(Relaxed)),
            sum_nanos: self.sum_nanos.load(Relaxed),
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// Per bucket of `BUCKETS_SECONDS`, then above the last bound (not cumulative).
    pub counts: [u64; SLOTS],
    pub sum_nanos: u64,
}

impl HistogramSnapshot {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Appends the histogram as the Prometheus family `name` (`# HELP`, `# TYPE`, cumulative
    /// `_bucket` lines, `_sum` in seconds, `_count`).
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS_SECONDS.iter().zip(&self.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS_SECONDS.len()];
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_nanos as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_micros(500)); // on a bound: counted in that bucket
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let snap = h.snapshot();
        assert_eq!(snap.count(), 4);
        let mut out = String::new();
        snap.render(&mut out, "x_seconds", "Something timed.");
        assert!(out.starts_with("# HELP x_seconds Something timed.\n# TYPE x_seconds histogram\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.002\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.005\"} 3\n"));
        assert!(out.contains("x_seconds_bucket{le=\"2.5\"} 3\n"));
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(out.contains("x_seconds_sum 10.0038\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"));
    }

    #[test]
    fn an_empty_histogram_renders_zeros() {
        let mut out = String::new();
        Histogram::default()
            .snapshot()
            .render(&mut out, "y", "Nothing yet.");
        assert!(out.contains("y_bucket{le=\"+Inf\"} 0\n"));
        assert!(out.contains("y_sum 0\n"));
        assert!(out.contains("y_count 0\n"));
    }
}
