//! A live aggregation view: a pipeline's result maintained by herald-query's [`LiveAgg`] from the
//! changes a commit makes to the head query's input, and the edits of the result rows per commit
//! (the same `add`/`change`/`changeIndex`/`remove` events and positions as a query's window,
//! from the same [`diff_windows`]). Each row's event id is [`row_id`]: its `_id` as JSON text.
//!
//! Also [`Maintained`], what a shared engine view maintains: a query window or an aggregation.
//!
//! The input is capped like a pull aggregation's: at most `QUERY_DOCS_MAX` documents may match
//! the head query (`result_too_large` past it, when the view starts or when the input grows).

use crate::error::DbError;
use crate::exec::QUERY_DOCS_MAX;
use crate::live::diff::{diff_windows, ChangeEvent};
use crate::live::view::{DocChange, LiveView, Refill};
use herald_query::pipeline::{LiveAgg, LivePipeline};
use herald_query::Query;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

pub struct AggView {
    plan: Arc<LivePipeline>,
    /// The head query (the read rule ANDed into its filter for an end user).
    query: Arc<Query>,
    state: LiveAgg,
    /// The result rows the subscribers hold: (event id, row).
    rows: Vec<(String, Arc<Value>)>,
    seq: u64,
}

impl AggView {
    /// Folds the head query's result at `seq` (`docs`) into a fresh state.
    pub fn new(
        plan: Arc<LivePipeline>,
        query: Query,
        docs: Vec<Value>,
        seq: u64,
    ) -> Result<AggView, DbError> {
        if docs.len() > QUERY_DOCS_MAX {
            return Err(DbError::ResultTooLarge(QUERY_DOCS_MAX));
        }
        let mut state = LiveAgg::new(Arc::clone(&plan), query.clone());
        for d in &docs {
            state.add(d)?;
        }
        state.refresh()?;
        let rows = state.rows_with_ids()?;
        Ok(AggView {
            plan,
            query: Arc::new(query),
            state,
            rows,
            seq,
        })
    }

    pub fn plan(&self) -> &Arc<LivePipeline> {
        &self.plan
    }

    /// Applies one commit's changes to the input; the edits of the result rows.
    pub fn apply(
        &mut self,
        seq: u64,
        changes: &[DocChange<'_>],
    ) -> Result<Vec<ChangeEvent<Arc<Value>>>, DbError> {
        for (_, before, after) in changes {
            self.state.apply(*before, *after)?;
        }
        self.seq = seq;
        if self.state.docs() > QUERY_DOCS_MAX {
            return Err(DbError::ResultTooLarge(QUERY_DOCS_MAX));
        }
        let changed = self.state.refresh()?;
        if changed.is_empty() {
            // No group's output changed, so neither did the result (the post-group stages are
            // a function of the group rows).
            return Ok(Vec::new());
        }
        let new = self.state.rows_with_ids()?;
        let changed: HashSet<&str> = changed.iter().map(String::as_str).collect();
        let events = diff_windows(&self.rows, &new, &changed);
        self.rows = new;
        Ok(events)
    }
}

/// What one shared engine view maintains.
pub enum Maintained {
    Query(LiveView),
    /// Boxed: an aggregation's state is larger than a query window's handle.
    Agg(Box<AggView>),
}

impl Maintained {
    pub fn seq(&self) -> u64 {
        match self {
            Maintained::Query(v) => v.seq(),
            Maintained::Agg(a) => a.seq,
        }
    }

    /// The query the grid matches changes against (for an aggregation, its head query).
    pub fn query(&self) -> &Query {
        match self {
            Maintained::Query(v) => v.query(),
            Maintained::Agg(a) => &a.query,
        }
    }

    /// [`query`](Self::query), shared (a reference count, not a copy).
    pub fn shared_query(&self) -> Arc<Query> {
        match self {
            Maintained::Query(v) => v.shared_query(),
            Maintained::Agg(a) => Arc::clone(&a.query),
        }
    }

    /// The pipeline of an aggregation view.
    pub fn plan(&self) -> Option<&Arc<LivePipeline>> {
        match self {
            Maintained::Query(_) => None,
            Maintained::Agg(a) => Some(a.plan()),
        }
    }

    /// What a new subscriber's `initial` carries.
    pub fn window_docs(&self) -> Vec<Arc<Value>> {
        match self {
            Maintained::Query(v) => v.window_docs(),
            Maintained::Agg(a) => a.rows.iter().map(|(_, r)| Arc::clone(r)).collect(),
        }
    }

    /// Whether the changes may touch the view (an aggregation is offered only matching ones).
    pub fn touched_by(&self, changes: &[DocChange<'_>]) -> bool {
        match self {
            Maintained::Query(v) => v.touched_by(changes),
            Maintained::Agg(_) => true,
        }
    }

    pub fn skip_to(&mut self, seq: u64) {
        match self {
            Maintained::Query(v) => v.skip_to(seq),
            Maintained::Agg(a) => a.seq = a.seq.max(seq),
        }
    }

    /// Applies one commit's changes; `refill` serves a query window that ran short.
    pub fn apply(
        &mut self,
        seq: u64,
        changes: &[DocChange<'_>],
        refill: &mut dyn Refill,
    ) -> Result<Vec<ChangeEvent<Arc<Value>>>, DbError> {
        match self {
            Maintained::Query(v) => v.apply(seq, changes, refill),
            Maintained::Agg(a) => a.apply(seq, changes),
        }
    }
}
