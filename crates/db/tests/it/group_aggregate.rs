//! Pull aggregations over a collection group (`Db::aggregate_group`): every way (a count added
//! up per collection, `$min`/`$max` from a sorted group query, `$group` streamed over the
//! collections' matches merged in order, the held group result) returns
//! exactly the reference (`Pipeline::run` over the group's visible documents with `_path`, in
//! `_id` then `_path` order) on messy data, with and without a per-collection read rule; and a
//! count over a group reads index keys only and is not capped by the query result limit.
//!
//! `HERALD_PROPTEST_CASES` sets the number of cases (default 48).

use crate::planner::{doc, filter, open};
use herald_db::{DbError, PlanDescription, Restrict, Write, QUERY_DOCS_MAX};
use herald_query::pipeline::Pipeline;
use herald_query::Query;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Collections of group `m` at several depths (`r/a/m/b/m` comes after `r/a/m` but its paths
/// come before), and two that are not in it.
const COLLS: &[&str] = &[
    "m",
    "r/a/m",
    "r/a/m/b/m",
    "r/b/m",
    "x/y/z/w/m",
    "r/a/other",
    "mm",
];

fn put(c: &str, id: &str, doc: Value) -> Write {
    Write::Put {
        collection: c.into(),
        id: id.into(),
        doc,
        if_version: None,
    }
}

/// A read rule as the server builds one: nothing of `r/b/m`; elsewhere documents whose `g`
/// is not `"r1"` (ANDed into the filter it is given).
struct Rule {
    filter: Value,
}

impl Restrict for Rule {
    fn query_for(&self, collection: &str) -> Option<Query> {
        if collection == "r/b/m" {
            return None;
        }
        let filter = json!({"$and": [self.filter, {"g": {"$ne": "r1"}}]});
        Some(Query::parse(&json!({ "filter": filter })).unwrap())
    }
}

fn rule_visible(collection: &str, doc: &Value) -> bool {
    collection != "r/b/m" && doc.get("g") != Some(&json!("r1"))
}

/// The group's visible documents with `_path`, in the group's `_id`, `_path` order.
fn group_docs(
    store: &BTreeMap<(String, String), Value>,
    visible: &dyn Fn(&str, &Value) -> bool,
) -> Vec<Value> {
    let mut docs: Vec<(String, String, Value)> = store
        .iter()
        .filter(|((c, _), d)| c.rsplit('/').next() == Some("m") && visible(c, d))
        .map(|((c, id), d)| {
            let mut d = d.clone();
            let path = format!("{c}/{id}");
            d["_path"] = json!(path);
            (id.clone(), path, d)
        })
        .collect();
    docs.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    docs.into_iter().map(|(_, _, d)| d).collect()
}

fn tail() -> impl Strategy<Value = Vec<Value>> {
    let path = prop::sample::select(vec!["t", "b", "a", "g"]);
    prop_oneof![
        2 => Just(vec![json!({"$count": "n"})]),
        1 => Just(vec![
            json!({"$group": {"_id": null, "n": {"$sum": 1}, "c": {"$count": {}}}})
        ]),
        2 => (path.clone(), any::<bool>()).prop_map(|(p, max)| {
            let op = if max { "$max" } else { "$min" };
            vec![json!({"$group": {"_id": "x", "m": { op: format!("${p}") }}})]
        }),
        2 => path.clone().prop_map(|p| vec![
            json!({"$group": {"_id": format!("${p}"), "n": {"$sum": 1},
            "f": {"$first": "$_path"}, "p": {"$push": "$_path"}}})
        ]),
        1 => path.clone().prop_map(|p| vec![
            json!({"$unwind": format!("${p}")}),
            json!({"$project": {"_id": 0}}),
            json!({"$group": {"_id": null, "n": {"$count": {}}, "hi": {"$max": "$t"}, "l": {"$last": "$_path"}}})
        ]),
        1 => path.prop_map(|p| vec![
            json!({"$project": {"t": 1, "_path": 1}}),
            json!({"$sort": { p: -1 }}),
            json!({"$limit": 3})
        ]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)))]

    /// Whichever way `Db::aggregate_group` takes, it returns exactly the reference, with and
    /// without a read rule.
    #[test]
    fn every_way_over_a_group_returns_the_reference(
        messy in any::<bool>(),
        ops in prop::collection::vec((0..COLLS.len(), 0u8..8, prop::option::weighted(0.85, doc(false))), 0..40),
        later in prop::collection::vec((0..COLLS.len(), 0u8..8, any::<bool>().prop_flat_map(doc)), 0..6),
        key_bytes in prop::sample::select(vec![1usize, 128]),
        pipelines in prop::collection::vec((prop::option::of(filter()), tail()), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), key_bytes);
        let mut store = BTreeMap::new();
        let later = later.into_iter().filter(|(_, _, d)| messy || d.get("t").is_none_or(|t| !t.is_array() && !t.is_object())).map(|(c, i, d)| (c, i, Some(d)));
        for (c, i, d) in ops.into_iter().chain(later) {
            let (c, id) = (COLLS[c].to_string(), format!("d{i}"));
            let write = match d {
                Some(d) => {
                    let mut full = json!({"_id": id});
                    full.as_object_mut().unwrap().extend(d.as_object().unwrap().clone());
                    store.insert((c.clone(), id.clone()), full);
                    put(&c, &id, d)
                }
                None => {
                    store.remove(&(c.clone(), id.clone()));
                    Write::Delete { collection: c, id, if_version: None }
                }
            };
            db.commit(vec![write]).unwrap();
        }
        for (f, tail) in pipelines {
            let mut stages: Vec<Value> = f.iter().map(|f| json!({"$match": f})).collect();
            stages.extend(tail);
            let spec = Value::Array(stages);
            let p = Pipeline::parse(&spec).unwrap();
            let expected = p.run(group_docs(&store, &|_, _| true)).unwrap();
            let out = db.aggregate_group("m", &p, None).unwrap();
            prop_assert_eq!(&out.docs, &expected, "pipeline {} explain {:?}", spec, out.explain);
            let rule = Rule { filter: f.unwrap_or(json!({})) };
            let expected = p.run(group_docs(&store, &rule_visible)).unwrap();
            let out = db.aggregate_group("m", &p, Some(&rule)).unwrap();
            prop_assert_eq!(&out.docs, &expected, "restricted pipeline {} explain {:?}", spec, out.explain);
        }
    }
}

/// A count over a group past the query result cap: each collection's index range counted
/// key by key, no document read; with a read rule the documents are read, bounded by the
/// aggregation's own cap, not the query's; a `$group` streams past it too.
#[test]
fn a_group_count_reads_index_keys_past_the_query_cap() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    let rooms = 6;
    let per_room = QUERY_DOCS_MAX / 4;
    for r in 0..rooms {
        for chunk in (0..per_room).collect::<Vec<_>>().chunks(500) {
            let writes = chunk
                .iter()
                .map(|&i| {
                    put(
                        &format!("r/{r}/m"),
                        &format!("e{i:06}"),
                        json!({"t": i, "g": format!("r{}", i % 3)}),
                    )
                })
                .collect();
            db.commit(writes).unwrap();
        }
    }
    let p = Pipeline::parse(&json!([{"$match": {"t": {"$gte": 100}}}, {"$count": "n"}])).unwrap();
    let out = db.aggregate_group("m", &p, None).unwrap();
    let matching = rooms * (per_room - 100);
    assert_eq!(out.docs, vec![json!({"n": matching})]);
    assert_eq!(out.explain.docs_examined, 0, "{:?}", out.explain);
    assert_eq!(out.explain.keys_examined, matching, "{:?}", out.explain);
    match &out.explain.plan {
        PlanDescription::GroupMerge { collections, plans } => {
            assert_eq!(*collections, rooms);
            assert_eq!(plans.len(), 1, "{plans:?}");
        }
        other => panic!("{other:?}"),
    }
    // The whole group: document records counted, not decoded.
    let all = Pipeline::parse(&json!([{"$count": "n"}])).unwrap();
    let out = db.aggregate_group("m", &all, None).unwrap();
    assert_eq!(out.docs, vec![json!({"n": rooms * per_room})]);
    // A reader's rule: the documents are read, past the query cap.
    let rule = Rule {
        filter: json!({"t": {"$gte": 100}}),
    };
    let out = db.aggregate_group("m", &p, Some(&rule)).unwrap();
    let visible = rooms * (100..per_room).filter(|i| i % 3 != 1).count();
    assert_eq!(out.docs, vec![json!({"n": visible})]);
    assert!(out.explain.docs_examined > QUERY_DOCS_MAX);
    // The newest across the group reads about one entry per collection.
    let max = Pipeline::parse(&json!([{"$group": {"_id": null, "t": {"$max": "$t"}}}])).unwrap();
    let out = db.aggregate_group("m", &max, None).unwrap();
    assert_eq!(out.docs, vec![json!({"_id": null, "t": per_room - 1})]);
    assert!(out.explain.keys_examined <= 2 * rooms, "{:?}", out.explain);
    // A `$group` streams the group's matches past the query cap, in `_id`, `_path` order.
    let by_g = Pipeline::parse(&json!([
        {"$match": {"t": {"$lt": 1000}}},
        {"$group": {"_id": "$g", "n": {"$count": {}}, "first": {"$first": "$_path"}}},
        {"$sort": {"_id": 1}}
    ]))
    .unwrap();
    let out = db.aggregate_group("m", &by_g, None).unwrap();
    let want: Vec<Value> = (0..3)
        .map(|k| {
            let n = rooms * (0..1000).filter(|i| i % 3 == k).count();
            json!({"_id": format!("r{k}"), "n": n, "first": format!("r/0/m/e{k:06}")})
        })
        .collect();
    assert_eq!(out.docs, want);
    let everything =
        Pipeline::parse(&json!([{"$group": {"_id": "$g", "n": {"$count": {}}}}])).unwrap();
    let out = db.aggregate_group("m", &everything, None).unwrap();
    assert_eq!(out.docs.len(), 3);
    assert_eq!(
        out.explain.docs_examined,
        rooms * per_room,
        "{:?}",
        out.explain
    );
    // A pipeline that holds its input is still capped.
    let held = Pipeline::parse(&json!([{"$project": {"t": 1}}])).unwrap();
    match db.aggregate_group("m", &held, None) {
        Err(DbError::ResultTooLarge(n)) => assert_eq!(n, QUERY_DOCS_MAX),
        other => panic!("{other:?}"),
    }
}
