//! `$unwind`: one output document per element of an array field, as MongoDB does it.
//!
//! `"$path"` or `{"path": "$path", "includeArrayIndex": "name", "preserveNullAndEmptyArrays":
//! bool}`. A non-empty array gives one document per element, the field replaced by the element
//! in place; a scalar or document gives the document unchanged (index `null`); `null`, missing or
//! `[]` give nothing, or with `preserveNullAndEmptyArrays` the document unchanged (an empty
//! array's field removed) with index `null`. The path does not traverse arrays: through an array
//! it is missing. At most [`UNWIND_OUTPUT_MAX`] documents per input document.

use super::expr::{bad, path_segments};
use crate::error::QueryError;
use crate::limits::UNWIND_OUTPUT_MAX;
use herald_value::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Unwind {
    path: Vec<String>,
    index_field: Option<Vec<String>>,
    preserve: bool,
}

impl Unwind {
    pub fn parse(spec: &Value, at: &str) -> Result<Unwind, QueryError> {
        let (path, index_field, preserve) = match spec {
            Value::String(_) => (spec, None, false),
            Value::Object(m) => {
                if let Some(k) = m.keys().find(|k| {
                    !["path", "includeArrayIndex", "preserveNullAndEmptyArrays"]
                        .contains(&k.as_str())
                }) {
                    return Err(bad(at, &format!("unknown $unwind option '{k}'")));
                }
                let preserve = match m.get("preserveNullAndEmptyArrays") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(bad(at, "preserveNullAndEmptyArrays must be a boolean")),
                };
                let index = match m.get("includeArrayIndex") {
                    None => None,
                    Some(Value::String(s)) if !s.is_empty() && !s.starts_with('$') => {
                        Some(path_segments(s, at)?)
                    }
                    Some(_) => {
                        return Err(bad(
                            at,
                            "includeArrayIndex must be a field name not starting with '$'",
                        ))
                    }
                };
                let path = m
                    .get("path")
                    .ok_or_else(|| bad(at, "$unwind needs a path"))?;
                (path, index, preserve)
            }
            _ => return Err(bad(at, "$unwind takes a field path or a document")),
        };
        let path = match path {
            Value::String(s) if s.starts_with('$') && !s.starts_with("$$") => {
                path_segments(&s[1..], at)?
            }
            _ => {
                return Err(bad(
                    at,
                    "the $unwind path must be a field path like \"$items\"",
                ))
            }
        };
        Ok(Unwind {
            path,
            index_field,
            preserve,
        })
    }

    /// Appends the documents `doc` unwinds to into `out`.
    pub fn apply(&self, doc: Value, out: &mut Vec<Value>) -> Result<(), QueryError> {
        match get(&doc, &self.path) {
            Some(Value::Array(items)) if !items.is_empty() => {
                if items.len() > UNWIND_OUTPUT_MAX {
                    return Err(QueryError::LimitExceeded(format!(
                        "$unwind would make more than UNWIND_OUTPUT_MAX ({UNWIND_OUTPUT_MAX}) documents of one document"
                    )));
                }
                // The array is taken out first (its slot left in place), so each output copies
                // the rest of the document, not the whole array again.
                let mut rest = doc;
                let Some(Value::Array(items)) = take(&mut rest, &self.path) else {
                    unreachable!("the path holds a non-empty array");
                };
                for (i, item) in items.into_iter().enumerate() {
                    let mut d = rest.clone();
                    set(&mut d, &self.path, Some(item));
                    self.set_index(&mut d, Value::from(i));
                    out.push(d);
                }
            }
            Some(Value::Array(_)) if self.preserve => {
                let mut d = doc;
                set(&mut d, &self.path, None);
                self.set_index(&mut d, Value::Null);
                out.push(d);
            }
            Some(Value::Array(_)) | Some(Value::Null) | None if !self.preserve => {}
            _ => {
                let mut d = doc;
                self.set_index(&mut d, Value::Null);
                out.push(d);
            }
        }
        Ok(())
    }

    fn set_index(&self, doc: &mut Value, i: Value) {
        if let Some(p) = &self.index_field {
            set(doc, p, Some(i));
        }
    }
}

/// The value at `path`, through documents only.
fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, seg| v.as_object()?.get(seg))
}

/// Takes the value at `path` out, leaving `null` in its slot (so the field keeps its position).
fn take(v: &mut Value, path: &[String]) -> Option<Value> {
    let slot = path
        .iter()
        .try_fold(v, |v, seg| v.as_object_mut()?.get_mut(seg))?;
    Some(std::mem::take(slot))
}

/// Sets (or with `None` removes) the value at `path`, making documents on the way.
fn set(v: &mut Value, path: &[String], new: Option<Value>) {
    let Some((last, init)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in init {
        let Value::Object(m) = cur else { return };
        let slot = m
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        cur = slot;
    }
    if let Value::Object(m) = cur {
        match new {
            Some(x) => {
                m.insert(last.clone(), x);
            }
            None => {
                m.shift_remove(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn unwind(spec: Value, docs: Vec<Value>) -> Vec<Value> {
        let u = Unwind::parse(&spec, "u").unwrap();
        let mut out = Vec::new();
        for d in docs {
            u.apply(d, &mut out).unwrap();
        }
        out
    }

    fn docs() -> Vec<Value> {
        vec![
            json!({"_id": 1, "a": [1, 2], "z": 0}),
            json!({"_id": 2, "a": []}),
            json!({"_id": 3, "a": null}),
            json!({"_id": 4}),
            json!({"_id": 5, "a": "s"}),
        ]
    }

    #[test]
    fn string_form() {
        assert_eq!(
            unwind(json!("$a"), docs()),
            vec![
                json!({"_id": 1, "a": 1, "z": 0}),
                json!({"_id": 1, "a": 2, "z": 0}),
                json!({"_id": 5, "a": "s"})
            ]
        );
    }

    #[test]
    fn preserve_and_index() {
        let out = unwind(
            json!({"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}),
            docs(),
        );
        assert_eq!(
            out,
            vec![
                json!({"_id": 1, "a": 1, "z": 0, "i": 0}),
                json!({"_id": 1, "a": 2, "z": 0, "i": 1}),
                json!({"_id": 2, "i": null}),
                json!({"_id": 3, "a": null, "i": null}),
                json!({"_id": 4, "i": null}),
                json!({"_id": 5, "a": "s", "i": null})
            ]
        );
    }

    #[test]
    fn nested_paths_and_bad_specs() {
        let out = unwind(
            json!("$a.b"),
            vec![json!({"a": {"b": [1, 2]}}), json!({"a": [{"b": [3]}]})],
        );
        assert_eq!(out, vec![json!({"a": {"b": 1}}), json!({"a": {"b": 2}})]);
        let e = |s: Value| Unwind::parse(&s, "u").unwrap_err().code();
        assert_eq!(e(json!("a")), "bad_pipeline");
        assert_eq!(e(json!({"path": "$a", "x": 1})), "bad_pipeline");
        assert_eq!(
            e(json!({"path": "$a", "includeArrayIndex": "$i"})),
            "bad_pipeline"
        );
        assert_eq!(e(json!(1)), "bad_pipeline");
    }
}
