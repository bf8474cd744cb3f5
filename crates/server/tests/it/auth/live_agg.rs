//! Live aggregations on a real socket: a pipeline subscription over the WebSocket and SSE, the
//! initial rows and per-commit changes with the rows' `_id` (as JSON text) as ids, an end user's
//! counts and sums over readable documents only, resume, and the refusals (`bad_query`,
//! `unsupported_live`, the pipeline's own codes).

use super::*;

const BY_OWNER: &str =
    r#"[{"$group": {"_id": "$owner", "c": {"$count": {}}, "s": {"$sum": "$n"}}}]"#;

fn by_owner() -> Value {
    serde_json::from_str(BY_OWNER).unwrap()
}

async fn subscribe(ws: &mut Ws, sub: &str, pipeline: Value, resume_from: Option<u64>) -> Value {
    let mut m = json!({"op": "subscribe", "sub": sub, "collection": "notes", "pipeline": pipeline});
    if let Some(r) = resume_from {
        m["resumeFrom"] = json!(r);
    }
    send(ws, m).await;
    next(ws).await.unwrap()
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

#[tokio::test]
async fn an_end_users_live_counts_and_sums_see_only_readable_documents() {
    let s = secure().await;
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 1})).await;
    admin_put(&s, "notes/b", json!({"owner": "alice", "n": 2})).await;
    admin_put(&s, "notes/h", json!({"owner": "bob", "n": 5})).await;
    admin_put(
        &s,
        "notes/p",
        json!({"owner": "bob", "public": true, "n": 3}),
    )
    .await;
    let mut alice = ws_auth(&s, &token("alice", 60, json!({}))).await;
    let init = subscribe(&mut alice, "g", by_owner(), None).await;
    assert_eq!(init["type"], "initial", "{init}");
    assert_eq!(
        init["docs"],
        json!([{"_id": "alice", "c": 2, "s": 3}, {"_id": "bob", "c": 1, "s": 3}]),
        "bob's hidden note is not counted"
    );
    let auth = format!("Bearer {ADMIN_KEY}");
    let mut admin = ws_with(&s, &[("authorization", &auth)]).await.unwrap();
    let all = subscribe(&mut admin, "g", by_owner(), None).await;
    assert_eq!(
        all["docs"],
        json!([{"_id": "alice", "c": 2, "s": 3}, {"_id": "bob", "c": 2, "s": 8}])
    );
    // A hidden note changing reaches the admin's sum, not alice's.
    admin_put(&s, "notes/h", json!({"owner": "bob", "n": 6})).await;
    let m = next(&mut admin).await.unwrap();
    assert_eq!(
        change(&m, 0),
        (
            "change".into(),
            "\"bob\"".into(),
            1,
            1,
            json!({"_id": "bob", "c": 2, "s": 9})
        )
    );
    // A readable one reaches both, one batch with the commit's seq.
    admin_put(
        &s,
        "notes/q",
        json!({"owner": "bob", "public": true, "n": 1}),
    )
    .await;
    let m = next(&mut alice).await.unwrap();
    assert_eq!(m["type"], "changes", "{m}");
    assert!(m["seq"].as_u64().unwrap() > init["seq"].as_u64().unwrap());
    assert_eq!(
        change(&m, 0),
        (
            "change".into(),
            "\"bob\"".into(),
            1,
            1,
            json!({"_id": "bob", "c": 2, "s": 4})
        )
    );
    assert_eq!(next(&mut admin).await.unwrap()["seq"], m["seq"]);
    // A group whose last document goes disappears (remove at its position).
    for id in ["a", "b"] {
        call(
            &s,
            ADMIN_KEY,
            Method::DELETE,
            &format!("/v1/docs/notes/{id}"),
            None,
        )
        .await
        .ok(200);
    }
    let m = next(&mut alice).await.unwrap();
    assert_eq!(change(&m, 0).0, "change");
    let m = next(&mut alice).await.unwrap();
    let (kind, id, old, new, _) = change(&m, 0);
    assert_eq!(
        (kind.as_str(), id.as_str(), old, new),
        ("remove", "\"alice\"", 0, -1)
    );
    let seen = m["seq"].as_u64().unwrap();
    // Resume: a new connection gets exactly the missed change, no initial.
    drop(alice);
    admin_put(
        &s,
        "notes/r",
        json!({"owner": "carol", "public": true, "n": 7}),
    )
    .await;
    let mut alice = ws_auth(&s, &token("alice", 60, json!({}))).await;
    let m = subscribe(&mut alice, "g", by_owner(), Some(seen)).await;
    assert_eq!(m["type"], "changes", "{m}");
    assert_eq!(
        change(&m, 0),
        (
            "add".into(),
            "\"carol\"".into(),
            -1,
            1,
            json!({"_id": "carol", "c": 1, "s": 7})
        )
    );
    // SSE: the same rows for the same user, with the pipeline as a parameter.
    let url = s.url(&format!(
        "/v1/subscribe?collection=notes&pipeline={}",
        urlencode(r#"[{"$count": "n"}]"#)
    ));
    let mut r = s
        .client
        .get(&url)
        .bearer_auth(token("alice", 60, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    while !text.contains("initial") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(5), r.chunk())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(
        text.contains(r#""docs":[{"n":3}]"#),
        "p, q and r are readable: {text}"
    );
    // A hidden note counts for nobody here; a readable one changes the count row (id "").
    admin_put(&s, "notes/x", json!({"owner": "bob", "n": 1})).await;
    admin_put(&s, "notes/y", json!({"owner": "bob", "public": true})).await;
    while !text.contains("changes") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(5), r.chunk())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let line = text.lines().find(|l| l.contains("changes")).unwrap();
    let m: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(
        change(&m, 0),
        ("change".into(), String::new(), 0, 0, json!({"n": 4})),
        "{text}"
    );
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
async fn pipelines_that_cannot_be_maintained_are_refused_by_stage() {
    let s = secure().await;
    let auth = format!("Bearer {ADMIN_KEY}");
    let mut ws = ws_with(&s, &[("authorization", &auth)]).await.unwrap();
    let cases = [
        (
            json!({"pipeline": by_owner(), "filter": {}}),
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
            json!({"pipeline": [{"$bogus": 1}]}),
            "unknown_operator",
            "$bogus",
        ),
        (json!({"pipeline": [{"$group": {}}]}), "bad_pipeline", "_id"),
    ];
    for (i, (extra, code, says)) in cases.iter().enumerate() {
        let mut m = json!({"op": "subscribe", "sub": format!("s{i}"), "collection": "notes"});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        send(&mut ws, m).await;
        let e = next(&mut ws).await.unwrap();
        assert_eq!(
            (e["type"].as_str(), e["code"].as_str()),
            (Some("error"), Some(*code)),
            "{e}"
        );
        assert!(e["message"].as_str().unwrap().contains(says), "{e}");
    }
    // The connection stays usable.
    assert_eq!(
        subscribe(&mut ws, "ok", by_owner(), None).await["type"],
        "initial"
    );
    // A resume from an unknown seq: reset, then a fresh initial, as for queries.
    let r = subscribe(&mut ws, "again", by_owner(), Some(1 << 40)).await;
    assert_eq!(r["type"], "reset", "{r}");
    assert_eq!(next(&mut ws).await.unwrap()["type"], "initial");
    let url = s.url(&format!(
        "/v1/subscribe?collection=notes&pipeline={}",
        urlencode(r#"[{"$sort": {"n": 1}}, {"$project": {"n": 1}}]"#)
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
