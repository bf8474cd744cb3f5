//! What the ingestion workloads share: `rockbench` (RockBench's data latency: how soon fresh
//! events are visible while they pour in) and `stream` (the access patterns of a stream
//! processor's sink and sources). Both start a fresh `herald serve` child per run
//! ([`with_server`]), write through `/v1/bulk` or WebSocket write requests ([`client`]), record
//! latency per interval (`harness::record`), print a progress line per interval and a table,
//! and write JSON and SVG charts to `target/bench-results/`. This module holds the rate
//! schedule, the server's peak RSS and CPU, and the output files.

pub mod client;

use crate::harness::chart::Chart;
use crate::harness::cpu::{cpu_between, sample, CpuUse};
use crate::harness::server::{Server, ServerOptions};
use crate::harness::Durability;
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The server's peak resident set size in KiB (`VmHWM` of `/proc/PID/status`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// What the server used during a run: its peak resident set and its CPU (`utime + stime`
/// from /proc, per thread role) over the run's wall time.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerUsage {
    /// Peak resident set size in KiB (`VmHWM`), read just before the server is killed.
    pub peak_rss_kib: Option<u64>,
    /// CPU in percent of one core over `secs`: the server by thread role, and this process.
    pub cpu: CpuUse,
    /// The wall time the CPU figures cover (the whole measurement, setup included).
    pub secs: f64,
}

impl ServerUsage {
    /// The server's CPU milliseconds per event (seconds per 1,000) over `events` (`None` without
    /// events): what a change that saves CPU moves, with far less run-to-run noise than latency
    /// once the machine is saturated.
    pub fn server_cpu_ms_per_event(&self, events: u64) -> Option<f64> {
        (events > 0).then(|| self.cpu.server / 100.0 * self.secs * 1000.0 / events as f64)
    }

    pub fn to_json(&self, events: u64) -> Value {
        serde_json::json!({
            "wall_secs": self.secs,
            "server_cores": self.cpu.server / 100.0,
            "server_writer_cores": self.cpu.writer / 100.0,
            "server_runtime_cores": self.cpu.runtime / 100.0,
            "server_live_engine_cores": self.cpu.engine / 100.0,
            "bench_process_cores": self.cpu.client / 100.0,
            "other_cores": self.cpu.others / 100.0,
            "server_cpu_ms_per_event": self.server_cpu_ms_per_event(events),
        })
    }

    /// One line for the summary.
    pub fn text(&self, events: u64) -> String {
        let c = &self.cpu;
        format!(
            "server CPU {:.2} cores (storage writer {:.2}, tokio {:.2}, live engine {:.2}), {} ms per event; this process {:.2} cores, the rest of the machine {:.2}",
            c.server / 100.0,
            c.writer / 100.0,
            c.runtime / 100.0,
            c.engine / 100.0,
            self.server_cpu_ms_per_event(events)
                .map_or("-".into(), |ms| format!("{ms:.3}")),
            c.client / 100.0,
            c.others / 100.0,
        )
    }
}

/// Runs `measure` against a fresh `herald serve` child (with `--cache-mib cache_mib` when
/// given); returns its result and what the server used.
pub async fn with_server<T, F, Fut>(
    durability: Durability,
    cache_mib: Option<u64>,
    measure: F,
) -> Result<(T, ServerUsage), String>
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let server = Server::start(ServerOptions {
        cache_mib,
        ..ServerOptions::new(durability)
    })
    .await?;
    let before = sample(Some(server.pid()));
    let r = measure(server.addr).await;
    let after = sample(Some(server.pid()));
    let usage = ServerUsage {
        peak_rss_kib: peak_rss_kib(server.pid()),
        cpu: cpu_between(&before, &after),
        secs: after.at.duration_since(before.at).as_secs_f64(),
    };
    server.kill();
    Ok((r?, usage))
}

/// A rate that changes in equal segments: `shape` is percent of `rate` per segment (e.g.
/// `[50, 200, 50]` for a burst), over `secs` in all.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// (segment length in seconds, events per second).
    segments: Vec<(f64, f64)>,
}

impl Schedule {
    pub fn new(rate: f64, shape_pct: &[f64], secs: f64) -> Schedule {
        let shape = if shape_pct.is_empty() {
            &[100.0][..]
        } else {
            shape_pct
        };
        let len = secs / shape.len() as f64;
        Schedule {
            segments: shape.iter().map(|p| (len, rate * p / 100.0)).collect(),
        }
    }

    pub fn secs(&self) -> f64 {
        self.segments.iter().map(|s| s.0).sum()
    }

    /// Events scheduled up to `t`: the expected count so far, rounded down.
    fn expected(&self, t: f64) -> u64 {
        let (mut at, mut n) = (0.0, 0.0);
        for &(len, rate) in &self.segments {
            let part = (t - at).clamp(0.0, len);
            n += part * rate;
            at += len;
        }
        (n + 1e-9).floor() as u64
    }

    /// Events due by `t` seconds: those whose [`time_of`](Schedule::time_of) is at most `t`
    /// (event 0 is due at once), capped at the schedule's total.
    pub fn due(&self, t: f64) -> u64 {
        if t < 0.0 {
            return 0;
        }
        (self.expected(t) + 1).min(self.total())
    }

    pub fn total(&self) -> u64 {
        self.expected(self.secs())
    }

    /// When event `k` (0-based) is due, in seconds from the start: the scheduled time an
    /// event carries, so a client that falls behind shows it as latency.
    pub fn time_of(&self, k: u64) -> f64 {
        let mut left = k as f64;
        let mut at = 0.0;
        for &(len, rate) in &self.segments {
            let here = len * rate;
            if left < here && rate > 0.0 {
                return at + left / rate;
            }
            left -= here;
            at += len;
        }
        at
    }

    /// The target rate at `t` seconds.
    pub fn rate_at(&self, t: f64) -> f64 {
        let mut at = 0.0;
        for &(len, rate) in &self.segments {
            if t < at + len {
                return rate;
            }
            at += len;
        }
        self.segments.last().map_or(0.0, |s| s.1)
    }
}

/// Where a benchmark's JSON goes (`target/bench-results/<name>.json` unless given) and its
/// charts (next to it, `<stem>-<chart>.svg`).
pub struct Output {
    pub json: PathBuf,
}

impl Output {
    pub fn new(out: Option<PathBuf>, name: &str) -> Result<Output, String> {
        let json =
            out.unwrap_or_else(|| Path::new("target/bench-results").join(format!("{name}.json")));
        if let Some(d) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Ok(Output { json })
    }

    /// The path of chart `name`.
    pub fn chart_path(&self, name: &str) -> PathBuf {
        let stem = self
            .json
            .file_stem()
            .map_or("bench".into(), |s| s.to_string_lossy().to_string());
        self.json.with_file_name(format!("{stem}-{name}.svg"))
    }

    pub fn write_chart(&self, name: &str, chart: &Chart) -> Result<PathBuf, String> {
        let p = self.chart_path(name);
        std::fs::write(&p, chart.to_svg()).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    }

    pub fn write_json(&self, v: &Value) -> Result<(), String> {
        std::fs::write(&self.json, serde_json::to_string_pretty(v).expect("json"))
            .map_err(|e| format!("{}: {e}", self.json.display()))?;
        println!("results written to {}", self.json.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_schedule_is_linear() {
        let s = Schedule::new(1000.0, &[100.0], 10.0);
        assert_eq!(s.due(-0.1), 0);
        assert_eq!(s.due(0.0), 1, "the first event is due at once");
        assert_eq!(s.due(1.0), 1001);
        assert_eq!(s.due(20.0), 10_000);
        assert_eq!(s.total(), 10_000);
        assert!((s.time_of(500) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_burst_schedule_has_three_rates() {
        let s = Schedule::new(1000.0, &[50.0, 200.0, 50.0], 3.0);
        assert_eq!(s.due(1.0), 501);
        assert_eq!(s.due(2.0), 2501);
        assert_eq!(s.total(), 3000);
        assert_eq!(s.rate_at(1.5), 2000.0);
        assert!((s.time_of(500) - 1.0).abs() < 1e-9);
        assert!((s.time_of(1500) - 1.5).abs() < 1e-9);
        // An event is due exactly from its time on.
        for k in [0, 1, 499, 500, 2499, 2999] {
            let t = s.time_of(k);
            assert!(s.due(t) > k, "{k}");
            assert!(k == 0 || s.due(t - 1e-4) <= k, "{k}");
        }
    }

    #[test]
    fn peak_rss_of_this_process() {
        assert!(peak_rss_kib(std::process::id()).unwrap() > 0);
    }
}
