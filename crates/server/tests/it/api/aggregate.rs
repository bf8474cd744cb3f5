//! `POST /v1/aggregate` against a real server: a grouped answer with the snapshot's seq, the head
//! `$match` planned like a query (explain; a count of an index range reads no document), stage errors by code, and an end user's read rule
//! applied before the aggregation (a user's count counts only what the user may read).

use super::*;
use crate::auth::{admin_put, call, secure, token, ADMIN_KEY};

async fn aggregate(s: &Server, body: Value) -> Resp {
    s.json(Method::POST, "/v1/aggregate", &body).await
}

#[tokio::test]
async fn groups_sorts_and_counts_at_one_seq() {
    let s = Server::start().await;
    for (id, room, n) in [
        ("m1", "r1", 1),
        ("m2", "r1", 2),
        ("m3", "r2", 5),
        ("m4", "r3", 1),
    ] {
        s.put(&format!("msgs/{id}"), json!({"room": room, "n": n}))
            .await;
    }
    let r = aggregate(
        &s,
        json!({"collection": "msgs", "pipeline": [
            {"$match": {"n": {"$gte": 1}}},
            {"$group": {"_id": "$room", "count": {"$sum": 1}, "total": {"$sum": "$n"}, "avg": {"$avg": "$n"}}},
            {"$sort": {"total": -1}},
            {"$limit": 2}
        ]}),
    )
    .await
    .ok(200);
    assert_eq!(
        r,
        json!({"docs": [
            {"_id": "r2", "count": 1, "total": 5, "avg": 5.0},
            {"_id": "r1", "count": 2, "total": 3, "avg": 1.5}
        ], "seq": 4})
    );
    let r = aggregate(
        &s,
        json!({"collection": "msgs", "pipeline": [{"$count": "n"}]}),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"n": 4}]));
    // An empty pipeline is the collection in _id order.
    let r = aggregate(&s, json!({"collection": "msgs", "pipeline": []}))
        .await
        .ok(200);
    assert_eq!(r["docs"].as_array().unwrap().len(), 4);
    s.stop().await;
}

#[tokio::test]
async fn explain_shows_the_head_query_plan_and_the_stages_after_it() {
    let s = Server::start().await;
    for i in 0..6 {
        s.put(
            &format!("msgs/m{i}"),
            json!({"room": format!("r{}", i % 3)}),
        )
        .await;
    }
    let r = aggregate(
        &s,
        json!({"collection": "msgs", "explain": true, "pipeline": [
            {"$match": {"room": "r1"}}, {"$sort": {"_id": -1}}, {"$count": "n"}
        ]}),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"n": 2}]));
    let e = &r["explain"];
    assert_eq!(e["stagesInQuery"], 2, "{e}");
    assert_eq!(e["stages"], json!(["$count"]));
    assert_eq!(e["query"]["returned"], 2, "{e}");
    assert!(e["query"]["plan"]["type"].is_string(), "{e}");
    // A count of one index range reads keys only, and explain says so.
    let r = aggregate(
        &s,
        json!({"collection": "msgs", "explain": true, "pipeline": [
            {"$match": {"room": {"$in": ["r0", "r2"]}}}, {"$count": "n"}
        ]}),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"n": 4}]));
    let e = &r["explain"];
    assert_eq!(e["stagesInQuery"], 2, "{e}");
    assert_eq!(e["stages"], json!([]), "{e}");
    assert_eq!(e["query"]["keysExamined"], 4, "{e}");
    assert_eq!(e["query"]["docsExamined"], 0, "{e}");
    s.stop().await;
}

#[tokio::test]
async fn bad_pipelines_are_refused_by_code_and_name() {
    let s = Server::start().await;
    s.put("c/a", json!({"n": 1})).await;
    let cases = [
        (
            json!([{"$lookup": {"from": "x"}}]),
            "unknown_operator",
            "$lookup",
        ),
        (
            json!([{"$group": {"_id": null, "s": {"$stdDevPop": "$n"}}}]),
            "unknown_operator",
            "$stdDevPop",
        ),
        (
            json!([{"$project": {"x": {"$add": [1, 2]}}}]),
            "unknown_operator",
            "$add",
        ),
        (
            json!([{"$group": {"s": {"$sum": 1}}}]),
            "bad_pipeline",
            "_id",
        ),
        (json!([{"$limit": 0}]), "bad_pipeline", "$limit"),
        (
            json!([{"$match": {"n": {"$bogus": 1}}}]),
            "unknown_operator",
            "$bogus",
        ),
        (json!([{"$sort": {"n": 2}}]), "bad_sort", "n"),
    ];
    for (pipeline, code, named) in cases {
        let r = aggregate(&s, json!({"collection": "c", "pipeline": pipeline})).await;
        let body = r.err(400, code);
        assert!(body["message"].as_str().unwrap().contains(named), "{body}");
    }
    aggregate(&s, json!({"collection": "c", "pipeline": {"$match": {}}}))
        .await
        .err(400, "bad_request");
    s.stop().await;
}

#[tokio::test]
async fn read_rules_apply_before_the_aggregation() {
    let s = secure().await;
    admin_put(&s, "notes/a1", json!({"owner": "alice", "n": 1})).await;
    admin_put(&s, "notes/a2", json!({"owner": "alice", "n": 2})).await;
    admin_put(&s, "notes/b1", json!({"owner": "bob", "n": 10})).await;
    admin_put(
        &s,
        "notes/b2",
        json!({"owner": "bob", "public": true, "n": 100}),
    )
    .await;
    let alice = token("alice", 60, json!({}));
    let agg = |cred: String, pipeline: Value| {
        let s = &s;
        async move {
            call(
                s,
                &cred,
                Method::POST,
                "/v1/aggregate",
                Some(json!({"collection": "notes", "pipeline": pipeline})),
            )
            .await
        }
    };
    let sum = json!([{"$group": {"_id": null, "n": {"$sum": 1}, "total": {"$sum": "$n"}}}]);
    let r = agg(alice.clone(), sum.clone()).await.ok(200);
    assert_eq!(r["docs"], json!([{"_id": null, "n": 3, "total": 103}]));
    let r = agg(ADMIN_KEY.to_string(), sum).await.ok(200);
    assert_eq!(r["docs"], json!([{"_id": null, "n": 4, "total": 113}]));
    // The user's $match cannot widen the rule, and skip counts readable documents only.
    let r = agg(
        alice.clone(),
        json!([{"$match": {"$or": [{"owner": "bob"}, {"n": {"$gte": 0}}]}}, {"$skip": 1}, {"$count": "c"}]),
    )
    .await
    .ok(200);
    assert_eq!(r["docs"], json!([{"c": 2}]));
    let r = call(
        &s,
        &alice,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collection": "notes", "pipeline": [], "explain": true})),
    )
    .await;
    r.err(403, "permission_denied");
    let r = call(
        &s,
        &alice,
        Method::POST,
        "/v1/aggregate",
        Some(json!({"collection": "secret", "pipeline": [{"$count": "n"}]})),
    )
    .await;
    r.err(403, "permission_denied");
    s.stop().await;
}
