//! The notification latency histogram: for every `changes` message a live connection hands to
//! its socket (WebSocket or SSE), the time since its commit was published to the change feed
//! (`herald_db::live::CommitClock`). Exposed on `/metrics` as
//! `herald_live_notify_latency_seconds` (a Prometheus histogram).
//!
//! It measures the server's side only (engine, outbound queue, socket write), not the network or
//! the client. Lock-free: one atomic add per bucket touched, so sending never contends on it.

use std::time::Duration;

use herald_db::Histogram;

#[derive(Default)]
pub struct NotifyLatency(Histogram);

impl NotifyLatency {
    pub fn observe(&self, d: Duration) {
        self.0.observe(d);
    }

    /// The histogram in the Prometheus text format (`_bucket` cumulative, `_sum`, `_count`).
    pub fn render(&self, out: &mut String) {
        self.0.snapshot().render(
            out,
            "herald_live_notify_latency_seconds",
            "Time from a commit's publication to its changes message being handed to a subscriber's socket.",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buckets themselves are tested with the histogram (`herald_storage::Histogram`);
    /// here, that observations land in this family.
    #[test]
    fn renders_as_the_notify_latency_family() {
        let h = NotifyLatency::default();
        h.observe(Duration::from_millis(3));
        let mut out = String::new();
        h.render(&mut out);
        assert!(out.starts_with("# HELP herald_live_notify_latency_seconds "));
        assert!(out.contains("# TYPE herald_live_notify_latency_seconds histogram\n"));
        assert!(out.contains("herald_live_notify_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(out.contains("herald_live_notify_latency_seconds_count 1\n"));
    }
}
