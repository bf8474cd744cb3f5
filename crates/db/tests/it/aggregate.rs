//! Pull aggregations (`Db::aggregate`): counts answered from index keys alone, `$max`/`$min`
//! from the first entry of an ordered index, `$group` streamed past the query result cap, and
//! the property that every way gives exactly the reference (`Pipeline::run` over the collection
//! in `_id` order) on messy data: mixed types, nulls, missing fields, arrays, objects, cut
//! strings, replaced and deleted documents.
//!
//! `HERALD_PROPTEST_CASES` sets the number of cases (default 48).

use crate::planner::{doc, filter, open, put, write};
use herald_db::{Db, DbError, PlanDescription, Write, QUERY_DOCS_MAX};
use herald_query::pipeline::Pipeline;
use proptest::prelude::*;
use serde_json::{json, Value};

fn pipeline(v: Value) -> Pipeline {
    Pipeline::parse(&v).unwrap()
}

fn events(db: &Db, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let writes: Vec<Write> = chunk
            .iter()
            .map(|&i| {
                put(
                    &format!("e{i:06}"),
                    json!({"ts": i, "kind": format!("k{}", i % 7)}),
                )
            })
            .collect();
        db.commit(writes).unwrap();
    }
}

/// A count of an index range reads keys only: one per match, no document.
#[test]
fn a_count_over_an_index_range_reads_no_document() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    events(&db, 3000);
    for spec in [
        json!([{"$match": {"ts": {"$gte": 1000, "$lt": 2500}}}, {"$count": "n"}]),
        json!([{"$match": {"ts": {"$gte": 1000, "$lt": 2500}}}, {"$group": {"_id": null, "n": {"$sum": 1}}}, {"$project": {"_id": 0}}]),
    ] {
        let out = db.aggregate("c", &pipeline(spec.clone()), None).unwrap();
        assert_eq!(out.docs, vec![json!({"n": 1500})], "{spec}");
        assert_eq!(out.explain.docs_examined, 0, "{spec}: {:?}", out.explain);
        assert_eq!(out.explain.keys_examined, 1500, "{spec}: {:?}", out.explain);
        assert_eq!(out.stages_in_query, 2);
    }
    // Everything: the document records are counted, not decoded.
    let out = db
        .aggregate("c", &pipeline(json!([{"$count": "n"}])), None)
        .unwrap();
    assert_eq!(out.docs, vec![json!({"n": 3000})]);
    assert_eq!(out.explain.plan, PlanDescription::CollectionScan);
    // Two predicates: not one range, so the documents are read (streamed).
    let spec = json!([{"$match": {"ts": {"$gte": 1000}, "kind": "k1"}}, {"$count": "n"}]);
    let out = db.aggregate("c", &pipeline(spec), None).unwrap();
    assert_eq!(
        out.docs,
        vec![json!({"n": (1000..3000).filter(|i| i % 7 == 1).count()})]
    );
    assert!(out.explain.docs_examined > 0);
}

/// The newest event by `$max` reads one index entry, whatever the collection's size.
#[test]
fn max_and_min_of_an_indexed_field_read_one_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    events(&db, 3000);
    let out = db
        .aggregate(
            "c",
            &pipeline(json!([{"$group": {"_id": null, "m": {"$max": "$ts"}}}])),
            None,
        )
        .unwrap();
    assert_eq!(out.docs, vec![json!({"_id": null, "m": 2999})]);
    assert!(out.explain.keys_examined <= 2, "{:?}", out.explain);
    let out = db
        .aggregate(
            "c",
            &pipeline(
                json!([{"$match": {"kind": "k3"}}, {"$group": {"_id": 1, "m": {"$min": "$ts"}}}]),
            ),
            None,
        )
        .unwrap();
    assert_eq!(out.docs, vec![json!({"_id": 1, "m": 3})]);
    // An array along the path: sort keys are not values, so the documents are read.
    db.commit(vec![put("z", json!({"ts": [5000, 1]}))]).unwrap();
    let out = db
        .aggregate(
            "c",
            &pipeline(json!([{"$group": {"_id": null, "m": {"$max": "$ts"}}}])),
            None,
        )
        .unwrap();
    assert_eq!(out.docs, vec![json!({"_id": null, "m": [5000, 1]})]);
    assert!(out.explain.docs_examined >= 3000, "{:?}", out.explain);
}

/// A `$group` or `$count` reads its input streamed, past the cap on a query's result; a
/// pipeline that would hold its input is still capped, with `ResultTooLarge`.
#[test]
fn groups_stream_past_the_query_result_cap() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    let n = QUERY_DOCS_MAX + 2000;
    events(&db, n);
    let spec = json!([{"$match": {"kind": {"$in": ["k1", "k2"]}}}, {"$group": {"_id": "$kind", "c": {"$count": {}}, "s": {"$sum": "$ts"}}}]);
    let out = db.aggregate("c", &pipeline(spec), None).unwrap();
    let want = |k: usize| {
        let ts: Vec<usize> = (0..n).filter(|i| i % 7 == k).collect();
        json!({"_id": format!("k{k}"), "c": ts.len(), "s": ts.iter().sum::<usize>()})
    };
    assert_eq!(out.docs, vec![want(1), want(2)]);
    let spec = json!([{"$match": {"ts": {"$gte": 0}}}, {"$project": {"ts": 1}}]);
    match db.aggregate("c", &pipeline(spec), None) {
        Err(DbError::ResultTooLarge(m)) => assert_eq!(m, QUERY_DOCS_MAX),
        other => panic!("{other:?}"),
    }
}

fn tail() -> impl Strategy<Value = Vec<Value>> {
    let path = prop::sample::select(vec!["t", "b", "a", "g", "a.k"]);
    prop_oneof![
        Just(vec![json!({"$count": "n"})]),
        Just(vec![
            json!({"$group": {"_id": null, "n": {"$sum": 1}, "c": {"$count": {}}}})
        ]),
        (path.clone(), any::<bool>()).prop_map(|(p, max)| {
            let op = if max { "$max" } else { "$min" };
            vec![json!({"$group": {"_id": "x", "m": { op: format!("${p}") }}})]
        }),
        path.clone().prop_map(|p| vec![
            json!({"$group": {"_id": format!("${p}"), "n": {"$sum": 1},
            "s": {"$sum": "$t"}, "f": {"$first": "$_id"}, "p": {"$push": "$b"}}})
        ]),
        path.prop_map(|p| vec![
            json!({"$unwind": format!("${p}")}),
            json!({"$project": {"_id": 0}}),
            json!({"$group": {"_id": null, "n": {"$count": {}}, "hi": {"$max": "$t"}}})
        ]),
        Just(vec![
            json!({"$project": {"t": 1}}),
            json!({"$sort": {"t": -1}}),
            json!({"$limit": 3})
        ]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)))]

    /// Whichever way `Db::aggregate` takes (an index count, an index extreme, a streamed group,
    /// or the held result), it returns exactly the reference.
    #[test]
    fn every_way_returns_the_reference(
        messy in any::<bool>(),
        first in prop::collection::vec(doc(false), 0..24),
        later in prop::collection::vec((0usize..24, prop::option::weighted(0.8, any::<bool>().prop_flat_map(doc))), 0..8),
        key_bytes in prop::sample::select(vec![1usize, 2, 128]),
        pipelines in prop::collection::vec((prop::option::of(filter()), tail()), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), key_bytes);
        let mut reference = std::collections::BTreeMap::new();
        write(&db, &mut reference, first.into_iter().enumerate().map(|(i, d)| (i, Some(d))).collect());
        let later = later.into_iter().filter(|(_, d)| messy || d.as_ref().is_none_or(|d| d.get("t").is_none_or(|t| !t.is_array() && !t.is_object()))).collect();
        write(&db, &mut reference, later);
        let stored: Vec<Value> = reference.into_values().collect();
        for (f, tail) in pipelines {
            let mut stages: Vec<Value> = f.into_iter().map(|f| json!({"$match": f})).collect();
            stages.extend(tail);
            let spec = Value::Array(stages);
            let p = pipeline(spec.clone());
            let expected = p.run(stored.clone()).unwrap();
            let out = db.aggregate("c", &p, None).unwrap();
            prop_assert_eq!(&out.docs, &expected, "pipeline {} explain {:?}", spec, out.explain);
        }
    }
}
