//! The nodes a cluster benchmark runs: `herald serve` children on fixed loopback ports and data
//! directories, so a killed node restarts as itself (same id, URL and data); each optionally in
//! its own cgroup v1 CPU quota; and how the benchmark finds the primary.
//!
//! The primary is whichever node says so in `GET /v1/cluster` (`nodeId == primary`). A build
//! without that endpoint (404) is asked with a write instead: before write forwarding existed,
//! only the primary acknowledged one and every other node answered 503 `unavailable`.

use crate::harness::server::{spawn_serve, Proc};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup v1 CPU hierarchy the quotas are made in.
const CGROUP_CPU: &str = "/sys/fs/cgroup/cpu";

/// How the nodes of one configuration are started.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// `Some((bootstrap, cluster name))`: `--cluster`; `None`: a single node without it.
    pub cluster: Option<(String, String)>,
    pub replication_factor: usize,
    pub session_timeout_ms: u64,
    /// CPU quota of each node in cores (cgroup v1 `cpu.cfs_quota_us`); `None`: unlimited.
    pub cpus: Option<f64>,
    /// `--grid-rows` and `--grid-partitions` (with `cluster`): the matching grid's shape.
    pub grid: Option<(u32, u32)>,
}

/// A cgroup v1 CPU group holding one node's process; removed when dropped (after the node).
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    fn create(name: &str, cpus: f64) -> Result<Cgroup, String> {
        let path = Path::new(CGROUP_CPU).join(name);
        std::fs::create_dir_all(&path).map_err(|e| {
            format!(
                "cannot create the cgroup {} for --node-cpus (needs root and cgroup v1's cpu \
                 controller): {e}",
                path.display()
            )
        })?;
        let period = 100_000u64;
        let quota = ((cpus * period as f64) as u64).max(1_000);
        let write = |file: &str, v: u64| {
            std::fs::write(path.join(file), v.to_string())
                .map_err(|e| format!("{}/{file}: {e}", path.display()))
        };
        write("cpu.cfs_period_us", period)?;
        write("cpu.cfs_quota_us", quota)?;
        Ok(Cgroup { path })
    }

    /// Moves process `pid` (all its threads) into the group.
    fn add(&self, pid: u32) -> Result<(), String> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("{}/cgroup.procs: {e}", self.path.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// One node: its fixed identity and, while it runs, its process.
pub struct Node {
    pub id: String,
    pub addr: SocketAddr,
    args: Vec<OsString>,
    // Field order matters: the process is killed before its cgroup is removed.
    proc: Option<Proc>,
    cgroup: Option<Cgroup>,
}

/// A free loopback port below the ephemeral range (`ip_local_port_range`), where the
/// benchmark's own outgoing connections never take it between this check and the node's bind,
/// nor while a killed node is down.
fn free_port() -> Result<u16, String> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (from, to) = (low.saturating_sub(12_000).max(1_024), low);
    let mut rng = fastrand::Rng::new();
    for _ in 0..100 {
        let port = rng.u16(from..to);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl Node {
    /// A node `id` with its data under `root`; not started yet.
    pub fn new(id: &str, root: &Path, cfg: &NodeConfig) -> Result<Node, String> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?)
            .parse()
            .map_err(|e| format!("{e}"))?;
        let mut args: Vec<OsString> = vec!["serve".into(), "--listen".into()];
        args.push(addr.to_string().into());
        args.extend(["--durability".into(), "fsync".into(), "--data".into()]);
        args.push(root.join(id).into());
        if let Some((bootstrap, name)) = &cfg.cluster {
            for (flag, value) in [
                ("--cluster", bootstrap.clone()),
                ("--cluster-name", name.clone()),
                ("--node-id", id.to_string()),
                ("--advertise-url", format!("http://{addr}")),
                ("--replication-factor", cfg.replication_factor.to_string()),
                ("--session-timeout-ms", cfg.session_timeout_ms.to_string()),
            ] {
                args.push(flag.into());
                args.push(value.into());
            }
            if let Some((rows, partitions)) = cfg.grid {
                args.extend(["--grid-rows".into(), rows.to_string().into()]);
                args.extend(["--grid-partitions".into(), partitions.to_string().into()]);
            }
        }
        let cgroup = match cfg.cpus {
            Some(cpus) => Some(Cgroup::create(
                &format!("herald-bench-{}-{id}", std::process::id()),
                cpus,
            )?),
            None => None,
        };
        Ok(Node {
            id: id.to_string(),
            addr,
            args,
            proc: None,
            cgroup,
        })
    }

    /// Starts the node and returns once it listens.
    pub async fn start(&mut self) -> Result<(), String> {
        let mut joined = Ok(());
        let cgroup = &self.cgroup;
        let (proc, addr) = spawn_serve(&self.args, &format!("node {}", self.id), |pid| {
            if let Some(g) = cgroup {
                joined = g.add(pid);
            }
        })
        .await?;
        joined?;
        if addr != self.addr {
            return Err(format!(
                "node {} listens on {addr}, not {}",
                self.id, self.addr
            ));
        }
        self.proc = Some(proc);
        Ok(())
    }

    /// SIGKILL, and reaped; its data stays for a restart.
    pub fn kill(&mut self) {
        self.proc = None;
    }

    pub fn running(&self) -> bool {
        self.proc.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// CPU seconds so far, 0 when not running.
    pub fn cpu_secs(&self) -> f64 {
        self.proc.as_ref().and_then(Proc::cpu_secs).unwrap_or(0.0)
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Fails if the node was started and has exited since.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match &mut self.proc {
            Some(p) => p
                .check_alive()
                .map_err(|e| format!("node {}: {e}", self.id)),
            None => Ok(()),
        }
    }
}

/// A set of nodes on one temporary data directory.
pub struct Nodes {
    pub nodes: Vec<Node>,
    pub cfg: NodeConfig,
    /// Whether the build answers `GET /v1/cluster` (asked once a node runs).
    pub has_view: Option<bool>,
    _dir: tempfile::TempDir,
}

impl Nodes {
    /// Starts `n` nodes (`n1`, `n2`, ...) at once and returns once all listen.
    pub async fn start(n: usize, cfg: NodeConfig) -> Result<Nodes, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut nodes = (1..=n)
            .map(|i| Node::new(&format!("n{i}"), dir.path(), &cfg))
            .collect::<Result<Vec<_>, _>>()?;
        let started =
            futures_util::future::join_all(nodes.iter_mut().map(|node| node.start())).await;
        started.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(Nodes {
            nodes,
            cfg,
            has_view: None,
            _dir: dir,
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(Node::pid).collect()
    }

    pub fn cpu_secs(&self) -> f64 {
        self.nodes.iter().map(Node::cpu_secs).sum()
    }

    pub fn check_alive(&mut self) -> Result<(), String> {
        self.nodes.iter_mut().try_for_each(Node::check_alive)
    }

    /// The node that is primary now, waiting up to `within` for one.
    pub async fn primary(
        &mut self,
        client: &reqwest::Client,
        within: Duration,
    ) -> Result<usize, String> {
        let deadline = Instant::now() + within;
        loop {
            if self.cfg.cluster.is_none() {
                return Ok(0);
            }
            for i in 0..self.nodes.len() {
                if !self.nodes[i].running() {
                    continue;
                }
                if self.is_primary(client, i).await {
                    return Ok(i);
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("no primary after {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether node `i` is the primary: as it says in `GET /v1/cluster`, or, on a build
    /// without that, as a write it acknowledges shows.
    async fn is_primary(&mut self, client: &reqwest::Client, i: usize) -> bool {
        let base = self.nodes[i].base();
        if self.has_view != Some(false) {
            match view(client, &base).await {
                Ok(Some(v)) => {
                    self.has_view = Some(true);
                    return !v["primary"].is_null() && v["primary"] == v["nodeId"];
                }
                Ok(None) => self.has_view = Some(false),
                Err(_) => return false,
            }
        }
        let url = format!("{base}/v1/docs/benchprobe/p");
        matches!(
            client.put(url).json(&json!({"probe": true})).timeout(Duration::from_secs(2)).send().await,
            Ok(r) if r.status().is_success()
        )
    }

    /// Waits until node `i`, restarted, says it is a follower that has caught up (lag <= 100
    /// seqs); on a build without `GET /v1/cluster`, waits `settle` instead.
    pub async fn rejoined(
        &self,
        client: &reqwest::Client,
        i: usize,
        within: Duration,
        settle: Duration,
    ) -> Result<(), String> {
        if self.has_view != Some(true) {
            tokio::time::sleep(settle).await;
            return Ok(());
        }
        let base = self.nodes[i].base();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(v)) = view(client, &base).await {
                let me = v["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|n| n["id"] == v["nodeId"]);
                if let Some(me) = me {
                    if me["role"] == "follower" && me["lagSeqs"].as_u64().is_some_and(|l| l <= 100)
                    {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {} did not rejoin as a follower within {within:?}",
                    self.nodes[i].id
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `GET /v1/cluster` of the node at `base`: `Ok(None)` when the build has no such endpoint
/// (404), `Err` when the node does not answer.
pub async fn view(client: &reqwest::Client, base: &str) -> Result<Option<Value>, String> {
    let r = client
        .get(format!("{base}/v1/cluster"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    match r.status().as_u16() {
        404 | 405 => Ok(None),
        200 => r.json().await.map(Some).map_err(|e| e.to_string()),
        s => Err(format!("GET /v1/cluster: {s}")),
    }
}
