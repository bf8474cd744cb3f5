//! Model test of the live-query core: random collections, queries (filters with `$or`, ranges,
//! arrays, nested fields; sort, cursors, skip, limit; tiny slack to force refills) and random
//! commits (inserts, replacements, deletes, multi-document transactions). A cursor bounds the
//! sort key, so documents enter and leave the result as their sort keys cross it. After every
//! commit, the list a subscriber builds by applying the emitted events must equal the pull
//! query at that seq. The same for collection-group views, whose documents repeat ids across
//! collections. `HERALD_LIVE_MODEL_CASES` sets the number of scenarios (each runs 100
//! commits; the default 1000 scenarios are 100,000 commits).

use herald_db::live::LiveView;
use herald_query::{Projection, Query};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn cases() -> u32 {
    std::env::var("HERALD_LIVE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn body() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        (0i64..6).prop_map(Value::from),
        Just(Value::Null),
        prop::sample::select(vec!["x", "y"]).prop_map(Value::from),
    ];
    (
        scalar.clone(),
        prop::collection::vec(0i64..4, 0..3),
        prop::option::of(0i64..4),
        any::<bool>(),
    )
        .prop_map(|(a, tags, nested, flag)| {
            let mut m = serde_json::Map::new();
            m.insert("a".into(), a);
            m.insert("tags".into(), json!(tags));
            if let Some(n) = nested {
                m.insert("o".into(), json!({"n": n}));
            }
            if flag {
                m.insert("f".into(), json!(true));
            }
            Value::Object(m)
        })
}

fn query() -> impl Strategy<Value = Value> {
    let filter = prop_oneof![
        Just(json!({})),
        (0i64..6).prop_map(|i| json!({"a": {"$gte": i}})),
        (0i64..4).prop_map(|i| json!({"tags": i})),
        (0i64..4, 0i64..6).prop_map(|(i, j)| json!({"$or": [{"o.n": i}, {"a": {"$lt": j}}]})),
        Just(json!({"f": {"$exists": true}})),
        Just(json!({"a": {"$type": "number"}})),
    ];
    let sort = prop_oneof![
        Just(json!(null)),
        Just(json!({"a": 1})),
        Just(json!({"a": -1})),
        Just(json!({"tags": 1, "a": -1})),
        Just(json!({"o.n": -1})),
    ];
    let projection = prop_oneof![3 => Just(json!(null)), 1 => Just(json!({"a": 1}))];
    let cursors = (
        prop::option::weighted(0.35, cursor()),
        prop::option::weighted(0.25, cursor()),
    );
    (filter, sort, 0usize..3, prop::option::of(1usize..5), projection, cursors).prop_map(|(f, s, skip, limit, p, (start, end))| {
        let mut v = json!({"filter": f, "sort": s, "skip": skip, "limit": limit.unwrap_or(0), "projection": p});
        if let Some((inclusive, c)) = start {
            v[if inclusive { "startAt" } else { "startAfter" }] = cursor_for(&s, c);
        }
        if let Some((inclusive, c)) = end {
            v[if inclusive { "endAt" } else { "endBefore" }] = cursor_for(&s, c);
        }
        v
    })
}

/// A cursor's raw material: inclusive or not, then how many values, the values, and the id.
fn cursor() -> impl Strategy<Value = (bool, (usize, Vec<Value>, u8))> {
    let v = prop_oneof![
        (0i64..6).prop_map(Value::from),
        Just(Value::Null),
        Just(json!("x")),
        Just(json!(2.0)),
    ];
    (
        any::<bool>(),
        (1usize..4, prop::collection::vec(v, 3), 0u8..12),
    )
}

/// At most one value per key of the sort `s`, where the `_id` key takes an id.
fn cursor_for(s: &Value, (len, values, id): (usize, Vec<Value>, u8)) -> Value {
    let mut keys: Vec<String> = s
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    keys.push("_id".into());
    let out: Vec<Value> = keys
        .iter()
        .zip(values)
        .take(len)
        .map(|(k, v)| {
            if k == "_id" {
                json!(format!("d{id:02}"))
            } else {
                v
            }
        })
        .collect();
    Value::Array(out)
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, Value),
    Delete(u8),
}

fn commit() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![3 => (0u8..12, body()).prop_map(|(i, b)| Op::Put(i, b)), 1 => (0u8..12).prop_map(Op::Delete)];
    prop::collection::vec(op, 1..4)
}

fn with_id(id: &str, body: &Value) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("_id".into(), json!(id));
    m.extend(body.as_object().unwrap().clone());
    Value::Object(m)
}

fn expected(q: &Query, store: &BTreeMap<String, Value>) -> Vec<(String, Value)> {
    let mut unprojected = q.clone();
    unprojected.projection = Projection::all();
    let ids: Vec<String> = unprojected
        .run(store.values())
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect();
    ids.into_iter().zip(q.run(store.values())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn applied_events_always_equal_the_pull_query(
        initial in prop::collection::vec((0u8..12, body()), 0..10),
        qv in query(),
        slack in 0usize..3,
        commits in prop::collection::vec(commit(), 100),
    ) {
        let q = Query::parse(&qv).unwrap();
        let mut store: BTreeMap<String, Value> = BTreeMap::new();
        for (i, b) in &initial {
            let id = format!("d{i:02}");
            store.insert(id.clone(), with_id(&id, b));
        }
        // The refill reads the model at exactly the seq being applied.
        let top = |store: &BTreeMap<String, Value>, n: usize| {
            let mut t = q.clone();
            t.skip = 0;
            t.limit = Some(n);
            t.projection = Projection::all();
            t.run(store.values())
        };
        let first = match q.limit { Some(l) => top(&store, q.skip + l + slack + 1), None => { let mut t = q.clone(); t.projection = Projection::all(); t.skip = 0; t.run(store.values()) } };
        let mut view = LiveView::new(q.clone(), slack, first, 0);
        let mut client = view.window();
        prop_assert_eq!(&client, &expected(&q, &store));
        for (n, ops) in commits.iter().enumerate() {
            let seq = n as u64 + 1;
            let mut changes: Vec<(String, Option<Value>, Option<Value>)> = Vec::new();
            for op in ops {
                let (id, after) = match op {
                    Op::Put(i, b) => { let id = format!("d{i:02}"); let d = with_id(&id, b); (id, Some(d)) }
                    Op::Delete(i) => (format!("d{i:02}"), None),
                };
                let before = store.get(&id).cloned();
                match &after {
                    Some(d) => { store.insert(id.clone(), d.clone()); }
                    None => { store.remove(&id); }
                }
                if before.is_some() || after.is_some() {
                    changes.push((id, before, after));
                }
            }
            let refs: Vec<(&str, Option<&Value>, Option<&Value>)> = changes.iter().map(|(i, b, a)| (i.as_str(), b.as_ref(), a.as_ref())).collect();
            let snapshot = store.clone();
            let mut refill = |k: usize, s: u64| { assert_eq!(s, seq, "refills read at the seq being applied"); Ok(top(&snapshot, k)) };
            for e in view.apply(seq, &refs, &mut refill).unwrap() {
                e.apply(&mut client);
            }
            let want = expected(&q, &store);
            prop_assert_eq!(&client, &want, "after commit {} ({:?}) for query {}", seq, ops, qv);
        }
    }
}

/// A collection-group view's document: `_id` repeats across the group's two collections, so
/// the view knows it by `_path`.
fn group_doc(i: u8, body: &Value) -> (String, Value) {
    let coll = if i.is_multiple_of(2) { "m" } else { "r/x/m" };
    let id = format!("d{:02}", i / 2);
    let path = format!("{coll}/{id}");
    let mut d = with_id(&id, body);
    d["_path"] = json!(path);
    (path, d)
}

/// The group view's query: the sort then `_path` in `_id`'s direction (`exec/group.rs`).
fn group_query(q: &Query) -> Query {
    let mut g = q.clone();
    g.sort = q.sort.for_group();
    g
}

/// A group query from `qv`: each cursor that names an `_id` also names a `_path` (of that id in
/// the collection `in_r` picks, `group_doc`'s), so cursors cut through ties on `_id`.
fn with_group_paths(mut qv: Value, in_r: bool) -> Query {
    let keys = qv["sort"].as_object().map_or(0, |m| m.len()) + 1;
    for member in herald_query::CURSOR_MEMBERS {
        if let Some(c) = qv.get_mut(member).and_then(Value::as_array_mut) {
            if c.len() == keys {
                let id = c[keys - 1].as_str().unwrap().to_string();
                c.push(json!(format!("{}/{id}", if in_r { "r/x/m" } else { "m" })));
            }
        }
    }
    Query::parse_group(&qv).unwrap()
}

/// What a group subscriber's list must be: the group query, projected, each with `_path`.
fn group_expected(q: &Query, store: &BTreeMap<String, Value>) -> Vec<(String, Value)> {
    let mut unprojected = q.clone();
    unprojected.projection = Projection::all();
    unprojected
        .run(store.values())
        .into_iter()
        .map(|d| {
            let path = d["_path"].as_str().unwrap().to_string();
            let mut shown = if q.projection.is_all() {
                d.clone()
            } else {
                q.projection.apply(&d)
            };
            shown["_path"] = d["_path"].clone();
            (path, shown)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 4))]

    /// The same model for a collection-group view (`LiveView::new_group`): documents of two
    /// collections with the same ids, known by `_path`; after every commit the subscriber's
    /// list equals the group query. Its cursors may name a `_path` (`with_group_paths`).
    #[test]
    fn group_view_events_always_equal_the_pull_query(
        initial in prop::collection::vec((0u8..12, body()), 0..10),
        qv in query(),
        in_r in any::<bool>(),
        slack in 0usize..3,
        commits in prop::collection::vec(commit(), 100),
    ) {
        let q = group_query(&with_group_paths(qv.clone(), in_r));
        let mut store: BTreeMap<String, Value> = BTreeMap::new();
        for (i, b) in &initial {
            let (path, d) = group_doc(*i, b);
            store.insert(path, d);
        }
        let top = |store: &BTreeMap<String, Value>, n: Option<usize>| {
            let mut t = q.clone();
            t.skip = 0;
            t.limit = n;
            t.projection = Projection::all();
            t.run(store.values())
        };
        let first = top(&store, q.limit.map(|l| q.skip + l + slack + 1));
        let mut view = LiveView::new_group(q.clone(), slack, first, 0);
        let mut client = view.window();
        prop_assert_eq!(&client, &group_expected(&q, &store));
        for (n, ops) in commits.iter().enumerate() {
            let seq = n as u64 + 1;
            let mut changes: Vec<(String, Option<Value>, Option<Value>)> = Vec::new();
            for op in ops {
                let (path, after) = match op {
                    Op::Put(i, b) => { let (p, d) = group_doc(*i, b); (p, Some(d)) }
                    Op::Delete(i) => (group_doc(*i, &json!({})).0, None),
                };
                let before = store.get(&path).cloned();
                match &after {
                    Some(d) => { store.insert(path.clone(), d.clone()); }
                    None => { store.remove(&path); }
                }
                if before.is_some() || after.is_some() {
                    changes.push((path, before, after));
                }
            }
            let refs: Vec<(&str, Option<&Value>, Option<&Value>)> = changes.iter().map(|(i, b, a)| (i.as_str(), b.as_ref(), a.as_ref())).collect();
            let snapshot = store.clone();
            let mut refill = |k: usize, s: u64| { assert_eq!(s, seq); Ok(top(&snapshot, Some(k))) };
            for e in view.apply(seq, &refs, &mut refill).unwrap() {
                e.apply(&mut client);
            }
            prop_assert_eq!(&client, &group_expected(&q, &store), "after commit {} ({:?}) for query {}", seq, ops, qv);
        }
    }
}
