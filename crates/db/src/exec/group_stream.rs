//! A collection group's matches one at a time, in the group's input order (`_id`, then
//! `_path`): each collection's matches come in `_id` order (a scan of its documents, or the
//! sorted candidate ids of an index plan, fetched lazily), and a heap merges them. Only one
//! document per collection is held, so a streamed aggregation over a group holds its groups,
//! not its input.

use super::group::with_path;
use super::{candidates, Budget, Examined};
use crate::error::DbError;
use crate::layout::{collection_prefix, decode_doc, doc_key};
use crate::planner::Plan;
use herald_query::Query;
use herald_storage::{ReadRange, ReadTxn, Table};
use herald_value::Value;
use std::cmp::Reverse;
use std::collections::{btree_set, BTreeSet, BinaryHeap};

/// Most collections whose matches one streamed group aggregation merges (one open iterator
/// each); a larger group's aggregation holds its input instead.
pub const GROUP_STREAM_COLLECTIONS_MAX: usize = 1_000;

/// One collection of the group: the query deciding its documents (the group's head query, a
/// reader's rule ANDed in) and the plan giving its candidates.
pub struct GroupInput {
    pub collection: String,
    pub query: Query,
    pub plan: Plan,
}

/// Where a collection's candidates come from, in `_id` order.
enum Source<'r> {
    Scan(ReadRange<'r>),
    Ids(btree_set::IntoIter<String>),
}

/// Calls `each` with every match of every input (with `_path`), in `_id` then `_path` order;
/// at most `docs_max` documents are read (past it, `ResultTooLarge(docs_max)`).
pub fn for_each_group_match(
    read: &ReadTxn,
    inputs: &[GroupInput],
    docs_max: usize,
    ex: &mut Examined,
    each: &mut dyn FnMut(Value) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut sources = Vec::with_capacity(inputs.len());
    let mut candidate_ids = 0usize;
    for input in inputs {
        sources.push(match &input.plan {
            Plan::Scan | Plan::Ordered(_) => {
                Source::Scan(read.prefix(Table::Docs, &collection_prefix(&input.collection))?)
            }
            plan => {
                let mut ids = BTreeSet::new();
                candidates(read, plan, Budget(None), &mut ids, ex)?;
                candidate_ids += ids.len();
                if candidate_ids > docs_max {
                    return Err(DbError::ResultTooLarge(docs_max));
                }
                Source::Ids(ids.into_iter())
            }
        });
    }
    let mut fetched = 0usize;
    let mut heads: Vec<Option<Value>> = vec![None; inputs.len()];
    let mut heap: BinaryHeap<Reverse<(String, String, usize)>> = BinaryHeap::new();
    let mut advance = |i: usize,
                       sources: &mut Vec<Source<'_>>,
                       heads: &mut Vec<Option<Value>>,
                       heap: &mut BinaryHeap<Reverse<(String, String, usize)>>,
                       ex: &mut Examined|
     -> Result<(), DbError> {
        let input = &inputs[i];
        loop {
            let raw = match &mut sources[i] {
                Source::Scan(it) => match it.next() {
                    Some(entry) => entry?.1,
                    None => return Ok(()),
                },
                Source::Ids(ids) => match ids.next() {
                    Some(id) => match read.get(Table::Docs, &doc_key(&input.collection, &id))? {
                        Some(v) => v,
                        None => continue,
                    },
                    None => return Ok(()),
                },
            };
            fetched += 1;
            if fetched > docs_max {
                return Err(DbError::ResultTooLarge(docs_max));
            }
            ex.docs += 1;
            let (_, doc) = decode_doc(&raw)?;
            if !input.query.matches(&doc) {
                continue;
            }
            let id = doc
                .get("_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let path = format!("{}/{id}", input.collection);
            heads[i] = Some(with_path(doc, &input.collection, &id));
            heap.push(Reverse((id, path, i)));
            return Ok(());
        }
    };
    for i in 0..inputs.len() {
        advance(i, &mut sources, &mut heads, &mut heap, ex)?;
    }
    while let Some(Reverse((_, _, i))) = heap.pop() {
        each(heads[i].take().expect("a head for each heap entry"))?;
        advance(i, &mut sources, &mut heads, &mut heap, ex)?;
    }
    Ok(())
}
