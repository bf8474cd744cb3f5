//! Choosing how to answer a query: by `_id`, through an index (single-field or composite), by a
//! union of index scans for `$or`, in index order for an indexed sort, or by a collection scan.
//!
//! Index plans only produce *candidates*: the executor fetches each candidate document from the
//! same snapshot and runs the full filter on it. So a plan must never miss a matching document,
//! but may return extra ones. The indexes hold every scalar a path reaches (array elements
//! included) and no entry for missing fields, objects or arrays, so a predicate is indexable only
//! when it cannot match those: equality or ranges on a non-null scalar, `$in` of non-null
//! scalars.
//!
//! Long strings are cut in index entries (`indexer`); bounds are cut the same way, and a range
//! whose bound was cut includes the bound's whole key group (every string sharing the cut
//! prefix), so the ranges stay a superset. Paths holding cut strings never provide sort order.

use crate::catalog::{CollectionCatalog, IndexState};
use crate::indexer::{composite_index_name, field_index_name};
use crate::layout::{index_prefix, prefix_end};
use herald_query::{CmpOp, Direction, Expr, FieldExpr, FieldOp, Query, Test};
use herald_value::{encode_key_desc_limited, encode_key_limited, Value};

/// Byte ranges `[start, end)` over one index.
pub type Ranges = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Debug, Clone)]
pub enum Plan {
    /// Point reads of these ids.
    Ids(Vec<String>),
    /// Scan these ranges of one index, fetch, filter, sort.
    Index { index: String, ranges: Ranges },
    /// Union of the candidates of several plans (`$or`).
    Union(Vec<Plan>),
    /// Scan one range of a single-field index in sort order and stop after skip + limit.
    Ordered {
        index: String,
        range: (Vec<u8>, Vec<u8>),
        desc: bool,
    },
    /// Every document of the collection, in `_id` order.
    Scan,
}

/// What a query did, for `explain`: the plan chosen and what running it cost. The server turns
/// it into the protocol's `Explain` field by field (no JSON in between); the serde form is the
/// same shape, for callers that print it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explain {
    pub plan: PlanDescription,
    /// Index entries read.
    pub keys_examined: usize,
    /// Documents fetched and run through the filter.
    pub docs_examined: usize,
    /// Documents in the result.
    pub returned: usize,
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
    /// One index in sort order.
    OrderedIndex { index: String, descending: bool },
    /// Every document of the collection.
    CollectionScan,
}

impl PlanDescription {
    /// The plan's kind as `explain`'s `"type"` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            PlanDescription::Ids { .. } => "ids",
            PlanDescription::Index { .. } => "index",
            PlanDescription::Union { .. } => "union",
            PlanDescription::OrderedIndex { .. } => "ordered_index",
            PlanDescription::CollectionScan => "collection_scan",
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
            Plan::Ordered { index, desc, .. } => PlanDescription::OrderedIndex {
                index: index.clone(),
                descending: *desc,
            },
            Plan::Scan => PlanDescription::CollectionScan,
        }
    }

    /// Lower is better: point reads, equality, `$in`, ranges, unions, scans.
    fn cost(&self) -> u8 {
        match self {
            Plan::Ids(_) => 0,
            Plan::Index { ranges, .. } if ranges.len() == 1 => 2,
            Plan::Index { .. } => 3,
            Plan::Ordered { .. } => 1,
            Plan::Union(_) => 4,
            Plan::Scan => 9,
        }
    }
}

/// Plans `query` on `collection`, whose index entries cut strings at `limit` bytes.
pub fn plan(
    collection: &str,
    query: &Query,
    cat: Option<&CollectionCatalog>,
    limit: usize,
) -> Plan {
    let root = query.filter.expr();
    if let Some(p) = ordered(collection, query, root, cat, limit) {
        return p;
    }
    let mut best = plan_expr(collection, root, cat, limit);
    if let Some(p) = composite(collection, root, cat, limit) {
        if p.cost() <= best.cost() {
            best = p;
        }
    }
    best
}

fn plan_expr(collection: &str, e: &Expr, cat: Option<&CollectionCatalog>, limit: usize) -> Plan {
    match e {
        Expr::Field(f) => plan_field(collection, f, cat, limit).unwrap_or(Plan::Scan),
        Expr::And(xs) => xs
            .iter()
            .map(|x| plan_expr(collection, x, cat, limit))
            .min_by_key(Plan::cost)
            .unwrap_or(Plan::Scan),
        Expr::Or(xs) => {
            let plans: Vec<Plan> = xs
                .iter()
                .map(|x| plan_expr(collection, x, cat, limit))
                .collect();
            if plans.iter().any(|p| matches!(p, Plan::Scan)) {
                Plan::Scan
            } else {
                Plan::Union(plans)
            }
        }
        Expr::Nor(_) | Expr::Const(_) => Plan::Scan,
    }
}

/// A single-field plan for one field expression, if any of its operators is indexable.
fn plan_field(
    collection: &str,
    f: &FieldExpr,
    cat: Option<&CollectionCatalog>,
    limit: usize,
) -> Option<Plan> {
    let path = f.path.as_str();
    if path == "_id" {
        return id_plan(f);
    }
    if !field_indexed(path, cat) {
        return None;
    }
    let prefix = index_prefix(collection, &field_index_name(path));
    let ranges = field_ranges(&prefix, &f.ops, is_multikey(path, cat), limit)?;
    Some(Plan::Index {
        index: field_index_name(path),
        ranges,
    })
}

fn field_indexed(path: &str, cat: Option<&CollectionCatalog>) -> bool {
    let numeric = path
        .split('.')
        .any(|s| s.bytes().all(|b| b.is_ascii_digit()));
    !numeric && !cat.is_some_and(|c| c.is_exempt(path) || c.is_building(path))
}

fn is_multikey(path: &str, cat: Option<&CollectionCatalog>) -> bool {
    cat.is_some_and(|c| c.multikey.contains(path))
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

fn indexable_scalar(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Array(_) | Value::Object(_))
}

/// The index ranges that hold every document the operators can match, or `None` when no
/// operator narrows the search. Operators are conjunctive, so their ranges intersect, unless the
/// path is multikey: then different array elements may satisfy different operators
/// (`{"a": {"$gt": 5, "$lt": 8}}` matches `{"a": [1, 10]}`) and one operator's range is used.
/// Strings in the bounds are cut at `limit` bytes, as in the entries.
pub fn field_ranges(
    prefix: &[u8],
    ops: &[FieldOp],
    multikey: bool,
    limit: usize,
) -> Option<Ranges> {
    let mut single: Option<(Vec<u8>, Vec<u8>)> = None;
    let mut multi: Option<Ranges> = None;
    for op in ops {
        let FieldOp::Test(t) = op else { continue };
        let r = match t {
            Test::Eq(v) if indexable_scalar(v) => eq_range(prefix, v, limit).0,
            Test::Cmp(op, v) if indexable_scalar(v) => cmp_range(prefix, *op, v, limit),
            Test::In(list)
                if !list.values().is_empty() && list.values().iter().all(indexable_scalar) =>
            {
                if multi.is_none() {
                    multi = Some(
                        list.values()
                            .iter()
                            .map(|v| eq_range(prefix, v, limit).0)
                            .collect(),
                    );
                }
                continue;
            }
            _ => continue,
        };
        single = Some(match single {
            None => r,
            Some(prev) if multikey => prev,
            Some((s, e)) => (s.max(r.0), e.min(r.1)),
        });
    }
    match (single, multi) {
        (Some((s, e)), _) if s >= e => Some(vec![]),
        (Some(r), _) => Some(vec![r]),
        (None, Some(m)) => Some(m),
        (None, None) => None,
    }
}

/// The keys of entries equal to `v` (all strings sharing its cut prefix, if it was cut), and
/// whether it was cut.
fn eq_range(prefix: &[u8], v: &Value, limit: usize) -> ((Vec<u8>, Vec<u8>), bool) {
    let mut start = prefix.to_vec();
    let cut = encode_key_limited(v, limit, &mut start);
    let end = prefix_end(&start);
    ((start, end), cut)
}

fn cmp_range(prefix: &[u8], op: CmpOp, v: &Value, limit: usize) -> (Vec<u8>, Vec<u8>) {
    let ((with_v, after_v), cut) = eq_range(prefix, v, limit);
    // Range operators stay within the operand's type bracket: the keys starting with its tag.
    let tag = with_v[prefix.len()];
    let mut bracket_start = prefix.to_vec();
    bracket_start.push(tag);
    let mut bracket_end = prefix.to_vec();
    bracket_end.push(tag + 1);
    match op {
        // Strings above (below) a cut bound may share its key: keep the bound's group.
        CmpOp::Gt if cut => (with_v, bracket_end),
        CmpOp::Gt => (after_v, bracket_end),
        CmpOp::Gte => (with_v, bracket_end),
        CmpOp::Lt if cut => (bracket_start, after_v),
        CmpOp::Lt => (bracket_start, with_v),
        CmpOp::Lte => (bracket_start, after_v),
    }
}

/// The top-level conjuncts of a filter.
fn conjuncts(e: &Expr) -> Vec<&FieldExpr> {
    match e {
        Expr::Field(f) => vec![f],
        Expr::And(xs) => xs.iter().flat_map(conjuncts).collect(),
        _ => vec![],
    }
}

/// An in-order scan when the query sorts by one indexed field, never an array nor a cut string,
/// that the filter restricts to a single range (which also excludes documents missing the field).
fn ordered(
    collection: &str,
    query: &Query,
    root: &Expr,
    cat: Option<&CollectionCatalog>,
    limit: usize,
) -> Option<Plan> {
    let keys = query.sort.keys();
    let (first, rest) = keys.split_first()?;
    if rest.len() != 1 || rest[0].path.as_str() != "_id" || first.path.as_str() == "_id" {
        return None;
    }
    let path = first.path.as_str();
    if !field_indexed(path, cat)
        || cat.is_some_and(|c| c.multikey.contains(path) || c.truncated.contains(path))
    {
        return None;
    }
    let prefix = index_prefix(collection, &field_index_name(path));
    for f in conjuncts(root) {
        if f.path.as_str() != path {
            continue;
        }
        if let Some(ranges) = field_ranges(&prefix, &f.ops, false, limit) {
            if ranges.len() == 1 {
                return Some(Plan::Ordered {
                    index: field_index_name(path),
                    range: ranges.into_iter().next().expect("one range"),
                    desc: first.dir == Direction::Desc,
                });
            }
        }
    }
    None
}

/// A composite index whose leading fields have equality predicates (and maybe a range on the
/// next field), when that narrows more than one field.
fn composite(
    collection: &str,
    root: &Expr,
    cat: Option<&CollectionCatalog>,
    limit: usize,
) -> Option<Plan> {
    let cat = cat?;
    let preds = conjuncts(root);
    let mut best: Option<(usize, Plan)> = None;
    for ci in cat
        .composites
        .iter()
        .filter(|c| c.state == IndexState::Ready)
    {
        let mut prefix = index_prefix(collection, &composite_index_name(&ci.name));
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
                Some(v) if field.direction == Direction::Asc => {
                    encode_key_limited(v, limit, &mut prefix);
                }
                Some(v) => {
                    encode_key_desc_limited(v, limit, &mut prefix);
                }
                None => {
                    if field.direction == Direction::Asc {
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
                    index: composite_index_name(&ci.name),
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
            let p = plan("c", &query, Some(&cat), usize::MAX);
            assert_eq!(!matches!(p, Plan::Scan), indexed, "{filter}: {p:?}");
        }
    }
}
