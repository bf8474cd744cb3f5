//! Collection groups over a real socket: `collectionGroup` in `POST /v1/query` (with `_path`,
//! exactly one of `collection`/`collectionGroup`, wildcards refused as `bad_path`), group
//! indexes through `POST /v1/indexes` and `explain`, `POST /v1/aggregate`, and an end user's
//! view: each document visible only under its own collection's read rule, skip, limit and
//! cursors counting visible documents only, over HTTP, a WebSocket and SSE (events name
//! documents by full path).

use super::*;

/// Room messages readable when public or written by the reader; `messages` by everyone;
/// `dms/*/messages` has no rule (hidden from end users).
fn group_rules() -> Value {
    json!({"rules": [
        {"match": "rooms/{room}/messages/{m}",
         "read": {"$or": [{"public": true}, {"author": "$$auth.uid"}]}},
        {"match": "messages/{m}", "read": {}}
    ]})
}

/// A server with [`group_rules`] (also for `live_agg_group.rs`).
pub(super) async fn server() -> Server {
    let auth = AuthOptions {
        rules: Some(herald_rules::Rules::parse(&group_rules()).unwrap()),
        ..options()
    };
    Server::start_auth(tempfile::tempdir().unwrap(), auth).await
}

async fn query(s: &Server, cred: &str, body: Value) -> Resp {
    call(s, cred, Method::POST, "/v1/query", Some(body)).await
}

fn paths(docs: &Value) -> Vec<String> {
    docs.as_array()
        .unwrap()
        .iter()
        .map(|d| d["_path"].as_str().unwrap().to_string())
        .collect()
}

async fn seed(s: &Server) {
    for (path, doc) in [
        ("messages/m1", json!({"author": "bob", "ts": 1})),
        ("rooms/r1/messages/m2", json!({"author": "alice", "ts": 2})),
        ("rooms/r1/messages/m3", json!({"author": "bob", "ts": 3})),
        (
            "rooms/r2/messages/m4",
            json!({"author": "bob", "ts": 4, "public": true}),
        ),
        ("dms/d1/messages/m5", json!({"author": "alice", "ts": 5})),
        ("a/x/b/y/messages/m6", json!({"author": "alice", "ts": 6})),
        ("rooms/r1/other/m7", json!({"author": "alice", "ts": 7})),
    ] {
        admin_put(s, path, doc).await;
    }
}

#[tokio::test]
async fn group_queries_indexes_and_aggregations_over_http() {
    let s = server().await;
    seed(&s).await;
    let all = query(
        &s,
        ADMIN_KEY,
        json!({"collectionGroup": "messages", "sort": {"ts": -1}, "explain": true}),
    )
    .await
    .ok(200);
    assert_eq!(
        paths(&all["docs"]),
        [
            "a/x/b/y/messages/m6",
            "dms/d1/messages/m5",
            "rooms/r2/messages/m4",
            "rooms/r1/messages/m3",
            "rooms/r1/messages/m2",
            "messages/m1"
        ]
    );
    assert_eq!(all["docs"][0]["_id"], "m6");
    assert_eq!(all["explain"]["plan"]["type"], "group_merge", "{all}");
    // Projection keeps `_path`; skip and limit apply to the whole group.
    let page = query(
        &s,
        ADMIN_KEY,
        json!({"collectionGroup": "messages", "filter": {"author": "alice"}, "sort": {"ts": 1},
               "skip": 1, "limit": 1, "projection": {"ts": 1}}),
    )
    .await
    .ok(200);
    assert_eq!(
        page["docs"],
        json!([{"_id": "m5", "ts": 5, "_path": "dms/d1/messages/m5"}])
    );
    // Exactly one of collection and collectionGroup; no wildcards in paths.
    for body in [
        json!({"collection": "messages", "collectionGroup": "messages"}),
        json!({"filter": {}}),
    ] {
        let r = query(&s, ADMIN_KEY, body).await;
        r.err(400, "bad_query");
    }
    let r = query(&s, ADMIN_KEY, json!({"collection": "rooms/*/messages"})).await;
    let e = r.err(400, "bad_path");
    assert!(
        e["message"].as_str().unwrap().contains("collectionGroup"),
        "{e}"
    );
    query(&s, ADMIN_KEY, json!({"collectionGroup": "rooms/r1"}))
        .await
        .err(400, "bad_path");
    // A group index, declared over HTTP, built, listed and used.
    let r = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/indexes",
        Some(json!({"collectionGroup": "messages", "name": "author_ts",
                    "fields": [{"path": "author"}, {"path": "ts", "order": -1}]})),
    )
    .await;
    r.ok(202);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let l = call(
            &s,
            ADMIN_KEY,
            Method::GET,
            "/v1/indexes?collectionGroup=messages",
            None,
        )
        .await
        .ok(200);
        if l["composite"][0]["state"] == "ready" {
            assert_eq!(l["collectionGroup"], "messages");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "index ready: {l}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = query(
        &s,
        ADMIN_KEY,
        json!({"collectionGroup": "messages", "filter": {"author": "alice"},
               "sort": {"ts": -1}, "limit": 2, "explain": true}),
    )
    .await
    .ok(200);
    assert_eq!(
        paths(&r["docs"]),
        ["a/x/b/y/messages/m6", "dms/d1/messages/m5"]
    );
    assert_eq!(r["explain"]["plan"]["type"], "ordered_index", "{r}");
    assert_eq!(r["explain"]["plan"]["index"], "g:author_ts");
    assert!(r["explain"]["keysExamined"].as_u64().unwrap() <= 3, "{r}");
    // Aggregations over the group.
    let r = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collectionGroup": "messages",
                    "pipeline": [{"$group": {"_id": "$author", "n": {"$sum": 1}}},
                                 {"$sort": {"_id": 1}}]})),
    )
    .await
    .ok(200);
    assert_eq!(
        r["docs"],
        json!([{"_id": "alice", "n": 3}, {"_id": "bob", "n": 3}])
    );
    // A count adds up each collection's count of index keys: no document is read.
    let r = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collectionGroup": "messages", "explain": true,
                    "pipeline": [{"$match": {"ts": {"$gte": 2}}}, {"$count": "n"}]})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"n": 5}]), "{r}");
    assert_eq!(r["explain"]["query"]["plan"]["type"], "group_merge", "{r}");
    assert_eq!(r["explain"]["query"]["docsExamined"], 0, "{r}");
    assert_eq!(r["explain"]["stagesInQuery"], 2, "{r}");
    // The newest message across the group, by `$max`.
    let r = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collectionGroup": "messages",
                    "pipeline": [{"$group": {"_id": null, "ts": {"$max": "$ts"}}}]})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"_id": null, "ts": 6}]), "{r}");
    // Dropping the group index: the same answer through the merge.
    let r = call(
        &s,
        ADMIN_KEY,
        Method::DELETE,
        "/v1/indexes/author_ts?collectionGroup=messages",
        None,
    )
    .await
    .ok(200);
    assert_eq!(r["dropped"], true);
    let r = query(
        &s,
        ADMIN_KEY,
        json!({"collectionGroup": "messages", "filter": {"author": "alice"},
               "sort": {"ts": -1}, "limit": 2, "explain": true}),
    )
    .await
    .ok(200);
    assert_eq!(
        paths(&r["docs"]),
        ["a/x/b/y/messages/m6", "dms/d1/messages/m5"]
    );
    assert_eq!(r["explain"]["plan"]["type"], "group_merge", "{r}");
}

#[tokio::test]
async fn an_end_user_sees_each_document_under_its_own_collections_rule() {
    let s = server().await;
    seed(&s).await;
    let alice = token("alice", 60, json!({}));
    // Visible to alice: messages/m1 (open), m2 (hers), m4 (public); not m3 (bob's, private),
    // m5 (dms: no rule), m6 (a/x/b/y/messages: no rule).
    let r = query(
        &s,
        &alice,
        json!({"collectionGroup": "messages", "sort": {"ts": -1}}),
    )
    .await
    .ok(200);
    assert_eq!(
        paths(&r["docs"]),
        [
            "rooms/r2/messages/m4",
            "rooms/r1/messages/m2",
            "messages/m1"
        ]
    );
    // Skip and limit count visible documents only.
    let r = query(
        &s,
        &alice,
        json!({"collectionGroup": "messages", "sort": {"ts": -1}, "skip": 1, "limit": 1}),
    )
    .await
    .ok(200);
    assert_eq!(paths(&r["docs"]), ["rooms/r1/messages/m2"]);
    // A cursor pages the visible documents, also from the position of a hidden one (m3).
    for after in [
        json!([4, "m4", "rooms/r2/messages/m4"]),
        json!([3, "m3", "rooms/r1/messages/m3"]),
    ] {
        let r = query(
            &s,
            &alice,
            json!({"collectionGroup": "messages", "sort": {"ts": -1}, "startAfter": after,
                   "limit": 1}),
        )
        .await
        .ok(200);
        assert_eq!(paths(&r["docs"]), ["rooms/r1/messages/m2"], "{after}");
    }
    query(
        &s,
        &alice,
        json!({"collectionGroup": "messages", "explain": true}),
    )
    .await
    .err(403, "permission_denied");
    let r = call(
        &s,
        &alice,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collectionGroup": "messages", "pipeline": [{"$count": "n"}]})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"n": 3}]));

    // A WebSocket group subscription: the same window; a hidden write sends nothing; a
    // document becoming visible arrives at its visible position, named by its full path.
    let mut ws = ws_with(&s, &[]).await.unwrap();
    send(&mut ws, json!({"op": "auth", "token": alice})).await;
    assert_eq!(next(&mut ws).await.unwrap()["type"], "auth");
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "g", "collectionGroup": "messages",
               "sort": {"ts": -1}, "limit": 2}),
    )
    .await;
    let init = next(&mut ws).await.unwrap();
    assert_eq!(init["type"], "initial", "{init}");
    assert_eq!(
        paths(&init["docs"]),
        ["rooms/r2/messages/m4", "rooms/r1/messages/m2"]
    );
    admin_put(
        &s,
        "dms/d1/messages/m8",
        json!({"author": "alice", "ts": 9}),
    )
    .await;
    admin_put(
        &s,
        "rooms/r1/messages/m3",
        json!({"author": "bob", "ts": 3, "public": true}),
    )
    .await;
    admin_put(
        &s,
        "rooms/r9/messages/m9",
        json!({"author": "alice", "ts": 8}),
    )
    .await;
    // The hidden dms write sends nothing; m3 turning public enters the window at 1.
    let m = next(&mut ws).await.unwrap();
    assert_eq!(m["type"], "changes", "{m}");
    assert!(!m.to_string().contains("dms/"), "{m}");
    let add = m["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "add")
        .unwrap();
    assert_eq!(
        (add["id"].as_str(), add["newIndex"].as_i64()),
        (Some("rooms/r1/messages/m3"), Some(1)),
        "{m}"
    );
    let m = next(&mut ws).await.unwrap();
    let add = m["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "add")
        .unwrap();
    assert_eq!(
        (add["id"].as_str(), add["newIndex"].as_i64()),
        (Some("rooms/r9/messages/m9"), Some(0)),
        "{m}"
    );
    assert_eq!(add["doc"]["_path"], "rooms/r9/messages/m9");
    // Both members at once are refused by name.
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "x", "collection": "messages", "collectionGroup": "messages"}),
    )
    .await;
    let e = next(&mut ws).await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("error"), Some("bad_request")),
        "{e}"
    );
    // Live aggregations over a group: live_agg_group.rs.

    // SSE: the same visible window.
    let mut r = s
        .client
        .get(s.url("/v1/subscribe?collectionGroup=messages&sort=%7B%22ts%22%3A-1%7D&limit=2"))
        .bearer_auth(token("alice", 60, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    while !text.contains("\"initial\"") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), r.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains("rooms/r9/messages/m9")
            && text.contains("rooms/r2/messages/m4")
            && !text.contains("rooms/r1/messages/m3\"")
            && !text.contains("dms/d1"),
        "{text}"
    );
}
