//! CPU limits for single threads of a server (`herald-bench live --cell-cpu`): each matching
//! cell thread (`herald-cell-<row>-<part>`, found by name in `/proc/<pid>/task/*/comm`) goes
//! into its own cgroup v1 `cpu` group with a CFS quota, so a grid's scaling is measured as if
//! every cell had a core (or a share of one) to itself on a machine with few cores.
//!
//! Needs root and the v1 `cpu` controller at `/sys/fs/cgroup/cpu`; the groups are made under
//! `herald-bench-<pid>/` there and removed when the [`CellLimits`] is dropped (after the server
//! is killed, or its threads are moved back first).

use std::path::{Path, PathBuf};

/// The v1 `cpu` controller's mount point.
const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";
/// The CFS period of each group. Shorter than the default 100 ms: a thread that used its quota
/// waits for the next period, and a 100 ms period would put gaps of up to 75 ms (at 0.25 core)
/// into latencies measured against a 30 ms bound.
pub const PERIOD_US: u64 = 10_000;
/// Thread-name prefix of the matching cells (`herald::live::grid::Threads`).
pub const CELL_PREFIX: &str = "herald-cell-";

/// Why `--cell-cpu` cannot work here, or `None` when it can.
pub fn unsupported() -> Option<String> {
    // SAFETY-free check of the effective uid: /proc/self/status "Uid:" real, effective, ...
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse::<u32>().ok());
    if euid != Some(0) {
        return Some("--cell-cpu needs root (it creates cgroups under /sys/fs/cgroup/cpu)".into());
    }
    if !Path::new(CPU_ROOT).join("cpu.cfs_quota_us").exists() {
        return Some(format!(
            "--cell-cpu needs the cgroup v1 cpu controller at {CPU_ROOT} (cgroup v2 only here)"
        ));
    }
    None
}

/// The cell threads of process `pid`: (thread id, name), sorted by name.
pub fn cell_threads(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if comm.starts_with(CELL_PREFIX) {
            out.push((tid, comm.to_string()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The groups made for one server's cells; removed on drop.
pub struct CellLimits {
    parent: PathBuf,
    groups: Vec<(PathBuf, u32)>,
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{}: {e}", path.display()))
}

impl CellLimits {
    /// Puts each of the `expected` cell threads of `pid` into its own group limited to `cores`
    /// (e.g. 0.25). The server starts its cells just after it starts listening: waits up to
    /// 10 s for them to appear.
    pub fn apply(pid: u32, expected: usize, cores: f64) -> Result<CellLimits, String> {
        if let Some(why) = unsupported() {
            return Err(why);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let cells = loop {
            let cells = cell_threads(pid);
            if cells.len() >= expected {
                break cells;
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "{} of {expected} {CELL_PREFIX}* threads in process {pid} after 10 s: \
                     --cell-cpu needs the threaded grid (--grid-rows/--grid-partitions)",
                    cells.len()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let parent = Path::new(CPU_ROOT).join(format!("herald-bench-{}", std::process::id()));
        std::fs::create_dir_all(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let mut limits = CellLimits {
            parent,
            groups: Vec::new(),
        };
        let quota = ((cores * PERIOD_US as f64).round() as u64).max(1000);
        for (tid, name) in cells {
            let g = limits.parent.join(&name);
            std::fs::create_dir_all(&g).map_err(|e| format!("{}: {e}", g.display()))?;
            limits.groups.push((g.clone(), tid));
            write(&g.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&g.join("cpu.cfs_quota_us"), &quota.to_string())?;
            write(&g.join("tasks"), &tid.to_string())?;
        }
        Ok(limits)
    }

    /// Cells limited.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

impl Drop for CellLimits {
    fn drop(&mut self) {
        let root_tasks = Path::new(CPU_ROOT).join("tasks");
        for (g, tid) in self.groups.drain(..).rev() {
            // A thread still alive goes back to the root group (a group with tasks cannot be
            // removed); one that is gone makes this write fail, which is fine.
            let _ = std::fs::write(&root_tasks, tid.to_string());
            if let Err(e) = std::fs::remove_dir(&g) {
                eprintln!("removing {}: {e}", g.display());
            }
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}
