//! The crash test's server process (start, wait for readiness, SIGKILL, stderr for failure
//! messages) and its seeded random numbers.

use super::*;

/// xorshift64*: enough randomness for timings and op choices without a dependency.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so small or zero seeds work.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A running `herald serve`; killed (SIGKILL) and reaped on drop, so a failing test never
/// leaves a server behind.
pub(super) struct Server {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub(super) fn spawn(dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .arg("serve")
            .arg("--data")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--log-retention-count", &LOG_RETENTION.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the herald binary");
        let pipe = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&stderr);
        // Drains stderr until the process dies, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                {
                    let mut kept = kept.lock().expect("stderr lock");
                    if kept.len() < STDERR_LINES_MAX {
                        kept.push(line.clone());
                    }
                }
                let _ = tx.send(line);
            }
        });
        Server {
            child: Some(child),
            lines,
            stderr,
        }
    }

    /// Waits for `herald: listening on http://ADDR` and returns `ADDR`.
    pub(super) fn wait_listening(&mut self) -> String {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("herald: listening on http://") {
                        return addr.trim().to_string();
                    }
                }
                Err(_) => {
                    let status = self
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    panic!(
                        "herald did not report its address within {STARTUP_TIMEOUT:?} (exit status {status:?}); stderr: {:?}",
                        self.stderr_text()
                    );
                }
            }
        }
    }

    pub(super) fn stderr_text(&self) -> Vec<String> {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// SIGKILLs and reaps the server. Returns a description of the problem if it had already
    /// exited on its own instead of dying by the signal.
    pub(super) fn kill(&mut self) -> Option<String> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        let status = child.wait().expect("wait for the herald process");
        if status.signal() == Some(9) {
            None
        } else {
            Some(format!(
                "the server exited on its own ({status}) instead of being killed; stderr: {:?}",
                self.stderr_text()
            ))
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
