//! Property tests of the query core: complementary filters, sort order, updates that the
//! filter describing them then matches, and aggregation pipelines (the head-query split the server
//! uses agrees with the whole pipeline; order-insensitive accumulators ignore input order). Case counts scale with `HERALD_PROPTEST_CASES`
//! (default 256 per property; the slow suite runs more).

use herald_query::pipeline::Pipeline;
use herald_query::{Filter, Query, Sort, Update};
use herald_value::{compare, Map, Value};
use proptest::prelude::*;
use serde_json::json;
use std::cmp::Ordering;

fn cases() -> u32 {
    std::env::var("HERALD_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

const FIELDS: &[&str] = &["a", "b", "c"];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(Value::from),
        (-3i64..4).prop_map(|i| json!(i as f64 + 0.5)),
        prop::sample::select(vec!["", "x", "y", "xy"]).prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..3).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

fn doc(id: usize) -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(FIELDS), value()), 0..4).prop_map(move |kv| {
        let mut m = Map::new();
        m.insert("_id".into(), json!(format!("d{id:02}")));
        for (k, v) in kv {
            m.insert(k.to_string(), v);
        }
        Value::Object(m)
    })
}

fn docs() -> impl Strategy<Value = Vec<Value>> {
    (0usize..12).prop_flat_map(|n| (0..n).map(doc).collect::<Vec<_>>())
}

fn path() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "a.b", "a.c", "b.a", "a.0", "c.a.b"]).prop_map(String::from)
}

fn leaf_filter() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec!["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]);
    prop_oneof![
        (path(), value()).prop_map(|(p, v)| json!({ p: v })),
        (path(), op, scalar()).prop_map(|(p, op, v)| json!({ p: { op: v } })),
        (path(), prop::collection::vec(scalar(), 0..3), any::<bool>())
            .prop_map(|(p, vs, neg)| json!({ p: { if neg { "$nin" } else { "$in" }: vs } })),
        (path(), any::<bool>()).prop_map(|(p, b)| json!({ p: { "$exists": b } })),
        (
            path(),
            prop::sample::select(vec!["number", "string", "array", "object", "null", "bool"])
        )
            .prop_map(|(p, t)| json!({ p: { "$type": t } })),
        (path(), 0usize..3).prop_map(|(p, n)| json!({ p: { "$size": n } })),
        (path(), scalar()).prop_map(|(p, v)| json!({ p: { "$elemMatch": { "$eq": v } } })),
        (path(), scalar()).prop_map(|(p, v)| json!({ p: { "$not": { "$lt": v } } })),
        path().prop_map(|p| json!({ p: { "$regex": "^x" } })),
    ]
}

fn filter() -> impl Strategy<Value = Value> {
    leaf_filter().prop_recursive(2, 8, 3, |inner| {
        let list = prop::collection::vec(inner, 1..3);
        prop_oneof![
            list.clone().prop_map(|fs| json!({ "$and": fs })),
            list.clone().prop_map(|fs| json!({ "$or": fs })),
            list.prop_map(|fs| json!({ "$nor": fs })),
        ]
    })
}

fn sort_spec() -> impl Strategy<Value = Value> {
    prop::collection::vec((path(), prop::sample::select(vec![1, -1])), 1..3).prop_map(|keys| {
        let mut m = Map::new();
        for (k, d) in keys {
            m.insert(k, json!(d));
        }
        Value::Object(m)
    })
}

/// A pipeline whose head (a `$match`, `$sort`, `$skip`, `$limit`, each maybe) a database can run
/// as a query, followed by a `$group` over the result.
fn head_and_group() -> impl Strategy<Value = Value> {
    (
        prop::option::of(filter()),
        prop::option::of(sort_spec()),
        prop::option::of(0usize..4),
        prop::option::of(1usize..6),
        prop::sample::select(vec!["$a", "$b", "$a.b"]),
    )
        .prop_map(|(f, s, skip, limit, key)| {
            let mut stages = Vec::new();
            if let Some(f) = f {
                stages.push(json!({ "$match": f }));
            }
            if let Some(s) = s {
                stages.push(json!({ "$sort": s }));
            }
            if let Some(n) = skip {
                stages.push(json!({ "$skip": n }));
            }
            if let Some(n) = limit {
                stages.push(json!({ "$limit": n }));
            }
            stages.push(
                json!({"$group": {"_id": key, "n": {"$sum": 1}, "f": {"$first": "$_id"},
                "p": {"$push": "$c"}, "lo": {"$min": "$b"}}}),
            );
            Value::Array(stages)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Running the pipeline's head as a query and the rest in memory (what the server does)
    /// gives the whole pipeline's answer over the collection in `_id` order, and so does
    /// streaming the head's result through the stages after it.
    #[test]
    fn pipeline_head_query_split_agrees_with_the_whole_pipeline(spec in head_and_group(), ds in docs()) {
        let p = Pipeline::parse(&spec).unwrap();
        let (q, covered): (Query, usize) = p.head_query(usize::MAX);
        let head = q.run(&ds);
        let split = p.run_from(covered, head.clone()).unwrap();
        let whole = p.run(ds).unwrap();
        // Streaming the head's result one document at a time gives the same answer.
        if let Some(mut s) = p.streaming(covered) {
            for d in head {
                s.push(d).unwrap();
            }
            prop_assert_eq!(s.finish().unwrap(), whole.clone());
        }
        prop_assert_eq!(split, whole);
    }

    /// `$sum`, `$min`, `$max` and `$count` do not depend on the input order, and neither does the
    /// order of `$group`'s output.
    #[test]
    fn order_insensitive_accumulators_ignore_input_order(ds in docs(), seed in any::<u64>(), key in prop::sample::select(vec!["$a", "$b", "$a.b"])) {
        let p = Pipeline::parse(&json!([{"$group": {"_id": key, "n": {"$count": {}},
            "s": {"$sum": "$c"}, "lo": {"$min": "$b"}, "hi": {"$max": "$a"}}}])).unwrap();
        let mut shuffled = ds.clone();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(p.run(shuffled).unwrap(), p.run(ds).unwrap());
    }

    /// A filter and its `$nor` partition every set of documents.
    #[test]
    fn filter_and_its_nor_split_documents(f in filter(), ds in docs()) {
        let pos = Filter::parse(&f).unwrap();
        let neg = Filter::parse(&json!({"$nor": [f.clone()]})).unwrap();
        for d in &ds {
            prop_assert_ne!(pos.matches(d), neg.matches(d), "filter {} doc {}", f, d);
        }
    }

    /// Sorting yields a non-decreasing sequence, and the same one whatever the input order.
    #[test]
    fn sort_is_ordered_and_independent_of_input_order(spec in sort_spec(), ds in docs(), seed in any::<u64>()) {
        let sort = Sort::parse(&spec).unwrap();
        let mut a = ds.clone();
        sort.sort(&mut a);
        for w in a.windows(2) {
            prop_assert_ne!(sort.compare(&w[0], &w[1]), Ordering::Greater);
        }
        let mut shuffled = ds;
        // Deterministic shuffle from the seed.
        let n = shuffled.len();
        let mut s = seed;
        for i in (1..n).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        sort.sort(&mut shuffled);
        prop_assert_eq!(a, shuffled);
    }

    /// After `$set` / `$push` / `$addToSet` / `$inc` / `$unset` on a path, the filter describing
    /// the change matches the new document.
    #[test]
    fn update_then_describing_filter_matches(d in doc(0), field in prop::sample::select(vec!["a", "b", "n.m"]), v in value(), n in -5i64..5, kind in 0u8..5) {
        let (update, check) = match kind {
            0 => (json!({"$set": {field: v.clone()}}), json!({field: {"$eq": v}})),
            1 => (json!({"$push": {field: v.clone()}}), json!({field: {"$elemMatch": {"$eq": v}}})),
            2 => (json!({"$addToSet": {field: v.clone()}}), json!({field: {"$elemMatch": {"$eq": v}}})),
            3 => (json!({"$unset": {field: 1}}), json!({field: {"$exists": false}})),
            _ => (json!({"$inc": {field: n}}), json!({field: {"$type": "number"}})),
        };
        let u = Update::parse(&update).unwrap();
        match u.apply(&d, 0) {
            Ok(after) => {
                let f = Filter::parse(&check).unwrap();
                // A path through a scalar in an array element may not be readable back with
                // implicit traversal; only check documents where the path is plain.
                let plain = !matches!(d.pointer(&format!("/{}", field.split('.').next().unwrap())), Some(Value::Array(_)));
                if plain {
                    prop_assert!(f.matches(&after), "{} then {} gave {}", update, check, after);
                }
                if kind == 4 {
                    let before = d.pointer(&format!("/{}", field.replace('.', "/"))).cloned();
                    let expected = match before.and_then(|b| b.as_i64()) {
                        Some(b) => json!(b + n),
                        None => json!(n),
                    };
                    if before_is_int_or_missing(&d, field) {
                        prop_assert_eq!(compare(after.pointer(&format!("/{}", field.replace('.', "/"))).unwrap(), &expected), Ordering::Equal);
                    }
                }
            }
            Err(e) => {
                // Errors are only allowed for type conflicts in the existing document.
                prop_assert!(matches!(e.code(), "type_mismatch" | "path_not_viable"), "{} on {}: {}", update, d, e);
            }
        }
    }
}

fn before_is_int_or_missing(d: &Value, field: &str) -> bool {
    match d.pointer(&format!("/{}", field.replace('.', "/"))) {
        None => true,
        Some(v) => v.is_i64(),
    }
}
