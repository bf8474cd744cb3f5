//! CPU limits for single threads of a server (`herald-bench live --cell-cpu`): each matching
//! cell thread (`herald-cell-<row>-<part>`, found by name in `/proc/<pid>/task/*/comm`) goes
//! into its own cgroup v1 `cpu` group with a CFS quota, so a grid's scaling is measured as if
//! every cell had a core (or a share of one) to itself on a machine with few cores.
//!
//! The server's other threads and the benchmark's own go into a sibling group `rest`, and the
//! parent group `herald-bench-<pid>/` gets the largest `cpu.shares`: on a machine where other
//! work runs (builds), the measured processes get the CPU they ask for, and the cells exactly
//! their quota. Needs root and the v1 `cpu` controller at `/sys/fs/cgroup/cpu`; the groups are
//! removed when the [`CellLimits`] is dropped (threads still alive go back to the root group).

use std::path::{Path, PathBuf};

/// The v1 `cpu` controller's mount point.
const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";
/// The longest CFS period of a cell's group. A thread that used its quota waits for the next
/// period, so the period is as short as the kernel allows for the quota (a quota is at least
/// 1 ms): 10 ms at 0.1 core, 4 ms at 0.25 core. A 100 ms period would put gaps of up to 75 ms
/// (at 0.25 core) into latencies measured against a 30 ms bound.
pub const PERIOD_MAX_US: u64 = 10_000;
/// The kernel's smallest CFS quota and period.
const QUOTA_MIN_US: u64 = 1_000;
/// `cpu.shares` of the group holding the whole benchmark (the server and the benchmark's own
/// process): the most the kernel allows, so that other work on the machine (builds) yields to
/// it. Cells still get no more than their quota.
const BENCH_SHARES: u64 = 262_144;

/// The CFS period and quota, in microseconds, that give `cores` with the shortest period.
pub fn period_and_quota(cores: f64) -> (u64, u64) {
    let period = ((QUOTA_MIN_US as f64 / cores).ceil() as u64).clamp(QUOTA_MIN_US, PERIOD_MAX_US);
    let quota = ((cores * period as f64).round() as u64).max(QUOTA_MIN_US);
    (period, quota)
}

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
    /// Each cell's group and thread, then the `rest` group and the threads moved into it.
    groups: Vec<(PathBuf, Vec<u32>)>,
    cells: usize,
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every thread of process `pid`.
fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

impl CellLimits {
    /// Puts each of the `expected` cell threads of `pid` into its own group limited to `cores`
    /// (e.g. 0.25), and the other threads of `pid` and of this process into the `rest` group.
    /// The server starts its cells just after it starts listening: waits up to 10 s for them
    /// to appear.
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
        write(&parent.join("cpu.shares"), &BENCH_SHARES.to_string())?;
        let mut limits = CellLimits {
            parent,
            groups: Vec::new(),
            cells: 0,
        };
        let (period, quota) = period_and_quota(cores);
        let cell_tids: Vec<u32> = cells.iter().map(|c| c.0).collect();
        for (tid, name) in cells {
            let g = limits.parent.join(&name);
            std::fs::create_dir_all(&g).map_err(|e| format!("{}: {e}", g.display()))?;
            limits.groups.push((g.clone(), vec![tid]));
            limits.cells += 1;
            write(&g.join("cpu.cfs_period_us"), &period.to_string())?;
            write(&g.join("cpu.cfs_quota_us"), &quota.to_string())?;
            write(&g.join("tasks"), &tid.to_string())?;
        }
        let rest = limits.parent.join("rest");
        std::fs::create_dir_all(&rest).map_err(|e| format!("{}: {e}", rest.display()))?;
        let others: Vec<u32> = threads(pid)
            .into_iter()
            .filter(|t| !cell_tids.contains(t))
            .chain(threads(std::process::id()))
            .collect();
        limits.groups.push((rest.clone(), Vec::new()));
        for tid in others {
            // A thread that ended meanwhile cannot be moved; that is fine.
            if write(&rest.join("tasks"), &tid.to_string()).is_ok() {
                limits.groups.last_mut().expect("rest").1.push(tid);
            }
        }
        Ok(limits)
    }

    /// Cells limited.
    pub fn len(&self) -> usize {
        self.cells
    }

    pub fn is_empty(&self) -> bool {
        self.cells == 0
    }
}

impl Drop for CellLimits {
    fn drop(&mut self) {
        let root_tasks = Path::new(CPU_ROOT).join("tasks");
        for (g, tids) in self.groups.drain(..).rev() {
            // A thread still alive goes back to the root group (a group with tasks cannot be
            // removed); one that is gone makes this write fail, which is fine. Threads this
            // process started meanwhile are in `rest` too: move whatever it still holds.
            let held = std::fs::read_to_string(g.join("tasks")).unwrap_or_default();
            let more = held.lines().filter_map(|l| l.trim().parse::<u32>().ok());
            for tid in tids.into_iter().chain(more) {
                let _ = std::fs::write(&root_tasks, tid.to_string());
            }
            if let Err(e) = std::fs::remove_dir(&g) {
                eprintln!("removing {}: {e}", g.display());
            }
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_the_shortest_the_quota_allows() {
        assert_eq!(period_and_quota(0.1), (10_000, 1_000));
        assert_eq!(period_and_quota(0.25), (4_000, 1_000));
        assert_eq!(period_and_quota(0.5), (2_000, 1_000));
        assert_eq!(period_and_quota(1.0), (1_000, 1_000));
        assert_eq!(period_and_quota(2.0), (1_000, 2_000));
        assert_eq!(period_and_quota(0.05), (10_000, 1_000));
    }
}
