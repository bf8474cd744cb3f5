//! Aggregation expressions: what `$group`'s `_id` and accumulators, and `$project`'s computed
//! fields, evaluate per document.
//!
//! The supported subset is what the accumulators and projections need: field paths (`"$a.b"`),
//! `$$ROOT`/`$$CURRENT`, literals, `{"$literal": v}`, and documents and arrays of expressions.
//! Every other `$`-operator is refused by name (`unknown_operator`) at parse time.
//!
//! Evaluation returns `None` for "missing", which MongoDB keeps apart from `null`: a missing
//! field is left out of a document expression and ignored by `$push`, while `null` is kept.

use crate::error::QueryError;
use herald_value::{Map, Value};
use std::borrow::Cow;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum AggExpr {
    /// `"$a.b"`: the value at the path, traversing arrays of documents (see [`field_path`]).
    Field(Vec<String>),
    /// `"$$ROOT"` / `"$$CURRENT"`: the whole input document.
    Root,
    /// A constant (also `{"$literal": v}`, which is how a string starting with `$` is written).
    Literal(Value),
    /// `{"k": <expr>, ...}`: a document; fields whose expression is missing are left out.
    Object(Vec<(String, AggExpr)>),
    /// `[<expr>, ...]`: an array; a missing element becomes `null`.
    Array(Vec<AggExpr>),
}

impl AggExpr {
    /// Parses an expression; `at` names its place in the pipeline for error messages.
    pub fn parse(spec: &Value, at: &str) -> Result<AggExpr, QueryError> {
        match spec {
            Value::String(s) if s.starts_with("$$") => match s.as_str() {
                "$$ROOT" | "$$CURRENT" => Ok(AggExpr::Root),
                v if v.starts_with("$$ROOT.") || v.starts_with("$$CURRENT.") => {
                    let rest = v.split_once('.').map(|(_, r)| r).unwrap_or_default();
                    Ok(AggExpr::Field(path_segments(rest, at)?))
                }
                v => Err(QueryError::UnknownOperator {
                    path: at.to_string(),
                    op: v.to_string(),
                }),
            },
            Value::String(s) if s.starts_with('$') => {
                Ok(AggExpr::Field(path_segments(&s[1..], at)?))
            }
            Value::Array(items) => Ok(AggExpr::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| AggExpr::parse(v, &format!("{at}.{i}")))
                    .collect::<Result<_, _>>()?,
            )),
            Value::Object(m) => {
                if let Some((k, v)) = m.iter().next().filter(|(k, _)| k.starts_with('$')) {
                    if m.len() != 1 {
                        return Err(bad(
                            at,
                            "an expression object with an operator has one field",
                        ));
                    }
                    return match k.as_str() {
                        "$literal" => Ok(AggExpr::Literal(v.clone())),
                        _ => Err(QueryError::UnknownOperator {
                            path: at.to_string(),
                            op: k.clone(),
                        }),
                    };
                }
                let mut fields = Vec::with_capacity(m.len());
                for (k, v) in m {
                    if k.is_empty() || k.starts_with('$') || k.contains('.') {
                        return Err(bad(
                            at,
                            &format!("bad field name '{k}' in a document expression"),
                        ));
                    }
                    fields.push((k.clone(), AggExpr::parse(v, &format!("{at}.{k}"))?));
                }
                Ok(AggExpr::Object(fields))
            }
            other => Ok(AggExpr::Literal(other.clone())),
        }
    }

    /// The expression's value for `doc`; `None` is missing.
    pub fn eval(&self, doc: &Value) -> Option<Value> {
        match self {
            AggExpr::Field(segs) => field_path(doc, segs),
            AggExpr::Root => Some(doc.clone()),
            AggExpr::Literal(v) => Some(v.clone()),
            AggExpr::Object(fields) => {
                let mut out = Map::new();
                for (k, e) in fields {
                    if let Some(v) = e.eval(doc) {
                        out.insert(k.clone(), v);
                    }
                }
                Some(Value::Object(out))
            }
            AggExpr::Array(items) => Some(Value::Array(
                items
                    .iter()
                    .map(|e| e.eval(doc).unwrap_or(Value::Null))
                    .collect(),
            )),
        }
    }

    /// [`eval`](Self::eval) without copying when the value is in the document or the
    /// expression: a field path that meets no array, `$$ROOT` and literals are borrowed (the
    /// common case in `$group`, which then copies only what it keeps).
    pub fn eval_ref<'a>(&'a self, doc: &'a Value) -> Option<Cow<'a, Value>> {
        match self {
            AggExpr::Field(segs) => field_path_ref(doc, segs),
            AggExpr::Root => Some(Cow::Borrowed(doc)),
            AggExpr::Literal(v) => Some(Cow::Borrowed(v)),
            AggExpr::Object(_) | AggExpr::Array(_) => self.eval(doc).map(Cow::Owned),
        }
    }

    /// Whether the expression is a constant (the same for every document).
    pub fn is_constant(&self) -> bool {
        match self {
            AggExpr::Literal(_) => true,
            AggExpr::Field(_) | AggExpr::Root => false,
            AggExpr::Object(f) => f.iter().all(|(_, e)| e.is_constant()),
            AggExpr::Array(items) => items.iter().all(AggExpr::is_constant),
        }
    }
}

/// Splits and checks the path of a field reference (after the `$`).
pub(crate) fn path_segments(path: &str, at: &str) -> Result<Vec<String>, QueryError> {
    if path.is_empty() || path.split('.').any(|s| s.is_empty() || s.starts_with('$')) {
        return Err(bad(at, &format!("bad field path '${path}'")));
    }
    Ok(path.split('.').map(str::to_string).collect())
}

/// MongoDB's field-path evaluation: through an array, the path continues into each element that
/// is a document and the results form an array (nested arrays stay nested; elements without the
/// field are left out). Numeric segments name fields, never array positions.
pub fn field_path(v: &Value, segs: &[String]) -> Option<Value> {
    let Some((first, rest)) = segs.split_first() else {
        return Some(v.clone());
    };
    match v {
        Value::Object(m) => field_path(m.get(first)?, rest),
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .filter(|e| matches!(e, Value::Object(_) | Value::Array(_)))
                .filter_map(|e| field_path(e, segs))
                .collect(),
        )),
        _ => None,
    }
}

/// [`field_path`], borrowing unless the path meets an array (which builds a new array).
fn field_path_ref<'a>(v: &'a Value, segs: &[String]) -> Option<Cow<'a, Value>> {
    let mut cur = v;
    for (i, seg) in segs.iter().enumerate() {
        match cur {
            Value::Object(m) => cur = m.get(seg)?,
            Value::Array(_) => return field_path(cur, &segs[i..]).map(Cow::Owned),
            _ => return None,
        }
    }
    Some(Cow::Borrowed(cur))
}

pub(crate) fn bad(at: &str, why: &str) -> QueryError {
    QueryError::BadPipeline(format!("{at}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn ev(spec: Value, doc: Value) -> Option<Value> {
        AggExpr::parse(&spec, "e").unwrap().eval(&doc)
    }

    #[test]
    fn field_paths_traverse_arrays_of_documents() {
        let doc = json!({"a": [{"b": 1}, {"c": 2}, 5, {"b": [3]}, [{"b": 4}]]});
        assert_eq!(ev(json!("$a.b"), doc), Some(json!([1, [3], [4]])));
        assert_eq!(ev(json!("$x"), json!({})), None);
        assert_eq!(ev(json!("$a.0"), json!({"a": [7]})), Some(json!([])));
    }

    #[test]
    fn eval_ref_agrees_with_eval_and_borrows_plain_paths() {
        let doc = json!({"a": {"b": 1}, "c": [{"d": 2}, {"d": 3}]});
        for spec in [
            json!("$a.b"),
            json!("$c.d"),
            json!("$a.x"),
            json!("$$ROOT"),
            json!(5),
            json!({"k": "$a"}),
        ] {
            let e = AggExpr::parse(&spec, "e").unwrap();
            assert_eq!(
                e.eval_ref(&doc).map(Cow::into_owned),
                e.eval(&doc),
                "{spec}"
            );
        }
        let e = AggExpr::parse(&json!("$a.b"), "e").unwrap();
        assert!(matches!(e.eval_ref(&doc), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn documents_drop_missing_fields_and_arrays_null_them() {
        let doc = json!({"a": 1});
        assert_eq!(
            ev(json!({"x": "$a", "y": "$b"}), doc.clone()),
            Some(json!({"x": 1}))
        );
        assert_eq!(ev(json!(["$a", "$b"]), doc), Some(json!([1, null])));
        assert_eq!(ev(json!({"$literal": "$a"}), json!({})), Some(json!("$a")));
    }

    #[test]
    fn unknown_operators_are_refused_by_name() {
        let e = AggExpr::parse(&json!({"$add": [1, 2]}), "e").unwrap_err();
        assert_eq!(e.code(), "unknown_operator");
        assert!(e.to_string().contains("$add"));
        assert_eq!(
            AggExpr::parse(&json!("$$NOW"), "e").unwrap_err().code(),
            "unknown_operator"
        );
        assert_eq!(
            AggExpr::parse(&json!("$a..b"), "e").unwrap_err().code(),
            "bad_pipeline"
        );
    }
}
