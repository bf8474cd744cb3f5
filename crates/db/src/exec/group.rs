//! Collection-group queries on one snapshot: every collection whose last segment is the group
//! name, as one result. Each result document carries `_path`, its full path; the order is the
//! query's sort (ending in `_id`), then `_path` in the direction of `_id`, so it is total
//! although ids repeat across collections.
//!
//! Two ways to run one ([`GroupPlan`]): a composite index of group scope (entries of every
//! collection of the group under one prefix, `layout.rs`), as an ordered scan that stops after
//! skip + limit or as index ranges; or, with no such index, each collection's own best plan
//! for its first skip + limit matches, merged in sort order with skip and limit applied to the
//! whole. Either way, a document is a match only if the query for its own collection matches
//! it: with [`Restrict`] (an end user's read rules) that is the query ANDed with the rule of
//! that collection, so hidden documents never count towards skip or limit.
//!
//! Cursors are positions in the group's order (`Cursors::parse_group`: the sort's values, an
//! `_id`, a `_path`), applied exactly to every document with its `_path`. An index scan's
//! bounds ignore the `_path` (`planner/cursor.rs` narrows to the `_id`: a superset, the fetch
//! decides); in a merge each collection runs the cursors in its own order, exactly
//! (`Cursors::in_collection`: the `_path` decides only that collection's document at the
//! cursor's `_id`, so it becomes the bound's inclusiveness).

use super::ordered::{self, GroupFetch};
use super::{candidates, execute, Budget, Collector, Examined, QUERY_DOCS_MAX};
use crate::error::DbError;
use crate::layout::{decode_doc, doc_key, split_group_suffix};
use crate::planner::{choose, Plan, PlanDescription};
use herald_query::{Projection, Query};
use herald_storage::{ReadTxn, Table};
use herald_value::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Most collections a group query without a serving group index reads (one plan each); past
/// it the query is refused with advice to declare a collection-group index.
pub const GROUP_COLLECTIONS_MAX: usize = 10_000;

pub use herald_query::PATH_MEMBER;

/// Which documents of a collection group a reader may see.
pub trait Restrict: Send + Sync {
    /// The query whose filter decides `collection`'s documents: the group query's filter ANDed
    /// with that collection's read rule; `None` when none of its documents is visible. Only the
    /// filter is used (the sort, cursors and window are the group query's own).
    fn query_for(&self, collection: &str) -> Option<Query>;
}

/// How a group query is answered.
#[derive(Debug, Clone)]
pub enum GroupPlan {
    /// An index of group scope: an ordered scan or index ranges, whose entries name documents
    /// across the group's collections.
    Index(Plan),
    /// Each collection's own plan, the results merged in sort order.
    Merge,
}

/// The query as a group runs it: its sort then `_path` (in the direction of `_id`), no
/// projection (applied at the end, with `_path` put back).
/// Its cursors are the group query's (parsed against that order), so `matches` decides them
/// exactly on a document with `_path`.
pub fn group_query(q: &Query) -> Query {
    let mut g = q.clone();
    g.sort = q.sort.for_group();
    g.projection = Projection::all();
    g
}

/// A stored document as a group result holds it: with `_path` (replacing a stored member of
/// that name).
pub fn with_path(mut doc: Value, collection: &str, id: &str) -> Value {
    if let Value::Object(m) = &mut doc {
        m.insert(
            PATH_MEMBER.to_string(),
            Value::String(format!("{collection}/{id}")),
        );
    }
    doc
}

/// The visible-documents query of each collection, computed once per collection.
pub struct Visible<'a> {
    base: Arc<Query>,
    restrict: Option<&'a dyn Restrict>,
    cache: HashMap<String, Option<Arc<Query>>>,
}

impl<'a> Visible<'a> {
    pub fn new(base: &Query, restrict: Option<&'a dyn Restrict>) -> Self {
        Visible {
            base: Arc::new(base.clone()),
            restrict,
            cache: HashMap::new(),
        }
    }

    /// The query whose filter decides a document of `collection` (`None`: none visible).
    pub fn query(&mut self, collection: &str) -> Option<Arc<Query>> {
        let Some(r) = self.restrict else {
            return Some(self.base.clone());
        };
        if let Some(q) = self.cache.get(collection) {
            return q.clone();
        }
        let q = r.query_for(collection).map(Arc::new);
        if self.cache.len() >= GROUP_COLLECTIONS_MAX {
            self.cache.clear();
        }
        self.cache.insert(collection.to_string(), q.clone());
        q
    }
}

/// Runs a group query: its documents (projected, each with `_path`) and, for a merge, the
/// distinct plans the collections ran. `collections`: the group's collections (only read for
/// [`GroupPlan::Merge`]); `plans_for`: a collection's candidate plans for a query.
#[allow(clippy::too_many_arguments)]
pub fn execute_group(
    read: &ReadTxn,
    scope: &str,
    q: &Query,
    plan: &GroupPlan,
    restrict: Option<&dyn Restrict>,
    collections: &mut dyn FnMut() -> Result<Vec<String>, DbError>,
    plans_for: &dyn Fn(&str, &Query) -> Vec<Plan>,
    ex: &mut Examined,
) -> Result<(Vec<Value>, PlanDescription), DbError> {
    if q.limit.is_some_and(|l| l > QUERY_DOCS_MAX) {
        return Err(DbError::LimitExceeded(format!(
            "limit may be at most {QUERY_DOCS_MAX}"
        )));
    }
    let gq = group_query(q);
    let window = q.limit.map(|l| q.skip.saturating_add(l));
    let mut out = Collector::new(&gq, window);
    let mut visible = Visible::new(q, restrict);
    let mut fetch = |suffix: &str, ex: &mut Examined| -> Result<Option<Value>, DbError> {
        let (coll, id) = split_group_suffix(suffix)?;
        let Some(vq) = visible.query(coll) else {
            return Ok(None);
        };
        let Some(v) = read.get(Table::Docs, &doc_key(coll, id))? else {
            return Ok(None);
        };
        ex.docs += 1;
        let (_, doc) = decode_doc(&v)?;
        if !vq.filter.matches(&doc) {
            return Ok(None);
        }
        let doc = with_path(doc, coll, id);
        Ok(gq.cursors.admits(&gq.sort, &doc).then_some(doc))
    };
    let (in_order, description) = match plan {
        GroupPlan::Index(Plan::Ordered(o)) => {
            let f: GroupFetch<'_> = &mut fetch;
            ordered::run(read, scope, &gq, o, Budget(None), ex, &mut out, Some(f))?;
            (true, plan_description(plan))
        }
        GroupPlan::Index(p) => {
            let mut ids = BTreeSet::new();
            candidates(read, p, Budget(None), &mut ids, ex)?;
            for suffix in ids {
                if let Some(doc) = fetch(&suffix, ex)? {
                    out.push(doc)?;
                }
            }
            (false, plan_description(plan))
        }
        GroupPlan::Merge => {
            let colls = collections()?;
            let mut kinds: Vec<PlanDescription> = Vec::new();
            for coll in &colls {
                let Some(vq) = visible.query(coll) else {
                    continue;
                };
                let mut cq = q.clone();
                cq.filter = vq.filter.clone();
                cq.skip = 0;
                cq.cursors = q.cursors.in_collection(&gq.sort, coll);
                cq.limit = window;
                cq.projection = Projection::all();
                let chosen = choose(read, coll, &cq, plans_for(coll, &cq))?;
                let d = chosen.plan.describe();
                if !kinds.contains(&d) {
                    kinds.push(d);
                }
                let docs =
                    execute(read, coll, &cq, &chosen.plan, Budget(None), ex)?.expect("no budget");
                for doc in docs {
                    let id = doc
                        .get("_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    out.push(with_path(doc, coll, &id))?;
                }
            }
            (
                false,
                PlanDescription::GroupMerge {
                    collections: colls.len(),
                    plans: kinds,
                },
            )
        }
    };
    let docs: Vec<Value> = out
        .finish(in_order)
        .into_iter()
        .map(|d| project(q, d))
        .collect();
    // The group's sort always has several keys, so the collector held up to `SORT_DOCS_MAX`;
    // a result is still at most `QUERY_DOCS_MAX` documents.
    if docs.len() > QUERY_DOCS_MAX {
        return Err(DbError::ResultTooLarge(QUERY_DOCS_MAX));
    }
    Ok((docs, description))
}

/// A group result document as returned: projected, with its `_path`.
pub fn project(q: &Query, doc: Value) -> Value {
    if q.projection.is_all() {
        return doc;
    }
    let path = doc.get(PATH_MEMBER).cloned();
    let mut shown = q.projection.apply(&doc);
    if let (Value::Object(m), Some(p)) = (&mut shown, path) {
        m.insert(PATH_MEMBER.to_string(), p);
    }
    shown
}

/// What `explain` says of a group plan (a merge's description needs the run).
pub fn plan_description(plan: &GroupPlan) -> PlanDescription {
    match plan {
        GroupPlan::Index(p) => p.describe(),
        GroupPlan::Merge => PlanDescription::GroupMerge {
            collections: 0,
            plans: vec![],
        },
    }
}
