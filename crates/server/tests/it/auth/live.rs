//! Live queries with credentials: the first-message `auth` and the bearer header, subscriptions
//! filtered by the read rule (positions count readable documents, a document that stops being
//! readable leaves as `remove`), renewal, expiry (`token_expired`, nothing after it), denied
//! subscriptions that leave others alone, SSE with a bearer header, and rule changes.

use super::*;

#[tokio::test]
async fn subscriptions_see_only_readable_documents_with_readable_positions() {
    let s = secure().await;
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 1})).await;
    admin_put(&s, "notes/h", json!({"owner": "bob", "n": 2})).await;
    admin_put(
        &s,
        "notes/p",
        json!({"owner": "bob", "public": true, "n": 3}),
    )
    .await;
    // Before authenticating, only `auth` is accepted.
    let mut ws = ws_with(&s, &[]).await.unwrap();
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
    )
    .await;
    let e = next(&mut ws).await.unwrap();
    assert_eq!(e["code"], "unauthenticated");
    assert!(next(&mut ws).await.is_none(), "closed");
    // A forged or expired token in the first message: an error, then the connection closes.
    let forged = sign(
        Algorithm::HS256,
        &jsonwebtoken::EncodingKey::from_secret(b"not-the-server-secret-0123456789abcdef"),
        &json!({"sub": "alice", "exp": now_s() + 60}),
    );
    for bad in [forged, token("alice", -1, json!({}))] {
        let mut ws = ws_with(&s, &[]).await.unwrap();
        send(&mut ws, json!({"op": "auth", "token": bad})).await;
        assert_eq!(next(&mut ws).await.unwrap()["code"], "unauthenticated");
        assert!(next(&mut ws).await.is_none(), "closed");
    }
    let tok = token("alice", 60, json!({}));
    let mut ws = ws_with(&s, &[]).await.unwrap();
    send(&mut ws, json!({"op": "auth", "token": tok})).await;
    let a = next(&mut ws).await.unwrap();
    assert_eq!(a["type"], "auth");
    assert_eq!(a["uid"], "alice");
    assert!(a["expiresAt"].as_u64().unwrap() > now_s() as u64 * 1000);
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "notes", "sort": {"n": 1}}),
    )
    .await;
    let init = next(&mut ws).await.unwrap();
    assert_eq!(ids(&init["docs"]), ["a", "p"]);
    // A hidden document changing sends nothing; one becoming readable arrives at its readable
    // position; one stopping being readable leaves as remove.
    admin_put(&s, "notes/h", json!({"owner": "bob", "n": 0})).await;
    admin_put(
        &s,
        "notes/h",
        json!({"owner": "bob", "n": 0, "public": true}),
    )
    .await;
    let m = next(&mut ws).await.unwrap();
    assert_eq!(m["type"], "changes", "{m}");
    let c = &m["changes"][0];
    assert_eq!(
        (c["kind"].as_str(), c["id"].as_str(), c["newIndex"].as_i64()),
        (Some("add"), Some("h"), Some(0)),
        "{m}"
    );
    admin_put(&s, "notes/p", json!({"owner": "bob", "n": 3})).await;
    let m = next(&mut ws).await.unwrap();
    let c = &m["changes"][0];
    assert_eq!(
        (c["kind"].as_str(), c["id"].as_str(), c["oldIndex"].as_i64()),
        (Some("remove"), Some("p"), Some(2)),
        "{m}"
    );
    assert!(c.get("doc").is_none());
    // The bearer header works as well, and hides the same documents.
    let mut ws2 = ws_with(
        &s,
        &[(
            "authorization",
            &format!("Bearer {}", token("carol", 60, json!({}))),
        )],
    )
    .await
    .unwrap();
    send(
        &mut ws2,
        json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
    )
    .await;
    let init = next(&mut ws2).await.unwrap();
    assert_eq!(ids(&init["docs"]), ["h"]);
    // A bad bearer header refuses the upgrade.
    assert!(ws_with(&s, &[("authorization", "Bearer nope")])
        .await
        .is_err());
}

#[tokio::test]
async fn a_denied_subscription_does_not_disturb_other_subscribers() {
    let s = secure().await;
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 1})).await;
    let mut alice = ws_auth(&s, &token("alice", 60, json!({}))).await;
    let mut mallory = ws_auth(&s, &token("mallory", 60, json!({}))).await;
    send(
        &mut alice,
        json!({"op": "subscribe", "sub": "ok", "collection": "notes"}),
    )
    .await;
    assert_eq!(next(&mut alice).await.unwrap()["type"], "initial");
    for (sub, coll) in [("denied", "secret"), ("noclaim", "teams/t/docs")] {
        send(
            &mut mallory,
            json!({"op": "subscribe", "sub": sub, "collection": coll}),
        )
        .await;
        let e = next(&mut mallory).await.unwrap();
        assert_eq!(
            (e["sub"].as_str(), e["code"].as_str()),
            (Some(sub), Some("permission_denied"))
        );
        // The same denial on alice's own connection does not end her other subscription.
        send(
            &mut alice,
            json!({"op": "subscribe", "sub": sub, "collection": coll}),
        )
        .await;
        assert_eq!(next(&mut alice).await.unwrap()["code"], "permission_denied");
    }
    send(
        &mut mallory,
        json!({"op": "subscribe", "sub": "bad", "collection": "notes", "filter": {"$bogus": 1}}),
    )
    .await;
    assert_eq!(
        next(&mut mallory).await.unwrap()["code"],
        "unknown_operator"
    );
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 2})).await;
    let m = next(&mut alice).await.unwrap();
    assert_eq!(
        (m["type"].as_str(), m["sub"].as_str()),
        (Some("changes"), Some("ok"))
    );
}

#[tokio::test]
async fn an_expired_token_ends_the_connection_and_a_renewed_one_keeps_it() {
    let clock = herald_db::Clock::manual_at_now();
    let s = secure_on(&clock).await;
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 1})).await;
    let short = token("alice", 2, json!({"plan": "pro"}));
    let mut expiring = ws_auth(&s, &short).await;
    let mut renewed = ws_auth(&s, &short).await;
    for ws in [&mut expiring, &mut renewed] {
        send(
            ws,
            json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
        )
        .await;
        assert_eq!(next(ws).await.unwrap()["type"], "initial");
    }
    // Renewal: same user and claims, later expiry.
    send(
        &mut renewed,
        json!({"op": "auth", "token": token("alice", 60, json!({"plan": "pro"}))}),
    )
    .await;
    let a = next(&mut renewed).await.unwrap();
    assert_eq!(
        (a["type"].as_str(), a["ok"].as_bool()),
        (Some("auth"), Some(true))
    );
    // Past the short token's expiry on the server's clock (no real waiting).
    clock.advance(Duration::from_millis(3100));
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 2})).await;
    let e = next(&mut expiring).await.unwrap();
    assert_eq!(e["code"], "token_expired", "{e}");
    assert!(
        next(&mut expiring).await.is_none(),
        "nothing after the expiry, then closed"
    );
    let m = next(&mut renewed).await.unwrap();
    assert_eq!(
        m["type"], "changes",
        "the renewed connection still delivers: {m}"
    );
    // A renewal for another user (or other claims) closes the connection.
    send(
        &mut renewed,
        json!({"op": "auth", "token": token("bob", 60, json!({"plan": "pro"}))}),
    )
    .await;
    assert_eq!(next(&mut renewed).await.unwrap()["code"], "unauthenticated");
    assert!(next(&mut renewed).await.is_none());
}

#[tokio::test]
async fn server_sent_events_need_a_bearer_and_are_filtered() {
    let s = secure().await;
    admin_put(&s, "notes/a", json!({"owner": "alice", "n": 1})).await;
    admin_put(&s, "notes/h", json!({"owner": "bob", "n": 2})).await;
    let url = s.url("/v1/subscribe?collection=notes");
    let r = s.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = s
        .client
        .get(&url)
        .bearer_auth(token("alice", 60, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut r = r;
    let mut text = String::new();
    while !text.contains("\"initial\"") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), r.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"a\"") && !text.contains("\"h\""), "{text}");
    let r = s
        .client
        .get(s.url("/v1/subscribe?collection=secret"))
        .bearer_auth(token("alice", 60, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn changing_the_rules_closes_end_user_connections() {
    let s = secure().await;
    let mut ws = ws_auth(&s, &token("alice", 60, json!({}))).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
    )
    .await;
    assert_eq!(next(&mut ws).await.unwrap()["type"], "initial");
    let mut admin = ws_with(&s, &[("authorization", &format!("Bearer {ADMIN_KEY}"))])
        .await
        .unwrap();
    send(
        &mut admin,
        json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
    )
    .await;
    assert_eq!(next(&mut admin).await.unwrap()["type"], "initial");
    call(
        &s,
        ADMIN_KEY,
        Method::PUT,
        "/v1/rules",
        Some(json!({"rules": []})),
    )
    .await
    .ok(200);
    assert!(
        next(&mut ws).await.is_none(),
        "the end user's connection closed"
    );
    admin_put(&s, "notes/z", json!({"owner": "x"})).await;
    assert_eq!(
        next(&mut admin).await.unwrap()["type"],
        "changes",
        "keys are unaffected"
    );
}

/// Many connections with tokens expiring at different seconds while writes stream in, on a
/// manual clock the test advances 100 ms after each write: every change a connection receives
/// comes from a write made before its token expired, each ends with `token_expired` and a close
/// and receives nothing after, and those renewed in time keep receiving. In lockstep (each write
/// is awaited on every open connection before the clock moves), so it cannot depend on the
/// machine's speed.
#[tokio::test]
async fn no_connection_receives_data_after_its_token_expires() {
    let clock = herald_db::Clock::manual_at_now();
    let s = secure_on(&clock).await;
    admin_put(&s, "notes/w", json!({"public": true, "n": 0})).await;
    struct Conn {
        ws: Ws,
        /// The token's expiry on the server's clock (ms); `None` once renewed.
        expires_ms: Option<u64>,
        seqs: Vec<u64>,
        expired: bool,
    }
    let mut conns = Vec::new();
    for i in 0..8u64 {
        // 1.2 s or more left, in whole seconds as JWTs have it: 2 to 5 s of clock time.
        let exp = (clock.now_ms() + 1200).div_ceil(1000) + (i % 3);
        let claims = json!({"sub": format!("u{i}"), "exp": exp});
        let tok = sign(
            Algorithm::HS256,
            &jsonwebtoken::EncodingKey::from_secret(SECRET),
            &claims,
        );
        let mut ws = ws_auth(&s, &tok).await;
        send(
            &mut ws,
            json!({"op": "subscribe", "sub": "s", "collection": "notes"}),
        )
        .await;
        assert_eq!(next(&mut ws).await.unwrap()["type"], "initial");
        let renew = i % 4 == 3;
        if renew {
            let tok = token(&format!("u{i}"), 600, json!({}));
            send(&mut ws, json!({"op": "auth", "token": tok})).await;
            assert_eq!(next(&mut ws).await.unwrap()["type"], "auth");
        }
        conns.push(Conn {
            ws,
            expires_ms: (!renew).then_some(exp * 1000),
            seqs: Vec::new(),
            expired: false,
        });
    }
    // 45 writes, 100 ms of clock time apart: past every unrenewed token's expiry.
    for n in 1..=45 {
        let written_ms = clock.now_ms();
        let seq = call(
            &s,
            ADMIN_KEY,
            Method::PUT,
            "/v1/docs/notes/w",
            Some(json!({"public": true, "n": n})),
        )
        .await
        .ok(200)["seq"]
            .as_u64()
            .unwrap();
        for (i, c) in conns.iter_mut().enumerate() {
            if c.expired {
                continue;
            }
            let live = c.expires_ms.is_none_or(|at| written_ms < at);
            loop {
                let Some(m) = next(&mut c.ws).await else {
                    panic!("connection {i} closed without token_expired");
                };
                match m["type"].as_str() {
                    Some("changes") => {
                        assert!(live, "connection {i}: change {m} after its token expired");
                        let got = m["seq"].as_u64().unwrap();
                        c.seqs.push(got);
                        if got >= seq {
                            break;
                        }
                    }
                    Some("error") => {
                        assert_eq!(m["code"], "token_expired", "connection {i}: {m}");
                        assert!(
                            c.expires_ms.is_some(),
                            "a renewed connection does not expire"
                        );
                        assert!(!live, "connection {i} expired early, at {written_ms}");
                        assert!(next(&mut c.ws).await.is_none(), "then it closes");
                        c.expired = true;
                        break;
                    }
                    _ => panic!("connection {i}: unexpected {m}"),
                }
            }
        }
        clock.advance(Duration::from_millis(100));
    }
    for (i, c) in conns.iter().enumerate() {
        assert!(
            !c.seqs.is_empty(),
            "connection {i} received changes before expiring"
        );
        match c.expires_ms {
            Some(_) => assert!(c.expired, "connection {i} was told token_expired"),
            None => assert_eq!(
                c.seqs.len(),
                45,
                "renewed connection {i} received every change"
            ),
        }
    }
}

#[tokio::test]
async fn revoking_a_key_closes_the_live_connections_opened_with_it() {
    let s = secure().await;
    let mk = || {
        call(
            &s,
            ADMIN_KEY,
            Method::POST,
            "/v1/keys",
            Some(json!({"role": "service"})),
        )
    };
    let created = mk().await.ok(201);
    let (id, key) = (
        created["id"].as_str().unwrap().to_string(),
        created["key"].as_str().unwrap().to_string(),
    );
    let other = mk().await.ok(201)["key"].as_str().unwrap().to_string();
    let mut by_header = ws_with(&s, &[("authorization", &format!("Bearer {key}"))])
        .await
        .unwrap();
    let mut by_message = ws_with(&s, &[]).await.unwrap();
    send(&mut by_message, json!({"op": "auth", "token": key})).await;
    let a = next(&mut by_message).await.unwrap();
    assert_eq!((a["ok"].as_bool(), &a["uid"]), (Some(true), &Value::Null));
    let mut unaffected = ws_with(&s, &[("authorization", &format!("Bearer {other}"))])
        .await
        .unwrap();
    for ws in [&mut by_header, &mut by_message, &mut unaffected] {
        send(
            ws,
            json!({"op": "subscribe", "sub": "s", "collection": "secret"}),
        )
        .await;
        assert_eq!(next(ws).await.unwrap()["type"], "initial");
    }
    let mut sse = s
        .client
        .get(s.url("/v1/subscribe?collection=secret"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    call(
        &s,
        ADMIN_KEY,
        Method::DELETE,
        &format!("/v1/keys/{id}"),
        None,
    )
    .await
    .ok(200);
    for ws in [&mut by_header, &mut by_message] {
        assert_eq!(next(ws).await.unwrap()["code"], "unauthenticated");
        assert!(next(ws).await.is_none());
    }
    let mut text = String::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(10), sse.chunk())
        .await
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains("revoked"),
        "the stream ended with the reason: {text}"
    );
    admin_put(&s, "secret/x", json!({"n": 1})).await;
    assert_eq!(next(&mut unaffected).await.unwrap()["type"], "changes");
}

/// WebSocket write requests are for admin and service keys, as `/v1/bulk` is: an end user's is
/// refused and writes nothing; the admin's commits.
#[tokio::test]
async fn websocket_write_requests_need_a_trusted_key() {
    let s = secure().await;
    let put = json!({"op": "put", "collection": "notes", "id": "w", "doc": {"owner": "alice"}});
    let mut alice = ws_auth(&s, &token("alice", 60, json!({}))).await;
    send(
        &mut alice,
        json!({"op": "write", "req": "r1", "writes": [put]}),
    )
    .await;
    let e = next(&mut alice).await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str(), e["req"].as_str()),
        (Some("error"), Some("permission_denied"), Some("r1"))
    );
    call(&s, ADMIN_KEY, Method::GET, "/v1/docs/notes/w", None)
        .await
        .err(404, "not_found");
    let mut admin = ws_with(&s, &[("authorization", &format!("Bearer {ADMIN_KEY}"))])
        .await
        .unwrap();
    send(
        &mut admin,
        json!({"op": "write", "req": "r2", "writes": [put]}),
    )
    .await;
    let w = next(&mut admin).await.unwrap();
    assert_eq!(
        (w["type"].as_str(), w["req"].as_str()),
        (Some("written"), Some("r2"))
    );
    assert_eq!(w["results"][0]["version"], 1);
    call(&s, ADMIN_KEY, Method::GET, "/v1/docs/notes/w", None)
        .await
        .ok(200);
}
