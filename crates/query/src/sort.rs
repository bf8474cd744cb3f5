//! Sort specifications and the total order of query results.
//!
//! Each key reduces a document to one sort value, as MongoDB does: the value at the path; for
//! arrays the smallest element when ascending and the largest when descending; missing as null;
//! an empty array below null. Ties are broken by `_id` ascending, so every result order is total
//! and positions in a live result are well defined.

use crate::error::QueryError;
use crate::limits::SORT_KEYS_MAX;
use crate::sortkey::{sort_key, Direction, KeyValue};
use herald_value::{FieldPath, Num, Value};
use std::cmp::Ordering;

/// The member of a collection-group result document that holds its full path
/// (`collection/id`): the last key of a group's order ([`Sort::for_group`]), since ids repeat
/// across collections.
pub const PATH_MEMBER: &str = "_path";

#[derive(Debug, Clone)]
pub struct SortKey {
    pub path: FieldPath,
    pub dir: Direction,
}

/// A parsed sort: the user's keys, then `_id` ascending unless the user already sorted by `_id`.
#[derive(Debug, Clone)]
pub struct Sort {
    keys: Vec<SortKey>,
}

impl Default for Sort {
    fn default() -> Self {
        Sort::by_id()
    }
}

impl Sort {
    /// Ordering by `_id` alone: the order of a query without a sort.
    pub fn by_id() -> Sort {
        Sort {
            keys: vec![id_key()],
        }
    }

    /// Parses `{"year": -1, "title": 1}`; key order is sort order. `null` means "no sort".
    pub fn parse(spec: &Value) -> Result<Sort, QueryError> {
        if spec.is_null() {
            return Ok(Sort::by_id());
        }
        let mut sort = Sort::parse_without_id(spec)?;
        if !sort.keys.iter().any(|k| k.path.as_str() == "_id") {
            sort.keys.push(id_key());
        }
        Ok(sort)
    }

    /// Parses a sort without the `_id` tie-break (for `$push` with `$sort`, which is stable).
    pub fn parse_without_id(spec: &Value) -> Result<Sort, QueryError> {
        let map = match spec {
            Value::Object(m) => m,
            other => {
                return Err(QueryError::BadSort(format!(
                    "sort must be an object, got {other}"
                )))
            }
        };
        if map.len() > SORT_KEYS_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "sort has more than {SORT_KEYS_MAX} keys"
            )));
        }
        let mut keys = Vec::with_capacity(map.len() + 1);
        for (field, dir) in map {
            let dir = match dir {
                Value::Number(n) => match Num::of(n).as_f64() {
                    1.0 => Direction::Asc,
                    -1.0 => Direction::Desc,
                    _ => return Err(bad_dir(field, dir)),
                },
                _ => return Err(bad_dir(field, dir)),
            };
            let path = FieldPath::parse(field).map_err(|e| QueryError::BadSort(e.to_string()))?;
            if field.starts_with('$') {
                return Err(QueryError::BadSort(format!("cannot sort by '{field}'")));
            }
            keys.push(SortKey { path, dir });
        }
        Ok(Sort { keys })
    }

    pub fn keys(&self) -> &[SortKey] {
        &self.keys
    }

    /// This sort with one more key after its last (a tie-break past `_id`: collection-group
    /// results, whose `_id`s repeat across collections, end with their `_path`).
    pub fn then_by(mut self, path: FieldPath, dir: Direction) -> Sort {
        self.keys.push(SortKey { path, dir });
        self
    }

    /// A collection group's result order: this sort, then `_path` in the direction of `_id`.
    pub fn for_group(&self) -> Sort {
        let dir = self
            .keys
            .iter()
            .find(|k| k.path.as_str() == "_id")
            .map_or(Direction::Asc, |k| k.dir);
        self.clone()
            .then_by(FieldPath::parse(PATH_MEMBER).expect("a valid path"), dir)
    }

    /// Compares two documents in result order. A value that is not a document has null keys.
    pub fn compare(&self, a: &Value, b: &Value) -> Ordering {
        self.compare_keys(&self.key_values(a), &self.key_values(b))
    }

    /// Sorts `docs` in result order. Each document's keys are computed once and encoded into one
    /// order-preserving byte string, so the sort compares contiguous bytes instead of chasing
    /// pointers into documents (which made it cache-bound).
    pub fn sort(&self, docs: &mut Vec<Value>) {
        let mut keyed: Vec<(Vec<u8>, usize)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (self.encoded_key(d), i))
            .collect();
        keyed.sort_unstable();
        let mut slots: Vec<Option<Value>> = std::mem::take(docs).into_iter().map(Some).collect();
        docs.extend(
            keyed
                .into_iter()
                .map(|(_, i)| slots[i].take().expect("each index once")),
        );
    }

    /// The document's sort key as bytes: comparing two of them with `cmp` gives result order.
    pub fn encoded_key(&self, doc: &Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        for (kv, key) in self.key_values(doc).iter().zip(&self.keys) {
            let start = out.len();
            match kv {
                // Below every value's tag, including null's.
                KeyValue::EmptyArray => out.push(0x01),
                KeyValue::Null => herald_value::encode_key(&Value::Null, &mut out),
                KeyValue::Value(v) => herald_value::encode_key(v, &mut out),
            }
            if key.dir == Direction::Desc {
                for b in &mut out[start..] {
                    *b = !*b;
                }
            }
        }
        out
    }

    /// The sort values of one document, one per key (see `sortkey.rs`).
    pub fn key_values<'a>(&self, doc: &'a Value) -> Vec<KeyValue<'a>> {
        match doc.as_object() {
            Some(m) => {
                let paths: Vec<_> = self.keys.iter().map(|k| k.path.segments()).collect();
                let dirs: Vec<_> = self.keys.iter().map(|k| k.dir).collect();
                sort_key(m, &paths, &dirs)
            }
            None => vec![KeyValue::Null; self.keys.len()],
        }
    }

    pub fn compare_keys(&self, a: &[KeyValue<'_>], b: &[KeyValue<'_>]) -> Ordering {
        for ((key, va), vb) in self.keys.iter().zip(a).zip(b) {
            let ord = key.dir.orient(va.order(vb));
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

fn id_key() -> SortKey {
    SortKey {
        path: FieldPath::parse("_id").expect("valid path"),
        dir: Direction::Asc,
    }
}

fn bad_dir(field: &str, dir: &Value) -> QueryError {
    QueryError::BadSort(format!(
        "sort direction for '{field}' must be 1 or -1, got {dir}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn ids(sort: Value, docs: Vec<Value>) -> Vec<String> {
        let s = Sort::parse(&sort).unwrap();
        let mut docs = docs;
        s.sort(&mut docs);
        docs.iter()
            .map(|d| d["_id"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn arrays_sort_by_min_ascending_and_max_descending() {
        let docs = vec![
            json!({"_id": "a", "x": [1, 9]}),
            json!({"_id": "b", "x": 5}),
            json!({"_id": "c", "x": []}),
            json!({"_id": "d"}),
        ];
        assert_eq!(ids(json!({"x": 1}), docs.clone()), ["c", "d", "a", "b"]);
        assert_eq!(ids(json!({"x": -1}), docs), ["a", "b", "d", "c"]);
    }

    #[test]
    fn keys_sharing_an_array_pair_values_from_one_element() {
        let docs = vec![
            json!({"_id": "p", "a": [{"b": 4, "c": 1}, {"b": 1, "c": 2}]}),
            json!({"_id": "q", "a": [{"b": 2, "c": 1}, {"b": 4, "c": 2}]}),
        ];
        // Independent minima would tie at (1, 1); the tuples are (1, 4) and (1, 2).
        assert_eq!(ids(json!({"a.c": 1, "a.b": 1}), docs), ["q", "p"]);
    }

    #[test]
    fn ties_break_by_id() {
        let docs = vec![json!({"_id": "b", "x": 1}), json!({"_id": "a", "x": 1})];
        assert_eq!(ids(json!({"x": -1}), docs), ["a", "b"]);
    }

    #[test]
    fn bad_specs() {
        assert_eq!(
            Sort::parse(&json!({"x": 2})).unwrap_err().code(),
            "bad_sort"
        );
        assert_eq!(
            Sort::parse(&json!([["x", 1]])).unwrap_err().code(),
            "bad_sort"
        );
        assert_eq!(
            Sort::parse(&json!({"x": "asc"})).unwrap_err().code(),
            "bad_sort"
        );
    }
}
