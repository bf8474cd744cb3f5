//! Index key ranges for predicates: which entries of one index can belong to documents a field
//! expression matches, and what a planner may assume about a path (indexed, multikey).
//!
//! The indexes hold every scalar a path reaches (array elements included) and no entry for
//! missing fields, objects or arrays, so a predicate is indexable only when it cannot match
//! those: equality or ranges on a non-null scalar, `$in` of non-null scalars. Long strings are
//! cut in index entries (`indexer`); bounds are cut the same way, and a range whose bound was
//! cut includes the bound's whole key group (every string sharing the cut prefix), so the ranges
//! stay a superset.

use crate::catalog::CollectionCatalog;
use crate::layout::prefix_end;
use herald_query::{CmpOp, Expr, FieldExpr, FieldOp, Test};
use herald_value::{encode_key_limited, Value};

/// Byte ranges `[start, end)` over one index.
pub type Ranges = Vec<(Vec<u8>, Vec<u8>)>;

/// Whether the automatic index of `path` may serve queries: not below an array index segment,
/// not exempt, not being rebuilt.
pub fn field_indexed(path: &str, cat: Option<&CollectionCatalog>) -> bool {
    let numeric = path
        .split('.')
        .any(|s| s.bytes().all(|b| b.is_ascii_digit()));
    !numeric && !cat.is_some_and(|c| c.is_exempt(path) || c.is_building(path))
}

pub fn is_multikey(path: &str, cat: Option<&CollectionCatalog>) -> bool {
    cat.is_some_and(|c| c.multikey.contains(path))
}

pub fn indexable_scalar(v: &Value) -> bool {
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
pub fn eq_range(prefix: &[u8], v: &Value, limit: usize) -> ((Vec<u8>, Vec<u8>), bool) {
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

/// The top-level conjuncts of a filter that are field expressions.
pub fn conjuncts(e: &Expr) -> Vec<&FieldExpr> {
    match e {
        Expr::Field(f) => vec![f],
        Expr::And(xs) => xs.iter().flat_map(conjuncts).collect(),
        _ => vec![],
    }
}

/// The top-level conjuncts when the filter is nothing else (no `$or`, `$nor` or false), so a
/// plan that enforces them all needs no other check.
pub fn only_conjuncts(e: &Expr) -> Option<Vec<&FieldExpr>> {
    match e {
        Expr::Field(f) => Some(vec![f]),
        Expr::Const(true) => Some(vec![]),
        Expr::And(xs) => {
            let mut out = Vec::new();
            for x in xs {
                out.extend(only_conjuncts(x)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// The values an equality (`$eq` or `$in` of non-null scalars) on this field binds it to, if
/// that is all the expression says; `exact` is false when the values do not decide a match by
/// themselves (another operator, or a string cut in the index).
pub fn bound_values(f: &FieldExpr, limit: usize) -> Option<(Vec<&Value>, bool)> {
    let mut values = None;
    let mut exact = true;
    for op in &f.ops {
        match op {
            FieldOp::Test(Test::Eq(v)) if values.is_none() && indexable_scalar(v) => {
                values = Some(vec![v]);
            }
            FieldOp::Test(Test::In(list))
                if values.is_none()
                    && !list.values().is_empty()
                    && list.values().iter().all(indexable_scalar) =>
            {
                values = Some(list.values().iter().collect());
            }
            _ => exact = false,
        }
    }
    let values = values?;
    let cut = values
        .iter()
        .any(|v| v.as_str().is_some_and(|s| s.len() > limit));
    Some((values, exact && !cut))
}
