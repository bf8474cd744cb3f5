//! Pull queries: plan on the catalog, estimate and run on one snapshot, explain.

use super::{Db, QueryOutcome};
use crate::error::DbError;
use crate::exec::{execute, Budget, Examined};
use crate::layout::META_SEQ;
use crate::names::check_collection;
use crate::planner::{
    candidates, choose, Alternative, Chosen, Explain, Plan, PlanCtx, PlanDescription,
};
use herald_query::Query;
use herald_storage::{ReadTxn, Table};
use herald_value::Value;

/// One candidate plan and what it returned (see [`Db::query_every_plan`]).
#[derive(Debug)]
pub struct PlanResult {
    pub plan: PlanDescription,
    pub docs: Vec<Value>,
}

impl Db {
    /// Every plan the planner could choose for `query`, on the catalog as it is now.
    pub(super) fn plans(&self, collection: &str, query: &Query) -> Vec<Plan> {
        let cat = self.inner.catalog.read().expect("catalog lock");
        let ctx = PlanCtx {
            collection,
            cat: cat.collection(collection),
            key_limit: cat.key_string_limit(),
            shapes: cat.shapes_tracked,
        };
        candidates(ctx, query)
    }

    /// Runs a query at one consistent snapshot and reports which commit it reflects.
    pub fn query(&self, collection: &str, query: &Query) -> Result<QueryOutcome, DbError> {
        check_collection(collection)?;
        let read = self.inner.store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        // The catalog is read after the snapshot: marks it has that the snapshot's documents
        // do not need only keep an index from giving order.
        let plans = self.plans(collection, query);
        let chosen = choose(&read, collection, query, plans)?;
        let (docs, explain) = run_chosen(&read, collection, query, chosen)?;
        Ok(QueryOutcome { docs, seq, explain })
    }

    /// Runs every candidate plan of `query` at one snapshot, for tests that compare them
    /// (each must return exactly the reference result).
    #[doc(hidden)]
    pub fn query_every_plan(
        &self,
        collection: &str,
        query: &Query,
    ) -> Result<Vec<PlanResult>, DbError> {
        check_collection(collection)?;
        let read = self.inner.store.read()?;
        let plans = self.plans(collection, query);
        let mut out = Vec::with_capacity(plans.len());
        for plan in plans {
            let mut ex = Examined::default();
            let docs = execute(&read, collection, query, &plan, Budget(None), &mut ex)?
                .expect("no budget");
            out.push(PlanResult {
                plan: plan.describe(),
                docs,
            });
        }
        Ok(out)
    }
}

/// Runs the chosen plan (after its trial, if one was picked) and explains it.
fn run_chosen(
    read: &ReadTxn,
    collection: &str,
    query: &Query,
    chosen: Chosen,
) -> Result<(Vec<Value>, Explain), DbError> {
    let Chosen {
        plan,
        estimate,
        trial,
        others,
        sampled,
    } = chosen;
    let mut ex = Examined::default();
    let mut alternatives: Vec<Alternative> = others
        .iter()
        .map(|(p, e)| Alternative {
            plan: p.describe(),
            estimate: *e,
            abandoned: false,
        })
        .collect();
    let mut used = (plan.describe(), estimate);
    let mut docs = None;
    if let Some((t, t_estimate, budget)) = trial {
        docs = execute(read, collection, query, &t, Budget(budget), &mut ex)?;
        if docs.is_some() {
            alternatives.push(Alternative {
                plan: used.0,
                estimate: used.1,
                abandoned: false,
            });
            used = (t.describe(), t_estimate);
        } else {
            alternatives.push(Alternative {
                plan: t.describe(),
                estimate: t_estimate,
                abandoned: true,
            });
        }
    }
    let docs = match docs {
        Some(d) => d,
        None => execute(read, collection, query, &plan, Budget(None), &mut ex)?.expect("no budget"),
    };
    let explain = Explain {
        plan: used.0,
        keys_examined: ex.keys,
        docs_examined: ex.docs,
        returned: docs.len(),
        keys_sampled: sampled,
        estimate: Some(used.1),
        alternatives,
    };
    Ok((docs, explain))
}
