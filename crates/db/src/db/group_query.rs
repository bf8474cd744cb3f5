//! Collection-group pull queries (`Db::query_group`): plan over the group's own indexes or
//! merge the plans of its collections (`exec/group.rs`), on one snapshot; and the cheap list
//! of a group's collections (a skip-scan of the document keys, one seek per collection).

use super::collections::skip_scan;
use super::{Db, QueryOutcome};
use crate::error::DbError;
use crate::exec::{execute_group, Examined, GroupPlan, Restrict, GROUP_COLLECTIONS_MAX};
use crate::layout::{group_scope, META_SEQ};
use crate::names::{check_group, group_of};
use crate::planner::{candidates, group_candidates, Explain, Plan, PlanCtx};
use herald_query::{Expr, Query, QueryError};
use herald_storage::{ReadTxn, Table};

use super::query::PlanResult;

/// Collections one skip-scan page reads while listing a group's collections.
const GROUP_SCAN_PAGE: usize = 1024;

impl Db {
    /// Runs `query` over every collection whose last segment is `group` at one snapshot.
    /// Each document carries `_path`; `restrict` (an end user's read rules) decides per
    /// collection which documents are visible, inside the filtering.
    pub fn query_group(
        &self,
        group: &str,
        query: &Query,
        restrict: Option<&dyn Restrict>,
    ) -> Result<QueryOutcome, DbError> {
        check_group(group)?;
        check_group_query(query)?;
        let read = self.inner.store.read()?;
        let seq = read.get_u64(Table::Meta, META_SEQ)?.unwrap_or(0);
        let plan = self
            .group_plans(group, query)
            .into_iter()
            .next()
            .unwrap_or(GroupPlan::Merge);
        let mut ex = Examined::default();
        let (docs, description) = self.run_group(&read, group, query, &plan, restrict, &mut ex)?;
        let explain = Explain {
            plan: description,
            keys_examined: ex.keys,
            docs_examined: ex.docs,
            returned: docs.len(),
            keys_sampled: 0,
            estimate: None,
            alternatives: vec![],
        };
        Ok(QueryOutcome { docs, seq, explain })
    }

    /// Every plan of a group query at one snapshot (each group-index plan, then the merge),
    /// for tests that compare them with a reference.
    #[doc(hidden)]
    pub fn query_group_every_plan(
        &self,
        group: &str,
        query: &Query,
        restrict: Option<&dyn Restrict>,
    ) -> Result<Vec<PlanResult>, DbError> {
        check_group(group)?;
        check_group_query(query)?;
        let read = self.inner.store.read()?;
        let mut out = Vec::new();
        for plan in self.group_plans(group, query) {
            let mut ex = Examined::default();
            let (docs, plan) = self.run_group(&read, group, query, &plan, restrict, &mut ex)?;
            out.push(PlanResult { plan, docs });
        }
        Ok(out)
    }

    /// The collections holding documents whose last segment is `group`, in byte order; at
    /// most [`GROUP_COLLECTIONS_MAX`] of them (more is an error that names the remedy).
    pub fn group_collections(&self, group: &str) -> Result<Vec<String>, DbError> {
        check_group(group)?;
        group_collections(&self.inner.store.read()?, group)
    }

    /// The group's index plans (the first is the one used), then the merge.
    fn group_plans(&self, group: &str, query: &Query) -> Vec<GroupPlan> {
        let cat = self.inner.catalog.read().expect("catalog lock");
        let gc = cat.group(group);
        let scope = group_scope(group);
        let ctx = PlanCtx {
            collection: &scope,
            cat: Some(&gc),
            key_limit: cat.key_string_limit(),
            shapes: cat.shapes_tracked,
        };
        // No estimates across a group yet: prefer an ordered scan whose entries all match
        // (`exact`), then the one with the most fields bound by equalities (the longest stream
        // prefix), then ordered scans over ranges.
        let mut index_plans = group_candidates(ctx, query);
        index_plans.sort_by_key(|p| match p {
            Plan::Ordered(o) => (
                0,
                !o.exact,
                std::cmp::Reverse(o.streams.first().map_or(0, |s| s.strip)),
            ),
            _ => (1, true, std::cmp::Reverse(0)),
        });
        let mut plans: Vec<GroupPlan> = index_plans.into_iter().map(GroupPlan::Index).collect();
        plans.push(GroupPlan::Merge);
        plans
    }

    fn run_group(
        &self,
        read: &ReadTxn,
        group: &str,
        query: &Query,
        plan: &GroupPlan,
        restrict: Option<&dyn Restrict>,
        ex: &mut Examined,
    ) -> Result<(Vec<herald_value::Value>, crate::planner::PlanDescription), DbError> {
        let plans_for = |collection: &str, q: &Query| -> Vec<Plan> {
            let cat = self.inner.catalog.read().expect("catalog lock");
            let ctx = PlanCtx {
                collection,
                cat: cat.collection(collection),
                key_limit: cat.key_string_limit(),
                shapes: cat.shapes_tracked,
            };
            candidates(ctx, q)
        };
        let mut collections = || group_collections(read, group);
        execute_group(
            read,
            &group_scope(group),
            query,
            plan,
            restrict,
            &mut collections,
            &plans_for,
            ex,
        )
    }
}

/// A group query may not name `_path` in its filter or sort: it is the result's path, not a
/// stored field (a stored member of that name is replaced in group results). Its cursors are
/// positions in the group's order and may end with a `_path` (`Query::with_group_cursors`).
pub fn check_group_query(query: &Query) -> Result<(), DbError> {
    fn named(p: &str) -> bool {
        p == "_path" || p.starts_with("_path.")
    }
    fn in_filter(e: &Expr) -> bool {
        match e {
            Expr::And(xs) | Expr::Or(xs) | Expr::Nor(xs) => xs.iter().any(in_filter),
            Expr::Field(f) => named(f.path.as_str()),
            Expr::Const(_) => false,
        }
    }
    if query.sort.keys().iter().any(|k| named(k.path.as_str())) || in_filter(query.filter.expr()) {
        return Err(DbError::Query(QueryError::BadQuery(
            "a collection-group query cannot filter or sort by '_path': it is each result's \
             full path, added to the documents, not a stored field"
                .into(),
        )));
    }
    Ok(())
}

/// The group's collections by skip-scan over the document keys, one seek per collection.
pub(super) fn group_collections(read: &ReadTxn, group: &str) -> Result<Vec<String>, DbError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (names, _) = skip_scan(read, after.as_deref(), GROUP_SCAN_PAGE)?;
        let Some(last) = names.last().cloned() else {
            return Ok(out);
        };
        out.extend(names.into_iter().filter(|c| group_of(c) == group));
        if out.len() > GROUP_COLLECTIONS_MAX {
            return Err(DbError::LimitExceeded(format!(
                "collection group '{group}' spans more than {GROUP_COLLECTIONS_MAX} collections \
                 and no collection-group index serves this query: declare one (POST /v1/indexes \
                 with \"collectionGroup\")"
            )));
        }
        after = Some(last);
    }
}
