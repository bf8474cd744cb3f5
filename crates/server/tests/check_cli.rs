//! `herald check` as an operator runs it: it refuses a data directory a running server holds
//! (exit 2), and checks one left by a crashed server (SIGKILL), reporting it intact (exit 0).
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `herald serve`, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(data: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the herald binary");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("herald reports its address");
        if let Some(addr) = line.strip_prefix("herald: listening on http://") {
            return (server, format!("http://{}", addr.trim()));
        }
    }
}

fn check(data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("check")
        .arg("--data")
        .arg(data)
        .output()
        .expect("run herald check")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_check_refuses_an_open_store_and_checks_a_crashed_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut server, base) = start(&data);
    let client = reqwest::Client::new();
    for i in 0..20 {
        let r = client
            .put(format!("{base}/v1/docs/c/d{i}"))
            .json(&serde_json::json!({"n": i, "tag": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16() / 100, 2);
    }
    let out = check(&data);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop it first"),
        "{out:?}"
    );
    // A crash: the log is left for recovery, redb's file was not closed.
    let _ = server.0.kill();
    let _ = server.0.wait();
    let out = check(&data);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("is intact"), "{stdout}");
    assert!(stdout.contains("index entries they call for"), "{stdout}");
    // The check changed nothing a restart needs: the server recovers every write.
    let (_server, base) = start(&data);
    let r = client
        .get(format!("{base}/v1/docs/c/d19"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
