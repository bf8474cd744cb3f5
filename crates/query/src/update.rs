//! Parsing update documents: MongoDB's update operators, or a whole replacement document.
//!
//! Parsing checks everything that does not depend on the target document: operator names,
//! argument shapes, modifiers, `$`-prefixed field names in values, and conflicts between paths
//! (`{"$set": {"a": 1}, "$inc": {"a.b": 1}}`). Applying (see `apply.rs`) checks the rest.

use crate::error::{QueryError, UpdateError};
use crate::filter::FieldOp;
use crate::limits::{EACH_VALUES_MAX, UPDATE_PATHS_MAX};
use crate::sort::Sort;
use crate::Filter;
use herald_value::{FieldPath, Map, Num, Value};
use std::cmp::Ordering;

/// A parsed update, ready to apply to many documents.
#[derive(Debug, Clone)]
pub struct Update {
    pub(crate) kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Replace(Map<String, Value>),
    /// Operator entries sorted by path, the order MongoDB applies them in.
    Ops(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub path: FieldPath,
    pub op: Op,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Set(Value),
    SetOnInsert(Value),
    Unset,
    Inc(Value),
    Mul(Value),
    Min(Value),
    Max(Value),
    Rename(FieldPath),
    CurrentDate { timestamp: bool },
    Push(Push),
    AddToSet(Vec<Value>),
    Pop { first: bool },
    Pull(PullCond),
    PullAll(Vec<Value>),
}

#[derive(Debug, Clone)]
pub(crate) struct Push {
    pub each: Vec<Value>,
    pub position: Option<i64>,
    pub slice: Option<i64>,
    pub sort: Option<PushSort>,
}

#[derive(Debug, Clone)]
pub(crate) enum PushSort {
    Values { desc: bool },
    Fields(Sort),
}

#[derive(Debug, Clone)]
pub(crate) enum PullCond {
    /// Remove elements equal to the value.
    Equal(Value),
    /// Remove elements that satisfy operators (`{"$gte": 6}`).
    Ops(Vec<FieldOp>),
    /// Remove embedded documents that match a query (`{"score": 8}`).
    Query(Filter),
}

impl Update {
    /// Parses an update document: all keys operators, or none (a replacement).
    pub fn parse(spec: &Value) -> Result<Update, UpdateError> {
        let Value::Object(m) = spec else {
            return Err(bad(format!("an update must be an object, got {spec}")));
        };
        let ops = m.keys().filter(|k| k.starts_with('$')).count();
        if ops == 0 {
            check_values(spec)?;
            return Ok(Update {
                kind: Kind::Replace(m.clone()),
            });
        }
        if ops != m.len() {
            return Err(bad("an update cannot mix operators and plain fields".into()));
        }
        let mut entries = Vec::new();
        for (op, arg) in m {
            let Value::Object(fields) = arg else {
                return Err(bad(format!(
                    "the argument of {op} must be an object, got {arg}"
                )));
            };
            for (field, v) in fields {
                if entries.len() >= UPDATE_PATHS_MAX {
                    return Err(UpdateError::LimitExceeded(format!(
                        "update touches more than {UPDATE_PATHS_MAX} paths"
                    )));
                }
                let path = update_path(field)?;
                let op = parse_op(op, &path, v)?;
                entries.push(Entry { path, op });
            }
        }
        check_conflicts(&entries)?;
        // MongoDB applies a $rename at its target, so it sorts by the target.
        let order_path = |e: &Entry| match &e.op {
            Op::Rename(to) => to.clone(),
            _ => e.path.clone(),
        };
        entries.sort_by(|a, b| path_order(&order_path(a), &order_path(b)));
        Ok(Update {
            kind: Kind::Ops(entries),
        })
    }

    /// True for a replacement document rather than operators.
    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, Kind::Replace(_))
    }
}

fn bad(msg: String) -> UpdateError {
    UpdateError::BadUpdate(msg)
}

fn update_path(field: &str) -> Result<FieldPath, UpdateError> {
    let path = FieldPath::parse(field).map_err(|e| bad(e.to_string()))?;
    if let Some(seg) = path.segments().iter().find(|s| s.name.starts_with('$')) {
        return Err(bad(format!(
            "'{field}': positional and '$'-prefixed path segments ('{}') are not supported",
            seg.name
        )));
    }
    Ok(path)
}

/// MongoDB orders update targets by field name, numeric names numerically. Applied pairwise
/// those two rules are not a total order ("2" < "10" by number, "10" < "1a" < "2" by name), and
/// a sort by an inconsistent comparison panics (found by the `bulk_line` fuzz target); so at
/// each level numeric names come first, in numeric order, then the others by name.
fn path_order(a: &FieldPath, b: &FieldPath) -> Ordering {
    for (x, y) in a.segments().iter().zip(b.segments()) {
        let ord = match (x.index, y.index) {
            (Some(i), Some(j)) => i.cmp(&j),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => x.name.cmp(&y.name),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

fn check_conflicts(entries: &[Entry]) -> Result<(), UpdateError> {
    let mut paths: Vec<&FieldPath> = Vec::with_capacity(entries.len() + 4);
    for e in entries {
        paths.push(&e.path);
        if let Op::Rename(to) = &e.op {
            paths.push(to);
        }
    }
    // After sorting by segments, a path that prefixes another sorts directly before some path
    // it prefixes, so checking neighbours finds every conflict.
    paths.sort_by(|a, b| {
        a.segments()
            .iter()
            .map(|s| &*s.name)
            .cmp(b.segments().iter().map(|s| &*s.name))
    });
    for w in paths.windows(2) {
        if w[0].is_prefix_of(w[1]) {
            return Err(UpdateError::ConflictingPaths(
                w[1].to_string(),
                w[0].to_string(),
            ));
        }
    }
    Ok(())
}

/// Values written by an update must be storable: no `$`-prefixed, dotted or empty field names.
pub(crate) fn check_values(v: &Value) -> Result<(), UpdateError> {
    match v {
        Value::Object(m) => {
            for (k, item) in m {
                if k.is_empty() || k.starts_with('$') || k.contains('.') || k.contains('\0') {
                    return Err(bad(format!(
                        "field name '{k}' is not allowed in a stored document"
                    )));
                }
                check_values(item)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_values),
        _ => Ok(()),
    }
}

fn number(op: &str, path: &FieldPath, v: &Value) -> Result<Value, UpdateError> {
    match v {
        Value::Number(_) => Ok(v.clone()),
        _ => Err(UpdateError::TypeMismatch(format!(
            "{op} at '{path}' needs a numeric argument, got {v}"
        ))),
    }
}

fn integer(what: &str, v: &Value) -> Result<i64, UpdateError> {
    if let Value::Number(n) = v {
        match Num::of(n) {
            Num::I(i) => return Ok(i),
            Num::F(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => return Ok(f as i64),
            _ => {}
        }
    }
    Err(bad(format!("{what} must be an integer, got {v}")))
}

fn parse_op(op: &str, path: &FieldPath, v: &Value) -> Result<Op, UpdateError> {
    Ok(match op {
        "$set" => {
            check_values(v)?;
            Op::Set(v.clone())
        }
        "$setOnInsert" => {
            check_values(v)?;
            Op::SetOnInsert(v.clone())
        }
        "$unset" => Op::Unset,
        "$inc" => Op::Inc(number(op, path, v)?),
        "$mul" => Op::Mul(number(op, path, v)?),
        "$min" => {
            check_values(v)?;
            Op::Min(v.clone())
        }
        "$max" => {
            check_values(v)?;
            Op::Max(v.clone())
        }
        "$rename" => {
            let Value::String(to) = v else {
                return Err(bad(format!(
                    "$rename target for '{path}' must be a string, got {v}"
                )));
            };
            let to = update_path(to)?;
            if path.is_prefix_of(&to) || to.is_prefix_of(path) {
                return Err(bad(format!(
                    "$rename source '{path}' and target '{to}' must not be on the same path"
                )));
            }
            Op::Rename(to)
        }
        "$currentDate" => match v {
            Value::Bool(true) => Op::CurrentDate { timestamp: false },
            Value::Object(m) if m.len() == 1 => match m.get("$type").and_then(Value::as_str) {
                Some("date") => Op::CurrentDate { timestamp: false },
                Some("timestamp") => Op::CurrentDate { timestamp: true },
                _ => {
                    return Err(bad(format!(
                    "$currentDate for '{path}' needs true or {{\"$type\": \"date\"|\"timestamp\"}}"
                )))
                }
            },
            _ => {
                return Err(bad(format!(
                    "$currentDate for '{path}' needs true or {{\"$type\": \"date\"|\"timestamp\"}}"
                )))
            }
        },
        "$push" => Op::Push(push(path, v)?),
        "$addToSet" => Op::AddToSet(add_to_set(path, v)?),
        "$pop" => match v.as_f64() {
            Some(1.0) => Op::Pop { first: false },
            Some(-1.0) => Op::Pop { first: true },
            _ => return Err(bad(format!("$pop for '{path}' needs 1 or -1, got {v}"))),
        },
        "$pull" => Op::Pull(pull(path, v)?),
        "$pullAll" => {
            let Value::Array(items) = v else {
                return Err(bad(format!(
                    "$pullAll for '{path}' needs an array, got {v}"
                )));
            };
            Op::PullAll(items.clone())
        }
        other => return Err(UpdateError::UnknownOperator(other.to_string())),
    })
}

fn each_list(path: &FieldPath, op: &str, each: &Value) -> Result<Vec<Value>, UpdateError> {
    let Value::Array(items) = each else {
        return Err(bad(format!(
            "$each in {op} for '{path}' needs an array, got {each}"
        )));
    };
    if items.len() > EACH_VALUES_MAX {
        return Err(UpdateError::LimitExceeded(format!(
            "$each has more than {EACH_VALUES_MAX} values"
        )));
    }
    items.iter().try_for_each(check_values)?;
    Ok(items.clone())
}

fn push(path: &FieldPath, v: &Value) -> Result<Push, UpdateError> {
    let Value::Object(m) = v else {
        check_values(v)?;
        return Ok(Push {
            each: vec![v.clone()],
            position: None,
            slice: None,
            sort: None,
        });
    };
    let Some(each) = m.get("$each") else {
        // A plain document to push; $-prefixed names here are modifiers without $each.
        if m.keys().any(|k| k.starts_with('$')) {
            return Err(bad(format!("$push modifiers for '{path}' need $each")));
        }
        check_values(v)?;
        return Ok(Push {
            each: vec![v.clone()],
            position: None,
            slice: None,
            sort: None,
        });
    };
    let mut push = Push {
        each: each_list(path, "$push", each)?,
        position: None,
        slice: None,
        sort: None,
    };
    for (k, arg) in m {
        match k.as_str() {
            "$each" => {}
            "$position" => push.position = Some(integer("$position", arg)?),
            "$slice" => push.slice = Some(integer("$slice", arg)?),
            "$sort" => push.sort = Some(push_sort(arg)?),
            other => {
                return Err(bad(format!(
                    "unknown $push modifier '{other}' for '{path}'"
                )))
            }
        }
    }
    Ok(push)
}

fn push_sort(arg: &Value) -> Result<PushSort, UpdateError> {
    match arg {
        Value::Number(_) => match arg.as_f64() {
            Some(1.0) => Ok(PushSort::Values { desc: false }),
            Some(-1.0) => Ok(PushSort::Values { desc: true }),
            _ => Err(bad(format!(
                "$sort must be 1, -1 or a sort document, got {arg}"
            ))),
        },
        Value::Object(m) if !m.is_empty() => {
            let sort =
                Sort::parse_without_id(arg).map_err(|e: QueryError| bad(format!("$sort: {e}")))?;
            Ok(PushSort::Fields(sort))
        }
        _ => Err(bad(format!(
            "$sort must be 1, -1 or a sort document, got {arg}"
        ))),
    }
}

fn add_to_set(path: &FieldPath, v: &Value) -> Result<Vec<Value>, UpdateError> {
    match v {
        Value::Object(m) if m.contains_key("$each") => {
            if let Some(k) = m.keys().find(|k| *k != "$each") {
                return Err(bad(format!(
                    "$addToSet for '{path}' allows only $each, got '{k}'"
                )));
            }
            each_list(path, "$addToSet", &m["$each"])
        }
        other => {
            check_values(other)?;
            Ok(vec![other.clone()])
        }
    }
}

fn pull(path: &FieldPath, v: &Value) -> Result<PullCond, UpdateError> {
    match v {
        Value::Object(m) if m.keys().next().is_some_and(|k| k.starts_with('$')) => {
            // {"$gte": 6}: the operators test each element as a value; {"$or": [...]}: a query.
            let first = m.keys().next().map(String::as_str);
            if matches!(first, Some("$and" | "$or" | "$nor")) {
                return Ok(PullCond::Query(Filter::parse(v)?));
            }
            let probe = Filter::parse(&Value::Object(Map::from_iter([(
                path.to_string(),
                v.clone(),
            )])))?;
            match probe.root {
                crate::filter::Expr::Field(f) => Ok(PullCond::Ops(f.ops)),
                _ => Err(bad(format!("bad $pull condition for '{path}'"))),
            }
        }
        Value::Object(_) => Ok(PullCond::Query(Filter::parse(v)?)),
        other => Ok(PullCond::Equal(other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn code(u: Value) -> &'static str {
        Update::parse(&u).unwrap_err().code()
    }

    /// Found by the `bulk_line` fuzz target: numeric and other names under one parent made the
    /// target order inconsistent, and sorting the update's paths panicked.
    #[test]
    fn numeric_and_other_names_under_one_parent_sort_totally() {
        let mut fields = serde_json::Map::new();
        for name in ["1a", "10", "2", "b", "0", "10a", "9", "a", "01", "3"] {
            fields.insert(format!("o.{name}"), json!(1));
        }
        let u = Update::parse(&json!({ "$set": fields })).unwrap();
        let out = u.apply(&json!({"_id": "x", "o": {}}), 0).unwrap();
        let names: Vec<&str> = out["o"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            names,
            ["0", "2", "3", "9", "10", "01", "10a", "1a", "a", "b"]
        );
    }

    #[test]
    fn rejects_malformed_updates() {
        assert_eq!(code(json!({"$set": {"a": 1}, "b": 2})), "bad_update");
        assert_eq!(code(json!({"$set": 5})), "bad_update");
        assert_eq!(code(json!({"$foo": {"a": 1}})), "unknown_operator");
        assert_eq!(
            code(json!({"$set": {"a": 1}, "$inc": {"a.b": 1}})),
            "conflicting_update_paths"
        );
        assert_eq!(
            code(json!({"$set": {"a.b": 1, "a.c": 1}, "$unset": {"a": 1}})),
            "conflicting_update_paths"
        );
        assert_eq!(code(json!({"$inc": {"a": "x"}})), "type_mismatch");
        assert_eq!(code(json!({"$set": {"a": {"$x": 1}}})), "bad_update");
        assert_eq!(code(json!({"$push": {"a": {"$slice": 1}}})), "bad_update");
        assert_eq!(code(json!({"$rename": {"a": "a.b"}})), "bad_update");
        assert_eq!(
            code(json!({"$rename": {"a": "b"}, "$set": {"b.c": 1}})),
            "conflicting_update_paths"
        );
        assert_eq!(code(json!({"$set": {"a..b": 1}})), "bad_update");
        assert_eq!(code(json!({"$set": {"a.$": 1}})), "bad_update");
    }

    #[test]
    fn sibling_paths_do_not_conflict() {
        assert!(Update::parse(&json!({"$set": {"a.b": 1, "a.bc": 2, "ab": 3}})).is_ok());
    }
}
