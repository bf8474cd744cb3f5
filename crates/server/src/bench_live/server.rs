//! The server a run measures, and where the machine's CPU went. Each run starts `herald serve`
//! as a child process on a temporary directory: it has its own runtime, its CPU can be split by
//! thread (live engine, storage writer, tokio workers) from `/proc`, `perf record -p PID` sees
//! only the server, and SIGKILL ends it at once however far behind it is, so an overloaded run
//! never slows the next one. Before a run, [`wait_for_quiet`] waits while other processes load
//! the shared 2-core machine.

use super::{durability_name, Durability};
use std::collections::HashMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ServerProc {
    pub addr: SocketAddr,
    pub pid: u32,
    child: Child,
    _dir: tempfile::TempDir,
}

impl ServerProc {
    /// Starts `herald serve` (this executable) on a fresh directory and a free loopback port.
    pub async fn start(durability: Durability) -> Result<ServerProc, String> {
        ServerProc::start_with(durability, None).await
    }

    /// [`ServerProc::start`] with `--cache-mib cache_mib` when given.
    pub async fn start_with(
        durability: Durability,
        cache_mib: Option<u64>,
    ) -> Result<ServerProc, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut command = Command::new(exe);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--durability"])
            .arg(durability_name(durability))
            .arg("--data")
            .arg(dir.path().join("herald"));
        if let Some(mib) = cache_mib {
            command.arg("--cache-mib").arg(mib.to_string());
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start herald serve: {e}"))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        // Keep draining the server's stderr (a full pipe would block it); pass on anything but
        // the address line.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                match line.strip_prefix("herald: listening on http://") {
                    Some(addr) if tx.is_some() => {
                        let _ = tx.take().expect("once").send(addr.to_string());
                    }
                    _ => eprintln!("[herald serve] {line}"),
                }
            }
        });
        let addr = match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(a)) => a.parse().map_err(|e| format!("server address {a}: {e}"))?,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("herald serve did not start listening".into());
            }
        };
        Ok(ServerProc {
            addr,
            pid: child.id(),
            child,
            _dir: dir,
        })
    }

    /// Ends the server at once (SIGKILL) and removes its directory.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time counters (clock ticks) at one instant.
pub struct CpuSample {
    pub(crate) at: Instant,
    /// Server threads by role: `engine`, `writer`, `runtime`, `other`; and `total`.
    server: HashMap<&'static str, u64>,
    client: u64,
    machine_busy: u64,
}

/// Where the CPU went between two samples, in percent of one core.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// The live-query engine thread (`herald-live`).
    pub engine: f64,
    /// The storage writer thread (`herald-storage-writer`).
    pub writer: f64,
    /// The server's tokio workers (HTTP, WebSocket).
    pub runtime: f64,
    /// The whole server process.
    pub server: f64,
    /// This benchmark process (writers and subscribers).
    pub client: f64,
    /// Everything else on the machine.
    pub others: f64,
}

fn ticks_of_stat(stat: &str) -> Option<u64> {
    // Fields after the parenthesized command name: state is the first, utime the 12th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn machine_busy() -> u64 {
    // user nice system idle iowait irq softirq: busy = all but idle and iowait.
    let stat = read("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(7)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 7 {
        return 0;
    }
    f[0] + f[1] + f[2] + f[5] + f[6]
}

pub fn sample(server_pid: Option<u32>) -> CpuSample {
    let mut server = HashMap::new();
    if let Some(pid) = server_pid {
        let total = read(&format!("/proc/{pid}/stat")).and_then(|s| ticks_of_stat(&s));
        server.insert("total", total.unwrap_or(0));
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let p = t.path();
            let comm = read(&format!("{}/comm", p.display())).unwrap_or_default();
            let role = match comm.trim() {
                "herald-live" => "engine",
                c if c.starts_with("herald-storage") => "writer",
                c if c.starts_with("tokio-r") => "runtime",
                _ => "other",
            };
            let ticks = read(&format!("{}/stat", p.display()))
                .and_then(|s| ticks_of_stat(&s))
                .unwrap_or(0);
            *server.entry(role).or_insert(0) += ticks;
        }
    }
    CpuSample {
        at: Instant::now(),
        server,
        client: read("/proc/self/stat")
            .and_then(|s| ticks_of_stat(&s))
            .unwrap_or(0),
        machine_busy: machine_busy(),
    }
}

fn clock_ticks() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

pub fn cpu_between(a: &CpuSample, b: &CpuSample) -> CpuUse {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let pct = |ticks: u64| ticks as f64 / clock_ticks() / secs * 100.0;
    let d = |role: &str| {
        let (x, y) = (a.server.get(role), b.server.get(role));
        y.copied()
            .unwrap_or(0)
            .saturating_sub(x.copied().unwrap_or(0))
    };
    let (server, client) = (d("total"), b.client.saturating_sub(a.client));
    let machine = b.machine_busy.saturating_sub(a.machine_busy);
    CpuUse {
        engine: pct(d("engine")),
        writer: pct(d("writer")),
        runtime: pct(d("runtime")),
        server: pct(server),
        client: pct(client),
        others: pct(machine.saturating_sub(server + client)),
    }
}

/// Another `herald bench` process on this machine (not this one), if any.
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
        if args.len() > 1 && args[0].ends_with("herald") && args[1] == "bench" {
            return Some(format!("pid {name}: {}", args.join(" ")));
        }
    }
    None
}

/// Longest wait for a quiet machine before running anyway.
const QUIET_WAIT_MAX: Duration = Duration::from_secs(30 * 60);
/// Other processes may use this much of one core and the machine still counts as quiet.
const QUIET_OTHERS_PCT_MAX: f64 = 25.0;

/// Waits until no other `herald bench` runs and other processes use under 25% of a core (over
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
