//! Pull aggregations over a collection group (`Db::aggregate_group`): the head query over every
//! collection of the group at one snapshot, then the rest of the pipeline.
//!
//! Four ways, tried in this order; each gives exactly what herald-query's `Pipeline::run`
//! gives over the group's head query result (sorted by the head's sort, then `_path`), which the
//! tests check:
//! 1. **Count per collection.** A pipeline that only counts (`Pipeline::count_shape`) adds up
//!    each visible collection's count: from an index range or the record count where the
//!    collection's own count can (`Db::count_in`), else by reading its matches one at a time.
//!    A count is order-free, so nothing is held; the documents read are bounded by
//!    [`AGGREGATE_DOCS_MAX`] over the whole group.
//! 2. **Least or greatest.** `$group` on a constant with one `$min`/`$max` of a field every
//!    collection's index orders is the first document of the group query sorted by that field
//!    with limit 1 (a group index entry, or one entry per collection).
//! 3. **Streamed.** Per-document stages up to a `$group` or `$count` (`Pipeline::streaming`)
//!    read the matches of every collection merged into the group's order, one at a time
//!    (`exec/group_stream.rs`): the input is bounded by [`AGGREGATE_DOCS_MAX`] documents read,
//!    not held. Up to [`GROUP_STREAM_COLLECTIONS_MAX`] collections (one open iterator each).
//! 4. **Held.** Otherwise the head runs as a group query (at most `QUERY_DOCS_MAX` documents)
//!    and the rest of the pipeline runs over it.

use super::aggregate::{extreme_by, is_id_order, AggregateOutcome, AGGREGATE_DOCS_MAX};
use super::group_query::{check_group_query, group_collections};
use super::{Db, QueryOutcome};
use crate::error::DbError;
use crate::exec::{
    for_each_group_match, for_each_match, Examined, GroupInput, Restrict,
    GROUP_STREAM_COLLECTIONS_MAX, QUERY_DOCS_MAX,
};
use crate::layout::META_SEQ;
use crate::names::check_group;
use crate::planner::{choose, Explain, Plan, PlanDescription};
use herald_query::pipeline::Pipeline;
use herald_query::Query;
use herald_storage::Table;

impl Db {
    /// Runs `pipeline` over the collection group `group` at one snapshot. `restrict` (an end
    /// user's read rules) decides per collection which documents every stage sees; only the
    /// filter of its queries is used.
    pub fn aggregate_group(
        &self,
        group: &str,
        pipeline: &Pipeline,
        restrict: Option<&dyn Restrict>,
    ) -> Result<AggregateOutcome, DbError> {
        check_group(group)?;
        let (head, covered) = pipeline.head_query(QUERY_DOCS_MAX);
        check_group_query(&head)?;
        let plain = head.skip == 0 && head.limit.is_none() && is_id_order(&head.sort);
        if plain {
            if let Some(shape) = pipeline.count_shape(covered) {
                let (n, seq, explain) = self.count_group(group, &head, restrict)?;
                return Ok(AggregateOutcome {
                    docs: shape.finish(n)?,
                    seq,
                    explain,
                    stages_in_query: covered + 1,
                });
            }
            if let Some(ext) = pipeline.extreme(covered) {
                let orders = || self.group_orders_by(group, &ext.path);
                let first = |q: &Query| self.query_group(group, q, restrict);
                if let Some(out) = extreme_by(&ext, &head.filter, covered, &orders, &first)? {
                    return Ok(out);
                }
            }
            if let Some(mut run) = pipeline.streaming(covered) {
                let read = self.inner.store.read()?;
                let collections = group_collections(&read, group)?;
                if collections.len() <= GROUP_STREAM_COLLECTIONS_MAX {
                    let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
                    let mut inputs = Vec::with_capacity(collections.len());
                    let mut plans: Vec<PlanDescription> = Vec::new();
                    for collection in collections {
                        let Some(query) = visible(restrict, &head, &collection) else {
                            continue;
                        };
                        let candidates = self
                            .plans(&collection, &query)
                            .into_iter()
                            .filter(|p| !matches!(p, Plan::Ordered(_)))
                            .collect();
                        let plan = choose(&read, &collection, &query, candidates)?.plan;
                        let d = plan.describe();
                        if !plans.contains(&d) {
                            plans.push(d);
                        }
                        inputs.push(GroupInput {
                            collection,
                            query,
                            plan,
                        });
                    }
                    let mut ex = Examined::default();
                    for_each_group_match(&read, &inputs, AGGREGATE_DOCS_MAX, &mut ex, &mut |d| {
                        run.push(d).map_err(DbError::from)
                    })?;
                    let docs = run.finish()?;
                    let explain = Explain {
                        plan: PlanDescription::GroupMerge {
                            collections: inputs.len(),
                            plans,
                        },
                        keys_examined: ex.keys,
                        docs_examined: ex.docs,
                        returned: docs.len(),
                        keys_sampled: 0,
                        estimate: None,
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
        }
        let QueryOutcome { docs, seq, explain } = self.query_group(group, &head, restrict)?;
        Ok(AggregateOutcome {
            docs: pipeline.run_from(covered, docs)?,
            seq,
            explain,
            stages_in_query: covered,
        })
    }

    /// The number of the group's documents `head` matches (and `restrict` lets through), its
    /// seq, and how it was counted.
    fn count_group(
        &self,
        group: &str,
        head: &Query,
        restrict: Option<&dyn Restrict>,
    ) -> Result<(u64, u64, Explain), DbError> {
        let read = self.inner.store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        let collections = group_collections(&read, group)?;
        let mut ex = Examined::default();
        let mut plans: Vec<PlanDescription> = Vec::new();
        let mut n = 0u64;
        // Documents read one at a time so far, over every collection.
        let mut read_docs = 0usize;
        for coll in &collections {
            let Some(q) = visible(restrict, head, coll) else {
                continue;
            };
            let (count, plan) = match self.count_in(&read, coll, &q, &mut ex)? {
                Some(c) => c,
                None => {
                    let plans = self
                        .plans(coll, &q)
                        .into_iter()
                        .filter(|p| !matches!(p, Plan::Ordered(_)))
                        .collect();
                    let chosen = choose(&read, coll, &q, plans)?;
                    let before = ex.docs;
                    let mut count = 0u64;
                    let left = AGGREGATE_DOCS_MAX - read_docs;
                    for_each_match(&read, coll, &q, &chosen.plan, left, &mut ex, &mut |_| {
                        count += 1;
                        Ok(())
                    })
                    .map_err(|e| match e {
                        DbError::ResultTooLarge(_) => DbError::ResultTooLarge(AGGREGATE_DOCS_MAX),
                        e => e,
                    })?;
                    read_docs += ex.docs - before;
                    (count, chosen.plan)
                }
            };
            n += count;
            let d = plan.describe();
            if !plans.contains(&d) {
                plans.push(d);
            }
        }
        let explain = Explain {
            plan: PlanDescription::GroupMerge {
                collections: collections.len(),
                plans,
            },
            keys_examined: ex.keys,
            docs_examined: ex.docs,
            returned: 1,
            keys_sampled: 0,
            estimate: None,
            alternatives: Vec::new(),
        };
        Ok((n, seq, explain))
    }

    /// Whether every collection of the group gives each document's sort key at `path` as the
    /// value itself (see `Db::orders_by`).
    fn group_orders_by(&self, group: &str, path: &str) -> Result<bool, DbError> {
        let collections = group_collections(&self.inner.store.read()?, group)?;
        Ok(collections.iter().all(|c| self.orders_by(c, path)))
    }
}

/// The query deciding `collection`'s documents: `head`, or with a reader's restriction `head`
/// with its filter for that collection (`None`: none of them is visible).
fn visible(restrict: Option<&dyn Restrict>, head: &Query, collection: &str) -> Option<Query> {
    match restrict {
        None => Some(head.clone()),
        Some(r) => r.query_for(collection).map(|r| Query {
            filter: r.filter,
            ..head.clone()
        }),
    }
}
