//! `$project`: inclusion (`{"a": 1, "b.c": 1}`), exclusion (`{"a": 0}`) and computed fields
//! (`{"x": "$a.b"}`, `{"y": {"$literal": 1}}`, `{"z": "text"}`), with MongoDB's rules: `_id` is
//! kept unless excluded or computed; exclusion cannot be mixed with inclusion or computed fields
//! (except `_id: 0`); a nested document `{"a": {"b": 1}}` means the path `a.b`.
//!
//! Included fields keep the input document's order (the find projection's semantics, arrays
//! included); computed fields follow in the order written, except a computed `_id`, which comes
//! first. A computed field whose expression is missing is left out.

use super::expr::AggExpr;
use crate::error::QueryError;
use crate::limits::PROJECTION_FIELDS_MAX;
use crate::projection::Projection;
use herald_value::{FieldPath, Map, Value};

#[derive(Debug, Clone)]
pub struct Project {
    /// The find projection for the included (or excluded) paths; `None` when nothing of the input
    /// is kept.
    base: Option<Projection>,
    /// Computed fields in the order written: path segments and expression.
    computed: Vec<(Vec<String>, AggExpr)>,
}

enum Field {
    Include,
    Exclude,
    Computed(AggExpr),
}

fn bad(why: String) -> QueryError {
    QueryError::BadProjection(format!("$project: {why}"))
}

impl Project {
    pub fn parse(spec: &Value, at: &str) -> Result<Project, QueryError> {
        let Value::Object(m) = spec else {
            return Err(bad("takes a document".into()));
        };
        if m.is_empty() {
            return Err(bad("needs at least one output field".into()));
        }
        let mut fields = Vec::new();
        flatten(m, "", at, &mut fields)?;
        if fields.len() > PROJECTION_FIELDS_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "$project has more than PROJECTION_FIELDS_MAX ({PROJECTION_FIELDS_MAX}) fields"
            )));
        }
        for (i, (a, _)) in fields.iter().enumerate() {
            for (b, _) in &fields[i + 1..] {
                let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
                if long == short || long.starts_with(&format!("{short}.")) {
                    return Err(bad(format!("path collision between '{a}' and '{b}'")));
                }
            }
        }
        let excludes_other = fields
            .iter()
            .any(|(p, f)| matches!(f, Field::Exclude) && p != "_id");
        let includes = fields
            .iter()
            .any(|(p, f)| !matches!(f, Field::Exclude) && p != "_id");
        if excludes_other {
            // `_id: 1` may stay in an exclusion (it is kept anyway), as in MongoDB.
            let mixed = fields.iter().find(|(p, f)| match f {
                Field::Exclude => false,
                Field::Include => p != "_id",
                Field::Computed(_) => true,
            });
            if let Some((p, _)) = mixed {
                return Err(bad(format!(
                    "cannot include or compute '{p}' in an exclusion projection"
                )));
            }
            let mut spec = Map::new();
            for (p, f) in &fields {
                let flag = i32::from(matches!(f, Field::Include));
                spec.insert(p.clone(), Value::from(flag));
            }
            return Ok(Project {
                base: Some(Projection::parse(&Value::Object(spec))?),
                computed: Vec::new(),
            });
        }
        if !includes && fields.iter().all(|(_, f)| matches!(f, Field::Exclude)) {
            // Only `{"_id": 0}`: everything but _id.
            return Ok(Project {
                base: Some(Projection::parse(spec)?),
                computed: Vec::new(),
            });
        }
        let id = fields.iter().find(|(p, _)| p == "_id").map(|(_, f)| f);
        let keep_id = id.is_none() || matches!(id, Some(Field::Include));
        let mut spec = Map::new();
        let mut computed = Vec::new();
        for (p, f) in fields {
            match f {
                Field::Include if p != "_id" => {
                    spec.insert(p, Value::from(1));
                }
                Field::Computed(e) if p == "_id" => computed.insert(0, (vec![p], e)),
                Field::Computed(e) => {
                    computed.push((p.split('.').map(str::to_string).collect(), e));
                }
                _ => {}
            }
        }
        let base = match (spec.is_empty(), keep_id) {
            (true, false) => None,
            (true, true) => Some(Projection::parse(&herald_value::json!({"_id": 1}))?),
            (false, keep) => {
                if !keep {
                    spec.insert("_id".into(), Value::from(0));
                }
                Some(Projection::parse(&Value::Object(spec))?)
            }
        };
        Ok(Project { base, computed })
    }

    pub fn apply(&self, doc: &Value) -> Value {
        let mut out = match &self.base {
            Some(p) => p.apply(doc),
            None => Value::Object(Map::new()),
        };
        for (path, e) in &self.computed {
            if let (Some(v), Value::Object(m)) = (e.eval(doc), &mut out) {
                if path.len() == 1 && path[0] == "_id" {
                    m.shift_remove("_id");
                    let rest = std::mem::take(m);
                    m.insert("_id".into(), v);
                    m.extend(rest);
                } else {
                    set_path(m, path, v);
                }
            }
        }
        out
    }
}

/// Sets `path` in `m`, making documents on the way (a non-document on the way is replaced).
fn set_path(m: &mut Map<String, Value>, path: &[String], v: Value) {
    match path {
        [] => {}
        [last] => {
            m.insert(last.clone(), v);
        }
        [first, rest @ ..] => {
            let slot = m
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                set_path(inner, rest, v);
            }
        }
    }
}

/// Flattens nested projection documents into dotted paths and classifies each field.
fn flatten(
    m: &Map<String, Value>,
    prefix: &str,
    at: &str,
    out: &mut Vec<(String, Field)>,
) -> Result<(), QueryError> {
    for (k, v) in m {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if k.starts_with('$') {
            return Err(bad(format!("field name '{k}' starts with '$'")));
        }
        FieldPath::parse(&path).map_err(|e| bad(e.to_string()))?;
        let field = match v {
            Value::Bool(b) => include(*b),
            Value::Number(n) => include(n.as_f64() != Some(0.0)),
            Value::Object(inner) if inner.keys().next().is_some_and(|k| !k.starts_with('$')) => {
                flatten(inner, &path, at, out)?;
                continue;
            }
            Value::Object(inner) if inner.is_empty() => {
                return Err(bad(format!("'{path}' is an empty document")));
            }
            other => Field::Computed(AggExpr::parse(other, &format!("{at}.{path}"))?),
        };
        out.push((path, field));
    }
    Ok(())
}

fn include(yes: bool) -> Field {
    if yes {
        Field::Include
    } else {
        Field::Exclude
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn p(spec: Value, doc: Value) -> Value {
        Project::parse(&spec, "p").unwrap().apply(&doc)
    }

    #[test]
    fn inclusion_exclusion_and_computed_fields() {
        let doc = json!({"_id": 1, "a": {"b": 2, "c": 3}, "d": 4});
        assert_eq!(
            p(json!({"d": 1, "a.b": 1}), doc.clone()),
            json!({"_id": 1, "a": {"b": 2}, "d": 4})
        );
        assert_eq!(
            p(json!({"a": {"c": 1}}), doc.clone()),
            json!({"_id": 1, "a": {"c": 3}})
        );
        assert_eq!(p(json!({"a": 0}), doc.clone()), json!({"_id": 1, "d": 4}));
        assert_eq!(
            p(json!({"a": 0, "_id": 1}), doc.clone()),
            json!({"_id": 1, "d": 4})
        );
        assert_eq!(
            p(json!({"_id": 0}), doc.clone()),
            json!({"a": {"b": 2, "c": 3}, "d": 4})
        );
        assert_eq!(
            p(
                json!({"x": "$a.b", "_id": 0, "d": 1, "m": "$nope", "s": "lit"}),
                doc.clone()
            ),
            json!({"d": 4, "x": 2, "s": "lit"})
        );
        assert_eq!(
            p(json!({"d": 1, "_id": "$a.c"}), doc.clone()),
            json!({"_id": 3, "d": 4})
        );
        assert_eq!(
            p(json!({"y.z": "$d"}), doc),
            json!({"_id": 1, "y": {"z": 4}})
        );
    }

    #[test]
    fn bad_projections() {
        let e = |s: Value| Project::parse(&s, "p").unwrap_err().code();
        assert_eq!(e(json!({})), "bad_projection");
        assert_eq!(e(json!({"a": 0, "b": 1})), "bad_projection");
        assert_eq!(e(json!({"a": 0, "b": "$c"})), "bad_projection");
        assert_eq!(e(json!({"a": 0, "_id": "$c"})), "bad_projection");
        assert_eq!(e(json!({"a": 1, "a.b": 1})), "bad_projection");
        assert_eq!(e(json!({"a": {"$add": [1]}})), "unknown_operator");
    }
}
