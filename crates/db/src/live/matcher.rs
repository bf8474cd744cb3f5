//! The predicate index of live queries: which views a written document may affect.
//!
//! Each view is indexed by one conjunct of its filter: an equality (`{"room": "r1"}`,
//! `{"tag": {"$in": ["a", "b"]}}`) in a hash map from (path, value) to views, or else a range
//! (`{"random": {"$gte": 10, "$lt": 20}}`) in an ordered map of elementary intervals per path;
//! views with neither, whose filter requires an anchored literal prefix
//! (`{"name": {"$regex": "^ada"}}`), on a per-path prefix list, and the rest on a scan list. A
//! change is probed with both its before-image (to find
//! views it leaves) and its after-image (views it enters), so the candidates are a superset of
//! the views whose filter matches either image (property-tested).
//!
//! Range views on one path share a map from each interval boundary (an encoded value) to the set
//! of views whose range covers the stretch from that boundary to the next; a probe is one
//! ordered lookup. Only one operator's range is used per view: with arrays, different elements
//! may satisfy different operators, so intersecting them could miss a match.
//!
//! A prefix list is still a linear scan (every such view is tested against every write, as
//! regex queries must be), but of a compact array of byte strings per path: the path is
//! resolved once per image and each view costs one `starts_with`, instead of a walk through the
//! view's own filter (several cache misses per view on long scan lists).

use herald_query::{walk, CmpOp, Expr, FieldOp, Filter, LeafArrays, Test};
use herald_value::{encode_key, FieldPath, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

/// A view's handle in the engine: small and `Copy`, so probes and the scan list never allocate.
pub type ViewId = u32;

/// One view's entry: indexed under (path, values), or scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Eq {
        path: String,
        values: Vec<Vec<u8>>,
    },
    Range {
        path: String,
        start: Vec<u8>,
        end: Vec<u8>,
    },
    Prefix {
        path: String,
    },
    Scan,
}

/// Elementary intervals of the range views on one path: boundary -> views covering
/// `[boundary, next boundary)`.
#[derive(Default)]
struct Ranges {
    parsed: Option<FieldPath>,
    bounds: BTreeMap<Vec<u8>, HashSet<ViewId>>,
    views: usize,
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

    fn add(&mut self, key: ViewId, start: &[u8], end: &[u8]) {
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

    fn remove(&mut self, key: ViewId, start: &[u8], end: &[u8]) {
        for (_, set) in self
            .bounds
            .range_mut::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
        {
            set.remove(&key);
        }
        self.views -= 1;
        // Drop boundaries that no longer separate different sets.
        let mut prev: Option<HashSet<ViewId>> = None;
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
    fn probe(&self, lo: &[u8], hi: &[u8], out: &mut HashSet<ViewId>) {
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

/// The prefix views on one path: each view's required prefix, in one contiguous array.
struct Prefixes {
    parsed: FieldPath,
    entries: Vec<(Box<[u8]>, ViewId)>,
}

#[derive(Default)]
pub struct Matcher {
    eq: HashMap<(String, Vec<u8>), HashSet<ViewId>>,
    /// Indexed paths with how many views use them.
    paths: HashMap<String, (FieldPath, usize)>,
    ranges: HashMap<String, Ranges>,
    prefixes: HashMap<String, Prefixes>,
    /// Views no index covers, in a vector: every change of the collection is offered to each,
    /// so iterating them must be cheap.
    scan: Vec<ViewId>,
    slots: HashMap<ViewId, Slot>,
}

fn indexable(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Array(_) | Value::Object(_))
}

/// The byte range `[start, end)` of encoded values that satisfy `op v`: within `v`'s type
/// bracket, as range operators are.
fn cmp_range(op: CmpOp, v: &Value) -> (Vec<u8>, Vec<u8>) {
    let with_v = herald_value::key_of(v);
    let after_v = prefix_end(&with_v);
    let tag = with_v[0];
    match op {
        CmpOp::Gt => (after_v, vec![tag + 1]),
        CmpOp::Gte => (with_v, vec![tag + 1]),
        CmpOp::Lt => (vec![tag], with_v),
        CmpOp::Lte => (vec![tag], after_v),
    }
}

fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF; p.len() + 1]
}

/// The first top-level range conjunct of a filter: its path and the intersection of its range
/// operators' byte ranges. `None` when the intersection is empty (operators on different
/// brackets, which only arrays can satisfy together): such views are scanned.
fn range_conjunct(e: &Expr) -> Option<(String, Vec<u8>, Vec<u8>)> {
    match e {
        Expr::And(xs) => xs.iter().find_map(range_conjunct),
        Expr::Field(f) => {
            let mut range: Option<(Vec<u8>, Vec<u8>)> = None;
            for op in &f.ops {
                if let FieldOp::Test(Test::Cmp(op, v)) = op {
                    if indexable(v) {
                        let (s, e) = cmp_range(*op, v);
                        range = Some(match range {
                            None => (s, e),
                            Some((s0, e0)) => (s0.max(s), e0.min(e)),
                        });
                    }
                }
            }
            let (start, end) = range?;
            (start < end).then(|| (f.path.as_str().to_string(), start, end))
        }
        _ => None,
    }
}

/// The first top-level conjunct of a filter that requires a string with an anchored literal
/// prefix (`$regex: "^lit..."`, without `i`, `m` or `x` changing what the literal means): its
/// path and the prefix.
fn prefix_conjunct(e: &Expr) -> Option<(String, Vec<u8>)> {
    match e {
        Expr::And(xs) => xs.iter().find_map(prefix_conjunct),
        Expr::Field(f) => f.ops.iter().find_map(|op| match op {
            FieldOp::Test(Test::Regex(p)) => p
                .literal_prefix()
                .map(|prefix| (f.path.as_str().to_string(), prefix.to_vec())),
            _ => None,
        }),
        _ => None,
    }
}

/// The first top-level equality conjunct of a filter: its path and encoded values.
fn equality_conjunct(e: &Expr) -> Option<(String, Vec<Vec<u8>>)> {
    match e {
        Expr::And(xs) => xs.iter().find_map(equality_conjunct),
        Expr::Field(f) => f.ops.iter().find_map(|op| {
            let values: Vec<&Value> = match op {
                FieldOp::Test(Test::Eq(v)) if indexable(v) => vec![v],
                FieldOp::Test(Test::In(list))
                    if !list.values().is_empty() && list.values().iter().all(indexable) =>
                {
                    list.values().iter().collect()
                }
                _ => return None,
            };
            Some((
                f.path.as_str().to_string(),
                values.into_iter().map(herald_value::key_of).collect(),
            ))
        }),
        _ => None,
    }
}

impl Matcher {
    pub fn add(&mut self, key: ViewId, filter: &Filter) {
        let slot = match equality_conjunct(filter.expr()) {
            Some((path, values)) => {
                let parsed = FieldPath::parse(&path).expect("a parsed filter's path is valid");
                self.paths.entry(path.clone()).or_insert((parsed, 0)).1 += 1;
                for v in &values {
                    self.eq
                        .entry((path.clone(), v.clone()))
                        .or_default()
                        .insert(key);
                }
                Slot::Eq { path, values }
            }
            None => match range_conjunct(filter.expr()) {
                Some((path, start, end)) => {
                    let r = self.ranges.entry(path.clone()).or_default();
                    if r.parsed.is_none() {
                        r.parsed =
                            Some(FieldPath::parse(&path).expect("a parsed filter's path is valid"));
                    }
                    r.add(key, &start, &end);
                    Slot::Range { path, start, end }
                }
                None => match prefix_conjunct(filter.expr()) {
                    Some((path, prefix)) => {
                        let p = self
                            .prefixes
                            .entry(path.clone())
                            .or_insert_with(|| Prefixes {
                                parsed: FieldPath::parse(&path)
                                    .expect("a parsed filter's path is valid"),
                                entries: Vec::new(),
                            });
                        p.entries.push((prefix.into_boxed_slice(), key));
                        Slot::Prefix { path }
                    }
                    None => {
                        self.scan.push(key);
                        Slot::Scan
                    }
                },
            },
        };
        self.slots.insert(key, slot);
    }

    pub fn remove(&mut self, key: ViewId) {
        match self.slots.remove(&key) {
            Some(Slot::Eq { path, values }) => {
                for v in values {
                    let k = (path.clone(), v);
                    if let Some(set) = self.eq.get_mut(&k) {
                        set.remove(&key);
                        if set.is_empty() {
                            self.eq.remove(&k);
                        }
                    }
                }
                if let Some(entry) = self.paths.get_mut(&path) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        self.paths.remove(&path);
                    }
                }
            }
            Some(Slot::Range { path, start, end }) => {
                if let Some(r) = self.ranges.get_mut(&path) {
                    r.remove(key, &start, &end);
                    if r.views == 0 {
                        self.ranges.remove(&path);
                    }
                }
            }
            Some(Slot::Prefix { path }) => {
                if let Some(p) = self.prefixes.get_mut(&path) {
                    if let Some(i) = p.entries.iter().position(|(_, v)| *v == key) {
                        p.entries.swap_remove(i);
                    }
                    if p.entries.is_empty() {
                        self.prefixes.remove(&path);
                    }
                }
            }
            Some(Slot::Scan) => {
                if let Some(i) = self.scan.iter().position(|v| *v == key) {
                    self.scan.swap_remove(i);
                }
            }
            None => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The views no index covers: every change of the collection is a candidate for them.
    pub fn scanned(&self) -> &[ViewId] {
        &self.scan
    }

    /// Adds to `out` every indexed view the document image may match (see [`Matcher::scanned`]
    /// for the rest).
    pub fn probe(&self, image: &Value, out: &mut HashSet<ViewId>) {
        let Value::Object(doc) = image else { return };
        let mut enc = Vec::new();
        for (path, (parsed, _)) in &self.paths {
            walk(doc, parsed.segments(), LeafArrays::Traverse, &mut |v| {
                if let Some(v) = v.filter(|v| indexable(v)) {
                    enc.clear();
                    encode_key(v, &mut enc);
                    if let Some(views) = self.eq.get(&(path.clone(), enc.clone())) {
                        out.extend(views.iter().copied());
                    }
                }
                false
            });
        }
        for r in self.ranges.values() {
            let Some(parsed) = &r.parsed else { continue };
            let mut span: Option<(Vec<u8>, Vec<u8>)> = None;
            walk(doc, parsed.segments(), LeafArrays::Traverse, &mut |v| {
                if let Some(v) = v.filter(|v| indexable(v)) {
                    let e = herald_value::key_of(v);
                    span = Some(match span.take() {
                        None => (e.clone(), e),
                        Some((lo, hi)) => (lo.min(e.clone()), hi.max(e)),
                    });
                }
                false
            });
            if let Some((lo, hi)) = span {
                r.probe(&lo, &hi, out);
            }
        }
        let mut strings: Vec<&[u8]> = Vec::new();
        for p in self.prefixes.values() {
            strings.clear();
            walk(doc, p.parsed.segments(), LeafArrays::Traverse, &mut |v| {
                if let Some(Value::String(s)) = v {
                    strings.push(s.as_bytes());
                }
                false
            });
            match strings.as_slice() {
                [] => {}
                [s] => out.extend(
                    p.entries
                        .iter()
                        .filter(|(prefix, _)| s.starts_with(prefix))
                        .map(|(_, v)| *v),
                ),
                many => out.extend(
                    p.entries
                        .iter()
                        .filter(|(prefix, _)| many.iter().any(|s| s.starts_with(prefix)))
                        .map(|(_, v)| *v),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0i64..4).prop_map(Value::from),
            Just(json!(1.0)),
            prop::sample::select(vec!["x", "y", "xz", "yx", "Xz"]).prop_map(Value::from),
            Just(Value::Null)
        ]
    }

    fn image() -> impl Strategy<Value = Value> {
        (scalar(), prop::collection::vec(scalar(), 0..3), scalar())
            .prop_map(|(a, t, n)| json!({"a": a, "t": t, "o": {"n": n}}))
    }

    fn filter() -> impl Strategy<Value = Value> {
        let path = prop::sample::select(vec!["a", "t", "o.n", "o"]);
        prop_oneof![
            (path.clone(), scalar()).prop_map(|(p, v)| json!({ p: v })),
            (path.clone(), prop::collection::vec(scalar(), 1..3))
                .prop_map(|(p, v)| json!({ p: {"$in": v} })),
            (path.clone(), scalar(), path.clone(), scalar())
                .prop_map(|(p, v, q, w)| json!({"$and": [{ p: v }, { q: {"$gte": w} }]})),
            (path.clone(), scalar()).prop_map(|(p, v)| json!({ p: {"$gt": v} })),
            (path.clone(), scalar(), scalar())
                .prop_map(|(p, lo, hi)| json!({ p: {"$gte": lo, "$lt": hi} })),
            (path.clone(), scalar()).prop_map(|(p, v)| json!({ p: {"$lte": v} })),
            (path.clone(), scalar()).prop_map(|(p, v)| json!({"$or": [{ p: v }, {"a": 2}]})),
            (path.clone(), regex()).prop_map(|(p, (r, o))| json!({ p: {"$regex": r, "$options": o} })),
            (path.clone(), regex(), path, scalar()).prop_map(
                |(p, (r, o), q, w)| json!({"$and": [{ p: {"$regex": r, "$options": o} }, { q: {"$ne": w} }]})
            ),
        ]
    }

    /// Patterns with and without a usable anchored prefix, and options that change it.
    fn regex() -> impl Strategy<Value = (&'static str, &'static str)> {
        (
            prop::sample::select(vec!["^x", "^xz", "^x.*", "^y", "x", "z$", "^(x|y)"]),
            prop::sample::select(vec!["", "i", "m"]),
        )
    }

    proptest! {
        /// Candidates are a superset of the views whose filter matches the before- or
        /// after-image.
        #[test]
        fn candidates_cover_every_matching_view(filters in prop::collection::vec(filter(), 1..8), before in image(), after in image()) {
            let mut m = Matcher::default();
            let parsed: Vec<Filter> = filters.iter().map(|f| Filter::parse(f).unwrap()).collect();
            for (i, f) in parsed.iter().enumerate() {
                m.add(i as ViewId, f);
            }
            let mut cand = HashSet::new();
            m.probe(&before, &mut cand);
            m.probe(&after, &mut cand);
            cand.extend(m.scanned().iter().copied());
            for (i, f) in parsed.iter().enumerate() {
                if f.matches(&before) || f.matches(&after) {
                    prop_assert!(cand.contains(&(i as ViewId)), "view {} {} missed", i, filters[i]);
                }
            }
            for i in 0..parsed.len() {
                m.remove(i as ViewId);
            }
            prop_assert!(m.is_empty() && m.eq.is_empty() && m.paths.is_empty() && m.scan.is_empty() && m.ranges.is_empty() && m.prefixes.is_empty());
        }
    }

    #[test]
    fn range_views_are_found_by_one_lookup() {
        let mut m = Matcher::default();
        for i in 0..100 {
            m.add(
                i,
                &Filter::parse(&json!({"random": {"$gte": i * 10, "$lt": i * 10 + 10}})).unwrap(),
            );
        }
        let mut c = HashSet::new();
        m.probe(&json!({"random": 425}), &mut c);
        assert_eq!(c, HashSet::from([42]));
        for i in 0..100 {
            m.remove(i);
        }
        assert!(m.ranges.is_empty());
    }

    #[test]
    fn anchored_regex_views_are_on_a_prefix_list_not_the_scan_list() {
        let mut m = Matcher::default();
        for i in 0..100u32 {
            let f = json!({"key": {"$regex": format!("^k{i:03}x")}});
            m.add(i, &Filter::parse(&f).unwrap());
        }
        // Case-insensitive and unanchored patterns have no usable prefix: scanned.
        m.add(
            100,
            &Filter::parse(&json!({"key": {"$regex": "^k042", "$options": "i"}})).unwrap(),
        );
        m.add(
            101,
            &Filter::parse(&json!({"key": {"$regex": "k042"}})).unwrap(),
        );
        assert_eq!(m.scanned(), &[100, 101]);
        let mut c = HashSet::new();
        m.probe(&json!({"key": "k042x-7"}), &mut c);
        assert_eq!(c, HashSet::from([42]));
        c.clear();
        m.probe(&json!({"key": ["zzz", "k007x"]}), &mut c);
        assert_eq!(c, HashSet::from([7]));
        c.clear();
        m.probe(&json!({"key": 42}), &mut c);
        assert!(c.is_empty());
        for i in 0..102 {
            m.remove(i);
        }
        assert!(m.prefixes.is_empty() && m.scan.is_empty() && m.is_empty());
    }

    #[test]
    fn equality_views_are_found_by_value_only() {
        let mut m = Matcher::default();
        m.add(1, &Filter::parse(&json!({"room": "r1"})).unwrap());
        m.add(
            2,
            &Filter::parse(&json!({"room": "r2", "n": {"$gt": 1}})).unwrap(),
        );
        let mut c = HashSet::new();
        m.probe(&json!({"room": "r2"}), &mut c);
        assert_eq!(c, HashSet::from([2]));
    }
}
