//! Cursors on collection groups: every plan of a group query with a cursor taken from a
//! document of the group (its sort values, then optionally its `_id` and its `_path`), of each
//! of the four kinds, over both sort directions, with and without group indexes and with a read
//! restriction, returns exactly the reference (herald-query's evaluation in the group's order);
//! paging with `startAfter` from each page's last document visits every document once; and a
//! group-index page after a cursor reads about a page of index keys.
//!
//! Ids repeat across the group's collections (`groups.rs`' data), so pages cut through ties on
//! `_id` that only `_path` breaks. `HERALD_PROPTEST_CASES` sets the number of cases (default 48).

use crate::groups::{
    apply, group_index, op, open, put, reference, rule_visible, wait_ready, Op, Rule,
};
use herald_db::{Db, PlanDescription};
use herald_query::{Query, CURSOR_MEMBERS};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

type Store = BTreeMap<(String, String), Value>;

const SORTS: &[&str] = &[
    "null",
    r#"{"ts": -1}"#,
    r#"{"ts": 1}"#,
    r#"{"n": 1, "ts": -1}"#,
    r#"{"_id": -1}"#,
    r#"{"ts": 1, "_id": -1}"#,
    r#"{"_id": 1, "ts": -1}"#,
];

const FILTERS: &[&str] = &[
    "{}",
    r#"{"author": "bob"}"#,
    r#"{"author": {"$in": ["ann", "cy"]}}"#,
    r#"{"ts": {"$gte": 2}}"#,
];

/// The group's documents (with `_path`) in the order of `sort` (a sort spec), unfiltered.
fn ordered(store: &Store, sort: &Value) -> Vec<Value> {
    let q = Query::parse(&json!({ "sort": sort })).unwrap();
    reference(&q, store, &|_, _| true)
}

/// The first `len` values of `doc`'s position in the group order of `sort`: its sort values
/// (null when missing), `_id`, `_path`.
fn cursor_of(doc: &Value, sort: &Value, len: usize) -> Value {
    let q = Query::parse(&json!({ "sort": sort })).unwrap();
    let values: Vec<Value> = q
        .sort
        .for_group()
        .keys()
        .iter()
        .map(|k| doc.get(k.path.as_str()).cloned().unwrap_or(Value::Null))
        .take(len)
        .collect();
    Value::Array(values)
}

fn declare(db: &Db) {
    group_index(db, "author_ts", &[("author", 1), ("ts", -1)]);
    group_index(db, "n_ts", &[("n", 1), ("ts", -1)]);
    group_index(db, "ts", &[("ts", 1)]);
    wait_ready(db);
}

/// Every plan (and the chosen one), unrestricted and restricted, equals the reference.
fn check_every_plan(db: &Db, store: &Store, qv: &Value) -> Result<Vec<Value>, TestCaseError> {
    let q = Query::parse_group(qv).unwrap();
    let all = reference(&q, store, &|_, _| true);
    for r in db.query_group_every_plan("messages", &q, None).unwrap() {
        prop_assert_eq!(&r.docs, &all, "query {} plan {:?}", qv, r.plan);
    }
    prop_assert_eq!(
        &db.query_group("messages", &q, None).unwrap().docs,
        &all,
        "query {}",
        qv
    );
    let rule = Rule { query: qv.clone() };
    let seen = reference(&q, store, &rule_visible);
    for r in db
        .query_group_every_plan("messages", &q, Some(&rule))
        .unwrap()
    {
        prop_assert_eq!(&r.docs, &seen, "restricted query {} plan {:?}", qv, r.plan);
    }
    Ok(all)
}

/// A query with one or two cursors from documents of the group.
#[derive(Debug, Clone)]
struct CursorCase {
    filter: usize,
    sort: usize,
    /// (kind: index into `CURSOR_MEMBERS`, which document, how many values).
    cursors: Vec<(usize, usize, usize)>,
    skip: usize,
    limit: Option<usize>,
}

fn cursor_case() -> impl Strategy<Value = CursorCase> {
    (
        0..FILTERS.len(),
        0..SORTS.len(),
        prop::collection::vec((0usize..4, any::<usize>(), 1usize..5), 1..3),
        0usize..2,
        prop::option::of(1usize..5),
    )
        .prop_map(|(filter, sort, cursors, skip, limit)| CursorCase {
            filter,
            sort,
            cursors,
            skip,
            limit,
        })
}

impl CursorCase {
    fn spec(&self, store: &Store) -> Option<Value> {
        let sort: Value = serde_json::from_str(SORTS[self.sort]).unwrap();
        let docs = ordered(store, &sort);
        if docs.is_empty() {
            return None;
        }
        let keys = Query::parse(&json!({ "sort": sort }))
            .unwrap()
            .sort
            .keys()
            .len()
            + 1;
        let mut spec = json!({"filter": serde_json::from_str::<Value>(FILTERS[self.filter]).unwrap(),
                              "sort": sort, "skip": self.skip});
        if let Some(l) = self.limit {
            spec["limit"] = json!(l);
        }
        for &(kind, at, len) in &self.cursors {
            let doc = &docs[at % docs.len()];
            // startAt/startAfter and endAt/endBefore exclude each other: the last one wins.
            let other = match kind {
                0 | 1 => CURSOR_MEMBERS[1 - kind],
                _ => CURSOR_MEMBERS[5 - kind],
            };
            spec.as_object_mut().unwrap().remove(other);
            spec[CURSOR_MEMBERS[kind]] = cursor_of(doc, &sort, len.min(keys));
        }
        Some(spec)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(std::env::var("HERALD_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)))]

    /// Every plan of a group query with cursors returns exactly the reference; paging with
    /// `startAfter` from each page's last document (sort values, `_id`, `_path`) through every
    /// plan visits every matching document once, in order.
    #[test]
    fn group_cursors_select_exactly_the_reference(
        ops in prop::collection::vec(op(), 0..40),
        with_indexes in any::<bool>(),
        cases in prop::collection::vec(cursor_case(), 1..8),
        paging in (0..FILTERS.len(), 0..SORTS.len(), 1usize..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        if with_indexes {
            declare(&db);
        }
        let mut store = BTreeMap::new();
        let ops: Vec<Op> = ops;
        if !ops.is_empty() {
            apply(&db, &mut store, &ops);
        }
        for case in &cases {
            if let Some(spec) = case.spec(&store) {
                check_every_plan(&db, &store, &spec)?;
            }
        }
        let (filter, sort, page) = paging;
        let sort: Value = serde_json::from_str(SORTS[sort]).unwrap();
        let filter: Value = serde_json::from_str(FILTERS[filter]).unwrap();
        let whole = reference(
            &Query::parse_group(&json!({"filter": filter, "sort": sort})).unwrap(),
            &store,
            &|_, _| true,
        );
        let mut seen: Vec<Value> = Vec::new();
        let mut spec = json!({"filter": filter, "sort": sort, "limit": page});
        loop {
            let docs = check_every_plan(&db, &store, &spec)?;
            let Some(last) = docs.last() else { break };
            prop_assert!(docs.len() <= page);
            spec["startAfter"] = cursor_of(last, &sort, usize::MAX);
            seen.extend(docs);
        }
        prop_assert_eq!(seen, whole);
    }
}

/// A page after a cursor through a group index reads about a page of index keys, however deep
/// the cursor, also when the cursor's `_id` repeats in every collection of the group; the merge
/// of the collections' plans gives the same page.
#[test]
fn a_group_index_page_after_a_cursor_reads_about_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut writes = Vec::new();
    for i in 0..2000 {
        // 40 rooms; ids repeat in every room, and ts ties in fives across rooms.
        let room = format!("rooms/r{:02}/messages", i % 40);
        writes.push(put(&room, &format!("m{:03}", i / 40), json!({"ts": i / 5})));
    }
    for chunk in writes.chunks(500) {
        db.commit(chunk.to_vec()).unwrap();
    }
    let page = |cursor: Option<Value>| {
        let mut spec = json!({"sort": {"ts": -1}, "limit": 20});
        if let Some(c) = cursor {
            spec["startAfter"] = c;
        }
        Query::parse_group(&spec).unwrap()
    };
    let all = db.query_group("messages", &page(None), None).unwrap();
    assert!(matches!(
        all.explain.plan,
        PlanDescription::GroupMerge { .. }
    ));
    // Without an index, the merge pages through every document.
    let mut merged = Vec::new();
    let mut cursor = None;
    for _ in 0..60 {
        let out = db
            .query_group("messages", &page(cursor.clone()), None)
            .unwrap();
        let Some(last) = out.docs.last() else { break };
        cursor = Some(cursor_of(last, &json!({"ts": -1}), usize::MAX));
        merged.extend(out.docs);
    }
    assert_eq!(merged.len(), 1200, "60 pages of 20");
    group_index(&db, "ts", &[("ts", -1)]);
    wait_ready(&db);
    let mut cursor = None;
    for (n, want) in merged.chunks(20).enumerate() {
        let out = db
            .query_group("messages", &page(cursor.clone()), None)
            .unwrap();
        assert_eq!(out.docs, want, "page {n}");
        assert!(
            matches!(&out.explain.plan, PlanDescription::OrderedIndex { index, .. } if index == "g:ts"),
            "{:?}",
            out.explain
        );
        // The page, plus the cursor's own tie on (ts, _id): the other rooms' documents with
        // that id and ts (at most 5 share a ts).
        assert!(
            out.explain.keys_examined <= 20 + 5,
            "page {n}: {:?}",
            out.explain
        );
        assert!(
            out.explain.docs_examined <= 20 + 5,
            "page {n}: {:?}",
            out.explain
        );
        cursor = Some(cursor_of(
            out.docs.last().unwrap(),
            &json!({"ts": -1}),
            usize::MAX,
        ));
    }
}
