//! The fault test's herald processes: spawn `herald serve --cluster ...` on a fixed port (so a
//! restarted node keeps its URL), follow its stderr for the role it announces, SIGKILL,
//! SIGSTOP and SIGCONT it by pid, and kill it on drop (also while a failed test unwinds).

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);
/// Where a node's port is taken from when the kernel's ephemeral range cannot be read.
const EPHEMERAL_LOW_DEFAULT: u16 = 32768;
/// The lowest port a node takes.
const NODE_PORT_MIN: u16 = 10_000;
/// Stderr lines kept per node for failure messages.
const TAIL_LINES: usize = 60;

/// How every node of one run is started.
#[derive(Clone)]
pub struct NodeConfig {
    pub bootstrap: String,
    pub cluster: String,
    pub replication_factor: usize,
    pub session_timeout_ms: u64,
    pub write_timeout_ms: u64,
    /// `--grid-rows` and `--grid-partitions`, if the nodes run the matching grid.
    pub grid: Option<(u32, u32)>,
}

/// What a node's stderr said about its role, newest last.
#[derive(Default)]
pub struct Announced {
    /// The epoch it last said it is the primary of; `None` after it stepped down or restarted.
    pub primary_of: Option<u64>,
    pub tail: Vec<String>,
}

pub struct NodeProc {
    pub id: String,
    pub port: u16,
    pub dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    pub stopped: bool,
    pub announced: Arc<Mutex<Announced>>,
}

impl NodeProc {
    pub fn new(id: &str, root: &Path) -> NodeProc {
        let port = stable_port();
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).expect("node dir");
        NodeProc {
            id: id.into(),
            port,
            log: root.join(format!("{id}.stderr.log")),
            dir,
            child: None,
            stopped: false,
            announced: Arc::default(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Starts the process and waits until it listens.
    pub fn spawn(&mut self, cfg: &NodeConfig) {
        assert!(self.child.is_none(), "{} already runs", self.id);
        *self.announced.lock().unwrap() = Announced::default();
        let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
        command.arg("serve");
        if let Some((rows, parts)) = cfg.grid {
            command
                .args(["--grid-rows", &rows.to_string()])
                .args(["--grid-partitions", &parts.to_string()]);
        }
        let mut child = command
            .args(["--cluster", &cfg.bootstrap])
            .args(["--cluster-name", &cfg.cluster])
            .args(["--node-id", &self.id])
            .arg("--data")
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--advertise-url", &self.url()])
            .args(["--replication-factor", &cfg.replication_factor.to_string()])
            .args(["--session-timeout-ms", &cfg.session_timeout_ms.to_string()])
            .args(["--write-timeout-ms", &cfg.write_timeout_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the herald binary");
        let pipe = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel::<()>();
        let announced = self.announced.clone();
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("node log file");
        let _ = writeln!(log, "---- {} started (pid {})", self.id, child.id());
        let me = format!("node {} ", self.id);
        // Drains stderr until the process dies, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log, "{line}");
                let mut a = announced.lock().unwrap();
                if line.starts_with("herald: listening on") {
                    let _ = tx.send(());
                }
                if let Some(rest) = line.strip_prefix("herald cluster: ") {
                    if let Some(epoch) = rest
                        .strip_prefix(&me)
                        .and_then(|r| r.strip_prefix("is the primary of epoch "))
                    {
                        a.primary_of = epoch.trim().parse().ok();
                    } else if rest.starts_with(&format!("{me}steps down")) {
                        a.primary_of = None;
                    }
                }
                if a.tail.len() == TAIL_LINES {
                    a.tail.remove(0);
                }
                a.tail.push(line);
            }
        });
        self.child = Some(child);
        self.stopped = false;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => return,
                Err(_) => {
                    let exited = self.child.as_mut().unwrap().try_wait().ok().flatten();
                    if exited.is_some() || Instant::now() > deadline {
                        panic!(
                            "node {} did not start (exit {exited:?}); stderr: {:#?}",
                            self.id,
                            self.announced.lock().unwrap().tail
                        );
                    }
                }
            }
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped = false;
        self.announced.lock().unwrap().primary_of = None;
    }

    pub fn sigstop(&mut self) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on the pid of a child this struct owns and has not reaped.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            self.stopped = true;
        }
    }

    pub fn sigcont(&mut self) {
        if let Some(pid) = self.pid() {
            // SAFETY: as in `sigstop`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        self.stopped = false;
    }

    pub fn primary_of(&self) -> Option<u64> {
        if !self.running() {
            return None;
        }
        self.announced.lock().unwrap().primary_of
    }

    pub fn tail(&self) -> Vec<String> {
        self.announced.lock().unwrap().tail.clone()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free port below the kernel's ephemeral range, so that no outgoing connection (a Kafka
/// client's, say) and no `bind(":0")` of another test can take it while its node is down
/// between a kill and a restart: a port from the ephemeral range was taken that way, and the
/// restarted node failed with "Address already in use".
fn stable_port() -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_LOW_DEFAULT);
    let (min, max) = if low > NODE_PORT_MIN + 1000 {
        (NODE_PORT_MIN, low)
    } else {
        (1024, low.max(2048))
    };
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..1000 {
        let port = rng.gen_range(min..max);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {min}..{max}");
}
