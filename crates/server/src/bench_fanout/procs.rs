//! The processes of a fan-out run: the Herald server, redis-server and the queue worker as
//! child processes (killed when dropped, so also on error), and their CPU time from /proc.
//!
//! Each process's CPU is `utime + stime` of `/proc/PID/stat` (all its threads), in clock ticks
//! of `getconf CLK_TCK`; the bench client reads its own from `/proc/self/stat`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process that is killed (SIGKILL) and reaped when dropped.
pub struct Proc {
    pub name: &'static str,
    child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds used so far, or None once the process is gone.
    pub fn cpu_secs(&self, tick: f64) -> Option<f64> {
        cpu_secs(&format!("/proc/{}/stat", self.pid()), tick)
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} exited early: {status}", self.name)),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second for /proc times (`getconf CLK_TCK`; 100 if that fails).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// `utime + stime` in ticks from the text of a `/proc/PID/stat` file. The command name
/// (field 2) is in parentheses and may hold spaces or parentheses, so fields are counted from
/// the last `)`: utime and stime are fields 14 and 15 of the whole line.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

pub fn cpu_secs(path: &str, tick: f64) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_stat_ticks(&text).map(|t| t as f64 / tick)
}

/// The bench client's own CPU seconds.
pub fn self_cpu_secs(tick: f64) -> f64 {
    cpu_secs("/proc/self/stat", tick).unwrap_or(0.0)
}

/// This binary, for the child processes. If it was rebuilt while running, Linux reports the
/// old file as "PATH (deleted)"; the new file at PATH is used then.
fn herald_exe() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let text = exe.to_string_lossy();
    match text.strip_suffix(" (deleted)") {
        Some(path) => Ok(std::path::PathBuf::from(path)),
        None => Ok(exe),
    }
}

/// Starts `herald serve` with `durability` (`fsync`, the default, or `nosync`) on `data` and a
/// free loopback port; returns it with its address once it listens. Its later stderr lines are
/// forwarded.
pub fn spawn_herald(
    data: &Path,
    trigger_workers: usize,
    durability: &str,
) -> Result<(Proc, String), String> {
    let exe = herald_exe()?;
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--durability",
            durability,
        ])
        .arg("--trigger-workers")
        .arg(trigger_workers.to_string())
        .arg("--data")
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting herald serve: {e}"))?;
    let stderr = child.stderr.take().expect("piped");
    let proc = Proc {
        name: "herald serve",
        child,
    };
    let (tx, rx) = std::sync::mpsc::sync_channel::<String>(1);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("herald: listening on ") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(addr.to_string());
                }
            } else {
                eprintln!("[herald serve] {line}");
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "herald serve did not start listening".to_string())?;
    Ok((proc, base))
}

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
    let mut proc = Proc {
        name: "redis-server",
        child,
    };
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

/// Starts the external-queue worker (`herald bench fanout-worker`). Its stdin is a pipe held
/// by the returned handle, so the worker exits by itself if the bench dies.
pub fn spawn_worker(herald: &str, redis: &str, concurrency: usize) -> Result<Proc, String> {
    let exe = herald_exe()?;
    let child = Command::new(exe)
        .args([
            "bench",
            "fanout-worker",
            "--herald",
            herald,
            "--redis",
            redis,
        ])
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the queue worker: {e}"))?;
    Ok(Proc {
        name: "queue worker",
        child,
    })
}

/// CPU seconds per process at one moment: (name, seconds), the client last.
pub fn snapshot(procs: &[&Proc], tick: f64) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&'static str, f64)> = procs
        .iter()
        .map(|p| (p.name, p.cpu_secs(tick).unwrap_or(0.0)))
        .collect();
    out.push(("bench client", self_cpu_secs(tick)));
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
    fn stat_ticks_count_fields_after_the_command_name() {
        // A command name with a space and a parenthesis; utime 1234, stime 56.
        let line = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 3 0 99 1000 10";
        assert_eq!(parse_stat_ticks(line), Some(1290));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert_eq!(parse_stat_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        let tick = clock_ticks();
        assert!(tick >= 1.0);
        assert!(cpu_secs("/proc/self/stat", tick).is_some());
    }

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
