//! CPU time from /proc: one clock-tick rate, one `/proc/PID/stat` parser, and the samples the
//! workloads take around a measurement (the server's threads by role, this process, the rest of
//! the machine). Linux only, as the benchmarks are.

use std::collections::HashMap;
use std::process::Command;
use std::time::Instant;

/// Clock ticks per second for /proc times (`getconf CLK_TCK`, asked once; 100 if that fails).
pub fn clock_ticks() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
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

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn stat_ticks(path: &str) -> Option<u64> {
    read(path).and_then(|s| parse_stat_ticks(&s))
}

/// CPU seconds of the process or thread whose stat file is `path`, or None once it is gone.
pub fn cpu_secs(path: &str) -> Option<f64> {
    stat_ticks(path).map(|t| t as f64 / clock_ticks())
}

/// The bench client's own CPU seconds.
pub fn self_cpu_secs() -> f64 {
    cpu_secs("/proc/self/stat").unwrap_or(0.0)
}

/// Busy ticks of the whole machine: `user nice system idle iowait irq softirq` of /proc/stat,
/// all but idle and iowait.
fn machine_busy() -> u64 {
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

/// CPU time counters (clock ticks) at one instant.
pub struct CpuSample {
    pub at: Instant,
    /// Server threads by role: `engine`, `cells`, `writer`, `runtime`, `other`; and `total`.
    server: HashMap<&'static str, u64>,
    client: u64,
    machine_busy: u64,
}

/// Where the CPU went between two samples, in percent of one core.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// The live-query engine thread (`herald-live`).
    pub engine: f64,
    /// The live-query matching grid's cell threads (`herald-cell-*`), together.
    pub cells: f64,
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

/// The role of a server thread by its name (`/proc/PID/task/TID/comm`).
fn role(comm: &str) -> &'static str {
    match comm {
        "herald-live" => "engine",
        c if c.starts_with("herald-cell-") => "cells",
        c if c.starts_with("herald-storage") => "writer",
        c if c.starts_with("tokio-r") => "runtime",
        _ => "other",
    }
}

/// Counters now: the server's (per thread role) when `server_pid` is given, this process's and
/// the machine's.
pub fn sample(server_pid: Option<u32>) -> CpuSample {
    let mut server = HashMap::new();
    if let Some(pid) = server_pid {
        server.insert(
            "total",
            stat_ticks(&format!("/proc/{pid}/stat")).unwrap_or(0),
        );
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let p = t.path();
            let comm = read(&format!("{}/comm", p.display())).unwrap_or_default();
            let ticks = stat_ticks(&format!("{}/stat", p.display())).unwrap_or(0);
            *server.entry(role(comm.trim())).or_insert(0) += ticks;
        }
    }
    CpuSample {
        at: Instant::now(),
        server,
        client: stat_ticks("/proc/self/stat").unwrap_or(0),
        machine_busy: machine_busy(),
    }
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
        cells: pct(d("cells")),
        writer: pct(d("writer")),
        runtime: pct(d("runtime")),
        server: pct(server),
        client: pct(client),
        others: pct(machine.saturating_sub(server + client)),
    }
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
        assert!(clock_ticks() >= 1.0);
        assert!(cpu_secs("/proc/self/stat").is_some());
    }

    #[test]
    fn server_threads_are_sorted_by_role() {
        assert_eq!(role("herald-live"), "engine");
        assert_eq!(role("herald-storage-writer"), "writer");
        assert_eq!(role("herald-cell-1-0"), "cells");
        assert_eq!(role("tokio-runtime-w"), "runtime");
        assert_eq!(role("herald"), "other");
        let s = sample(Some(std::process::id()));
        assert!(s.server.contains_key("total"));
    }
}
