//! Bad input: each is a 4xx JSON error with a stable code that changes nothing, and every code
//! the API returns is in the protocol's table.

use super::*;

async fn seeded() -> (Server, common::Snapshot) {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1, "s": "x", "arr": [1]})).await;
    let snap = s.snapshot(&["c/a", "c/b"]).await;
    (s, snap)
}

#[tokio::test]
async fn invalid_json_is_rejected() {
    let (s, before) = seeded().await;
    for body in [
        "{not json",
        "",
        "{\"n\":1",
        "{\"n\":1} trailing",
        "\u{feff}{}",
        "{'n':1}",
    ] {
        for (m, p) in [
            (Method::PUT, "/v1/docs/c/a"),
            (Method::PUT, "/v1/docs/c/b"),
            (Method::POST, "/v1/docs/c"),
            (Method::PATCH, "/v1/docs/c/a"),
            (Method::PATCH, "/v1/docs/c/b?upsert=true"),
            (Method::POST, "/v1/query"),
            (Method::POST, "/v1/commit"),
            (Method::POST, "/v1/indexes"),
            (Method::PUT, "/v1/indexes/exemptions"),
        ] {
            let r = s.raw_body(m.clone(), p, body).await;
            assert_eq!(r.code(), Some("bad_json"), "{m} {p} {body:?}: {}", r.text);
            r.err(400, "bad_json");
        }
        s.assert_unchanged(&before).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn non_object_documents_are_rejected() {
    let (s, before) = seeded().await;
    for doc in [
        json!([1, 2]),
        json!("str"),
        json!(null),
        json!(5),
        json!(true),
    ] {
        s.json(Method::PUT, "/v1/docs/c/a", &doc)
            .await
            .err(400, "bad_document");
        s.json(Method::PUT, "/v1/docs/c/b", &doc)
            .await
            .err(400, "bad_document");
        s.json(Method::POST, "/v1/docs/c", &doc)
            .await
            .err(400, "bad_document");
        s.json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "put", "collection": "c", "id": "b", "doc": doc}]}),
        )
        .await
        .err(400, "bad_document");
        s.json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "insert", "collection": "c", "doc": doc}]}),
        )
        .await
        .err(400, "bad_document");
        // A non-object update is a bad update.
        s.json(Method::PATCH, "/v1/docs/c/a", &doc)
            .await
            .err(400, "bad_update");
        s.assert_unchanged(&before).await;
    }
    // Non-object request bodies for the other endpoints.
    for p in ["/v1/query", "/v1/commit", "/v1/indexes"] {
        s.json(Method::POST, p, &json!([]))
            .await
            .err(400, "bad_request");
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn oversized_documents_are_rejected() {
    let (s, before) = seeded().await;
    // Over 1 MiB as a document, but well under the 2 MiB + 64 KiB body limit.
    let big = "x".repeat(MIB + 1);
    let doc = json!({ "big": big });
    s.json(Method::PUT, "/v1/docs/c/a", &doc)
        .await
        .err(413, "document_too_large");
    s.json(Method::PUT, "/v1/docs/c/b", &doc)
        .await
        .err(413, "document_too_large");
    s.json(Method::POST, "/v1/docs/c", &doc)
        .await
        .err(413, "document_too_large");
    // Made too large by an update, or by an upsert.
    s.json(
        Method::PATCH,
        "/v1/docs/c/a",
        &json!({"$set": {"big": big}}),
    )
    .await
    .err(413, "document_too_large");
    s.json(
        Method::PATCH,
        "/v1/docs/c/b?upsert=true",
        &json!({"$set": {"big": big}}),
    )
    .await
    .err(413, "document_too_large");
    s.json(
        Method::POST,
        "/v1/commit",
        &json!({"writes": [
            {"op": "put", "collection": "c", "id": "b", "doc": {"n": 1}},
            {"op": "put", "collection": "c", "id": "a", "doc": doc},
        ]}),
    )
    .await
    .err(413, "document_too_large");
    s.assert_unchanged(&before).await;

    // Just under the limit is fine.
    let ok = "y".repeat(MIB - 100);
    s.put("c/fits", json!({ "s": ok })).await;
    s.stop().await;
}

#[tokio::test]
async fn too_deep_documents_are_rejected() {
    let (s, before) = seeded().await;
    for doc in [nested_object(65), nested_array_doc(65), nested_object(100)] {
        s.json(Method::PUT, "/v1/docs/c/a", &doc)
            .await
            .err(400, "document_too_deep");
        s.json(Method::PUT, "/v1/docs/c/b", &doc)
            .await
            .err(400, "document_too_deep");
        s.json(Method::POST, "/v1/docs/c", &doc)
            .await
            .err(400, "document_too_deep");
        s.json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "put", "collection": "c", "id": "b", "doc": doc}]}),
        )
        .await
        .err(400, "document_too_deep");
    }
    // Made too deep by an update: the value is 64 deep, at depth 2 in the document.
    s.json(
        Method::PATCH,
        "/v1/docs/c/a",
        &json!({"$set": {"deep": nested_object(64)}}),
    )
    .await
    .err(400, "document_too_deep");
    s.assert_unchanged(&before).await;

    // Deeper than the JSON parser's own recursion limit: still document_too_deep.
    let very_deep = format!(
        "{}{}",
        "{\"a\":".repeat(200),
        "1".to_string() + &"}".repeat(200)
    );
    let r = s.raw_body(Method::PUT, "/v1/docs/c/a", very_deep).await;
    r.err(400, "document_too_deep");
    s.assert_unchanged(&before).await;

    // Exactly at the limit is fine.
    assert_eq!(s.put("c/deep", nested_object(64)).await["version"], 1);
    assert_eq!(s.put("c/deep2", nested_array_doc(64)).await["version"], 1);
    s.stop().await;
}

#[tokio::test]
async fn request_bodies_over_the_limit_are_rejected() {
    let (s, before) = seeded().await;
    // Single-document bodies: 2 x 1 MiB + 64 KiB.
    let limit = 2 * MIB + (64 << 10);
    let body = format!("{{\"s\":\"{}\"}}", "x".repeat(limit));
    for (m, p) in [
        (Method::PUT, "/v1/docs/c/a"),
        (Method::PUT, "/v1/docs/c/b"),
        (Method::POST, "/v1/docs/c"),
        (Method::PATCH, "/v1/docs/c/a"),
    ] {
        let r = s.raw_body(m.clone(), p, body.clone()).await;
        assert_eq!(r.code(), Some("body_too_large"), "{m} {p}: {}", r.text);
        r.err(413, "body_too_large");
    }
    // Query bodies: 1 MiB.
    let q = format!(
        "{{\"collection\":\"c\",\"filter\":{{\"s\":\"{}\"}}}}",
        "x".repeat(MIB)
    );
    s.raw_body(Method::POST, "/v1/query", q)
        .await
        .err(413, "body_too_large");
    // Index bodies: 64 KiB.
    let ix = format!(
        "{{\"collection\":\"c\",\"name\":\"{}\",\"fields\":[]}}",
        "x".repeat(64 << 10)
    );
    s.raw_body(Method::POST, "/v1/indexes", ix)
        .await
        .err(413, "body_too_large");
    s.assert_unchanged(&before).await;

    // Commit bodies: 16 MiB.
    let w = json!({"op": "put", "collection": "c", "id": "b", "doc": {"s": "x".repeat(MIB / 2)}});
    let writes: Vec<Value> = (0..33).map(|_| w.clone()).collect();
    let body = serde_json::to_string(&json!({ "writes": writes })).unwrap();
    assert!(body.len() > 16 * MIB);
    s.raw_body(Method::POST, "/v1/commit", body)
        .await
        .err(413, "body_too_large");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn bad_document_paths_are_rejected() {
    let (s, _) = seeded().await;
    // Documents a normalising client or server would have written instead.
    let before = s.snapshot(&["c/a", "c/b", "c/y", "c/x"]).await;
    let doc = json!({"n": 2});

    // Sent through reqwest: these URLs are kept as written (checked below the loop).
    for p in [
        "c//x",
        "a//b/x",
        "//c/x",
        "c/x/",
        "c/",
        "c",
        "a/b/c",
        "c%01/x",
        "c/x%01",
        "c/x%7F",
        "c/__x",
        "__c/x",
        "c/%ff",
        &format!("c/{}", "i".repeat(257)),
    ] {
        let url = s.url(&format!("/v1/docs/{p}"));
        assert!(
            reqwest::Url::parse(&url).unwrap().path().ends_with(p),
            "reqwest rewrote {p}"
        );
        for m in [Method::PUT, Method::GET, Method::PATCH, Method::DELETE] {
            let body = if m == Method::PATCH {
                json!({"$set": {"n": 2}})
            } else {
                doc.clone()
            };
            let r = s.json(m.clone(), &format!("/v1/docs/{p}"), &body).await;
            assert_eq!(r.code(), Some("bad_path"), "{m} {p}: {}", r.text);
            r.err(400, "bad_path");
        }
    }
    s.assert_unchanged(&before).await;

    // An index name that does not decode is a JSON error too.
    s.send(s.req(Method::DELETE, "/v1/indexes/%ff?collection=c"))
        .await
        .err(400, "bad_path");

    // POST needs a collection path: an odd number of segments.
    for p in ["c/x", "a/b/c/d", "c//x/y", "c%01", "__c", "c/x/y/"] {
        let r = s.json(Method::POST, &format!("/v1/docs/{p}"), &doc).await;
        assert_eq!(r.code(), Some("bad_path"), "POST {p}: {}", r.text);
        r.err(400, "bad_path");
    }
    // The same rules inside commits and queries.
    for (coll, id) in [
        ("c/x", "y"),
        ("c", ".."),
        ("c", ""),
        ("c", "a/b"),
        ("a//b", "x"),
    ] {
        s.json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "put", "collection": coll, "id": id, "doc": {}}]}),
        )
        .await
        .err(400, "bad_path");
    }
    for coll in ["c/x", "c/../d", "__c", "rooms/*/messages"] {
        s.json(Method::POST, "/v1/query", &json!({ "collection": coll }))
            .await
            .err(400, "bad_path");
    }
    // An empty collection is no collection: the query needs one of its two scopes.
    s.json(Method::POST, "/v1/query", &json!({ "collection": "" }))
        .await
        .err(400, "bad_query");
    s.assert_unchanged(&before).await;

    // Raw request targets with '.' and '..' segments: a URL library would resolve these
    // ("c/x/../y" -> "c/y"), so they go over the socket byte for byte.
    assert_eq!(
        reqwest::Url::parse("http://h/v1/docs/c/x/../y")
            .unwrap()
            .path(),
        "/v1/docs/c/y",
        "reqwest normalises dot segments, hence the raw requests"
    );
    // Each target reaches the server unresolved, so the check names the dot segment.
    for target in [
        "/v1/docs/c/x/../y",
        "/v1/docs/a/./b/y",
        "/v1/docs/c/..",
        "/v1/docs/c/.",
        "/v1/docs/../a/b/y",
        "/v1/docs/c/%2e%2e",
        "/v1/docs/c/x/%2E%2E/y",
    ] {
        for m in ["PUT", "GET", "DELETE", "PATCH"] {
            let body = if m == "PATCH" {
                br#"{"$set":{"n":2}}"#.as_slice()
            } else {
                br#"{"n":2}"#.as_slice()
            };
            let r = s.raw_request(m, target, body).await;
            let e = r.err(400, "bad_path");
            let msg = e["message"].as_str().unwrap();
            assert!(msg.contains("cannot be '.' or '..'"), "{m} {target}: {msg}");
        }
    }
    for target in ["/v1/docs/c/x/..", "/v1/docs/.", "/v1/docs/a/./c"] {
        let r = s.raw_request("POST", target, br#"{"n":2}"#).await;
        let e = r.err(400, "bad_path");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains("cannot be '.' or '..'"),
            "POST {target}: {msg}"
        );
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn misused_update_operators_are_rejected() {
    let (s, _) = seeded().await;
    s.put("c/deep", json!({"o": {"k": 1}, "big": i64::MAX}))
        .await;
    let before = s.snapshot(&["c/a", "c/b", "c/deep"]).await;
    // (update, the document it targets, code). c/a is {"n":1,"s":"x","arr":[1]}.
    let cases = [
        (json!({"$foo": {"n": 1}}), "c/a", "unknown_operator"),
        (
            json!({"$set": {"n": 1}, "$bar": {"m": 1}}),
            "c/a",
            "unknown_operator",
        ),
        (json!({"$inc": {"s": 1}}), "c/a", "type_mismatch"),
        (json!({"$push": {"s": 1}}), "c/a", "type_mismatch"),
        (json!({"$inc": {"n": "1"}}), "c/a", "type_mismatch"),
        (json!({"$set": 5}), "c/a", "bad_update"),
        (json!({"$set": [1]}), "c/a", "bad_update"),
        (json!({"$set": {"n": 1}, "m": 2}), "c/a", "bad_update"),
        (json!({}), "c/a", "bad_update"),
        (
            json!({"$set": {"n": 1}, "$inc": {"n": 1}}),
            "c/a",
            "conflicting_update_paths",
        ),
        (
            json!({"$set": {"o": 1, "o.k": 2}}),
            "c/a",
            "conflicting_update_paths",
        ),
        (json!({"$set": {"_id": "other"}}), "c/a", "immutable_field"),
        (json!({"$unset": {"_id": ""}}), "c/a", "immutable_field"),
        (json!({"_id": "other", "n": 5}), "c/a", "immutable_field"),
        (json!({"$set": {"s.k": 1}}), "c/a", "path_not_viable"),
        (json!({"$inc": {"big": 1}}), "c/deep", "numeric_overflow"),
    ];
    for (update, doc, code) in &cases {
        let r = s
            .json(Method::PATCH, &format!("/v1/docs/{doc}"), update)
            .await;
        assert_eq!(r.code(), Some(*code), "{update} on {doc}: {}", r.text);
        r.err(400, code);
        // With upsert on an existing document, and inside a commit (after a good write).
        let r = s
            .json(
                Method::PATCH,
                &format!("/v1/docs/{doc}?upsert=true"),
                update,
            )
            .await;
        assert_eq!(r.code(), Some(*code), "upsert {update}: {}", r.text);
        let (coll, id) = doc.split_once('/').unwrap();
        let r = s
            .json(
                Method::POST,
                "/v1/commit",
                &json!({"writes": [
                    {"op": "put", "collection": "c", "id": "b", "doc": {}},
                    {"op": "update", "collection": coll, "id": id, "update": update},
                ]}),
            )
            .await;
        assert_eq!(r.code(), Some(*code), "commit {update}: {}", r.text);
        s.assert_unchanged(&before).await;
    }
    // An upsert that would create the document fails the same way.
    let r = s
        .json(
            Method::PATCH,
            "/v1/docs/c/b?upsert=true",
            &json!({"$foo": {"n": 1}}),
        )
        .await;
    r.err(400, "unknown_operator");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn wrong_member_types_are_rejected() {
    let (s, before) = seeded().await;
    let sr = &s;
    let commit = |w: Value| async move {
        sr.json(Method::POST, "/v1/commit", &json!({ "writes": [w] }))
            .await
    };

    let e = commit(json!({"op": "put", "collection": "c", "id": "a", "doc": {}, "ifVersion": "1"}))
        .await
        .err(400, "bad_request");
    assert_eq!(e["write"], 0);
    for w in [
        json!({"op": "put", "collection": "c", "id": "a", "doc": {}, "ifVersion": -1}),
        json!({"op": "put", "collection": "c", "id": "a", "doc": {}, "ifVersion": 1.5}),
        json!({"op": "update", "collection": "c", "id": "b", "update": {"$set": {"n": 1}}, "upsert": "yes"}),
        json!({"op": "put", "collection": "c", "id": 5, "doc": {}}),
        json!({"op": "put", "collection": 5, "id": "a", "doc": {}}),
        json!({"op": "put", "collection": "c", "id": "a"}),
        json!({"op": "put", "collection": "c", "doc": {}}),
        json!({"op": "update", "collection": "c", "id": "a"}),
        json!({"op": "delete", "collection": "c"}),
        json!({"op": "delete", "collection": "c", "id": "a", "doc": {}}),
        json!({"op": "insert", "collection": "c", "doc": {}, "ifVersion": 0}),
        json!({"op": "put", "collection": "c", "id": "a", "doc": {}, "extra": 1}),
        json!({"op": "upsert", "collection": "c", "id": "a", "doc": {}}),
        json!({"collection": "c", "id": "a", "doc": {}}),
        json!("put"),
    ] {
        let r = commit(w.clone()).await;
        assert_eq!(r.code(), Some("bad_request"), "{w}: {}", r.text);
    }
    // The failing write is named even when earlier ones are fine.
    let e = s
        .json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [
                {"op": "put", "collection": "c", "id": "b", "doc": {}},
                {"op": "put", "collection": "c", "id": "a", "doc": {}, "ifVersion": "x"},
            ]}),
        )
        .await
        .err(400, "bad_request");
    assert_eq!(e["write"], 1);
    for body in [
        json!({}),
        json!({"writes": {}}),
        json!({"writes": []}),
        json!({"writes": [], "atomic": true}),
    ] {
        s.json(Method::POST, "/v1/commit", &body)
            .await
            .err(400, "bad_request");
    }
    let many: Vec<Value> = (0..501)
        .map(|i| json!({"op": "put", "collection": "c", "id": format!("m{i}"), "doc": {}}))
        .collect();
    s.json(Method::POST, "/v1/commit", &json!({ "writes": many }))
        .await
        .err(400, "limit_exceeded");

    for q in ["maybe", "1", "TRUE", ""] {
        s.json(
            Method::PATCH,
            &format!("/v1/docs/c/b?upsert={q}"),
            &json!({"$set": {"n": 1}}),
        )
        .await
        .err(400, "bad_request");
    }
    s.assert_unchanged(&before).await;

    let query = |extra: Value| async move {
        let mut q = json!({"collection": "c"});
        q.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        sr.json(Method::POST, "/v1/query", &q).await
    };
    for (extra, code) in [
        (json!({"limit": -1}), "bad_query"),
        (json!({"limit": "10"}), "bad_query"),
        (json!({"limit": 1.5}), "bad_query"),
        (json!({"skip": -3}), "bad_query"),
        (json!({"limit": 10_001}), "limit_exceeded"),
        (json!({"sort": {"a": 2}}), "bad_sort"),
        (json!({"sort": {"a": "asc"}}), "bad_sort"),
        (json!({"sort": ["a"]}), "bad_sort"),
        (json!({"projection": {"a": "yes"}}), "bad_projection"),
        (json!({"projection": {"a": 1, "b": 0}}), "bad_projection"),
        (json!({"filter": [1]}), "bad_filter"),
        (json!({"filter": "n"}), "bad_filter"),
        (json!({"explain": "yes"}), "bad_request"),
    ] {
        let r = query(extra.clone()).await;
        assert_eq!(r.code(), Some(code), "{extra}: {}", r.text);
    }
    s.json(Method::POST, "/v1/query", &json!({"filter": {}}))
        .await
        .err(400, "bad_query");
    s.json(Method::POST, "/v1/query", &json!({"collection": 5}))
        .await
        .err(400, "bad_request");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn unknown_query_member_is_rejected() {
    let (s, before) = seeded().await;
    for q in [
        json!({"collection": "c", "limits": 5}),
        json!({"collection": "c", "where": {"n": 1}}),
        json!({"collection": "c", "Filter": {}}),
    ] {
        let r = s.json(Method::POST, "/v1/query", &q).await;
        let e = r.err(400, "bad_query");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("unknown query member"),
            "{e}"
        );
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn id_in_the_body_must_match_the_path() {
    let (s, before) = seeded().await;
    for (p, other) in [("c/a", "b"), ("c/b", "a")] {
        for body_id in [
            json!(other),
            json!("A"),
            json!(""),
            json!(5),
            json!(null),
            json!({"x": 1}),
        ] {
            s.json(
                Method::PUT,
                &format!("/v1/docs/{p}"),
                &json!({"n": 9, "_id": body_id}),
            )
            .await
            .err(400, "id_mismatch");
            let (coll, id) = p.split_once('/').unwrap();
            s.json(
                Method::POST,
                "/v1/commit",
                &json!({"writes": [{"op": "put", "collection": coll, "id": id, "doc": {"_id": body_id}}]}),
            )
            .await
            .err(400, "id_mismatch");
        }
    }
    s.assert_unchanged(&before).await;

    // Insert: a non-string _id is a bad request; a bad one a bad path.
    s.json(Method::POST, "/v1/docs/c", &json!({"_id": 5}))
        .await
        .err(400, "bad_request");
    s.json(Method::POST, "/v1/docs/c", &json!({"_id": "x/y"}))
        .await
        .err(400, "bad_path");
    s.json(Method::POST, "/v1/docs/c", &json!({"_id": ""}))
        .await
        .err(400, "bad_path");
    s.json(
        Method::POST,
        "/v1/commit",
        &json!({"writes": [{"op": "insert", "collection": "c", "id": "p", "doc": {"_id": "q"}}]}),
    )
    .await
    .err(400, "id_mismatch");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn forbidden_field_names_are_rejected() {
    let (s, before) = seeded().await;
    for doc in [
        json!({"$x": 1}),
        json!({"a.b": 1}),
        json!({"": 1}),
        json!({"o": {"$x": 1}}),
        json!({"o": [{"a.b": 1}]}),
        json!({"nul\u{0}": 1}),
    ] {
        for p in ["c/a", "c/b"] {
            s.json(Method::PUT, &format!("/v1/docs/{p}"), &doc)
                .await
                .err(400, "bad_document");
        }
        s.json(Method::POST, "/v1/docs/c", &doc)
            .await
            .err(400, "bad_document");
        s.json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "put", "collection": "c", "id": "b", "doc": doc}]}),
        )
        .await
        .err(400, "bad_document");
        // Through an update: a $set of a value holding the name, or a replacement.
        let r = s
            .json(Method::PATCH, "/v1/docs/c/a", &json!({"$set": {"v": doc}}))
            .await;
        assert!(
            matches!(r.code(), Some("bad_document" | "bad_update")),
            "{}",
            r.text
        );
        s.assert_unchanged(&before).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let (s, before) = seeded().await;
    for (m, p) in [
        (Method::GET, "/"),
        (Method::GET, "/v1"),
        (Method::GET, "/v1/nope"),
        (Method::GET, "/v2/health"),
        (Method::POST, "/v1/doc/c"),
        (Method::GET, "/v1/docs"),
        (Method::GET, "/v1/indexes/a/b"),
        (Method::GET, "/v1/health/"),
    ] {
        let r = s.send(s.req(m.clone(), p)).await;
        assert_eq!(r.code(), Some("route_not_found"), "{m} {p}: {}", r.text);
        r.err(404, "route_not_found");
    }
    for (m, p) in [
        (Method::POST, "/v1/health"),
        (Method::DELETE, "/v1/health"),
        (Method::GET, "/v1/query"),
        (Method::PUT, "/v1/query"),
        (Method::GET, "/v1/commit"),
        (Method::GET, "/v1/bulk"),
        (Method::PUT, "/v1/indexes"),
        (Method::GET, "/v1/indexes/exemptions"),
        (Method::POST, "/v1/indexes/exemptions"),
        (Method::GET, "/v1/indexes/name"),
        (Method::OPTIONS, "/v1/docs/c/a"),
    ] {
        let r = s.send(s.req(m.clone(), p).json(&json!({"n": 1}))).await;
        assert_eq!(r.code(), Some("method_not_allowed"), "{m} {p}: {}", r.text);
        r.err(405, "method_not_allowed");
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn bad_filters_are_rejected() {
    let (s, before) = seeded().await;
    for (filter, code) in [
        (json!({"n": {"$foo": 1}}), "unknown_operator"),
        (json!({"$where": "1"}), "unknown_operator"),
        (json!({"s": {"$regex": "a(?=b)"}}), "unsupported_regex"),
        (json!({"s": {"$regex": "(?<!a)b"}}), "unsupported_regex"),
        (json!({"s": {"$regex": "(a)\\1"}}), "unsupported_regex"),
        (json!({"s": {"$regex": "("}}), "bad_regex"),
        (json!({"n": {"$in": 5}}), "bad_operand"),
        (json!({"n": {"$size": "x"}}), "bad_operand"),
        (json!({"$and": {}}), "bad_filter"),
        (json!({"n": {"$gt": 1}, "$or": 5}), "bad_filter"),
    ] {
        let r = s
            .json(
                Method::POST,
                "/v1/query",
                &json!({"collection": "c", "filter": filter}),
            )
            .await;
        assert!(r.status == 400, "{filter}: {}", r.text);
        assert_eq!(r.code(), Some(code), "{filter}: {}", r.text);
    }
    s.assert_unchanged(&before).await;
    s.stop().await;
}

/// One request for every error code the API can produce without faults, each checked against
/// the protocol table (as every response in this suite is, in `Resp::new`).
#[tokio::test]
async fn every_returned_code_is_in_the_protocol_table() {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1, "s": "x", "big": i64::MAX}))
        .await;
    let big = "x".repeat(MIB + 1);
    let mut got: Vec<Resp> = vec![
        s.raw_body(Method::PUT, "/v1/docs/c/a", "{").await,
        s.json(
            Method::POST,
            "/v1/query",
            &json!({"collection": "c", "explain": 1}),
        )
        .await,
        s.raw_body(Method::POST, "/v1/query", "x".repeat(MIB + 1))
            .await,
        s.send(s.req(Method::GET, "/nope")).await,
        s.send(s.req(Method::DELETE, "/v1/health")).await,
        s.get("c/__a").await,
        s.get("c/b").await,
        s.json(Method::POST, "/v1/docs/c", &json!({"_id": "a"}))
            .await,
        s.send(
            s.req(Method::PUT, "/v1/docs/c/a")
                .header("if-match", "\"9\"")
                .json(&json!({})),
        )
        .await,
        s.json(Method::PUT, "/v1/docs/c/a", &json!({"_id": "b"}))
            .await,
        s.json(Method::PUT, "/v1/docs/c/a", &json!([])).await,
        s.json(Method::PUT, "/v1/docs/c/a", &json!({ "s": big }))
            .await,
        s.json(Method::PUT, "/v1/docs/c/a", &nested_object(65))
            .await,
    ];
    for (filter, extra) in [
        (json!([]), json!({})),
        (json!({"n": {"$nope": 1}}), json!({})),
        (json!({"n": {"$in": 1}}), json!({})),
        (json!({"s": {"$regex": "["}}), json!({})),
        (json!({"s": {"$regex": "(?=a)"}}), json!({})),
        (json!({}), json!({"sort": {"n": 0}})),
        (json!({}), json!({"projection": {"n": []}})),
        (json!({}), json!({"skip": "1"})),
        (json!({}), json!({"limit": 1_000_000})),
    ] {
        let mut q = json!({"collection": "c", "filter": filter});
        q.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        got.push(s.json(Method::POST, "/v1/query", &q).await);
    }
    for update in [
        json!({"$set": 1}),
        json!({"$set": {"n": 1}, "$inc": {"n": 1}}),
        json!({"$inc": {"s": 1}}),
        json!({"$set": {"s.t": 1}}),
        json!({"$set": {"_id": "z"}}),
        json!({"$inc": {"big": 1}}),
    ] {
        got.push(s.json(Method::PATCH, "/v1/docs/c/a", &update).await);
    }
    got.push(
        s.json(
            Method::POST,
            "/v1/indexes",
            &json!({"collection": "c", "name": "x", "fields": []}),
        )
        .await,
    );
    let def = json!({"collection": "c", "name": "gn", "fields": [{"path": "g"}, {"path": "n"}]});
    s.json(Method::POST, "/v1/indexes", &def).await.ok(202);
    got.push(s.json(Method::POST, "/v1/indexes", &def).await);
    got.push(
        s.send(s.req(Method::DELETE, "/v1/indexes/none?collection=c"))
            .await,
    );

    // result_too_large: more than 10,000 matches and no limit.
    for chunk in 0..21 {
        let writes: Vec<Value> = (0..500)
            .map(|i| json!({"op": "insert", "collection": "many", "doc": {"i": chunk * 500 + i}}))
            .collect();
        s.json(Method::POST, "/v1/commit", &json!({ "writes": writes }))
            .await
            .ok(200);
    }
    got.push(
        s.json(Method::POST, "/v1/query", &json!({"collection": "many"}))
            .await,
    );
    let ok = s
        .query(json!({"collection": "many", "limit": 10_000}))
        .await;
    assert_eq!(ok["docs"].as_array().unwrap().len(), 10_000);
    // An aggregation that holds its input holds that query: past the cap it is refused,
    // narrowed it runs; one that counts or groups streams its input past the cap.
    let agg = |pipeline: Value| {
        let body = json!({"collection": "many", "pipeline": pipeline});
        let s = &s;
        async move { s.json(Method::POST, "/v1/aggregate", &body).await }
    };
    let r = agg(json!([{"$project": {"i": 1}}])).await;
    assert!(r.text.contains("$match"), "{}", r.text);
    got.push(r);
    let r = agg(json!([{"$match": {"i": {"$lt": 100}}}, {"$project": {"i": 1}}])).await;
    assert_eq!(r.ok(200)["docs"].as_array().unwrap().len(), 100);
    let r = agg(json!([{"$match": {"i": {"$gte": 100}}}, {"$count": "n"}])).await;
    assert_eq!(r.ok(200)["docs"], json!([{"n": 10_400}]));
    got.push(agg(json!([{"$group": {"n": {"$sum": 1}}}])).await);

    let codes: std::collections::BTreeSet<&str> = got.iter().filter_map(Resp::code).collect();
    for r in &got {
        let code = r
            .code()
            .unwrap_or_else(|| panic!("not an error: {}", r.text));
        assert_eq!(Some(r.status), table_status(code), "{code}");
    }
    let expected = [
        "bad_json",
        "bad_request",
        "body_too_large",
        "route_not_found",
        "method_not_allowed",
        "bad_path",
        "not_found",
        "already_exists",
        "version_conflict",
        "id_mismatch",
        "bad_document",
        "document_too_large",
        "document_too_deep",
        "bad_filter",
        "unknown_operator",
        "bad_operand",
        "bad_regex",
        "unsupported_regex",
        "bad_sort",
        "bad_projection",
        "bad_query",
        "bad_pipeline",
        "limit_exceeded",
        "result_too_large",
        "bad_update",
        "conflicting_update_paths",
        "type_mismatch",
        "path_not_viable",
        "immutable_field",
        "numeric_overflow",
        "bad_index",
        "index_exists",
        "index_not_found",
    ];
    for c in expected {
        assert!(codes.contains(c), "{c} was not produced; got {codes:?}");
    }
    // And everything any test in this binary has seen so far agrees with the table.
    for (code, status) in seen_codes() {
        assert_eq!(table_status(&code), Some(status), "{code}");
    }
    s.stop().await;
}
