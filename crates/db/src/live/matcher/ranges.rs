//! The range views of one path: elementary intervals between boundaries, each with the set of
//! views whose range covers it, so a probe is one ordered lookup.

use super::{ViewId, ViewSet};
use herald_value::FieldPath;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Elementary intervals of the range views on one path: boundary -> views covering
/// `[boundary, next boundary)`.
#[derive(Default)]
pub(super) struct Ranges {
    pub(super) parsed: Option<FieldPath>,
    bounds: BTreeMap<Vec<u8>, ViewSet>,
    pub(super) views: usize,
}

impl Ranges {
    /// Makes `at` a boundary, starting with the set of the stretch it falls in.
    fn split(&mut self, at: &[u8]) {
        if self.bounds.contains_key(at) {
            return;
        }
        let covering = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(at)))
            .next_back()
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        self.bounds.insert(at.to_vec(), covering);
    }

    pub(super) fn add(&mut self, key: ViewId, start: &[u8], end: &[u8]) {
        self.split(start);
        self.split(end);
        for (_, set) in self
            .bounds
            .range_mut::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
        {
            set.insert(key);
        }
        self.views += 1;
    }

    pub(super) fn remove(&mut self, key: ViewId, start: &[u8], end: &[u8]) {
        for (_, set) in self
            .bounds
            .range_mut::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
        {
            set.remove(&key);
        }
        self.views -= 1;
        // Drop boundaries that no longer separate different sets.
        let mut prev: Option<ViewSet> = None;
        let mut doomed = Vec::new();
        for (b, set) in &self.bounds {
            if prev.as_ref().map_or(set.is_empty(), |p| p == set) {
                doomed.push(b.clone());
            }
            prev = Some(set.clone());
        }
        for b in doomed {
            self.bounds.remove(&b);
        }
    }

    /// Views whose range meets `[lo, hi]`. A document with one value probes a point; one with
    /// several (an array) probes the span from its smallest to its largest value, since its
    /// elements may satisfy a view's lower and upper bound separately.
    pub(super) fn probe(&self, lo: &[u8], hi: &[u8], out: &mut ViewSet) {
        let first = self
            .bounds
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(lo)))
            .next_back()
            .map(|(b, _)| b.clone());
        let from = match &first {
            Some(b) => Bound::Included(b.as_slice()),
            None => Bound::Unbounded,
        };
        for (_, set) in self.bounds.range::<[u8], _>((from, Bound::Included(hi))) {
            out.extend(set.iter().copied());
        }
    }
}
