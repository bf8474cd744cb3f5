//! Whole-pipeline tests: stage composition, the head query split and stage errors.

use super::*;
use crate::limits::UNWIND_OUTPUT_MAX;
use herald_value::json;

fn run(pipeline: Value, docs: Vec<Value>) -> Result<Vec<Value>, QueryError> {
    Pipeline::parse(&pipeline)?.run(docs)
}

fn sales() -> Vec<Value> {
    vec![
        json!({"_id": "a", "item": "x", "qty": 2, "price": 10, "tags": ["p", "q"]}),
        json!({"_id": "b", "item": "y", "qty": 1, "price": 2.5, "tags": ["q"]}),
        json!({"_id": "c", "item": "x", "qty": 5, "price": 10}),
        json!({"_id": "d", "item": "z", "qty": 3, "tags": []}),
    ]
}

#[test]
fn match_group_sort_limit() {
    let out = run(
        json!([
            {"$match": {"qty": {"$gte": 2}}},
            {"$group": {"_id": "$item", "n": {"$sum": 1}, "qty": {"$sum": "$qty"}, "avg": {"$avg": "$price"}}},
            {"$sort": {"qty": -1}},
            {"$limit": 1}
        ]),
        sales(),
    )
    .unwrap();
    assert_eq!(
        out,
        vec![json!({"_id": "x", "n": 2, "qty": 7, "avg": 10.0})]
    );
}

#[test]
fn unwind_then_group_counts_tags() {
    let out = run(
        json!([{"$unwind": "$tags"}, {"$group": {"_id": "$tags", "ids": {"$push": "$_id"}}}]),
        sales(),
    )
    .unwrap();
    assert_eq!(
        out,
        vec![
            json!({"_id": "p", "ids": ["a"]}),
            json!({"_id": "q", "ids": ["a", "b"]})
        ]
    );
}

#[test]
fn count_skip_project() {
    let out = run(json!([{"$skip": 1}, {"$count": "n"}]), sales()).unwrap();
    assert_eq!(out, vec![json!({"n": 3})]);
    assert_eq!(
        run(json!([{"$match": {"no": 1}}, {"$count": "n"}]), sales()).unwrap(),
        Vec::<Value>::new()
    );
    let out = run(
        json!([{"$limit": 1}, {"$project": {"_id": 0, "what": "$item"}}]),
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![json!({"what": "x"})]);
}

#[test]
fn head_query_covers_match_sort_skip_limit() {
    let p = Pipeline::parse(&json!([
        {"$match": {"qty": {"$gt": 1}}}, {"$sort": {"qty": 1}}, {"$skip": 1}, {"$limit": 1},
        {"$project": {"qty": 1}}
    ]))
    .unwrap();
    let (q, n) = p.head_query(10_000);
    assert_eq!(n, 4);
    let head = q.run(&sales());
    assert_eq!(p.run_from(n, head).unwrap(), p.run(sales()).unwrap());
    assert_eq!(p.run(sales()).unwrap(), vec![json!({"_id": "d", "qty": 3})]);
    // A limit over the database's cap stays in the pipeline.
    let p = Pipeline::parse(&json!([{"$match": {}}, {"$limit": 20}])).unwrap();
    assert_eq!(p.head_query(10).1, 1);
    // Without a head $match the whole collection is the input.
    let p = Pipeline::parse(&json!([{"$group": {"_id": null}}])).unwrap();
    assert_eq!(p.head_query(10).1, 0);
}

#[test]
fn errors_name_the_stage_and_have_codes() {
    let code = |p: Value| Pipeline::parse(&p).unwrap_err().code();
    let e = Pipeline::parse(&json!([{"$lookup": {}}])).unwrap_err();
    assert_eq!(e.code(), "unknown_operator");
    assert!(e.to_string().contains("$lookup"), "{e}");
    assert_eq!(code(json!({"$match": {}})), "bad_pipeline");
    assert_eq!(code(json!([{"$match": {}, "$limit": 1}])), "bad_pipeline");
    assert_eq!(code(json!([{"$limit": 0}])), "bad_pipeline");
    assert_eq!(code(json!([{"$skip": -1}])), "bad_pipeline");
    assert_eq!(code(json!([{"$count": "a.b"}])), "bad_pipeline");
    assert_eq!(
        code(json!([{"$match": {"a": {"$foo": 1}}}])),
        "unknown_operator"
    );
    assert_eq!(code(json!([{"$match": 5}])), "bad_filter");
    assert_eq!(code(json!([{"$sort": {"a": 2}}])), "bad_sort");
    assert_eq!(code(json!([{"$sort": {}}])), "bad_sort");
    let long: Vec<Value> = (0..=PIPELINE_STAGES_MAX)
        .map(|_| json!({"$skip": 0}))
        .collect();
    assert_eq!(code(Value::Array(long)), "limit_exceeded");
}

#[test]
fn blocking_stages_are_bounded_by_bytes() {
    let big = "x".repeat(1 << 20);
    let docs: Vec<Value> = (0..=BLOCKING_STAGE_BYTES_MAX >> 20)
        .map(|i| json!({"_id": i, "s": big}))
        .collect();
    let e = run(json!([{"$sort": {"s": 1}}]), docs.clone()).unwrap_err();
    assert_eq!(e.code(), "limit_exceeded");
    assert!(e.to_string().contains("BLOCKING_STAGE_BYTES_MAX"));
    let e = run(
        json!([{"$group": {"_id": "$_id", "s": {"$first": "$s"}}}]),
        docs,
    )
    .unwrap_err();
    assert!(e.to_string().contains("BLOCKING_STAGE_BYTES_MAX"), "{e}");
}

#[test]
fn growing_stages_are_bounded_as_they_build() {
    // Each $project doubles the documents: without a bound, 30 of them would need 2^30 copies.
    let mut stages = vec![json!({"$match": {}})];
    for _ in 0..30 {
        stages.push(json!({"$project": {"_id": 0, "a": "$$ROOT", "b": "$$ROOT"}}));
    }
    let docs = vec![json!({"_id": 1, "s": "x".repeat(1000)})];
    let e = run(Value::Array(stages), docs).unwrap_err();
    assert!(
        e.to_string().contains("$project") && e.to_string().contains("BLOCKING_STAGE_BYTES_MAX"),
        "{e}"
    );
    // $unwind of many documents with large arrays.
    let arr: Vec<Value> = (0..UNWIND_OUTPUT_MAX).map(Value::from).collect();
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": i, "a": arr, "pad": "y".repeat(300)}))
        .collect();
    let e = run(json!([{"$unwind": "$a"}]), docs).unwrap_err();
    assert!(e.to_string().contains("$unwind"), "{e}");
}
