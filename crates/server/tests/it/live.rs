//! Live queries over a real WebSocket and SSE: initial results, add/change/changeIndex/remove
//! with positions, one batch per transaction, bad subscriptions isolated, heartbeats, resume with
//! `resumeFrom` (also across a server restart), and the slow-consumer bound.

use crate::common::ws::{connect, next, send};
use crate::common::{self, Server};
use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

fn ids(docs: &Value) -> Vec<String> {
    docs.as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn changes_arrive_with_kinds_and_positions() {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1})).await;
    s.put("c/b", json!({"n": 3})).await;
    let mut ws = connect(&s).await;
    send(&mut ws, json!({"op": "subscribe", "sub": "s1", "collection": "c", "filter": {"n": {"$gte": 1}}, "sort": {"n": 1}})).await;
    let init = next(&mut ws).await;
    assert_eq!(
        (init["type"].as_str(), init["sub"].as_str()),
        (Some("initial"), Some("s1"))
    );
    assert_eq!(ids(&init["docs"]), ["a", "b"]);
    let s0 = init["seq"].as_u64().unwrap();

    s.put("c/x", json!({"n": 2})).await;
    let m = next(&mut ws).await;
    assert_eq!(m["type"], "changes");
    assert!(m["seq"].as_u64().unwrap() > s0);
    assert_eq!(
        m["changes"],
        json!([{"kind": "add", "id": "x", "doc": {"_id": "x", "n": 2}, "oldIndex": -1, "newIndex": 1}])
    );

    s.json(Method::PATCH, "/v1/docs/c/x", &json!({"$set": {"n": 9}}))
        .await
        .ok(200);
    let m = next(&mut ws).await;
    assert_eq!(
        m["changes"],
        json!([{"kind": "changeIndex", "id": "x", "doc": {"_id": "x", "n": 9}, "oldIndex": 1, "newIndex": 2}])
    );

    s.json(Method::PATCH, "/v1/docs/c/a", &json!({"$set": {"t": "y"}}))
        .await
        .ok(200);
    let m = next(&mut ws).await;
    assert_eq!(
        m["changes"],
        json!([{"kind": "change", "id": "a", "doc": {"_id": "a", "n": 1, "t": "y"}, "oldIndex": 0, "newIndex": 0}])
    );

    s.req(Method::DELETE, "/v1/docs/c/b").send().await.unwrap();
    let m = next(&mut ws).await;
    assert_eq!(
        m["changes"],
        json!([{"kind": "remove", "id": "b", "oldIndex": 1, "newIndex": -1}])
    );

    // A document that stops matching leaves as a remove.
    s.json(Method::PATCH, "/v1/docs/c/a", &json!({"$set": {"n": 0}}))
        .await
        .ok(200);
    let m = next(&mut ws).await;
    assert_eq!(
        m["changes"],
        json!([{"kind": "remove", "id": "a", "oldIndex": 0, "newIndex": -1}])
    );
    s.stop().await;
}

#[tokio::test]
async fn a_transaction_arrives_as_one_batch_and_windows_shift() {
    let s = Server::start().await;
    for (i, n) in [5, 4, 3, 2, 1].iter().enumerate() {
        s.put(&format!("c/d{i}"), json!({"n": n})).await;
    }
    let mut ws = connect(&s).await;
    // Window [1, 3) of the result sorted by n descending: n = 4, 3.
    send(&mut ws, json!({"op": "subscribe", "sub": "top", "collection": "c", "sort": {"n": -1}, "skip": 1, "limit": 2})).await;
    let init = next(&mut ws).await;
    assert_eq!(ids(&init["docs"]), ["d1", "d2"]);
    let writes = json!({"writes": [
        {"op": "put", "collection": "c", "id": "big", "doc": {"n": 10}},
        {"op": "delete", "collection": "c", "id": "d2"}
    ]});
    let out = s.json(Method::POST, "/v1/commit", &writes).await.ok(200);
    let m = next(&mut ws).await;
    assert_eq!(m["seq"], out["seq"], "one batch carrying the commit's seq");
    // New order: 10, 5, 4, 2, 1 -> window [5, 4] = d0, d1.
    let mut list = ids(&init["docs"]);
    for c in m["changes"].as_array().unwrap() {
        if c["oldIndex"].as_i64().unwrap() >= 0 {
            list.remove(c["oldIndex"].as_u64().unwrap() as usize);
        }
        if c["newIndex"].as_i64().unwrap() >= 0 {
            list.insert(
                c["newIndex"].as_u64().unwrap() as usize,
                c["id"].as_str().unwrap().to_string(),
            );
        }
    }
    assert_eq!(list, ["d0", "d1"]);
    s.stop().await;
}

#[tokio::test]
async fn bad_subscriptions_fail_alone_and_heartbeats_carry_the_seq() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "bad", "collection": "c", "filter": {"a": {"$where": 1}}}),
    )
    .await;
    let e = next(&mut ws).await;
    assert_eq!(
        (e["type"].as_str(), e["sub"].as_str(), e["code"].as_str()),
        (Some("error"), Some("bad"), Some("unknown_operator"))
    );
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "ok", "collection": "c"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "initial");
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "ok", "collection": "c"}),
    )
    .await;
    assert_eq!(
        next(&mut ws).await["code"],
        "bad_request",
        "duplicate sub ids are refused"
    );
    ws.send(Message::Text("not json".into())).await.unwrap();
    assert_eq!(next(&mut ws).await["code"], "bad_json");
    s.put("c/a", json!({})).await;
    assert_eq!(
        next(&mut ws).await["sub"],
        "ok",
        "the good subscription still works"
    );
    // Idle: a heartbeat with the current seq arrives within about a second.
    let seq = s.seq().await;
    let hb = loop {
        let m = tokio::time::timeout(Duration::from_secs(3), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["type"] == "heartbeat" {
                break v;
            }
        }
    };
    assert_eq!(hb["seq"].as_u64(), Some(seq));
    send(&mut ws, json!({"op": "unsubscribe", "sub": "ok"})).await;
    s.stop().await;
}

#[tokio::test]
async fn resume_delivers_exactly_the_missed_changes_even_after_a_restart() {
    let s = Server::start_with(herald_db::DbOptions::default()).await;
    s.put("c/a", json!({"n": 1})).await;
    let mut ws = connect(&s).await;
    let sub = json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"n": 1}});
    send(&mut ws, sub.clone()).await;
    let init = next(&mut ws).await;
    let seen = init["seq"].as_u64().unwrap();
    drop(ws);
    s.put("c/b", json!({"n": 2})).await;
    s.req(Method::DELETE, "/v1/docs/c/a").send().await.unwrap();
    // Restart the server on the same data: the commit log carries the history.
    let dir = s.stop().await;
    let s = Server::start_in(dir, herald_db::DbOptions::default()).await;
    let mut ws = connect(&s).await;
    let mut resume = sub.clone();
    resume["resumeFrom"] = json!(seen);
    send(&mut ws, resume).await;
    let m1 = next(&mut ws).await;
    assert_eq!(
        (m1["type"].as_str(), m1["seq"].as_u64()),
        (Some("changes"), Some(seen + 1))
    );
    assert_eq!(m1["changes"][0]["kind"], "add");
    let m2 = next(&mut ws).await;
    assert_eq!(
        (m2["seq"].as_u64(), m2["changes"][0]["kind"].as_str()),
        (Some(seen + 2), Some("remove"))
    );
    // A seq the log does not know (from the future) gets a reset and a fresh initial.
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "t", "collection": "c", "resumeFrom": 999_999}),
    )
    .await;
    let reset = next(&mut ws).await;
    assert_eq!(reset["type"], "reset");
    assert!(
        reset["reason"].as_str().unwrap().contains("unknown here"),
        "{reset}"
    );
    let fresh = next(&mut ws).await;
    assert_eq!(
        (fresh["type"].as_str(), ids(&fresh["docs"])),
        (Some("initial"), vec!["b".to_string()])
    );
    s.stop().await;
}

/// Resuming a sorted, limited subscription after more changes than a query may return (the
/// engine rebuilds the old result by undoing them) gets a reset and a fresh result, not an
/// error: seen when RockBench's live evaluator was closed as a slow consumer at 14,000 ev/s and
/// its resume, 2 s later, failed with `limit_exceeded`.
#[tokio::test]
async fn resuming_after_more_changes_than_a_query_may_return_resets() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    let sub =
        json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"n": -1}, "limit": 1});
    send(&mut ws, sub.clone()).await;
    let init = next(&mut ws).await;
    assert_eq!(init["type"], "initial");
    let seen = init["seq"].as_u64().unwrap();
    drop(ws);
    let n = herald_db::QUERY_DOCS_MAX + 10;
    let (mut ws, reset) = put_then_resume(&s, n, &sub, seen).await;
    assert_eq!(reset["type"], "reset", "{reset}");
    assert!(
        reset["reason"].as_str().unwrap().contains("QUERY_DOCS_MAX"),
        "{reset}"
    );
    let fresh = next(&mut ws).await;
    assert_eq!(
        (fresh["type"].as_str(), ids(&fresh["docs"])),
        (Some("initial"), vec![format!("d{}", n - 1)])
    );
    // And it is live from there.
    s.put("c/top", json!({"n": n})).await;
    let m = next(&mut ws).await;
    assert_eq!(m["type"], "changes", "{m}");
    s.stop().await;
}

/// Reads SSE frames until one whose data satisfies `want`; returns (id, data).
async fn sse_until(
    resp: &mut reqwest::Response,
    buf: &mut String,
    want: impl Fn(&Value) -> bool,
) -> (Option<u64>, Value) {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                }
                if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str::<Value>(v).ok();
                }
            }
            if let Some(d) = data.filter(|d| want(d)) {
                return (id, d);
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .expect("stream open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[tokio::test]
async fn server_sent_events_carry_the_same_payloads_with_seq_ids() {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1})).await;
    let url = s.url("/v1/subscribe?collection=c&filter=%7B%22n%22%3A%7B%22%24gte%22%3A1%7D%7D");
    let mut resp = s.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut buf = String::new();
    let (id, init) = sse_until(&mut resp, &mut buf, |d| d["type"] == "initial").await;
    assert_eq!(id, init["seq"].as_u64(), "the event id is the seq");
    let out = s.put("c/b", json!({"n": 2})).await;
    let seq = out["seq"].as_u64().unwrap();
    let (id, ch) = sse_until(&mut resp, &mut buf, |d| {
        d["type"] == "changes" && d["seq"].as_u64() == Some(seq)
    })
    .await;
    assert_eq!(
        (id, ch["changes"][0]["id"].as_str()),
        (Some(seq), Some("b"))
    );
    drop(resp);
    // Reconnecting with Last-Event-ID resumes: the missed change arrives, no initial.
    s.put("c/z", json!({"n": 3})).await;
    let mut resp = s
        .client
        .get(&url)
        .header("last-event-id", seq.to_string())
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    let (_, m) = sse_until(&mut resp, &mut buf, |d| d["type"] != "heartbeat").await;
    assert_eq!(
        (m["type"].as_str(), m["changes"][0]["id"].as_str()),
        (Some("changes"), Some("z"))
    );
    let bad = s
        .client
        .get(s.url("/v1/subscribe?collection=c&filter=%7Bx"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    drop(resp);
    s.stop().await;
}

#[tokio::test]
async fn a_slow_consumer_is_disconnected_not_buffered() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"n": -1}, "limit": 1}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "initial");
    // Stop reading; every write changes the window, so messages pile up past the queue bound.
    let big = "x".repeat(2000);
    let mut body = String::new();
    for i in 0..9000 {
        body.push_str(&json!({"op": "put", "collection": "c", "id": format!("d{i}"), "doc": {"n": i, "pad": big}}).to_string());
        body.push('\n');
    }
    let out = s.json_raw_bulk(&body).await;
    assert_eq!(out["applied"], 9000);
    // Reading now drains what was buffered and ends with a close frame giving the reason.
    let mut closed = None;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        match m {
            Ok(Message::Close(frame)) => {
                closed = frame.map(|f| f.reason.to_string());
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let reason = closed.expect("the server closed the connection");
    assert!(reason.contains("slow consumer"), "{reason}");
    s.stop().await;
}

/// Resuming from a seq the commit log has pruned (and the in-memory feed no longer holds) gets a
/// reset that says so, then a fresh result that is live.
#[tokio::test]
async fn resuming_past_the_retained_log_resets_and_says_why() {
    let s = Server::start_with(herald_db::DbOptions {
        log_retention_count: 5,
        ..common::nosync()
    })
    .await;
    let mut ws = connect(&s).await;
    let sub = json!({"op": "subscribe", "sub": "s", "collection": "c"});
    send(&mut ws, sub.clone()).await;
    let init = next(&mut ws).await;
    assert_eq!(init["type"], "initial");
    let seen = init["seq"].as_u64().unwrap();
    drop(ws);
    // More commits than the feed's ring holds, so the resume must read the (pruned) log.
    let n = herald_db::live::FEED_RING_MAX + 100;
    let (mut ws, reset) = put_then_resume(&s, n, &sub, seen).await;
    assert_eq!(reset["type"], "reset", "{reset}");
    assert!(
        reset["reason"]
            .as_str()
            .unwrap()
            .contains("no longer reaches back"),
        "{reset}"
    );
    let fresh = next(&mut ws).await;
    assert_eq!(fresh["type"], "initial", "{fresh}");
    assert_eq!(fresh["docs"].as_array().unwrap().len(), n);
    s.put("c/late", json!({"n": -1})).await;
    let m = next(&mut ws).await;
    assert_eq!(m["type"], "changes", "{m}");
    s.stop().await;
}

/// Puts `n` documents `d0..` into `c` (one commit each, through `/v1/bulk`), then reconnects and
/// resumes `sub` from `seen`; returns the connection and the first message it gets.
async fn put_then_resume(s: &Server, n: usize, sub: &Value, seen: u64) -> (common::ws::Ws, Value) {
    let mut body = String::new();
    for i in 0..n {
        body.push_str(
            &json!({"op": "put", "collection": "c", "id": format!("d{i}"), "doc": {"n": i}})
                .to_string(),
        );
        body.push('\n');
    }
    assert_eq!(s.json_raw_bulk(&body).await["applied"], n);
    let mut ws = connect(s).await;
    let mut resume = sub.clone();
    resume["resumeFrom"] = json!(seen);
    send(&mut ws, resume).await;
    let first = next(&mut ws).await;
    (ws, first)
}
