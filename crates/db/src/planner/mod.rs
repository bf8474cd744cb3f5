//! Choosing how to answer a query: by `_id`, through index ranges (single-field or composite),
//! by a union of index scans for `$or`, by an intersection of equality ranges (zig-zag join), by
//! an ordered index scan that yields results in sort order and stops after skip + limit, or by a
//! collection scan. [`candidates`] lists every plan that can answer a query; `choose` picks one
//! by an estimate of what it examines.
//!
//! Index plans only produce *candidates*: the executor fetches each candidate document from the
//! same snapshot and runs the full filter on it. So a plan must never miss a matching document,
//! but may return extra ones (see `ranges.rs` for which predicates narrow an index). An ordered
//! plan must also yield the matches in exactly the result order (`ordered.rs` says when it can).

mod choose;
mod cursor;
mod ordered;
mod ranges;

pub use choose::{choose, Chosen, Estimate};
pub use ranges::{field_ranges, only_conjuncts, Ranges};

use crate::catalog::{CollectionCatalog, IndexState};
use crate::indexer::{composite_index_name, field_index_name, group_index_name};
use crate::layout::{index_prefix, prefix_end};
use herald_query::{Expr, FieldExpr, FieldOp, Query, Test};
use herald_value::{encode_key_desc_limited, encode_key_limited, Value};
use ranges::{conjuncts, eq_range, field_indexed, indexable_scalar, is_multikey};

/// What the planner knows about one collection.
#[derive(Clone, Copy)]
pub struct PlanCtx<'a> {
    pub collection: &'a str,
    pub cat: Option<&'a CollectionCatalog>,
    /// Strings longer than this are cut in index entries.
    pub key_limit: usize,
    /// Whether the catalog records every document's arrays and objects (`Catalog::shapes_tracked`).
    pub shapes: bool,
}

impl PlanCtx<'_> {
    /// The index name of composite `name` here: a collection's (`c:name`), or a collection
    /// group's (`g:name`) when planning over a group's scope (`*/group`, see `layout.rs`).
    pub fn composite_name(&self, name: &str) -> String {
        if crate::layout::scope_group(self.collection).is_some() {
            group_index_name(name)
        } else {
            composite_index_name(name)
        }
    }
}

#[derive(Debug, Clone)]
pub enum Plan {
    /// Point reads of these ids.
    Ids(Vec<String>),
    /// Scan these ranges of one index, fetch, filter, sort.
    Index { index: String, ranges: Ranges },
    /// Union of the candidates of several plans (`$or`).
    Union(Vec<Plan>),
    /// The ids present in every one of these equality ranges (each `prefix ++ id`, so in id
    /// order), found by leapfrogging with seeks; then fetch, filter, sort.
    Intersect {
        indexes: Vec<String>,
        prefixes: Vec<Vec<u8>>,
    },
    /// Index entries in result order: fetch, filter, stop after skip + limit.
    Ordered(OrderedScan),
    /// Every document of the collection, in `_id` order.
    Scan,
}

/// One range of an ordered scan. The streams of a scan are merged by the key bytes after their
/// first `strip` bytes (the index prefix and the values of the fields bound by equality).
#[derive(Debug, Clone)]
pub struct Stream {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
    pub strip: usize,
}

/// An index scan in result order, narrowed to the query's cursors (`cursor.rs`).
///
/// Invariants (checked by `ordered.rs` when it builds one): the merged streams meet every
/// matching document with an entry in the index, each at its sort key, in sort order (reversed
/// when `backward`); entries with equal values are in id order, ascending forwards, so
/// `reverse_ties` is set when the sort wants the other id order. A document met twice (an
/// array on a field bound by `$in`) is met at the same suffix, adjacently.
#[derive(Debug, Clone)]
pub struct OrderedScan {
    pub index: String,
    pub streams: Vec<Stream>,
    pub backward: bool,
    pub reverse_ties: bool,
    /// The documents whose sort value is null or missing (a single-field index has no entry for
    /// a missing field) are read by a collection scan instead: before the index when ascending,
    /// after it when descending. The streams then hold no null entries.
    pub nulls_by_scan: bool,
    /// Every entry met belongs to a match (the filter is exactly the equalities that bound
    /// the streams), so the scan examines skip + limit entries.
    pub exact: bool,
}

/// What a query did, for `explain`: the plan chosen, the alternatives considered with their
/// estimates, and what running it cost. The server turns it into the protocol's `Explain` field
/// by field (no JSON in between); the serde form is the same shape, for callers that print it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explain {
    pub plan: PlanDescription,
    /// Index entries read (by the chosen plan, and by an abandoned trial of another).
    pub keys_examined: usize,
    /// Documents fetched and run through the filter.
    pub docs_examined: usize,
    /// Documents in the result.
    pub returned: usize,
    /// Index entries and documents read while estimating the alternatives.
    pub keys_sampled: usize,
    /// The chosen plan's estimate.
    pub estimate: Option<Estimate>,
    /// The other plans considered.
    pub alternatives: Vec<Alternative>,
}

/// A plan the planner considered and did not use.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alternative {
    pub plan: PlanDescription,
    pub estimate: Estimate,
    /// It was tried first and gave up when it had examined as much as the plan used instead
    /// was estimated to.
    pub abandoned: bool,
}

/// What a plan does, for `explain`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlanDescription {
    /// Point reads of this many ids.
    Ids { ids: usize },
    /// Ranges of one index.
    Index { index: String, ranges: usize },
    /// The union of several plans (`$or`).
    Union { plans: Vec<PlanDescription> },
    /// The ids in all of these indexes' equality ranges (a zig-zag join).
    Intersection { indexes: Vec<String> },
    /// One index in sort order: `merged` ranges merged (one per value of fields bound by
    /// `$in`, and a second one where a cursor splits its tie group), backwards when `descending`; the null-or-missing group read by a collection
    /// scan when `nulls_by_scan`.
    #[serde(rename_all = "camelCase")]
    OrderedIndex {
        index: String,
        descending: bool,
        merged: usize,
        nulls_by_scan: bool,
    },
    /// Every document of the collection.
    CollectionScan,
    /// A collection-group query without a group index serving it: each of `collections`
    /// ran its own plan (`plans`: the distinct ones) and the results were merged in order.
    GroupMerge {
        collections: usize,
        plans: Vec<PlanDescription>,
    },
}

impl PlanDescription {
    /// The plan's kind as `explain`'s `"type"` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            PlanDescription::Ids { .. } => "ids",
            PlanDescription::Index { .. } => "index",
            PlanDescription::Union { .. } => "union",
            PlanDescription::Intersection { .. } => "intersection",
            PlanDescription::OrderedIndex { .. } => "ordered_index",
            PlanDescription::CollectionScan => "collection_scan",
            PlanDescription::GroupMerge { .. } => "group_merge",
        }
    }
}

impl Plan {
    pub fn describe(&self) -> PlanDescription {
        match self {
            Plan::Ids(ids) => PlanDescription::Ids { ids: ids.len() },
            Plan::Index { index, ranges } => PlanDescription::Index {
                index: index.clone(),
                ranges: ranges.len(),
            },
            Plan::Union(ps) => PlanDescription::Union {
                plans: ps.iter().map(Plan::describe).collect(),
            },
            Plan::Intersect { indexes, .. } => PlanDescription::Intersection {
                indexes: indexes.clone(),
            },
            Plan::Ordered(o) => PlanDescription::OrderedIndex {
                index: o.index.clone(),
                descending: o.backward,
                merged: o.streams.len(),
                nulls_by_scan: o.nulls_by_scan,
            },
            Plan::Scan => PlanDescription::CollectionScan,
        }
    }
}

/// The plans of a collection-group query over the group's own indexes (`ctx.collection`:
/// the group's scope, `ctx.cat`: `Catalog::group`): ordered scans of its composites first,
/// then their equality ranges. Empty when none serves the query: the group then merges each
/// collection's own plan.
pub fn group_candidates(ctx: PlanCtx<'_>, query: &Query) -> Vec<Plan> {
    let keys = query.sort.keys();
    let mut out = Vec::new();
    if let Some((last, user)) = keys.split_last() {
        if last.path.as_str() == "_id" && !user.iter().any(|k| k.path.as_str() == "_id") {
            out.extend(ordered::composites(
                ctx,
                query,
                user,
                last.dir == herald_query::Direction::Desc,
            ));
        }
    }
    out.extend(composite(ctx, query.filter.expr()));
    out
}

/// Every plan that answers `query` correctly, the collection scan last. Which one is cheapest
/// is `choose`'s question; the property tests run all of them.
pub fn candidates(ctx: PlanCtx<'_>, query: &Query) -> Vec<Plan> {
    let root = query.filter.expr();
    let mut out = Vec::new();
    out.extend(ordered::ordered_scans(ctx, query));
    out.extend(index_plans(ctx, root));
    out.extend(composite(ctx, root));
    out.extend(intersection(ctx, root));
    out.push(Plan::Scan);
    out
}

/// The plans of one expression that fetch candidates through indexes: per conjunct, its
/// index ranges; for `$or`, the union of one plan per branch.
fn index_plans(ctx: PlanCtx<'_>, e: &Expr) -> Vec<Plan> {
    match e {
        Expr::Field(f) => plan_field(ctx, f).into_iter().collect(),
        Expr::And(xs) => xs.iter().flat_map(|x| index_plans(ctx, x)).collect(),
        Expr::Or(xs) => {
            let mut branches = Vec::with_capacity(xs.len());
            for x in xs {
                // The branch's cheapest-looking plan: point reads, then equality, then ranges.
                let best = index_plans(ctx, x).into_iter().min_by_key(static_rank);
                match best {
                    Some(p) => branches.push(p),
                    None => return vec![],
                }
            }
            if branches.is_empty() {
                return vec![];
            }
            vec![Plan::Union(branches)]
        }
        Expr::Nor(_) | Expr::Const(_) => vec![],
    }
}

/// A rough order of plan kinds without looking at the data, for `$or` branches.
fn static_rank(p: &Plan) -> u8 {
    match p {
        Plan::Ids(_) => 0,
        Plan::Index { ranges, .. } if ranges.len() == 1 => 2,
        Plan::Index { .. } | Plan::Intersect { .. } | Plan::Ordered(_) => 3,
        Plan::Union(_) => 4,
        Plan::Scan => 9,
    }
}

/// A single-field plan for one field expression, if any of its operators is indexable.
fn plan_field(ctx: PlanCtx<'_>, f: &FieldExpr) -> Option<Plan> {
    let path = f.path.as_str();
    if path == "_id" {
        return id_plan(f);
    }
    if !field_indexed(path, ctx.cat) {
        return None;
    }
    let prefix = index_prefix(ctx.collection, &field_index_name(path));
    let ranges = field_ranges(&prefix, &f.ops, is_multikey(path, ctx.cat), ctx.key_limit)?;
    Some(Plan::Index {
        index: field_index_name(path),
        ranges,
    })
}

fn id_plan(f: &FieldExpr) -> Option<Plan> {
    for op in &f.ops {
        match op {
            FieldOp::Test(Test::Eq(Value::String(s))) => return Some(Plan::Ids(vec![s.clone()])),
            FieldOp::Test(Test::Eq(_)) => return Some(Plan::Ids(vec![])),
            FieldOp::Test(Test::In(list)) => {
                return Some(Plan::Ids(
                    list.values()
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                ))
            }
            _ => {}
        }
    }
    None
}

/// Equalities on two or more indexed fields, each an exact range of `prefix ++ id` keys (a
/// value cut in the index is a group of values, not in id order): their intersection.
fn intersection(ctx: PlanCtx<'_>, root: &Expr) -> Option<Plan> {
    let mut indexes = Vec::new();
    let mut prefixes = Vec::new();
    for f in conjuncts(root) {
        let path = f.path.as_str();
        if path == "_id" || !field_indexed(path, ctx.cat) || indexes.len() == 4 {
            continue;
        }
        let index = field_index_name(path);
        if indexes.contains(&index) {
            continue;
        }
        let eq = f.ops.iter().find_map(|op| match op {
            FieldOp::Test(Test::Eq(v)) if indexable_scalar(v) => Some(v),
            _ => None,
        });
        let Some(v) = eq else { continue };
        let prefix = index_prefix(ctx.collection, &index);
        let ((start, _), cut) = eq_range(&prefix, v, ctx.key_limit);
        if !cut {
            indexes.push(index);
            prefixes.push(start);
        }
    }
    (indexes.len() >= 2).then_some(Plan::Intersect { indexes, prefixes })
}

/// A composite index whose leading fields have equality predicates (and maybe a range on the
/// next field), when that narrows more than one field: the one that narrows the most.
fn composite(ctx: PlanCtx<'_>, root: &Expr) -> Option<Plan> {
    let cat = ctx.cat?;
    let limit = ctx.key_limit;
    let preds = conjuncts(root);
    let mut best: Option<(usize, Plan)> = None;
    for ci in cat
        .composites
        .iter()
        .filter(|c| c.state == IndexState::Ready)
    {
        let mut prefix = index_prefix(ctx.collection, &ctx.composite_name(&ci.name));
        let mut used = 0;
        let mut range = None;
        for field in &ci.fields {
            let Some(f) = preds.iter().find(|f| f.path.as_str() == field.path) else {
                break;
            };
            let eq = f.ops.iter().find_map(|op| match op {
                FieldOp::Test(Test::Eq(v)) if indexable_scalar(v) => Some(v),
                _ => None,
            });
            match eq {
                // A cut value's key is its group's: the entries of every string sharing the
                // prefix follow it, ordered by the next fields, so later fields still narrow.
                Some(v) if field.direction == herald_query::Direction::Asc => {
                    encode_key_limited(v, limit, &mut prefix);
                }
                Some(v) => {
                    encode_key_desc_limited(v, limit, &mut prefix);
                }
                None => {
                    if field.direction == herald_query::Direction::Asc {
                        let multikey = is_multikey(&field.path, Some(cat));
                        range = field_ranges(&prefix, &f.ops, multikey, limit);
                        if range.is_some() {
                            used += 1;
                        }
                    }
                    break;
                }
            }
            used += 1;
        }
        if used < 2 {
            continue;
        }
        let ranges = range.unwrap_or_else(|| vec![(prefix.clone(), prefix_end(&prefix))]);
        if best.as_ref().is_none_or(|(u, _)| used > *u) {
            best = Some((
                used,
                Plan::Index {
                    index: ctx.composite_name(&ci.name),
                    ranges,
                },
            ));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(cat: &CollectionCatalog) -> PlanCtx<'_> {
        PlanCtx {
            collection: "c",
            cat: Some(cat),
            key_limit: usize::MAX,
            shapes: true,
        }
    }

    /// While the index of a path whose exemption was lifted is rebuilt, neither it nor the
    /// indexes of the paths below it serve queries (they miss documents written while exempt).
    #[test]
    fn a_building_path_and_the_paths_below_it_are_not_used() {
        let cat = CollectionCatalog {
            building_fields: ["m".to_string()].into(),
            ..CollectionCatalog::default()
        };
        for (filter, indexed) in [
            (serde_json::json!({"m": 1}), false),
            (serde_json::json!({"m.k": 1}), false),
            (serde_json::json!({"mk": 1}), true),
        ] {
            let query = Query::parse(&serde_json::json!({ "filter": filter })).unwrap();
            let all = candidates(ctx(&cat), &query);
            assert_eq!(all.len() > 1, indexed, "{filter}: {all:?}");
        }
    }

    /// `{a: 1, b: 2}` without a composite index can intersect the two equality ranges; a cut
    /// string is a group of values whose entries are not in id order, so it cannot.
    #[test]
    fn equalities_on_two_fields_can_be_intersected() {
        let cat = CollectionCatalog::default();
        let kinds = |filter: serde_json::Value, limit: usize| {
            let query = Query::parse(&serde_json::json!({ "filter": filter })).unwrap();
            let c = PlanCtx {
                key_limit: limit,
                ..ctx(&cat)
            };
            candidates(c, &query)
                .iter()
                .map(|p| p.describe().kind())
                .collect::<Vec<_>>()
        };
        assert!(kinds(serde_json::json!({"a": 1, "b": "x"}), 8).contains(&"intersection"));
        assert!(
            !kinds(serde_json::json!({"a": 1, "b": "long string"}), 4).contains(&"intersection")
        );
        assert!(!kinds(serde_json::json!({"a": 1, "b": {"$gt": 2}}), 8).contains(&"intersection"));
    }
}
