//! High-rate ingestion against a real server on a real socket: write requests over the
//! WebSocket (non-atomic and atomic, per-write errors, malformed requests changing nothing,
//! replies in order past the in-flight bound, keyed `$inc` upserts, writes and a subscription
//! on one connection). The short benchmark runs whose numbers must be sane are in
//! `crates/bench/tests`.

use crate::common::ws::{connect, next, send};
use crate::common::Server;
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
