//! Applying a parsed update to a document, and building the document an upsert inserts.
//!
//! The update works on a copy: either every operator succeeds and the new document is returned,
//! or an error is returned and the caller's document is untouched. Paths are created as MongoDB
//! creates them: missing objects are added, arrays are indexed by numeric segments and padded with
//! null, and a path through a scalar is `path_not_viable`.

use crate::error::UpdateError;
use crate::filter::{Expr, FieldOp, Test};
use crate::update::{Entry, Kind, Op, PullCond, Push, PushSort, Update};
use crate::Filter;
use herald_value::{compare, values_equal, FieldPath, Map, Num, Segment, Value};
use std::cmp::Ordering;

impl Update {
    /// Applies the update to `doc` (an existing document). `now_ms` is the clock for
    /// `$currentDate`, passed in so the core stays deterministic.
    pub fn apply(&self, doc: &Value, now_ms: i64) -> Result<Value, UpdateError> {
        self.apply_inner(doc, now_ms, false)
    }

    /// The document an upsert inserts when `filter` matched nothing: the filter's equality
    /// fields seed it, then the update applies as an insert (`$setOnInsert` included).
    /// The result may lack `_id`; the caller supplies one then.
    pub fn upsert_document(&self, filter: &Filter, now_ms: i64) -> Result<Value, UpdateError> {
        let mut equalities: Vec<(&FieldPath, &Value)> = Vec::new();
        collect_equalities(filter.expr(), &mut |path, v| {
            if let Some((other, _)) = equalities
                .iter()
                .find(|(p, _)| p.is_prefix_of(path) || path.is_prefix_of(p))
            {
                return Err(UpdateError::ConflictingPaths(
                    path.to_string(),
                    other.to_string(),
                ));
            }
            equalities.push((path, v));
            Ok(())
        })?;
        // MongoDB seeds in byte order of the paths, not in filter order.
        equalities.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        let mut seed = Value::Object(Map::new());
        for (path, v) in equalities {
            set_path(&mut seed, path.segments(), v.clone())?;
        }
        let mut out = match &self.kind {
            Kind::Replace(m) => {
                let mut doc = m.clone();
                if let Some(id) = seed.get("_id") {
                    match doc.get("_id") {
                        Some(rid) if !values_equal(rid, id) => {
                            return Err(UpdateError::ImmutableField)
                        }
                        Some(_) => {}
                        None => {
                            doc.insert("_id".into(), id.clone());
                        }
                    }
                }
                Value::Object(doc)
            }
            Kind::Ops(_) => self.apply_inner(&seed, now_ms, true)?,
        };
        id_first(&mut out);
        Ok(out)
    }

    fn apply_inner(&self, doc: &Value, now_ms: i64, insert: bool) -> Result<Value, UpdateError> {
        let Value::Object(orig) = doc else {
            return Err(UpdateError::BadUpdate(
                "the target of an update must be a document".into(),
            ));
        };
        let out = match &self.kind {
            Kind::Replace(m) => {
                let mut new = Map::new();
                if let Some(id) = orig.get("_id") {
                    new.insert("_id".into(), id.clone());
                }
                for (k, v) in m {
                    if k == "_id" {
                        if orig.get("_id").is_some_and(|id| !values_equal(id, v)) {
                            return Err(UpdateError::ImmutableField);
                        }
                        if new.contains_key("_id") {
                            continue;
                        }
                    }
                    new.insert(k.clone(), v.clone());
                }
                Value::Object(new)
            }
            Kind::Ops(entries) => {
                let mut new = doc.clone();
                for e in entries {
                    apply_entry(&mut new, e, now_ms, insert)?;
                }
                let (before, after) = (orig.get("_id"), new.get("_id"));
                let unchanged = match (before, after) {
                    (Some(a), Some(b)) => a == b,
                    (None, None) => true,
                    // Setting _id where there was none happens only on insert.
                    (None, Some(_)) => insert,
                    (Some(_), None) => false,
                };
                if !unchanged {
                    return Err(UpdateError::ImmutableField);
                }
                new
            }
        };
        Ok(out)
    }
}

/// Moves `_id` to the front, where MongoDB puts it in inserted documents.
fn id_first(doc: &mut Value) {
    if let Value::Object(m) = doc {
        if let Some(id) = m.shift_remove("_id") {
            let mut out = Map::new();
            out.insert("_id".into(), id);
            out.extend(std::mem::take(m));
            *m = out;
        }
    }
}

/// Calls `f` for every `field == value` an upsert seeds from a filter.
fn collect_equalities<'a>(
    expr: &'a Expr,
    f: &mut dyn FnMut(&'a FieldPath, &'a Value) -> Result<(), UpdateError>,
) -> Result<(), UpdateError> {
    match expr {
        Expr::And(xs) => xs.iter().try_for_each(|x| collect_equalities(x, f)),
        Expr::Or(xs) if xs.len() == 1 => collect_equalities(&xs[0], f),
        Expr::Field(fe) => {
            for op in &fe.ops {
                match op {
                    FieldOp::Test(Test::Eq(v)) => f(&fe.path, v)?,
                    FieldOp::Test(Test::In(list)) if list.values().len() == 1 => {
                        f(&fe.path, &list.values()[0])?
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn apply_entry(doc: &mut Value, e: &Entry, now_ms: i64, insert: bool) -> Result<(), UpdateError> {
    let segs = e.path.segments();
    let path = &e.path;
    match &e.op {
        Op::Set(v) => set_path(doc, segs, v.clone()),
        Op::SetOnInsert(v) => {
            if insert {
                set_path(doc, segs, v.clone())
            } else {
                Ok(())
            }
        }
        Op::Unset => {
            unset_path(doc, segs);
            Ok(())
        }
        Op::Inc(by) => match get_path(doc, segs) {
            Some(Value::Number(cur)) => {
                let v = arith(path, "$inc", cur, by, |a, b| a.checked_add(b), |a, b| a + b)?;
                set_path(doc, segs, v)
            }
            Some(other) => Err(UpdateError::TypeMismatch(format!(
                "cannot apply $inc to the non-numeric value {other} at '{path}'"
            ))),
            None => set_path(doc, segs, by.clone()),
        },
        Op::Mul(by) => match get_path(doc, segs) {
            Some(Value::Number(cur)) => {
                let v = arith(path, "$mul", cur, by, |a, b| a.checked_mul(b), |a, b| a * b)?;
                set_path(doc, segs, v)
            }
            Some(other) => Err(UpdateError::TypeMismatch(format!(
                "cannot apply $mul to the non-numeric value {other} at '{path}'"
            ))),
            None => {
                let zero = if by.is_f64() {
                    Value::from(0.0)
                } else {
                    Value::from(0)
                };
                set_path(doc, segs, zero)
            }
        },
        Op::Min(v) | Op::Max(v) => {
            let want = if matches!(e.op, Op::Min(_)) {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            match get_path(doc, segs) {
                Some(cur) if compare(v, cur) != want => Ok(()),
                _ => set_path(doc, segs, v.clone()),
            }
        }
        Op::Rename(to) => {
            for p in [path, to] {
                if through_array(doc, p.segments()) {
                    return Err(UpdateError::PathNotViable(format!(
                        "$rename cannot move '{path}' to '{to}': '{p}' goes through an array"
                    )));
                }
            }
            match unset_path(doc, segs) {
                Some(v) => set_path(doc, to.segments(), v),
                None => Ok(()),
            }
        }
        Op::CurrentDate { timestamp } => {
            let v = if *timestamp {
                Value::from(now_ms)
            } else {
                Value::String(crate::date::iso8601_utc(now_ms))
            };
            set_path(doc, segs, v)
        }
        Op::Push(push) => {
            let mut items = array_at(doc, path, "$push")?.unwrap_or_default();
            apply_push(&mut items, push);
            set_path(doc, segs, Value::Array(items))
        }
        Op::AddToSet(values) => {
            let mut items = array_at(doc, path, "$addToSet")?.unwrap_or_default();
            for v in values {
                if !items.iter().any(|x| values_equal(x, v)) {
                    items.push(v.clone());
                }
            }
            set_path(doc, segs, Value::Array(items))
        }
        Op::Pop { first } => match array_at(doc, path, "$pop")? {
            Some(mut items) => {
                if !items.is_empty() {
                    if *first {
                        items.remove(0);
                    } else {
                        items.pop();
                    }
                }
                set_path(doc, segs, Value::Array(items))
            }
            None => Ok(()),
        },
        Op::Pull(cond) => match array_at(doc, path, "$pull")? {
            Some(mut items) => {
                items.retain(|x| !pull_matches(cond, x));
                set_path(doc, segs, Value::Array(items))
            }
            None => Ok(()),
        },
        Op::PullAll(values) => match array_at(doc, path, "$pullAll")? {
            Some(mut items) => {
                items.retain(|x| !values.iter().any(|v| values_equal(x, v)));
                set_path(doc, segs, Value::Array(items))
            }
            None => Ok(()),
        },
    }
}

fn pull_matches(cond: &PullCond, x: &Value) -> bool {
    match cond {
        PullCond::Equal(v) => values_equal(x, v),
        PullCond::Ops(ops) => ops.iter().all(|op| op.matches_value(x)),
        PullCond::Query(f) => matches!(x, Value::Object(m) if f.matches_map(m)),
    }
}

/// The array at `path`: `Ok(None)` when missing, a type error when it is not an array.
fn array_at(doc: &Value, path: &FieldPath, op: &str) -> Result<Option<Vec<Value>>, UpdateError> {
    if let Some(i) = blocked_at(doc, path.segments()) {
        let prefix: Vec<&str> = path.segments()[..i].iter().map(|s| &*s.name).collect();
        return Err(UpdateError::PathNotViable(format!(
            "{op} cannot reach '{path}': the value at '{}' is neither a document nor an array \
             the next segment indexes",
            prefix.join(".")
        )));
    }
    match get_path(doc, path.segments()) {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items.clone())),
        Some(other) => Err(UpdateError::TypeMismatch(format!(
            "{op} needs an array at '{path}', found {other}"
        ))),
    }
}

fn apply_push(items: &mut Vec<Value>, push: &Push) {
    let len = items.len() as i64;
    let at = match push.position {
        None => items.len(),
        Some(p) if p >= 0 => p.min(len) as usize,
        Some(p) => (len + p).max(0) as usize,
    };
    items.splice(at..at, push.each.iter().cloned());
    match &push.sort {
        Some(PushSort::Values { desc }) => items.sort_by(|a, b| {
            let o = compare(a, b);
            if *desc {
                o.reverse()
            } else {
                o
            }
        }),
        Some(PushSort::Fields(sort)) => items.sort_by(|a, b| push_sort_order(sort, a, b)),
        None => {}
    }
    if let Some(n) = push.slice {
        if n >= 0 {
            items.truncate(n as usize);
        } else {
            let keep = n.unsigned_abs() as usize;
            if items.len() > keep {
                items.drain(..items.len() - keep);
            }
        }
    }
}

/// `$push` with `$sort: {field: dir}` compares the value at each path as a whole (an array is
/// one value here, not its smallest element), missing and non-documents as null, and is stable.
fn push_sort_order(sort: &crate::Sort, a: &Value, b: &Value) -> Ordering {
    let null = Value::Null;
    for key in sort.keys() {
        let va = get_path(a, key.path.segments()).unwrap_or(&null);
        let vb = get_path(b, key.path.segments()).unwrap_or(&null);
        let ord = key.dir.orient(compare(va, vb));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

fn arith(
    path: &FieldPath,
    op: &str,
    cur: &herald_value::Number,
    by: &Value,
    int_op: impl Fn(i64, i64) -> Option<i64>,
    float_op: impl Fn(f64, f64) -> f64,
) -> Result<Value, UpdateError> {
    let by = match by {
        Value::Number(n) => Num::of(n),
        _ => unreachable!("parse checked the operand is numeric"),
    };
    let overflow = || UpdateError::NumericOverflow(format!("{op} at '{path}' overflows"));
    match (Num::of(cur), by) {
        (Num::I(a), Num::I(b)) => int_op(a, b).map(Value::from).ok_or_else(overflow),
        (a, b) if a.is_integer_kind() && b.is_integer_kind() => Err(overflow()),
        (a, b) => {
            let r = float_op(a.as_f64(), b.as_f64());
            herald_value::Number::from_f64(r)
                .map(Value::Number)
                .ok_or_else(overflow)
        }
    }
}

/// The array position a segment addresses in an update. Updates read a number with leading
/// zeros as a position (MongoDB's `a.02` sets element 2), unlike query paths.
fn position(seg: &Segment) -> Option<usize> {
    seg.index.or_else(|| {
        let digits = seg.name.trim_start_matches('0');
        let numeric = !seg.name.is_empty() && seg.name.bytes().all(|b| b.is_ascii_digit());
        (numeric && digits.len() <= 9).then(|| digits.parse().unwrap_or(0))
    })
}

/// Reads the value at a path without implicit array traversal (numeric segments index arrays).
fn get_path<'a>(doc: &'a Value, segs: &[Segment]) -> Option<&'a Value> {
    let mut cur = doc;
    for seg in segs {
        cur = match cur {
            Value::Object(m) => m.get(&*seg.name)?,
            Value::Array(items) => items.get(position(seg)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The index of the first segment the path cannot go through because the value before it is
/// a scalar, or an array and the segment is not a position (MongoDB's PathNotViable for
/// `$pull`, `$pop` and the other array operators); `None` when the path exists or ends at a
/// missing field.
fn blocked_at(doc: &Value, segs: &[Segment]) -> Option<usize> {
    let mut cur = doc;
    for (i, seg) in segs.iter().enumerate() {
        cur = match cur {
            Value::Object(m) => m.get(&*seg.name)?,
            Value::Array(items) => match position(seg) {
                Some(p) => items.get(p)?,
                None => return Some(i),
            },
            _ => return Some(i),
        };
    }
    None
}

/// True when an intermediate value of the path is an array (`$rename` refuses those).
fn through_array(doc: &Value, segs: &[Segment]) -> bool {
    let mut cur = doc;
    for seg in segs {
        match cur {
            Value::Object(m) => match m.get(&*seg.name) {
                Some(v) => cur = v,
                None => return false,
            },
            Value::Array(_) => return true,
            _ => return false,
        }
    }
    false
}

/// Sets the value at a path, creating missing objects and padding arrays with null.
pub(crate) fn set_path(doc: &mut Value, segs: &[Segment], v: Value) -> Result<(), UpdateError> {
    let mut cur = doc;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        cur = match cur {
            Value::Object(m) => {
                if last {
                    m.insert(seg.name.to_string(), v);
                    return Ok(());
                }
                m.entry(seg.name.to_string())
                    .or_insert_with(|| Value::Object(Map::new()))
            }
            Value::Array(items) => {
                let Some(idx) = position(seg) else {
                    return Err(not_viable(
                        segs,
                        i,
                        "is an array and the segment is not a position",
                    ));
                };
                if idx >= items.len() {
                    items.resize(idx + 1, Value::Null);
                    if !last {
                        items[idx] = Value::Object(Map::new());
                    }
                }
                if last {
                    items[idx] = v;
                    return Ok(());
                }
                &mut items[idx]
            }
            _ => return Err(not_viable(segs, i, "is not a document")),
        };
    }
    Ok(())
}

fn not_viable(segs: &[Segment], i: usize, why: &str) -> UpdateError {
    let prefix: Vec<&str> = segs[..i].iter().map(|s| &*s.name).collect();
    let full: Vec<&str> = segs.iter().map(|s| &*s.name).collect();
    UpdateError::PathNotViable(format!(
        "cannot create '{}': the value at '{}' {why}",
        full.join("."),
        prefix.join(".")
    ))
}

/// Removes the value at a path and returns it; an array element becomes null instead.
fn unset_path(doc: &mut Value, segs: &[Segment]) -> Option<Value> {
    let (last, parents) = segs.split_last()?;
    let mut cur = doc;
    for seg in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(&*seg.name)?,
            Value::Array(items) => items.get_mut(position(seg)?)?,
            _ => return None,
        };
    }
    match cur {
        Value::Object(m) => m.shift_remove(&*last.name),
        Value::Array(items) => items
            .get_mut(position(last)?)
            .map(|slot| std::mem::replace(slot, Value::Null)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn up(doc: Value, u: Value) -> Result<Value, &'static str> {
        Update::parse(&u)
            .map_err(|e| e.code())?
            .apply(&doc, 0)
            .map_err(|e| e.code())
    }

    #[test]
    fn array_operators_refuse_paths_blocked_by_a_scalar() {
        for u in [
            json!({"$pull": {"a.b": {"$lt": 1}}}),
            json!({"$pop": {"a.b": 1}}),
            json!({"$pullAll": {"a.b": [1]}}),
            json!({"$push": {"a.b": 1}}),
        ] {
            assert_eq!(
                up(json!({"a": "foo"}), u.clone()),
                Err("path_not_viable"),
                "{u}"
            );
            assert_eq!(
                up(json!({"a": [1]}), u.clone()),
                Err("path_not_viable"),
                "{u}"
            );
        }
        // A missing path is not blocked: nothing to pull or pop.
        assert_eq!(
            up(json!({"x": 1}), json!({"$pop": {"a.b": 1}})),
            Ok(json!({"x": 1}))
        );
        assert_eq!(
            up(json!({"a": {}}), json!({"$pull": {"a.b": 1}})),
            Ok(json!({"a": {}}))
        );
    }

    #[test]
    fn update_positions_may_have_leading_zeros() {
        assert_eq!(
            up(json!({"a": [0, 0, 0]}), json!({"$set": {"a.02": 2}})),
            Ok(json!({"a": [0, 0, 2]}))
        );
        assert_eq!(
            up(json!({"a": [[1, 2]]}), json!({"$pop": {"a.00": 1}})),
            Ok(json!({"a": [[1]]}))
        );
        // In a document, "02" stays a field name.
        assert_eq!(
            up(json!({"a": {}}), json!({"$set": {"a.02": 2}})),
            Ok(json!({"a": {"02": 2}}))
        );
    }

    #[test]
    fn set_creates_paths_in_field_order() {
        assert_eq!(
            up(json!({"_id": 1}), json!({"$set": {"b": 1, "a.c": 2}})),
            Ok(json!({"_id": 1, "a": {"c": 2}, "b": 1}))
        );
        assert_eq!(
            up(json!({"a": [1]}), json!({"$set": {"a.3": 9}})),
            Ok(json!({"a": [1, null, null, 9]}))
        );
        assert_eq!(
            up(json!({"a": 5}), json!({"$set": {"a.b": 1}})),
            Err("path_not_viable")
        );
        assert_eq!(
            up(json!({"a": [1]}), json!({"$set": {"a.b": 1}})),
            Err("path_not_viable")
        );
    }

    #[test]
    fn arithmetic() {
        assert_eq!(
            up(json!({"n": 1}), json!({"$inc": {"n": 2, "m": 1}})),
            Ok(json!({"n": 3, "m": 1}))
        );
        assert_eq!(
            up(json!({"n": 1}), json!({"$inc": {"n": 0.5}})),
            Ok(json!({"n": 1.5}))
        );
        assert_eq!(
            up(json!({"n": i64::MAX}), json!({"$inc": {"n": 1}})),
            Err("numeric_overflow")
        );
        assert_eq!(
            up(json!({"n": "x"}), json!({"$inc": {"n": 1}})),
            Err("type_mismatch")
        );
        assert_eq!(
            up(json!({}), json!({"$mul": {"n": 2.5}})),
            Ok(json!({"n": 0.0}))
        );
    }

    #[test]
    fn arrays() {
        assert_eq!(
            up(
                json!({"a": [3, 1]}),
                json!({"$push": {"a": {"$each": [5, 2], "$sort": 1, "$slice": 3}}})
            ),
            Ok(json!({"a": [1, 2, 3]}))
        );
        assert_eq!(
            up(
                json!({"a": [1, 2]}),
                json!({"$push": {"a": {"$each": [9], "$position": -1}}})
            ),
            Ok(json!({"a": [1, 9, 2]}))
        );
        assert_eq!(
            up(
                json!({"a": [1, 2]}),
                json!({"$addToSet": {"a": {"$each": [2, 3, 3]}}})
            ),
            Ok(json!({"a": [1, 2, 3]}))
        );
        assert_eq!(
            up(
                json!({"a": [1, 5, 7]}),
                json!({"$pull": {"a": {"$gte": 5}}})
            ),
            Ok(json!({"a": [1]}))
        );
        assert_eq!(
            up(
                json!({"a": [{"s": 8, "i": "B"}, {"s": 8, "i": "A"}]}),
                json!({"$pull": {"a": {"s": 8, "i": "B"}}})
            ),
            Ok(json!({"a": [{"s": 8, "i": "A"}]}))
        );
        assert_eq!(
            up(json!({"a": 1}), json!({"$push": {"a": 2}})),
            Err("type_mismatch")
        );
        assert_eq!(
            up(json!({"a": [1, 2]}), json!({"$pop": {"a": -1}})),
            Ok(json!({"a": [2]}))
        );
    }

    #[test]
    fn id_is_immutable() {
        assert_eq!(
            up(json!({"_id": 1}), json!({"$set": {"_id": 2}})),
            Err("immutable_field")
        );
        assert_eq!(
            up(json!({"_id": 1}), json!({"$set": {"_id": 1}})),
            Ok(json!({"_id": 1}))
        );
        assert_eq!(
            up(json!({"_id": 1, "a": 1}), json!({"b": 2})),
            Ok(json!({"_id": 1, "b": 2}))
        );
        assert_eq!(
            up(json!({"_id": 1}), json!({"_id": 2})),
            Err("immutable_field")
        );
    }

    #[test]
    fn rename_and_unset() {
        assert_eq!(
            up(json!({"a": 1, "b": 2}), json!({"$rename": {"a": "c"}})),
            Ok(json!({"b": 2, "c": 1}))
        );
        assert_eq!(
            up(json!({"a": [1, 2]}), json!({"$unset": {"a.0": 1}})),
            Ok(json!({"a": [null, 2]}))
        );
        assert_eq!(
            up(json!({"a": [{"b": 1}]}), json!({"$rename": {"a.0.b": "c"}})),
            Err("path_not_viable")
        );
    }

    #[test]
    fn upsert_seeds_from_filter() {
        let f = Filter::parse(&json!({"_id": "k", "a.b": 1, "c": {"$gt": 3}, "d": {"$in": [4]}}))
            .unwrap();
        let u = Update::parse(&json!({"$set": {"e": 2}, "$setOnInsert": {"f": 1}})).unwrap();
        assert_eq!(
            u.upsert_document(&f, 0).unwrap(),
            json!({"_id": "k", "a": {"b": 1}, "d": 4, "e": 2, "f": 1})
        );
    }
}
