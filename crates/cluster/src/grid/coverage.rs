//! The front end's release rule, pure: which matches of its own views it has read from the
//! matches topic, and whether every cell has claimed a seq, so that seq's matches are complete.
//!
//! Invariant (the property test below): `complete(n)` holds only when every match with seq
//! `<= n` of every live view of this front end (registered, its offset known) has been given to
//! [`Coverage::record`]; records may come duplicated, from zombie cells, from cells that re-match
//! after learning a view late, in any interleaving the single-partition topic allows.
//!
//! Why that holds: a claim `(to_seq T, queries_end E)` of cell (q, w) says every match of a view
//! registered below `E` with seq `<= T` is in that record or an earlier one. The topic has one
//! partition, read in order, so when the claim is read every match it covers was read before
//! it. A view's registration offset is known from the producer's delivery report, and it waits
//! for a claim with `E` above it: a claim made before the cell knew the view never counts.

use crate::grid::wire::CellRecord;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The engine's id of a view (a slot it may reuse after the view is removed).
pub type LocalId = u32;

struct View {
    id: LocalId,
    row: u32,
    /// The seq the view starts after.
    from: u64,
    /// Its registration's offset on the queries topic, once the delivery report came.
    offset: Option<u64>,
}

/// Why the front end gave up (the engine then resets the subscribers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overflow {
    /// More than the cap of buffered matches waited for a release.
    Buffered(usize),
}

/// The matches and claims a front end has read, and its own views.
pub struct Coverage {
    rows: u32,
    parts: u32,
    /// This front end's keys start with it; other keys are other front ends' views.
    prefix: String,
    views: HashMap<String, View>,
    /// Per cell `row * parts + part`, the claims read as a Pareto frontier of
    /// `(queries_end, to_seq)`: sorted by `queries_end` ascending, `to_seq` descending.
    frontier: Vec<Vec<(u64, u64)>>,
    /// Matches read and not yet released: seq -> view key -> change indexes (a set: a match
    /// read twice is the same match).
    buffer: BTreeMap<u64, HashMap<String, BTreeSet<u32>>>,
    buffered: usize,
    cap: usize,
    /// The last seq released: older matches are late duplicates.
    released: u64,
    overflow: Option<Overflow>,
    /// [`Coverage::needs`] as of the last change of `views` (`None`: to recompute): the
    /// engine asks after every record read, views change far less often.
    needs: Option<BTreeMap<u32, Option<u64>>>,
}

impl Coverage {
    /// A front end of a `rows` x `parts` grid whose view keys start with `prefix`, holding at
    /// most `cap` buffered matches, which has released everything up to `released`.
    pub fn new(rows: u32, parts: u32, prefix: String, cap: usize, released: u64) -> Coverage {
        Coverage {
            rows,
            parts,
            prefix,
            views: HashMap::new(),
            frontier: vec![Vec::new(); (rows * parts) as usize],
            buffer: BTreeMap::new(),
            buffered: 0,
            cap,
            released,
            overflow: None,
            needs: None,
        }
    }

    pub fn rows(&self) -> u32 {
        self.rows
    }

    pub fn parts(&self) -> u32 {
        self.parts
    }

    /// A view of this front end, starting after `from`, in `row`; its offset comes later.
    pub fn register(&mut self, key: &str, id: LocalId, row: u32, from: u64) {
        assert!(row < self.rows, "row {row} of {}", self.rows);
        self.needs = None;
        self.views.insert(
            key.to_string(),
            View {
                id,
                row,
                from,
                offset: None,
            },
        );
    }

    /// The delivery report of a view's registration.
    pub fn registered(&mut self, key: &str, offset: u64) {
        if let Some(v) = self.views.get_mut(key) {
            v.offset = Some(offset);
            self.needs = None;
        }
    }

    /// Forgets a view and its buffered matches (its local id may be reused at once).
    pub fn remove(&mut self, key: &str) {
        if self.views.remove(key).is_some() {
            self.needs = None;
            for m in self.buffer.values_mut() {
                if let Some(set) = m.remove(key) {
                    self.buffered -= set.len();
                }
            }
        }
    }

    /// Takes one record read from the matches topic, in topic order.
    pub fn record(&mut self, r: &CellRecord) {
        if r.row >= self.rows || r.part >= self.parts {
            return;
        }
        for (seq, key, indexes) in &r.matches {
            if *seq <= self.released || !key.starts_with(&self.prefix) {
                continue;
            }
            let Some(v) = self.views.get(key) else {
                continue;
            };
            if *seq <= v.from {
                continue;
            }
            let set = self
                .buffer
                .entry(*seq)
                .or_default()
                .entry(key.clone())
                .or_default();
            for &i in indexes {
                if set.insert(i) {
                    self.buffered += 1;
                }
            }
        }
        if self.buffered > self.cap && self.overflow.is_none() {
            self.overflow = Some(Overflow::Buffered(self.buffered));
        }
        let cell = &mut self.frontier[(r.row * self.parts + r.part) as usize];
        add_claim(cell, r.queries_end, r.to_seq);
    }

    /// Set when the front end gave up; cleared by [`Coverage::reset`].
    pub fn overflow(&self) -> Option<&Overflow> {
        self.overflow.as_ref()
    }

    /// Drops every buffered match and view (the engine reset its subscribers and registers
    /// anew), keeping the claims; the front end continues after `released`.
    pub fn reset(&mut self, released: u64) {
        self.views.clear();
        self.needs = None;
        self.buffer.clear();
        self.buffered = 0;
        self.overflow = None;
        self.released = released;
    }

    /// The seq the cell `(row, part)` has claimed for every view registered below
    /// `queries_end`, if any.
    pub fn claimed(&self, row: u32, part: u32, queries_end: u64) -> Option<u64> {
        let cell = &self.frontier[(row * self.parts + part) as usize];
        // The frontier is sorted by queries_end ascending and to_seq descending: the first
        // claim far enough has the greatest to_seq among those.
        cell.iter()
            .find(|(e, _)| *e >= queries_end)
            .map(|(_, t)| *t)
    }

    /// Per row holding views of this front end, the queries_end a claim needs (above every
    /// view's registration offset), or `None` for a row with a registration not yet confirmed.
    pub fn needs(&mut self) -> &BTreeMap<u32, Option<u64>> {
        if self.needs.is_none() {
            self.needs = Some(self.compute_needs());
        }
        self.needs.as_ref().expect("just computed")
    }

    fn compute_needs(&self) -> BTreeMap<u32, Option<u64>> {
        let mut needs: BTreeMap<u32, Option<u64>> = BTreeMap::new();
        for v in self.views.values() {
            let need = needs.entry(v.row).or_insert(Some(0));
            *need = match (*need, v.offset) {
                (Some(n), Some(o)) => Some(n.max(o + 1)),
                _ => None,
            };
        }
        needs
    }

    /// Whether every match with seq `<= seq` of every view has been read.
    pub fn complete(&mut self, seq: u64) -> bool {
        self.needs();
        let needs = self.needs.as_ref().expect("computed");
        needs.iter().all(|(&row, need)| {
            need.is_some_and(|need| {
                (0..self.parts).all(|part| self.claimed(row, part, need).is_some_and(|t| t >= seq))
            })
        })
    }

    /// Releases commit `seq` (complete; every earlier commit was released): its matches by
    /// local id, indexes ascending, ids ascending.
    pub fn release(&mut self, seq: u64) -> Vec<(LocalId, Vec<u32>)> {
        debug_assert!(self.complete(seq));
        self.released = self.released.max(seq);
        let mut out = Vec::new();
        while let Some(entry) = self.buffer.first_entry() {
            if *entry.key() > seq {
                break;
            }
            let (s, m) = entry.remove_entry();
            for (key, set) in m {
                self.buffered -= set.len();
                if s != seq {
                    // Matches of a seq that was never dispatched cannot exist (the engine
                    // dispatches every commit); dropped rather than given to another commit.
                    continue;
                }
                if let Some(v) = self.views.get(&key) {
                    out.push((v.id, set.into_iter().collect()));
                }
            }
        }
        out.sort();
        out
    }

    /// Whether this front end has a view (registered, or waiting for its offset).
    pub fn has_views(&self) -> bool {
        !self.views.is_empty()
    }

    /// Buffered matches (for metrics).
    pub fn buffered(&self) -> usize {
        self.buffered
    }
}

/// Adds the claim `(e, t)` to a cell's Pareto frontier (sorted by `e` ascending, `t`
/// descending; no claim dominated by another).
fn add_claim(cell: &mut Vec<(u64, u64)>, e: u64, t: u64) {
    if cell.iter().any(|&(e2, t2)| e2 >= e && t2 >= t) {
        return;
    }
    cell.retain(|&(e2, t2)| !(e2 <= e && t2 <= t));
    let at = cell.partition_point(|&(e2, _)| e2 < e);
    cell.insert(at, (e, t));
    // One owner's claims grow in both members, each dominating the last: a frontier longer
    // than one comes from zombies and takeovers. Forgetting a claim can only delay a release
    // (a later claim covers it), never make one wrong; the oldest views' claim goes first.
    if cell.len() > FRONTIER_MAX {
        cell.remove(0);
    }
}

/// Claims kept per cell at most.
const FRONTIER_MAX: usize = 64;

#[cfg(test)]
mod tests;
