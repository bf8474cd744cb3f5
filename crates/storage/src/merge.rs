//! [`Merged`]: one key range read across several levels at once (redb's entries and the index
//! runs, under any number of in-memory change maps, oldest first), lazily and from either end. It is what both
//! [`ReadRange`](crate::ReadRange) and [`WriteRange`](crate::WriteRange) iterate.
//!
//! Each step buffers the next key of every level at the end being read and yields the smallest
//! (front) or largest (back); on equal keys the newest level wins and the older entries are
//! skipped. A `None` value in a map or a run is a delete: it hides older entries and yields nothing.
//! A map is only searched once the scan reaches its smallest key (front) or largest key
//! (back), so a scan that stops early (the first log record, say) does not pay for every layer.
//! A step costs one comparison per level that is still in play.

use std::collections::btree_map;
use std::ops::Bound;

use crate::logblocks::LogRange;
use crate::runs::RunRange;
use crate::tables::{self, Entry, KeyBounds, TableMap};
use crate::StorageError;

type MapRange<'a> = btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>;
type RawRange<'a> = redb::Range<'a, &'static [u8], &'static [u8]>;
type OwnedBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A merged, double-ended view of one key range. After the first error it yields nothing more:
/// a scan that silently omits data is worse than one that stops.
pub(crate) struct Merged<'a> {
    bounds: OwnedBounds,
    // The stored levels (redb's B-tree, then index runs), oldest first; exhausted ones are
    // dropped as they run dry.
    bases: Vec<Ends<Source<'a>>>,
    // Newer than every base, oldest first; exhausted maps are dropped as they run dry.
    maps: Vec<Level<'a>>,
    failed: bool,
}

/// One change map in a merge: not yet searched, or being read.
enum Level<'a> {
    Unopened(&'a TableMap),
    Open(Ends<MapRange<'a>>),
}

/// One stored level: redb's entries, one index run's (which may hold deletes), or the commit
/// log's blocks.
pub(crate) enum Source<'a> {
    Redb(BaseRange<'a>),
    Run(RunRange<'a>),
    Log(LogRange<'a>),
}

type SourceItem = Result<(Vec<u8>, Option<Vec<u8>>), StorageError>;

impl Iterator for Source<'_> {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        match self {
            Source::Redb(range) => range.next().map(|item| item.map(|(k, v)| (k, Some(v)))),
            Source::Run(range) => range.next(),
            Source::Log(range) => range.next(),
        }
    }
}

impl DoubleEndedIterator for Source<'_> {
    fn next_back(&mut self) -> Option<SourceItem> {
        match self {
            Source::Redb(range) => range
                .next_back()
                .map(|item| item.map(|(k, v)| (k, Some(v)))),
            Source::Run(range) => range.next_back(),
            Source::Log(range) => range.next_back(),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Side {
    Front,
    Back,
}

impl Side {
    /// Whether `key` comes no later than `than` when reading from this side.
    fn no_later(self, key: &[u8], than: &[u8]) -> bool {
        match self {
            Side::Front => key <= than,
            Side::Back => key >= than,
        }
    }
}

/// The next key to yield, as far as the levels looked at so far say.
#[derive(Clone, Copy)]
enum Frontier<'a> {
    None,
    Base(usize),
    Key(&'a [u8]),
}

enum Winner {
    Base(usize),
    Map(usize),
}

impl<'a> Merged<'a> {
    /// Merges `bases` (stored levels already limited to `bounds`, oldest first) with `maps`
    /// (oldest first, all newer than the bases).
    pub(crate) fn new(
        bases: Vec<Source<'a>>,
        maps: impl Iterator<Item = &'a TableMap>,
        bounds: KeyBounds<'_>,
    ) -> Self {
        let maps = maps
            .filter(|map| may_overlap(map, &bounds))
            .map(Level::Unopened)
            .collect();
        Merged {
            bounds: (bounds.0.map(<[u8]>::to_vec), bounds.1.map(<[u8]>::to_vec)),
            bases: bases.into_iter().map(Ends::new).collect(),
            maps,
            failed: false,
        }
    }

    pub(crate) fn empty() -> Self {
        Merged {
            bounds: (Bound::Unbounded, Bound::Unbounded),
            bases: Vec::new(),
            maps: Vec::new(),
            failed: false,
        }
    }

    fn base_key(&self, i: usize, side: Side) -> Option<&[u8]> {
        match self.bases[i].peeked(side)? {
            Ok((key, _)) => Some(key),
            Err(_) => None,
        }
    }

    fn frontier_key(&self, frontier: Frontier<'a>, side: Side) -> Option<&[u8]> {
        match frontier {
            Frontier::None => None,
            Frontier::Base(i) => self.base_key(i, side),
            Frontier::Key(key) => Some(key),
        }
    }

    pub(crate) fn step(&mut self, side: Side) -> Option<Result<Entry, StorageError>> {
        loop {
            if self.failed {
                return None;
            }
            // Buffer the next item of every open level at this end; forget exhausted levels
            // (a level with nothing at one end has nothing left at all).
            let mut i = 0;
            while i < self.bases.len() {
                match self.bases[i].peek(side) {
                    None => {
                        self.bases.remove(i);
                    }
                    Some(Err(_)) => {
                        self.failed = true;
                        return match self.bases[i].take(side)? {
                            Err(err) => Some(Err(err)),
                            Ok(_) => unreachable!("peeked an error"),
                        };
                    }
                    Some(Ok(_)) => i += 1,
                }
            }
            self.maps.retain_mut(|level| match level {
                Level::Unopened(_) => true,
                Level::Open(ends) => ends.peek(side).is_some(),
            });

            // The frontier among the open levels...
            let mut frontier = Frontier::None;
            for i in 0..self.bases.len() {
                let key = self.base_key(i, side).expect("open bases have an item");
                let closer = match self.frontier_key(frontier, side) {
                    None => true,
                    Some(best) => side.no_later(key, best),
                };
                if closer {
                    frontier = Frontier::Base(i);
                }
            }
            for level in &self.maps {
                if let Level::Open(ends) = level {
                    let (key, _) = ends.peeked(side).expect("open levels have an item");
                    let key: &'a [u8] = key.as_slice();
                    let closer = match self.frontier_key(frontier, side) {
                        None => true,
                        Some(best) => side.no_later(key, best),
                    };
                    if closer {
                        frontier = Frontier::Key(key);
                    }
                }
            }
            // ...then open every unopened map whose extreme key could reach it.
            let mut i = 0;
            while i < self.maps.len() {
                let Level::Unopened(map) = self.maps[i] else {
                    i += 1;
                    continue;
                };
                let extreme = match side {
                    Side::Front => map.first_key_value(),
                    Side::Back => map.last_key_value(),
                };
                let Some((extreme, _)) = extreme else {
                    self.maps.remove(i);
                    continue;
                };
                let reachable = match self.frontier_key(frontier, side) {
                    None => true,
                    Some(best) => side.no_later(extreme, best),
                };
                if !reachable {
                    i += 1;
                    continue;
                }
                let mut ends = Ends::new(map.range::<[u8], _>(tables::borrow_bounds(&self.bounds)));
                let Some(&(key, _)) = ends.peek(side) else {
                    self.maps.remove(i);
                    continue;
                };
                let key: &'a [u8] = key.as_slice();
                let closer = match self.frontier_key(frontier, side) {
                    None => true,
                    Some(best) => side.no_later(key, best),
                };
                if closer {
                    frontier = Frontier::Key(key);
                }
                self.maps[i] = Level::Open(ends);
                i += 1;
            }

            // The winner: the open level whose key is the frontier, the newest on a tie (the
            // unopened ones all lie beyond it; maps are newer than bases).
            let winner = {
                let mut best: Option<(Winner, &[u8])> = None;
                for i in 0..self.bases.len() {
                    let key = self.base_key(i, side).expect("open bases have an item");
                    // `no_later` is inclusive: on a tie the later (newer) level takes over.
                    if best.as_ref().is_none_or(|(_, b)| side.no_later(key, b)) {
                        best = Some((Winner::Base(i), key));
                    }
                }
                for (i, level) in self.maps.iter().enumerate() {
                    let Level::Open(ends) = level else { continue };
                    let (key, _) = ends.peeked(side).expect("open levels have an item");
                    let key = key.as_slice();
                    if best.as_ref().is_none_or(|(_, b)| side.no_later(key, b)) {
                        best = Some((Winner::Map(i), key));
                    }
                }
                match best {
                    None => return None,
                    Some((winner, _)) => winner,
                }
            };

            let (key, value): (Vec<u8>, Option<Vec<u8>>) = match winner {
                Winner::Base(i) => match self.bases[i].take(side)? {
                    Ok(entry) => entry,
                    Err(err) => {
                        self.failed = true;
                        return Some(Err(err));
                    }
                },
                Winner::Map(i) => {
                    let Level::Open(ends) = &mut self.maps[i] else {
                        unreachable!("the winner is open")
                    };
                    let (key, value) = ends.take(side).expect("peeked");
                    let key = key.clone();
                    // Older maps' entries for the same key are hidden by this one.
                    for level in &mut self.maps {
                        if let Level::Open(ends) = level {
                            if ends.peeked(side).is_some_and(|(k, _)| **k == key) {
                                ends.take(side);
                            }
                        }
                    }
                    (key, value.clone())
                }
            };
            // Older stored levels' entries for the same key are hidden too.
            for base in &mut self.bases {
                if base
                    .peeked(side)
                    .is_some_and(|item| matches!(item, Ok((k, _)) if *k == key))
                {
                    base.take(side);
                }
            }
            if let Some(value) = value {
                return Some(Ok((key, value)));
            }
            // A delete: it yields nothing; go on to the next key.
        }
    }
}

/// Whether `map` can hold a key within `bounds` (judged by its first and last keys).
fn may_overlap(map: &TableMap, bounds: &KeyBounds<'_>) -> bool {
    let (Some((first, _)), Some((last, _))) = (map.first_key_value(), map.last_key_value()) else {
        return false;
    };
    let after_start = match bounds.0 {
        Bound::Included(start) => last.as_slice() >= start,
        Bound::Excluded(start) => last.as_slice() > start,
        Bound::Unbounded => true,
    };
    let before_end = match bounds.1 {
        Bound::Included(end) => first.as_slice() <= end,
        Bound::Excluded(end) => first.as_slice() < end,
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// redb's entries as owned pairs; stops after the first error.
pub(crate) struct BaseRange<'a> {
    // `None` once exhausted or after an error.
    inner: Option<RawRange<'a>>,
}

type RawItem<'a> = Result<
    (
        redb::AccessGuard<'a, &'static [u8]>,
        redb::AccessGuard<'a, &'static [u8]>,
    ),
    redb::StorageError,
>;

impl<'a> BaseRange<'a> {
    pub(crate) fn new(inner: RawRange<'a>) -> Self {
        BaseRange { inner: Some(inner) }
    }

    fn step(&mut self, item: Option<RawItem<'a>>) -> Option<Result<Entry, StorageError>> {
        match item {
            Some(Ok((key, value))) => Some(Ok((key.value().to_vec(), value.value().to_vec()))),
            Some(Err(err)) => {
                self.inner = None;
                Some(Err(err.into()))
            }
            None => {
                self.inner = None;
                None
            }
        }
    }
}

impl Iterator for BaseRange<'_> {
    type Item = Result<Entry, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next();
        self.step(item)
    }
}

impl DoubleEndedIterator for BaseRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = self.inner.as_mut()?.next_back();
        self.step(item)
    }
}

/// A double-ended iterator that can peek at either end. An item is buffered at one end at a
/// time; when the middle runs dry, the other end's buffered item is the last one left.
struct Ends<I: DoubleEndedIterator> {
    iter: I,
    front: Option<I::Item>,
    back: Option<I::Item>,
}

impl<I: DoubleEndedIterator> Ends<I> {
    fn new(iter: I) -> Self {
        Ends {
            iter,
            front: None,
            back: None,
        }
    }

    fn peek(&mut self, side: Side) -> Option<&I::Item> {
        match side {
            Side::Front => {
                if self.front.is_none() {
                    self.front = self.iter.next().or_else(|| self.back.take());
                }
                self.front.as_ref()
            }
            Side::Back => {
                if self.back.is_none() {
                    self.back = self.iter.next_back().or_else(|| self.front.take());
                }
                self.back.as_ref()
            }
        }
    }

    /// What [`peek`](Ends::peek) buffered at `side`, without reading further.
    fn peeked(&self, side: Side) -> Option<&I::Item> {
        match side {
            Side::Front => self.front.as_ref(),
            Side::Back => self.back.as_ref(),
        }
    }

    fn take(&mut self, side: Side) -> Option<I::Item> {
        self.peek(side);
        match side {
            Side::Front => self.front.take(),
            Side::Back => self.back.take(),
        }
    }
}
