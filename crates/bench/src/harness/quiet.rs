//! Waiting for a quiet machine before a run: the benchmarks share a 2-core machine with
//! whatever else runs on it, and a run measured while another benchmark or a build is running
//! is not comparable with one measured alone.

use super::cpu::{cpu_between, sample};
use std::time::{Duration, Instant};

/// Longest wait for a quiet machine before running anyway.
const QUIET_WAIT_MAX: Duration = Duration::from_secs(30 * 60);
/// Other processes may use this much of one core and the machine still counts as quiet.
const QUIET_OTHERS_PCT_MAX: f64 = 25.0;

/// Whether `args` (a process's command line) is a running benchmark: `herald-bench <workload>`
/// (but not the fan-out's queue worker, which a benchmark starts itself).
fn is_benchmark(args: &[String]) -> bool {
    args.len() > 1 && args[0].ends_with("herald-bench") && args[1] != "fanout-worker"
}

/// Another `herald-bench` process on this machine (not this one), if any.
fn other_benchmark() -> Option<String> {
    let me = std::process::id().to_string();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        if is_benchmark(&args) {
            return Some(format!("pid {name}: {}", args.join(" ")));
        }
    }
    None
}

/// Waits until no other `herald-bench` runs and other processes use under 25% of a core (over
/// one second), at most 30 minutes (or `HERALD_BENCH_QUIET_WAIT_SECS`); says so when it waits.
pub async fn wait_for_quiet() {
    // `HERALD_BENCH_QUIET_WAIT_SECS=0` runs at once (for a quick look on a busy machine; the
    // numbers are then not comparable).
    let wait_max = std::env::var("HERALD_BENCH_QUIET_WAIT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(QUIET_WAIT_MAX, Duration::from_secs);
    let start = Instant::now();
    let mut said = false;
    loop {
        let a = sample(None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let others = cpu_between(&a, &sample(None)).others;
        let busy = match other_benchmark() {
            Some(b) => Some(format!("another benchmark is running ({b})")),
            None if others > QUIET_OTHERS_PCT_MAX => {
                Some(format!("other processes use {others:.0}% of a core"))
            }
            None => None,
        };
        let Some(why) = busy else { return };
        if start.elapsed() >= wait_max {
            eprintln!("waited {wait_max:?} for a quiet machine; running anyway: {why}");
            return;
        }
        if !said {
            eprintln!("waiting for a quiet machine: {why}");
            said = true;
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::is_benchmark;

    #[test]
    fn a_benchmark_is_herald_bench_with_a_workload() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_benchmark(&args(&[
            "target/release/herald-bench",
            "live"
        ])));
        assert!(!is_benchmark(&args(&["herald-bench", "fanout-worker"])));
        assert!(!is_benchmark(&args(&["target/release/herald", "serve"])));
        assert!(!is_benchmark(&args(&["herald-bench"])));
    }
}
