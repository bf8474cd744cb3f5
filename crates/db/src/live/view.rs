//! `LiveView`: a maintained prefix of one query's result, kept in result order.
//!
//! For a query with `limit`, the view keeps the `skip` offset items, the visible window and
//! `slack` items beyond it (InvaliDB's scheme); documents further down are unknown. A change
//! inside the known prefix is applied in place; a document sorting after the last known one is
//! ignored (it is in the unknown region). When deletions or moves leave fewer known items than
//! `skip + limit`, the view is refilled from the [`Refill`] at exactly the seq being applied.
//! Without a limit the view holds the whole result and never refills.

use crate::live::diff::{diff_windows, ChangeEvent};
use herald_query::Query;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Items kept beyond the visible window, so most deletions need no refill.
pub const SLACK_DEFAULT: usize = 16;

/// Supplies the first `n` documents of the query's result (unprojected, ignoring skip and
/// limit) as of exactly `seq`.
pub trait Refill {
    fn top(&mut self, n: usize, seq: u64) -> Result<Vec<Value>, crate::DbError>;
}

impl<F: FnMut(usize, u64) -> Result<Vec<Value>, crate::DbError>> Refill for F {
    fn top(&mut self, n: usize, seq: u64) -> Result<Vec<Value>, crate::DbError> {
        self(n, seq)
    }
}

/// One document change of a commit: id, before-image, after-image.
pub type DocChange<'a> = (&'a str, Option<&'a Value>, Option<&'a Value>);

/// One known document of a view.
struct Item {
    id: String,
    shown: Arc<Value>,
}

pub struct LiveView {
    /// Shared so the engine can lend it to a refill while the view is borrowed mutably.
    query: std::sync::Arc<Query>,
    slack: usize,
    /// The known prefix of the result: encoded sort key (ends with `_id`) -> the document as
    /// subscribers see it (projected when the query has a projection, so a view of `{ts: 1}`
    /// keeps a few bytes per document, not each event's whole tree; shared with the windows
    /// and events made from it).
    items: BTreeMap<Vec<u8>, Item>,
    /// id -> its key in `items`.
    keys: HashMap<String, Vec<u8>>,
    /// True when `items` holds the entire result (nothing unknown beyond it).
    complete: bool,
    seq: u64,
    refills: u64,
    /// A collection-group view: documents are known by their `_path` (ids repeat across
    /// collections) and keep it when projected.
    by_path: bool,
}

impl LiveView {
    /// A view of a collection-group query: its documents carry `_path`, which identifies
    /// them (the changes it is given name documents by full path) and which every shown
    /// document keeps; `query`'s sort must end with `_path`.
    pub fn new_group(query: Query, slack: usize, initial: Vec<Value>, seq: u64) -> LiveView {
        let mut v = LiveView::new(query, slack, Vec::new(), seq);
        v.by_path = true;
        v.load(initial);
        v
    }

    /// Builds the view from the first `capacity + 1` documents of the result at `seq` (all of
    /// them for a query without limit), in result order.
    pub fn new(query: Query, slack: usize, initial: Vec<Value>, seq: u64) -> LiveView {
        let mut v = LiveView {
            query: std::sync::Arc::new(query),
            slack,
            items: BTreeMap::new(),
            keys: HashMap::new(),
            complete: true,
            seq,
            refills: 0,
            by_path: false,
        };
        v.load(initial);
        v
    }

    /// How many documents the view asks for when it (re)fills: the capacity plus one, to learn
    /// whether anything lies beyond. `None`: the whole result.
    pub fn fetch_size(&self) -> Option<usize> {
        self.capacity().map(|c| c + 1)
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn refills(&self) -> u64 {
        self.refills
    }

    pub fn query(&self) -> &Query {
        &self.query
    }

    /// The query, shared (a reference count, not a copy).
    pub fn shared_query(&self) -> std::sync::Arc<Query> {
        self.query.clone()
    }

    fn capacity(&self) -> Option<usize> {
        self.query.limit.map(|l| self.query.skip + l + self.slack)
    }

    fn load(&mut self, docs: Vec<Value>) {
        self.items.clear();
        self.keys.clear();
        let cap = self.capacity().unwrap_or(usize::MAX);
        self.complete = docs.len() <= cap;
        for d in docs.into_iter().take(cap) {
            self.insert(d);
        }
    }

    fn insert(&mut self, doc: Value) {
        let member = if self.by_path { "_path" } else { "_id" };
        let Some(id) = doc.get(member).and_then(Value::as_str).map(str::to_string) else {
            return;
        };
        let key = self.query.sort.encoded_key(&doc);
        self.keys.insert(id.clone(), key.clone());
        let shown = if self.query.projection.is_all() {
            Arc::new(doc) // owned: no copy
        } else {
            self.shown(&doc)
        };
        self.items.insert(key, Item { id, shown });
    }

    /// True when a matching document would land in the known prefix (not beyond it).
    fn would_hold(&self, doc: &Value) -> bool {
        self.complete
            || self
                .items
                .last_key_value()
                .is_some_and(|(last, _)| self.query.sort.encoded_key(doc) < *last)
    }

    /// [`apply`](LiveView::apply) for a view that holds the whole result and shows all of it
    /// (no `limit`, no `skip`): each change becomes its event directly, from the document's rank
    /// before and after it, so the cost does not include copying the result (it did, through
    /// [`diff_windows`], which made large unlimited views slow). Only written documents get
    /// events; untouched ones keep their relative order, so their moves are implied.
    fn apply_in_place(&mut self, changes: &[DocChange<'_>]) -> Vec<ChangeEvent<Arc<Value>>> {
        use crate::live::diff::EventKind;
        let mut events = Vec::new();
        for (id, _before, after) in changes {
            let old = self.keys.remove(*id).and_then(|k| {
                let rank = self
                    .items
                    .range::<[u8], _>((
                        std::ops::Bound::Unbounded,
                        std::ops::Bound::Excluded(k.as_slice()),
                    ))
                    .count();
                self.items.remove(&k).map(|item| (rank, item.shown))
            });
            let new = match after {
                Some(a) if self.query.matches(a) => {
                    let key = self.query.sort.encoded_key(a);
                    let rank = self
                        .items
                        .range::<[u8], _>((
                            std::ops::Bound::Unbounded,
                            std::ops::Bound::Excluded(key.as_slice()),
                        ))
                        .count();
                    let shown = self.shown(a);
                    self.keys.insert(id.to_string(), key.clone());
                    let item = Item {
                        id: id.to_string(),
                        shown: shown.clone(),
                    };
                    self.items.insert(key, item);
                    Some((rank, shown))
                }
                _ => None,
            };
            let event = |kind, doc, old_index: usize, new_index: usize| ChangeEvent {
                kind,
                id: id.to_string(),
                doc,
                old_index: old_index as i64,
                new_index: new_index as i64,
            };
            match (old, new) {
                (None, None) => {}
                (Some((i, _)), None) => events.push(ChangeEvent {
                    new_index: -1,
                    ..event(EventKind::Remove, None, i, 0)
                }),
                (None, Some((j, shown))) => events.push(ChangeEvent {
                    old_index: -1,
                    ..event(EventKind::Add, Some(shown), 0, j)
                }),
                (Some((i, before)), Some((j, shown))) => {
                    if i != j {
                        events.push(event(EventKind::ChangeIndex, Some(shown), i, j));
                    } else if *before != *shown {
                        events.push(event(EventKind::Change, Some(shown), i, j));
                    }
                }
            }
        }
        events
    }

    /// A document as subscribers see it (projected).
    fn shown(&self, d: &Value) -> Arc<Value> {
        if self.query.projection.is_all() {
            Arc::new(d.clone())
        } else if self.by_path {
            Arc::new(crate::exec::project_group(&self.query, d.clone()))
        } else {
            Arc::new(self.query.projection.apply(d))
        }
    }

    /// The visible window, projected: what a subscriber's list holds.
    pub fn window(&self) -> Vec<(String, Value)> {
        self.window_shared()
            .into_iter()
            .map(|(id, d)| (id, Arc::unwrap_or_clone(d)))
            .collect()
    }

    /// The visible window's documents, shared with the view (an `initial` message's).
    pub fn window_docs(&self) -> Vec<Arc<Value>> {
        let take = self.query.limit.unwrap_or(usize::MAX);
        self.items
            .values()
            .skip(self.query.skip)
            .take(take)
            .map(|item| item.shown.clone())
            .collect()
    }

    /// [`window`](LiveView::window) with the documents shared with the view.
    fn window_shared(&self) -> Vec<(String, Arc<Value>)> {
        let take = self.query.limit.unwrap_or(usize::MAX);
        self.items
            .values()
            .skip(self.query.skip)
            .take(take)
            .map(|item| (item.id.clone(), item.shown.clone()))
            .collect()
    }

    /// Whether any of the changes touches what the view holds or would hold. Most changes a view
    /// is offered do not: this is the hot path when many views share a scan list, so it
    /// allocates nothing and hashes an id only when the view holds documents.
    #[inline]
    pub fn touched_by(&self, changes: &[DocChange<'_>]) -> bool {
        changes.iter().any(|(id, _, after)| {
            (!self.keys.is_empty() && self.keys.contains_key(*id))
                || after.is_some_and(|a| self.query.matches(a) && self.would_hold(a))
        })
    }

    /// Marks the view as caught up with `seq` when none of that commit's changes touched it.
    pub fn skip_to(&mut self, seq: u64) {
        self.seq = self.seq.max(seq);
    }

    /// Applies the changes of one commit and returns the edits of the visible window.
    pub fn apply(
        &mut self,
        seq: u64,
        changes: &[DocChange<'_>],
        refill: &mut dyn Refill,
    ) -> Result<Vec<ChangeEvent<Arc<Value>>>, crate::DbError> {
        if !self.touched_by(changes) {
            self.seq = seq;
            return Ok(Vec::new());
        }
        if self.query.limit.is_none() && self.query.skip == 0 {
            let events = self.apply_in_place(changes);
            self.seq = seq;
            return Ok(events);
        }
        let old = self.window_shared();
        for (id, _before, after) in changes {
            if let Some(k) = self.keys.remove(*id) {
                self.items.remove(&k);
            }
            let Some(after) = after else { continue };
            if !self.query.matches(after) {
                continue;
            }
            let key = self.query.sort.encoded_key(after);
            let known = self.complete
                || self
                    .items
                    .last_key_value()
                    .is_some_and(|(last, _)| key < *last);
            if known {
                let shown = self.shown(after);
                self.keys.insert(id.to_string(), key.clone());
                let id = id.to_string();
                self.items.insert(key, Item { id, shown });
            }
        }
        if let Some(cap) = self.capacity() {
            while self.items.len() > cap {
                if let Some((_, item)) = self.items.pop_last() {
                    self.keys.remove(&item.id);
                }
                self.complete = false;
            }
            let needed = self.query.skip + self.query.limit.unwrap_or(0);
            if !self.complete && self.items.len() < needed {
                let docs = refill.top(cap + 1, seq)?;
                self.refills += 1;
                self.load(docs);
            }
        }
        self.seq = seq;
        let changed: std::collections::HashSet<&str> =
            changes.iter().map(|(id, _, _)| *id).collect();
        Ok(diff_windows(&old, &self.window_shared(), &changed))
    }
}
