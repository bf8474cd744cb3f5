//! The processes a fan-out run adds to the Herald server (`harness::server`): redis-server and
//! the queue worker, as child processes killed when dropped; and the CPU time of all of them.
//!
//! Each process's CPU is `utime + stime` of `/proc/PID/stat` (all its threads); the bench
//! client reads its own from `/proc/self/stat`.

use crate::harness::cpu::self_cpu_secs;
use crate::harness::server::{current_exe, Proc};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound and released; redis-server binds it right after).
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Starts redis-server on 127.0.0.1 only, on a free port, with no RDB snapshots and the
/// append-only file fsynced once per second (`--appendfsync everysec`) in `dir`. Returns it
/// with its URL once it answers PING.
pub async fn spawn_redis(dir: &Path) -> Result<(Proc, String), String> {
    let port = free_port()?;
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--protected-mode", "yes", "--port"])
        .arg(port.to_string())
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
        ])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!("starting redis-server: {e} (scripts/bench-fanout installs it with apt-get)")
        })?;
    let mut proc = Proc::new("redis-server", child);
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        proc.check_alive()?;
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let pong: Result<String, _> = redis::cmd("PING").query_async(&mut c).await;
            if pong.is_ok() {
                return Ok((proc, url));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("redis-server on port {port} did not answer PING"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the external-queue worker (`herald-bench fanout-worker`, this executable). Its stdin
/// is a pipe held by the returned handle, so the worker exits by itself if the bench dies.
pub fn spawn_worker(herald: &str, redis: &str, concurrency: usize) -> Result<Proc, String> {
    let child = Command::new(current_exe()?)
        .args(["fanout-worker", "--url", herald, "--redis", redis])
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the queue worker: {e}"))?;
    Ok(Proc::new("queue worker", child))
}

/// CPU seconds per process at one moment: (name, seconds), the client last.
pub fn snapshot(procs: &[&Proc]) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&'static str, f64)> = procs
        .iter()
        .map(|p| (p.name, p.cpu_secs().unwrap_or(0.0)))
        .collect();
    out.push(("bench client", self_cpu_secs()));
    out
}

/// CPU seconds used between two snapshots of the same processes.
pub fn used(before: &[(&'static str, f64)], after: &[(&'static str, f64)]) -> Vec<(String, f64)> {
    before
        .iter()
        .zip(after)
        .map(|((name, a), (_, b))| (name.to_string(), (b - a).max(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_subtracts_per_process() {
        let a = vec![("herald serve", 1.0), ("bench client", 2.0)];
        let b = vec![("herald serve", 3.5), ("bench client", 2.25)];
        assert_eq!(
            used(&a, &b),
            vec![
                ("herald serve".to_string(), 2.5),
                ("bench client".to_string(), 0.25)
            ]
        );
    }
}
