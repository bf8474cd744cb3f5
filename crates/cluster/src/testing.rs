//! Real Kafka clusters for tests and benchmarks: `KafkaCluster` runs `scripts/kafka/*` (install,
//! start, stop, kill-broker, restart-broker) in a temporary directory and stops every broker when
//! dropped. Used by this crate's and the server's integration tests and by herald-bench; not by
//! the server itself.
//!
//! `KafkaCluster::shared()` is the cheap one for tests that only need *a* broker: it is the
//! external broker named by `HERALD_KAFKA_BOOTSTRAP` (what `scripts/test` starts once for the whole
//! run) or, without it, one broker per test process. Tests that share a broker must use topic and
//! group names of their own (`unique_name`). Fault tests (`kill_broker`, `restart_broker`) start
//! their own cluster with `KafkaCluster::start`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable naming an external cluster's bootstrap list (`host:port,...`).
pub const BOOTSTRAP_ENV: &str = "HERALD_KAFKA_BOOTSTRAP";

/// The repository's `scripts/kafka`, found from this crate's source location, so tests and
/// benchmarks work from any current directory.
fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka")
}

/// A running Kafka cluster: brokers this process started (stopped on drop), or an external one.
pub struct KafkaCluster {
    bootstrap: String,
    brokers: usize,
    /// The cluster directory (configs, data, `broker-<i>.log`) when this process started the
    /// brokers; `None` for an external cluster, which this handle never stops or kills.
    dir: Option<PathBuf>,
}

impl KafkaCluster {
    /// Installs Kafka if needed and starts `brokers` (1 to 3) KRaft nodes on loopback, returning
    /// once they serve. Panics with the reason (missing java or mvn, a port taken, the brokers'
    /// log tails) if they cannot start: a test that needs Kafka must fail, not skip.
    pub fn start(brokers: usize) -> KafkaCluster {
        Self::try_start(brokers).unwrap_or_else(|why| panic!("{why}"))
    }

    /// `start`, with the failure as a message instead of a panic.
    pub fn try_start(brokers: usize) -> Result<KafkaCluster, String> {
        assert!(
            (1..=3).contains(&brokers),
            "a test cluster has 1 to 3 brokers"
        );
        install()?;
        let dir = fresh_dir()?;
        // A free port chosen by the script can be taken by another process before the broker
        // binds it; that is the one failure worth retrying.
        let mut attempts_left = 3;
        loop {
            let out = run(Command::new(scripts_dir().join("start"))
                .arg(&dir)
                .arg("--brokers")
                .arg(brokers.to_string())
                .arg("--owner")
                .arg(std::process::id().to_string()))?;
            if out.status.success() {
                let bootstrap = String::from_utf8_lossy(&out.stdout).trim().to_string();
                return Ok(KafkaCluster {
                    bootstrap,
                    brokers,
                    dir: Some(dir),
                });
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            attempts_left -= 1;
            if attempts_left == 0 || !stderr.contains("could not bind its port") {
                return Err(format!(
                    "could not start a {brokers}-broker Kafka cluster in {}:\n{stderr}",
                    dir.display()
                ));
            }
            // start stopped what it had launched; begin again in an empty directory.
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }

    /// The cluster for tests that need a working broker and nothing else: the external cluster
    /// named by `HERALD_KAFKA_BOOTSTRAP` when set, else one broker started on first use and
    /// stopped when this process exits (`start --owner`, since a static is never dropped).
    pub fn shared() -> &'static KafkaCluster {
        static SHARED: OnceLock<KafkaCluster> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var(BOOTSTRAP_ENV) {
            Ok(bootstrap) if !bootstrap.trim().is_empty() => KafkaCluster {
                brokers: bootstrap.split(',').count(),
                bootstrap: bootstrap.trim().to_string(),
                dir: None,
            },
            _ => KafkaCluster::start(1),
        })
    }

    /// The comma-separated `host:port` list for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// How many brokers the cluster has.
    pub fn brokers(&self) -> usize {
        self.brokers
    }

    /// The cluster directory (broker logs are `broker-<i>.log` in it); `None` when external.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Kills broker `i` with SIGKILL (a crash: no controlled shutdown) and waits until it exited.
    pub fn kill_broker(&self, i: usize) {
        self.broker_script("kill-broker", i);
    }

    /// Kills broker `i` if it runs, starts it again with the same config and data, and waits until
    /// it has started (it then rejoins and catches up as a follower).
    pub fn restart_broker(&self, i: usize) {
        self.broker_script("restart-broker", i);
    }

    fn broker_script(&self, script: &str, i: usize) {
        let dir = self
            .dir
            .as_ref()
            .unwrap_or_else(|| panic!("{script}: not on an external cluster ({BOOTSTRAP_ENV})"));
        assert!(
            i < self.brokers,
            "{script}: no broker {i} in a {}-broker cluster",
            self.brokers
        );
        let out = run(Command::new(scripts_dir().join(script))
            .arg(dir)
            .arg(i.to_string()))
        .unwrap_or_else(|why| panic!("{why}"));
        if !out.status.success() {
            panic!(
                "scripts/kafka/{script} {} {i} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        let Some(dir) = &self.dir else { return };
        let stopped = run(Command::new(scripts_dir().join("stop")).arg(dir));
        if std::thread::panicking() {
            // Keep the logs of a failed test (the `keep` file tells start's --owner watcher).
            let _ = std::fs::write(dir.join("keep"), b"");
            eprintln!("Kafka cluster logs kept in {}", dir.display());
        } else if matches!(&stopped, Ok(out) if out.status.success()) {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Err(why) = stopped {
            eprintln!("{why}");
        }
    }
}

/// A name no other test (in this or another process sharing the broker) uses, for topics and
/// consumer groups.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `scripts/kafka/install` once per process (it is idempotent and locks against other
/// processes); its failure says which tool is missing.
fn install() -> Result<(), String> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let out = run(&mut Command::new(scripts_dir().join("install")))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "scripts/kafka/install failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        })
        .clone()
}

fn fresh_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(unique_name("herald-kafka"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn run(command: &mut Command) -> Result<Output, String> {
    command
        .output()
        .map_err(|e| format!("could not run {:?}: {e}", command.get_program()))
}
