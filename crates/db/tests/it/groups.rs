//! Collection groups: every plan of a group query (each group-index plan, and the merge of
//! the collections' own plans) returns exactly the reference (the union of the matching
//! collections' documents with `_path`, filtered, sorted with `_path` as the last tie-break,
//! windowed, projected by herald-query's evaluation), with and without a per-collection read
//! restriction; the group index serves "newest N with author X across all rooms" in ~N keys;
//! and live group subscriptions equal the pull group query after every batch, including
//! collections created after they subscribed. Cursors on groups: `group_cursors.rs`.
//!
//! `HERALD_PROPTEST_CASES` sets the number of pull cases (default 48).

use crate::live_engine::{client_state, TestSink};
use herald_db::live::{LiveEngine, SubscribeRequest};
use herald_db::{Db, DbOptions, Durability, IndexState, PlanDescription, Restrict, Write};
use herald_query::{Direction, Projection, Query};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Collections of group `messages` at several depths, and two that are not in it.
pub(crate) const COLLS: &[&str] = &[
    "messages",
    "rooms/r0/messages",
    "rooms/r1/messages",
    "a/x/b/y/messages",
    "rooms/r0/other",
    "messagesx",
];

const AUTHORS: [&str; 3] = ["ann", "bob", "cy"];

pub(crate) fn open(dir: &std::path::Path) -> Db {
    let options = DbOptions {
        durability: Durability::NoSync,
        ..DbOptions::default()
    };
    Db::open(dir, options).unwrap()
}

pub(crate) fn put(c: &str, id: &str, doc: Value) -> Write {
    Write::Put {
        collection: c.into(),
        id: id.into(),
        doc,
        if_version: None,
    }
}

pub(crate) fn group_index(db: &Db, name: &str, fields: &[(&str, i8)]) {
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
    db.create_group_index("messages", name, fields).unwrap();
}

pub(crate) fn wait_ready(db: &Db) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let all = db.list_group_indexes("messages").unwrap();
        if all.iter().all(|c| c.state == IndexState::Ready) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("group indexes not ready");
}

/// A read restriction as the server builds one: none of `rooms/r1/messages`, and elsewhere
/// only documents with `n != 1` (ANDed into the query's filter).
pub(crate) struct Rule {
    pub(crate) query: Value,
}

impl Restrict for Rule {
    fn query_for(&self, collection: &str) -> Option<Query> {
        if collection == "rooms/r1/messages" {
            return None;
        }
        let mut q = self.query.clone();
        let f = q.get("filter").cloned().unwrap_or(json!({}));
        q["filter"] = json!({"$and": [f, {"n": {"$ne": 1}}]});
        Some(Query::parse_group(&q).unwrap())
    }
}

pub(crate) fn rule_visible(collection: &str, doc: &Value) -> bool {
    collection != "rooms/r1/messages" && doc.get("n") != Some(&json!(1))
}

/// The reference: herald-query's evaluation over the group's documents with `_path`.
pub(crate) fn reference(
    q: &Query,
    store: &BTreeMap<(String, String), Value>,
    visible: &dyn Fn(&str, &Value) -> bool,
) -> Vec<Value> {
    let docs: Vec<Value> = store
        .iter()
        .filter(|((c, _), d)| c.rsplit('/').next() == Some("messages") && visible(c, d))
        .map(|((c, id), d)| {
            let mut d = d.clone();
            d["_path"] = json!(format!("{c}/{id}"));
            d
        })
        .collect();
    let mut gq = q.clone();
    gq.sort = q.sort.for_group();
    gq.projection = Projection::all();
    gq.run(&docs)
        .into_iter()
        .map(|d| {
            if q.projection.is_all() {
                return d;
            }
            let mut p = q.projection.apply(&d);
            p["_path"] = d["_path"].clone();
            p
        })
        .collect()
}

pub(crate) fn body() -> impl Strategy<Value = Value> {
    (
        prop::option::weighted(0.9, 0i64..5),
        prop::sample::select(vec!["ann", "bob", "cy"]),
        0i64..3,
    )
        .prop_map(|(ts, author, n)| {
            let mut d = json!({"author": author, "n": n});
            if let Some(ts) = ts {
                d["ts"] = json!(ts);
            }
            d
        })
}

fn query() -> impl Strategy<Value = Value> {
    let filter = prop_oneof![
        Just(json!({})),
        prop::sample::select(vec!["ann", "bob"]).prop_map(|a| json!({"author": a})),
        Just(json!({"author": {"$in": ["ann", "cy"]}})),
        (0i64..5).prop_map(|t| json!({"ts": {"$gte": t}})),
        Just(json!({"author": "bob", "n": {"$lt": 2}})),
    ];
    let sort = prop_oneof![
        Just(json!(null)),
        Just(json!({"ts": -1})),
        Just(json!({"ts": 1})),
        Just(json!({"n": 1, "ts": -1})),
        Just(json!({"_id": -1})),
    ];
    let projection = prop_oneof![3 => Just(json!(null)), 1 => Just(json!({"ts": 1}))];
    (
        filter,
        sort,
        0usize..3,
        prop::option::of(1usize..6),
        projection,
    )
        .prop_map(|(f, s, skip, limit, p)| {
            let mut v = json!({"filter": f, "sort": s, "skip": skip, "projection": p});
            if let Some(l) = limit {
                v["limit"] = json!(l);
            }
            v
        })
}

pub(crate) type Op = (usize, u8, Option<Value>);

pub(crate) fn apply(db: &Db, store: &mut BTreeMap<(String, String), Value>, ops: &[Op]) {
    let mut writes = Vec::new();
    for (c, i, body) in ops {
        let (c, id) = (COLLS[*c].to_string(), format!("d{i}"));
        match body {
            Some(b) => {
                let mut d = json!({"_id": id});
                d.as_object_mut()
                    .unwrap()
                    .extend(b.as_object().unwrap().clone());
                store.insert((c.clone(), id.clone()), d);
                writes.push(put(&c, &id, b.clone()));
            }
            None => {
                store.remove(&(c.clone(), id.clone()));
                writes.push(Write::Delete {
                    collection: c,
                    id,
                    if_version: None,
                });
            }
        }
    }
    db.commit(writes).unwrap();
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    (0..COLLS.len(), 0u8..6, prop::option::weighted(0.85, body()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)))]

    /// Every plan of a group query (each group-index plan and the merge) returns exactly the
    /// reference, with and without a read restriction; so does the chosen plan.
    #[test]
    fn every_group_plan_returns_the_reference_result(
        first in prop::collection::vec(op(), 0..30),
        later in prop::collection::vec(op(), 0..10),
        build_later in any::<bool>(),
        queries in prop::collection::vec(query(), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let declare = |db: &Db| {
            group_index(db, "author_ts", &[("author", 1), ("ts", -1)]);
            group_index(db, "n_ts", &[("n", 1), ("ts", -1)]);
        };
        if !build_later {
            declare(&db);
        }
        let mut store = BTreeMap::new();
        if !first.is_empty() {
            apply(&db, &mut store, &first);
        }
        if build_later {
            declare(&db);
        }
        if !later.is_empty() {
            apply(&db, &mut store, &later);
        }
        wait_ready(&db);
        for qv in queries {
            let q = Query::parse(&qv).unwrap();
            let all = reference(&q, &store, &|_, _| true);
            let plans = db.query_group_every_plan("messages", &q, None).unwrap();
            prop_assert!(plans.iter().any(|p| p.plan.kind() == "group_merge"));
            for r in plans {
                prop_assert_eq!(&r.docs, &all, "query {} plan {:?}", qv, r.plan);
            }
            prop_assert_eq!(&db.query_group("messages", &q, None).unwrap().docs, &all, "query {}", qv);
            let rule = Rule { query: qv.clone() };
            let seen = reference(&q, &store, &rule_visible);
            for r in db.query_group_every_plan("messages", &q, Some(&rule)).unwrap() {
                prop_assert_eq!(&r.docs, &seen, "restricted query {} plan {:?}", qv, r.plan);
            }
        }
    }
}

/// "The newest 50 messages of author X across all rooms" reads ~50 index keys through a
/// group index; without it the merge of every room's plan gives the same answer.
#[test]
fn a_group_index_serves_the_newest_page_across_collections() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut writes = Vec::new();
    for i in 0..2000 {
        let room = format!("rooms/r{}/messages", i % 40);
        let doc = json!({"author": AUTHORS[i % 3], "ts": i});
        writes.push(put(&room, &format!("m{i:05}"), doc));
    }
    for chunk in writes.chunks(500) {
        db.commit(chunk.to_vec()).unwrap();
    }
    let q = Query::parse(&json!({"filter": {"author": "bob"}, "sort": {"ts": -1}, "limit": 50}))
        .unwrap();
    let merged = db.query_group("messages", &q, None).unwrap();
    assert!(
        matches!(
            &merged.explain.plan,
            PlanDescription::GroupMerge {
                collections: 40,
                ..
            }
        ),
        "{:?}",
        merged.explain
    );
    group_index(&db, "author_ts", &[("author", 1), ("ts", -1)]);
    wait_ready(&db);
    let out = db.query_group("messages", &q, None).unwrap();
    assert_eq!(out.docs, merged.docs);
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    let want: Vec<i64> = (0..2000).rev().filter(|i| i % 3 == 1).take(50).collect();
    assert_eq!(ts, want);
    assert_eq!(
        out.docs[0]["_path"],
        json!(format!("rooms/r{}/messages/m{:05}", want[0] % 40, want[0]))
    );
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "g:author_ts"),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 51, "{:?}", out.explain);
    assert_eq!(out.explain.docs_examined, 50);
    // A one-field group index serves the newest page across the group with no filter.
    group_index(&db, "ts", &[("ts", -1)]);
    wait_ready(&db);
    let newest = Query::parse(&json!({"sort": {"ts": -1}, "limit": 5})).unwrap();
    let out = db.query_group("messages", &newest, None).unwrap();
    let ts: Vec<i64> = out.docs.iter().map(|d| d["ts"].as_i64().unwrap()).collect();
    assert_eq!(ts, [1999, 1998, 1997, 1996, 1995]);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "g:ts"),
        "{:?}",
        out.explain
    );
    assert!(out.explain.keys_examined <= 6, "{:?}", out.explain);
    // With both indexes, the one binding `author` serves the author's page, whatever their
    // order in the catalog (dropped and declared again, it comes after `ts`).
    db.drop_group_index("messages", "author_ts").unwrap();
    group_index(&db, "author_ts", &[("author", 1), ("ts", -1)]);
    wait_ready(&db);
    let out = db.query_group("messages", &q, None).unwrap();
    assert_eq!(out.docs, merged.docs);
    assert!(
        matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "g:author_ts"),
        "{:?}",
        out.explain
    );
    // A room created after the index: its documents are in the index at once.
    db.commit(vec![put(
        "x/new/messages",
        "z",
        json!({"author": "bob", "ts": 99_999}),
    )])
    .unwrap();
    let out = db.query_group("messages", &q, None).unwrap();
    assert_eq!(out.docs[0]["_path"], json!("x/new/messages/z"));
}

/// A wildcard in a path is refused with `bad_path` and a message that points to groups;
/// `_path` cannot be filtered or sorted on in a group query.
#[test]
fn wildcards_are_refused_and_point_to_collection_groups() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let q = Query::parse(&json!({})).unwrap();
    let e = db.query("rooms/*/messages", &q).unwrap_err();
    assert_eq!(e.code(), "bad_path");
    assert!(e.to_string().contains("collectionGroup"), "{e}");
    let e = db.commit(vec![put("rooms", "r*", json!({}))]).unwrap_err();
    assert_eq!(e.code(), "bad_path");
    assert_eq!(db.seq(), 0, "nothing changed");
    assert_eq!(
        db.query_group("a/b", &q, None).unwrap_err().code(),
        "bad_path"
    );
    let q = Query::parse(&json!({"sort": {"_path": 1}})).unwrap();
    assert_eq!(
        db.query_group("messages", &q, None).unwrap_err().code(),
        "bad_query"
    );
}

const LIVE_QUERIES: &[&str] = &[
    r#"{"filter": {}, "sort": {"ts": -1}, "limit": 3}"#,
    r#"{"filter": {"author": "bob"}, "sort": {"ts": 1}, "skip": 1, "limit": 2}"#,
    r#"{"filter": {"n": {"$gte": 1}}}"#,
    r#"{"filter": {}, "sort": {"n": 1}, "projection": {"n": 1}}"#,
    r#"{"filter": {"author": {"$in": ["ann", "cy"]}}, "sort": {"_id": -1}, "limit": 4}"#,
    r#"{"sort": {"ts": -1}, "startAfter": [4, "d2", "rooms/r0/messages/d2"], "limit": 3}"#,
    r#"{"sort": {"ts": 1}, "startAt": [1, "d3"], "endBefore": [4, "d1", "messages/d1"]}"#,
];

fn wait_idle(engine: &LiveEngine) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !engine.is_idle() {
        assert!(Instant::now() < deadline, "engine idle");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Live group subscriptions (with and without a read restriction, over several queries)
/// equal the pull group query after every batch; collections are created along the way.
#[test]
fn live_group_subscriptions_equal_the_pull_query_after_every_batch() {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    let seeds: u64 = std::env::var("HERALD_LIVE_ENGINE_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        if seed % 2 == 1 {
            group_index(&db, "author_ts", &[("author", 1), ("ts", -1)]);
            wait_ready(&db);
        }
        let engine = LiveEngine::start(db.clone());
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sinks = Vec::new();
        for (qi, text) in LIVE_QUERIES.iter().enumerate() {
            let qv: Value = serde_json::from_str(text).unwrap();
            for restricted in [false, true] {
                let sink = Arc::new(TestSink {
                    conn: (qi * 2 + restricted as usize) as u64,
                    msgs: Mutex::new(Vec::new()),
                });
                let restrict: Option<Arc<dyn Restrict>> =
                    restricted.then(|| Arc::new(Rule { query: qv.clone() }) as Arc<dyn Restrict>);
                engine
                    .subscribe_group(
                        "messages",
                        SubscribeRequest {
                            sub: "s".into(),
                            collection: String::new(),
                            query: Query::parse_group(&qv).unwrap(),
                            key: format!("messages\n{text}\n{restricted}"),
                            resume_from: None,
                            sink: sink.clone(),
                        },
                        restrict,
                    )
                    .unwrap();
                sinks.push((qv.clone(), restricted, sink));
            }
        }
        let mut store = BTreeMap::new();
        for batch in 0..60 {
            let ops: Vec<Op> = (0..rng.gen_range(1..4))
                .map(|_| {
                    let body = (rng.gen_range(0..5) > 0).then(|| {
                        json!({"author": AUTHORS[rng.gen_range(0..3)],
                               "n": rng.gen_range(0..3), "ts": rng.gen_range(0..6)})
                    });
                    (rng.gen_range(0..COLLS.len()), rng.gen_range(0..6), body)
                })
                .collect();
            apply(&db, &mut store, &ops);
            // A collection of the group created after the subscriptions.
            if batch == 30 {
                db.commit(vec![put(
                    "late/l1/messages",
                    "d1",
                    json!({"author": "bob", "n": 2, "ts": 5}),
                )])
                .unwrap();
                store.insert(
                    ("late/l1/messages".into(), "d1".into()),
                    json!({"_id": "d1", "author": "bob", "n": 2, "ts": 5}),
                );
            }
            wait_idle(&engine);
            for (qv, restricted, sink) in &sinks {
                let q = Query::parse_group(qv).unwrap();
                let (list, _) = client_state(&sink.msgs.lock().unwrap());
                let want = match restricted {
                    false => reference(&q, &store, &|_, _| true),
                    true => reference(&q, &store, &rule_visible),
                };
                assert_eq!(
                    list, want,
                    "seed {seed} batch {batch} query {qv} restricted {restricted}"
                );
                let pull = match restricted {
                    false => db.query_group("messages", &q, None).unwrap().docs,
                    true => {
                        let rule = Rule { query: qv.clone() };
                        db.query_group("messages", &q, Some(&rule)).unwrap().docs
                    }
                };
                assert_eq!(list, pull);
            }
        }
        // Group events name documents by full path.
        let msgs = sinks[4].2.msgs.lock().unwrap();
        let id = msgs
            .iter()
            .filter(|m| m["type"] == "changes")
            .flat_map(|m| m["changes"].as_array().unwrap().clone())
            .map(|c| c["id"].as_str().unwrap().to_string())
            .next()
            .unwrap();
        assert!(
            id.ends_with("messages/d0") || id.contains("messages/d"),
            "{id}"
        );
        drop(msgs);
        engine.stop();
    }
}

/// A group query returns at most `QUERY_DOCS_MAX` documents (`result_too_large` past it, as a
/// collection's); with a limit the same group answers.
#[test]
fn a_group_result_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let n = herald_db::QUERY_DOCS_MAX + 1;
    let writes: Vec<Write> = (0..n)
        .map(|i| {
            put(
                ["messages", "r/x/messages"][i % 2],
                &format!("m{i:05}"),
                json!({"i": i}),
            )
        })
        .collect();
    for chunk in writes.chunks(500) {
        db.commit(chunk.to_vec()).unwrap();
    }
    let all = Query::parse(&json!({"sort": {"i": 1}})).unwrap();
    let e = db.query_group("messages", &all, None).unwrap_err();
    assert_eq!(e.code(), "result_too_large");
    let page = Query::parse(&json!({"sort": {"i": -1}, "limit": 2})).unwrap();
    let out = db.query_group("messages", &page, None).unwrap();
    assert_eq!(
        out.docs[0]["_path"],
        json!(format!("messages/m{:05}", n - 1))
    );
}
