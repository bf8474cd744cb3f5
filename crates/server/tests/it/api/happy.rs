//! The happy path of every `/v1` endpoint: documents, queries, commits, bulk, indexes.

use super::*;

#[tokio::test]
async fn health_reports_ok_and_the_last_seq() {
    let s = Server::start().await;
    let h = s.send(s.req(Method::GET, "/v1/health")).await.ok(200);
    assert_eq!(h, json!({"status": "ok", "seq": 0}));
    s.put("c/a", json!({"n": 1})).await;
    s.put("c/b", json!({"n": 2})).await;
    assert_eq!(s.seq().await, 2);
    s.stop().await;
}

#[tokio::test]
async fn put_then_get_returns_the_document_with_etag_and_id_first() {
    let s = Server::start().await;
    let r = s.put("c/a", json!({"x": 1, "y": "two"})).await;
    assert_eq!(r, json!({"id": "a", "version": 1, "seq": 1}));

    let g = s.get("c/a").await;
    assert_eq!(g.status, 200);
    assert_eq!(g.etag.as_deref(), Some("\"1\""));
    assert!(g.text.starts_with(r#"{"_id":"a""#), "{}", g.text);
    assert_eq!(g.body, json!({"_id": "a", "x": 1, "y": "two"}));

    // A replacement, with a matching _id given last: it is stored first, the version moves on.
    let r = s.put("c/a", json!({"z": true, "_id": "a"})).await;
    assert_eq!(r, json!({"id": "a", "version": 2, "seq": 2}));
    let g = s.get("c/a").await;
    assert_eq!(g.etag.as_deref(), Some("\"2\""));
    assert!(g.text.starts_with(r#"{"_id":"a""#), "{}", g.text);
    assert_eq!(g.body, json!({"_id": "a", "z": true}));

    s.get("c/missing").await.err(404, "not_found");
    s.stop().await;
}

#[tokio::test]
async fn post_inserts_under_a_generated_or_given_id() {
    let s = Server::start().await;
    let r = s
        .json(Method::POST, "/v1/docs/c", &json!({"n": 1}))
        .await
        .ok(201);
    let id = r["id"].as_str().expect("id").to_string();
    assert!(is_generated_id(&id), "{id}");
    assert_eq!(
        (r["version"].clone(), r["seq"].clone()),
        (json!(1), json!(1))
    );
    let g = s.get(&format!("c/{id}")).await.ok(200);
    assert_eq!(g, json!({"_id": id, "n": 1}));

    // Two inserts get two different ids.
    let r2 = s
        .json(Method::POST, "/v1/docs/c", &json!({"n": 1}))
        .await
        .ok(201);
    assert!(is_generated_id(r2["id"].as_str().unwrap()));
    assert_ne!(r2["id"], r["id"]);

    let r = s
        .json(Method::POST, "/v1/docs/c", &json!({"_id": "fixed", "n": 2}))
        .await
        .ok(201);
    assert_eq!(r, json!({"id": "fixed", "version": 1, "seq": 3}));

    let before = s.snapshot(&["c/fixed"]).await;
    let e = s
        .json(Method::POST, "/v1/docs/c", &json!({"_id": "fixed", "n": 3}))
        .await;
    e.err(409, "already_exists");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn patch_applies_update_operators_and_replacements() {
    let s = Server::start().await;
    s.put("c/p", json!({"n": 1, "tags": ["a"], "s": "x"})).await;
    let r = s
        .json(
            Method::PATCH,
            "/v1/docs/c/p",
            &json!({"$inc": {"n": 2}, "$push": {"tags": "b"}, "$set": {"o.k": true}, "$unset": {"s": ""}}),
        )
        .await
        .ok(200);
    let want = json!({"_id": "p", "n": 3, "tags": ["a", "b"], "o": {"k": true}});
    assert_eq!(r, json!({"doc": want, "version": 2, "seq": 2}));
    let g = s.get("c/p").await;
    assert_eq!((g.body.clone(), g.etag.as_deref()), (want, Some("\"2\"")));

    // A body without operators replaces the document (keeping _id).
    let r = s
        .json(Method::PATCH, "/v1/docs/c/p", &json!({"only": 1}))
        .await
        .ok(200);
    assert_eq!(
        r,
        json!({"doc": {"_id": "p", "only": 1}, "version": 3, "seq": 3})
    );
    s.stop().await;
}

#[tokio::test]
async fn patch_on_a_missing_document_is_404_unless_upsert() {
    let s = Server::start().await;
    s.put("c/other", json!({"n": 1})).await;
    let before = s.snapshot(&["c/m"]).await;
    for q in ["", "?upsert=false"] {
        s.json(
            Method::PATCH,
            &format!("/v1/docs/c/m{q}"),
            &json!({"$set": {"a": 1}}),
        )
        .await
        .err(404, "not_found");
        s.assert_unchanged(&before).await;
    }

    let r = s
        .json(
            Method::PATCH,
            "/v1/docs/c/m?upsert=true",
            &json!({"$set": {"a": 1}, "$inc": {"n": 5}}),
        )
        .await
        .ok(200);
    assert_eq!(
        r,
        json!({"doc": {"_id": "m", "a": 1, "n": 5}, "version": 1, "seq": 2})
    );
    assert_eq!(
        s.get("c/m").await.ok(200),
        json!({"_id": "m", "a": 1, "n": 5})
    );
    // Upsert on an existing document is an ordinary update.
    let r = s
        .json(
            Method::PATCH,
            "/v1/docs/c/m?upsert=true",
            &json!({"$inc": {"n": 1}}),
        )
        .await
        .ok(200);
    assert_eq!(r["version"], 2);
    assert_eq!(r["doc"]["n"], 6);
    s.stop().await;
}

#[tokio::test]
async fn delete_reports_deleted_then_not_and_the_no_op_takes_no_seq() {
    let s = Server::start().await;
    s.put("c/d", json!({"n": 1})).await;
    let r = s.send(s.req(Method::DELETE, "/v1/docs/c/d")).await.ok(200);
    assert_eq!(r, json!({"deleted": true, "seq": 2}));
    s.get("c/d").await.err(404, "not_found");

    let r = s.send(s.req(Method::DELETE, "/v1/docs/c/d")).await.ok(200);
    assert_eq!(r, json!({"deleted": false, "seq": 2}));
    let r = s
        .send(s.req(Method::DELETE, "/v1/docs/c/never"))
        .await
        .ok(200);
    assert_eq!(r, json!({"deleted": false, "seq": 2}));
    assert_eq!(s.seq().await, 2);

    // Re-creating starts again at version 1.
    assert_eq!(s.put("c/d", json!({})).await["version"], 1);
    s.stop().await;
}

#[tokio::test]
async fn if_match_makes_writes_conditional() {
    let s = Server::start().await;
    s.put("c/v", json!({"n": 1})).await;
    let put_if = |v: &str, doc: Value| {
        s.send(
            s.req(Method::PUT, "/v1/docs/c/v")
                .header("if-match", v)
                .json(&doc),
        )
    };

    let r = put_if("\"1\"", json!({"n": 2})).await.ok(200);
    assert_eq!(r["version"], 2);

    let before = s.snapshot(&["c/v"]).await;
    let e = put_if("\"1\"", json!({"n": 99})).await;
    let err = e.err(409, "version_conflict");
    assert_eq!(
        (err["expected"].clone(), err["actual"].clone()),
        (json!(1), json!(2))
    );
    s.assert_unchanged(&before).await;

    // PATCH
    let patch_if = |v: &str| {
        s.send(
            s.req(Method::PATCH, "/v1/docs/c/v")
                .header("if-match", v)
                .json(&json!({"$inc": {"n": 1}})),
        )
    };
    patch_if("\"7\"").await.err(409, "version_conflict");
    s.assert_unchanged(&before).await;
    let r = patch_if("\"2\"").await.ok(200);
    assert_eq!(
        (r["version"].clone(), r["doc"]["n"].clone()),
        (json!(3), json!(3))
    );

    // DELETE
    let del_if = |v: &str| s.send(s.req(Method::DELETE, "/v1/docs/c/v").header("if-match", v));
    let before = s.snapshot(&["c/v"]).await;
    del_if("\"2\"").await.err(409, "version_conflict");
    s.assert_unchanged(&before).await;

    // A malformed If-Match is a bad request, not an unconditional write.
    for bad in ["abc", "\"-1\"", "*", "W/\"3\""] {
        put_if(bad, json!({"n": 100})).await.err(400, "bad_request");
        patch_if(bad).await.err(400, "bad_request");
        del_if(bad).await.err(400, "bad_request");
        s.assert_unchanged(&before).await;
    }

    let r = del_if("\"3\"").await.ok(200);
    assert_eq!(r["deleted"], true);

    // "0" means "does not exist": create-if-absent.
    let create = |id: &'static str| {
        s.send(
            s.req(Method::PUT, &format!("/v1/docs/c/{id}"))
                .header("if-match", "\"0\"")
                .json(&json!({"fresh": true})),
        )
    };
    assert_eq!(create("v").await.ok(200)["version"], 1);
    let before = s.snapshot(&["c/v"]).await;
    let err = create("v").await.err(409, "version_conflict");
    assert_eq!(
        (err["expected"].clone(), err["actual"].clone()),
        (json!(0), json!(1))
    );
    s.assert_unchanged(&before).await;
    s.stop().await;
}

/// Six articles; `skip`/`limit`/`sort`/`projection` and `explain` against them.
#[tokio::test]
async fn query_filters_sorts_pages_projects_and_explains() {
    let s = Server::start().await;
    for (id, year, title) in [
        ("a1", 1995, "One"),
        ("a2", 2001, "Two"),
        ("a3", 2010, "Three"),
        ("a4", 2005, "Four"),
        ("a5", 2020, "Five"),
        ("a6", 2010, "Six"),
    ] {
        s.put(
            &format!("articles/{id}"),
            json!({"year": year, "title": title, "body": "..."}),
        )
        .await;
    }
    let seq = s.seq().await;

    let all = s
        .query(json!({"collection": "articles", "filter": {"year": {"$gte": 2000}}, "sort": {"year": -1}}))
        .await;
    let ids: Vec<&str> = all["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap())
        .collect();
    // Ties (2010) are ordered by _id.
    assert_eq!(ids, ["a5", "a3", "a6", "a4", "a2"]);
    assert_eq!(all["seq"], seq);
    assert!(all.get("explain").is_none());

    let page = s
        .query(json!({
            "collection": "articles", "filter": {"year": {"$gte": 2000}}, "sort": {"year": -1},
            "skip": 1, "limit": 2, "projection": {"title": 1}, "explain": true
        }))
        .await;
    assert_eq!(
        page["docs"],
        json!([{"_id": "a3", "title": "Three"}, {"_id": "a6", "title": "Six"}])
    );
    let ex = &page["explain"];
    let plan_type = ex["plan"]["type"].as_str().expect("plan type");
    assert!(
        ["index", "ordered_index", "union", "ids", "collection_scan"].contains(&plan_type),
        "{ex}"
    );
    // `year` is indexed automatically, so this is not a scan.
    assert_ne!(plan_type, "collection_scan", "{ex}");
    assert_eq!(ex["returned"], 2);
    assert!(
        ex["keysExamined"].is_u64() && ex["docsExamined"].is_u64(),
        "{ex}"
    );

    // Point lookups by _id use the ids plan.
    let by_id = s
        .query(json!({"collection": "articles", "filter": {"_id": {"$in": ["a2", "a9"]}}, "explain": true}))
        .await;
    assert_eq!(by_id["docs"].as_array().unwrap().len(), 1);
    assert_eq!(by_id["explain"]["plan"]["type"], "ids");

    // limit 0 means no limit; an empty collection gives no documents.
    let r = s.query(json!({"collection": "articles", "limit": 0})).await;
    assert_eq!(r["docs"].as_array().unwrap().len(), 6);
    let r = s.query(json!({"collection": "nothing"})).await;
    assert_eq!(r["docs"], json!([]));
    s.stop().await;
}

#[tokio::test]
async fn commit_applies_all_writes_atomically_with_one_seq() {
    let s = Server::start().await;
    s.put("c/b", json!({"n": 1})).await;
    s.put("c/z", json!({"gone": false})).await;
    let r = s
        .json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [
                {"op": "put", "collection": "c", "id": "a", "doc": {"n": 1}, "ifVersion": 0},
                {"op": "insert", "collection": "c", "doc": {"n": 2}},
                {"op": "update", "collection": "c", "id": "b", "update": {"$inc": {"n": 1}}, "upsert": true},
                {"op": "update", "collection": "c", "id": "a", "update": {"$inc": {"n": 10}}},
                {"op": "delete", "collection": "c", "id": "z", "ifVersion": 1},
                {"op": "delete", "collection": "c", "id": "never"},
            ]}),
        )
        .await
        .ok(200);
    assert_eq!(r["seq"], 3);
    let res = r["results"].as_array().unwrap();
    assert_eq!(res.len(), 6);
    assert_eq!(
        res[0],
        json!({"op": "insert", "collection": "c", "id": "a", "version": 1})
    );
    assert_eq!(res[1]["op"], "insert");
    let gen = res[1]["id"].as_str().unwrap().to_string();
    assert!(is_generated_id(&gen));
    assert_eq!(
        res[2],
        json!({"op": "update", "collection": "c", "id": "b", "version": 2})
    );
    // Later writes see earlier ones: the update of a sees the put.
    assert_eq!(
        res[3],
        json!({"op": "update", "collection": "c", "id": "a", "version": 2})
    );
    assert_eq!(
        res[4],
        json!({"op": "delete", "collection": "c", "id": "z", "version": 1})
    );
    assert_eq!(
        res[5],
        json!({"op": null, "collection": "c", "id": "never", "version": 0})
    );
    assert_eq!(s.seq().await, 3, "one seq for the whole commit");

    assert_eq!(s.get("c/a").await.ok(200), json!({"_id": "a", "n": 11}));
    assert_eq!(s.get("c/b").await.ok(200), json!({"_id": "b", "n": 2}));
    assert_eq!(s.get(&format!("c/{gen}")).await.ok(200)["n"], 2);
    s.get("c/z").await.err(404, "not_found");

    // A commit that changes nothing takes no seq.
    let r = s
        .json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [{"op": "delete", "collection": "c", "id": "z"}]}),
        )
        .await
        .ok(200);
    assert_eq!(r["seq"], 3);
    assert_eq!(s.seq().await, 3);
    s.stop().await;
}

#[tokio::test]
async fn commit_with_a_failing_if_version_applies_nothing() {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1})).await;
    s.put("c/b", json!({"n": 1})).await;
    let before = s.snapshot(&["c/a", "c/b", "c/new"]).await;
    let e = s
        .json(
            Method::POST,
            "/v1/commit",
            &json!({"writes": [
                {"op": "put", "collection": "c", "id": "new", "doc": {"n": 1}},
                {"op": "update", "collection": "c", "id": "a", "update": {"$inc": {"n": 1}}},
                {"op": "delete", "collection": "c", "id": "b", "ifVersion": 5},
            ]}),
        )
        .await;
    let err = e.err(409, "version_conflict");
    assert_eq!(err["write"], 2);
    assert_eq!(
        (err["expected"].clone(), err["actual"].clone()),
        (json!(5), json!(1))
    );
    s.assert_unchanged(&before).await;

    // An insert of an existing id fails the commit the same way.
    s.json(
        Method::POST,
        "/v1/commit",
        &json!({"writes": [
            {"op": "put", "collection": "c", "id": "new", "doc": {"n": 1}},
            {"op": "insert", "collection": "c", "id": "a", "doc": {}},
        ]}),
    )
    .await
    .err(409, "already_exists");
    s.assert_unchanged(&before).await;

    // So does an update that fails while applying (after an earlier write succeeded).
    s.put("c/str", json!({"s": "text"})).await;
    let before = s.snapshot(&["c/a", "c/b", "c/new", "c/str"]).await;
    s.json(
        Method::POST,
        "/v1/commit",
        &json!({"writes": [
            {"op": "update", "collection": "c", "id": "a", "update": {"$inc": {"n": 1}}},
            {"op": "update", "collection": "c", "id": "str", "update": {"$inc": {"s": 1}}},
        ]}),
    )
    .await
    .err(400, "type_mismatch");
    s.assert_unchanged(&before).await;
    s.stop().await;
}

#[tokio::test]
async fn sub_collections_are_addressed_by_path() {
    let s = Server::start().await;
    s.put("rooms/r1", json!({"name": "lobby"})).await;
    let r = s
        .put("rooms/r1/messages/m7", json!({"text": "hi", "n": 7}))
        .await;
    assert_eq!(r["id"], "m7");
    s.put("rooms/r2/messages/m7", json!({"text": "other room"}))
        .await;
    let r = s
        .json(
            Method::POST,
            "/v1/docs/rooms/r1/messages",
            &json!({"text": "generated"}),
        )
        .await
        .ok(201);
    assert!(is_generated_id(r["id"].as_str().unwrap()));

    assert_eq!(
        s.get("rooms/r1/messages/m7").await.ok(200),
        json!({"_id": "m7", "text": "hi", "n": 7})
    );
    let msgs = s
        .query(json!({"collection": "rooms/r1/messages", "sort": {"text": 1}}))
        .await;
    let texts: Vec<&str> = msgs["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["generated", "hi"]);
    // The parent collection holds only the room.
    let rooms = s.query(json!({"collection": "rooms"})).await;
    assert_eq!(rooms["docs"], json!([{"_id": "r1", "name": "lobby"}]));

    // Deleting the parent document leaves its sub-collection alone.
    s.send(s.req(Method::DELETE, "/v1/docs/rooms/r1"))
        .await
        .ok(200);
    s.get("rooms/r1/messages/m7").await.ok(200);
    s.json(
        Method::PATCH,
        "/v1/docs/rooms/r1/messages/m7",
        &json!({"$set": {"read": true}}),
    )
    .await
    .ok(200);
    s.send(s.req(Method::DELETE, "/v1/docs/rooms/r1/messages/m7"))
        .await
        .ok(200);
    s.get("rooms/r1/messages/m7").await.err(404, "not_found");
    assert_eq!(
        s.get("rooms/r2/messages/m7").await.ok(200)["text"],
        "other room"
    );
    s.stop().await;
}

#[tokio::test]
async fn bulk_counts_lines_and_reports_per_line_errors() {
    let s = Server::start().await;
    s.put("b/str", json!({"s": "x"})).await;
    let body = concat!(
        "{\"op\":\"put\",\"collection\":\"b\",\"id\":\"1\",\"doc\":{\"n\":1}}\n",
        "{not json\n",
        "{\"op\":\"update\",\"collection\":\"b\",\"id\":\"missing\",\"update\":{\"$set\":{\"a\":1}}}\n",
        "\n",
        "   \r\n",
        "{\"op\":\"frobnicate\",\"collection\":\"b\",\"id\":\"x\"}\n",
        "{\"op\":\"update\",\"collection\":\"b\",\"id\":\"str\",\"update\":{\"$inc\":{\"s\":1}}}\n",
        "{\"op\":\"put\",\"collection\":\"b\",\"id\":\"3\",\"doc\":[1]}\n",
        "{\"op\":\"update\",\"collection\":\"b\",\"id\":\"1\",\"update\":{\"$inc\":{\"n\":1}}}\r\n",
        "{\"op\":\"insert\",\"collection\":\"b\",\"id\":\"2\",\"doc\":{\"n\":2}}",
    );
    let before = s.snapshot(&["b/str", "b/missing", "b/x", "b/3"]).await;
    let r = s
        .send(
            s.req(Method::POST, "/v1/bulk")
                .header("content-type", "application/x-ndjson")
                .body(body),
        )
        .await
        .ok(200);
    // Blank and whitespace-only lines are skipped and not counted.
    assert_eq!(r["lines"], 8, "{r}");
    assert_eq!(r["applied"], 3, "{r}");
    assert_eq!(r["failed"], 5, "{r}");
    let errs: Vec<(u64, &str)> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
            (e["line"].as_u64().unwrap(), e["code"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        errs,
        [
            (2, "bad_json"),
            (3, "not_found"),
            (4, "bad_request"),
            (5, "type_mismatch"),
            (6, "bad_document"),
        ]
    );
    for (_, code) in &errs {
        assert!(table_status(code).is_some(), "{code} not in the table");
    }
    // Three commits: put 1, update 1, insert 2.
    assert_eq!(r["seq"], before.seq + 3);
    assert_eq!(s.seq().await, before.seq + 3);
    assert_eq!(s.get("b/1").await.ok(200), json!({"_id": "1", "n": 2}));
    // The last line had no trailing newline and was still applied.
    assert_eq!(s.get("b/2").await.ok(200), json!({"_id": "2", "n": 2}));
    // The failed lines changed nothing.
    let after = s.snapshot(&["b/str", "b/missing", "b/x", "b/3"]).await;
    assert_eq!(after.docs, before.docs);

    // An empty body is zero lines.
    let r = s
        .send(s.req(Method::POST, "/v1/bulk").body(""))
        .await
        .ok(200);
    assert_eq!(
        (r["lines"].clone(), r["applied"].clone()),
        (json!(0), json!(0))
    );
    s.stop().await;
}

/// Streamed bodies: lines that straddle chunk boundaries are reassembled, and a line over 2 MiB
/// fails alone while the lines around it apply.
#[tokio::test]
async fn bulk_reassembles_split_lines_and_fails_an_over_long_line_alone() {
    let s = Server::start().await;
    let l1 = r#"{"op":"put","collection":"k","id":"1","doc":{"n":1}}"#;
    let l2 = r#"{"op":"put","collection":"k","id":"2","doc":{"n":2}}"#;
    let text = format!("{l1}\n{l2}\n");
    // Chunked transfer encoding, cut in the middle of each line.
    let b = text.as_bytes();
    let r = bulk_chunked(&s, &[&b[..10], &b[10..60], &b[60..]]).await;
    assert_eq!(
        (r["lines"].clone(), r["applied"].clone()),
        (json!(2), json!(2)),
        "{r}"
    );
    assert_eq!(s.get("k/2").await.ok(200)["n"], 2);

    let long = format!(
        r#"{{"op":"put","collection":"k","id":"big","doc":{{"s":"{}"}}}}"#,
        "x".repeat(2 * MIB + 10)
    );
    let l3 = r#"{"op":"put","collection":"k","id":"3","doc":{"n":3}}"#;
    let body = format!("{l1}\n{long}\n{l3}\n");
    let r = s
        .send(s.req(Method::POST, "/v1/bulk").body(body))
        .await
        .ok(200);
    assert_eq!(
        (
            r["lines"].clone(),
            r["applied"].clone(),
            r["failed"].clone()
        ),
        (json!(3), json!(2), json!(1)),
        "{}",
        r["errors"]
    );
    assert_eq!(r["errors"][0]["line"], 2);
    assert_eq!(r["errors"][0]["code"], "body_too_large");
    s.get("k/big").await.err(404, "not_found");
    assert_eq!(s.get("k/3").await.ok(200)["n"], 3);
    s.stop().await;
}

/// Sends `pieces` to `/v1/bulk` as the chunks of a chunked request body.
async fn bulk_chunked(s: &Server, pieces: &[&[u8]]) -> Value {
    let mut body = Vec::new();
    for piece in pieces {
        body.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        body.extend_from_slice(piece);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let head = format!(
        "POST /v1/bulk HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\
         content-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n",
        s.addr
    );
    s.raw_exchange(head.as_bytes(), &body).await.ok(200)
}

/// A line over 2 MiB fails with `body_too_large` however the body is cut into chunks, including
/// when its last bytes arrive together with its newline.
#[tokio::test]
async fn bulk_over_long_lines_fail_whatever_the_chunking() {
    let s = Server::start().await;
    // A valid write padded with whitespace to just over 2 MiB: only its length is wrong.
    let write = br#"{"op":"put","collection":"k","id":"padded","doc":{"n":1}}"#;
    let mut long = write.to_vec();
    long.resize(2 * MIB + 50, b' ');
    let good = br#"{"op":"put","collection":"k","id":"ok","doc":{"n":1}}"#;
    let cut = 2 * MIB - 10; // the first chunk alone is within the limit
    let r = bulk_chunked(
        &s,
        &[&long[..cut], &[&long[cut..], b"\n", good, b"\n"].concat()],
    )
    .await;
    assert_eq!(
        (
            r["lines"].clone(),
            r["applied"].clone(),
            r["failed"].clone()
        ),
        (json!(2), json!(1), json!(1)),
        "{r}"
    );
    assert_eq!(r["errors"][0]["line"], 1);
    assert_eq!(r["errors"][0]["code"], "body_too_large");
    s.get("k/padded").await.err(404, "not_found");
    s.get("k/ok").await.ok(200);

    // The same line in many small chunks, and as the final line without a newline.
    let pieces: Vec<&[u8]> = long.chunks(64 << 10).collect();
    let r = bulk_chunked(&s, &pieces).await;
    assert_eq!(
        (r["lines"].clone(), r["failed"].clone()),
        (json!(1), json!(1)),
        "{r}"
    );
    assert_eq!(r["errors"][0]["code"], "body_too_large");
    s.get("k/padded").await.err(404, "not_found");
    s.stop().await;
}

/// Parse errors are known at once and commit errors later; the response still lists the first
/// 100 errors by line, in line order, and counts the rest.
#[tokio::test]
async fn bulk_reports_the_first_100_errors_in_line_order() {
    let s = Server::start().await;
    let mut body = String::new();
    for i in 1..=300 {
        if i % 2 == 1 {
            // Fails when applied: the document does not exist.
            body.push_str(&format!(
                r#"{{"op":"update","collection":"e","id":"m{i}","update":{{"$set":{{"a":1}}}}}}"#
            ));
        } else {
            body.push_str("{bad json");
        }
        body.push('\n');
    }
    let before = s.seq().await;
    let r = s
        .send(s.req(Method::POST, "/v1/bulk").body(body))
        .await
        .ok(200);
    assert_eq!(
        (
            r["lines"].clone(),
            r["applied"].clone(),
            r["failed"].clone()
        ),
        (json!(300), json!(0), json!(300))
    );
    let errs = r["errors"].as_array().unwrap();
    assert_eq!(errs.len(), 100);
    for (i, e) in errs.iter().enumerate() {
        let line = i as u64 + 1;
        assert_eq!(e["line"], line, "{e}");
        let code = if line % 2 == 1 {
            "not_found"
        } else {
            "bad_json"
        };
        assert_eq!(e["code"], code, "{e}");
    }
    assert_eq!(s.seq().await, before);
    s.stop().await;
}

/// Polls `GET /v1/indexes` until `pred` holds.
async fn wait_indexes(s: &Server, collection: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = s
            .send(s.req(Method::GET, &format!("/v1/indexes?collection={collection}")))
            .await
            .ok(200);
        if pred(&l) {
            return l;
        }
        assert!(Instant::now() < deadline, "index state never reached: {l}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn composite_index_lifecycle() {
    let s = Server::start().await;
    // Documents that exist before the index, so the background build has work to do.
    let mut writes = Vec::new();
    for i in 0..300 {
        writes.push(
            json!({"op": "put", "collection": "ix", "id": format!("d{i:03}"),
                           "doc": {"g": if i % 3 == 0 { "a" } else { "b" }, "n": i}}),
        );
    }
    s.json(Method::POST, "/v1/commit", &json!({ "writes": writes }))
        .await
        .ok(200);

    // Equality on g and a range on n: the composite narrows both, a single-field index one.
    let q = json!({"collection": "ix", "filter": {"g": "a", "n": {"$gte": 100, "$lt": 200}}, "explain": true});
    let without = s.query(q.clone()).await;
    assert_eq!(without["docs"].as_array().unwrap().len(), 33);
    assert!(
        !without["explain"]["plan"].to_string().contains("g_n"),
        "{}",
        without["explain"]
    );
    assert!(
        without["explain"]["docsExamined"].as_u64().unwrap() > 33,
        "{}",
        without["explain"]
    );

    let def = json!({"collection": "ix", "name": "g_n", "fields": [
        {"path": "g", "order": 1}, {"path": "n", "order": 1}, {"path": "t", "order": -1}]});
    let created = s.json(Method::POST, "/v1/indexes", &def).await.ok(202);
    assert_eq!(created["name"], "g_n");
    assert_eq!(created["fields"], def["fields"]);
    assert_eq!(created["state"], "building");

    let listed = wait_indexes(&s, "ix", |l| l["composite"][0]["state"] == "ready").await;
    assert_eq!(listed["collection"], "ix");
    assert_eq!(listed["composite"].as_array().unwrap().len(), 1);
    assert_eq!(listed["composite"][0]["name"], "g_n");
    assert_eq!(listed["composite"][0]["fields"], def["fields"]);

    let with = s.query(q.clone()).await;
    assert_eq!(with["docs"], without["docs"], "same result with the index");
    let plan = &with["explain"]["plan"];
    assert_eq!(plan["type"], "index", "{plan}");
    assert!(
        plan["index"].as_str().is_some_and(|i| i.contains("g_n")),
        "{plan}"
    );
    // Only the matching documents are read.
    assert_eq!(with["explain"]["docsExamined"], 33, "{}", with["explain"]);
    assert_eq!(with["explain"]["returned"], 33);

    // Duplicate name: 409, the existing index unchanged.
    let seq = s.seq().await;
    let dup = json!({"collection": "ix", "name": "g_n",
                     "fields": [{"path": "x", "order": 1}, {"path": "y", "order": 1}]});
    s.json(Method::POST, "/v1/indexes", &dup)
        .await
        .err(409, "index_exists");
    let l = wait_indexes(&s, "ix", |_| true).await;
    assert_eq!(l["composite"], listed["composite"]);
    assert_eq!(s.seq().await, seq);

    // Malformed definitions.
    for bad in [
        json!({"collection": "ix", "name": "one", "fields": [{"path": "g"}]}),
        json!({"collection": "ix", "name": "o", "fields": [{"path": "g", "order": 2}, {"path": "n"}]}),
        json!({"collection": "ix", "fields": [{"path": "g"}, {"path": "n"}]}),
        json!({"collection": "ix", "name": "f", "fields": "g"}),
        json!({"collection": "ix", "name": "id", "fields": [{"path": "_id"}, {"path": "n"}]}),
    ] {
        s.json(Method::POST, "/v1/indexes", &bad)
            .await
            .err(400, "bad_index");
    }
    let l = wait_indexes(&s, "ix", |_| true).await;
    assert_eq!(l["composite"], listed["composite"]);

    // Drop; dropping again is 404.
    let r = s
        .send(s.req(Method::DELETE, "/v1/indexes/g_n?collection=ix"))
        .await
        .ok(200);
    assert_eq!(r, json!({"dropped": true}));
    let l = wait_indexes(&s, "ix", |_| true).await;
    assert_eq!(l["composite"], json!([]));
    s.send(s.req(Method::DELETE, "/v1/indexes/g_n?collection=ix"))
        .await
        .err(404, "index_not_found");
    let after = s.query(q).await;
    assert_eq!(after["docs"], without["docs"]);
    assert!(!after["explain"]["plan"].to_string().contains("g_n"));

    // The collection parameter is required.
    s.send(s.req(Method::GET, "/v1/indexes"))
        .await
        .err(400, "bad_request");
    s.send(s.req(Method::DELETE, "/v1/indexes/g_n"))
        .await
        .err(400, "bad_request");
    s.stop().await;
}

#[tokio::test]
async fn exemptions_replace_the_automatic_indexes() {
    let s = Server::start().await;
    for i in 0..20 {
        s.put(
            &format!("ex/d{i}"),
            json!({"body": format!("text {}", i % 4), "n": i}),
        )
        .await;
    }
    let q = json!({"collection": "ex", "filter": {"body": "text 1"}, "explain": true});
    let indexed = s.query(q.clone()).await;
    assert_ne!(indexed["explain"]["plan"]["type"], "collection_scan");
    assert_eq!(indexed["docs"].as_array().unwrap().len(), 5);

    let r = s
        .json(
            Method::PUT,
            "/v1/indexes/exemptions",
            &json!({"collection": "ex", "exemptions": ["body"]}),
        )
        .await
        .ok(200);
    assert_eq!(r, json!({"ok": true}));
    let l = wait_indexes(&s, "ex", |_| true).await;
    assert_eq!(l["exemptions"], json!(["body"]));
    let exempt = s.query(q.clone()).await;
    assert_eq!(exempt["explain"]["plan"]["type"], "collection_scan");
    assert_eq!(exempt["docs"], indexed["docs"]);

    // Lifting the exemption rebuilds the index before the planner uses it again.
    s.json(
        Method::PUT,
        "/v1/indexes/exemptions",
        &json!({"collection": "ex", "exemptions": []}),
    )
    .await
    .ok(200);
    let l = wait_indexes(&s, "ex", |l| l["building"] == json!([])).await;
    assert_eq!(l["exemptions"], json!([]));
    let again = s.query(q).await;
    assert_ne!(again["explain"]["plan"]["type"], "collection_scan");
    assert_eq!(again["docs"], indexed["docs"]);

    // Malformed exemptions.
    for bad in [
        json!({"collection": "ex", "exemptions": "body"}),
        json!({"collection": "ex", "exemptions": [1]}),
        json!({"exemptions": []}),
    ] {
        s.json(Method::PUT, "/v1/indexes/exemptions", &bad)
            .await
            .err(400, "bad_index");
    }
    let l = wait_indexes(&s, "ex", |_| true).await;
    assert_eq!(l["exemptions"], json!([]));
    s.stop().await;
}
