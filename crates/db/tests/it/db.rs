//! Database integration tests on a real store in a temporary directory: commits, versions,
//! transactions, the commit log, indexes and the planner-versus-full-scan property.

use herald_db::{
    Clock, Db, DbError, DbOptions, Durability, IndexState, PlanDescription, QueueFull, Refused,
    Transaction, Write,
};
use herald_query::{Direction, Filter, Query, Update};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::time::Duration;

fn options() -> DbOptions {
    DbOptions {
        durability: Durability::NoSync,
        ..DbOptions::default()
    }
}

fn open(dir: &std::path::Path) -> Db {
    Db::open(dir, options()).unwrap()
}

/// A database with the given commit-log retention (count and age).
/// A database keeping `count` log records for `age`, on `clock`.
fn open_retaining(dir: &std::path::Path, count: u64, age: Duration, clock: &Clock) -> Db {
    Db::open(
        dir,
        DbOptions {
            durability: Durability::NoSync,
            log_retention_count: count,
            log_retention_age: age,
            clock: clock.clone(),
            ..DbOptions::default()
        },
    )
    .unwrap()
}

/// Polls `done` every 2 ms until it holds or 30 s passed, and says whether it held. Index
/// builds run on a background thread, which a loaded machine (or the other tests of this
/// binary, running in parallel) may hold up for a while: the deadline is for a hung build only.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}

/// Waits until no automatic index of `collection` is being rebuilt; the caller's assertions
/// then show what a build that did not finish left.
fn wait_until_built(db: &Db, collection: &str) {
    eventually(|| db.list_indexes(collection).unwrap().building.is_empty());
}

fn put(c: &str, id: &str, doc: Value) -> Write {
    Write::Put {
        collection: c.into(),
        id: id.into(),
        doc,
        if_version: None,
    }
}

fn q(v: Value) -> Query {
    Query::parse(&v).unwrap()
}

#[test]
fn versions_and_seq_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), DbOptions::default()).unwrap();
    let a = db
        .commit(vec![put("rooms/r1/messages", "m1", json!({"t": 1}))])
        .unwrap();
    let b = db
        .commit(vec![put("rooms/r1/messages", "m1", json!({"t": 2}))])
        .unwrap();
    assert_eq!((a.seq, b.seq), (1, 2));
    assert_eq!(b.results[0].version, 2);
    db.close().unwrap();
    let db = Db::open(dir.path(), DbOptions::default()).unwrap();
    assert_eq!(db.seq(), 2);
    let doc = db.get("rooms/r1/messages", "m1").unwrap().unwrap();
    assert_eq!((doc.version, doc.doc), (2, json!({"_id": "m1", "t": 2})));
    let c = db
        .commit(vec![Write::Delete {
            collection: "rooms/r1/messages".into(),
            id: "m1".into(),
            if_version: None,
        }])
        .unwrap();
    assert_eq!(c.seq, 3, "seq continues without a gap after a restart");
    let log = db.log_range(1, 3).unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["changes"][0]["op"], "delete");
    assert_eq!(log[1]["changes"][0]["before"]["t"], 1);
    assert_eq!(log[1]["changes"][0]["after"]["t"], 2);
}

#[test]
fn failed_precondition_applies_nothing_and_uses_no_seq() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    db.commit(vec![put("c", "a", json!({"n": 1}))]).unwrap();
    let err = db
        .commit(vec![
            put("c", "b", json!({"n": 2})),
            Write::Put {
                collection: "c".into(),
                id: "a".into(),
                doc: json!({"n": 9}),
                if_version: Some(7),
            },
        ])
        .unwrap_err();
    assert!(
        matches!(
            err,
            DbError::VersionConflict {
                index: 1,
                expected: 7,
                actual: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        db.get("c", "b").unwrap().is_none(),
        "the first write of the failed transaction is not applied"
    );
    assert_eq!(db.get("c", "a").unwrap().unwrap().doc["n"], 1);
    let next = db.commit(vec![put("c", "z", json!({}))]).unwrap();
    assert_eq!(next.seq, 2);
    // ifVersion 0 means "must not exist".
    let e = db.commit(vec![Write::Put {
        collection: "c".into(),
        id: "a".into(),
        doc: json!({}),
        if_version: Some(0),
    }]);
    assert_eq!(e.unwrap_err().code(), "version_conflict");
}

#[test]
fn insert_update_upsert_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let out = db
        .commit(vec![Write::Insert {
            collection: "c".into(),
            id: None,
            doc: json!({"n": 1}),
        }])
        .unwrap();
    let id = out.results[0].id.clone();
    assert_eq!(id.len(), 20);
    let again = db.commit(vec![Write::Insert {
        collection: "c".into(),
        id: Some(id.clone()),
        doc: json!({}),
    }]);
    assert_eq!(again.unwrap_err().code(), "already_exists");
    let upd = |u: Value, upsert: bool, id: &str| Write::Update {
        collection: "c".into(),
        id: id.into(),
        update: Update::parse(&u).unwrap(),
        upsert,
        if_version: None,
    };
    let r = db
        .commit(vec![upd(json!({"$inc": {"n": 2}}), false, &id)])
        .unwrap();
    assert_eq!(r.results[0].doc().unwrap()["n"], 3);
    assert_eq!(
        db.commit(vec![upd(json!({"$inc": {"n": 1}}), false, "nope")])
            .unwrap_err()
            .code(),
        "not_found"
    );
    let r = db
        .commit(vec![upd(json!({"$set": {"k": 1}}), true, "new")])
        .unwrap();
    assert_eq!(r.results[0].doc(), Some(json!({"_id": "new", "k": 1})));
    assert_eq!(
        db.commit(vec![upd(json!({"$inc": {"_id": 1}}), false, "new")])
            .unwrap_err()
            .code(),
        "type_mismatch"
    );
    assert_eq!(
        db.commit(vec![put("c", "x", json!({"_id": "y"}))])
            .unwrap_err()
            .code(),
        "id_mismatch"
    );
    assert_eq!(
        db.commit(vec![put("c/d", "x", json!({}))])
            .unwrap_err()
            .code(),
        "bad_path"
    );
    let big = json!({"s": "x".repeat(2 << 20)});
    assert_eq!(
        db.commit(vec![put("c", "big", big)]).unwrap_err().code(),
        "document_too_large"
    );
    // A delete of a missing document changes nothing and takes no seq.
    let before = db.seq();
    let d = db
        .commit(vec![Write::Delete {
            collection: "c".into(),
            id: "ghost".into(),
            if_version: None,
        }])
        .unwrap();
    assert_eq!((d.seq, d.results[0].op), (before, None));
}

#[test]
fn log_retention_prunes_old_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_retaining(dir.path(), 5, Duration::from_secs(3600), &Clock::system());
    for i in 0..20 {
        db.commit(vec![put("c", "a", json!({"i": i}))]).unwrap();
    }
    assert_eq!(db.log_first().unwrap(), Some(16));
    assert_eq!(db.log_range(0, 100).unwrap().len(), 5);
}

/// Pruning starts where the last one stopped (not at the log's start); across thousands of
/// commits and a reopen, the log holds exactly the retained window.
#[test]
fn the_log_keeps_exactly_its_window_across_many_commits_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || DbOptions {
        durability: Durability::NoSync,
        log_retention_count: 5,
        log_retention_age: Duration::from_secs(3600),
        ..DbOptions::default()
    };
    let commits = 10_000;
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..commits {
            db.commit(vec![put("c", "a", json!({"i": i}))]).unwrap();
        }
        assert_eq!(db.log_first().unwrap(), Some(commits - 4));
        assert_eq!(db.log_range(0, commits + 100).unwrap().len(), 5);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..10 {
        db.commit(vec![put("c", "a", json!({"j": i}))]).unwrap();
    }
    assert_eq!(db.log_first().unwrap(), Some(commits + 10 - 4));
    assert_eq!(db.log_range(0, commits + 100).unwrap().len(), 5);
}

/// A commit skips the log scan while the oldest record it last kept is still retained; once
/// that record ages out, the next commit prunes it and everything as old after it.
#[test]
fn records_that_age_out_are_pruned_after_commits_that_skipped_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual_at_now();
    let db = open_retaining(dir.path(), 1_000_000, Duration::from_millis(300), &clock);
    for i in 0..20 {
        db.commit(vec![put("c", "a", json!({"i": i}))]).unwrap();
    }
    assert_eq!(db.log_first().unwrap(), Some(1), "all within the window");
    clock.advance(Duration::from_millis(300));
    db.commit(vec![put("c", "a", json!({"i": 20}))]).unwrap();
    assert_eq!(
        db.log_first().unwrap(),
        Some(1),
        "exactly the age is still kept"
    );
    clock.advance(Duration::from_millis(1));
    db.commit(vec![put("c", "a", json!({"i": 21}))]).unwrap();
    assert_eq!(
        db.log_first().unwrap(),
        Some(21),
        "the 20 old records are gone, the one 1 ms younger is not"
    );
    for i in 0..5 {
        db.commit(vec![put("c", "a", json!({"j": i}))]).unwrap();
    }
    assert_eq!(db.log_range(0, 100).unwrap().len(), 7);
}

/// Once the log holds its retention count, each commit deletes the oldest record without
/// reading the next one (a lower bound of its commit time says it is young enough); when that
/// bound ages out, the records are read again and every one too old goes.
#[test]
fn count_pruning_without_reads_still_prunes_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual_at_now();
    let db = open_retaining(dir.path(), 5, Duration::from_millis(300), &clock);
    for i in 0..50 {
        db.commit(vec![put("c", "a", json!({"i": i}))]).unwrap();
    }
    assert_eq!(db.log_first().unwrap(), Some(46), "the count holds");
    clock.advance(Duration::from_millis(301));
    db.commit(vec![put("c", "a", json!({"i": 50}))]).unwrap();
    assert_eq!(
        db.log_first().unwrap(),
        Some(51),
        "the aged records are gone"
    );
    assert_eq!(db.log_range(0, 100).unwrap().len(), 1);
}

/// The live feed's reader is woken by each committed batch (the writer announces it once per
/// batch), not only by its timeout.
#[test]
fn a_commit_wakes_the_feed_reader() {
    let dir = tempfile::tempdir().unwrap();
    let db = std::sync::Arc::new(open(dir.path()));
    for round in 0..3 {
        let seq = db.feed().last_seq();
        let reader = {
            let db = db.clone();
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                let last = db.feed().wait_after(seq, Duration::from_secs(60));
                (last, start.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        db.commit(vec![put("c", "a", json!({"round": round}))])
            .unwrap();
        let (last, waited) = reader.join().unwrap();
        assert_eq!(last, seq + 1);
        assert!(
            waited < Duration::from_secs(30),
            "woken by the commit, not the timeout"
        );
    }
}

/// Numbers come back bit for bit: a float that serde_json's fast parser rounded differently
/// (2.0773689041804753e-175) is stored, read and logged exactly.
#[test]
fn floats_survive_storage_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let floats = [
        2.0773689041804753e-175,
        0.1,
        1e300,
        5e-324,
        -1.7976931348623157e308,
        0.30000000000000004,
    ];
    let doc = json!({"f": floats});
    db.commit(vec![put("c", "a", doc.clone())]).unwrap();
    let got = db.get("c", "a").unwrap().unwrap().doc;
    let bits = |v: &Value| -> Vec<u64> {
        v["f"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap().to_bits())
            .collect()
    };
    assert_eq!(bits(&got), floats.map(f64::to_bits).to_vec());
    let log = db.log_range(0, 10).unwrap();
    let after = &log.last().unwrap()["changes"][0]["after"];
    assert_eq!(bits(after), floats.map(f64::to_bits).to_vec());
}

/// A full write queue refuses without losing the writes: they come back (prepared, so an
/// insert keeps the id it was given) and commit when retried.
#[test]
fn a_full_queue_hands_the_writes_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = DbOptions {
        durability: Durability::NoSync,
        ..DbOptions::default()
    };
    opts.store.write_queue_max = 1;
    let db = Db::open(dir.path(), opts).unwrap();
    let (mut tickets, mut refused) = (Vec::new(), 0);
    for i in 0..20_000 {
        let w = vec![Write::Insert {
            collection: "c".into(),
            id: None,
            doc: json!({"i": i}),
        }];
        match db.submit(w, QueueFull::Refuse) {
            Ok(t) => tickets.push(t),
            Err(Refused {
                error: e,
                writes: back,
            }) => {
                assert_eq!(e.code(), "overloaded");
                let back = back.expect("an overloaded submit hands the writes back");
                let Write::Insert { id, doc, .. } = &back[0] else {
                    panic!("not the write submitted: {back:?}");
                };
                let id = id.clone().expect("the generated id was kept");
                assert_eq!(
                    (doc["i"].as_i64(), doc["_id"].as_str()),
                    (Some(i), Some(id.as_str()))
                );
                refused += 1;
                // Retry until it is queued; the id stays the same.
                let mut again = back;
                let ticket = loop {
                    match db.submit(again, QueueFull::Refuse) {
                        Ok(t) => break t,
                        Err(Refused {
                            writes: Some(b), ..
                        }) => {
                            again = b;
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        Err(Refused { error: e, .. }) => panic!("{e}"),
                    }
                };
                let out = ticket.wait().unwrap();
                assert_eq!(out.results[0].id, id);
            }
        }
        if refused >= 3 {
            break;
        }
    }
    assert!(refused >= 3, "a one-slot queue never filled");
    for t in tickets {
        t.wait().unwrap();
    }
}

#[test]
fn planner_uses_indexes_and_explains() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let writes: Vec<Write> = (0..200)
        .map(|i| {
            put(
                "c",
                &format!("d{i:03}"),
                json!({"n": i, "g": i % 10, "tags": [format!("t{}", i % 7)]}),
            )
        })
        .collect();
    db.commit(writes).unwrap();
    let plan_of = |v: Value| {
        db.query("c", &q(v))
            .unwrap()
            .explain
            .plan
            .kind()
            .to_string()
    };
    assert_eq!(plan_of(json!({"filter": {"n": 5}})), "index");
    assert_eq!(
        plan_of(json!({"filter": {"n": {"$gte": 5, "$lt": 9}}})),
        "index"
    );
    assert_eq!(
        plan_of(json!({"filter": {"$or": [{"n": 5}, {"tags": "t3"}]}})),
        "union"
    );
    assert_eq!(plan_of(json!({"filter": {"_id": "d007"}})), "ids");
    assert_eq!(
        plan_of(json!({"filter": {"n": {"$gt": 50}}, "sort": {"n": -1}, "limit": 3})),
        "ordered_index"
    );
    assert_eq!(
        plan_of(json!({"filter": {"tags": {"$gt": "t1"}}, "sort": {"tags": 1}})),
        "index",
        "multikey paths never give order"
    );
    assert_eq!(plan_of(json!({"filter": {"n": null}})), "collection_scan");
    let out = db
        .query("c", &q(json!({"filter": {"n": {"$gte": 5, "$lt": 9}}})))
        .unwrap();
    assert_eq!(out.explain.keys_examined, 4);
    assert_eq!(out.docs.len(), 4);
    let top = db
        .query(
            "c",
            &q(json!({"filter": {"n": {"$gt": 50}}, "sort": {"n": -1}, "limit": 3})),
        )
        .unwrap();
    assert_eq!(
        top.docs
            .iter()
            .map(|d| d["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![199, 198, 197]
    );
    assert_eq!(
        top.explain.docs_examined, 3,
        "an ordered scan stops after the limit"
    );
}

#[test]
fn composite_index_builds_in_background_and_serves_queries() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    for chunk in 0..3 {
        let writes: Vec<Write> = (chunk * 400..(chunk + 1) * 400)
            .map(|i| put("c", &format!("d{i:04}"), json!({"g": i % 10, "n": i})))
            .collect();
        db.commit(writes).unwrap();
    }
    db.create_index(
        "c",
        "g_n",
        vec![("g".into(), Direction::Asc), ("n".into(), Direction::Asc)],
    )
    .unwrap();
    let query = q(json!({"filter": {"g": 3, "n": {"$gte": 100, "$lt": 200}}}));
    let ready =
        eventually(|| db.list_indexes("c").unwrap().composite[0].state == IndexState::Ready);
    assert!(ready, "index build finished");
    let out = db.query("c", &query).unwrap();
    assert!(
        matches!(&out.explain.plan, PlanDescription::Index { index, .. } if index == "c:g_n"),
        "{:?}",
        out.explain
    );
    assert_eq!(out.docs.len(), 10);
    assert_eq!(out.explain.keys_examined, 10);
    assert_eq!(
        db.create_index(
            "c",
            "g_n",
            vec![("g".into(), Direction::Asc), ("n".into(), Direction::Asc)]
        )
        .unwrap_err()
        .code(),
        "index_exists"
    );
}

#[test]
fn exemptions_stop_index_use_and_rebuild_when_lifted() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    db.set_exemptions("c", vec!["body".into()]).unwrap();
    db.commit(
        (0..50)
            .map(|i| put("c", &format!("d{i}"), json!({"body": i})))
            .collect(),
    )
    .unwrap();
    let query = q(json!({"filter": {"body": 7}}));
    let out = db.query("c", &query).unwrap();
    assert_eq!(
        (out.explain.plan.kind(), out.docs.len()),
        ("collection_scan", 1)
    );
    db.set_exemptions("c", vec![]).unwrap();
    wait_until_built(&db, "c");
    let out = db.query("c", &query).unwrap();
    assert_eq!((out.explain.plan.kind(), out.docs.len()), ("index", 1));
}

// ---- The planner-versus-full-scan property ----

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => (-4i64..5).prop_map(Value::from),
        1 => (-4i64..5).prop_map(|i| json!(i as f64 + 0.5)),
        // Strings sharing prefixes, so that cut index keys tie (see the cut limits below).
        3 => prop::sample::select(vec!["a", "b", "ab", "", "abc", "abd", "b\u{0}c"])
            .prop_map(Value::from),
    ]
}

fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => scalar(),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(Value::Array),
        1 => (scalar(), scalar()).prop_map(|(x, y)| json!({"x": x, "y": y})),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(|v| Value::Array(v.into_iter().map(|x| json!({"x": x})).collect())),
    ]
}

fn doc() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        (prop::sample::select(vec!["a", "b", "c"]), field_value()),
        0..3,
    )
    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn path() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["a", "b", "c", "a.x", "b.y", "_id"])
}

fn leaf() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec!["$eq", "$gt", "$gte", "$lt", "$lte", "$ne"]);
    prop_oneof![
        (path(), scalar()).prop_map(|(p, v)| json!({ p: v })),
        (path(), op, scalar()).prop_map(|(p, o, v)| json!({ p: { o: v } })),
        (path(), scalar(), scalar())
            .prop_map(|(p, lo, hi)| json!({ p: { "$gte": lo, "$lt": hi } })),
        (path(), prop::collection::vec(scalar(), 1..3))
            .prop_map(|(p, v)| json!({ p: { "$in": v } })),
        (path(), 0usize..3).prop_map(|(p, n)| json!({ p: { "$size": n } })),
    ]
}

fn filter() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => leaf(),
        1 => prop::collection::vec(leaf(), 1..3).prop_map(|f| json!({"$or": f})),
        1 => prop::collection::vec(leaf(), 1..3).prop_map(|f| json!({"$and": f})),
    ]
}

fn query() -> impl Strategy<Value = Value> {
    let sort = prop_oneof![
        Just(Value::Null),
        (path(), prop::sample::select(vec![1, -1])).prop_map(|(p, d)| json!({ p: d })),
    ];
    (filter(), sort, 0usize..3, 0usize..5).prop_map(
        |(f, s, skip, limit)| json!({"filter": f, "sort": s, "skip": skip, "limit": limit}),
    )
}

/// Puts `docs` in collection `c` as `d00`, `d01`, ... in one commit, waits until the
/// collection's first composite index is ready (so the planner may choose it), and returns the
/// documents as stored (with `_id`).
fn load_and_wait(db: &Db, docs: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut stored = Vec::new();
    let mut writes = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        let id = format!("d{i:02}");
        let mut full = serde_json::Map::new();
        full.insert("_id".into(), json!(id));
        full.extend(d.as_object().unwrap().clone());
        stored.push(Value::Object(full));
        writes.push(put("c", &id, d));
    }
    if !writes.is_empty() {
        db.commit(writes).unwrap();
    }
    eventually(|| db.list_indexes("c").unwrap().composite[0].state == IndexState::Ready);
    stored
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)))]

    /// Whatever plan the planner picks (ids, single-field or composite index, union, ordered
    /// index scan, collection scan), the result equals the reference evaluation over all
    /// documents, also when index entries cut strings after 0, 1 or 2 bytes.
    #[test]
    fn every_plan_agrees_with_a_full_scan(docs in prop::collection::vec(doc(), 0..25), queries in prop::collection::vec(query(), 1..12), cut in prop::sample::select(vec![0usize, 1, 2, 128])) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), DbOptions { string_key_bytes_max: cut, ..options() }).unwrap();
        db.create_index("c", "ab", vec![("a".into(), Direction::Asc), ("b".into(), Direction::Asc)]).unwrap();
        let stored = load_and_wait(&db, docs);
        for qv in queries {
            let query = Query::parse(&qv).unwrap();
            let expected = query.run(&stored);
            let got = db.query("c", &query).unwrap();
            prop_assert_eq!(&got.docs, &expected, "query {} plan {:?}", qv, got.explain);
            let _ = Filter::all();
        }
    }
}

fn prefixed_string() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        "", "a", "ab", "abc", "abd", "abcd", "b", "b\u{0}", "b\u{0}a", "ba", "é", "éa",
    ])
    .prop_map(Value::from)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)))]

    /// Index entries that cut strings after 0-3 bytes (so many strings tie in the index)
    /// still give exactly the full scan's results for every operator, `$in`, a composite index
    /// and sorted, limited queries.
    #[test]
    fn cut_string_keys_agree_with_a_full_scan(
        docs in prop::collection::vec((prefixed_string(), prefixed_string(), any::<bool>()), 0..20),
        queries in prop::collection::vec(
            (
                prop::sample::select(vec!["$eq", "$gt", "$gte", "$lt", "$lte", "$in", "st"]),
                prefixed_string(),
                prefixed_string(),
                prop::sample::select(vec![0, 1, -1]),
                0usize..4,
            ),
            1..12,
        ),
        cut in 0usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), DbOptions { string_key_bytes_max: cut, ..options() }).unwrap();
        db.create_index("c", "st", vec![("s".into(), Direction::Asc), ("t".into(), Direction::Desc)]).unwrap();
        let stored = load_and_wait(&db, docs.into_iter().map(|(sv, tv, array)| {
            if array { json!({"s": [sv, "abc"], "t": tv}) } else { json!({"s": sv, "t": tv}) }
        }));
        for (op, v, w, dir, limit) in queries {
            let filter = match op {
                "$in" => json!({"s": {"$in": [v, w]}}),
                "st" => json!({"s": v, "t": {"$gte": w}}),
                _ => json!({"s": {op: v}}),
            };
            let sort = if dir == 0 { Value::Null } else { json!({"s": dir}) };
            let qv = json!({"filter": filter, "sort": sort, "limit": limit});
            let query = Query::parse(&qv).unwrap();
            let got = db.query("c", &query).unwrap();
            prop_assert_eq!(&got.docs, &query.run(&stored), "query {} plan {:?}", qv, got.explain);
        }
    }
}

#[test]
fn a_write_guard_sees_each_write_and_its_refusal_applies_nothing() {
    use herald_db::{DbError, Guard, WriteEffect, WriteGuard};
    use std::sync::{Arc, Mutex};

    type Seen = (usize, String, Option<Value>, Option<Value>, u64);
    /// Records what it sees; refuses a document with n = 99 after, and id "locked" before.
    struct Recorder(Mutex<Vec<(&'static str, Seen)>>);
    impl Guard for Recorder {
        fn before(
            &self,
            index: usize,
            _c: &str,
            id: &str,
            before: Option<&Value>,
            v: u64,
        ) -> Result<(), DbError> {
            self.0
                .lock()
                .unwrap()
                .push(("before", (index, id.into(), before.cloned(), None, v)));
            if id == "locked" {
                return Err(DbError::Rejected {
                    code: "permission_denied",
                    message: "locked".into(),
                    index,
                });
            }
            Ok(())
        }
        fn after(&self, e: &WriteEffect<'_>) -> Result<(), DbError> {
            self.0.lock().unwrap().push((
                "after",
                (
                    e.index,
                    e.id.into(),
                    e.before.cloned(),
                    e.after.cloned(),
                    e.before_version,
                ),
            ));
            if e.after.is_some_and(|d| d["n"] == 99) {
                return Err(DbError::Rejected {
                    code: "permission_denied",
                    message: "no".into(),
                    index: e.index,
                });
            }
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    db.commit(vec![put("c", "a", json!({"n": 1}))]).unwrap();
    let recorder = Arc::new(Recorder(Mutex::new(Vec::new())));
    let guard: WriteGuard = recorder.clone();
    let writes = vec![
        Write::Delete {
            collection: "c".into(),
            id: "missing".into(),
            if_version: None,
        },
        put("c", "a", json!({"n": 99})),
        put("c", "never", json!({"n": 1})),
    ];
    let seq = db.seq();
    let err = db
        .submit(
            Transaction::new(writes).guard(guard.clone()),
            QueueFull::Refuse,
        )
        .unwrap()
        .wait()
        .unwrap_err();
    assert_eq!(DbError::from(err).code(), "permission_denied");
    assert_eq!(db.seq(), seq, "a refused transaction takes no seq");
    assert_eq!(db.get("c", "a").unwrap().unwrap().doc["n"], json!(1));
    let seen = recorder.0.lock().unwrap().clone();
    let a = Some(json!({"_id": "a", "n": 1}));
    assert_eq!(
        seen,
        vec![
            ("before", (0, "missing".into(), None, None, 0)),
            ("after", (0, "missing".into(), None, None, 0)),
            ("before", (1, "a".into(), a.clone(), None, 1)),
            (
                "after",
                (1, "a".into(), a, Some(json!({"_id": "a", "n": 99})), 1)
            ),
        ],
        "in order, and nothing after the refusal"
    );
    // Refused before its document is computed.
    let err = db
        .submit(
            Transaction::new(vec![put("c", "locked", json!({"n": 1}))]).guard(guard.clone()),
            QueueFull::Refuse,
        )
        .unwrap()
        .wait()
        .unwrap_err();
    assert_eq!(DbError::from(err).to_string(), "locked");
    // Allowed: applies normally.
    db.submit(
        Transaction::new(vec![put("c", "a", json!({"n": 2}))]).guard(guard),
        QueueFull::Refuse,
    )
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(db.get("c", "a").unwrap().unwrap().doc["n"], json!(2));
}

#[test]
fn long_strings_are_found_by_every_operator_and_never_sorted_by_their_cut_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        DbOptions {
            string_key_bytes_max: 2,
            ..options()
        },
    )
    .unwrap();
    // "abd" and "abc" share the cut key "ab"; the ids are in the opposite order of the values.
    let values = [
        ("d1", "abd"),
        ("d2", "abc"),
        ("d3", "ab"),
        ("d4", "b"),
        ("d5", "aa"),
    ];
    db.commit(
        values
            .iter()
            .map(|(id, v)| put("c", id, json!({ "s": v })))
            .collect(),
    )
    .unwrap();
    let ids = |filter: Value, sort: Value| -> Vec<String> {
        let q = Query::parse(&json!({"filter": filter, "sort": sort})).unwrap();
        let out = db.query("c", &q).unwrap();
        out.docs
            .iter()
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect()
    };
    let by_value = json!({"s": 1});
    assert_eq!(ids(json!({"s": "abc"}), Value::Null), ["d2"]);
    assert_eq!(
        ids(json!({"s": {"$gt": "abc"}}), by_value.clone()),
        ["d1", "d4"]
    );
    assert_eq!(
        ids(json!({"s": {"$gte": "abc"}}), by_value.clone()),
        ["d2", "d1", "d4"]
    );
    assert_eq!(
        ids(json!({"s": {"$lt": "abd"}}), by_value.clone()),
        ["d5", "d3", "d2"]
    );
    assert_eq!(
        ids(json!({"s": {"$lte": "abc"}}), by_value.clone()),
        ["d5", "d3", "d2"]
    );
    assert_eq!(
        ids(json!({"s": {"$in": ["abd", "zz"]}}), Value::Null),
        ["d1"]
    );
    // Sorted with a limit: an index-ordered scan would return d2's tie partner first.
    let q = Query::parse(&json!({"filter": {"s": {"$gte": "ab"}}, "sort": {"s": 1}, "limit": 2}))
        .unwrap();
    let out = db.query("c", &q).unwrap();
    let got: Vec<&str> = out
        .docs
        .iter()
        .map(|d| d["_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["d3", "d2"], "plan {:?}", out.explain);
    assert_ne!(
        out.explain.plan.kind(),
        "ordered_index",
        "{:?}",
        out.explain
    );
    // The cut is recorded with the store: a reopened database keeps it.
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let q = Query::parse(&json!({"filter": {"s": {"$gt": "abc"}}})).unwrap();
    assert_eq!(db.query("c", &q).unwrap().docs.len(), 2);
}

/// Documents written while a path was exempt get its entries when the exemption is lifted, and
/// the arrays among them make the path multikey, so a sort never reads that index in order
/// (arrays sort by their smallest element, not once per element).
#[test]
fn lifting_an_exemption_records_the_arrays_the_build_meets() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    db.set_exemptions("c", vec!["n".into()]).unwrap();
    let docs = [
        json!({"_id": "a", "n": [5, 1]}),
        json!({"_id": "b", "n": 3}),
        json!({"_id": "c", "n": [4, 9]}),
    ];
    db.commit(
        docs.iter()
            .map(|d| put("c", d["_id"].as_str().unwrap(), d.clone()))
            .collect(),
    )
    .unwrap();
    db.set_exemptions("c", vec![]).unwrap();
    wait_until_built(&db, "c");
    // In index order from 2, "a" would come last (its entry 5); sorted by its smallest
    // element, 1, it comes first.
    let q =
        Query::parse(&json!({"filter": {"n": {"$gte": 2}}, "sort": {"n": 1}, "limit": 3})).unwrap();
    let out = db.query("c", &q).unwrap();
    assert_eq!(out.docs, q.run(&docs), "plan {:?}", out.explain);
}

/// Entries written before a path was exempted are gone once the exemption is lifted again: a
/// document changed while the path was exempt must not be found under its old value (a sorted
/// query over the rebuilt index would return it twice, once in the wrong place).
#[test]
fn entries_from_before_an_exemption_do_not_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    db.commit(vec![
        put("c", "x", json!({"_id": "x", "n": 5, "m": {"k": 5}})),
        put("c", "y", json!({"_id": "y", "n": 3, "m": {"k": 3}})),
    ])
    .unwrap();
    db.set_exemptions("c", vec!["n".into(), "m".into()])
        .unwrap();
    db.commit(vec![put(
        "c",
        "x",
        json!({"_id": "x", "n": 1, "m": {"k": 1}}),
    )])
    .unwrap();
    db.set_exemptions("c", vec![]).unwrap();
    wait_until_built(&db, "c");
    let docs = [
        json!({"_id": "x", "n": 1, "m": {"k": 1}}),
        json!({"_id": "y", "n": 3, "m": {"k": 3}}),
    ];
    for q in [
        json!({"filter": {}, "sort": {"n": 1}}),
        json!({"filter": {"n": {"$gte": 0}}, "sort": {"n": -1}}),
        json!({"filter": {"n": 5}}),
        json!({"filter": {"m.k": {"$gt": 0}}, "sort": {"m.k": 1}}),
        json!({"filter": {"m.k": 5}}),
    ] {
        let q = Query::parse(&q).unwrap();
        let out = db.query("c", &q).unwrap();
        assert_eq!(out.docs, q.run(&docs), "plan {:?}", out.explain);
    }
}
