//! A real full disk under live traffic: the test mounts a small tmpfs as the data directory
//! (root only; skipped with a printed reason otherwise), starts `herald serve` on it with a
//! subscriber connected, and fills the disk with documents until writes are refused. Then:
//! writes get 507 `storage_full`; reads and the subscription keep working; `/v1/health` and
//! `/metrics` say why; once space is freed (a ballast file the test made is deleted), writes
//! resume without a restart and the subscriber receives them. The tmpfs is unmounted by a drop
//! guard, after the server is killed.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The tmpfs: room for the store (redb's first regions, the log) and some documents.
const TMPFS_MIB: u64 = 64;
/// A file the "operator" deletes to free space.
const BALLAST_MIB: u64 = 16;
const RESERVE_MIB: u64 = 8;
const WAIT: Duration = Duration::from_secs(60);

/// Unmounts the tmpfs (lazily, so a straggler cannot keep it busy) when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `herald serve`, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mount_tmpfs(at: &Path) -> Result<Mount, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not running as root (mounting a tmpfs needs root)".into());
    }
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_MIB}m"), "tmpfs"])
        .arg(at)
        .status()
        .map_err(|e| format!("running mount: {e}"))?;
    if !status.success() {
        return Err(format!("mount -t tmpfs failed ({status})"));
    }
    Ok(Mount(at.to_path_buf()))
}

fn start(data: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("serve")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--reserve-mib", &RESERVE_MIB.to_string()])
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
            eprintln!("[herald] {line}");
            let _ = tx.send(line);
        }
    });
    let server = Server(child);
    let deadline = Instant::now() + WAIT;
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("herald reports its address");
        if let Some(addr) = line.strip_prefix("herald: listening on http://") {
            return (server, format!("http://{}", addr.trim()));
        }
    }
}

async fn put(client: &reqwest::Client, base: &str, path: &str, doc: &Value) -> (u16, Value) {
    let r = client
        .put(format!("{base}/v1/docs/{path}"))
        .json(doc)
        .send()
        .await
        .expect("the server answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let r = client.get(url).send().await.expect("the server answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn metrics(client: &reqwest::Client, base: &str) -> String {
    let r = client.get(format!("{base}/metrics")).send().await.unwrap();
    r.text().await.unwrap()
}

/// Reads the event stream until its text so far contains `what`.
async fn read_until(stream: &mut reqwest::Response, text: &mut String, what: &str) {
    let deadline = Instant::now() + WAIT;
    while !text.contains(what) {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("the subscriber never saw {what}: {text}"))
            .expect("the stream stays open")
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_507_while_reads_and_live_go_on_and_writes_resume() {
    let root = tempfile::tempdir().unwrap();
    let mnt = root.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _mount = match mount_tmpfs(&mnt) {
        Ok(mount) => mount,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let ballast = mnt.join("ballast");
    std::fs::write(&ballast, vec![1u8; (BALLAST_MIB << 20) as usize]).unwrap();
    let (_server, base) = start(&mnt.join("data"));
    let client = reqwest::Client::new();
    assert_eq!(
        put(&client, &base, "c/first", &json!({"n": 0})).await.0 / 100,
        2
    );
    let mut live = client
        .get(format!("{base}/v1/subscribe?collection=c"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let mut seen = String::new();
    read_until(&mut live, &mut seen, "\"initial\"").await;

    // Fill the disk.
    let filler = "x".repeat(200 << 10);
    let mut refused = None;
    for i in 0..2000 {
        let (status, body) = put(&client, &base, &format!("fill/{i}"), &json!({"s": filler})).await;
        if status / 100 != 2 {
            refused = Some((status, body));
            break;
        }
    }
    let (status, body) = refused.expect("the disk filled up");
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "storage_full", "{body}");

    // Refused, but reads, queries and the subscription work; health and metrics say why.
    let (status, body) = put(&client, &base, "c/during", &json!({"n": 1})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (507, &json!("storage_full"))
    );
    let (status, doc) = get_json(&client, &format!("{base}/v1/docs/c/first")).await;
    assert_eq!(status, 200, "{doc}");
    let (status, health) = get_json(&client, &format!("{base}/v1/health")).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["writes"]["code"], "storage_full", "{health}");
    assert!(metrics(&client, &base)
        .await
        .contains("\nherald_storage_disk_full 1\n"));

    // The operator frees space: writes resume without a restart, and the subscriber gets them.
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = put(&client, &base, "c/after", &json!({"n": 2})).await;
        if status / 100 == 2 {
            break;
        }
        assert_eq!(status, 507, "{body}");
        assert!(Instant::now() < deadline, "writes never resumed: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    read_until(&mut live, &mut seen, "\"after\"").await;
    assert!(
        !seen.contains("\"during\""),
        "a refused write reached the subscriber: {seen}"
    );
    let (_, health) = get_json(&client, &format!("{base}/v1/health")).await;
    assert!(health.get("writes").is_none(), "{health}");
    assert!(metrics(&client, &base)
        .await
        .contains("\nherald_storage_disk_full 0\n"));
}
