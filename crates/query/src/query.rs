//! A whole pull query: filter, sort, cursors, skip, limit and projection, run over documents in
//! memory.
//!
//! This is the reference evaluation that every faster path (index plans, live results) must
//! agree with.

use crate::cursor::{Cursors, CURSOR_MEMBERS};
use crate::error::QueryError;
use crate::filter::Filter;
use crate::projection::Projection;
use crate::sort::Sort;
use herald_value::{Num, Value};

#[derive(Debug, Clone, Default)]
pub struct Query {
    pub filter: Filter,
    pub sort: Sort,
    /// `startAt`/`startAfter`/`endAt`/`endBefore`: bounds on the sort key (`cursor.rs`).
    pub cursors: Cursors,
    pub skip: usize,
    /// `None` means no limit (a limit of 0 in the request, as in MongoDB's `find`).
    pub limit: Option<usize>,
    pub projection: Projection,
}

impl Default for Filter {
    fn default() -> Self {
        Filter::all()
    }
}

const FIELDS: &[&str] = &[
    "filter",
    "sort",
    "skip",
    "limit",
    "projection",
    "startAt",
    "startAfter",
    "endAt",
    "endBefore",
];

impl Query {
    /// Parses `{"filter": {...}, "sort": {...}, "skip": n, "limit": n, "projection": {...},
    /// "startAt" | "startAfter": [...], "endAt" | "endBefore": [...]}`.
    /// Every member is optional; unknown members are refused so typos do not pass silently.
    pub fn parse(spec: &Value) -> Result<Query, QueryError> {
        Query::parse_as(spec, false)
    }

    /// [`parse`](Query::parse) for a collection-group query, whose cursors are positions in
    /// the group's order ([`with_group_cursors`](Query::with_group_cursors)).
    pub fn parse_group(spec: &Value) -> Result<Query, QueryError> {
        Query::parse_as(spec, true)
    }

    fn parse_as(spec: &Value, group: bool) -> Result<Query, QueryError> {
        let Value::Object(m) = spec else {
            return Err(QueryError::BadQuery("a query must be an object".into()));
        };
        if let Some(k) = m.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(QueryError::BadQuery(format!(
                "unknown query member '{k}' (expected one of {})",
                FIELDS.join(", ")
            )));
        }
        if m.get("filter").is_some_and(Value::is_null) {
            return Err(QueryError::BadFilter(
                "filter must be an object, got null".into(),
            ));
        }
        let null = Value::Null;
        let get = |k: &str| m.get(k).unwrap_or(&null);
        let q = Query::from_parts(
            get("filter"),
            get("sort"),
            get("skip"),
            get("limit"),
            get("projection"),
        )?;
        match group {
            true => q.with_group_cursors(CURSOR_MEMBERS.map(get)),
            false => q.with_cursors(CURSOR_MEMBERS.map(get)),
        }
    }

    /// Sets the cursors from `startAt`, `startAfter`, `endAt` and `endBefore` (`null` for an
    /// absent one), checked against the query's sort.
    pub fn with_cursors(mut self, members: [&Value; 4]) -> Result<Query, QueryError> {
        self.cursors = Cursors::parse(&self.sort, members)?;
        Ok(self)
    }

    /// Sets the cursors of a collection-group query (`null` for an absent one), checked against
    /// the group's order: the sort, then `_path` in the direction of `_id`
    /// ([`Cursors::parse_group`]). Such cursors are exact only on documents that carry `_path`,
    /// evaluated in the group's order ([`Sort::for_group`]).
    pub fn with_group_cursors(mut self, members: [&Value; 4]) -> Result<Query, QueryError> {
        self.cursors = Cursors::parse_group(&self.sort, members)?;
        Ok(self)
    }

    /// Whether a document is in the result before skip and limit: it matches the filter and
    /// lies between the cursors.
    pub fn matches(&self, doc: &Value) -> bool {
        self.filter.matches(doc) && self.cursors.admits(&self.sort, doc)
    }

    /// Builds a query from its parts; `null` stands for an absent part.
    pub fn from_parts(
        filter: &Value,
        sort: &Value,
        skip: &Value,
        limit: &Value,
        projection: &Value,
    ) -> Result<Query, QueryError> {
        let filter = match filter {
            Value::Null => Filter::all(),
            f => Filter::parse(f)?,
        };
        let limit = match count("limit", limit)? {
            0 => None,
            n => Some(n),
        };
        Ok(Query {
            filter,
            sort: Sort::parse(sort)?,
            cursors: Cursors::default(),
            skip: count("skip", skip)?,
            limit,
            projection: Projection::parse(projection)?,
        })
    }

    /// Runs the query over `docs`: filter, cursors, sort, skip, limit, then project.
    pub fn run<'a, I>(&self, docs: I) -> Vec<Value>
    where
        I: IntoIterator<Item = &'a Value>,
    {
        let mut hits: Vec<Value> = docs
            .into_iter()
            .filter(|d| self.matches(d))
            .cloned()
            .collect();
        self.sort.sort(&mut hits);
        let end = self
            .limit
            .map_or(usize::MAX, |l| self.skip.saturating_add(l));
        hits.into_iter()
            .take(end)
            .skip(self.skip)
            .map(|d| {
                if self.projection.is_all() {
                    d
                } else {
                    self.projection.apply(&d)
                }
            })
            .collect()
    }
}

fn count(name: &str, v: &Value) -> Result<usize, QueryError> {
    let bad = || QueryError::BadQuery(format!("{name} must be a non-negative integer, got {v}"));
    match v {
        Value::Null => Ok(0),
        Value::Number(n) => match Num::of(n) {
            Num::I(i) => usize::try_from(i).map_err(|_| bad()),
            Num::F(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e15 => Ok(f as usize),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    #[test]
    fn runs_filter_sort_skip_limit_projection() {
        let docs: Vec<Value> = (0..10)
            .map(|i| json!({"_id": format!("d{i}"), "n": i % 4, "x": i}))
            .collect();
        let q = Query::parse(&json!({"filter": {"n": {"$gte": 1}}, "sort": {"n": -1}, "skip": 1, "limit": 3, "projection": {"x": 1, "_id": 0}})).unwrap();
        let out = q.run(&docs);
        assert_eq!(out, vec![json!({"x": 7}), json!({"x": 2}), json!({"x": 6})]);
    }

    #[test]
    fn skip_and_limit_apply_after_the_cursor() {
        let docs: Vec<Value> = (0..10)
            .map(|i| json!({"_id": format!("d{i}"), "n": i}))
            .collect();
        let q = Query::parse(&json!({"sort": {"n": -1}, "startAfter": [7], "skip": 1, "limit": 2}))
            .unwrap();
        let ids: Vec<_> = q.run(&docs).iter().map(|d| d["_id"].clone()).collect();
        assert_eq!(ids, vec![json!("d5"), json!("d4")]);
        assert!(!q.matches(&docs[8]) && q.matches(&docs[6]));
    }

    #[test]
    fn envelope_errors() {
        assert_eq!(
            Query::parse(&json!({"limt": 1})).unwrap_err().code(),
            "bad_query"
        );
        assert_eq!(
            Query::parse(&json!({"skip": -1})).unwrap_err().code(),
            "bad_query"
        );
        assert_eq!(
            Query::parse(&json!({"limit": 1.5})).unwrap_err().code(),
            "bad_query"
        );
    }
}
