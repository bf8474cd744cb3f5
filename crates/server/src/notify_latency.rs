//! The notification latency histogram: for every `changes` message a live connection hands to
//! its socket (WebSocket or SSE), the time since its commit was published to the change feed
//! (`herald_db::live::CommitClock`). Exposed on `/metrics` as
//! `herald_live_notify_latency_seconds` (a Prometheus histogram).
//!
//! It measures the server's side only (engine, outbound queue, socket write), not the network or
//! the client. Lock-free: one atomic add per bucket touched, so sending never contends on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket upper bounds, in seconds (plus the implicit `+Inf`).
pub const BUCKETS_SECONDS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
pub struct NotifyLatency {
    /// Observations at or below each bound (not cumulative; summed when rendered).
    buckets: [AtomicU64; BUCKETS_SECONDS.len()],
    /// Observations above the last bound.
    over: AtomicU64,
    sum_nanos: AtomicU64,
}

impl NotifyLatency {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        match BUCKETS_SECONDS.iter().position(|&b| s <= b) {
            Some(i) => self.buckets[i].fetch_add(1, Ordering::Relaxed),
            None => self.over.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The histogram in the Prometheus text format (`_bucket` cumulative, `_sum`, `_count`).
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let name = "herald_live_notify_latency_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a commit's publication to its changes message being handed to a subscriber's socket.\n# TYPE {name} histogram"
        );
        let mut cumulative = 0;
        for (b, n) in BUCKETS_SECONDS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.over.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets_sum_and_count() {
        let h = NotifyLatency::default();
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let mut out = String::new();
        h.render(&mut out);
        assert!(out.contains("herald_live_notify_latency_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(out.contains("herald_live_notify_latency_seconds_bucket{le=\"0.005\"} 2\n"));
        assert!(out.contains("herald_live_notify_latency_seconds_bucket{le=\"2.5\"} 2\n"));
        assert!(out.contains("herald_live_notify_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(
            out.contains("herald_live_notify_latency_seconds_sum 10.0033\n"),
            "{out}"
        );
        assert!(out.contains("herald_live_notify_latency_seconds_count 3\n"));
    }
}
