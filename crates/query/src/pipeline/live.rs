//! Live aggregation: a pipeline's result maintained incrementally from document changes (the
//! before- and after-image of each), pure and without IO.
//!
//! [`LivePipeline::new`] accepts the shape that can be maintained and refuses any other by stage
//! name with `unsupported_live`:
//!
//! ```text
//! [$match] [$sort]  ($match | $project | $unwind)*  ($group | $count)  post*
//! post = $match | $project (keeping _id) | $sort | $skip | $limit | $count
//! ```
//!
//! The head (`$match`, `$sort`) is the query whose result is the pipeline's input, as for a pull
//! aggregation ([`Pipeline::head_query`]); the caller may AND a read rule into its filter. Each
//! input document maps through the per-document stages to 0..n rows, so a change removes the
//! before-image's rows and adds the after-image's. [`LiveAgg`] keeps, per group:
//! - the rows in input order (`BTreeMap` keyed by the head sort key, which ends in `_id`, and
//!   the row's index among its document's rows), each with its group key as written and the
//!   values the order-dependent accumulators need;
//! - `$sum`/`$count`/`$avg`: the pull path's [`NumSum`] (exact integers, doubles in an exact
//!   accumulator rounded once), O(1) per row added or removed: removal is exact, so a sum that
//!   goes back to integers prints as one;
//! - `$min`/`$max`: an ordered multiset of the values (key bytes -> rows), O(log n);
//! - `$first`/`$last`: the first/last row, O(log n); `$push`/`$addToSet`: rebuilt from the rows
//!   in order when the group changes (O(group), bounded by their own limits).
//!
//! A group's output `_id` is its first row's key, as the pull path keeps the first-seen key;
//! a group with no rows left disappears. The groups come out in key order, as `$group` emits
//! them, and only the groups a change touched are rebuilt. Post-group stages of the shape
//! `$match* [$sort] [$skip] [$limit] $project*` are a maintained window ([`Window`]: a changed
//! group moves one entry); any other post-group sequence runs over the finished group rows with
//! the pull path's own stage code.
//!
//! Limits are the pull path's: `GROUPS_MAX` groups, the `$push`/`$addToSet` limits, and
//! `BLOCKING_STAGE_BYTES_MAX` over the rows held, each with `limit_exceeded`.
//!
//! Reference: the result always equals [`Pipeline::run`] over the head query's result
//! (`crates/db/tests/it/live_agg_model.rs` checks it after every commit).

use super::accum::{AccOp, NumSum};
use super::group::Group;
use super::size::approx_bytes;
use super::{run_stage, AggExpr, Pipeline, Stage};
use crate::error::QueryError;
use crate::limits::{BLOCKING_STAGE_BYTES_MAX, GROUPS_MAX};
use crate::query::Query;
use herald_value::{encode_key, key_of, Map, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Bytes counted per held row beyond its key and values.
const ROW_BYTES: usize = 64;

/// A pipeline accepted for live maintenance, split into its parts.
#[derive(Debug, Clone)]
pub struct LivePipeline {
    pipeline: Pipeline,
    /// The head query (filter and sort; no skip or limit).
    head: Query,
    /// The per-document stages: `pipeline.stages()[pre.0..pre.1]`.
    pre: (usize, usize),
    group: Group,
    /// `$count` in place of the `$group`: its field name.
    count_as: Option<String>,
    /// The first post-group stage.
    post: usize,
    /// The post-group stages as a maintained window, when they have that shape.
    window: Option<Window>,
}

/// Post-group stages of the shape `$match* [$sort] [$skip] [$limit] $project*`, kept as a
/// window over the group rows ordered by the sort (then group key, as the pull path's stable
/// sort leaves ties in group order): a change moves one entry, and the result is the window.
#[derive(Debug, Clone)]
struct Window {
    matches: Vec<crate::filter::Filter>,
    sort: Option<crate::sort::Sort>,
    skip: usize,
    limit: Option<usize>,
    projects: Vec<super::Project>,
}

impl Window {
    fn of(stages: &[Stage]) -> Option<Window> {
        let mut w = Window {
            matches: Vec::new(),
            sort: None,
            skip: 0,
            limit: None,
            projects: Vec::new(),
        };
        // 0: matches, 1: after the sort, 2: after the skip, 3: after the limit, 4: projects.
        let mut at = 0;
        for s in stages {
            match s {
                Stage::Match(f) if at == 0 => w.matches.push(f.clone()),
                Stage::Sort(o) if at == 0 => {
                    w.sort = Some(o.clone());
                    at = 1;
                }
                Stage::Skip(n) if at <= 1 => {
                    w.skip = *n;
                    at = 2;
                }
                Stage::Limit(n) if at <= 2 => {
                    w.limit = Some(*n);
                    at = 3;
                }
                Stage::Project(p) => {
                    w.projects.push(p.clone());
                    at = 4;
                }
                _ => return None,
            }
        }
        Some(w)
    }
}

fn unsupported(i: usize, stage: &str, why: &str) -> QueryError {
    QueryError::UnsupportedLive {
        stage: format!("pipeline.{i}.{stage}"),
        reason: why.to_string(),
    }
}

impl LivePipeline {
    /// Checks that `pipeline` can be maintained live (see the module doc for the shape).
    pub fn new(pipeline: Pipeline) -> Result<LivePipeline, QueryError> {
        let (head, covered) = pipeline.head_query(usize::MAX);
        let stages = pipeline.stages();
        if let Some((i, s)) = stages[..covered]
            .iter()
            .enumerate()
            .find(|(_, s)| matches!(s, Stage::Skip(_) | Stage::Limit(_)))
        {
            return Err(unsupported(
                i,
                s.name(),
                "a $skip or $limit before $group picks the input by position, which every \
                 change would shift; put it after the $group",
            ));
        }
        let mut i = covered;
        let (group, count_as) = loop {
            let Some(s) = stages.get(i) else {
                return Err(QueryError::UnsupportedLive {
                    stage: "pipeline".into(),
                    reason: "a live pipeline needs a $group or $count (without one it is a \
                             query: subscribe with filter/sort/projection instead)"
                        .into(),
                });
            };
            match s {
                Stage::Match(_) | Stage::Project(_) | Stage::Unwind(_) => {}
                Stage::Group(g) => break (g.clone(), None),
                Stage::Count(name) => {
                    let g = Group {
                        id: AggExpr::Literal(Value::Null),
                        accumulators: Vec::new(),
                    };
                    break (g, Some(name.clone()));
                }
                Stage::Sort(_) => {
                    return Err(unsupported(
                        i,
                        "$sort",
                        "before $group a $sort is maintained live only right after the \
                         leading $match (it orders the input of $first/$last/$push)",
                    ))
                }
                Stage::Skip(_) | Stage::Limit(_) => {
                    return Err(unsupported(
                        i,
                        s.name(),
                        "a $skip or $limit before $group picks the input by position, which \
                         every change would shift; put it after the $group",
                    ))
                }
            }
            i += 1;
        };
        let post = i + 1;
        // After a $count there is at most one row, so nothing after it can make two rows share
        // an id.
        let mut single = count_as.is_some();
        for (j, s) in stages.iter().enumerate().skip(post) {
            match s {
                Stage::Match(_) | Stage::Sort(_) | Stage::Skip(_) | Stage::Limit(_) => {}
                Stage::Count(_) => single = true,
                Stage::Project(p) if !single && !keeps_id(p) => {
                    return Err(unsupported(
                        j,
                        "$project",
                        "after $group a $project must keep _id as it is: the group's _id \
                         identifies its row in the live result",
                    ))
                }
                Stage::Project(_) => {}
                Stage::Group(_) | Stage::Unwind(_) if !single => {
                    return Err(unsupported(
                        j,
                        s.name(),
                        "only one $group is maintained live, and an $unwind after it would \
                         give rows that share a group's _id",
                    ))
                }
                Stage::Group(_) | Stage::Unwind(_) => {
                    return Err(unsupported(
                        j,
                        s.name(),
                        "only $match, $project, $sort, $skip, $limit and $count are \
                         maintained live after $group/$count",
                    ))
                }
            }
        }
        let window = match count_as {
            None => Window::of(&stages[post..]),
            Some(_) => None,
        };
        Ok(LivePipeline {
            head,
            pre: (covered, i),
            group,
            count_as,
            post,
            window,
            pipeline,
        })
    }

    /// The query whose result is the pipeline's input (filter and sort).
    pub fn head(&self) -> &Query {
        &self.head
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The rows one input document gives the `$group`.
    fn rows_of(&self, doc: &Value) -> Result<Vec<Value>, QueryError> {
        let mut rows = vec![doc.clone()];
        for s in &self.pipeline.stages()[self.pre.0..self.pre.1] {
            rows = run_stage(s, rows)?;
            if rows.is_empty() {
                break;
            }
        }
        Ok(rows)
    }
}

/// Whether a `$project` gives every row the `_id` it had.
fn keeps_id(p: &super::Project) -> bool {
    let probe = Value::String("\u{1}live-probe".into());
    let mut m = Map::new();
    m.insert("_id".into(), probe.clone());
    p.apply(&Value::Object(m)).get("_id") == Some(&probe)
}

/// One held row: its group key as written and the values of the accumulators that need them
/// (`None` for the others and for missing).
#[derive(Debug)]
struct Row {
    key: Value,
    vals: Vec<Option<Value>>,
    bytes: usize,
}

/// One accumulator's running state in one group.
#[derive(Debug)]
enum Acc {
    /// `$sum`/`$count`/`$avg`.
    Sum(NumSum),
    /// `$min`/`$max`: value key -> the rows holding an equal value.
    Ordered(BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>),
    /// `$first`/`$last`/`$push`/`$addToSet`: read from the rows.
    InOrder,
}

#[derive(Debug, Default)]
struct GroupState {
    rows: BTreeMap<Vec<u8>, Row>,
    accs: Vec<Acc>,
}

/// The maintained result of a [`LivePipeline`].
#[derive(Debug)]
pub struct LiveAgg {
    plan: Arc<LivePipeline>,
    head: Query,
    groups: BTreeMap<Vec<u8>, GroupState>,
    /// Documents matching the head query.
    docs: usize,
    /// Estimated bytes of the rows held.
    bytes: usize,
    /// Groups changed since their output was last built.
    dirty: BTreeSet<Vec<u8>>,
    /// Each group's output document (before the post-group stages), in key order.
    out: BTreeMap<Vec<u8>, Arc<Value>>,
    /// The rows counted by a `$count` in place of the `$group`, as last output.
    counted: usize,
    /// With a window plan: the group rows its matches pass, by window key (sort key and group
    /// key), each with its event id and its projected row.
    ranked: BTreeMap<Vec<u8>, (String, Arc<Value>)>,
    /// Group key -> its window key in `ranked`.
    rank_of: std::collections::HashMap<Vec<u8>, Vec<u8>>,
}

impl LiveAgg {
    /// An empty state; `head` is the plan's head query, maybe with a read rule ANDed into its
    /// filter (its sort must be the plan's).
    pub fn new(plan: Arc<LivePipeline>, head: Query) -> LiveAgg {
        LiveAgg {
            plan,
            head,
            groups: BTreeMap::new(),
            docs: 0,
            bytes: 0,
            dirty: BTreeSet::new(),
            out: BTreeMap::new(),
            counted: 0,
            ranked: BTreeMap::new(),
            rank_of: std::collections::HashMap::new(),
        }
    }

    /// The number of documents matching the head query (the pipeline's input).
    pub fn docs(&self) -> usize {
        self.docs
    }

    /// Applies one document change. Either image that does not match the head filter is
    /// ignored, so callers may pass every change to the collection.
    pub fn apply(
        &mut self,
        before: Option<&Value>,
        after: Option<&Value>,
    ) -> Result<(), QueryError> {
        if let Some(b) = before.filter(|b| self.head.filter.matches(b)) {
            self.remove(b)?;
        }
        if let Some(a) = after.filter(|a| self.head.filter.matches(a)) {
            self.add(a)?;
        }
        Ok(())
    }

    /// Adds a document of the head query's result.
    pub fn add(&mut self, doc: &Value) -> Result<(), QueryError> {
        let order = self.head.sort.encoded_key(doc);
        let plan = Arc::clone(&self.plan);
        for (i, row) in plan.rows_of(doc)?.iter().enumerate() {
            self.add_row(&plan.group, row_key(&order, i), row)?;
        }
        self.docs += 1;
        Ok(())
    }

    /// Removes a document added before (the same image).
    pub fn remove(&mut self, doc: &Value) -> Result<(), QueryError> {
        let order = self.head.sort.encoded_key(doc);
        let plan = Arc::clone(&self.plan);
        for (i, row) in plan.rows_of(doc)?.iter().enumerate() {
            self.remove_row(&plan.group, &row_key(&order, i), row);
        }
        self.docs = self.docs.saturating_sub(1);
        Ok(())
    }

    fn add_row(&mut self, group: &Group, rk: Vec<u8>, row: &Value) -> Result<(), QueryError> {
        let (k, key) = group_key(group, row);
        if !self.groups.contains_key(&k) && self.groups.len() >= GROUPS_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "$group would hold more than GROUPS_MAX ({GROUPS_MAX}) groups"
            )));
        }
        let g = self.groups.entry(k.clone()).or_insert_with(|| GroupState {
            rows: BTreeMap::new(),
            accs: group.accumulators.iter().map(|a| new_acc(a.op)).collect(),
        });
        let mut vals = Vec::with_capacity(group.accumulators.len());
        for (acc, st) in group.accumulators.iter().zip(&mut g.accs) {
            let v = acc.expr.eval_ref(row);
            match st {
                Acc::Sum(sum) => {
                    if let Some(x) = v.as_deref() {
                        sum.add(x);
                    }
                    vals.push(None);
                }
                Acc::Ordered(set) => match v.as_deref() {
                    None | Some(Value::Null) => vals.push(None),
                    Some(x) => {
                        set.entry(key_of(x)).or_default().insert(rk.clone());
                        vals.push(v.map(Cow::into_owned));
                    }
                },
                Acc::InOrder => vals.push(v.map(Cow::into_owned)),
            }
        }
        let bytes = ROW_BYTES
            + rk.len()
            + approx_bytes(&key)
            + vals.iter().flatten().map(approx_bytes).sum::<usize>();
        g.rows.insert(rk, Row { key, vals, bytes });
        self.bytes += bytes;
        self.dirty.insert(k);
        if self.bytes > BLOCKING_STAGE_BYTES_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "the live $group would hold more than BLOCKING_STAGE_BYTES_MAX \
                 ({BLOCKING_STAGE_BYTES_MAX}) bytes"
            )));
        }
        Ok(())
    }

    fn remove_row(&mut self, group: &Group, rk: &[u8], row: &Value) {
        let (k, _) = group_key(group, row);
        let Some(g) = self.groups.get_mut(&k) else {
            debug_assert!(false, "removing a row of an unknown group");
            return;
        };
        let Some(held) = g.rows.remove(rk) else {
            debug_assert!(false, "removing an unknown row");
            return;
        };
        self.bytes = self.bytes.saturating_sub(held.bytes);
        for (acc, st) in group.accumulators.iter().zip(&mut g.accs) {
            match st {
                Acc::Sum(sum) => {
                    if let Some(x) = acc.expr.eval_ref(row).as_deref() {
                        sum.remove(x);
                    }
                }
                Acc::Ordered(set) => {
                    if let Some(x) = acc.expr.eval_ref(row).filter(|x| !x.is_null()) {
                        let vk = key_of(&x);
                        if let Some(rows) = set.get_mut(&vk) {
                            rows.remove(rk);
                            if rows.is_empty() {
                                set.remove(&vk);
                            }
                        }
                    }
                }
                Acc::InOrder => {}
            }
        }
        self.dirty.insert(k);
    }

    /// Rebuilds the output of the groups changed since the last call; returns the `_id`s of
    /// the groups whose output changed or disappeared.
    fn finish_dirty(&mut self) -> Result<Vec<Value>, QueryError> {
        let plan = Arc::clone(&self.plan);
        let mut changed = Vec::new();
        for k in std::mem::take(&mut self.dirty) {
            let old = self.out.remove(&k);
            match self.groups.get(&k) {
                Some(g) if !g.rows.is_empty() => {
                    let doc = Arc::new(finish_group(&plan.group, g)?);
                    if old.as_deref() != Some(&doc) {
                        changed.push(doc.get("_id").cloned().unwrap_or(Value::Null));
                        self.rank(&k, Some(&doc));
                    }
                    self.out.insert(k, doc);
                }
                _ => {
                    self.groups.remove(&k);
                    if let Some(o) = old {
                        changed.push(o.get("_id").cloned().unwrap_or(Value::Null));
                        self.rank(&k, None);
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Moves group `k`'s entry of the window to where its new output `doc` belongs (out when it
    /// is gone or its matches fail).
    fn rank(&mut self, k: &[u8], doc: Option<&Arc<Value>>) {
        let Some(w) = &self.plan.window else { return };
        if let Some(old) = self.rank_of.remove(k) {
            self.ranked.remove(&old);
        }
        let Some(doc) = doc.filter(|d| w.matches.iter().all(|f| f.matches(d))) else {
            return;
        };
        let mut key = w
            .sort
            .as_ref()
            .map_or_else(Vec::new, |s| s.encoded_key(doc));
        key.extend_from_slice(k);
        let shown = match w.projects.as_slice() {
            [] => Arc::clone(doc),
            ps => {
                let mut v = (**doc).clone();
                for p in ps {
                    v = p.apply(&v);
                }
                Arc::new(v)
            }
        };
        self.rank_of.insert(k.to_vec(), key.clone());
        self.ranked.insert(key, (row_id(&shown), shown));
    }

    /// Rebuilds the groups changed since the last call and returns the event ids ([`row_id`])
    /// of the rows whose group output changed; empty when the result is unchanged.
    pub fn refresh(&mut self) -> Result<Vec<String>, QueryError> {
        let changed = self.finish_dirty()?;
        if self.plan.count_as.is_some() {
            let n: usize = self.groups.values().map(|g| g.rows.len()).sum();
            if n == self.counted {
                return Ok(Vec::new());
            }
            self.counted = n;
            return Ok(vec![String::new()]);
        }
        Ok(changed.iter().map(id_of).collect())
    }

    /// The pipeline's result as of the last [`refresh`](Self::refresh).
    pub fn rows(&self) -> Result<Vec<Arc<Value>>, QueryError> {
        Ok(self.rows_with_ids()?.into_iter().map(|(_, r)| r).collect())
    }

    /// [`rows`](Self::rows) with each row's event id ([`row_id`]). With a window plan this
    /// costs the window's size, else the number of groups.
    pub fn rows_with_ids(&self) -> Result<Vec<(String, Arc<Value>)>, QueryError> {
        let plan = &self.plan;
        if let Some(w) = &plan.window {
            return Ok(self
                .ranked
                .values()
                .skip(w.skip)
                .take(w.limit.unwrap_or(usize::MAX))
                .cloned()
                .collect());
        }
        let rows: Vec<Arc<Value>> = match &plan.count_as {
            Some(_) if self.counted == 0 => Vec::new(),
            Some(name) => {
                let mut m = Map::new();
                m.insert(name.clone(), Value::from(self.counted));
                vec![Arc::new(Value::Object(m))]
            }
            None => self.out.values().cloned().collect(),
        };
        let rows = if plan.post >= plan.pipeline.stages().len() {
            rows
        } else {
            let docs: Vec<Value> = rows.iter().map(|d| (**d).clone()).collect();
            let out = plan.pipeline.run_from(plan.post, docs)?;
            out.into_iter().map(Arc::new).collect()
        };
        Ok(rows.into_iter().map(|r| (row_id(&r), r)).collect())
    }

    /// [`refresh`](Self::refresh), then [`rows`](Self::rows): the result now, and the ids of
    /// the rows changed since the last call.
    pub fn result(&mut self) -> Result<(Vec<Arc<Value>>, Vec<String>), QueryError> {
        let ids = self.refresh()?;
        Ok((self.rows()?, ids))
    }
}

/// A row's place in the input order: the head sort key (which ends in `_id`), then its index
/// among its document's rows.
fn row_key(order: &[u8], i: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(order.len() + 4);
    k.extend_from_slice(order);
    k.extend_from_slice(&(i as u32).to_be_bytes());
    k
}

fn group_key(group: &Group, row: &Value) -> (Vec<u8>, Value) {
    let key = group.id.eval_ref(row);
    let mut k = Vec::with_capacity(32);
    encode_key(key.as_deref().unwrap_or(&Value::Null), &mut k);
    (k, key.map_or(Value::Null, Cow::into_owned))
}

fn new_acc(op: AccOp) -> Acc {
    match op {
        AccOp::Sum | AccOp::Avg | AccOp::Count => Acc::Sum(NumSum::default()),
        AccOp::Min | AccOp::Max => Acc::Ordered(BTreeMap::new()),
        AccOp::First | AccOp::Last | AccOp::Push | AccOp::AddToSet => Acc::InOrder,
    }
}

/// A group's output document, as `$group` builds it.
fn finish_group(group: &Group, g: &GroupState) -> Result<Value, QueryError> {
    let (_, first) = g.rows.first_key_value().expect("a group with rows");
    let mut out = Map::with_capacity(group.accumulators.len() + 1);
    out.insert("_id".into(), first.key.clone());
    for (i, (acc, st)) in group.accumulators.iter().zip(&g.accs).enumerate() {
        let v = match st {
            Acc::Sum(sum) => {
                if acc.op == AccOp::Avg {
                    sum.mean()
                } else {
                    sum.total()
                }
            }
            Acc::Ordered(set) => {
                // Among equal values the pull path keeps the first seen.
                let best = if acc.op == AccOp::Min {
                    set.first_key_value()
                } else {
                    set.last_key_value()
                };
                best.and_then(|(_, rows)| rows.first())
                    .and_then(|rk| g.rows.get(rk))
                    .and_then(|r| r.vals[i].clone())
                    .unwrap_or(Value::Null)
            }
            Acc::InOrder => match acc.op {
                AccOp::First => first.vals[i].clone().unwrap_or(Value::Null),
                AccOp::Last => g
                    .rows
                    .last_key_value()
                    .and_then(|(_, r)| r.vals[i].clone())
                    .unwrap_or(Value::Null),
                _ => {
                    let mut st = acc.state();
                    for r in g.rows.values() {
                        st.add(r.vals[i].as_ref().map(Cow::Borrowed))?;
                    }
                    st.finish()
                }
            },
        };
        out.insert(acc.name.clone(), v);
    }
    Ok(Value::Object(out))
}

fn id_of(id: &Value) -> String {
    id.to_string()
}

/// The event id of a live pipeline row: its `_id` as compact JSON text (`"r1"` is `"\"r1\""`,
/// a compound key `{"a":1}`, `null` is `null`), and the empty string for a row without `_id`
/// (what `$count` gives: at most one row). Distinct groups have distinct ids.
pub fn row_id(row: &Value) -> String {
    row.get("_id").map_or_else(String::new, id_of)
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
