//! Cursors on collection-group queries over a real socket: paging a group with `startAfter`
//! from each page's last document (its sort values, `_id` and `_path`) visits every document
//! once although ids repeat across rooms, through the merge of the rooms' plans and through a
//! group index (then reading about a page of index keys); bad group cursors are `bad_query`;
//! live group subscriptions (WebSocket and SSE) hold exactly the documents after the cursor.

use crate::common::ws::{connect, next, send};
use crate::common::Server;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

const ROOMS: usize = 4;
const PER_ROOM: usize = 6;

fn paths(docs: &Value) -> Vec<String> {
    docs.as_array()
        .unwrap()
        .iter()
        .map(|d| d["_path"].as_str().unwrap().to_string())
        .collect()
}

/// Rooms `r0..r3`, each with messages `m0..m5` whose `ts` is their number: every (ts, id)
/// is shared by the four rooms, so only `_path` orders them.
async fn seed(s: &Server) {
    let writes: Vec<Value> = (0..ROOMS * PER_ROOM)
        .map(|i| {
            let (room, m) = (i / PER_ROOM, i % PER_ROOM);
            json!({"op": "put", "collection": format!("rooms/r{room}/messages"),
                   "id": format!("m{m}"), "doc": {"ts": m}})
        })
        .collect();
    s.json(Method::POST, "/v1/commit", &json!({ "writes": writes }))
        .await
        .ok(200);
}

/// Every page of `sort` with `limit` 3, each after the last document of the one before; the
/// plan type of each page and its keys examined.
async fn pages(s: &Server, sort: Value) -> (Vec<String>, Vec<(String, u64)>) {
    let mut after: Option<Value> = None;
    let (mut seen, mut plans) = (Vec::new(), Vec::new());
    loop {
        let mut q =
            json!({"collectionGroup": "messages", "sort": sort, "limit": 3, "explain": true});
        if let Some(a) = &after {
            q["startAfter"] = a.clone();
        }
        let r = s.json(Method::POST, "/v1/query", &q).await.ok(200);
        let Some(last) = r["docs"].as_array().unwrap().last().cloned() else {
            break;
        };
        let e = &r["explain"];
        plans.push((
            e["plan"]["type"].as_str().unwrap().to_string(),
            e["keysExamined"].as_u64().unwrap(),
        ));
        after = Some(json!([last["ts"], last["_id"], last["_path"]]));
        seen.extend(paths(&r["docs"]));
    }
    (seen, plans)
}

#[tokio::test]
async fn paging_a_group_visits_every_document_once() {
    let s = Server::start().await;
    seed(&s).await;
    for sort in [json!({"ts": -1}), json!({"ts": 1, "_id": -1})] {
        let all = s
            .json(
                Method::POST,
                "/v1/query",
                &json!({"collectionGroup": "messages", "sort": sort}),
            )
            .await
            .ok(200);
        let all = paths(&all["docs"]);
        assert_eq!(all.len(), ROOMS * PER_ROOM);
        let (seen, plans) = pages(&s, sort.clone()).await;
        assert_eq!(seen, all, "{sort}");
        assert!(plans.iter().all(|(p, _)| p == "group_merge"), "{plans:?}");
    }
    // `_path` follows `_id`'s direction: ascending here.
    let r = s
        .json(
            Method::POST,
            "/v1/query",
            &json!({"collectionGroup": "messages", "sort": {"ts": -1},
                    "startAt": [4, "m4", "rooms/r2/messages/m4"], "limit": 3}),
        )
        .await
        .ok(200);
    assert_eq!(
        paths(&r["docs"]),
        [
            "rooms/r2/messages/m4",
            "rooms/r3/messages/m4",
            "rooms/r0/messages/m3"
        ]
    );
    // Without the `_path`, a cursor covers the tie in every room.
    let r = s
        .json(
            Method::POST,
            "/v1/query",
            &json!({"collectionGroup": "messages", "sort": {"ts": -1},
                    "startAfter": [4, "m4"], "endAt": [3, "m3", "rooms/r1/messages/m3"]}),
        )
        .await
        .ok(200);
    assert_eq!(
        paths(&r["docs"]),
        ["rooms/r0/messages/m3", "rooms/r1/messages/m3"]
    );

    // A group index: the same pages, each reading its keys and the cursor's tie.
    s.json(
        Method::POST,
        "/v1/indexes",
        &json!({"collectionGroup": "messages", "name": "ts",
                "fields": [{"path": "ts", "order": -1}]}),
    )
    .await
    .ok(202);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let l = s
            .json(
                Method::GET,
                "/v1/indexes?collectionGroup=messages",
                &json!(null),
            )
            .await
            .ok(200);
        if l["composite"][0]["state"] == "ready" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "index ready: {l}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (seen, plans) = pages(&s, json!({"ts": -1})).await;
    let all = s
        .json(
            Method::POST,
            "/v1/query",
            &json!({"collectionGroup": "messages", "sort": {"ts": -1}}),
        )
        .await
        .ok(200);
    assert_eq!(seen, paths(&all["docs"]));
    for (plan, keys) in &plans {
        assert_eq!(plan, "ordered_index", "{plans:?}");
        assert!(*keys <= 3 + ROOMS as u64, "{plans:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn bad_group_cursors_are_bad_query_and_change_nothing() {
    let s = Server::start().await;
    seed(&s).await;
    let seq = s.seq().await;
    for (q, why) in [
        (
            json!({"startAfter": [1, "m1", "rooms/r0/messages/m1", 2]}),
            "then a _path",
        ),
        (json!({"startAfter": [1, "m1", 7]}), "for _path"),
        (json!({"endBefore": [1, "m1", ""]}), "for _path"),
        (json!({"startAt": [1, 5]}), "for _id"),
    ] {
        let mut body = q.clone();
        body["collectionGroup"] = json!("messages");
        body["sort"] = json!({"ts": 1});
        let r = s.json(Method::POST, "/v1/query", &body).await;
        let e = r.err(400, "bad_query");
        assert!(e["message"].as_str().unwrap().contains(why), "{q}: {e}");
    }
    // A collection's cursor still ends at the `_id`.
    let r = s
        .json(
            Method::POST,
            "/v1/query",
            &json!({"collection": "rooms/r0/messages", "sort": {"ts": 1},
                    "startAfter": [1, "m1", "rooms/r0/messages/m1"]}),
        )
        .await;
    r.err(400, "bad_query");
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "bad", "collectionGroup": "messages",
               "startAt": ["m1", 3]}),
    )
    .await;
    let m = next(&mut ws).await;
    assert_eq!(
        (m["type"].as_str(), m["sub"].as_str(), m["code"].as_str()),
        (Some("error"), Some("bad"), Some("bad_query")),
        "{m}"
    );
    assert_eq!(s.seq().await, seq);
    s.stop().await;
}

#[tokio::test]
async fn live_group_subscriptions_start_after_a_path() {
    let s = Server::start().await;
    seed(&s).await;
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "g", "collectionGroup": "messages", "sort": {"ts": -1},
               "startAfter": [4, "m4", "rooms/r1/messages/m4"], "limit": 3}),
    )
    .await;
    let init = next(&mut ws).await;
    assert_eq!(init["type"], "initial", "{init}");
    assert_eq!(
        paths(&init["docs"]),
        [
            "rooms/r2/messages/m4",
            "rooms/r3/messages/m4",
            "rooms/r0/messages/m3"
        ]
    );
    // At the cursor's (ts, _id) but before its path: outside, no event. After it: inside.
    s.put("rooms/a/messages/m4", json!({"ts": 4})).await;
    s.put("rooms/r9/messages/m4", json!({"ts": 4})).await;
    let m = next(&mut ws).await;
    assert_eq!(m["type"], "changes", "{m}");
    let changes = m["changes"].as_array().unwrap();
    assert!(!m.to_string().contains("rooms/a/"), "{m}");
    let add = changes.iter().find(|c| c["kind"] == "add").unwrap();
    assert_eq!(
        (add["id"].as_str(), add["newIndex"].as_i64()),
        (Some("rooms/r9/messages/m4"), Some(2)),
        "{m}"
    );

    // SSE: the same query as URL parameters.
    let url = s.url(
        "/v1/subscribe?collectionGroup=messages&sort=%7B%22ts%22%3A-1%7D&limit=3\
         &startAfter=%5B4%2C%22m4%22%2C%22rooms%2Fr1%2Fmessages%2Fm4%22%5D",
    );
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
    assert_eq!(
        paths(&init["docs"]),
        [
            "rooms/r2/messages/m4",
            "rooms/r3/messages/m4",
            "rooms/r9/messages/m4"
        ]
    );
    drop(resp);
    s.stop().await;
}
