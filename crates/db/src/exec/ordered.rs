//! Running an ordered scan ([`OrderedScan`]): its streams merged into one sequence of index
//! entries in result order, each document fetched, filtered and handed to the collector until
//! it has skip + limit; the null-or-missing group from a collection scan when the index lacks
//! it. Also leapfrogging equality ranges for [`Plan::Intersect`](crate::planner::Plan).

use super::{Budget, Collector, Examined};
use crate::error::DbError;
use crate::layout::{collection_prefix, decode_doc, doc_key, index_entry_id};
use crate::planner::OrderedScan;
use herald_query::{KeyValue, Query};
use herald_storage::{ReadRange, ReadTxn, Table};
use herald_value::Value;
use std::collections::BTreeSet;

type Entry = (Vec<u8>, Vec<u8>);

/// One stream: its range, read in scan direction, with the next entry looked at.
struct Cursor<'r> {
    iter: ReadRange<'r>,
    backward: bool,
    strip: usize,
    head: Option<Entry>,
}

impl Cursor<'_> {
    fn advance(&mut self) -> Result<(), DbError> {
        let next = if self.backward {
            self.iter.next_back()
        } else {
            self.iter.next()
        };
        self.head = next.transpose()?;
        Ok(())
    }

    fn suffix(&self) -> Option<&[u8]> {
        self.head.as_ref().map(|(k, _)| &k[self.strip..])
    }
}

/// What feeding documents to the collector came to.
enum Fed {
    /// The collector has its window.
    Full,
    More,
}

/// Fetches a group index entry's document (by the entry's id part) and returns it when it
/// matches, ready for the collector (see `group.rs`).
pub(super) type GroupFetch<'a> =
    &'a mut dyn FnMut(&str, &mut Examined) -> Result<Option<Value>, DbError>;

/// Runs an ordered scan; `Ok(false)` when the budget ran out first. `group`: the scan is over
/// a collection-group index, whose entries' documents `group` fetches (`collection` is then
/// the group's scope key and unused).
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    o: &OrderedScan,
    budget: Budget,
    ex: &mut Examined,
    out: &mut Collector<'_>,
    mut group: Option<GroupFetch<'_>>,
) -> Result<bool, DbError> {
    let mut fetch = |id: &str, ex: &mut Examined, out: &mut Collector<'_>| match group.as_mut() {
        Some(g) => Ok(match g(id, ex)? {
            Some(doc) => match out.push(doc)? {
                true => Fed::Full,
                false => Fed::More,
            },
            None => Fed::More,
        }),
        None => fetch(read, collection, q, id, ex, out),
    };
    if o.nulls_by_scan && !o.backward {
        match nulls(read, collection, q, budget, ex, out)? {
            None => return Ok(false),
            Some(Fed::Full) => return Ok(true),
            Some(Fed::More) => {}
        }
    }
    let mut cursors = Vec::with_capacity(o.streams.len());
    for s in &o.streams {
        let mut c = Cursor {
            iter: read.range(Table::Index, s.start.as_slice()..s.end.as_slice())?,
            backward: o.backward,
            strip: s.strip,
            head: None,
        };
        c.advance()?;
        cursors.push(c);
    }
    // The run of entries with equal values, waiting to be reversed (`reverse_ties`).
    let mut run: Vec<String> = Vec::new();
    let mut run_value: Vec<u8> = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    loop {
        // The stream whose head comes first in scan direction.
        let mut pick: Option<usize> = None;
        for (i, c) in cursors.iter().enumerate() {
            let Some(s) = c.suffix() else { continue };
            let better = match pick.and_then(|p| cursors[p].suffix()) {
                None => true,
                Some(best) if o.backward => s > best,
                Some(best) => s < best,
            };
            if better {
                pick = Some(i);
            }
        }
        let Some(i) = pick else { break };
        let (key, value) = cursors[i].head.take().expect("picked a head");
        let strip = cursors[i].strip;
        cursors[i].advance()?;
        ex.keys += 1;
        if budget.spent(ex) {
            return Ok(false);
        }
        let suffix = &key[strip..];
        // The same document through two `$in` values: same suffix, met adjacently.
        if last.as_deref() == Some(suffix) {
            continue;
        }
        last = Some(suffix.to_vec());
        let id = index_entry_id(&key, &value)?.to_string();
        if !o.reverse_ties {
            if let Fed::Full = fetch(&id, ex, out)? {
                return Ok(true);
            }
            continue;
        }
        let value_part = &suffix[..suffix.len() - id.len()];
        if value_part != run_value.as_slice() {
            for id in run.drain(..).rev() {
                if let Fed::Full = fetch(&id, ex, out)? {
                    return Ok(true);
                }
            }
            run_value = value_part.to_vec();
        }
        run.push(id);
    }
    for id in run.drain(..).rev() {
        if let Fed::Full = fetch(&id, ex, out)? {
            return Ok(true);
        }
    }
    if o.nulls_by_scan && o.backward && nulls(read, collection, q, budget, ex, out)?.is_none() {
        return Ok(false);
    }
    Ok(true)
}

/// Fetches one candidate, filters it and collects it.
fn fetch(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    id: &str,
    ex: &mut Examined,
    out: &mut Collector<'_>,
) -> Result<Fed, DbError> {
    let Some(v) = read.get(Table::Docs, &doc_key(collection, id))? else {
        return Ok(Fed::More);
    };
    ex.docs += 1;
    let (_, doc) = decode_doc(&v)?;
    if q.matches(&doc) && out.push(doc)? {
        return Ok(Fed::Full);
    }
    Ok(Fed::More)
}

/// The matching documents whose first sort key is null or missing, in the sort's id order.
/// `None` when the budget ran out.
fn nulls(
    read: &ReadTxn,
    collection: &str,
    q: &Query,
    budget: Budget,
    ex: &mut Examined,
    out: &mut Collector<'_>,
) -> Result<Option<Fed>, DbError> {
    let keys = q.sort.keys();
    let id_desc = keys
        .last()
        .is_some_and(|k| k.dir == herald_query::Direction::Desc);
    let iter = read.prefix(Table::Docs, &collection_prefix(collection))?;
    let iter: Box<dyn Iterator<Item = _>> = if id_desc {
        Box::new(iter.rev())
    } else {
        Box::new(iter)
    };
    for entry in iter {
        let (_, v) = entry?;
        ex.docs += 1;
        if budget.spent(ex) {
            return Ok(None);
        }
        let (_, doc) = decode_doc(&v)?;
        let null = matches!(
            q.sort.key_values(&doc).first(),
            Some(KeyValue::Null | KeyValue::Value(Value::Null))
        );
        if null && q.matches(&doc) && out.push(doc)? {
            return Ok(Some(Fed::Full));
        }
    }
    Ok(Some(Fed::More))
}

/// The ids present in every equality range (each `prefix ++ id`, in id order): take the
/// largest head id, seek every other range to it, until all agree (then it is a candidate) or
/// one range ends. `Ok(false)` when the budget ran out first.
pub(super) fn intersect(
    read: &ReadTxn,
    prefixes: &[Vec<u8>],
    budget: Budget,
    ids: &mut BTreeSet<String>,
    ex: &mut Examined,
) -> Result<bool, DbError> {
    let seek =
        |prefix: &[u8], from: &[u8], ex: &mut Examined| -> Result<Option<Vec<u8>>, DbError> {
            let mut start = prefix.to_vec();
            start.extend_from_slice(from);
            let end = crate::layout::prefix_end(prefix);
            let mut iter = read.range(Table::Index, start.as_slice()..end.as_slice())?;
            Ok(match iter.next().transpose()? {
                Some((key, value)) => {
                    ex.keys += 1;
                    Some(index_entry_id(&key, &value)?.as_bytes().to_vec())
                }
                None => None,
            })
        };
    let Some((first, rest)) = prefixes.split_first() else {
        return Ok(true);
    };
    let mut target: Vec<u8> = Vec::new();
    loop {
        let Some(id) = seek(first, &target, ex)? else {
            return Ok(true);
        };
        target = id;
        let mut agreed = true;
        for p in rest {
            let Some(id) = seek(p, &target, ex)? else {
                return Ok(true);
            };
            if id != target {
                target = id;
                agreed = false;
                break;
            }
        }
        if budget.spent(ex) {
            return Ok(false);
        }
        if agreed {
            ids.insert(
                String::from_utf8(target.clone())
                    .map_err(|_| DbError::Corrupt("index entry id".into()))?,
            );
            // The next id after this one.
            target.push(0);
        }
    }
}
