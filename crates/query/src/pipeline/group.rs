//! `$group`: documents grouped by the value of an `_id` expression, one output document per group
//! with `_id` and the accumulators' results.
//!
//! Group keys compare with the value order (`herald_value::compare`), so `1` and `1.0` are one
//! group and missing groups with `null`; the output `_id` is the first-seen key of the group.
//! Groups are emitted in ascending key order (MongoDB leaves the order unspecified; a defined one
//! keeps results stable). Bounded by [`GROUPS_MAX`] groups and [`BLOCKING_STAGE_BYTES_MAX`]
//! estimated bytes.

use super::accum::{AccState, Accumulator};
use super::expr::{bad, AggExpr};
use super::size::approx_bytes;
use crate::error::QueryError;
use crate::limits::{BLOCKING_STAGE_BYTES_MAX, GROUPS_MAX};
use herald_value::{encode_key, Map, Value};
use std::collections::BTreeMap;

/// Bytes counted per group beyond its key and accumulator values.
const GROUP_BYTES: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub id: AggExpr,
    pub accumulators: Vec<Accumulator>,
}

impl Group {
    pub fn parse(spec: &Value, at: &str) -> Result<Group, QueryError> {
        let Value::Object(m) = spec else {
            return Err(bad(at, "$group takes a document"));
        };
        let Some(id) = m.get("_id") else {
            return Err(bad(
                at,
                "$group needs an _id (null for one group of everything)",
            ));
        };
        let id = AggExpr::parse(id, &format!("{at}._id"))?;
        let accumulators = m
            .iter()
            .filter(|(k, _)| *k != "_id")
            .map(|(k, v)| Accumulator::parse(k, v, at))
            .collect::<Result<_, _>>()?;
        Ok(Group { id, accumulators })
    }

    pub fn run(&self, docs: Vec<Value>) -> Result<Vec<Value>, QueryError> {
        let mut run = self.start();
        for doc in &docs {
            run.push(doc)?;
        }
        drop(docs);
        Ok(run.finish())
    }

    /// Starts grouping documents fed one at a time ([`GroupRun::push`]), so an input need not
    /// be held whole: only the groups are.
    pub fn start(&self) -> GroupRun<'_> {
        GroupRun {
            group: self,
            index: BTreeMap::new(),
            groups: Vec::new(),
            bytes: 0,
            k: Vec::with_capacity(64),
        }
    }
}

/// A `$group` in progress: the groups so far, bounded by [`GROUPS_MAX`] and
/// [`BLOCKING_STAGE_BYTES_MAX`].
pub struct GroupRun<'g> {
    group: &'g Group,
    index: BTreeMap<Vec<u8>, usize>,
    groups: Vec<(Value, Vec<AccState>)>,
    bytes: isize,
    /// The key's encoding, reused across documents: only a new group copies it (and the key).
    k: Vec<u8>,
}

impl GroupRun<'_> {
    /// Adds one input document to its group.
    pub fn push(&mut self, doc: &Value) -> Result<(), QueryError> {
        let key = self.group.id.eval_ref(doc);
        self.k.clear();
        encode_key(key.as_deref().unwrap_or(&Value::Null), &mut self.k);
        let g = match self.index.get(self.k.as_slice()) {
            Some(&g) => g,
            None => {
                if self.groups.len() >= GROUPS_MAX {
                    return Err(QueryError::LimitExceeded(format!(
                        "$group would hold more than GROUPS_MAX ({GROUPS_MAX}) groups"
                    )));
                }
                let key = key.map_or(Value::Null, |k| k.into_owned());
                self.bytes += (GROUP_BYTES + approx_bytes(&key) + self.k.len()) as isize;
                self.index.insert(self.k.clone(), self.groups.len());
                let states = self
                    .group
                    .accumulators
                    .iter()
                    .map(Accumulator::state)
                    .collect();
                self.groups.push((key, states));
                self.groups.len() - 1
            }
        };
        for (acc, st) in self.group.accumulators.iter().zip(&mut self.groups[g].1) {
            self.bytes += st.add(acc.expr.eval_ref(doc))?;
        }
        if self.bytes > BLOCKING_STAGE_BYTES_MAX as isize {
            return Err(QueryError::LimitExceeded(format!(
                "$group would hold more than BLOCKING_STAGE_BYTES_MAX ({BLOCKING_STAGE_BYTES_MAX}) bytes"
            )));
        }
        Ok(())
    }

    /// One output document per group, in ascending key order.
    pub fn finish(self) -> Vec<Value> {
        let accumulators = &self.group.accumulators;
        let mut slots: Vec<Option<(Value, Vec<AccState>)>> =
            self.groups.into_iter().map(Some).collect();
        self.index
            .into_values()
            .map(|g| {
                let (key, states) = slots[g].take().expect("each group once");
                let mut out = Map::with_capacity(states.len() + 1);
                out.insert("_id".into(), key);
                for (acc, st) in accumulators.iter().zip(states) {
                    out.insert(acc.name.clone(), st.finish());
                }
                Value::Object(out)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn group(spec: Value, docs: Vec<Value>) -> Vec<Value> {
        Group::parse(&spec, "g").unwrap().run(docs).unwrap()
    }

    #[test]
    fn keys_group_by_value_order_and_missing_is_null() {
        let docs = vec![
            json!({"k": 1, "n": 1}),
            json!({"k": 1.0, "n": 2}),
            json!({"n": 3}),
            json!({"k": null, "n": 4}),
            json!({"k": "a", "n": 5}),
        ];
        let out = group(json!({"_id": "$k", "t": {"$sum": "$n"}}), docs);
        assert_eq!(
            out,
            vec![
                json!({"_id": null, "t": 7}),
                json!({"_id": 1, "t": 3}),
                json!({"_id": "a", "t": 5})
            ]
        );
    }

    #[test]
    fn compound_keys_and_constant_keys() {
        let docs = vec![
            json!({"a": 1, "b": 2}),
            json!({"a": 1}),
            json!({"a": 1, "b": 2}),
        ];
        let out = group(
            json!({"_id": {"a": "$a", "b": "$b"}, "c": {"$count": {}}}),
            docs.clone(),
        );
        assert_eq!(
            out,
            vec![
                json!({"_id": {"a": 1}, "c": 1}),
                json!({"_id": {"a": 1, "b": 2}, "c": 2})
            ]
        );
        let out = group(json!({"_id": null, "c": {"$sum": 1}}), docs);
        assert_eq!(out, vec![json!({"_id": null, "c": 3})]);
    }

    #[test]
    fn bad_group_specs() {
        let e = |s: Value| Group::parse(&s, "g").unwrap_err().code();
        assert_eq!(e(json!({"c": {"$sum": 1}})), "bad_pipeline");
        assert_eq!(e(json!([])), "bad_pipeline");
        assert_eq!(e(json!({"_id": null, "a.b": {"$sum": 1}})), "bad_pipeline");
    }

    #[test]
    fn group_count_is_bounded() {
        let docs: Vec<Value> = (0..=GROUPS_MAX).map(|i| json!({"k": i})).collect();
        let e = Group::parse(&json!({"_id": "$k"}), "g")
            .unwrap()
            .run(docs)
            .unwrap_err();
        assert_eq!(e.code(), "limit_exceeded");
        assert!(e.to_string().contains("GROUPS_MAX"));
    }
}
