//! Credentials on HTTP: what is refused (`unauthenticated`), what each role may do, API keys
//! (create, list without secrets, revoke at once, durable), rules administration (validated
//! whole, durable across a restart).

use super::*;
use jsonwebtoken::EncodingKey;

#[tokio::test]
async fn requests_without_valid_credentials_are_unauthenticated() {
    let s = secure().await;
    // Health stays open for load balancers.
    s.send(s.req(Method::GET, "/v1/health")).await.ok(200);
    let path = "/v1/docs/notes/n1";
    s.send(s.req(Method::GET, path))
        .await
        .err(401, "unauthenticated");
    let other_secret = EncodingKey::from_secret(b"another-secret-0123456789abcdef-0123456789");
    let exp = now_s() + 60;
    let forged = sign(
        Algorithm::HS256,
        &other_secret,
        &json!({"sub": "alice", "exp": exp}),
    );
    let expired = token("alice", -5, json!({}));
    let not_yet = token("alice", 60, json!({"nbf": now_s() + 30}));
    let no_sub = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET),
        &json!({"exp": exp}),
    );
    let no_exp = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET),
        &json!({"sub": "alice"}),
    );
    let empty_sub = token("", 60, json!({}));
    // alg "none": an unsigned token with a valid-looking body.
    let unsigned = {
        use base64::Engine;
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.",
            e.encode(r#"{"alg":"none","typ":"JWT"}"#),
            e.encode(json!({"sub": "alice", "exp": exp}).to_string())
        )
    };
    // HS256 signed with the public key's bytes (the classic algorithm confusion).
    let confused = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(&testdata("ed25519.pub.pem")),
        &json!({"sub": "alice", "exp": exp}),
    );
    for bad in [
        "garbage", &forged, &expired, &not_yet, &no_sub, &no_exp, &empty_sub, &unsigned, &confused,
        "hk_0000", "",
    ] {
        let r = call(&s, bad, Method::GET, path, None).await;
        r.err(401, "unauthenticated");
    }
    // A malformed Authorization header is the same as none.
    let r = s
        .send(
            s.req(Method::GET, path)
                .header("authorization", "Basic YWxpY2U6cHc="),
        )
        .await;
    r.err(401, "unauthenticated");
    // Valid: HS256, EdDSA and ES256 tokens, and the admin key.
    let claims = json!({"sub": "alice", "exp": exp});
    let ed = sign(
        Algorithm::EdDSA,
        &EncodingKey::from_ed_pem(&testdata("ed25519.key.pem")).unwrap(),
        &claims,
    );
    let es = sign(
        Algorithm::ES256,
        &EncodingKey::from_ec_pem(&testdata("p256.key.pem")).unwrap(),
        &claims,
    );
    for good in [token("alice", 60, json!({})), ed, es] {
        call(&s, &good, Method::GET, path, None)
            .await
            .err(404, "not_found");
    }
    call(&s, ADMIN_KEY, Method::GET, path, None)
        .await
        .err(404, "not_found");
}

#[tokio::test]
async fn administration_needs_an_admin_key() {
    let s = secure().await;
    let user = token("alice", 60, json!({}));
    let created = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/keys",
        Some(json!({"role": "service", "name": "worker"})),
    )
    .await
    .ok(201);
    let service = created["key"].as_str().unwrap().to_string();
    let trigger =
        json!({"collection": "notes", "on": ["insert"], "function": "function (e, db) {}"});
    for cred in [user.as_str(), service.as_str()] {
        for (m, p, b) in [
            (Method::PUT, "/v1/triggers/t", Some(trigger.clone())),
            (Method::GET, "/v1/triggers", None),
            (
                Method::POST,
                "/v1/indexes",
                Some(
                    json!({"collection": "notes", "name": "i", "fields": [{"path": "n", "order": 1}]}),
                ),
            ),
            (Method::GET, "/v1/indexes?collection=notes", None),
            (Method::PUT, "/v1/rules", Some(notes_rules())),
            (Method::GET, "/v1/rules", None),
            (Method::POST, "/v1/keys", Some(json!({"role": "admin"}))),
            (Method::GET, "/v1/keys", None),
            (Method::DELETE, "/v1/keys/x", None),
        ] {
            call(&s, cred, m, p, b).await.err(403, "permission_denied");
        }
    }
    // Bulk ingest and metrics are for services and admins, not end users.
    let r = s
        .send(
            s.req(Method::POST, "/v1/bulk")
                .bearer_auth(&user)
                .body("{}"),
        )
        .await;
    r.err(403, "permission_denied");
    let r = s
        .send(s.req(Method::GET, "/metrics").bearer_auth(&user))
        .await;
    assert_eq!(r.status, 403);
    let m = s
        .client
        .get(s.url("/metrics"))
        .bearer_auth(&service)
        .send()
        .await
        .unwrap();
    assert_eq!(m.status(), 200);
    // The collections list likewise; the console's page and script need no credentials (they
    // hold no data; the console sends its token with every data call).
    call(&s, &user, Method::GET, "/v1/collections", None)
        .await
        .err(403, "permission_denied");
    s.send(s.req(Method::GET, "/v1/collections"))
        .await
        .err(401, "unauthenticated");
    for cred in [service.as_str(), ADMIN_KEY] {
        call(&s, cred, Method::GET, "/v1/collections", None)
            .await
            .ok(200);
    }
    for path in ["/console", "/console/console.js", "/console/console.css"] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    call(&s, ADMIN_KEY, Method::PUT, "/v1/triggers/t", Some(trigger))
        .await
        .ok(201);
}

#[tokio::test]
async fn api_keys_are_shown_once_revoked_at_once_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_auth(dir, options()).await;
    let created = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/keys",
        Some(json!({"role": "service", "name": "etl"})),
    )
    .await
    .ok(201);
    let (id, key) = (
        created["id"].as_str().unwrap().to_string(),
        created["key"].as_str().unwrap().to_string(),
    );
    assert!(key.starts_with("hk_") && key.len() == 67, "{key}");
    let second_admin = call(
        &s,
        ADMIN_KEY,
        Method::POST,
        "/v1/keys",
        Some(json!({"role": "admin"})),
    )
    .await
    .ok(201)["key"]
        .as_str()
        .unwrap()
        .to_string();
    // A created admin key administers; a service key bypasses rules for data.
    call(&s, &second_admin, Method::GET, "/v1/keys", None)
        .await
        .ok(200);
    call(
        &s,
        &key,
        Method::PUT,
        "/v1/docs/secret/s1",
        Some(json!({"x": 1})),
    )
    .await
    .ok(200);
    call(&s, &key, Method::GET, "/v1/docs/secret/s1", None)
        .await
        .ok(200);
    let listed = call(&s, ADMIN_KEY, Method::GET, "/v1/keys", None)
        .await
        .ok(200);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2);
    assert!(
        !listed.to_string().contains(&key[3..]),
        "the list shows no secret"
    );
    assert!(listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k.get("hash").is_none() && k.get("key").is_none()));
    for (body, code) in [
        (json!({"role": "root"}), "bad_request"),
        (json!({}), "bad_request"),
        (json!({"role": "admin", "x": 1}), "bad_request"),
    ] {
        call(&s, ADMIN_KEY, Method::POST, "/v1/keys", Some(body))
            .await
            .err(400, code);
    }
    // Restart: keys (stored hashed) still work.
    let dir = s.stop().await;
    let raw = std::fs::read(dir.path().join("data/herald.redb")).unwrap_or_default();
    assert!(
        !raw.windows(key.len()).any(|w| w == key.as_bytes()),
        "the secret is not stored"
    );
    let s = Server::start_auth(dir, options()).await;
    call(&s, &key, Method::GET, "/v1/docs/secret/s1", None)
        .await
        .ok(200);
    let r = call(
        &s,
        ADMIN_KEY,
        Method::DELETE,
        &format!("/v1/keys/{id}"),
        None,
    )
    .await
    .ok(200);
    assert_eq!(r["revoked"], json!(id));
    call(&s, &key, Method::GET, "/v1/docs/secret/s1", None)
        .await
        .err(401, "unauthenticated");
    call(
        &s,
        ADMIN_KEY,
        Method::DELETE,
        &format!("/v1/keys/{id}"),
        None,
    )
    .await
    .err(404, "key_not_found");
}

#[tokio::test]
async fn rules_are_validated_whole_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options();
    opts.rules = None;
    let s = Server::start_auth(dir, opts.clone()).await;
    // No rules stored yet: end users are denied everywhere.
    let alice = token("alice", 60, json!({}));
    call(
        &s,
        &alice,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes"})),
    )
    .await
    .err(403, "permission_denied");
    assert_eq!(
        call(&s, ADMIN_KEY, Method::GET, "/v1/rules", None)
            .await
            .ok(200),
        json!({"rules": []})
    );
    let r = call(&s, ADMIN_KEY, Method::PUT, "/v1/rules", Some(notes_rules()))
        .await
        .ok(200);
    assert_eq!(r["rules"], 2);
    let bad = [
        json!({"rules": [{"match": "notes/{id}", "read": {"owner": {"$regex": "("}}}]}),
        json!({"rules": [{"match": "notes/{id}", "read": {"owner": "$$auth.nope"}}]}),
        json!({"rules": [{"match": "notes"}]}),
        json!({"rules": "all"}),
    ];
    for b in bad {
        let e = call(&s, ADMIN_KEY, Method::PUT, "/v1/rules", Some(b))
            .await
            .err(400, "bad_rules");
        assert!(e["message"].as_str().unwrap().contains("rule"), "{e}");
    }
    let r = s
        .send(
            s.req(Method::PUT, "/v1/rules")
                .bearer_auth(ADMIN_KEY)
                .body("{nope"),
        )
        .await;
    r.err(400, "bad_rules");
    assert_eq!(
        call(&s, ADMIN_KEY, Method::GET, "/v1/rules", None)
            .await
            .ok(200),
        notes_rules()
    );
    let dir = s.stop().await;
    let s = Server::start_auth(dir, opts).await;
    assert_eq!(
        call(&s, ADMIN_KEY, Method::GET, "/v1/rules", None)
            .await
            .ok(200),
        notes_rules()
    );
    call(
        &s,
        &alice,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "notes"})),
    )
    .await
    .ok(200);
}
