//! Reads and writes of end users through the rules: queries see only readable documents, a
//! hidden document answers exactly as a missing one (get, update, delete, insert), refused writes
//! change nothing (also inside `/v1/commit`), field restrictions, admin and service bypass.

use super::*;

async fn seed(s: &Server) {
    admin_put(
        s,
        "notes/a1",
        json!({"owner": "alice", "text": "mine", "n": 1}),
    )
    .await;
    admin_put(
        s,
        "notes/b1",
        json!({"owner": "bob", "text": "bob's", "n": 2}),
    )
    .await;
    admin_put(
        s,
        "notes/b2",
        json!({"owner": "bob", "public": true, "n": 3}),
    )
    .await;
    admin_put(s, "secret/x", json!({"owner": "alice"})).await;
}

#[tokio::test]
async fn reads_see_only_readable_documents_and_hidden_equals_missing() {
    let s = secure().await;
    seed(&s).await;
    let alice = token("alice", 60, json!({}));
    let q = |body: Value| call(&s, &alice, Method::POST, "/v1/query", Some(body));
    let r = q(json!({"collection": "notes", "sort": {"n": 1}}))
        .await
        .ok(200);
    assert_eq!(ids(&r["docs"]), ["a1", "b2"]);
    // The user's filter cannot widen the rule.
    let r = q(
        json!({"collection": "notes", "filter": {"$or": [{"owner": "bob"}, {"n": {"$gte": 0}}]}}),
    )
    .await
    .ok(200);
    assert_eq!(ids(&r["docs"]), ["a1", "b2"]);
    let r = q(json!({"collection": "notes", "sort": {"n": -1}, "skip": 1, "limit": 1}))
        .await
        .ok(200);
    assert_eq!(
        ids(&r["docs"]),
        ["a1"],
        "skip counts readable documents only"
    );
    q(json!({"collection": "notes", "explain": true}))
        .await
        .err(403, "permission_denied");
    q(json!({"collection": "secret"}))
        .await
        .err(403, "permission_denied");
    // A team rule needs a claim the token lacks: denied, not "team == null".
    q(json!({"collection": "teams/t/docs"}))
        .await
        .err(403, "permission_denied");
    // Get: own and public documents; a hidden one is a 404 worded as for a missing one.
    call(&s, &alice, Method::GET, "/v1/docs/notes/a1", None)
        .await
        .ok(200);
    call(&s, &alice, Method::GET, "/v1/docs/notes/b2", None)
        .await
        .ok(200);
    let hidden = call(&s, &alice, Method::GET, "/v1/docs/notes/b1", None).await;
    let missing = call(&s, &alice, Method::GET, "/v1/docs/notes/zz", None).await;
    hidden.err(404, "not_found");
    assert_eq!(
        hidden.text.replace("b1", "ID"),
        missing.text.replace("zz", "ID"),
        "a hidden document reads exactly as a missing one"
    );
    call(&s, &alice, Method::GET, "/v1/docs/secret/x", None)
        .await
        .err(403, "permission_denied");
}

#[tokio::test]
async fn writes_are_checked_on_before_and_after_and_refusals_change_nothing() {
    let s = secure().await;
    seed(&s).await;
    let alice = token("alice", 60, json!({}));
    let paths = ["notes/a1", "notes/b1", "notes/b2", "notes/new", "notes/zz"];
    let snapshot = |s: &Server| {
        let base = s.url("");
        let client = s.client.clone();
        async move {
            let mut out = Vec::new();
            for p in paths {
                let r = client
                    .get(format!("{base}/v1/docs/{p}"))
                    .bearer_auth(ADMIN_KEY)
                    .send()
                    .await
                    .unwrap();
                out.push((r.status().as_u16(), r.text().await.unwrap()));
            }
            let h: Value = client
                .get(format!("{base}/v1/health"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (out, h["seq"].clone())
        }
    };
    let before = snapshot(&s).await;
    let w = |m: Method, p: &'static str, b: Option<Value>| call(&s, &alice, m, p, b);
    // Denied: creating a note for someone else, giving one away, touching bob's public note.
    w(
        Method::PUT,
        "/v1/docs/notes/new",
        Some(json!({"owner": "bob"})),
    )
    .await
    .err(403, "permission_denied");
    w(
        Method::PATCH,
        "/v1/docs/notes/a1",
        Some(json!({"$set": {"owner": "bob"}})),
    )
    .await
    .err(403, "permission_denied");
    w(
        Method::PATCH,
        "/v1/docs/notes/b2",
        Some(json!({"$set": {"n": 9}})),
    )
    .await
    .err(403, "permission_denied");
    w(Method::DELETE, "/v1/docs/notes/b2", None)
        .await
        .err(403, "permission_denied");
    // fields: an unlisted field cannot be set.
    w(
        Method::PATCH,
        "/v1/docs/notes/a1",
        Some(json!({"$set": {"admin": true}})),
    )
    .await
    .err(403, "permission_denied");
    // Hidden documents answer as missing ones: update and delete are 404 alike...
    for (m, body) in [
        (Method::PATCH, Some(json!({"$set": {"n": 5}}))),
        (Method::DELETE, None),
    ] {
        let hidden = w(m.clone(), "/v1/docs/notes/b1", body.clone()).await;
        let missing = w(m, "/v1/docs/notes/zz", body).await;
        hidden.err(404, "not_found");
        assert_eq!(
            hidden.text.replace("b1", "ID"),
            missing.text.replace("zz", "ID")
        );
    }
    // ...and creating over a hidden id is refused like any refused create.
    let over_hidden = w(
        Method::POST,
        "/v1/docs/notes",
        Some(json!({"_id": "b1", "owner": "alice"})),
    )
    .await;
    let refused = w(
        Method::POST,
        "/v1/docs/notes",
        Some(json!({"_id": "zz", "owner": "bob"})),
    )
    .await;
    over_hidden.err(403, "permission_denied");
    assert_eq!(over_hidden.text, refused.text);
    let upsert_hidden = w(
        Method::PUT,
        "/v1/docs/notes/b1",
        Some(json!({"owner": "alice"})),
    )
    .await;
    upsert_hidden.err(403, "permission_denied");
    // A version precondition on a hidden document reports what a missing one reports.
    for (m, body) in [
        (Method::PUT, Some(json!({"owner": "alice"}))),
        (Method::PATCH, Some(json!({"$set": {"n": 5}}))),
        (Method::DELETE, None),
    ] {
        let send = |p: &'static str| {
            let mut rb = s
                .req(m.clone(), p)
                .bearer_auth(&alice)
                .header("if-match", "\"1\"");
            if let Some(b) = &body {
                rb = rb.json(b);
            }
            s.send(rb)
        };
        let hidden = send("/v1/docs/notes/b1").await;
        let missing = send("/v1/docs/notes/zz").await;
        assert!(hidden.status >= 400, "{}", hidden.text);
        assert_eq!(
            hidden.text.replace("b1", "ID"),
            missing.text.replace("zz", "ID"),
            "{m} with If-Match"
        );
    }
    // A commit with one refused write applies nothing.
    let commit = json!({"writes": [
        {"op": "put", "collection": "notes", "id": "new", "doc": {"owner": "alice"}},
        {"op": "update", "collection": "notes", "id": "b2", "update": {"$set": {"n": 0}}}
    ]});
    let e = w(Method::POST, "/v1/commit", Some(commit))
        .await
        .err(403, "permission_denied");
    assert!(
        e["message"].as_str().unwrap().starts_with("write 1:"),
        "{e}"
    );
    assert_eq!(snapshot(&s).await, before, "refused writes changed nothing");
    // Allowed: own create, update, delete, in a commit too.
    w(
        Method::PUT,
        "/v1/docs/notes/new",
        Some(json!({"owner": "alice", "text": "t"})),
    )
    .await
    .ok(200);
    w(
        Method::PATCH,
        "/v1/docs/notes/a1",
        Some(json!({"$inc": {"n": 1}})),
    )
    .await
    .ok(200);
    let commit = json!({"writes": [
        {"op": "update", "collection": "notes", "id": "new", "update": {"$set": {"public": true}}},
        {"op": "delete", "collection": "notes", "id": "a1"}
    ]});
    w(Method::POST, "/v1/commit", Some(commit)).await.ok(200);
    // Admin keys bypass the rules.
    call(&s, ADMIN_KEY, Method::DELETE, "/v1/docs/notes/b1", None)
        .await
        .ok(200);
}
