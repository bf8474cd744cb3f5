//! Ordered index scans: plans whose index entries come in result order, so the executor can
//! stop after skip + limit matches.
//!
//! A sort is `k1 .. kn` then `_id` (`crates/query/src/sort.rs`); an index key is the encoded
//! values then the id. An index serves the sort when, after a prefix of fields bound by
//! equalities (several values of `$in`: one stream per combination, merged), its fields are
//! exactly `k1 .. kn`, all in the sort's directions (scanned forwards) or all opposite
//! (backwards); ties then come in id order, reversed run by run when the sort wants the other
//! one. The encoded value must be the document's sort key: arrays (one entry per element),
//! objects and empty arrays (indexed as null in composites, absent from single-field indexes)
//! and cut strings break that, so the catalog's shape records (`CollectionCatalog::orders_by`)
//! must clear every sort field. A single-field index has no entry for a missing field, whose
//! sort key is null: without a range on the field, the null-or-missing group is read by a
//! collection scan, before the index ascending and after it descending.
//!
//! The query's cursors narrow each stream to the keys between them (`cursor.rs`).
//!
//! Stores created before shapes were recorded only get what the planner did then: a sort by
//! one field, never an array nor a cut string, that the filter holds to scalar ranges.

use super::ranges::only_conjuncts;
use super::ranges::{bound_values, conjuncts, field_indexed, field_ranges, indexable_scalar};
use super::{OrderedScan, Plan, PlanCtx, Stream};
use crate::catalog::IndexState;
use crate::indexer::field_index_name;
use crate::layout::{index_prefix, prefix_end};
use herald_query::{Direction, FieldExpr, FieldOp, Query, SortKey, Test};
use herald_value::{encode_key, encode_key_desc_limited, encode_key_limited, Value};

/// Most streams one ordered scan merges (combinations of `$in` values).
pub const MERGE_STREAMS_MAX: usize = 64;

/// Every ordered scan that serves the query's sort.
pub fn ordered_scans(ctx: PlanCtx<'_>, query: &Query) -> Vec<Plan> {
    let keys = query.sort.keys();
    let Some((last, user)) = keys.split_last() else {
        return vec![];
    };
    if last.path.as_str() != "_id" || user.iter().any(|k| k.path.as_str() == "_id") {
        return vec![];
    }
    let id_desc = last.dir == Direction::Desc;
    let mut out = Vec::new();
    if let [key] = user {
        out.extend(single(ctx, query, key, id_desc));
    }
    out.extend(composites(ctx, query, user, id_desc));
    out
}

/// Whether the operators decide a match by the range alone: comparisons and equalities on
/// scalars not cut in the index.
fn ops_exact(ops: &[FieldOp], limit: usize) -> bool {
    ops.iter().all(|op| match op {
        FieldOp::Test(Test::Eq(v) | Test::Cmp(_, v)) => indexable_scalar(v) && !is_cut(v, limit),
        FieldOp::Test(Test::In(list)) => list
            .values()
            .iter()
            .all(|v| indexable_scalar(v) && !is_cut(v, limit)),
        _ => false,
    })
}

fn is_cut(v: &Value, limit: usize) -> bool {
    v.as_str().is_some_and(|s| s.len() > limit)
}

/// The automatic index of the one sort field.
fn single(ctx: PlanCtx<'_>, query: &Query, key: &SortKey, id_desc: bool) -> Option<Plan> {
    let path = key.path.as_str();
    if !field_indexed(path, ctx.cat) {
        return None;
    }
    let cat = ctx.cat;
    let index = field_index_name(path);
    let prefix = index_prefix(ctx.collection, &index);
    let root = query.filter.expr();
    let ranged = conjuncts(root).into_iter().find_map(|f| {
        (f.path.as_str() == path)
            .then(|| Some((f, field_ranges(&prefix, &f.ops, false, ctx.key_limit)?)))
            .flatten()
    });
    let backward = key.dir == Direction::Desc;
    let strip = prefix.len();
    let (streams, nulls_by_scan, exact) = match ranged {
        // Ranges of scalars hold no null, no object, no array: only arrays (several entries)
        // and cut strings (ties in id order) break the order.
        Some((f, mut ranges))
            if !cat.is_some_and(|c| c.multikey.contains(path) || c.truncated.contains(path)) =>
        {
            ranges.sort();
            let exact = only_conjuncts(root).is_some_and(|all| {
                all.len() == 1 && std::ptr::eq(all[0], f) && ops_exact(&f.ops, ctx.key_limit)
            });
            (ranges, false, exact)
        }
        None if ctx.shapes && cat.is_none_or(|c| c.orders_by(path)) => {
            let mut null = prefix.clone();
            encode_key(&Value::Null, &mut null);
            let all = (prefix_end(&null), prefix_end(&prefix));
            let exact = only_conjuncts(root).is_some_and(|c| c.is_empty());
            (vec![all], true, exact)
        }
        _ => return None,
    };
    let mut scan = OrderedScan {
        index,
        streams: streams
            .into_iter()
            .map(|(start, end)| Stream { start, end, strip })
            .collect(),
        backward,
        reverse_ties: backward != id_desc,
        nulls_by_scan,
        exact,
    };
    // A single-field index holds its values ascending.
    super::cursor::narrow(&mut scan, query, &[Direction::Asc]);
    Some(Plan::Ordered(scan))
}

/// Ready composite indexes whose fields are equality-bound fields and then the sort fields.
pub(super) fn composites(
    ctx: PlanCtx<'_>,
    query: &Query,
    sort: &[SortKey],
    id_desc: bool,
) -> Vec<Plan> {
    let Some(cat) = ctx.cat else {
        return vec![];
    };
    if !ctx.shapes && !sort.is_empty() {
        return vec![];
    }
    let root = query.filter.expr();
    let preds = conjuncts(root);
    let mut out = Vec::new();
    'index: for ci in cat
        .composites
        .iter()
        .filter(|c| c.state == IndexState::Ready)
    {
        let Some(bound) = ci.fields.len().checked_sub(sort.len()) else {
            continue;
        };
        // With no sort field the entries of the bound prefix are in id order.
        let mut backward = id_desc;
        for (i, (field, key)) in ci.fields[bound..].iter().zip(sort).enumerate() {
            let path = field.path.as_str();
            if path != key.path.as_str() || !field_indexed(path, Some(cat)) || !cat.orders_by(path)
            {
                continue 'index;
            }
            let b = field.direction != key.dir;
            if i > 0 && b != backward {
                continue 'index;
            }
            backward = b;
        }
        let mut combos = vec![index_prefix(ctx.collection, &ctx.composite_name(&ci.name))];
        let mut used: Vec<&FieldExpr> = Vec::new();
        let mut exact = true;
        for field in &ci.fields[..bound] {
            let found = preds.iter().find_map(|f| {
                (f.path.as_str() == field.path)
                    .then(|| Some((*f, bound_values(f, ctx.key_limit)?)))
                    .flatten()
            });
            let Some((f, (values, values_exact))) = found else {
                continue 'index;
            };
            if combos.len() * values.len() > MERGE_STREAMS_MAX {
                continue 'index;
            }
            combos = combos
                .iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut k = c.clone();
                        if field.direction == Direction::Asc {
                            encode_key_limited(v, ctx.key_limit, &mut k);
                        } else {
                            encode_key_desc_limited(v, ctx.key_limit, &mut k);
                        }
                        k
                    })
                })
                .collect();
            exact &= values_exact;
            used.push(f);
        }
        let exact = exact
            && only_conjuncts(root).is_some_and(|all| {
                all.len() == used.len()
                    && all
                        .iter()
                        .all(|a| used.iter().any(|u| std::ptr::eq(*a, *u)))
            });
        let mut scan = OrderedScan {
            index: ctx.composite_name(&ci.name),
            streams: combos
                .into_iter()
                .map(|c| Stream {
                    end: prefix_end(&c),
                    strip: c.len(),
                    start: c,
                })
                .collect(),
            backward,
            reverse_ties: backward != id_desc,
            nulls_by_scan: false,
            exact,
        };
        let dirs: Vec<Direction> = ci.fields[bound..].iter().map(|f| f.direction).collect();
        super::cursor::narrow(&mut scan, query, &dirs);
        out.push(Plan::Ordered(scan));
    }
    out
}
