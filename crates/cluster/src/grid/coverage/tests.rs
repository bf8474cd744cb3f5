//! The release rule against a model of the whole protocol: front ends registering and removing
//! views, cells advancing, learning views late and re-matching, being taken over (the old owner
//! going on as a zombie), records delivered twice, in random interleavings of one topic.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

const SEQ_MAX: u64 = 10;
const CHANGES: u32 = 4;

#[derive(Debug, Clone)]
enum Act {
    /// The front end registers a view in this row (only while nothing is in flight).
    Register(u32),
    /// Another front end registers a view.
    Foreign(u32),
    /// The delivery report of a pending registration comes.
    Delivered(usize),
    /// The front end removes one of its views (only while nothing is in flight).
    Remove(usize),
    /// The engine dispatches the next commit.
    Dispatch,
    /// The front end reads the next record of the matches topic.
    Read,
    /// The engine collects the oldest dispatched commit, if complete.
    Collect,
    /// A cell instance matches up to this many more commits.
    Advance(usize, u64),
    /// A cell instance reads this many more registrations (and re-matches them).
    Learn(usize, usize, bool),
    /// A node takes over cell (row, part) from the last claim in the topic.
    Takeover(u32, u32),
    /// A record is in the topic twice.
    Duplicate(usize),
}

fn acts() -> impl Strategy<Value = Vec<Act>> {
    prop::collection::vec(
        prop_oneof![
            2 => (0..3u32).prop_map(Act::Register),
            1 => (0..3u32).prop_map(Act::Foreign),
            2 => (0..8usize).prop_map(Act::Delivered),
            1 => (0..8usize).prop_map(Act::Remove),
            3 => Just(Act::Dispatch),
            6 => Just(Act::Read),
            4 => Just(Act::Collect),
            5 => ((0..12usize), (1..4u64)).prop_map(|(i, k)| Act::Advance(i, k)),
            3 => ((0..12usize), (1..3usize), any::<bool>()).prop_map(|(i, k, s)| Act::Learn(i, k, s)),
            1 => ((0..3u32), (0..3u32)).prop_map(|(r, p)| Act::Takeover(r, p)),
            1 => (0..64usize).prop_map(Act::Duplicate),
        ],
        1..160,
    )
}

/// Which changes of commit `seq` view `key`'s filter matches: a fixed pseudo-random truth.
fn truth(key: &str, seq: u64) -> Vec<u32> {
    let mut h = 1469598103934665603u64;
    for b in key.bytes().chain(seq.to_le_bytes()) {
        h = (h ^ b as u64).wrapping_mul(1099511628211);
    }
    (0..CHANGES).filter(|i| (h >> (i * 3)) & 3 == 0).collect()
}

#[derive(Clone)]
struct Reg {
    key: String,
    row: u32,
    from: u64,
}

struct Cell {
    row: u32,
    part: u32,
    pos: u64,
    end: usize,
}

struct World {
    parts: u32,
    queries: Vec<Option<Reg>>,
    tombstoned: BTreeSet<String>,
    matches: Vec<CellRecord>,
    cells: Vec<Cell>,
}

impl World {
    fn matches_of(
        &self,
        part: u32,
        reg: &Reg,
        after: u64,
        upto: u64,
    ) -> Vec<(u64, String, Vec<u32>)> {
        (after.max(reg.from) + 1..=upto)
            .filter_map(|s| {
                let idx: Vec<u32> = truth(&reg.key, s)
                    .into_iter()
                    .filter(|i| i % self.parts == part)
                    .collect();
                (!idx.is_empty()).then(|| (s, reg.key.clone(), idx))
            })
            .collect()
    }

    fn known(&self, c: &Cell, from: usize) -> Vec<Reg> {
        self.queries[from..c.end]
            .iter()
            .flatten()
            .filter(|r| r.row == c.row && !self.tombstoned.contains(&r.key))
            .cloned()
            .collect()
    }

    fn push(&mut self, c: usize, to_seq: u64, end: usize, matches: Vec<(u64, String, Vec<u32>)>) {
        let cell = &self.cells[c];
        self.matches.push(CellRecord {
            row: cell.row,
            part: cell.part,
            to_seq,
            queries_end: end as u64,
            matches,
            node: format!("cell{c}"),
        });
    }

    fn advance(&mut self, c: usize, k: u64) {
        let cell = &self.cells[c];
        let to = (cell.pos + k).min(SEQ_MAX);
        let mut m = Vec::new();
        for reg in self.known(cell, 0) {
            m.extend(self.matches_of(cell.part, &reg, cell.pos, to));
        }
        let end = cell.end;
        self.push(c, to, end, m);
        self.cells[c].pos = to;
    }

    fn learn(&mut self, c: usize, k: usize, split: bool) {
        let (old_end, pos, part) = (self.cells[c].end, self.cells[c].pos, self.cells[c].part);
        let new_end = (old_end + k).min(self.queries.len());
        if new_end == old_end {
            return;
        }
        self.cells[c].end = new_end;
        let fresh = self.known(&self.cells[c], old_end);
        let mut m = Vec::new();
        for reg in &fresh {
            m.extend(self.matches_of(part, reg, 0, pos));
        }
        if split && m.len() > 1 {
            // A re-match too long for one record: the first part under the old claim.
            let rest = m.split_off(m.len() / 2);
            self.push(c, pos, old_end, m);
            m = rest;
        }
        self.push(c, pos, new_end, m);
    }

    fn takeover(&mut self, row: u32, part: u32) {
        let (pos, end) = self
            .matches
            .iter()
            .rev()
            .find(|r| r.row == row && r.part == part)
            .map_or((0, 0), |r| (r.to_seq, r.queries_end as usize));
        self.cells.push(Cell {
            row,
            part,
            pos,
            end,
        });
        // The new owner reads the queries topic to its end first, re-matching the views its
        // claim does not cover.
        let c = self.cells.len() - 1;
        let k = self.queries.len() - end;
        self.learn(c, k, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the interleaving, a released commit carries exactly the matches of the front
    /// end's live views, and once every cell is run to the end, every dispatched commit is
    /// released.
    #[test]
    fn released_commits_hold_every_match_of_their_views(
        rows in 1..3u32, parts in 1..3u32, acts in acts()
    ) {
        let mut w = World {
            parts, queries: Vec::new(), tombstoned: BTreeSet::new(),
            matches: Vec::new(), cells: Vec::new(),
        };
        let mut cov = Coverage::new(rows, parts, "me/1/".into(), usize::MAX, 0);
        let (mut released, mut dispatched, mut read) = (0u64, 0u64, 0usize);
        let mut mine: Vec<(Reg, LocalId)> = Vec::new();
        let mut pending: Vec<(String, u64)> = Vec::new();
        let mut counter = 0;
        let collect = |cov: &mut Coverage, mine: &[(Reg, LocalId)], released: &mut u64| {
            let seq = *released + 1;
            let out = cov.release(seq);
            let mut want: Vec<(LocalId, Vec<u32>)> = mine
                .iter()
                .filter(|(r, _)| r.from < seq)
                .map(|(r, id)| (*id, truth(&r.key, seq)))
                .filter(|(_, t)| !t.is_empty())
                .collect();
            want.sort();
            assert_eq!(out, want, "commit {}", seq);
            *released = seq;
        };
        for act in acts {
            match act {
                Act::Register(row) | Act::Foreign(row) => {
                    let row = row % rows;
                    let ours = matches!(act, Act::Register(_));
                    if ours && dispatched != released { continue; }
                    counter += 1;
                    let key = if ours { format!("me/1/{counter}") } else { format!("other/1/{counter}") };
                    let from = if ours { released } else { counter % (SEQ_MAX / 2) };
                    let reg = Reg { key: key.clone(), row, from };
                    w.queries.push(Some(reg.clone()));
                    if ours {
                        let id = (0..).find(|i| mine.iter().all(|(_, j)| j != i)).unwrap();
                        cov.register(&key, id, row, from);
                        mine.push((reg, id));
                        pending.push((key, w.queries.len() as u64 - 1));
                    }
                }
                Act::Delivered(i) => {
                    if !pending.is_empty() {
                        let (key, offset) = pending.remove(i % pending.len());
                        cov.registered(&key, offset);
                    }
                }
                Act::Remove(i) => {
                    if dispatched != released || mine.is_empty() { continue; }
                    let (reg, _) = mine.remove(i % mine.len());
                    pending.retain(|(k, _)| *k != reg.key);
                    cov.remove(&reg.key);
                    w.tombstoned.insert(reg.key.clone());
                    w.queries.push(None);
                }
                Act::Dispatch => dispatched = (dispatched + 1).min(SEQ_MAX),
                Act::Read => {
                    if read < w.matches.len() {
                        // As the front end does: without views a record is skipped unread.
                        if cov.has_views() {
                            cov.record(&w.matches[read]);
                        }
                        read += 1;
                    }
                }
                Act::Collect => {
                    if released < dispatched && cov.complete(released + 1) {
                        collect(&mut cov, &mine, &mut released);
                    }
                }
                Act::Advance(i, k) => {
                    if !w.cells.is_empty() { let c = i % w.cells.len(); w.advance(c, k); }
                }
                Act::Learn(i, k, split) => {
                    if !w.cells.is_empty() { let c = i % w.cells.len(); w.learn(c, k, split); }
                }
                Act::Takeover(r, p) => w.takeover(r % rows, p % parts),
                Act::Duplicate(i) => {
                    if !w.matches.is_empty() {
                        let r = w.matches[i % w.matches.len()].clone();
                        w.matches.push(r);
                    }
                }
            }
        }
        // Liveness: confirmations come, every cell gets a (new) owner that runs to the end.
        for (key, offset) in pending.drain(..) {
            cov.registered(&key, offset);
        }
        for row in 0..rows {
            for part in 0..parts {
                w.takeover(row, part);
                let c = w.cells.len() - 1;
                w.advance(c, SEQ_MAX);
            }
        }
        while read < w.matches.len() {
            cov.record(&w.matches[read]);
            read += 1;
        }
        while released < dispatched {
            prop_assert!(cov.complete(released + 1), "commit {} never completes", released + 1);
            collect(&mut cov, &mine, &mut released);
        }
    }
}

#[test]
fn the_frontier_keeps_only_undominated_claims() {
    let mut cell = Vec::new();
    add_claim(&mut cell, 3, 5);
    add_claim(&mut cell, 2, 4);
    add_claim(&mut cell, 5, 2);
    add_claim(&mut cell, 1, 9);
    assert_eq!(cell, vec![(1, 9), (3, 5), (5, 2)]);
    add_claim(&mut cell, 4, 6);
    assert_eq!(cell, vec![(1, 9), (4, 6), (5, 2)]);
}
