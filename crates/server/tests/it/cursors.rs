//! Query cursors (`startAt`/`startAfter`/`endAt`/`endBefore`) over a real socket: paging a
//! sorted collection with `startAfter` reads about one index key per result however deep the
//! page (explain's keysExamined), bad cursors are `bad_query` and change nothing, and live
//! subscriptions (WebSocket and SSE) add and remove documents as their sort keys cross the
//! cursor.

use crate::common::ws::{connect, next, send};
use crate::common::Server;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

fn ids(docs: &Value) -> Vec<String> {
    docs.as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect()
}

/// `n` messages `m000..`, `ts` = 10 * i, in one room; three of them share `ts` 500.
async fn seed(s: &Server, n: usize) {
    let writes: Vec<Value> = (0..n)
        .map(|i| {
            let ts = if (50..53).contains(&i) { 500 } else { 10 * i };
            json!({"op": "put", "collection": "msgs", "id": format!("m{i:03}"), "doc": {"room": "r1", "ts": ts}})
        })
        .collect();
    for chunk in writes.chunks(100) {
        s.json(Method::POST, "/v1/commit", &json!({ "writes": chunk }))
            .await
            .ok(200);
    }
}

/// Applies change events to a subscriber's list of ids, as a client does.
fn apply(list: &mut Vec<String>, changes: &Value) {
    for c in changes.as_array().unwrap() {
        let old = c["oldIndex"].as_i64().unwrap();
        let new = c["newIndex"].as_i64().unwrap();
        if old >= 0 {
            list.remove(old as usize);
        }
        if new >= 0 {
            list.insert(new as usize, c["id"].as_str().unwrap().to_string());
        }
    }
}

#[tokio::test]
async fn pages_after_the_last_document_read_about_one_key_per_result() {
    let s = Server::start().await;
    seed(&s, 300).await;
    let mut after: Option<Value> = None;
    let mut seen: Vec<(i64, String)> = Vec::new();
    let mut pages = 0;
    loop {
        let mut q = json!({"collection": "msgs", "sort": {"ts": -1}, "limit": 25, "explain": true});
        if let Some(a) = &after {
            q["startAfter"] = a.clone();
        }
        let r = s.json(Method::POST, "/v1/query", &q).await.ok(200);
        let e = &r["explain"];
        assert_eq!(e["plan"]["type"], "ordered_index", "{q} {e}");
        // The page's keys, the cursor's own entry, and the entry that ends the last tie run.
        assert!(
            e["keysExamined"].as_u64().unwrap() <= 27,
            "page {pages} examined more than its keys: {q} {e}"
        );
        let docs = r["docs"].as_array().unwrap();
        let Some(last) = docs.last() else { break };
        after = Some(json!([last["ts"], last["_id"]]));
        seen.extend(docs.iter().map(|d| {
            (
                d["ts"].as_i64().unwrap(),
                d["_id"].as_str().unwrap().to_string(),
            )
        }));
        pages += 1;
    }
    assert_eq!(pages, 12);
    // Every document once, newest first, ties (the three at 500) in id order.
    let mut want: Vec<(i64, String)> = (0..300)
        .map(|i| {
            let ts = if (50..53).contains(&i) { 500 } else { 10 * i };
            (ts as i64, format!("m{i:03}"))
        })
        .collect();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    assert_eq!(seen, want);

    // The page boundary inside the tie group: after (500, m050) come m051, m052, then 490.
    let r = s
        .query(json!({"collection": "msgs", "sort": {"ts": -1}, "startAfter": [500, "m050"], "limit": 3}))
        .await;
    assert_eq!(ids(&r["docs"]), ["m051", "m052", "m049"]);
    // Without the id, startAfter skips the whole group; endAt includes it.
    let r = s
        .query(
            json!({"collection": "msgs", "sort": {"ts": -1}, "startAfter": [510], "endAt": [500]}),
        )
        .await;
    assert_eq!(ids(&r["docs"]), ["m050", "m051", "m052"]);
    s.stop().await;
}

#[tokio::test]
async fn bad_cursors_are_bad_query_and_change_nothing() {
    let s = Server::start().await;
    seed(&s, 3).await;
    let seq = s.seq().await;
    for (q, why) in [
        (json!({"sort": {"ts": 1}, "startAt": 5}), "must be an array"),
        (
            json!({"sort": {"ts": 1}, "startAt": []}),
            "at least one value",
        ),
        (
            json!({"sort": {"ts": 1}, "startAfter": [1, "m1", 2]}),
            "at most one value per sort field",
        ),
        (
            json!({"sort": {"ts": 1}, "startAfter": [1, 2]}),
            "document id",
        ),
        (
            json!({"sort": {"ts": 1}, "startAt": [1], "startAfter": [1]}),
            "cannot both be given",
        ),
    ] {
        let mut body = q.clone();
        body["collection"] = json!("msgs");
        let r = s.json(Method::POST, "/v1/query", &body).await;
        let e = r.err(400, "bad_query");
        assert!(e["message"].as_str().unwrap().contains(why), "{q}: {e}");
    }
    // The same on a subscription: an error for that subscription only.
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "bad", "collection": "msgs", "startAt": [3]}),
    )
    .await;
    let m = next(&mut ws).await;
    assert_eq!(
        (m["type"].as_str(), m["sub"].as_str()),
        (Some("error"), Some("bad")),
        "{m}"
    );
    assert_eq!(m["code"], "bad_query", "{m}");
    let sse = s
        .client
        .get(s.url("/v1/subscribe?collection=msgs&startAt=%5B3%5D"))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status().as_u16(), 400);
    assert_eq!(s.seq().await, seq);
    s.stop().await;
}

#[tokio::test]
async fn live_results_follow_sort_keys_across_the_cursor() {
    let s = Server::start().await;
    for i in 1..=10 {
        s.put(&format!("c/d{i:02}"), json!({"ts": 10 * i})).await;
    }
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"ts": -1}, "startAfter": [50], "limit": 3}),
    )
    .await;
    let init = next(&mut ws).await;
    assert_eq!(init["type"], "initial", "{init}");
    assert_eq!(ids(&init["docs"]), ["d04", "d03", "d02"]);

    // Below the cursor: enters the window (and pushes d02 out of it).
    let mut list = ids(&init["docs"]);
    s.put("c/x", json!({"ts": 45})).await;
    let m = next(&mut ws).await;
    apply(&mut list, &m["changes"]);
    assert_eq!(list, ["x", "d04", "d03"], "{m}");
    // Before the cursor: nothing. Then x crosses the cursor and leaves; d02 comes back.
    s.put("c/y", json!({"ts": 60})).await;
    s.json(Method::PATCH, "/v1/docs/c/x", &json!({"$set": {"ts": 55}}))
        .await
        .ok(200);
    let m = next(&mut ws).await;
    let touched: Vec<&str> = m["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(!touched.contains(&"y"), "{m}");
    apply(&mut list, &m["changes"]);
    assert_eq!(list, ["d04", "d03", "d02"], "{m}");
    // Back below the cursor: it enters again.
    s.json(Method::PATCH, "/v1/docs/c/x", &json!({"$set": {"ts": 35}}))
        .await
        .ok(200);
    let m = next(&mut ws).await;
    apply(&mut list, &m["changes"]);
    assert_eq!(list, ["d04", "x", "d03"], "{m}");

    // SSE: the same query as URL parameters.
    let url =
        s.url("/v1/subscribe?collection=c&sort=%7B%22ts%22%3A-1%7D&startAfter=%5B50%5D&limit=3");
    let mut resp = s.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut buf = String::new();
    let init = loop {
        if let Some(start) = buf.find("data: ") {
            if let Some(end) = buf[start..].find('\n') {
                let v: Value = serde_json::from_str(&buf[start + 6..start + end]).unwrap();
                if v["type"] == "initial" {
                    break v;
                }
                buf.drain(..start + end);
                continue;
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(20), resp.chunk())
            .await
            .expect("an event within 20 s")
            .unwrap()
            .expect("stream open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    };
    assert_eq!(ids(&init["docs"]), ["d04", "x", "d03"]);
    drop(resp);
    s.stop().await;
}
