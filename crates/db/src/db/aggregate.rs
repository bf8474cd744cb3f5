//! Pull aggregations: the pipeline's head (a leading `$match`, and a `$sort`/`$skip`/`$limit`
//! right after it) through the planner at one snapshot, then the rest of the pipeline.
//!
//! Four ways, tried in this order; each gives exactly what herald-query's `Pipeline::run` gives
//! over the collection in `_id` order (the reference), which the tests check:
//! 1. **Count from an index.** A pipeline that only counts the head's matches
//!    (`Pipeline::count_shape`) whose filter is exactly one index range (a single-field ordered
//!    scan whose entries all match, one entry per document) counts index keys and reads no
//!    document; an empty filter counts document records without decoding them.
//! 2. **Least or greatest from an index.** `$group` on a constant with one `$min`/`$max` of a
//!    field that indexes order (`CollectionCatalog::orders_by`: no array along the path, no
//!    object or cut string at it, so its sort key is its value) is the first match of the head
//!    query sorted by that field: one index entry when the planner takes an ordered scan.
//! 3. **Streamed.** Per-document stages up to a `$group` or `$count` (`Pipeline::streaming`) read
//!    the matches one at a time in `_id` order: the input is bounded by [`AGGREGATE_DOCS_MAX`]
//!    documents read, not held; only the groups are (bounded by the pipeline's limits).
//! 4. **Held.** Otherwise the head runs as a query (its result capped at `QUERY_DOCS_MAX`) and
//!    the rest of the pipeline runs over it.

use super::{Db, QueryOutcome};
use crate::error::DbError;
use crate::exec::{count_docs, count_entries, for_each_match, Examined, QUERY_DOCS_MAX};
use crate::layout::META_SEQ;
use crate::names::check_collection;
use crate::planner::{choose, Explain, Plan};
use herald_query::pipeline::{Extreme, Pipeline};
use herald_query::{Direction, Filter, Query, Sort};
use herald_storage::{ReadTxn, Table};
use herald_value::{json, Value};

/// Most documents one aggregation reads when its input is streamed (way 3).
pub const AGGREGATE_DOCS_MAX: usize = 1_000_000;

/// The result of an aggregation: its output documents, the commit they reflect, how the head
/// ran, and how many leading stages the head query answered.
#[derive(Debug)]
pub struct AggregateOutcome {
    pub docs: Vec<Value>,
    pub seq: u64,
    pub explain: Explain,
    /// Leading stages answered by the head query (and by an index count or extreme, the stage
    /// it answered too).
    pub stages_in_query: usize,
}

impl Db {
    /// Runs `pipeline` over `collection` at one snapshot. `filter`, when given, replaces the
    /// head `$match`'s filter (the server ANDs an end user's read rule into it), so every stage
    /// sees only documents it matches.
    pub fn aggregate(
        &self,
        collection: &str,
        pipeline: &Pipeline,
        filter: Option<Filter>,
    ) -> Result<AggregateOutcome, DbError> {
        check_collection(collection)?;
        let (mut head, covered) = pipeline.head_query(QUERY_DOCS_MAX);
        if let Some(f) = filter {
            head.filter = f;
        }
        let plain = head.skip == 0 && head.limit.is_none() && is_id_order(&head.sort);
        if plain {
            if let Some(shape) = pipeline.count_shape(covered) {
                if let Some((n, seq, explain)) = self.count_exact(collection, &head)? {
                    return Ok(AggregateOutcome {
                        docs: shape.finish(n)?,
                        seq,
                        explain,
                        stages_in_query: covered + 1,
                    });
                }
            }
            if let Some(ext) = pipeline.extreme(covered) {
                let orders = || Ok(self.orders_by(collection, &ext.path));
                let first = |q: &Query| self.query(collection, q);
                if let Some(out) = extreme_by(&ext, &head.filter, covered, &orders, &first)? {
                    return Ok(out);
                }
            }
            if let Some(mut run) = pipeline.streaming(covered) {
                let read = self.inner.store.read()?;
                let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
                let plans = self
                    .plans(collection, &head)
                    .into_iter()
                    .filter(|p| !matches!(p, Plan::Ordered(_)))
                    .collect();
                let chosen = choose(&read, collection, &head, plans)?;
                let mut ex = Examined::default();
                for_each_match(
                    &read,
                    collection,
                    &head,
                    &chosen.plan,
                    AGGREGATE_DOCS_MAX,
                    &mut ex,
                    &mut |doc| run.push(doc).map_err(DbError::from),
                )?;
                let docs = run.finish()?;
                let explain = Explain {
                    plan: chosen.plan.describe(),
                    keys_examined: ex.keys,
                    docs_examined: ex.docs,
                    returned: docs.len(),
                    keys_sampled: chosen.sampled,
                    estimate: Some(chosen.estimate),
                    alternatives: Vec::new(),
                };
                return Ok(AggregateOutcome {
                    docs,
                    seq,
                    explain,
                    stages_in_query: covered,
                });
            }
        }
        let QueryOutcome { docs, seq, explain } = self.query(collection, &head)?;
        Ok(AggregateOutcome {
            docs: pipeline.run_from(covered, docs)?,
            seq,
            explain,
            stages_in_query: covered,
        })
    }

    /// The number of documents `q`'s filter matches, when an index range (or the collection's
    /// record count) gives it without reading documents.
    fn count_exact(
        &self,
        collection: &str,
        q: &Query,
    ) -> Result<Option<(u64, u64, Explain)>, DbError> {
        let read = self.inner.store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        let mut ex = Examined::default();
        let Some((n, plan)) = self.count_in(&read, collection, q, &mut ex)? else {
            return Ok(None);
        };
        let explain = Explain {
            plan: plan.describe(),
            keys_examined: ex.keys,
            docs_examined: ex.docs,
            returned: 1,
            keys_sampled: 0,
            estimate: None,
            alternatives: Vec::new(),
        };
        Ok(Some((n, seq, explain)))
    }

    /// [`count_exact`](Self::count_exact) on a given snapshot: the count and the plan that
    /// gave it, or `None` when no index range gives it.
    pub(super) fn count_in(
        &self,
        read: &ReadTxn,
        collection: &str,
        q: &Query,
        ex: &mut Examined,
    ) -> Result<Option<(u64, Plan)>, DbError> {
        let everything =
            crate::planner::only_conjuncts(q.filter.expr()).is_some_and(|c| c.is_empty());
        if everything {
            return Ok(Some((count_docs(read, collection, ex)?, Plan::Scan)));
        }
        let Some(o) = self.exact_range(collection, q) else {
            return Ok(None);
        };
        // `$in` ranges: one per value, disjoint unless two values are equal (`1`, `1.0`).
        let mut ranges: Vec<(&[u8], &[u8])> = o
            .streams
            .iter()
            .map(|s| (s.start.as_slice(), s.end.as_slice()))
            .collect();
        ranges.sort();
        ranges.dedup();
        let mut n = 0;
        for (start, end) in ranges {
            n += count_entries(read, start, end, ex)?;
        }
        Ok(Some((n, Plan::Ordered(o))))
    }

    /// A single-field ordered scan over exactly the documents `q` matches, one entry each: the
    /// filter is one field's comparisons, equalities and `$in` on scalars, and the path holds no
    /// array (so no document has two entries) and no cut string.
    fn exact_range(&self, collection: &str, q: &Query) -> Option<crate::planner::OrderedScan> {
        let conjuncts = crate::planner::only_conjuncts(q.filter.expr())?;
        let [f] = conjuncts.as_slice() else {
            return None;
        };
        let path = f.path.as_str();
        if path == "_id" {
            return None;
        }
        let sorted = Query {
            filter: q.filter.clone(),
            sort: Sort::parse(&json!({ path: 1 })).ok()?,
            ..Query::default()
        };
        self.plans(collection, &sorted)
            .into_iter()
            .find_map(|p| match p {
                Plan::Ordered(o)
                    if o.exact && !o.nulls_by_scan && {
                        let cat = self.inner.catalog.read().expect("catalog lock");
                        !cat.collection(collection)
                            .is_some_and(|c| c.multikey.contains(path))
                    } =>
                {
                    Some(o)
                }
                _ => None,
            })
    }

    /// Whether `path`'s index gives every document's sort key at it as the value itself.
    pub(super) fn orders_by(&self, collection: &str, path: &str) -> bool {
        let cat = self.inner.catalog.read().expect("catalog lock");
        cat.shapes_tracked && cat.collection(collection).is_none_or(|c| c.orders_by(path))
    }
}

pub(super) fn is_id_order(sort: &Sort) -> bool {
    matches!(sort.keys(), [k] if k.path.as_str() == "_id" && k.dir == Direction::Asc)
}

/// The value at a dotted path through documents (no arrays along it: the caller checked), if
/// it is there and not null.
fn sort_value(doc: &Value, path: &str) -> Option<Value> {
    let mut v = doc;
    for seg in path.split('.') {
        v = v.as_object()?.get(seg)?;
    }
    (!v.is_null()).then(|| v.clone())
}

/// Way 2 for a collection or a collection group: the least or greatest value of `ext`'s field
/// among `filter`'s matches, as the first match of `first` (a query sorted by the field, limit
/// 1), when `orders` says the field's index gives each document's value. `None`: answer it
/// another way. The least value comes after nulls and missing ones, so a first match without
/// one is not the answer (another match may have one). `orders` is asked again after the
/// query's snapshot (the catalog's marks are sticky), so an array written since the first look
/// is seen.
pub(super) fn extreme_by(
    ext: &Extreme<'_>,
    filter: &Filter,
    covered: usize,
    orders: &dyn Fn() -> Result<bool, DbError>,
    first: &dyn Fn(&Query) -> Result<QueryOutcome, DbError>,
) -> Result<Option<AggregateOutcome>, DbError> {
    if !orders()? {
        return Ok(None);
    }
    let dir = if ext.max { -1 } else { 1 };
    let q = Query {
        filter: filter.clone(),
        sort: Sort::parse(&json!({ ext.path.as_str(): dir }))?,
        limit: Some(1),
        ..Query::default()
    };
    let QueryOutcome { docs, seq, explain } = first(&q)?;
    let value = docs.first().and_then(|d| sort_value(d, &ext.path));
    if (ext.max || value.is_some() || docs.is_empty()) && orders()? {
        return Ok(Some(AggregateOutcome {
            docs: ext.finish(!docs.is_empty(), value)?,
            seq,
            explain,
            stages_in_query: covered + 1,
        }));
    }
    Ok(None)
}
