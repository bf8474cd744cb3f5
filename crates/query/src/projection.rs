//! Projections: which fields of each result document are returned.
//!
//! Inclusion (`{"title": 1, "author.name": 1}`) keeps the named paths; exclusion
//! (`{"body": 0}`) drops them. A nested document is a shorthand for dotted paths, as in
//! MongoDB (`{"author": {"name": 1}}` is `{"author.name": 1}`). `_id` is kept unless excluded
//! explicitly, and is the only field that may be excluded in an inclusion projection; a path
//! inside `_id` (`_id.a`) is projected like any other path, and then `_id` is not kept whole.
//! Through arrays, an inclusion keeps only the embedded documents (projected); an exclusion
//! projects embedded documents and keeps the rest. Output keeps the document's own field order.

use crate::error::QueryError;
use crate::limits::PROJECTION_FIELDS_MAX;
use herald_value::{FieldPath, Map, Num, Value};

#[derive(Debug, Clone, Default)]
pub struct Projection {
    mode: Mode,
    tree: Node,
    /// Whether `_id` appears in the output.
    keep_id: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Mode {
    #[default]
    All,
    Include,
    Exclude,
}

/// A trie of projected paths; `leaf` marks the end of a named path.
#[derive(Debug, Clone, Default)]
struct Node {
    leaf: bool,
    children: Vec<(String, Node)>,
}

impl Node {
    fn child(&self, name: &str) -> Option<&Node> {
        self.children
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, n)| n)
    }

    fn insert(&mut self, path: &FieldPath) -> Result<(), QueryError> {
        let mut node = self;
        for (i, seg) in path.segments().iter().enumerate() {
            if node.leaf {
                return Err(collision(path));
            }
            let pos = match node.children.iter().position(|(k, _)| **k == *seg.name) {
                Some(p) => p,
                None => {
                    node.children.push((seg.name.to_string(), Node::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[pos].1;
            if i + 1 == path.len() && (node.leaf || !node.children.is_empty()) {
                return Err(collision(path));
            }
        }
        node.leaf = true;
        Ok(())
    }
}

fn collision(path: &FieldPath) -> QueryError {
    QueryError::BadProjection(format!("path collision at '{path}'"))
}

impl Projection {
    /// Parses a projection; `null` or `{}` returns whole documents.
    pub fn parse(spec: &Value) -> Result<Projection, QueryError> {
        let map = match spec {
            Value::Null => return Ok(Projection::all()),
            Value::Object(m) => m,
            other => {
                return Err(QueryError::BadProjection(format!(
                    "projection must be an object, got {other}"
                )))
            }
        };
        let mut fields = Vec::new();
        flatten(map, "", &mut fields)?;
        let mut mode = Mode::All;
        let mut keep_id = true;
        let mut tree = Node::default();
        for (field, v) in &fields {
            let field = field.as_str();
            let include = match v {
                Value::Bool(b) => *b,
                Value::Number(n) => Num::of(n).as_f64() != 0.0,
                _ => {
                    return Err(QueryError::BadProjection(format!(
                        "projection value for '{field}' must be 0, 1, true or false (projection operators are not supported)"
                    )))
                }
            };
            if field.contains('$') {
                return Err(QueryError::BadProjection(format!(
                    "positional and operator projections are not supported: '{field}'"
                )));
            }
            let path =
                FieldPath::parse(field).map_err(|e| QueryError::BadProjection(e.to_string()))?;
            if field == "_id" {
                keep_id = include;
                continue;
            }
            let want = if include {
                Mode::Include
            } else {
                Mode::Exclude
            };
            if mode != Mode::All && mode != want {
                return Err(QueryError::BadProjection(
                    "cannot mix inclusion and exclusion (except for _id)".into(),
                ));
            }
            mode = want;
            tree.insert(&path)?;
        }
        if fields.iter().any(|(f, _)| f == "_id") && tree.child("_id").is_some() {
            return Err(QueryError::BadProjection(
                "path collision at '_id': it is named whole and with a path inside it".into(),
            ));
        }
        if mode == Mode::All && !keep_id {
            mode = Mode::Exclude;
        }
        if mode == Mode::All && fields.iter().any(|(f, _)| f == "_id") {
            // {"_id": 1} alone is an inclusion of just _id.
            mode = Mode::Include;
        }
        Ok(Projection {
            mode,
            tree,
            keep_id,
        })
    }

    pub fn all() -> Projection {
        Projection::default()
    }

    pub fn is_all(&self) -> bool {
        self.mode == Mode::All
    }

    /// Applies the projection to one document.
    pub fn apply(&self, doc: &Value) -> Value {
        let Value::Object(m) = doc else {
            return doc.clone();
        };
        match self.mode {
            Mode::All => doc.clone(),
            Mode::Include => Value::Object(include_object(m, &self.tree, Some(self.keep_id))),
            Mode::Exclude => Value::Object(exclude_object(m, &self.tree, Some(self.keep_id))),
        }
    }
}

/// The projection's (path, value) pairs with nested documents spelled as dotted paths: a
/// value that is a non-empty object whose keys are not operators is a sub-projection.
fn flatten<'a>(
    map: &'a Map<String, Value>,
    prefix: &str,
    out: &mut Vec<(String, &'a Value)>,
) -> Result<(), QueryError> {
    for (k, v) in map {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(sub) if sub.is_empty() => {
                return Err(QueryError::BadProjection(format!(
                    "an empty sub-projection at '{path}' is not valid"
                )))
            }
            Value::Object(sub) if !sub.keys().any(|k| k.starts_with('$')) => {
                flatten(sub, &path, out)?
            }
            _ => out.push((path, v)),
        }
        if out.len() > PROJECTION_FIELDS_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "projection has more than {PROJECTION_FIELDS_MAX} fields"
            )));
        }
    }
    Ok(())
}

/// `top_id` is `Some(keep)` at the document root, where `_id` has its own rule unless the
/// projection names paths inside it.
fn include_object(m: &Map<String, Value>, node: &Node, top_id: Option<bool>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in m {
        if top_id.is_some() && k == "_id" && node.child(k).is_none() {
            if top_id == Some(true) {
                out.insert(k.clone(), v.clone());
            }
            continue;
        }
        let Some(child) = node.child(k) else { continue };
        if child.leaf {
            out.insert(k.clone(), v.clone());
        } else if let Some(p) = include_value(v, child) {
            out.insert(k.clone(), p);
        }
    }
    out
}

fn include_value(v: &Value, node: &Node) -> Option<Value> {
    match v {
        Value::Object(m) => Some(Value::Object(include_object(m, node, None))),
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .filter_map(|e| match e {
                    Value::Object(_) | Value::Array(_) => include_value(e, node),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

fn exclude_object(m: &Map<String, Value>, node: &Node, top_id: Option<bool>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in m {
        if top_id.is_some() && k == "_id" && node.child(k).is_none() {
            if top_id == Some(true) {
                out.insert(k.clone(), v.clone());
            }
            continue;
        }
        match node.child(k) {
            None => {
                out.insert(k.clone(), v.clone());
            }
            Some(child) if child.leaf => {}
            Some(child) => {
                out.insert(k.clone(), exclude_value(v, child));
            }
        }
    }
    out
}

fn exclude_value(v: &Value, node: &Node) -> Value {
    match v {
        Value::Object(m) => Value::Object(exclude_object(m, node, None)),
        Value::Array(items) => Value::Array(items.iter().map(|e| exclude_value(e, node)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn p(spec: Value, doc: Value) -> Value {
        Projection::parse(&spec).unwrap().apply(&doc)
    }

    #[test]
    fn inclusion_and_exclusion() {
        let doc = json!({"_id": "x", "a": [{"b": 1, "c": 2}, 3], "d": {"e": 1, "f": 2}, "g": 5});
        assert_eq!(
            p(json!({"a.b": 1, "d.f": 1}), doc.clone()),
            json!({"_id": "x", "a": [{"b": 1}], "d": {"f": 2}})
        );
        assert_eq!(
            p(json!({"a.b": 0, "_id": 0}), doc.clone()),
            json!({"a": [{"c": 2}, 3], "d": {"e": 1, "f": 2}, "g": 5})
        );
        assert_eq!(p(json!({"_id": 1}), doc.clone()), json!({"_id": "x"}));
        assert_eq!(p(json!({"_id": 0}), doc.clone())["g"], json!(5));
        assert_eq!(p(json!({}), doc.clone()), doc);
    }

    #[test]
    fn nested_documents_are_dotted_paths() {
        let doc = json!({"_id": 1, "a": {"b": {"c": 1, "d": 2, "e": 3}, "f": 4}, "x": 5});
        assert_eq!(
            p(json!({"a": {"b": {"c": 1}}}), doc.clone()),
            p(json!({"a.b.c": 1}), doc.clone())
        );
        assert_eq!(
            p(json!({"a": {"b.c": {"d": 0, "e": 0}}}), doc.clone()),
            p(json!({"a.b.c.d": 0, "a.b.c.e": 0}), doc.clone())
        );
        assert_eq!(
            p(json!({"a": {"b": {"d": 0, "e": 0}}}), doc.clone()),
            json!({"_id": 1, "a": {"b": {"c": 1}, "f": 4}, "x": 5})
        );
        for bad in [json!({"a": {}}), json!({"a": {"b": 1}, "a.b": 1})] {
            assert_eq!(
                Projection::parse(&bad).unwrap_err().code(),
                "bad_projection"
            );
        }
    }

    #[test]
    fn paths_inside_id() {
        let sub = json!({"_id": {"a": 1, "b": 2}, "x": 3});
        let scalar = json!({"_id": 7, "x": 3});
        assert_eq!(
            p(json!({"_id.a": 1}), sub.clone()),
            json!({"_id": {"a": 1}})
        );
        // A scalar `_id` has no `a`: nothing of it is kept.
        assert_eq!(p(json!({"_id.a": 1}), scalar.clone()), json!({}));
        assert_eq!(
            p(json!({"_id.a": 0}), sub),
            json!({"_id": {"b": 2}, "x": 3})
        );
        assert_eq!(p(json!({"_id.a": 0}), scalar.clone()), scalar);
        assert_eq!(
            Projection::parse(&json!({"_id": 1, "_id.a": 1}))
                .unwrap_err()
                .code(),
            "bad_projection"
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            Projection::parse(&json!({"a": 1, "b": 0}))
                .unwrap_err()
                .code(),
            "bad_projection"
        );
        assert_eq!(
            Projection::parse(&json!({"a": 1, "a.b": 1}))
                .unwrap_err()
                .code(),
            "bad_projection"
        );
        assert_eq!(
            Projection::parse(&json!({"a": {"$slice": 1}}))
                .unwrap_err()
                .code(),
            "bad_projection"
        );
        assert_eq!(
            Projection::parse(&json!({"a.$": 1})).unwrap_err().code(),
            "bad_projection"
        );
    }
}
