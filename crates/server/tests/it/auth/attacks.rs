//! The attack list of docs/security.md, one test each (expired and forged tokens are in
//! `http.rs`, slow consumers in `tests/live.rs`), and the binary: public listening with
//! authentication, `herald keys`, `herald rules test`.

use super::*;
use common::Herald;

#[tokio::test]
async fn operator_injection_through_auth_values_is_data() {
    let s = secure().await;
    admin_put(&s, "teams/t/docs/d1", json!({"team": "red"})).await;
    admin_put(&s, "teams/t/docs/d2", json!({"team": "blue"})).await;
    admin_put(&s, "notes/n1", json!({"owner": "$$auth.claims.team"})).await;
    admin_put(&s, "notes/n2", json!({"owner": "bob"})).await;
    // A claim that is an operator object compares as a literal object: nothing matches.
    let inj = token("mallory", 60, json!({"team": {"$ne": null}}));
    let r = call(
        &s,
        &inj,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "teams/t/docs"})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([]));
    let inj = token("mallory", 60, json!({"team": {"$in": ["red", "blue"]}}));
    let r = call(
        &s,
        &inj,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "teams/t/docs"})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([]));
    // A uid that looks like a placeholder is not substituted again.
    let sneaky = token("$$auth.claims.team", 60, json!({"team": "bob"}));
    let r = call(
        &s,
        &sneaky,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes"})),
    )
    .await
    .ok(200);
    assert_eq!(ids(&r["docs"]), ["n1"]);
    // Placeholders in a user's own filter are plain strings.
    let bob = token("bob", 60, json!({}));
    let r = call(
        &s,
        &bob,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes", "filter": {"owner": "$$auth.uid"}})),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([]));
    // `$where` and other server-side code do not exist.
    call(
        &s,
        &bob,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes", "filter": {"$where": "true"}})),
    )
    .await
    .err(400, "unknown_operator");
}

#[tokio::test]
async fn oversized_and_deeply_nested_input_is_refused() {
    let s = secure().await;
    let alice = token("alice", 60, json!({}));
    let big = "x".repeat(3 << 20);
    let r = s
        .send(
            s.req(Method::PUT, "/v1/docs/notes/n")
                .bearer_auth(&alice)
                .body(format!("{{\"owner\":\"alice\",\"t\":\"{big}\"}}")),
        )
        .await;
    r.err(413, "body_too_large");
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!({"a": deep});
    }
    call(
        &s,
        &alice,
        Method::PUT,
        "/v1/docs/notes/n",
        Some(json!({"owner": "alice", "d": deep})),
    )
    .await
    .err(400, "document_too_deep");
    let r = s
        .send(
            s.req(Method::PUT, "/v1/rules")
                .bearer_auth(ADMIN_KEY)
                .body(format!("{{\"rules\":[],\"x\":\"{big}\"}}")),
        )
        .await;
    r.err(413, "body_too_large");
    // A huge bearer token is refused before any decoding.
    let huge = format!("{}.{}.{}", "a".repeat(10_000), "b".repeat(10_000), "c");
    call(&s, &huge, Method::GET, "/v1/docs/notes/n", None)
        .await
        .err(401, "unauthenticated");
    // A WebSocket message over the limit ends the connection, with an error that says why.
    let mut ws = ws_auth(&s, &alice).await;
    let msg = json!({"op": "subscribe", "sub": "s", "collection": "notes", "filter": {"t": "x".repeat(300 << 10)}});
    let _ = ws.send(Message::Text(msg.to_string().into())).await;
    assert_eq!(next(&mut ws).await.unwrap()["code"], "message_too_large");
    assert!(next(&mut ws).await.is_none(), "closed");
    // Deeply nested filters are refused by the query core.
    let mut f = json!({"n": 1});
    for _ in 0..200 {
        f = json!({"$and": [f]});
    }
    let r = call(
        &s,
        &alice,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes", "filter": f})),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
}

#[tokio::test]
async fn catastrophic_regexes_run_in_linear_time_or_are_refused() {
    let s = secure().await;
    admin_put(
        &s,
        "notes/n",
        json!({"public": true, "text": format!("{}!", "a".repeat(100_000))}),
    )
    .await;
    let alice = token("alice", 60, json!({}));
    let t = std::time::Instant::now();
    for re in ["^(a+)+$", "(a|aa)+$", "(a*)*b", "(.*a){20}"] {
        let r = call(
            &s,
            &alice,
            Method::POST,
            "/v1/query",
            Some(json!({"collection": "notes", "filter": {"text": {"$regex": re}}})),
        )
        .await;
        assert!(
            r.status == 200 || r.code() == Some("bad_regex"),
            "{re}: {}",
            r.text
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "regexes took {:?}",
        t.elapsed()
    );
    for re in ["(?=a)a", "(a)\\1"] {
        call(
            &s,
            &alice,
            Method::POST,
            "/v1/query",
            Some(json!({"collection": "notes", "filter": {"text": {"$regex": re}}})),
        )
        .await
        .err(400, "unsupported_regex");
    }
}

#[tokio::test]
async fn subscription_and_message_floods_are_bounded() {
    let s = secure().await;
    let mut ws = ws_auth(&s, &token("alice", 60, json!({}))).await;
    for i in 0..256 {
        send(&mut ws, json!({"op": "subscribe", "sub": format!("s{i}"), "collection": "notes", "filter": {"n": i}})).await;
    }
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "one-too-many", "collection": "notes"}),
    )
    .await;
    loop {
        let m = next(&mut ws).await.unwrap();
        if m["type"] == "error" {
            assert_eq!(
                (m["sub"].as_str(), m["code"].as_str()),
                (Some("one-too-many"), Some("limit_exceeded"))
            );
            break;
        }
    }
    // A burst beyond the message rate limit closes the connection.
    let mut ws = ws_auth(&s, &token("alice", 60, json!({}))).await;
    let bad = Message::Text(
        json!({"op": "unsubscribe", "sub": "none"})
            .to_string()
            .into(),
    );
    let mut closed_by_server = false;
    for _ in 0..1500 {
        if ws.send(bad.clone()).await.is_err() {
            closed_by_server = true;
            break;
        }
    }
    let mut saw_limit = false;
    while let Some(m) = next(&mut ws).await {
        if m["code"] == "rate_limited" {
            saw_limit = true;
        }
    }
    assert!(saw_limit || closed_by_server, "the flood was cut off");
    assert!(saw_limit, "the client was told why");
}

#[tokio::test]
async fn a_wrong_origin_is_refused() {
    let mut opts = options();
    opts.allowed_origins = Some(vec!["https://app.example".into()]);
    let s = Server::start_auth(tempfile::tempdir().unwrap(), opts).await;
    let tok = token("alice", 60, json!({}));
    let bearer = format!("Bearer {tok}");
    let err = ws_with(
        &s,
        &[
            ("origin", "https://evil.example"),
            ("authorization", &bearer),
        ],
    )
    .await;
    match err {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        other => panic!("expected a 403, got {other:?}"),
    }
    ws_with(
        &s,
        &[
            ("origin", "https://app.example"),
            ("authorization", &bearer),
        ],
    )
    .await
    .unwrap();
    ws_with(&s, &[("authorization", &bearer)]).await.unwrap();
    let r = s
        .client
        .get(s.url("/v1/subscribe?collection=notes"))
        .bearer_auth(&tok)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn proto_keys_are_plain_data() {
    let s = secure().await;
    let doc = json!({"__proto__": {"owner": "alice", "public": true}, "owner": "bob", "constructor": {"prototype": 1}});
    admin_put(&s, "notes/p", doc).await;
    let alice = token("alice", 60, json!({}));
    let r = call(
        &s,
        &alice,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes"})),
    )
    .await
    .ok(200);
    assert_eq!(
        r["docs"],
        json!([]),
        "__proto__ does not lend its members to the document"
    );
    let got = call(&s, ADMIN_KEY, Method::GET, "/v1/docs/notes/p", None)
        .await
        .ok(200);
    assert_eq!(got["__proto__"], json!({"owner": "alice", "public": true}));
}

#[tokio::test]
async fn a_silent_websocket_is_closed_after_the_handshake_timeout() {
    let s = secure().await;
    let mut ws = ws_with(&s, &[]).await.unwrap();
    let t = std::time::Instant::now();
    let m = next(&mut ws).await.unwrap();
    assert_eq!(m["code"], "unauthenticated");
    assert!(next(&mut ws).await.is_none());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(14),
        "{waited:?}"
    );
}

#[test]
fn the_binary_listens_publicly_with_auth_and_manages_keys() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("admin.key");
    std::fs::write(&key_file, format!("{ADMIN_KEY}\n")).unwrap();
    let data = dir.path().join("data");
    let mut h = Herald::spawn(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--durability",
        "nosync",
        "--admin-key-file",
        key_file.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    let addr = h.wait_listening();
    let url = format!("http://127.0.0.1:{}", addr.port());
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(args)
            .args([
                "--url",
                &url,
                "--admin-key-file",
                key_file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = cli(&["keys", "create", "--role", "service", "--name", "ci"]);
    assert_eq!(code, Some(0), "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let (code, out, _) = cli(&["keys", "list"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains(&id) && !out.contains(created["key"].as_str().unwrap()),
        "{out}"
    );
    let (code, _, _) = cli(&["keys", "revoke", &id]);
    assert_eq!(code, Some(0));
    let (code, _, err) = cli(&["keys", "revoke", &id]);
    assert_eq!(code, Some(1));
    assert!(err.contains("key_not_found"), "{err}");
}

#[test]
fn rules_test_files_pass_and_a_mismatch_fails() {
    let run = |file: &str| {
        let path = format!("{}/../../testdata/rules/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["rules", "test", &path])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, out) = run("notes.test.json");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 mismatched"), "{out}");
    let (code, out) = run("mismatch.test.json");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("MISMATCH"), "{out}");
}

#[tokio::test]
async fn a_client_that_sends_its_headers_slowly_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = secure().await;
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    sock.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let t = std::time::Instant::now();
    // Trickle a header byte now and then, never finishing the head.
    let mut buf = [0u8; 1024];
    let closed_after = loop {
        tokio::select! {
            r = sock.read(&mut buf) => {
                match r {
                    Ok(0) | Err(_) => break t.elapsed(),
                    // hyper may answer 408 before closing.
                    Ok(_) => {}
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if sock.write_all(b"x").await.is_err() {
                    break t.elapsed();
                }
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "still open after 30 s"
        );
    };
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after < Duration::from_secs(15),
        "closed after {closed_after:?}"
    );
    // A normal request still works.
    s.send(s.req(Method::GET, "/v1/health")).await.ok(200);
}
