//! `POST /v1/commit` with `mutationId`: a retried commit applies exactly once, across restarts,
//! and answers with the original seq and results.

use super::*;

fn commit_body(mutation_id: Value) -> Value {
    json!({"mutationId": mutation_id, "writes": [
        {"op": "insert", "collection": "c", "doc": {"n": 1}},
        {"op": "update", "collection": "c", "id": "k", "update": {"$inc": {"n": 1}}, "upsert": true},
    ]})
}

#[tokio::test]
async fn a_retried_commit_with_a_mutation_id_applies_once() {
    let s = Server::start().await;
    let first = s
        .json(
            Method::POST,
            "/v1/commit",
            &commit_body(json!("client-1:7")),
        )
        .await
        .ok(200);
    assert_eq!(first.get("replayed"), None);
    let generated = first["results"][0]["id"].as_str().unwrap().to_string();
    assert!(is_generated_id(&generated));
    let again = s
        .json(
            Method::POST,
            "/v1/commit",
            &commit_body(json!("client-1:7")),
        )
        .await
        .ok(200);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["seq"], first["seq"]);
    // The same results, including the id the first attempt generated.
    assert_eq!(again["results"], first["results"]);
    assert_eq!(s.get("c/k").await.ok(200)["n"], 1);
    let all = s.query(json!({"collection": "c"})).await;
    assert_eq!(
        all["docs"].as_array().unwrap().len(),
        2,
        "one insert, not two"
    );
    assert_eq!(s.seq().await, first["seq"].as_u64().unwrap());

    // Remembered across a restart.
    let dir = s.stop().await;
    let s = Server::start_in(dir, common::nosync()).await;
    let after = s
        .json(
            Method::POST,
            "/v1/commit",
            &commit_body(json!("client-1:7")),
        )
        .await
        .ok(200);
    assert_eq!(after["replayed"], true);
    assert_eq!(after["results"], first["results"]);
    assert_eq!(s.get("c/k").await.ok(200)["n"], 1);

    // A new id applies; no id at all applies every time.
    s.json(
        Method::POST,
        "/v1/commit",
        &commit_body(json!("client-1:8")),
    )
    .await
    .ok(200);
    s.json(Method::POST, "/v1/commit", &commit_body(Value::Null))
        .await
        .ok(200);
    assert_eq!(s.get("c/k").await.ok(200)["n"], 3);
    s.stop().await;
}

#[tokio::test]
async fn bad_mutation_ids_are_refused_and_change_nothing() {
    let s = Server::start().await;
    for bad in [json!(7), json!(""), json!("x".repeat(129)), json!({"a": 1})] {
        s.json(Method::POST, "/v1/commit", &commit_body(bad))
            .await
            .err(400, "bad_request");
    }
    assert_eq!(s.seq().await, 0);
    s.get("c/k").await.err(404, "not_found");
    s.stop().await;
}
