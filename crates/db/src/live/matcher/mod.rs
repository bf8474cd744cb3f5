//! The predicate index of live queries: which views a written document may affect.
//!
//! Each view is indexed by one conjunct of its filter, the first kind that applies: an equality
//! (`{"room": "r1"}`, `{"tag": {"$in": ["a", "b"]}}`) in a hash map from (path, value) to views;
//! a range (`{"random": {"$gte": 10, "$lt": 20}}`) in an ordered map of elementary intervals per
//! path (`ranges`); an anchored literal prefix (`{"name": {"$regex": "^ada"}}`) on a per-path
//! prefix list; a required literal of an unanchored regex (`{"rs": {"$regex": ":0001234$"}}`)
//! on a per-path literal list, one Aho-Corasick automaton (`literals`); a `$type` or
//! `$exists: true` on a per-path type group (`types`); the rest on a scan list. A change is
//! probed with both its before-image (to find views it leaves) and its after-image (views it
//! enters), so the candidates are a superset of the views whose filter matches either image
//! (property-tested); the engine checks each candidate's filter exactly.
//!
//! Range views on one path share a map from each interval boundary (an encoded value) to the set
//! of views whose range covers the stretch from that boundary to the next; a probe is one
//! ordered lookup. Only one operator's range is used per view: with arrays, different elements
//! may satisfy different operators, so intersecting them could miss a match.
//!
//! A prefix list is still a linear scan (every such view is tested against every write), but of
//! a compact array of byte strings per path: the path is resolved once per image and each view
//! costs one `starts_with`, instead of a walk through the view's own filter (several cache misses
//! per view on long scan lists). A literal list costs one automaton pass per string, however
//! many views it holds.

mod literals;
mod ranges;
mod types;

use herald_query::{walk, CmpOp, Expr, FieldOp, Filter, LeafArrays, Test};
use herald_value::{encode_key, FieldPath, Value};
use literals::{Lit, Literals};
use ranges::Ranges;
use std::collections::HashMap;
use types::Types;

/// A view's handle in the engine: small and `Copy`, so probes and the scan list never allocate.
pub type ViewId = u32;
/// A set of views. Matching probes and collects view ids for every change a commit carries, so
/// these sets and maps use foldhash rather than SipHash: with the std hasher, hashing ids cost a
/// matching cell nearly as much as evaluating the filters of its scanned views (a profile of
/// `herald-bench live --workload scan`). View ids are handed out by the server, not chosen by
/// clients, so a hasher without flooding resistance is enough.
pub type ViewSet = foldhash::HashSet<ViewId>;
/// A map keyed by view id (see [`ViewSet`] for the hasher).
pub type ViewMap<V> = foldhash::HashMap<ViewId, V>;

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
    Literal {
        path: String,
        lits: Vec<Lit>,
    },
    Type {
        path: String,
        set: u16,
    },
    Scan,
}

/// The prefix views on one path: each view's required prefix, in one contiguous array.
struct Prefixes {
    parsed: FieldPath,
    entries: Vec<(Box<[u8]>, ViewId)>,
}

#[derive(Default)]
pub struct Matcher {
    eq: HashMap<(String, Vec<u8>), ViewSet>,
    /// Indexed paths with how many views use them.
    paths: HashMap<String, (FieldPath, usize)>,
    ranges: HashMap<String, Ranges>,
    prefixes: HashMap<String, Prefixes>,
    literals: HashMap<String, Literals>,
    types: HashMap<String, Types>,
    /// Views no index covers, in a vector: every change of the collection is offered to each,
    /// so iterating them must be cheap.
    scan: Vec<ViewId>,
    slots: ViewMap<Slot>,
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

/// The first top-level `$regex` conjunct of a filter with required literals (see
/// [`literals::required_literals`]): its path and the literals, one of which every match holds.
fn literal_conjunct(e: &Expr) -> Option<(String, Vec<Lit>)> {
    match e {
        Expr::And(xs) => xs.iter().find_map(literal_conjunct),
        Expr::Field(f) => f.ops.iter().find_map(|op| match op {
            FieldOp::Test(Test::Regex(p)) => {
                literals::required_literals(p).map(|lits| (f.path.as_str().to_string(), lits))
            }
            _ => None,
        }),
        _ => None,
    }
}

/// The first top-level `$type` or `$exists: true` conjunct of a filter: its path and type set
/// (every type for `$exists`). An empty `$type` set never holds; such views are scanned.
fn type_conjunct(e: &Expr) -> Option<(String, u16)> {
    match e {
        Expr::And(xs) => xs.iter().find_map(type_conjunct),
        Expr::Field(f) => f.ops.iter().find_map(|op| match op {
            FieldOp::Test(Test::Exists) => Some((f.path.as_str().to_string(), types::ANY)),
            FieldOp::Test(Test::Type(set)) if set.0 != 0 => {
                Some((f.path.as_str().to_string(), set.0))
            }
            _ => None,
        }),
        _ => None,
    }
}

fn parse_path(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("a parsed filter's path is valid")
}

impl Matcher {
    pub fn add(&mut self, key: ViewId, filter: &Filter) {
        let e = filter.expr();
        let slot = if let Some((path, values)) = equality_conjunct(e) {
            let parsed = parse_path(&path);
            self.paths.entry(path.clone()).or_insert((parsed, 0)).1 += 1;
            for v in &values {
                self.eq
                    .entry((path.clone(), v.clone()))
                    .or_default()
                    .insert(key);
            }
            Slot::Eq { path, values }
        } else if let Some((path, start, end)) = range_conjunct(e) {
            let r = self.ranges.entry(path.clone()).or_default();
            if r.parsed.is_none() {
                r.parsed = Some(parse_path(&path));
            }
            r.add(key, &start, &end);
            Slot::Range { path, start, end }
        } else if let Some((path, prefix)) = prefix_conjunct(e) {
            let p = self
                .prefixes
                .entry(path.clone())
                .or_insert_with(|| Prefixes {
                    parsed: parse_path(&path),
                    entries: Vec::new(),
                });
            p.entries.push((prefix.into_boxed_slice(), key));
            Slot::Prefix { path }
        } else if let Some((path, lits)) = literal_conjunct(e) {
            self.literals
                .entry(path.clone())
                .or_insert_with(|| Literals::new(parse_path(&path)))
                .add(key, &lits);
            Slot::Literal { path, lits }
        } else if let Some((path, set)) = type_conjunct(e) {
            self.types
                .entry(path.clone())
                .or_insert_with(|| Types::new(parse_path(&path)))
                .add(key, set);
            Slot::Type { path, set }
        } else {
            self.scan.push(key);
            Slot::Scan
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
            Some(Slot::Literal { path, lits }) => {
                if let Some(l) = self.literals.get_mut(&path) {
                    l.remove(key, &lits);
                    if l.is_empty() {
                        self.literals.remove(&path);
                    }
                }
            }
            Some(Slot::Type { path, set }) => {
                if let Some(t) = self.types.get_mut(&path) {
                    t.remove(key, set);
                    if t.views == 0 {
                        self.types.remove(&path);
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

    /// Builds every literal list's automata now (tests: pending and built literals alike).
    #[cfg(test)]
    fn rebuild_literals(&mut self) {
        for l in self.literals.values_mut() {
            l.rebuild();
        }
    }

    /// The views no index covers: every change of the collection is a candidate for them.
    pub fn scanned(&self) -> &[ViewId] {
        &self.scan
    }

    /// Adds to `out` every indexed view the document image may match (see [`Matcher::scanned`]
    /// for the rest).
    pub fn probe(&self, image: &Value, out: &mut ViewSet) {
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
        for l in self.literals.values() {
            strings.clear();
            walk(doc, l.parsed.segments(), LeafArrays::Traverse, &mut |v| {
                if let Some(Value::String(s)) = v {
                    strings.push(s.as_bytes());
                }
                false
            });
            l.probe(&strings, out);
        }
        for t in self.types.values() {
            t.probe(doc, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Sample strings: plain, with metacharacters and newlines, and with the non-ASCII case
    /// variants of `k` (the Kelvin sign) and `s` (the long s).
    const STRINGS: &[&str] = &[
        "x",
        "y",
        "xz",
        "yx",
        "Xz",
        "x.z",
        "kz",
        "\u{212A}z",
        "x\u{17F}",
        "y\nxz",
        "zx\n",
        "ab:01",
    ];

    /// Patterns with and without a usable anchored prefix or required literal: unanchored,
    /// suffix, alternation, classes, escaped metacharacters, case folds outside ASCII.
    const REGEXES: &[&str] = &[
        "^x", "^xz", "^x.*", "^y", "x", "z$", "^(x|y)", "xz", "x|yx", "[x]z", "x.*z", "(?:xz)+",
        "x\\.z", "kz", "Kz", "k", "z\\z", "x$", "x z # c", "[xy]z", "x?", ":01$", "a?b", "(x|.)z",
        "X(?-i)z", "^y$", "z\\n?$", "xs", "S",
    ];

    const OPTIONS: &[&str] = &["", "i", "m", "x", "s", "im"];

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0i64..4).prop_map(Value::from),
            Just(json!(1.0)),
            prop::sample::select(STRINGS).prop_map(Value::from),
            Just(Value::Null),
            Just(json!(true))
        ]
    }

    fn image() -> impl Strategy<Value = Value> {
        (
            prop::option::of(scalar()),
            prop::collection::vec(scalar(), 0..3),
            scalar(),
        )
            .prop_map(|(a, t, n)| {
                let mut doc = json!({"t": t, "o": {"n": n}});
                if let Some(a) = a {
                    doc["a"] = a;
                }
                doc
            })
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
            (path.clone(), regex(), path.clone(), scalar()).prop_map(
                |(p, (r, o), q, w)| json!({"$and": [{ p: {"$regex": r, "$options": o} }, { q: {"$ne": w} }]})
            ),
            (path.clone(), any::<bool>()).prop_map(|(p, b)| json!({ p: {"$exists": b} })),
            (path.clone(), types()).prop_map(|(p, t)| json!({ p: {"$type": t} })),
            (path.clone(), types(), path, regex())
                .prop_map(|(p, t, q, (r, o))| json!({ p: {"$type": t}, q: {"$not": {"$regex": r, "$options": o}} })),
        ]
    }

    fn types() -> impl Strategy<Value = Value> {
        prop_oneof![
            prop::sample::select(vec![
                "string", "number", "array", "null", "object", "int", "double", "bool", "long"
            ])
            .prop_map(Value::from),
            Just(json!(["string", "null"])),
            // A type code Herald never stores: an empty set, which never holds.
            Just(json!(5)),
        ]
    }

    /// A sample pattern and options that change what it means.
    fn regex() -> impl Strategy<Value = (&'static str, &'static str)> {
        (prop::sample::select(REGEXES), prop::sample::select(OPTIONS))
    }

    proptest! {
        /// Candidates are a superset of the views whose filter matches the before- or
        /// after-image. The literal lists are built after the first `built` views, so later
        /// ones are pending; views in `gone` are removed (built ones become tombstones) and
        /// added back under new ids, so a literal can be both a tombstone and pending.
        #[test]
        fn candidates_cover_every_matching_view(filters in prop::collection::vec(filter(), 1..8), built in 0usize..8, gone in prop::collection::vec(any::<bool>(), 8), before in image(), after in image()) {
            let mut m = Matcher::default();
            let parsed: Vec<Filter> = filters.iter().map(|f| Filter::parse(f).unwrap()).collect();
            for (i, f) in parsed.iter().enumerate() {
                if i == built {
                    m.rebuild_literals();
                }
                m.add(i as ViewId, f);
            }
            // View i lives under id i, or under 100 + i once removed and added back.
            let mut ids: Vec<ViewId> = (0..parsed.len() as ViewId).collect();
            for (i, f) in parsed.iter().enumerate() {
                if gone[i] {
                    m.remove(i as ViewId);
                    ids[i] = 100 + i as ViewId;
                    m.add(ids[i], f);
                }
            }
            let mut cand = ViewSet::default();
            m.probe(&before, &mut cand);
            m.probe(&after, &mut cand);
            cand.extend(m.scanned().iter().copied());
            for (i, f) in parsed.iter().enumerate() {
                if f.matches(&before) || f.matches(&after) {
                    prop_assert!(cand.contains(&ids[i]), "view {} {} missed", i, filters[i]);
                }
            }
            for id in ids {
                m.remove(id);
            }
            prop_assert!(m.is_empty() && m.eq.is_empty() && m.paths.is_empty() && m.scan.is_empty() && m.ranges.is_empty() && m.prefixes.is_empty() && m.literals.is_empty() && m.types.is_empty());
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
        let mut c = ViewSet::default();
        m.probe(&json!({"random": 425}), &mut c);
        assert_eq!(c, ViewSet::from_iter([42]));
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
        // Case-insensitive and unanchored patterns have no usable prefix: on the literal list
        // (by "042" and "k042"). One without a required literal is scanned.
        m.add(
            100,
            &Filter::parse(&json!({"key": {"$regex": "^k042", "$options": "i"}})).unwrap(),
        );
        m.add(
            101,
            &Filter::parse(&json!({"key": {"$regex": "k042"}})).unwrap(),
        );
        m.add(
            102,
            &Filter::parse(&json!({"key": {"$regex": "^k?"}})).unwrap(),
        );
        assert_eq!(m.scanned(), &[102]);
        let mut c = ViewSet::default();
        m.probe(&json!({"key": "k042x-7"}), &mut c);
        assert_eq!(c, ViewSet::from_iter([42, 100, 101]));
        c.clear();
        m.probe(&json!({"key": ["zzz", "k007x"]}), &mut c);
        assert_eq!(c, ViewSet::from_iter([7]));
        c.clear();
        m.probe(&json!({"key": 42}), &mut c);
        assert!(c.is_empty());
        for i in 0..103 {
            m.remove(i);
        }
        assert!(
            m.prefixes.is_empty() && m.literals.is_empty() && m.scan.is_empty() && m.is_empty()
        );
    }

    /// Every sample pattern with every option set against every sample string, one view at a
    /// time, pending and built: the rare pairs (case folds outside ASCII) the property test
    /// seldom draws together.
    #[test]
    fn literal_lists_cover_every_sample_pair() {
        for (r, o) in REGEXES
            .iter()
            .flat_map(|r| OPTIONS.iter().map(move |o| (*r, *o)))
        {
            let f = Filter::parse(&json!({"a": {"$regex": r, "$options": o}})).unwrap();
            for built in [false, true] {
                let mut m = Matcher::default();
                m.add(1, &f);
                if built {
                    m.rebuild_literals();
                }
                for s in STRINGS {
                    let doc = json!({ "a": s });
                    let mut c = ViewSet::default();
                    m.probe(&doc, &mut c);
                    c.extend(m.scanned().iter().copied());
                    assert!(!f.matches(&doc) || c.contains(&1), "/{r}/{o} on {s:?}");
                }
            }
        }
    }

    #[test]
    fn suffix_regex_views_are_found_by_their_literal() {
        let mut m = Matcher::default();
        for q in 0..1000u32 {
            let f = json!({"rs": {"$regex": format!(":{q:07}$")}});
            m.add(q, &Filter::parse(&f).unwrap());
        }
        assert!(m.scanned().is_empty());
        let mut c = ViewSet::default();
        m.probe(&json!({"rs": "abcdefghij:0000421"}), &mut c);
        assert_eq!(c, ViewSet::from_iter([421]));
        for q in 0..1000 {
            m.remove(q);
        }
        assert!(m.literals.is_empty() && m.is_empty());
    }

    #[test]
    fn type_and_exists_views_are_grouped_by_path() {
        let mut m = Matcher::default();
        m.add(1, &Filter::parse(&json!({"a": {"$exists": true}})).unwrap());
        m.add(
            2,
            &Filter::parse(&json!({"a": {"$type": "string"}})).unwrap(),
        );
        m.add(
            3,
            &Filter::parse(&json!({"a": {"$type": "number"}})).unwrap(),
        );
        // `$exists: false` holds where the others do not: scanned.
        m.add(
            4,
            &Filter::parse(&json!({"a": {"$exists": false}})).unwrap(),
        );
        assert_eq!(m.scanned(), &[4]);
        let mut c = ViewSet::default();
        m.probe(&json!({"a": "s"}), &mut c);
        assert_eq!(c, ViewSet::from_iter([1, 2]));
        c.clear();
        m.probe(&json!({"a": [1, "s"]}), &mut c);
        assert_eq!(c, ViewSet::from_iter([1, 2, 3]));
        c.clear();
        m.probe(&json!({"b": 1}), &mut c);
        assert!(c.is_empty());
        for i in 1..5 {
            m.remove(i);
        }
        assert!(m.types.is_empty() && m.is_empty());
    }

    #[test]
    fn equality_views_are_found_by_value_only() {
        let mut m = Matcher::default();
        m.add(1, &Filter::parse(&json!({"room": "r1"})).unwrap());
        m.add(
            2,
            &Filter::parse(&json!({"room": "r2", "n": {"$gt": 1}})).unwrap(),
        );
        let mut c = ViewSet::default();
        m.probe(&json!({"room": "r2"}), &mut c);
        assert_eq!(c, ViewSet::from_iter([2]));
    }
}
