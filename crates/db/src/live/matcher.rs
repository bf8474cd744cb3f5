//! The predicate index of live queries: which views a written document may affect.
//!
//! Each view is indexed by one equality conjunct of its filter (`{"room": "r1"}`,
//! `{"tag": {"$in": ["a", "b"]}}`) in a hash map from (path, value) to views; views without one
//! go to a scan list. A change is probed with both its before-image (to find views it leaves)
//! and its after-image (views it enters), so the candidates are a superset of the views whose
//! filter matches either image (property-tested). Ranges and other operators use the scan list
//! for now.

use herald_query::{walk, Expr, FieldOp, Filter, LeafArrays, Test};
use herald_value::{encode_key, FieldPath, Value};
use std::collections::{HashMap, HashSet};

/// One view's entry: indexed under (path, values), or scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Eq { path: String, values: Vec<Vec<u8>> },
    Scan,
}

#[derive(Default)]
pub struct Matcher {
    eq: HashMap<(String, Vec<u8>), HashSet<String>>,
    /// Indexed paths with how many views use them.
    paths: HashMap<String, (FieldPath, usize)>,
    scan: HashSet<String>,
    slots: HashMap<String, Slot>,
}

fn indexable(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Array(_) | Value::Object(_))
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
    pub fn add(&mut self, key: &str, filter: &Filter) {
        let slot = match equality_conjunct(filter.expr()) {
            Some((path, values)) => {
                let parsed = FieldPath::parse(&path).expect("a parsed filter's path is valid");
                self.paths.entry(path.clone()).or_insert((parsed, 0)).1 += 1;
                for v in &values {
                    self.eq
                        .entry((path.clone(), v.clone()))
                        .or_default()
                        .insert(key.to_string());
                }
                Slot::Eq { path, values }
            }
            None => {
                self.scan.insert(key.to_string());
                Slot::Scan
            }
        };
        self.slots.insert(key.to_string(), slot);
    }

    pub fn remove(&mut self, key: &str) {
        match self.slots.remove(key) {
            Some(Slot::Eq { path, values }) => {
                for v in values {
                    let k = (path.clone(), v);
                    if let Some(set) = self.eq.get_mut(&k) {
                        set.remove(key);
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
            Some(Slot::Scan) => {
                self.scan.remove(key);
            }
            None => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Adds to `out` every view the document image may match.
    pub fn probe(&self, image: &Value, out: &mut HashSet<String>) {
        out.extend(self.scan.iter().cloned());
        let Value::Object(doc) = image else { return };
        let mut enc = Vec::new();
        for (path, (parsed, _)) in &self.paths {
            walk(doc, parsed.segments(), LeafArrays::Traverse, &mut |v| {
                if let Some(v) = v.filter(|v| indexable(v)) {
                    enc.clear();
                    encode_key(v, &mut enc);
                    if let Some(views) = self.eq.get(&(path.clone(), enc.clone())) {
                        out.extend(views.iter().cloned());
                    }
                }
                false
            });
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
            prop::sample::select(vec!["x", "y"]).prop_map(Value::from),
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
            (path, scalar()).prop_map(|(p, v)| json!({"$or": [{ p: v }, {"a": 2}]})),
        ]
    }

    proptest! {
        /// Candidates are a superset of the views whose filter matches the before- or
        /// after-image.
        #[test]
        fn candidates_cover_every_matching_view(filters in prop::collection::vec(filter(), 1..8), before in image(), after in image()) {
            let mut m = Matcher::default();
            let parsed: Vec<Filter> = filters.iter().map(|f| Filter::parse(f).unwrap()).collect();
            for (i, f) in parsed.iter().enumerate() {
                m.add(&format!("v{i}"), f);
            }
            let mut cand = HashSet::new();
            m.probe(&before, &mut cand);
            m.probe(&after, &mut cand);
            for (i, f) in parsed.iter().enumerate() {
                if f.matches(&before) || f.matches(&after) {
                    prop_assert!(cand.contains(&format!("v{i}")), "view {} {} missed", i, filters[i]);
                }
            }
            for i in 0..parsed.len() {
                m.remove(&format!("v{i}"));
            }
            prop_assert!(m.is_empty() && m.eq.is_empty() && m.paths.is_empty() && m.scan.is_empty());
        }
    }

    #[test]
    fn equality_views_are_found_by_value_only() {
        let mut m = Matcher::default();
        m.add("r1", &Filter::parse(&json!({"room": "r1"})).unwrap());
        m.add(
            "r2",
            &Filter::parse(&json!({"room": "r2", "n": {"$gt": 1}})).unwrap(),
        );
        let mut c = HashSet::new();
        m.probe(&json!({"room": "r2"}), &mut c);
        assert_eq!(c, HashSet::from(["r2".to_string()]));
    }
}
