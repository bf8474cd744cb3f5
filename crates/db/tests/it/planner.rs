//! The planner: which plans it picks for the queries apps write (sorted pages of a group,
//! the newest document, equalities on two fields), what they examine, and the property that
//! every plan it can choose (each one forced, not only the chosen) returns exactly what the
//! reference evaluation over all documents returns, in order.
//!
//! `HERALD_PROPTEST_CASES` sets the number of cases (default 48, a few seconds in debug).

use herald_db::{Db, DbOptions, Durability, IndexState, PlanDescription, Write};
use herald_query::{Direction, Query};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) fn open(dir: &std::path::Path, key_bytes: usize) -> Db {
    let options = DbOptions {
        durability: Durability::NoSync,
        string_key_bytes_max: key_bytes,
        ..DbOptions::default()
    };
    Db::open(dir, options).unwrap()
}

pub(crate) fn put(id: &str, doc: Value) -> Write {
    Write::Put {
        collection: "c".into(),
        id: id.into(),
        doc,
        if_version: None,
    }
}

fn q(v: Value) -> Query {
    Query::parse(&v).unwrap()
}

/// Waits (up to 30 s, for a hung build only) until every composite index is ready.
fn wait_ready(db: &Db) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let listing = db.list_indexes("c").unwrap();
        if listing
            .composite
            .iter()
            .all(|c| c.state == IndexState::Ready)
            && listing.building.is_empty()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn index(db: &Db, name: &str, fields: &[(&str, i8)]) {
    let fields = fields
        .iter()
        .map(|(p, d)| {
            let dir = if *d > 0 {
                Direction::Asc
            } else {
                Direction::Desc
            };
            (p.to_string(), dir)
        })
        .collect();
    db.create_index("c", name, fields).unwrap();
}

/// A chat: `rooms` rooms, `per_room` messages each, `ts` unique and interleaved.
fn chat(db: &Db, rooms: usize, per_room: usize) {
    let mut writes = Vec::new();
    for i in 0..rooms * per_room {
        let doc = json!({"room": format!("r{}", i % rooms), "ts": i, "n": i % 7});
        writes.push(put(&format!("m{i:05}"), doc));
    }
    for chunk in writes.chunks(500) {
        db.commit(chunk.to_vec()).unwrap();
    }
}

/// Paging with cursors: each page after the last document of the previous one seeks into the
/// index (composite, single-field, or the documents themselves in `_id` order) and reads about
/// one key per result, however deep the page is.
#[test]
fn cursor_pages_seek_into_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    index(&db, "room_ts", &[("room", 1), ("ts", -1)]);
    chat(&db, 20, 100);
    wait_ready(&db);
    let ts_of =
        |docs: &[Value]| -> Vec<i64> { docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect() };
    let mut after: Option<Value> = None;
    let mut seen = Vec::new();
    loop {
        let mut qv = json!({"filter": {"room": "r3"}, "sort": {"ts": -1}, "limit": 10});
        if let Some(a) = &after {
            qv["startAfter"] = a.clone();
        }
        let out = db.query("c", &q(qv.clone())).unwrap();
        assert!(
            matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "c:room_ts"),
            "{qv} {:?}",
            out.explain
        );
        assert!(out.explain.keys_examined <= 12, "{qv} {:?}", out.explain);
        let Some(last) = out.docs.last() else { break };
        after = Some(json!([last["ts"], last["_id"]]));
        seen.extend(ts_of(&out.docs));
    }
    assert_eq!(seen, (0..100).map(|k| 1983 - 20 * k).collect::<Vec<i64>>());

    // The newest overall, from the middle: the single-field index read backwards from 1000.
    let out = db
        .query(
            "c",
            &q(json!({"sort": {"ts": -1}, "startAfter": [1000], "limit": 5})),
        )
        .unwrap();
    assert_eq!(ts_of(&out.docs), [999, 998, 997, 996, 995]);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { .. }),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 6, "{:?}", out.explain);

    // Both ends, no limit: only the keys between the cursors.
    let out = db
        .query(
            "c",
            &q(json!({"sort": {"ts": 1}, "startAt": [500], "endBefore": [503]})),
        )
        .unwrap();
    assert_eq!(ts_of(&out.docs), [500, 501, 502]);
    assert!(out.explain.keys_examined <= 4, "{:?}", out.explain);
    // The cursor is above null: no collection scan for the null-or-missing group.
    assert!(out.explain.docs_examined <= 4, "{:?}", out.explain);

    // No sort: the cursor is an id, and the collection scan starts there.
    let out = db
        .query("c", &q(json!({"startAfter": ["m01000"], "limit": 3})))
        .unwrap();
    assert_eq!(ts_of(&out.docs), [1001, 1002, 1003]);
    assert!(out.explain.docs_examined <= 4, "{:?}", out.explain);
}

#[test]
fn the_newest_page_of_a_room_reads_one_key_per_result() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    index(&db, "room_ts", &[("room", 1), ("ts", -1)]);
    chat(&db, 20, 100);
    wait_ready(&db);
    let query = q(json!({"filter": {"room": "r3"}, "sort": {"ts": -1}, "limit": 50}));
    let out = db.query("c", &query).unwrap();
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    let want: Vec<i64> = (0..50).map(|k| 1983 - 20 * k).collect();
    assert_eq!(ts, want);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, descending: false, .. } if index == "c:room_ts"),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 51, "{:?}", out.explain);
    assert_eq!(out.explain.docs_examined, 50);
    let kinds: Vec<&str> = out
        .explain
        .alternatives
        .iter()
        .map(|a| a.plan.kind())
        .collect();
    assert!(
        kinds.contains(&"index") && kinds.contains(&"collection_scan"),
        "{kinds:?}"
    );

    // Two rooms: the scans of both merged by time.
    let query =
        q(json!({"filter": {"room": {"$in": ["r3", "r4"]}}, "sort": {"ts": -1}, "limit": 5}));
    let out = db.query("c", &query).unwrap();
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    assert_eq!(ts, [1984, 1983, 1964, 1963, 1944]);
    assert!(
        matches!(
            &out.explain.plan,
            PlanDescription::OrderedIndex { merged: 2, .. }
        ),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 6, "{:?}", out.explain);

    // The oldest first: the same index read backwards.
    let query = q(json!({"filter": {"room": "r3"}, "sort": {"ts": 1}, "limit": 2}));
    let out = db.query("c", &query).unwrap();
    assert_eq!(out.docs[0]["ts"], 3);
    assert!(
        matches!(
            &out.explain.plan,
            PlanDescription::OrderedIndex {
                descending: true,
                ..
            }
        ),
        "{:?}",
        out.explain
    );
}

#[test]
fn the_newest_document_overall_reads_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    chat(&db, 10, 100);
    db.commit(vec![put("no-ts", json!({"room": "r1"}))])
        .unwrap();
    let out = db
        .query("c", &q(json!({"sort": {"ts": -1}, "limit": 1})))
        .unwrap();
    assert_eq!(out.docs[0]["ts"], 999);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, descending: true, nulls_by_scan: true, .. } if index == "f:ts"),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 2, "{:?}", out.explain);
    assert_eq!(out.explain.docs_examined, 1);
    // Ascending, the document without `ts` (null) comes first: the null group is scanned.
    let query = q(json!({"sort": {"ts": 1}, "limit": 2}));
    let out = db.query("c", &query).unwrap();
    assert_eq!(out.docs[0]["_id"], "no-ts");
    assert_eq!(out.docs[1]["ts"], 0);
    // An object makes `ts` unusable for order from then on.
    db.commit(vec![put("obj", json!({"ts": {"a": 1}}))])
        .unwrap();
    let out = db
        .query("c", &q(json!({"sort": {"ts": -1}, "limit": 1})))
        .unwrap();
    assert_eq!(out.docs[0]["_id"], "obj");
    assert_ne!(out.explain.plan.kind(), "ordered_index");
}

/// Equalities on two fields whose matches come in runs (documents written in order by
/// related values, as apps do): the join walks the runs both indexes agree on and skips the
/// others with one seek each, fetching only the matches.
#[test]
fn equalities_on_two_fields_leapfrog_through_both_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    let writes: Vec<Write> = (0..2000)
        .map(|i| {
            put(
                &format!("d{i:05}"),
                json!({"a": (i / 100) % 4, "b": (i / 150) % 3}),
            )
        })
        .collect();
    for chunk in writes.chunks(500) {
        db.commit(chunk.to_vec()).unwrap();
    }
    // a = 1: 500 documents; b = 1: 650; both: the 50 of ids 150-199.
    let out = db
        .query("c", &q(json!({"filter": {"a": 1, "b": 1}})))
        .unwrap();
    assert_eq!(out.docs.len(), 50);
    assert_eq!(out.docs[0]["_id"], "d00150");
    assert_eq!(out.explain.plan.kind(), "intersection", "{:?}", out.explain);
    assert_eq!(out.explain.docs_examined, 50);
    assert!(out.explain.keys_examined < 200, "{:?}", out.explain);
}

/// Documents written while a path was exempt record no shapes under it; lifting the
/// exemption rebuilds its index and records the objects and arrays the build meets, so the
/// rebuilt index does not serve a sort it cannot give.
#[test]
fn an_index_rebuilt_after_an_exemption_records_the_shapes_it_meets() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    db.set_exemptions("c", vec!["n".into()]).unwrap();
    db.commit(vec![
        put("a", json!({"n": 5})),
        put("b", json!({"n": {"x": 1}})),
        put("c", json!({"n": 7})),
    ])
    .unwrap();
    db.set_exemptions("c", vec![]).unwrap();
    wait_ready(&db);
    // Objects sort after numbers: "b" is first descending.
    let query = q(json!({"sort": {"n": -1}, "limit": 1}));
    let out = db.query("c", &query).unwrap();
    assert_eq!(out.docs[0]["_id"], "b", "{:?}", out.explain);
}

/// Without the composite index, "newest of a room" can walk the `ts` index checking the room
/// of each document: how far it must walk depends on how often the room comes up, which
/// counting cannot tell, so it is tried with the best certain plan's estimate as budget. It
/// wins when the room comes up soon enough and is abandoned (the room's index then serves)
/// when not; the result is the same.
#[test]
fn an_ordered_scan_with_a_residual_filter_is_tried_within_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), 128);
    chat(&db, 20, 100);
    // Every 20th message is r3's: 2 of them take ~40 entries and documents, under the 200 of
    // reading r3's 100 entries and documents.
    let out = db
        .query(
            "c",
            &q(json!({"filter": {"room": "r3"}, "sort": {"ts": -1}, "limit": 2})),
        )
        .unwrap();
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    assert_eq!(ts, [1983, 1963]);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "f:ts"),
        "{:?}",
        out.explain
    );
    assert!(out.explain.alternatives.iter().all(|a| !a.abandoned));
    // 20 of them would take ~400: the trial gives up at 200 and the room's index answers.
    let out = db
        .query(
            "c",
            &q(json!({"filter": {"room": "r3"}, "sort": {"ts": -1}, "limit": 20})),
        )
        .unwrap();
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    let want: Vec<i64> = (0..20).map(|k| 1983 - 20 * k).collect();
    assert_eq!(ts, want);
    assert_eq!(out.explain.plan.kind(), "index", "{:?}", out.explain);
    let abandoned: Vec<_> = out
        .explain
        .alternatives
        .iter()
        .filter(|a| a.abandoned)
        .map(|a| a.plan.kind())
        .collect();
    assert_eq!(abandoned, ["ordered_index"], "{:?}", out.explain);
    assert!(
        out.explain.keys_examined + out.explain.docs_examined <= 2 * 200 + 2,
        "{:?}",
        out.explain
    );
}

// ---- Every plan against the reference ----

pub(crate) fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => (0i64..4).prop_map(Value::from),
        1 => (0i64..3).prop_map(|i| json!(i as f64 + 0.5)),
        2 => prop::sample::select(vec!["a", "ab", "abc", "b"]).prop_map(Value::from),
    ]
}

/// A value at any path: mostly scalars, or (when `messy`) arrays, empty arrays and objects.
pub(crate) fn value(messy: bool) -> BoxedStrategy<Value> {
    if !messy {
        return prop_oneof![6 => scalar(), 1 => Just(Value::Null)].boxed();
    }
    prop_oneof![
        4 => scalar(),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(Value::Array),
        1 => scalar().prop_map(|x| json!({"k": x})),
    ]
    .boxed()
}

pub(crate) fn group() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::sample::select(vec!["r0", "r1", "r2"]).prop_map(Value::from),
        1 => Just(json!(["r0", "r2"])),
        1 => Just(Value::Null),
    ]
}

/// A document over `g` (a group, sometimes an array of groups), `t` and `b` (scalars with many
/// ties; arrays and objects when messy) and `a` (anything); any field may be missing.
pub(crate) fn doc(messy: bool) -> impl Strategy<Value = Value> {
    (
        prop::option::of(group()),
        prop::option::weighted(0.85, value(messy)),
        prop::option::of(value(messy)),
        prop::option::of(value(true)),
    )
        .prop_map(|(g, t, b, a)| {
            let mut m = serde_json::Map::new();
            for (k, v) in [("g", g), ("t", t), ("b", b), ("a", a)] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

const COMPOSITES: &[&[(&str, i8)]] = &[
    &[("g", 1), ("t", -1)],
    &[("g", 1), ("t", 1)],
    &[("g", -1), ("b", 1), ("t", -1)],
    &[("t", -1), ("b", 1)],
    &[("g", 1), ("b", 1)],
    &[("b", 1), ("g", 1)],
];

pub(crate) fn leaf() -> impl Strategy<Value = Value> {
    let path = prop::sample::select(vec!["g", "t", "b", "a"]);
    let op = prop::sample::select(vec!["$gt", "$gte", "$lt", "$lte", "$ne"]);
    let groups = prop::sample::subsequence(vec!["r0", "r1", "r2"], 1..4);
    prop_oneof![
        // Groups bound by equality or `$in` (documents in two groups are met twice).
        2 => groups.prop_map(|gs| json!({"g": {"$in": gs}})),
        3 => (path.clone(), prop_oneof![group(), scalar()]).prop_map(|(p, v)| json!({ p: v })),
        2 => (path.clone(), op, scalar()).prop_map(|(p, o, v)| json!({ p: { o: v } })),
        2 => (path, prop::collection::vec(prop_oneof![group(), scalar()], 1..4))
            .prop_map(|(p, v)| json!({ p: { "$in": v } })),
    ]
}

pub(crate) fn filter() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(json!({})),
        3 => prop::collection::vec(leaf(), 1..4).prop_map(|ls| {
            let mut m = serde_json::Map::new();
            for l in ls {
                for (k, v) in l.as_object().unwrap() {
                    m.insert(k.clone(), v.clone());
                }
            }
            Value::Object(m)
        }),
        1 => prop::collection::vec(leaf(), 1..3).prop_map(|f| json!({"$or": f})),
    ]
}

fn sort() -> impl Strategy<Value = Value> {
    let dir = || prop::sample::select(vec![1, -1]);
    prop_oneof![
        1 => Just(Value::Null),
        3 => (prop::sample::select(vec!["t", "b", "a", "g"]), dir()).prop_map(|(p, d)| json!({ p: d })),
        2 => (dir(), dir()).prop_map(|(x, y)| json!({"t": x, "b": y})),
        1 => (dir(), dir()).prop_map(|(x, y)| json!({"t": x, "_id": y})),
        1 => dir().prop_map(|d| json!({"_id": d})),
    ]
}

/// A cursor's raw material: which member, how many values, the values (an id where the sort
/// key is `_id`).
fn cursor() -> impl Strategy<Value = (bool, usize, Vec<Value>, usize)> {
    let v = prop_oneof![4 => scalar(), 1 => group(), 1 => Just(json!(2.0))];
    (
        any::<bool>(),
        1usize..4,
        prop::collection::vec(v, 3),
        0usize..24,
    )
}

/// A cursor for the sort `s`: at most one value per sort key, the `_id` tie-break included.
fn cursor_member(s: &Value, (_, len, values, id): (bool, usize, Vec<Value>, usize)) -> Value {
    let mut keys: Vec<String> = s
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if !keys.iter().any(|k| k == "_id") {
        keys.push("_id".into());
    }
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

fn query() -> impl Strategy<Value = Value> {
    (
        filter(),
        sort(),
        0usize..3,
        prop::option::of(1usize..6),
        prop::option::weighted(0.4, cursor()),
        prop::option::weighted(0.25, cursor()),
    )
        .prop_map(|(f, s, skip, limit, start, end)| {
            let mut v = json!({"filter": f, "sort": s, "skip": skip});
            if let Some(l) = limit {
                v["limit"] = json!(l);
            }
            if let Some(c) = start {
                let name = if c.0 { "startAt" } else { "startAfter" };
                v[name] = cursor_member(&s, c);
            }
            if let Some(c) = end {
                let name = if c.0 { "endAt" } else { "endBefore" };
                v[name] = cursor_member(&s, c);
            }
            v
        })
}

/// Applies `docs` as puts (`None`: a delete) to the reference map too.
pub(crate) fn write(
    db: &Db,
    reference: &mut std::collections::BTreeMap<String, Value>,
    docs: Vec<(usize, Option<Value>)>,
) {
    let mut writes = Vec::new();
    for (i, d) in docs {
        let id = format!("d{i:02}");
        match d {
            Some(d) => {
                let mut full = serde_json::Map::new();
                full.insert("_id".into(), json!(id));
                full.extend(d.as_object().unwrap().clone());
                reference.insert(id.clone(), Value::Object(full));
                writes.push(put(&id, d));
            }
            None => {
                reference.remove(&id);
                writes.push(Write::Delete {
                    collection: "c".into(),
                    id,
                    if_version: None,
                });
            }
        }
    }
    if !writes.is_empty() {
        db.commit(writes).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)))]

    /// Every candidate plan of every query (ordered scans over composite and single-field
    /// indexes, merged `$in` streams, intersections, index ranges, unions, the collection scan)
    /// returns exactly the reference result, in order; so does the chosen plan. Collections
    /// with ties, missing fields, nulls, mixed types, arrays, objects and cut strings; indexes
    /// declared before the documents or built over them; documents replaced and deleted; random
    /// cursors (prefixes of the sort keys, with and without the `_id` tie-break).
    #[test]
    fn every_candidate_plan_returns_the_reference_result(
        messy in any::<bool>(),
        first in prop::collection::vec(doc(false), 0..24),
        later in prop::collection::vec((0usize..24, prop::option::weighted(0.8, any::<bool>().prop_flat_map(doc))), 0..8),
        composites in prop::sample::subsequence((0..COMPOSITES.len()).collect::<Vec<_>>(), 1..3),
        build_later in any::<bool>(),
        key_bytes in prop::sample::select(vec![1usize, 2, 128]),
        queries in prop::collection::vec(query(), 1..10),
        at in any::<prop::sample::Index>(),
        member in 0usize..8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), key_bytes);
        let declare = |db: &Db| {
            for &i in &composites {
                index(db, &format!("i{i}"), COMPOSITES[i]);
            }
        };
        if !build_later {
            declare(&db);
        }
        let mut reference = std::collections::BTreeMap::new();
        write(&db, &mut reference, first.into_iter().enumerate().map(|(i, d)| (i, Some(d))).collect());
        if build_later {
            declare(&db);
        }
        // Replacements (messy ones only in messy cases) and deletes.
        let later = later.into_iter().filter(|(_, d)| messy || d.as_ref().is_none_or(|d| d.get("t").is_none_or(|t| !t.is_array() && !t.is_object()))).collect();
        write(&db, &mut reference, later);
        wait_ready(&db);
        let stored: Vec<Value> = reference.into_values().collect();
        let mut all = Vec::new();
        for qv in queries {
            all.push(qv.clone());
            // The same query paged from one of its own results: the cursor is that document's
            // sort key (with its id, or only the sort fields), as an app's next page is.
            let whole = Query::parse(&json!({"filter": qv["filter"], "sort": qv["sort"]})).unwrap();
            let results = whole.run(&stored);
            if !results.is_empty() {
                let d = &results[at.index(results.len())];
                let mut key: Vec<Value> = whole
                    .sort
                    .key_values(d)
                    .iter()
                    .map(|k| match k {
                        herald_query::KeyValue::Value(v) => (*v).clone(),
                        herald_query::KeyValue::Null => Value::Null,
                        herald_query::KeyValue::EmptyArray => json!([]),
                    })
                    .collect();
                if member >= 4 && key.len() > 1 {
                    key.pop();
                }
                let mut paged = qv.clone();
                for m in herald_query::CURSOR_MEMBERS {
                    paged.as_object_mut().unwrap().remove(m);
                }
                paged[herald_query::CURSOR_MEMBERS[member % 4]] = Value::Array(key);
                all.push(paged);
            }
        }
        for qv in all {
            let query = Query::parse(&qv).unwrap();
            let expected = query.run(&stored);
            for r in db.query_every_plan("c", &query).unwrap() {
                prop_assert_eq!(&r.docs, &expected, "query {} plan {:?}", qv, r.plan);
            }
            let chosen = db.query("c", &query).unwrap();
            prop_assert_eq!(&chosen.docs, &expected, "query {} explain {:?}", qv, chosen.explain);
        }
    }
}
