//! Running a plan against one storage snapshot: candidates, fetch, filter and cursors, sort,
//! skip, limit, project. Every candidate is re-checked with the full filter and the cursors
//! (`Query::matches`), so index plans only need to be supersets. Memory is bounded: at most
//! `skip + limit` sorted documents are kept when a limit is given, and no query returns more
//! than [`QUERY_DOCS_MAX`] documents. A plan run as a trial (see `planner/choose.rs`) stops with
//! no result once it has examined its budget.

mod group;
mod group_stream;
mod ordered;

pub use group::{
    execute_group, group_query, project as project_group, with_path, GroupPlan, Restrict,
    GROUP_COLLECTIONS_MAX,
};
pub use group_stream::{for_each_group_match, GroupInput, GROUP_STREAM_COLLECTIONS_MAX};

use crate::error::DbError;
use crate::layout::{collection_prefix, decode_doc, doc_key, index_entry_id, prefix_end};
use crate::planner::Plan;
use herald_query::{Direction, Query};
use herald_storage::{ReadTxn, Table};
use herald_value::Value;
use std::collections::BTreeSet;

/// Most documents one query returns.
pub const QUERY_DOCS_MAX: usize = 10_000;
/// Most matching documents a query without a limit may hold in memory to sort.
pub const SORT_DOCS_MAX: usize = 100_000;

#[derive(Debug, Default, Clone, Copy)]
pub struct Examined {
    pub keys: usize,
    pub docs: usize,
}

/// Most index entries plus documents a trial may examine (`None`: no limit).
#[derive(Debug, Clone, Copy)]
pub struct Budget(pub Option<u64>);

impl Budget {
    fn spent(self, ex: &Examined) -> bool {
        self.0.is_some_and(|b| (ex.keys + ex.docs) as u64 > b)
    }
}

/// Runs `plan`; `Ok(None)` when it examined more than `budget` before finishing (what it
/// examined is added to `ex` either way).
pub fn execute(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    plan: &Plan,
    budget: Budget,
    ex: &mut Examined,
) -> Result<Option<Vec<Value>>, DbError> {
    if q.limit.is_some_and(|l| l > QUERY_DOCS_MAX) {
        return Err(DbError::LimitExceeded(format!(
            "limit may be at most {QUERY_DOCS_MAX}"
        )));
    }
    // Examined counts are this run's; the caller's `ex` gets them added at the end.
    let mut mine = Examined::default();
    let done = run(read, collection, q, plan, budget, &mut mine);
    ex.keys += mine.keys;
    ex.docs += mine.docs;
    done
}

fn run(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    plan: &Plan,
    budget: Budget,
    ex: &mut Examined,
) -> Result<Option<Vec<Value>>, DbError> {
    let window = q.limit.map(|l| q.skip.saturating_add(l));
    let mut out = Collector::new(q, window);
    match plan {
        Plan::Ordered(o) => {
            if !ordered::run(read, collection, q, o, budget, ex, &mut out, None)? {
                return Ok(None);
            }
        }
        Plan::Scan => {
            let by_id = is_id_order(q);
            let (start, end) = scan_bounds(collection, q, by_id);
            for entry in read.range(Table::Docs, start.as_slice()..end.as_slice())? {
                let (_, v) = entry?;
                ex.docs += 1;
                if budget.spent(ex) {
                    return Ok(None);
                }
                let (_, doc) = decode_doc(&v)?;
                if q.matches(&doc) && out.push(doc)? && by_id {
                    break;
                }
            }
        }
        _ => {
            let mut ids = BTreeSet::new();
            if !candidates(read, plan, budget, &mut ids, ex)? {
                return Ok(None);
            }
            for id in ids {
                let Some(v) = read.get(Table::Docs, &doc_key(collection, &id))? else {
                    continue;
                };
                ex.docs += 1;
                if budget.spent(ex) {
                    return Ok(None);
                }
                let (_, doc) = decode_doc(&v)?;
                if q.matches(&doc) {
                    out.push(doc)?;
                }
            }
        }
    }
    Ok(Some(out.finish(matches!(plan, Plan::Ordered(_)))))
}

/// Calls `each` with every document matching `q` (filter and cursors), in `_id` order, for a
/// plan that needs no sort (anything but an ordered scan); at most `docs_max` documents are read
/// (past it, `ResultTooLarge`). The candidates of an index plan are collected first (as ids), so they are
/// bounded by `docs_max` too.
pub fn for_each_match(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    plan: &Plan,
    docs_max: usize,
    ex: &mut Examined,
    each: &mut dyn FnMut(Value) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut fetched = 0usize;
    let mut take = |v: &[u8], ex: &mut Examined| -> Result<(), DbError> {
        fetched += 1;
        if fetched > docs_max {
            return Err(DbError::ResultTooLarge(docs_max));
        }
        ex.docs += 1;
        let (_, doc) = decode_doc(v)?;
        if q.matches(&doc) {
            each(doc)?;
        }
        Ok(())
    };
    match plan {
        Plan::Scan | Plan::Ordered(_) => {
            for entry in read.prefix(Table::Docs, &collection_prefix(collection))? {
                let (_, v) = entry?;
                take(&v, ex)?;
            }
        }
        _ => {
            let mut ids = BTreeSet::new();
            candidates(read, plan, Budget(None), &mut ids, ex)?;
            if ids.len() > docs_max {
                return Err(DbError::ResultTooLarge(docs_max));
            }
            for id in ids {
                if let Some(v) = read.get(Table::Docs, &doc_key(collection, &id))? {
                    take(&v, ex)?;
                }
            }
        }
    }
    Ok(())
}

/// The number of entries in `[start, end)` of the index table, read as keys only.
pub fn count_entries(
    read: &ReadTxn,
    start: &[u8],
    end: &[u8],
    ex: &mut Examined,
) -> Result<u64, DbError> {
    let mut n = 0u64;
    for entry in read.range(Table::Index, start..end)? {
        entry?;
        n += 1;
    }
    ex.keys += n as usize;
    Ok(n)
}

/// The number of documents in a collection (their records are not decoded).
pub fn count_docs(read: &ReadTxn, collection: &str, ex: &mut Examined) -> Result<u64, DbError> {
    let mut n = 0u64;
    for entry in read.prefix(Table::Docs, &collection_prefix(collection))? {
        entry?;
        n += 1;
    }
    ex.docs += n as usize;
    Ok(n)
}

fn is_id_order(q: &Query) -> bool {
    let keys = q.sort.keys();
    keys.len() == 1 && keys[0].path.as_str() == "_id" && keys[0].dir == Direction::Asc
}

/// The document keys a collection scan reads: the collection, narrowed to the cursors when
/// the result is in `_id` order (a cursor is then an id; the bounds may hold the cursor's own
/// document, which the cursor check drops).
fn scan_bounds(collection: &str, q: &Query, by_id: bool) -> (Vec<u8>, Vec<u8>) {
    let prefix = collection_prefix(collection);
    let mut end = prefix_end(&prefix);
    let mut start = prefix;
    let id = |c: &Option<herald_query::Cursor>| {
        c.as_ref()
            .and_then(|c| c.values.first())
            .and_then(Value::as_str)
            .map(|id| doc_key(collection, id))
    };
    if by_id {
        if let Some(k) = id(&q.cursors.start) {
            start = start.max(k);
        }
        if let Some(k) = id(&q.cursors.end) {
            end = end.min(prefix_end(&k));
        }
        if start > end {
            end = start.clone();
        }
    }
    (start, end)
}

/// Collects the candidate ids of an unordered index plan; `Ok(false)` when over budget.
fn candidates(
    read: &ReadTxn,
    plan: &Plan,
    budget: Budget,
    ids: &mut BTreeSet<String>,
    ex: &mut Examined,
) -> Result<bool, DbError> {
    match plan {
        Plan::Ids(list) => ids.extend(list.iter().cloned()),
        Plan::Index { ranges, .. } => {
            for (start, end) in ranges {
                for entry in read.range(Table::Index, start.as_slice()..end.as_slice())? {
                    let (key, value) = entry?;
                    ex.keys += 1;
                    if budget.spent(ex) {
                        return Ok(false);
                    }
                    ids.insert(index_entry_id(&key, &value)?.to_string());
                }
            }
        }
        Plan::Union(plans) => {
            for p in plans {
                if !candidates(read, p, budget, ids, ex)? {
                    return Ok(false);
                }
            }
        }
        Plan::Intersect { prefixes, .. } => {
            return ordered::intersect(read, prefixes, budget, ids, ex);
        }
        Plan::Ordered(_) | Plan::Scan => unreachable!("handled by execute"),
    }
    Ok(true)
}

/// Collects matches, keeping at most about twice the window before sorting it down.
struct Collector<'q> {
    q: &'q Query,
    window: Option<usize>,
    docs: Vec<Value>,
    /// Documents pushed in final order (ordered plans and id-order scans).
    streamed: usize,
}

impl<'q> Collector<'q> {
    fn new(q: &'q Query, window: Option<usize>) -> Self {
        Collector {
            q,
            window,
            docs: Vec::new(),
            streamed: 0,
        }
    }

    /// Adds a match; returns true when an in-order producer may stop.
    fn push(&mut self, doc: Value) -> Result<bool, DbError> {
        self.docs.push(doc);
        self.streamed += 1;
        match self.window {
            Some(w) => {
                if self.docs.len() > SORT_DOCS_MAX {
                    return Err(DbError::ResultTooLarge(QUERY_DOCS_MAX));
                }
                if self.docs.len() >= 2 * w.max(64) {
                    self.q.sort.sort(&mut self.docs);
                    self.docs.truncate(w);
                }
                Ok(self.streamed >= w)
            }
            None => {
                let cap = if self.q.sort.keys().len() == 1 {
                    self.q.skip + QUERY_DOCS_MAX
                } else {
                    SORT_DOCS_MAX
                };
                if self.docs.len() > cap {
                    return Err(DbError::ResultTooLarge(QUERY_DOCS_MAX));
                }
                Ok(false)
            }
        }
    }

    fn finish(mut self, in_order: bool) -> Vec<Value> {
        if !in_order {
            self.q.sort.sort(&mut self.docs);
        }
        let end = self.window.unwrap_or(usize::MAX);
        let q = self.q;
        self.docs
            .into_iter()
            .take(end)
            .skip(q.skip)
            .map(|d| {
                if q.projection.is_all() {
                    d
                } else {
                    q.projection.apply(&d)
                }
            })
            .collect()
    }
}
