//! Query cursors (`startAt`, `startAfter`, `endAt`, `endBefore`): positions in a query's own
//! result order that bound its result, with Firestore's semantics.
//!
//! A cursor is an array of values, one per sort key in order (a prefix of them constrains only
//! that prefix), optionally followed by one more value for the `_id` tie-break the sort always
//! ends with (`sort.rs`). Each value is compared with the document's *sort key* for that key
//! (`sortkey.rs`: arrays by their smallest element ascending, largest descending), by MongoDB's
//! total order, in the key's direction: for `{"ts": -1}`, `startAfter: [1700]` keeps the
//! documents whose `ts` is below 1700. A query without a sort is ordered by `_id`, so its
//! cursors have one value, an id.
//!
//! `startAt` keeps the documents at or after the cursor, `startAfter` those strictly after every
//! document equal to it on the cursor's keys, `endAt` those at or before, `endBefore` those
//! strictly before. Skip and limit apply after the cursors.
//!
//! A collection-group query's order ends with `_path` after `_id` (ids repeat across
//! collections, [`Sort::for_group`]), so its cursors are parsed against that order
//! ([`Cursors::parse_group`]) and may name a `_path` after the `_id`, which makes every position
//! in a group's result reachable. Each collection of the group answers a superset of a group
//! cursor exactly in its own order ([`Cursors::in_collection`]: the `_path` value dropped, the
//! bound inclusive when that collection's document at the cursor is inside it).

use crate::error::QueryError;
use crate::limits::{CURSOR_ID_BYTES_MAX, CURSOR_PATH_BYTES_MAX};
use crate::sort::{Sort, PATH_MEMBER};
use crate::sortkey::KeyValue;
use herald_value::{compare, Value};
use std::cmp::Ordering;

/// The wire names of the four cursor members, in the order [`Cursors::parse`] takes them.
pub const CURSOR_MEMBERS: [&str; 4] = ["startAt", "startAfter", "endAt", "endBefore"];

/// One bound: the values, and whether documents equal to it on those keys are inside.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    /// One value per sort key, in sort order: a prefix of the keys (the last one, `_id`,
    /// included when the cursor names an id).
    pub values: Vec<Value>,
    /// `startAt` / `endAt`: documents equal to the cursor are inside the result.
    pub inclusive: bool,
}

/// The cursors of a query: where its result starts and where it ends, in result order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cursors {
    pub start: Option<Cursor>,
    pub end: Option<Cursor>,
}

impl Cursors {
    /// Parses `startAt`, `startAfter`, `endAt` and `endBefore` (`null` is absent) against the
    /// query's sort.
    pub fn parse(sort: &Sort, members: [&Value; 4]) -> Result<Cursors, QueryError> {
        let [start_at, start_after, end_at, end_before] = members;
        Ok(Cursors {
            start: one_of(sort, ("startAt", start_at), ("startAfter", start_after))?,
            end: one_of(sort, ("endAt", end_at), ("endBefore", end_before))?,
        })
    }

    /// Parses the cursors of a collection-group query: against the group's order (`sort`, then
    /// `_path` in the direction of `_id`), so a cursor may end with a document's full path.
    pub fn parse_group(sort: &Sort, members: [&Value; 4]) -> Result<Cursors, QueryError> {
        Cursors::parse(&sort.for_group(), members)
    }

    /// Group cursors (parsed against `group_sort`, [`Cursors::parse_group`]) as one collection
    /// of the group runs them, exactly, in its own order (the group's without `_path`): a cursor
    /// that names a `_path` drops it and is inclusive exactly when the collection's own
    /// document at the cursor's sort values and `_id` (whose path is `collection/_id`) is inside
    /// it. Ids are unique in a collection, so that document is the only one the `_path`
    /// decides there.
    pub fn in_collection(&self, group_sort: &Sort, collection: &str) -> Cursors {
        let Some((path_key, own)) = group_sort.keys().split_last() else {
            return self.clone();
        };
        let id_at = own.iter().position(|k| k.path.as_str() == "_id");
        let one = |c: &Option<Cursor>, start: bool| {
            let c = c.as_ref()?;
            let Some(path) = c.values.get(own.len()) else {
                return Some(c.clone());
            };
            let tie = id_at
                .and_then(|i| c.values[i].as_str())
                .map(|id| Value::String(format!("{collection}/{id}")));
            // Parsed cursors always have the id; without one, inclusive keeps a superset.
            let inclusive = tie.is_none_or(|tie| {
                let ord = path_key.dir.orient(compare(&tie, path));
                ord == Ordering::Equal && c.inclusive
                    || ord
                        == if start {
                            Ordering::Greater
                        } else {
                            Ordering::Less
                        }
            });
            Some(Cursor {
                values: c.values[..own.len()].to_vec(),
                inclusive,
            })
        };
        Cursors {
            start: one(&self.start, true),
            end: one(&self.end, false),
        }
    }

    pub fn is_none(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }

    /// Whether a document lies between the cursors, given its sort key (`Sort::key_values`).
    pub fn contains(&self, sort: &Sort, key: &[KeyValue<'_>]) -> bool {
        let start_ok = self.start.as_ref().is_none_or(|c| {
            let ord = c.position(sort, key);
            ord == Ordering::Greater || (c.inclusive && ord == Ordering::Equal)
        });
        start_ok
            && self.end.as_ref().is_none_or(|c| {
                let ord = c.position(sort, key);
                ord == Ordering::Less || (c.inclusive && ord == Ordering::Equal)
            })
    }

    /// [`contains`](Cursors::contains) for a whole document.
    pub fn admits(&self, sort: &Sort, doc: &Value) -> bool {
        self.is_none() || self.contains(sort, &sort.key_values(doc))
    }
}

impl Cursor {
    /// Where a document with sort key `key` is relative to the cursor, in result order, on the
    /// cursor's keys only: `Equal` when they agree on every value the cursor has.
    pub fn position(&self, sort: &Sort, key: &[KeyValue<'_>]) -> Ordering {
        for ((sk, kv), cv) in sort.keys().iter().zip(key).zip(&self.values) {
            let ord = sk.dir.orient(kv.order(&KeyValue::Value(cv)));
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

/// At most one of two exclusive members.
fn one_of(
    sort: &Sort,
    (a_name, a): (&str, &Value),
    (b_name, b): (&str, &Value),
) -> Result<Option<Cursor>, QueryError> {
    match (a, b) {
        (Value::Null, Value::Null) => Ok(None),
        (v, Value::Null) => parse_one(sort, a_name, v, true).map(Some),
        (Value::Null, v) => parse_one(sort, b_name, v, false).map(Some),
        _ => Err(QueryError::BadQuery(format!(
            "{a_name} and {b_name} cannot both be given: a query has one cursor at each end"
        ))),
    }
}

fn parse_one(sort: &Sort, name: &str, v: &Value, inclusive: bool) -> Result<Cursor, QueryError> {
    let bad = |why: String| QueryError::BadQuery(format!("{name} {why}"));
    let Value::Array(values) = v else {
        return Err(bad(format!(
            "must be an array of values in the order of the sort fields, got {v}"
        )));
    };
    let keys = sort.keys();
    if values.is_empty() {
        return Err(bad("must have at least one value".into()));
    }
    if values.len() > keys.len() {
        let fields: Vec<&str> = keys.iter().map(|k| k.path.as_str()).collect();
        let then = match keys.last().is_some_and(|k| k.path.as_str() == PATH_MEMBER) {
            true => "then an _id, then a _path (a collection group's tie-break)",
            false => "then an _id",
        };
        return Err(bad(format!(
            "has {} values but the query is ordered by {} key(s) ({}): at most one value per \
             sort field, {then}",
            values.len(),
            keys.len(),
            fields.join(", ")
        )));
    }
    for (k, value) in keys.iter().zip(values) {
        let (what, max) = match k.path.as_str() {
            "_id" => ("a document id", CURSOR_ID_BYTES_MAX),
            PATH_MEMBER => (
                "a document's full path (collection/id)",
                CURSOR_PATH_BYTES_MAX,
            ),
            _ => continue,
        };
        let ok = value
            .as_str()
            .is_some_and(|s| !s.is_empty() && s.len() <= max);
        if !ok {
            return Err(bad(format!(
                "has {value} for {}: {what} is a string of 1 to {max} bytes",
                k.path.as_str()
            )));
        }
    }
    Ok(Cursor {
        values: values.clone(),
        inclusive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn cursors(sort: Value, members: Value) -> Result<(Sort, Cursors), QueryError> {
        let sort = Sort::parse(&sort)?;
        let get = |k: &str| members.get(k).cloned().unwrap_or(Value::Null);
        let m = CURSOR_MEMBERS.map(get);
        let c = Cursors::parse(&sort, [&m[0], &m[1], &m[2], &m[3]])?;
        Ok((sort, c))
    }

    fn kept(sort: Value, members: Value, docs: &[Value]) -> Vec<String> {
        let (sort, c) = cursors(sort, members).unwrap();
        docs.iter()
            .filter(|d| c.admits(&sort, d))
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect()
    }

    fn docs() -> Vec<Value> {
        vec![
            json!({"_id": "a", "ts": 1}),
            json!({"_id": "b", "ts": 2}),
            json!({"_id": "c", "ts": 2}),
            json!({"_id": "d", "ts": 3}),
            json!({"_id": "e"}),
            json!({"_id": "f", "ts": [0, 5]}),
        ]
    }

    #[test]
    fn bounds_follow_the_sort_direction() {
        let d = docs();
        assert_eq!(
            kept(json!({"ts": 1}), json!({"startAt": [2]}), &d),
            ["b", "c", "d"]
        );
        assert_eq!(
            kept(json!({"ts": 1}), json!({"startAfter": [2]}), &d),
            ["d"]
        );
        // Descending: after 2 means below 2; the array's key is its largest element, 5.
        assert_eq!(
            kept(json!({"ts": -1}), json!({"startAfter": [2]}), &d),
            ["a", "e"]
        );
        assert_eq!(
            kept(json!({"ts": -1}), json!({"endBefore": [2]}), &d),
            ["d", "f"]
        );
        assert_eq!(
            kept(json!({"ts": -1}), json!({"endAt": [2]}), &d),
            ["b", "c", "d", "f"]
        );
    }

    #[test]
    fn a_trailing_id_breaks_ties() {
        let d = docs();
        assert_eq!(
            kept(json!({"ts": 1}), json!({"startAfter": [2, "b"]}), &d),
            ["c", "d"]
        );
        assert_eq!(
            kept(
                json!({"ts": 1}),
                json!({"startAt": [2, "c"], "endAt": [2, "c"]}),
                &d
            ),
            ["c"]
        );
        assert_eq!(
            kept(json!({"ts": 1}), json!({"endBefore": [2, "c"]}), &d),
            ["a", "b", "e", "f"]
        );
    }

    #[test]
    fn without_a_sort_cursors_are_ids() {
        let d = docs();
        assert_eq!(
            kept(
                json!(null),
                json!({"startAfter": ["b"], "endBefore": ["e"]}),
                &d
            ),
            ["c", "d"]
        );
    }

    #[test]
    fn null_and_missing_are_equal_and_cursors_compare_across_types() {
        let d = docs();
        assert_eq!(kept(json!({"ts": 1}), json!({"endAt": [null]}), &d), ["e"]);
        // Strings sort after numbers.
        assert_eq!(
            kept(json!({"ts": 1}), json!({"startAt": ["x"]}), &d),
            Vec::<String>::new()
        );
    }

    #[test]
    fn malformed_cursors_are_refused() {
        for (sort, members) in [
            (json!({"ts": 1}), json!({"startAt": 3})),
            (json!({"ts": 1}), json!({"startAt": []})),
            (json!({"ts": 1}), json!({"startAt": [1, "a", 3]})),
            (json!({"ts": 1}), json!({"startAt": [1, 2]})),
            (json!({"ts": 1}), json!({"startAt": [1, ""]})),
            (json!(null), json!({"endAt": [1]})),
            (json!({"ts": 1}), json!({"startAt": [1], "startAfter": [2]})),
            (json!({"ts": 1}), json!({"endAt": [1], "endBefore": [2]})),
        ] {
            let e = cursors(sort.clone(), members.clone()).unwrap_err();
            assert_eq!(e.code(), "bad_query", "{sort} {members}");
        }
        let e = cursors(json!({"ts": 1}), json!({"startAt": [1, 2, 3]})).unwrap_err();
        assert!(
            e.to_string().contains("at most one value per sort field"),
            "{e}"
        );
    }

    fn group_cursors(sort: Value, members: Value) -> Result<(Sort, Cursors), QueryError> {
        let sort = Sort::parse(&sort)?;
        let get = |k: &str| members.get(k).cloned().unwrap_or(Value::Null);
        let m = CURSOR_MEMBERS.map(get);
        let c = Cursors::parse_group(&sort, [&m[0], &m[1], &m[2], &m[3]])?;
        Ok((sort.for_group(), c))
    }

    fn group_docs() -> Vec<Value> {
        vec![
            json!({"_id": "a", "ts": 1, "_path": "r1/m/a"}),
            json!({"_id": "a", "ts": 1, "_path": "r2/m/a"}),
            json!({"_id": "a", "ts": 1, "_path": "r3/m/a"}),
            json!({"_id": "b", "ts": 1, "_path": "r1/m/b"}),
            json!({"_id": "a", "ts": 2, "_path": "r1/m/a"}),
        ]
    }

    fn group_kept(sort: Value, members: Value) -> Vec<String> {
        let (sort, c) = group_cursors(sort, members).unwrap();
        let mut docs = group_docs();
        docs.retain(|d| c.admits(&sort, d));
        sort.sort(&mut docs);
        docs.iter()
            .map(|d| format!("{}:{}", d["ts"], d["_path"].as_str().unwrap()))
            .collect()
    }

    #[test]
    fn a_group_cursor_may_end_with_a_path() {
        assert_eq!(
            group_kept(json!({"ts": 1}), json!({"startAfter": [1, "a", "r1/m/a"]})),
            ["1:r2/m/a", "1:r3/m/a", "1:r1/m/b", "2:r1/m/a"]
        );
        // Without the path, the cursor covers every collection's tie.
        assert_eq!(
            group_kept(json!({"ts": 1}), json!({"startAfter": [1, "a"]})),
            ["1:r1/m/b", "2:r1/m/a"]
        );
        assert_eq!(
            group_kept(
                json!({"ts": 1}),
                json!({"startAt": [1, "a", "r2/m/a"], "endBefore": [1, "b", "r1/m/b"]})
            ),
            ["1:r2/m/a", "1:r3/m/a"]
        );
        // `_path` follows `_id`'s direction: descending ids, descending paths.
        assert_eq!(
            group_kept(
                json!({"ts": 1, "_id": -1}),
                json!({"endAt": [1, "a", "r2/m/a"]})
            ),
            ["1:r1/m/b", "1:r3/m/a", "1:r2/m/a"]
        );
    }

    /// In each collection, the cursors without `_path` keep exactly the documents the group
    /// cursors keep.
    #[test]
    fn a_group_cursor_runs_exactly_in_each_collection() {
        let docs = group_docs();
        for sort in [json!({"ts": 1}), json!({"ts": -1, "_id": -1}), json!(null)] {
            for (values, tail) in [
                (json!([1, "a", "r2/m/a"]), 3),
                (json!([1, "a", "r1/m/a"]), 3),
                (json!([2, "a", "r1/m/a"]), 3),
                (json!([1, "a"]), 2),
            ] {
                let mut values = values.as_array().unwrap().clone();
                if sort.is_null() {
                    values.remove(0); // only an id, then a path
                }
                for member in CURSOR_MEMBERS {
                    let members = json!({ member: values.clone() });
                    let (gsort, c) = group_cursors(sort.clone(), members.clone()).unwrap();
                    let own = Sort::parse(&sort).unwrap();
                    for coll in ["r1/m", "r2/m", "r3/m"] {
                        let cc = c.in_collection(&gsort, coll);
                        for d in docs
                            .iter()
                            .filter(|d| d["_path"].as_str().unwrap().starts_with(coll))
                        {
                            assert_eq!(
                                cc.admits(&own, d),
                                c.admits(&gsort, d),
                                "{sort} {members} {coll} {d}"
                            );
                        }
                        if tail == 2 {
                            assert_eq!(cc, c);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn malformed_group_cursors_are_refused() {
        for (sort, members, says) in [
            (
                json!({"ts": 1}),
                json!({"startAt": [1, "a", "p/x/a", 4]}),
                "then a _path",
            ),
            (
                json!({"ts": 1}),
                json!({"startAt": [1, "a", 7]}),
                "for _path",
            ),
            (
                json!({"ts": 1}),
                json!({"startAfter": [1, "a", ""]}),
                "for _path",
            ),
            (json!(null), json!({"endAt": ["a", null]}), "for _path"),
            (
                json!({"ts": 1}),
                json!({"endBefore": [1, 2, "p/x/a"]}),
                "for _id",
            ),
        ] {
            let e = group_cursors(sort.clone(), members.clone()).unwrap_err();
            assert_eq!(e.code(), "bad_query", "{sort} {members}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let long = "p/".repeat(CURSOR_PATH_BYTES_MAX);
        let e = group_cursors(json!(null), json!({"startAt": ["a", long]})).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("1 to {CURSOR_PATH_BYTES_MAX} bytes")),
            "{e}"
        );
        // A collection query still takes no value past `_id`.
        let e = cursors(json!({"ts": 1}), json!({"startAt": [1, "a", "p/x/a"]})).unwrap_err();
        assert_eq!(e.code(), "bad_query");
    }
}
