//! The `herald` binary: the public-address guard and graceful shutdown.

use super::*;

#[test]
fn cli_refuses_a_public_address_without_insecure_public() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut h = Herald::spawn(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(h.wait_exit(Duration::from_secs(30)), Some(2));
    let err = h.drain().join("\n");
    assert!(err.contains("--insecure-public"), "{err}");
    assert!(err.contains("authentication"), "{err}");
    assert!(!data.exists(), "nothing was created");
}

#[test]
fn cli_starts_on_a_public_address_with_insecure_public() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut h = Herald::spawn(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--insecure-public",
        "--durability",
        "nosync",
        "--data",
        data.to_str().unwrap(),
    ]);
    let addr = h.wait_listening();
    assert!(addr.ip().is_unspecified(), "{addr}");
    assert_ne!(addr.port(), 0);
    // Dropping `h` kills the process.
}

#[test]
fn cli_refuses_a_cache_size_out_of_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for size in ["4", "0", "lots"] {
        let mut h = Herald::spawn(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cache-mib",
            size,
            "--data",
            data.to_str().unwrap(),
        ]);
        assert_eq!(h.wait_exit(Duration::from_secs(30)), Some(2), "{size}");
        let err = h.drain().join("\n");
        assert!(err.contains("--cache-mib"), "{err}");
    }
    assert!(!data.exists(), "nothing was created");
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_and_the_data_survives() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--durability",
        "fsync",
        // The smallest page cache allowed: the server works with it.
        "--cache-mib",
        "16",
        "--data",
        data.to_str().unwrap(),
    ];
    let client = reqwest::Client::new();
    let mut h = Herald::spawn(&args);
    let addr = h.wait_listening();
    let r = client
        .put(format!("http://{addr}/v1/docs/c/kept"))
        .json(&json!({"n": 42, "s": "durable"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(client);

    h.terminate();
    let started = Instant::now();
    let code = h.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "stderr: {:?}", h.drain());
    let stderr = h.drain();
    assert!(
        stderr.iter().any(|l| l.contains("herald: stopped")),
        "{stderr:?}"
    );
    eprintln!("graceful shutdown took {:?}", started.elapsed());

    let mut h = Herald::spawn(&args);
    let addr = h.wait_listening();
    let client = reqwest::Client::new();
    let r = client
        .get(format!("http://{addr}/v1/docs/c/kept"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["etag"], "\"1\"");
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc, json!({"_id": "kept", "n": 42, "s": "durable"}));
    let health: Value = client
        .get(format!("http://{addr}/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["seq"], 1);
    h.terminate();
    assert_eq!(h.wait_exit(Duration::from_secs(10)), Some(0));
}

/// The one in-process test where durability is the point (`Durability::Fsync`): writes
/// acknowledged before a graceful stop are there when a new server opens the same directory.
#[tokio::test]
async fn in_process_restart_keeps_acknowledged_writes() {
    let fsync = || DbOptions {
        durability: Durability::Fsync,
        ..Default::default()
    };
    let s = Server::start_with(fsync()).await;
    s.put("c/a", json!({"n": 1})).await;
    s.json(
        Method::POST,
        "/v1/commit",
        &json!({"writes": [{"op": "update", "collection": "c", "id": "a", "update": {"$inc": {"n": 1}}}]}),
    )
    .await
    .ok(200);
    let dir = s.stop().await;

    let s = Server::start_in(dir, fsync()).await;
    assert_eq!(s.seq().await, 2);
    let g = s.get("c/a").await;
    assert_eq!(g.etag.as_deref(), Some("\"2\""));
    assert_eq!(g.body, json!({"_id": "a", "n": 2}));
    s.stop().await;
}

#[test]
fn cli_refuses_a_grid_out_of_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (flag, v) in [
        ("--grid-rows", "0"),
        ("--grid-partitions", "65"),
        ("--grid-rows", "x"),
    ] {
        let mut h = Herald::spawn(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            flag,
            v,
            "--data",
            data.to_str().unwrap(),
        ]);
        assert_eq!(h.wait_exit(Duration::from_secs(30)), Some(2), "{flag} {v}");
        let err = h.drain().join("\n");
        assert!(err.contains(flag), "{err}");
    }
    assert!(!data.exists(), "nothing was created");
}

#[tokio::test]
async fn the_grid_flags_shape_the_matching_cells_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut h = Herald::spawn(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--durability",
        "nosync",
        "--grid-rows",
        "2",
        "--grid-partitions",
        "3",
        "--data",
        data.to_str().unwrap(),
    ]);
    let addr = h.wait_listening();
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let cells: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("herald_live_cell_views{"))
        .collect();
    assert_eq!(cells.len(), 6, "{text}");
    assert!(
        cells.contains(&"herald_live_cell_views{row=\"1\",part=\"2\"} 0"),
        "{cells:?}"
    );
}
