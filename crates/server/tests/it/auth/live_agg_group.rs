//! Live aggregations over a collection group on a real socket: a `pipeline` subscription with
//! `collectionGroup` over the WebSocket and SSE gets the rows `POST /v1/aggregate` returns for
//! the group at the same seq (input documents with `_path`, ids repeated across collections,
//! each collection's read rule applied before aggregation), then per-commit row changes, a
//! resume, and the same refusals as for a collection (`bad_query`, `unsupported_live`).

use super::groups::server;
use super::*;

/// Per author (in input order: `ts`, then `_id`, then `_path`): count and the paths.
fn by_author() -> Value {
    json!([{"$sort": {"ts": 1}},
           {"$group": {"_id": "$author", "c": {"$count": {}}, "paths": {"$push": "$_path"}}}])
}

async fn subscribe(ws: &mut Ws, sub: &str, pipeline: Value, resume_from: Option<u64>) -> Value {
    let mut m = json!({"op": "subscribe", "sub": sub, "collectionGroup": "messages",
                       "pipeline": pipeline});
    if let Some(r) = resume_from {
        m["resumeFrom"] = json!(r);
    }
    send(ws, m).await;
    next(ws).await.unwrap()
}

/// The pull aggregation over the group for `cred`.
async fn pull(s: &Server, cred: &str, pipeline: Value) -> Value {
    call(
        s,
        cred,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collectionGroup": "messages", "pipeline": pipeline})),
    )
    .await
    .ok(200)
}

fn change(m: &Value, i: usize) -> (String, String, i64, i64, Value) {
    let c = &m["changes"][i];
    (
        c["kind"].as_str().unwrap().to_string(),
        c["id"].as_str().unwrap().to_string(),
        c["oldIndex"].as_i64().unwrap(),
        c["newIndex"].as_i64().unwrap(),
        c.get("doc").cloned().unwrap_or(Value::Null),
    )
}

/// Reads an SSE stream into `text` until it holds `what`.
async fn read_until(r: &mut reqwest::Response, text: &mut String, what: &str) {
    while !text.contains(what) {
        let chunk = tokio::time::timeout(Duration::from_secs(5), r.chunk())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn a_live_aggregation_over_a_group_equals_the_pull_one_for_each_reader() {
    let s = server().await;
    for (path, doc) in [
        ("messages/m1", json!({"author": "bob", "ts": 1})),
        ("rooms/r1/messages/m2", json!({"author": "alice", "ts": 2})),
        ("rooms/r1/messages/m3", json!({"author": "bob", "ts": 3})),
        (
            "rooms/r2/messages/m4",
            json!({"author": "bob", "ts": 4, "public": true}),
        ),
        ("dms/d1/messages/m5", json!({"author": "alice", "ts": 5})),
        // The same id as messages/m1, in another collection of the group.
        ("rooms/r2/messages/m1", json!({"author": "alice", "ts": 6})),
        ("rooms/r1/other/m7", json!({"author": "alice", "ts": 7})),
    ] {
        admin_put(&s, path, doc).await;
    }
    let alice = token("alice", 60, json!({}));
    let mut ws = ws_auth(&s, &alice).await;
    let init = subscribe(&mut ws, "g", by_author(), None).await;
    assert_eq!(init["type"], "initial", "{init}");
    // m3 (bob's, private) and the dms are not alice's to read, so not counted.
    assert_eq!(
        init["docs"],
        json!([
            {"_id": "alice", "c": 2, "paths": ["rooms/r1/messages/m2", "rooms/r2/messages/m1"]},
            {"_id": "bob", "c": 2, "paths": ["messages/m1", "rooms/r2/messages/m4"]}
        ])
    );
    let r = pull(&s, &alice, by_author()).await;
    assert_eq!((&r["docs"], &r["seq"]), (&init["docs"], &init["seq"]));
    // An admin's rows count everything; an equal subscription of the admin's is its own view.
    let auth = format!("Bearer {ADMIN_KEY}");
    let mut admin = ws_with(&s, &[("authorization", &auth)]).await.unwrap();
    let all = subscribe(&mut admin, "g", by_author(), None).await;
    assert_eq!(all["docs"], pull(&s, ADMIN_KEY, by_author()).await["docs"]);
    assert_eq!(all["docs"][1]["c"], 3, "{all}");

    // m3 turning public enters alice's bob row, in input order.
    admin_put(
        &s,
        "rooms/r1/messages/m3",
        json!({"author": "bob", "ts": 3, "public": true}),
    )
    .await;
    let m = next(&mut ws).await.unwrap();
    assert_eq!(m["type"], "changes", "{m}");
    let paths = [
        "messages/m1",
        "rooms/r1/messages/m3",
        "rooms/r2/messages/m4",
    ];
    assert_eq!(
        change(&m, 0),
        (
            "change".into(),
            "\"bob\"".into(),
            1,
            1,
            json!({"_id": "bob", "c": 3, "paths": paths})
        )
    );
    // A hidden write reaches the admin's rows only; a visible one in a collection created
    // after the subscription adds a row at its position.
    admin_put(
        &s,
        "dms/d1/messages/m8",
        json!({"author": "carol", "ts": 8}),
    )
    .await;
    admin_put(
        &s,
        "rooms/r9/messages/m9",
        json!({"author": "carol", "ts": 9, "public": true}),
    )
    .await;
    let m = next(&mut ws).await.unwrap();
    let added = json!({"_id": "carol", "c": 1, "paths": ["rooms/r9/messages/m9"]});
    assert_eq!(
        change(&m, 0),
        ("add".into(), "\"carol\"".into(), -1, 2, added),
        "{m}"
    );
    let seen = m["seq"].as_u64().unwrap();
    let r = pull(&s, &alice, by_author()).await;
    assert_eq!(r["seq"].as_u64(), Some(seen));
    assert_eq!(r["docs"][2]["_id"], "carol");
    // The admin's rows did not change with m3 (it was counted already); the dms write adds
    // carol's row for the admin alone.
    let m = next(&mut admin).await.unwrap();
    let dm = json!({"_id": "carol", "c": 1, "paths": ["dms/d1/messages/m8"]});
    assert_eq!(
        change(&m, 0),
        ("add".into(), "\"carol\"".into(), -1, 2, dm),
        "{m}"
    );

    // Resume: a new connection gets exactly the missed change, no initial.
    drop(ws);
    call(
        &s,
        ADMIN_KEY,
        Method::DELETE,
        "/v1/docs/rooms/r2/messages/m1",
        None,
    )
    .await
    .ok(200);
    let mut ws = ws_auth(&s, &alice).await;
    let m = subscribe(&mut ws, "g", by_author(), Some(seen)).await;
    assert_eq!(m["type"], "changes", "{m}");
    assert_eq!(
        change(&m, 0),
        (
            "change".into(),
            "\"alice\"".into(),
            0,
            0,
            json!({"_id": "alice", "c": 1, "paths": ["rooms/r1/messages/m2"]})
        )
    );

    // SSE: a group by `_path` for the same user, with the pipeline as a parameter.
    let spec =
        r#"[{"$match": {"author": "bob"}}, {"$group": {"_id": "$_path", "ts": {"$max": "$ts"}}}]"#;
    let url = s.url(&format!(
        "/v1/subscribe?collectionGroup=messages&pipeline={}",
        urlencode(spec)
    ));
    let mut r = s.client.get(&url).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    read_until(&mut r, &mut text, "initial").await;
    let line = text.lines().find(|l| l.contains("initial")).unwrap();
    let init: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    let want = pull(&s, &alice, serde_json::from_str(spec).unwrap()).await;
    assert_eq!(init["docs"], want["docs"]);
    assert_eq!(
        init["docs"],
        json!([
            {"_id": "messages/m1", "ts": 1},
            {"_id": "rooms/r1/messages/m3", "ts": 3},
            {"_id": "rooms/r2/messages/m4", "ts": 4}
        ])
    );
    // A hidden write sends nothing; a readable one is a row change by its path.
    admin_put(&s, "dms/d2/messages/m4", json!({"author": "bob", "ts": 1})).await;
    admin_put(
        &s,
        "rooms/r2/messages/m4",
        json!({"author": "bob", "ts": 10, "public": true}),
    )
    .await;
    read_until(&mut r, &mut text, "changes").await;
    let line = text.lines().find(|l| l.contains("changes")).unwrap();
    let m: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(
        change(&m, 0),
        (
            "change".into(),
            "\"rooms/r2/messages/m4\"".into(),
            2,
            2,
            json!({"_id": "rooms/r2/messages/m4", "ts": 10})
        ),
        "{text}"
    );
}

#[tokio::test]
async fn group_pipelines_are_refused_as_collection_ones_are() {
    let s = server().await;
    let auth = format!("Bearer {ADMIN_KEY}");
    let mut ws = ws_with(&s, &[("authorization", &auth)]).await.unwrap();
    let cases = [
        (
            json!({"pipeline": by_author(), "filter": {}}),
            "bad_query",
            "not both",
        ),
        (
            json!({"pipeline": [{"$match": {}}]}),
            "unsupported_live",
            "needs a $group or $count",
        ),
        (
            json!({"pipeline": [{"$limit": 1}, {"$group": {"_id": null}}]}),
            "unsupported_live",
            "pipeline.0.$limit",
        ),
        (
            json!({"pipeline": [{"$match": {"_path": "messages/m1"}}, {"$count": "n"}]}),
            "bad_query",
            "_path",
        ),
        (json!({"pipeline": [{"$group": {}}]}), "bad_pipeline", "_id"),
    ];
    for (i, (extra, code, says)) in cases.iter().enumerate() {
        let mut m =
            json!({"op": "subscribe", "sub": format!("s{i}"), "collectionGroup": "messages"});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        send(&mut ws, m).await;
        let e = next(&mut ws).await.unwrap();
        assert_eq!(
            (e["type"].as_str(), e["sub"].as_str(), e["code"].as_str()),
            (Some("error"), Some(format!("s{i}").as_str()), Some(*code)),
            "{e}"
        );
        assert!(e["message"].as_str().unwrap().contains(says), "{e}");
    }
    // The connection stays usable; a resume from an unknown seq is a reset and a fresh
    // initial, as for queries.
    assert_eq!(
        subscribe(&mut ws, "ok", by_author(), None).await["type"],
        "initial"
    );
    let r = subscribe(&mut ws, "again", by_author(), Some(1 << 40)).await;
    assert_eq!(r["type"], "reset", "{r}");
    assert_eq!(next(&mut ws).await.unwrap()["type"], "initial");
    let url = s.url(&format!(
        "/v1/subscribe?collectionGroup=messages&pipeline={}",
        urlencode(r#"[{"$sort": {"ts": 1}}, {"$project": {"ts": 1}}]"#)
    ));
    let r = s
        .client
        .get(&url)
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unsupported_live", "{body}");
}
