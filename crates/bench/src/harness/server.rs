//! The one way a benchmark starts Herald: `herald serve` as a child process on a fresh
//! directory and a free loopback port. A separate process has its own runtime, its CPU can be
//! split by thread (live engine, storage writer, tokio workers) from `/proc`, `perf record -p
//! PID` sees only the server, and SIGKILL ends it at once however far behind it is, so an
//! overloaded run never slows the next one.
//!
//! The `herald` binary is the one built from this workspace: `--herald PATH` or `HERALD_BIN`
//! when given, else `herald` next to this executable in the target directory. When started by
//! cargo (`cargo run -p herald-bench`, `cargo test -p herald-bench`), cargo builds that binary
//! first in the same profile, so a benchmark never measures a stale server.

use super::Durability;
use std::ffi::OsString;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// A child process that is killed (SIGKILL) and reaped when dropped, so also on error.
pub struct Proc {
    pub name: &'static str,
    child: Child,
}

impl Proc {
    pub fn new(name: &'static str, child: Child) -> Proc {
        Proc { name, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds used so far (all threads), or None once the process is gone.
    pub fn cpu_secs(&self) -> Option<f64> {
        super::cpu::cpu_secs(&format!("/proc/{}/stat", self.pid()))
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

/// The `herald` binary given on the command line (`--herald`), if any.
static HERALD_ARG: OnceLock<PathBuf> = OnceLock::new();

/// Uses `path` as the `herald` binary (the `--herald` option); call before any server starts.
pub fn set_herald_path(path: PathBuf) {
    let _ = HERALD_ARG.set(path);
}

/// Cargo features the `herald` binary is built with when cargo started this process.
static HERALD_FEATURES: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Builds `herald` with these cargo features besides `cluster` (always on, see
/// `cargo_build_herald`); call before any server starts. A binary given with `--herald` or `HERALD_BIN` is used as it is.
pub fn set_herald_features(features: &[&'static str]) {
    let _ = HERALD_FEATURES.set(features.to_vec());
}

/// This executable. If it was rebuilt while running, Linux reports the old file as
/// "PATH (deleted)"; the new file at PATH is used then.
pub fn current_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let text = exe.to_string_lossy();
    match text.strip_suffix(" (deleted)") {
        Some(path) => Ok(PathBuf::from(path)),
        None => Ok(exe),
    }
}

/// The profile directory this executable was built into (`target/release`, `target/debug`;
/// a test binary sits one level deeper, in `deps`).
fn profile_dir(exe: &Path) -> Option<&Path> {
    let dir = exe.parent()?;
    match dir.file_name() {
        Some(n) if n == "deps" => dir.parent(),
        _ => Some(dir),
    }
}

/// The cargo arguments that select `profile_dir`'s profile.
fn profile_args(profile_dir: &Path) -> Vec<String> {
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => vec![],
        Some("release") => vec!["--release".into()],
        Some(p) => vec!["--profile".into(), p.into()],
    }
}

/// Builds `herald` with the cargo that started this process (`CARGO` is set by `cargo run` and
/// `cargo test`), in this executable's profile; a no-op when it is up to date.
fn cargo_build_herald(profile_dir: &Path) -> Result<(), String> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "herald"])
        .args(profile_args(profile_dir));
    // Always with the cluster feature (which changes nothing without `--cluster`): `scripts/test`
    // builds everything with every feature, and a build with other features here would replace
    // the `target/debug/herald` the cluster tests of the same run start.
    let mut wanted = vec!["cluster"];
    for f in HERALD_FEATURES.get().into_iter().flatten() {
        if !wanted.contains(f) {
            wanted.push(f);
        }
    }
    let features = wanted.join(",");
    if !features.is_empty() {
        cmd.args(["--features", &features]);
    }
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        cmd.current_dir(dir);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cargo build -p herald: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build -p herald {features}: {status}"));
    }
    Ok(())
}

/// The `herald` binary to start (see the module comment); built once per process when cargo
/// started it.
pub fn herald_exe() -> Result<PathBuf, String> {
    static EXE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    EXE.get_or_init(|| {
        if let Some(p) = HERALD_ARG.get() {
            return Ok(p.clone());
        }
        if let Some(p) = std::env::var_os("HERALD_BIN") {
            return Ok(PathBuf::from(p));
        }
        let exe = current_exe()?;
        let dir = profile_dir(&exe).ok_or("no directory for this executable")?;
        cargo_build_herald(dir)?;
        let herald = dir.join(format!("herald{}", std::env::consts::EXE_SUFFIX));
        if !herald.is_file() {
            return Err(format!(
                "{} does not exist: build it (cargo build --release -p herald), or pass \
                 --herald PATH (or HERALD_BIN)",
                herald.display()
            ));
        }
        Ok(herald)
    })
    .clone()
}

pub fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Fsync => "fsync",
        Durability::NoSync => "nosync",
    }
}

/// How to start the server.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    pub durability: Durability,
    /// `--cache-mib`; `None`: the server's default.
    pub cache_mib: Option<u64>,
    /// `--trigger-workers`; `None`: the server's default.
    pub trigger_workers: Option<usize>,
    /// `--grid-rows` and `--grid-partitions` (the live-query matching grid); `None`: the
    /// server's default.
    pub grid: Option<(u32, u32)>,
}

impl ServerOptions {
    pub fn new(durability: Durability) -> ServerOptions {
        ServerOptions {
            durability,
            cache_mib: None,
            trigger_workers: None,
            grid: None,
        }
    }
}

/// A running `herald serve`; killed (and its directory removed) when dropped.
pub struct Server {
    pub addr: SocketAddr,
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `herald serve` on a fresh temporary directory and a free loopback port; returns
    /// once it listens. Its stderr is forwarded, prefixed `[herald serve]`.
    pub async fn start(opts: ServerOptions) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut args: Vec<OsString> = ["serve", "--listen", "127.0.0.1:0", "--durability"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push(durability_name(opts.durability).into());
        args.push("--data".into());
        args.push(dir.path().join("herald").into());
        if let Some(mib) = opts.cache_mib {
            args.extend(["--cache-mib".into(), mib.to_string().into()]);
        }
        if let Some(n) = opts.trigger_workers {
            args.extend(["--trigger-workers".into(), n.to_string().into()]);
        }
        if let Some((rows, parts)) = opts.grid {
            args.extend([
                "--grid-rows".into(),
                rows.to_string().into(),
                "--grid-partitions".into(),
                parts.to_string().into(),
            ]);
        }
        let (proc, addr) = spawn_serve(&args, "herald serve", |_| {}).await?;
        Ok(Server {
            addr,
            proc,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// `http://ADDR`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Ends the server at once (SIGKILL) and hands back its directory (the database is
    /// `herald` inside it), removed when the returned value drops.
    pub fn kill_keeping_data(self) -> tempfile::TempDir {
        drop(self.proc);
        self._dir
    }

    /// Ends the server at once (SIGKILL) and removes its directory.
    pub fn kill(self) {
        // Dropping the fields does both: `proc` kills, then `_dir` is removed.
    }
}

/// Starts `herald <args>` (a `serve` command line) and returns once it listens, with its
/// address. `started` sees the child's pid at once (before it listens: a cgroup is joined
/// then). Its stderr is forwarded, each line prefixed `[label]`; the address line is not.
pub async fn spawn_serve(
    args: &[OsString],
    label: &str,
    started: impl FnOnce(u32),
) -> Result<(Proc, SocketAddr), String> {
    let mut child = Command::new(herald_exe()?)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start herald serve: {e}"))?;
    started(child.id());
    let stderr = child.stderr.take().expect("piped stderr");
    let proc = Proc::new("herald serve", child);
    let (tx, rx) = tokio::sync::oneshot::channel::<String>();
    let label = label.to_string();
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
                _ => eprintln!("[{label}] {line}"),
            }
        }
    });
    let addr = match tokio::time::timeout(Duration::from_secs(60), rx).await {
        Ok(Ok(a)) => a.parse().map_err(|e| format!("server address {a}: {e}"))?,
        _ => return Err("herald serve did not start listening (its stderr is above)".into()),
    };
    Ok((proc, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_follows_the_executable() {
        let dir = |p: &str| profile_dir(Path::new(p)).map(Path::to_path_buf);
        assert_eq!(
            dir("/w/target/release/herald-bench"),
            Some(PathBuf::from("/w/target/release"))
        );
        assert_eq!(
            dir("/w/target/debug/deps/ingest-0123abcd"),
            Some(PathBuf::from("/w/target/debug"))
        );
        assert!(profile_args(Path::new("/w/target/debug")).is_empty());
        assert_eq!(profile_args(Path::new("/w/target/release")), ["--release"]);
        assert_eq!(
            profile_args(Path::new("/w/target/bench")),
            ["--profile", "bench"]
        );
    }
}
