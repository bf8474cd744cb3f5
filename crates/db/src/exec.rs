//! Running a plan against one storage snapshot: candidates, fetch, filter, sort, skip, limit,
//! project. Every candidate is re-checked with the full filter, so index plans only need to be
//! supersets. Memory is bounded: at most `skip + limit` sorted documents are kept when a limit is
//! given, and no query returns more than [`QUERY_DOCS_MAX`] documents.

use crate::error::DbError;
use crate::layout::{collection_prefix, decode_doc, doc_key, index_entry_id};
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

pub fn execute(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    plan: &Plan,
) -> Result<(Vec<Value>, Examined), DbError> {
    if q.limit.is_some_and(|l| l > QUERY_DOCS_MAX) {
        return Err(DbError::LimitExceeded(format!(
            "limit may be at most {QUERY_DOCS_MAX}"
        )));
    }
    let mut ex = Examined::default();
    let window = q.limit.map(|l| q.skip.saturating_add(l));
    let mut out = Collector::new(q, window);
    match plan {
        Plan::Ordered { range, desc, .. } => {
            ordered(read, collection, q, range, *desc, &mut ex, &mut out)?
        }
        Plan::Scan => {
            let by_id = is_id_order(q);
            for entry in read.prefix(Table::Docs, &collection_prefix(collection))? {
                let (_, v) = entry?;
                ex.docs += 1;
                let (_, doc) = decode_doc(&v)?;
                if q.filter.matches(&doc) && out.push(doc)? && by_id {
                    break;
                }
            }
        }
        _ => {
            let mut ids = BTreeSet::new();
            candidates(read, plan, &mut ids, &mut ex)?;
            for id in ids {
                let Some(v) = read.get(Table::Docs, &doc_key(collection, &id))? else {
                    continue;
                };
                ex.docs += 1;
                let (_, doc) = decode_doc(&v)?;
                if q.filter.matches(&doc) {
                    out.push(doc)?;
                }
            }
        }
    }
    Ok((out.finish(matches!(plan, Plan::Ordered { .. })), ex))
}

fn is_id_order(q: &Query) -> bool {
    let keys = q.sort.keys();
    keys.len() == 1 && keys[0].path.as_str() == "_id" && keys[0].dir == Direction::Asc
}

fn candidates(
    read: &ReadTxn,
    plan: &Plan,
    ids: &mut BTreeSet<String>,
    ex: &mut Examined,
) -> Result<(), DbError> {
    match plan {
        Plan::Ids(list) => ids.extend(list.iter().cloned()),
        Plan::Index { ranges, .. } => {
            for (start, end) in ranges {
                for entry in read.range(Table::Index, start.as_slice()..end.as_slice())? {
                    let (key, value) = entry?;
                    ex.keys += 1;
                    ids.insert(index_entry_id(&key, &value)?.to_string());
                }
            }
        }
        Plan::Union(plans) => {
            for p in plans {
                candidates(read, p, ids, ex)?;
            }
        }
        Plan::Ordered { .. } | Plan::Scan => unreachable!("handled by execute"),
    }
    Ok(())
}

/// Walks one index range in sort order. Descending scans meet equal values in descending id
/// order, but ties must be in ascending `_id` order, so each run of equal values is reversed.
fn ordered(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    range: &(Vec<u8>, Vec<u8>),
    desc: bool,
    ex: &mut Examined,
    out: &mut Collector<'_>,
) -> Result<(), DbError> {
    let iter = read.range(Table::Index, range.0.as_slice()..range.1.as_slice())?;
    let mut run: Vec<String> = Vec::new();
    let mut run_value: Vec<u8> = Vec::new();
    let mut flush = |run: &mut Vec<String>, ex: &mut Examined| -> Result<bool, DbError> {
        for id in run.drain(..).rev() {
            let Some(v) = read.get(Table::Docs, &doc_key(collection, &id))? else {
                continue;
            };
            ex.docs += 1;
            let (_, doc) = decode_doc(&v)?;
            if q.filter.matches(&doc) && out.push(doc)? {
                return Ok(true);
            }
        }
        Ok(false)
    };
    let entries: Box<dyn Iterator<Item = _>> = if desc {
        Box::new(iter.rev())
    } else {
        Box::new(iter)
    };
    for entry in entries {
        let (key, value) = entry?;
        ex.keys += 1;
        let id = index_entry_id(&key, &value)?.to_string();
        let value = &key[..key.len() - id.len()];
        if !desc {
            run.push(id);
            if flush(&mut run, ex)? {
                return Ok(());
            }
            continue;
        }
        if value != run_value.as_slice() {
            if flush(&mut run, ex)? {
                return Ok(());
            }
            run_value = value.to_vec();
        }
        run.push(id);
    }
    flush(&mut run, ex)?;
    Ok(())
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
