//! The literal list of one path: views whose `$regex` requires a literal (a string every match
//! contains), found for a written string by one Aho-Corasick pass instead of one regex per view.
//!
//! The required literals of a pattern come from a walk of its HIR ([`required_literals`]): a run
//! of literal characters in a concatenation, or one literal per branch of an alternation. Every
//! match contains at least one of a view's literals, so a string containing none of them cannot
//! match: the view is then not a candidate (the superset property of the predicate index).
//!
//! Case-insensitive (`i`) patterns go on a second automaton that compares ASCII letters without
//! case. A character is taken as a case-insensitive literal only when its case class is exactly
//! its two ASCII cases: `k` and `s` (whose classes hold the Kelvin sign and the long s) and
//! non-ASCII letters end the literal there, so ASCII folding never misses a match.
//!
//! Building an automaton over thousands of literals costs milliseconds, and subscriptions arrive
//! one by one while writes flow. So a set rebuilds only when the literals added since its last
//! build (pending, checked with `memmem` one by one) or removed since (tombstones, entries with
//! no views left, skipped by the probe) pass a fraction of the built set: each add pays an
//! amortised constant share of a rebuild, and the linear part of a probe stays a fraction.

use super::{ViewId, ViewSet};
use aho_corasick::AhoCorasick;
use herald_query::Pattern;
use herald_value::FieldPath;
use regex_syntax::hir::{Class, Hir, HirKind};
use std::collections::HashMap;

/// One required literal: its bytes (ASCII-lowercased when case-insensitive) and whether it
/// compares ASCII letters without case.
pub(super) type Lit = (Box<[u8]>, bool);

/// Alternatives beyond this many make a pattern stay on the scan list (a long alternation is
/// cheaper to run as its own regex than to spread over the automaton).
const ALTERNATIVES_MAX: usize = 64;

/// A set rebuilds when its pending entries plus tombstones exceed this many, or this fraction
/// (1 / `REBUILD_SHARE`) of the built entries, whichever is larger.
const REBUILD_MIN: usize = 32;
const REBUILD_SHARE: usize = 8;

/// Literals one of which every string matching `p` contains, or `None` when the pattern has
/// no usable required literal (it is then scanned).
pub(super) fn required_literals(p: &Pattern) -> Option<Vec<Lit>> {
    let o = &p.options;
    let hir = regex_syntax::ParserBuilder::new()
        .case_insensitive(o.contains('i'))
        .multi_line(o.contains('m'))
        .dot_matches_new_line(o.contains('s'))
        .ignore_whitespace(o.contains('x'))
        .build()
        .parse(&p.source)
        .ok()?;
    let mut lits = required(&hir)?;
    if lits.is_empty() || lits.len() > ALTERNATIVES_MAX || lits.iter().any(|(b, _)| b.is_empty()) {
        return None;
    }
    lits.sort();
    lits.dedup();
    Some(lits)
}

/// One character (or byte) that `h` matches exactly, as a literal piece.
fn piece(h: &Hir) -> Option<(Vec<u8>, bool)> {
    match h.kind() {
        HirKind::Literal(l) => Some((l.0.to_vec(), false)),
        HirKind::Class(Class::Unicode(c)) => match c.ranges() {
            [r] if r.start() == r.end() => {
                let mut buf = [0u8; 4];
                Some((r.start().encode_utf8(&mut buf).as_bytes().to_vec(), false))
            }
            // Exactly the two ASCII cases of one letter (ranges are sorted: upper first).
            [a, b]
                if a.start() == a.end()
                    && b.start() == b.end()
                    && a.start().is_ascii_uppercase()
                    && a.start().to_ascii_lowercase() == b.start() =>
            {
                Some((vec![b.start() as u8], true))
            }
            _ => None,
        },
        HirKind::Class(Class::Bytes(c)) => match c.ranges() {
            [r] if r.start() == r.end() => Some((vec![r.start()], false)),
            [a, b]
                if a.start() == a.end()
                    && b.start() == b.end()
                    && a.start().is_ascii_uppercase()
                    && a.start().to_ascii_lowercase() == b.start() =>
            {
                Some((vec![b.start()], true))
            }
            _ => None,
        },
        _ => None,
    }
}

/// How good a set of alternatives is as a filter: its shortest literal's length (longer
/// literals occur in fewer strings), then fewer alternatives.
fn score(lits: &[Lit]) -> (usize, std::cmp::Reverse<usize>) {
    let shortest = lits.iter().map(|(b, _)| b.len()).min().unwrap_or(0);
    (shortest, std::cmp::Reverse(lits.len()))
}

/// The best set of literals one of which every match of `h` contains.
fn required(h: &Hir) -> Option<Vec<Lit>> {
    match h.kind() {
        HirKind::Literal(_) | HirKind::Class(_) => {
            piece(h).map(|(b, ci)| vec![(b.into_boxed_slice(), ci)])
        }
        HirKind::Capture(c) => required(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required(&r.sub),
        HirKind::Alternation(alts) => {
            let mut out = Vec::new();
            for a in alts {
                out.extend(required(a)?);
                if out.len() > ALTERNATIVES_MAX {
                    return None;
                }
            }
            Some(out)
        }
        HirKind::Concat(parts) => {
            // Consecutive literal pieces form one literal; anything else (a class, an
            // assertion, a repetition) ends it and offers its own required set.
            let mut candidates: Vec<Vec<Lit>> = Vec::new();
            let mut run: Option<(Vec<u8>, bool)> = None;
            let flush = |run: &mut Option<(Vec<u8>, bool)>, c: &mut Vec<Vec<Lit>>| {
                if let Some((b, ci)) = run.take() {
                    c.push(vec![(b.into_boxed_slice(), ci)]);
                }
            };
            for p in parts {
                match piece(p) {
                    Some((b, ci)) => match &mut run {
                        Some((rb, rci)) => {
                            rb.extend_from_slice(&b);
                            *rci |= ci;
                        }
                        None => run = Some((b, ci)),
                    },
                    None => {
                        flush(&mut run, &mut candidates);
                        if let Some(set) = required(p) {
                            candidates.push(set);
                        }
                    }
                }
            }
            flush(&mut run, &mut candidates);
            let best = candidates.into_iter().max_by_key(|c| score(c))?;
            // A case-insensitive literal is compared lowercased; mixed runs fold entirely,
            // which only widens what they match.
            Some(
                best.into_iter()
                    .map(|(b, ci)| {
                        if ci {
                            (b.to_ascii_lowercase().into_boxed_slice(), true)
                        } else {
                            (b, false)
                        }
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// One literal and the views that require it (none: a tombstone awaiting the next build).
struct Entry {
    lit: Box<[u8]>,
    views: Vec<ViewId>,
}

/// The literals of one comparison mode (exact or ASCII-case-insensitive) on one path.
/// `entries[..built]` are the automaton's patterns (pattern id = index); `entries[built..]` are
/// pending, checked one by one until the next build.
#[derive(Default)]
pub(super) struct Set {
    ci: bool,
    entries: Vec<Entry>,
    index: HashMap<Box<[u8]>, usize>,
    automaton: Option<AhoCorasick>,
    built: usize,
    /// Built entries with no views.
    tombstones: usize,
    /// Rebuilds so far (for tests of the amortisation).
    builds: usize,
}

impl Set {
    fn new(ci: bool) -> Set {
        Set {
            ci,
            ..Set::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.index.len() == self.tombstones
    }

    fn pending(&self) -> usize {
        self.entries.len() - self.built
    }

    fn add(&mut self, lit: &[u8], key: ViewId) {
        match self.index.get(lit) {
            Some(&i) => {
                let e = &mut self.entries[i];
                if e.views.is_empty() && i < self.built {
                    self.tombstones -= 1;
                }
                e.views.push(key);
            }
            None => {
                self.index.insert(lit.into(), self.entries.len());
                self.entries.push(Entry {
                    lit: lit.into(),
                    views: vec![key],
                });
            }
        }
        self.maybe_rebuild();
    }

    fn remove(&mut self, lit: &[u8], key: ViewId) {
        let Some(&i) = self.index.get(lit) else {
            return;
        };
        let e = &mut self.entries[i];
        if let Some(p) = e.views.iter().position(|v| *v == key) {
            e.views.swap_remove(p);
        }
        if e.views.is_empty() {
            if i < self.built {
                self.tombstones += 1;
            } else {
                // A pending entry goes at once: the last entry (also pending) takes its place.
                self.index.remove(lit);
                self.entries.swap_remove(i);
                if let Some(moved) = self.entries.get(i) {
                    self.index.insert(moved.lit.clone(), i);
                }
            }
        }
        self.maybe_rebuild();
    }

    fn maybe_rebuild(&mut self) {
        let stale = self.pending() + self.tombstones;
        if stale > REBUILD_MIN.max(self.built / REBUILD_SHARE) {
            self.rebuild();
        }
    }

    /// Drops tombstones and builds one automaton over every literal.
    fn rebuild(&mut self) {
        self.entries.retain(|e| !e.views.is_empty());
        self.index = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.lit.clone(), i))
            .collect();
        self.built = self.entries.len();
        self.tombstones = 0;
        self.builds += 1;
        // A build only fails past the automaton's size limits; the literals are then all
        // checked one by one (slow, still a superset).
        self.automaton = (self.built > 0)
            .then(|| {
                AhoCorasick::builder()
                    .ascii_case_insensitive(self.ci)
                    .build(self.entries.iter().map(|e| &e.lit))
                    .ok()
            })
            .flatten();
    }

    /// Adds the views of every literal that `s` contains.
    fn probe(&self, s: &[u8], lower: &mut Vec<u8>, out: &mut ViewSet) {
        if let Some(ac) = &self.automaton {
            for m in ac.find_overlapping_iter(s) {
                out.extend(self.entries[m.pattern().as_usize()].views.iter().copied());
            }
        }
        let linear = match &self.automaton {
            Some(_) => &self.entries[self.built..],
            None => &self.entries[..],
        };
        if linear.is_empty() {
            return;
        }
        let hay = if self.ci {
            lower.clear();
            lower.extend(s.iter().map(u8::to_ascii_lowercase));
            lower.as_slice()
        } else {
            s
        };
        for e in linear {
            if memchr::memmem::find(hay, &e.lit).is_some() {
                out.extend(e.views.iter().copied());
            }
        }
    }
}

/// The literal views of one path: an exact set and a case-insensitive one.
pub(super) struct Literals {
    pub(super) parsed: FieldPath,
    exact: Set,
    folded: Set,
}

impl Literals {
    pub(super) fn new(parsed: FieldPath) -> Literals {
        Literals {
            parsed,
            exact: Set::new(false),
            folded: Set::new(true),
        }
    }

    fn set(&mut self, ci: bool) -> &mut Set {
        if ci {
            &mut self.folded
        } else {
            &mut self.exact
        }
    }

    pub(super) fn add(&mut self, key: ViewId, lits: &[Lit]) {
        for (b, ci) in lits {
            self.set(*ci).add(b, key);
        }
    }

    pub(super) fn remove(&mut self, key: ViewId, lits: &[Lit]) {
        for (b, ci) in lits {
            self.set(*ci).remove(b, key);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.folded.is_empty()
    }

    #[cfg(test)]
    pub(super) fn rebuild(&mut self) {
        self.exact.rebuild();
        self.folded.rebuild();
    }

    /// Adds the views with a literal contained in one of `strings`.
    pub(super) fn probe(&self, strings: &[&[u8]], out: &mut ViewSet) {
        let mut lower = Vec::new();
        for s in strings {
            self.exact.probe(s, &mut lower, out);
            self.folded.probe(s, &mut lower, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(source: &str, options: &str) -> Option<Vec<(String, bool)>> {
        let p = Pattern::compile("p", source, options).unwrap();
        required_literals(&p).map(|v| {
            v.into_iter()
                .map(|(b, ci)| (String::from_utf8(b.into_vec()).unwrap(), ci))
                .collect()
        })
    }

    fn one(s: &str, ci: bool) -> Option<Vec<(String, bool)>> {
        Some(vec![(s.to_string(), ci)])
    }

    #[test]
    fn required_literals_of_patterns() {
        assert_eq!(lits("k0042", ""), one("k0042", false));
        assert_eq!(lits(":0001234$", ""), one(":0001234", false));
        assert_eq!(lits("ab.*cde", ""), one("cde", false));
        assert_eq!(lits("abc.*de", ""), one("abc", false));
        assert_eq!(
            lits("red|blue", ""),
            Some(vec![("blue".into(), false), ("red".into(), false)])
        );
        assert_eq!(lits("x(?:yz)+", ""), one("yz", false));
        assert_eq!(lits("a\\.b", ""), one("a.b", false));
        assert_eq!(lits("a b  c", "x"), one("abc", false));
        assert_eq!(lits("^ab$", "m"), one("ab", false));
        // Case-insensitive: folded, but `k` (Kelvin sign) and `s` (long s) end the literal.
        assert_eq!(lits("Abc", "i"), one("abc", true));
        assert_eq!(lits("abkde", "i"), one("de", true));
        assert_eq!(lits("abcks", "i"), one("abc", true));
        assert_eq!(lits("k", "i"), None);
        assert_eq!(lits("a(?-i)B", "i"), one("ab", true));
        // No required literal: scanned.
        assert_eq!(lits(".*", ""), None);
        assert_eq!(lits("a?", ""), None);
        assert_eq!(lits("a|.", ""), None);
        assert_eq!(lits("", ""), None);
        assert_eq!(lits("[ab]", ""), None);
    }

    #[test]
    fn adds_and_removes_rebuild_amortised() {
        let mut s = Set::new(false);
        let n = 10_000u32;
        for k in 0..n {
            s.add(format!(":{k:07}").as_bytes(), k);
            assert!(s.pending() + s.tombstones <= REBUILD_MIN.max(s.built / REBUILD_SHARE));
        }
        // Geometric growth: a rebuild per 1/8 of growth, not one per add.
        assert!(s.builds < 80, "{} builds", s.builds);
        let mut out = ViewSet::default();
        let mut lower = Vec::new();
        s.probe(b"word:0004242", &mut lower, &mut out);
        assert_eq!(out, ViewSet::from_iter([4242]));
        // A literal added after the build is found on the pending list.
        s.add(b"zz", n);
        assert!(s.pending() > 0);
        out.clear();
        s.probe(b"zz:0000007", &mut lower, &mut out);
        assert_eq!(out, ViewSet::from_iter([7, n]));
        // Removed views are not reported, before and after the rebuild that drops them.
        let before = s.builds;
        for k in 0..n / 2 {
            s.remove(format!(":{k:07}").as_bytes(), k);
            out.clear();
            s.probe(format!("w:{k:07}").as_bytes(), &mut lower, &mut out);
            assert!(out.is_empty(), "{k}: {out:?}");
        }
        assert!(s.builds > before && s.builds - before < 20);
        out.clear();
        s.probe(b"w:0009999", &mut lower, &mut out);
        assert_eq!(out, ViewSet::from_iter([9999]));
        for k in n / 2..n {
            s.remove(format!(":{k:07}").as_bytes(), k);
        }
        s.remove(b"zz", n);
        assert!(s.is_empty());
    }

    #[test]
    fn a_shared_literal_keeps_its_other_views() {
        let mut s = Set::new(true);
        s.add(b"ab", 1);
        s.add(b"ab", 2);
        s.rebuild();
        s.remove(b"ab", 1);
        let mut out = ViewSet::default();
        s.probe(b"xAB", &mut Vec::new(), &mut out);
        assert_eq!(out, ViewSet::from_iter([2]));
        s.remove(b"ab", 2);
        assert!(s.is_empty());
        // Re-adding a tombstoned literal revives it.
        s.add(b"ab", 3);
        assert!(!s.is_empty());
        out.clear();
        s.probe(b"aB", &mut Vec::new(), &mut out);
        assert_eq!(out, ViewSet::from_iter([3]));
    }
}
