//! High-rate ingestion against a real server on a real socket: write requests over the
//! WebSocket (non-atomic and atomic, per-write errors, malformed requests changing nothing,
//! replies in order past the in-flight bound, keyed `$inc` upserts, writes and a subscription
//! on one connection), and short runs of `herald bench rockbench`, `herald bench stream` and
//! `herald bench http` whose numbers must be sane.

mod common;

use common::ws::{connect, next, send};
use common::Server;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn non_atomic_writes_fail_one_by_one() {
    let s = Server::start().await;
    s.put("c/x", json!({"n": 1})).await;
    let mut ws = connect(&s).await;
    send(&mut ws, json!({"op": "write", "req": "r1", "writes": [
        {"op": "put", "collection": "c", "id": "a", "doc": {"n": 1}},
        {"op": "put", "collection": "c", "id": "b"},
        {"op": "update", "collection": "c", "id": "x", "update": {"$inc": {"n": 1}}, "ifVersion": 7},
        {"op": "insert", "collection": "c", "id": "x", "doc": {}},
        {"op": "update", "collection": "c", "id": "k", "update": {"$inc": {"n": 5}}, "upsert": true}
    ]}))
    .await;
    let m = next(&mut ws).await;
    assert_eq!(
        (m["type"].as_str(), m["req"].as_str()),
        (Some("written"), Some("r1")),
        "{m}"
    );
    let r = m["results"].as_array().unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(
        (r[0]["id"].as_str(), r[0]["version"].as_u64()),
        (Some("a"), Some(1))
    );
    assert_eq!(r[1]["error"]["code"], "bad_request");
    assert_eq!(r[2]["error"]["code"], "version_conflict");
    assert_eq!(r[3]["error"]["code"], "already_exists");
    assert_eq!(
        (r[4]["op"].as_str(), r[4]["version"].as_u64()),
        (Some("insert"), Some(1))
    );
    // Each successful write is its own transaction, so each has its own seq.
    let (sa, sk) = (r[0]["seq"].as_u64().unwrap(), r[4]["seq"].as_u64().unwrap());
    assert_ne!(sa, sk);
    assert_eq!(m["seq"].as_u64(), Some(sa.max(sk)));
    assert_eq!(s.get("c/k").await.ok(200), json!({"_id": "k", "n": 5}));
    assert_eq!(s.get("c/x").await.ok(200), json!({"_id": "x", "n": 1}));
    s.stop().await;
}

#[tokio::test]
async fn atomic_writes_apply_together_or_not_at_all() {
    let s = Server::start().await;
    s.put("c/x", json!({"n": 1})).await;
    let mut ws = connect(&s).await;
    send(&mut ws, json!({"op": "write", "req": "ok", "atomic": true, "writes": [
        {"op": "put", "collection": "c", "id": "a", "doc": {"n": 1}},
        {"op": "update", "collection": "c", "id": "x", "update": {"$inc": {"n": 1}}, "ifVersion": 1}
    ]}))
    .await;
    let m = next(&mut ws).await;
    assert_eq!(m["type"], "written");
    let r = m["results"].as_array().unwrap();
    assert_eq!(r[0]["seq"], m["seq"]);
    assert_eq!(r[1]["seq"], m["seq"], "one transaction, one seq");
    assert_eq!(r[1]["version"], 2);

    let before = s.snapshot(&["c/a", "c/x", "c/new"]).await;
    send(&mut ws, json!({"op": "write", "req": "conflict", "atomic": true, "writes": [
        {"op": "put", "collection": "c", "id": "new", "doc": {}},
        {"op": "update", "collection": "c", "id": "x", "update": {"$inc": {"n": 1}}, "ifVersion": 1}
    ]}))
    .await;
    let e = next(&mut ws).await;
    assert_eq!(
        (
            e["type"].as_str(),
            e["req"].as_str(),
            e["code"].as_str(),
            e["write"].as_u64()
        ),
        (
            Some("error"),
            Some("conflict"),
            Some("version_conflict"),
            Some(1)
        )
    );
    send(
        &mut ws,
        json!({"op": "write", "req": "bad", "atomic": true, "writes": [
            {"op": "put", "collection": "c", "id": "new", "doc": {}},
            {"op": "frobnicate", "collection": "c", "id": "x"}
        ]}),
    )
    .await;
    let e = next(&mut ws).await;
    assert_eq!(
        (e["code"].as_str(), e["write"].as_u64()),
        (Some("bad_request"), Some(1))
    );
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn malformed_write_requests_change_nothing() {
    let s = Server::start().await;
    let before = s.snapshot(&["c/a"]).await;
    let mut ws = connect(&s).await;
    let put = json!({"op": "put", "collection": "c", "id": "a", "doc": {}});
    let cases = [
        (json!({"op": "write", "writes": [put]}), "bad_request", None),
        (
            json!({"op": "write", "req": "", "writes": [put]}),
            "bad_request",
            None,
        ),
        (
            json!({"op": "write", "req": "r", "writes": []}),
            "bad_request",
            Some("r"),
        ),
        (
            json!({"op": "write", "req": "r", "writes": {}}),
            "bad_request",
            Some("r"),
        ),
        (
            json!({"op": "write", "req": "r", "writes": [put], "atomic": "yes"}),
            "bad_request",
            Some("r"),
        ),
        (
            json!({"op": "write", "req": "r", "writes": [put], "extra": 1}),
            "bad_request",
            Some("r"),
        ),
        (
            json!({"op": "write", "req": "r", "writes": vec![put.clone(); 501]}),
            "limit_exceeded",
            Some("r"),
        ),
    ];
    for (msg, code, req) in cases {
        send(&mut ws, msg.clone()).await;
        let e = next(&mut ws).await;
        assert_eq!(e["type"], "error", "{msg}");
        assert_eq!(e["code"].as_str(), Some(code), "{msg}");
        assert_eq!(e["req"].as_str(), req, "{msg}");
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

/// More writes than the per-connection bound, sent without reading a reply: every request is
/// answered, in order, and every keyed `$inc` counted exactly once; a subscription on the same
/// connection sees the counters.
#[tokio::test]
async fn many_upserts_past_the_bound_are_all_answered_in_order() {
    const CELLS: usize = 100;
    const ROUNDS: usize = 60; // 60 x 100 = 6,000 writes, about three times the in-flight bound
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    send(&mut ws, json!({"op": "subscribe", "sub": "hot", "collection": "cells", "filter": {"n": {"$gte": ROUNDS}}})).await;
    assert_eq!(next(&mut ws).await["type"], "initial");
    let (mut tx, mut rx) = ws.split();
    let writer = tokio::spawn(async move {
        for round in 0..ROUNDS {
            let writes: Vec<Value> = (0..CELLS)
                .map(|c| json!({"op": "update", "collection": "cells", "id": format!("c{c}"),
                                "update": {"$inc": {"n": 1}, "$max": {"round": round}}, "upsert": true}))
                .collect();
            let msg = json!({"op": "write", "req": format!("r{round}"), "writes": writes});
            tx.send(Message::Text(msg.to_string().into()))
                .await
                .unwrap();
        }
        tx
    });
    let (mut replies, mut hot) = (0, std::collections::HashSet::new());
    while replies < ROUNDS || hot.len() < CELLS {
        let m = tokio::time::timeout(Duration::from_secs(30), rx.next())
            .await
            .expect("a message within 30 s")
            .unwrap()
            .unwrap();
        let Message::Text(t) = m else { continue };
        let v: Value = serde_json::from_str(&t).unwrap();
        match v["type"].as_str() {
            Some("written") => {
                assert_eq!(v["req"], format!("r{replies}"), "replies in request order");
                let r = v["results"].as_array().unwrap();
                assert_eq!(r.len(), CELLS);
                assert!(r
                    .iter()
                    .all(|x| x["version"].as_u64() == Some(replies as u64 + 1)));
                replies += 1;
            }
            Some("changes") => {
                for c in v["changes"].as_array().unwrap() {
                    hot.insert(c["id"].as_str().unwrap().to_string());
                }
            }
            Some("heartbeat") => {}
            other => panic!("unexpected {other:?}: {v}"),
        }
    }
    drop(writer.await.unwrap());
    for c in [0, CELLS - 1] {
        let d = s.get(&format!("cells/c{c}")).await.ok(200);
        assert_eq!(
            (d["n"].as_u64(), d["round"].as_u64()),
            (Some(ROUNDS as u64), Some(ROUNDS as u64 - 1))
        );
    }
    s.stop().await;
}

/// Runs `herald bench <args>` (the binary under test) and returns its JSON output.
fn bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run herald bench");
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "herald bench {args:?} failed:\n{text}");
    for chart in ["latency", "distribution"].iter().flat_map(|c| {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(move |e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("{c}.svg"))
            })
    }) {
        let svg = std::fs::read_to_string(chart.path()).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
    }
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

/// A latency summary is sane: samples, and percentiles positive, finite and ordered.
#[track_caller]
fn sane(s: &Value, what: &str) {
    assert!(s["n"].as_u64().unwrap() > 0, "{what}: no samples: {s}");
    let q: Vec<f64> = ["p50_ms", "p95_ms", "p99_ms", "max_ms"]
        .iter()
        .map(|k| s[k].as_f64().unwrap_or(f64::NAN))
        .collect();
    assert!(q.iter().all(|v| v.is_finite() && *v > 0.0), "{what}: {s}");
    assert!(
        q.windows(2).all(|w| w[0] <= w[1]),
        "{what}: not ordered: {s}"
    );
}

fn check_rockbench(v: &Value) {
    let r = &v["result"];
    let (sent, applied, counted) = (
        r["sent"].as_u64(),
        r["applied"].as_u64(),
        r["counted"].as_u64(),
    );
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(sent, applied, "every event sent was acknowledged");
    assert_eq!(
        applied, counted,
        "events written = events the server committed"
    );
    let expected = v["options"]["rate"].as_f64().unwrap() * v["options"]["secs"].as_f64().unwrap();
    // A loaded machine may leave a debug build behind its schedule; most events must go out.
    assert!(
        sent.unwrap() as f64 >= expected * 0.5,
        "{sent:?} of {expected}"
    );
    assert!(r["achieved_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["peak_rss_kib"].as_u64().unwrap() > 0);
    // The server's CPU over the run: it parsed and stored events, so some, and no more than
    // the machine has.
    let cpu = &r["cpu"];
    let cores = cpu["server_cores"].as_f64().unwrap();
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(cores > 0.0 && cores <= machine + 0.5, "{cpu}");
    let per_event = cpu["server_cpu_ms_per_event"].as_f64().unwrap();
    assert!(per_event > 0.0 && per_event.is_finite(), "{cpu}");
    assert!(cpu["wall_secs"].as_f64().unwrap() >= v["options"]["secs"].as_f64().unwrap());
    let series = r["latency"].as_array().unwrap();
    sane(&series[0]["overall"], "pull");
    sane(&series[1]["overall"], "live");
    if v["options"]["via"] != "stream" {
        sane(&series[2]["overall"], "write ack");
    }
}

/// A short, low-rate `herald bench rockbench` with `extra` options, checked for sanity.
fn rockbench(extra: &[&str]) -> Value {
    let mut args = vec![
        "rockbench",
        "--rate",
        "150",
        "--secs",
        "3",
        "--batch-ms",
        "50",
    ];
    args.extend_from_slice(&["--durability", "nosync"]);
    args.extend_from_slice(extra);
    let v = bench(&args);
    check_rockbench(&v);
    v
}

#[test]
fn rockbench_runs_fixed_over_websocket() {
    rockbench(&[]);
}

#[test]
fn rockbench_runs_over_one_streamed_bulk_request_per_generator() {
    rockbench(&["--via", "stream"]);
}

#[test]
fn rockbench_runs_bursty_with_overwrites_and_sparse_schemas_over_bulk() {
    let v = rockbench(&[
        "--shape",
        "50,200,50",
        "--overwrite",
        "0.3",
        "--sparse",
        "0.3",
        "--generators",
        "3",
        "--via",
        "bulk",
        "--cache-mib",
        "32",
    ]);
    assert_eq!(v["options"]["shape_pct"], json!([50.0, 200.0, 50.0]));
    assert_eq!(v["options"]["cache_mib"], json!(32));
    assert_eq!(
        v["result"]["target_per_interval"],
        json!([75.0, 300.0, 75.0])
    );
}

#[test]
fn stream_runs_every_pattern_with_and_without_subscribers() {
    let v = bench(&[
        "stream",
        "--cells",
        "300",
        "--windows",
        "2",
        "--source-docs",
        "1500",
        "--read-secs",
        "30",
        "--clients",
        "4",
        "--subscribers",
        "0,2",
        "--atomic",
        "--durability",
        "nosync",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(v["options"]["atomic"], true);
    for r in runs {
        let ps = r["patterns"].as_array().unwrap();
        assert_eq!(ps.len(), 4);
        for p in ps {
            assert_eq!(p["check"], "ok", "{p}");
            assert!(p["tuples"].as_u64().unwrap() > 0, "{p}");
            assert!(p["tuples_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            sane(&p["latency"], p["pattern"].as_str().unwrap());
        }
        assert_eq!(ps[0]["tuples"], 600, "300 cells x 2 windows");
        assert_eq!(ps[1]["tuples"], 1500, "the whole source copied");
        assert_eq!(ps[2]["tuples"], 1500, "as many reads as documents");
        assert_eq!(ps[3]["tuples"], 1500, "every document read once");
        assert!(r["peak_rss_kib"].as_u64().unwrap() > 0);
        assert!(r["cpu"]["server_cores"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        runs[1]["notifications"].as_u64().unwrap() > 0,
        "subscribers saw changes"
    );
}

#[tokio::test]
async fn an_error_reply_waits_behind_earlier_replies() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    let writes: Vec<Value> = (0..500)
        .map(|i| json!({"op": "put", "collection": "c", "id": format!("d{i}"), "doc": {"i": i}}))
        .collect();
    send(
        &mut ws,
        json!({"op": "write", "req": "big", "writes": writes}),
    )
    .await;
    send(&mut ws, json!({"op": "write", "req": "bad", "writes": []})).await;
    let first = next(&mut ws).await;
    assert_eq!(
        (first["type"].as_str(), first["req"].as_str()),
        (Some("written"), Some("big"))
    );
    let second = next(&mut ws).await;
    assert_eq!(
        (second["type"].as_str(), second["req"].as_str()),
        (Some("error"), Some("bad"))
    );
    s.stop().await;
}

#[test]
fn http_bench_runs_every_phase_with_sane_numbers() {
    let v = bench(&[
        "http",
        "--clients",
        "4",
        "--insert-secs",
        "1",
        "--read-secs",
        "1",
        "--range-docs",
        "500",
        "--range-secs",
        "1",
    ]);
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3, "{v}");
    for p in phases {
        // Point reads fetch documents the insert phase wrote, and range queries must return
        // exactly 100 documents, so errors would show a lost write or a wrong plan.
        assert!(p["ops"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["errors"].as_u64(), Some(0), "{p}");
        let l = &p["latency_ms"];
        let q: Vec<f64> = ["p50", "p99", "max"]
            .iter()
            .map(|k| l[k].as_f64().unwrap())
            .collect();
        assert!(q.iter().all(|v| v.is_finite() && *v > 0.0), "{p}");
        assert!(q.windows(2).all(|w| w[0] <= w[1]), "{p}");
        let cpu = &p["cpu_us_per_op"];
        for who in ["server", "client"] {
            let c = cpu[who].as_f64().unwrap();
            assert!(c.is_finite() && c >= 0.0, "{p}");
        }
    }
    assert!(
        v["phases"][0]["cpu_us_per_op"]["server"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(v["bulk_load"]["docs"].as_u64(), Some(500));
}
