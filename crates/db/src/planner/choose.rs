//! Picking a plan by an estimate of what it examines (index entries plus documents).
//!
//! The statistics are read from the snapshot the query runs on, when planning, by counting
//! index entries in each candidate's ranges, never more than the best plan so far would examine
//! (branch and bound), and at most [`PROBE_KEYS_MAX`]: so a count is exact when small and a
//! lower bound ("at least") when cut off. Nothing is maintained on the write path: the
//! statistics cost the write path nothing and are never stale. Estimates:
//!
//! - point reads of `n` ids: `n` documents;
//! - index ranges (fetch, filter, sort): `n` entries and `n` documents, `n` counted;
//! - an ordered scan whose entries all match (the filter is exactly its equalities): skip +
//!   limit entries and documents; without a limit, the entries counted;
//! - a collection scan: the documents counted, at most [`SCAN_PROBE_DOCS`]; a larger
//!   collection is not scanned when another plan exists, and when the only other plan is not a
//!   trial nothing is counted at all (there is nothing to compare);
//! - an ordered scan with other predicates, and an intersection, depend on how many entries
//!   match, which counting cannot tell: they get a lower bound, and when it beats the best
//!   estimate they are *tried* first with the best estimate as budget, abandoned past it (the
//!   best plan then runs): a wrong guess costs at most twice the best estimate.

use super::ranges::only_conjuncts;
use super::Plan;
use crate::error::DbError;
use crate::layout::collection_prefix;
use herald_query::{Direction, Query};
use herald_storage::{ReadTxn, Table};

/// Most index entries (or documents) counted for one estimate when no plan bounds it yet.
pub const PROBE_KEYS_MAX: u64 = 10_000;
/// Most documents counted for a collection scan's estimate: a larger collection is not scanned
/// when an index plan exists (counting it would cost what the index plan saves).
const SCAN_PROBE_DOCS: u64 = 64;

/// Estimated index entries and documents a plan examines; `at_least` when a count was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub keys: u64,
    pub docs: u64,
    pub at_least: bool,
}

impl Estimate {
    pub fn cost(&self) -> u64 {
        self.keys.saturating_add(self.docs)
    }
}

/// The plan to run, and what was considered.
#[derive(Debug)]
pub struct Chosen {
    pub plan: Plan,
    pub estimate: Estimate,
    /// A plan to try first, abandoned once it has examined `budget` entries and documents
    /// (`None`: never), with its lower-bound estimate.
    pub trial: Option<(Plan, Estimate, Option<u64>)>,
    /// The other plans, with their estimates.
    pub others: Vec<(Plan, Estimate)>,
    /// Index entries and documents counted while estimating.
    pub sampled: usize,
}

enum Guess {
    Certain(Estimate),
    /// A lower bound: the plan's cost depends on how many of its entries match.
    Trial(Estimate),
    /// A collection scan of a collection larger than [`SCAN_PROBE_DOCS`]: not counted further,
    /// chosen only when no other plan is certain.
    Large(Estimate),
}

struct Counter<'r> {
    read: &'r ReadTxn,
    sampled: usize,
}

impl Counter<'_> {
    /// Index entries in the ranges, counted up to `cap`.
    fn keys<'a>(
        &mut self,
        ranges: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        cap: u64,
    ) -> Result<(u64, bool), DbError> {
        let mut n = 0u64;
        for (start, end) in ranges {
            for entry in self.read.range(Table::Index, start..end)? {
                entry?;
                if n >= cap {
                    return Ok((n, true));
                }
                n += 1;
                self.sampled += 1;
            }
        }
        Ok((n, false))
    }

    fn docs(&mut self, collection: &str, cap: u64) -> Result<(u64, bool), DbError> {
        let mut n = 0u64;
        for entry in self
            .read
            .prefix(Table::Docs, &collection_prefix(collection))?
        {
            entry?;
            if n >= cap {
                return Ok((n, true));
            }
            n += 1;
            self.sampled += 1;
        }
        Ok((n, false))
    }
}

/// Estimates every candidate (from `planner::candidates`) on the snapshot the query will
/// read and picks the cheapest; see the module comment.
pub fn choose(
    read: &ReadTxn,
    collection: &str,
    query: &Query,
    mut plans: Vec<Plan>,
) -> Result<Chosen, DbError> {
    if plans.len() == 1 {
        // Nothing to compare (the collection scan alone): no counting.
        return Ok(Chosen {
            plan: plans.pop().expect("one plan"),
            estimate: Estimate {
                at_least: true,
                ..Estimate::default()
            },
            trial: None,
            others: vec![],
            sampled: 0,
        });
    }
    // Plans estimated without counting first, then the collection scan (at most
    // `SCAN_PROBE_DOCS` documents, fewer when a plan is already cheaper), then the plans whose
    // ranges are counted, each only as far as it could still win.
    plans.sort_by_key(|p| order(p, query));
    let mut counter = Counter { read, sampled: 0 };
    let scan_i = plans
        .iter()
        .position(|p| matches!(p, Plan::Scan))
        .expect("the collection scan is always a plan");
    let triable = plans.iter().filter(|p| is_trial(p, query)).count();
    let lone = plans.len() == 2 && triable == 0;
    let mut best: Option<(usize, Estimate)> = None;
    let mut scan_large = false;
    let mut guesses = Vec::with_capacity(plans.len());
    for (i, p) in plans.iter().enumerate() {
        let bound = best.map(|(_, e): (usize, Estimate)| e.cost());
        let g = if i == scan_i {
            let g = guess_scan(&mut counter, collection, query, bound)?;
            scan_large = matches!(g, Guess::Large(_));
            g
        } else if lone && scan_large {
            // A large collection and one other plan, not a trial: nothing to compare.
            Guess::Certain(Estimate {
                at_least: true,
                ..Estimate::default()
            })
        } else {
            guess(&mut counter, collection, query, p, bound)?
        };
        if let Guess::Certain(e) = &g {
            // Ties go to an index plan over the scan.
            let better = best
                .is_none_or(|(j, b)| e.cost() < b.cost() || (j == scan_i && e.cost() == b.cost()));
            if better {
                best = Some((i, *e));
            }
        }
        guesses.push(g);
    }
    if best.is_none() {
        if let Guess::Large(e) = &guesses[scan_i] {
            best = Some((scan_i, *e));
        }
    }
    let (best_i, best_e) = best.expect("the collection scan is always a plan");
    let budget = (!best_e.at_least).then_some(best_e.cost());
    let trial = guesses
        .iter()
        .enumerate()
        .filter_map(|(i, g)| match g {
            Guess::Trial(e) if e.cost() < best_e.cost() => Some((i, *e)),
            _ => None,
        })
        .min_by_key(|(_, e)| e.cost());
    let mut chosen = None;
    let mut tried = None;
    let mut others = Vec::new();
    for (i, (p, g)) in plans.into_iter().zip(guesses).enumerate() {
        let e = match g {
            Guess::Certain(e) | Guess::Trial(e) | Guess::Large(e) => e,
        };
        if i == best_i {
            chosen = Some(p);
        } else if trial.is_some_and(|(t, _)| t == i) {
            tried = Some((p, e, budget));
        } else {
            others.push((p, e));
        }
    }
    Ok(Chosen {
        plan: chosen.expect("best is a candidate"),
        estimate: best_e,
        trial: tried,
        others,
        sampled: counter.sampled,
    })
}

fn order(p: &Plan, query: &Query) -> u8 {
    match p {
        Plan::Ids(_) => 0,
        Plan::Ordered(o) if o.exact && query.limit.is_some() => 1,
        Plan::Scan => 2,
        Plan::Ordered(o) if o.exact => 3,
        Plan::Index { .. } => 3,
        Plan::Union(_) => 4,
        Plan::Ordered(_) | Plan::Intersect { .. } => 5,
    }
}

/// The estimate of one plan, counting up to `bound` (the best estimate so far) when given.
fn guess(
    c: &mut Counter<'_>,
    collection: &str,
    query: &Query,
    p: &Plan,
    bound: Option<u64>,
) -> Result<Guess, DbError> {
    let cap = bound.unwrap_or(PROBE_KEYS_MAX);
    let window = query.limit.map(|l| query.skip.saturating_add(l) as u64);
    Ok(match p {
        Plan::Ids(ids) => Guess::Certain(Estimate {
            keys: 0,
            docs: ids.len() as u64,
            at_least: false,
        }),
        Plan::Index { ranges, .. } => {
            // Each entry costs a key and a document: past half the bound it cannot win.
            let cap = bound.map_or(PROBE_KEYS_MAX, |b| b / 2 + 1);
            let (n, cut) = c.keys(ranges.iter().map(|(s, e)| (&s[..], &e[..])), cap)?;
            Guess::Certain(Estimate {
                keys: n,
                docs: n,
                at_least: cut,
            })
        }
        Plan::Union(parts) => {
            let mut sum = Estimate::default();
            for part in parts {
                let rest = cap.saturating_sub(sum.cost());
                match guess(c, collection, query, part, Some(rest))? {
                    Guess::Certain(e) | Guess::Trial(e) | Guess::Large(e) => {
                        sum.keys += e.keys;
                        sum.docs += e.docs;
                        sum.at_least |= e.at_least;
                    }
                }
            }
            Guess::Certain(sum)
        }
        Plan::Intersect { prefixes, .. } => {
            let mut least: Option<(u64, bool)> = None;
            for prefix in prefixes {
                let end = crate::layout::prefix_end(prefix);
                let n = c.keys([(&prefix[..], &end[..])], cap)?;
                if least.is_none_or(|l| n.0 < l.0) {
                    least = Some(n);
                }
            }
            let (n, _) = least.unwrap_or_default();
            Guess::Trial(Estimate {
                keys: n,
                docs: 0,
                at_least: true,
            })
        }
        Plan::Ordered(o) => {
            // The null group of an ascending scan is a collection scan read first.
            let nulls = if o.nulls_by_scan && !o.backward {
                c.docs(collection, cap)?
            } else {
                (0, false)
            };
            match window {
                Some(w) if o.exact => Guess::Certain(Estimate {
                    keys: w,
                    docs: w + nulls.0,
                    at_least: nulls.1,
                }),
                Some(w) => Guess::Trial(Estimate {
                    keys: w,
                    docs: w + nulls.0,
                    at_least: true,
                }),
                None => {
                    let streams = o.streams.iter().map(|s| (&s.start[..], &s.end[..]));
                    let (n, cut) = c.keys(streams, cap)?;
                    Guess::Certain(Estimate {
                        keys: n,
                        docs: n + nulls.0,
                        at_least: cut || nulls.1,
                    })
                }
            }
        }
        Plan::Scan => unreachable!("guess_scan"),
    })
}

/// The collection scan: certain when the collection has under [`SCAN_PROBE_DOCS`] documents,
/// or when it stops after the window (id order, no filter).
fn guess_scan(
    c: &mut Counter<'_>,
    collection: &str,
    query: &Query,
    bound: Option<u64>,
) -> Result<Guess, DbError> {
    let window = query.limit.map(|l| query.skip.saturating_add(l) as u64);
    let by_id_all =
        only_conjuncts(query.filter.expr()).is_some_and(|c| c.is_empty()) && is_id_order(query);
    if let (true, Some(w)) = (by_id_all, window) {
        let (n, _) = c.docs(collection, w)?;
        return Ok(Guess::Certain(Estimate {
            keys: 0,
            docs: n,
            at_least: false,
        }));
    }
    let cap = bound.map_or(SCAN_PROBE_DOCS, |b| b.min(SCAN_PROBE_DOCS));
    let (n, cut) = c.docs(collection, cap)?;
    let e = Estimate {
        keys: 0,
        docs: n,
        at_least: cut,
    };
    Ok(if cut {
        Guess::Large(e)
    } else {
        Guess::Certain(e)
    })
}

/// Whether the plan's estimate is only a lower bound (see the module comment).
fn is_trial(p: &Plan, query: &Query) -> bool {
    match p {
        Plan::Intersect { .. } => true,
        Plan::Ordered(o) => !o.exact && query.limit.is_some(),
        _ => false,
    }
}

fn is_id_order(q: &Query) -> bool {
    let keys = q.sort.keys();
    keys.len() == 1 && keys[0].path.as_str() == "_id" && keys[0].dir == Direction::Asc
}
