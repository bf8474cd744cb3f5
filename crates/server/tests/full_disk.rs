//! A real full disk under live traffic: the test mounts a small tmpfs as the data directory
//! (root only; skipped with a printed reason otherwise), starts `herald serve` on it with a
//! subscriber connected, and fills the disk with documents until writes are refused. Then:
//! writes get 507 `storage_full`; reads and the subscription keep working; `/v1/health` and
//! `/metrics` say why; trigger tasks pending then wait instead of failing attempt after
//! attempt; once space is freed (a ballast file the test made is deleted), writes
//! resume without a restart and the subscriber receives them. The tmpfs is unmounted by a drop
//! guard, after the server is killed.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The tmpfs: room for the store (redb's first regions, the log) and some documents.
const TMPFS_MIB: u64 = 96;
/// A file the "operator" deletes to free space.
const BALLAST_MIB: u64 = 32;
const RESERVE_MIB: u64 = 16;
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

/// Starts the server; also returns how many failed trigger attempts it has logged so far.
fn start(data: &Path) -> (Server, String, Arc<AtomicUsize>) {
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
    let failed = Arc::new(AtomicUsize::new(0));
    let counted = failed.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("[herald] {line}");
            if line.contains("recording a failure of trigger") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
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
            return (server, format!("http://{}", addr.trim()), failed);
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
    let (_server, base, trigger_failures) = start(&mnt.join("data"));
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

    // A trigger on the documents that fill the disk: its tasks are pending when it fills.
    let def = json!({"collection": "fill", "on": ["insert"],
        "function": "function (event, db) { db.put(\"audit\", event.id, { n: 1 }); }"});
    let r = client
        .put(format!("{base}/v1/triggers/audit"))
        .json(&def)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16() / 100, 2, "{:?}", r.text().await);

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
    // Trigger tasks wait instead of spending attempts: no failed attempt while the disk stays
    // full (a few may fail before the dispatcher sees the refusal).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, status) = get_json(&client, &format!("{base}/v1/triggers/audit")).await;
    let before = trigger_failures.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = trigger_failures.load(Ordering::SeqCst);
    let (_, health) = get_json(&client, &format!("{base}/v1/health")).await;
    // Checkpoints free log segments, so writes may resume for a moment by themselves: judge
    // only a window the disk stayed full through, with tasks waiting.
    if status["pending"].as_u64() > Some(0) && health["writes"]["code"] == "storage_full" {
        assert_eq!(after, before, "trigger tasks kept failing on a full disk");
    } else {
        eprintln!("trigger pause not judged: no task waited, or writes resumed ({status})");
    }

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
    // The paused trigger tasks run now.
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, status) = get_json(&client, &format!("{base}/v1/triggers/audit")).await;
        if status["pending"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "trigger tasks never ran: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(metrics(&client, &base)
        .await
        .contains("\nherald_storage_disk_full 0\n"));
}
