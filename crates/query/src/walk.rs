//! MongoDB's traversal of a dotted path through a document, with implicit array expansion.
//!
//! Given `{"a": [{"b": 1}, {"c": 2}, 7]}` and the path `a.b`, MongoDB considers the values `1`
//! (from the first element) and *missing* (the second element has no `b`); the scalar `7` yields
//! nothing. At the end of the path an array yields each of its elements and then itself, unless the
//! operator wants the array untouched (`$size`, `$elemMatch`). Nested arrays are not expanded
//! implicitly, but a numeric segment (`a.0`) addresses an array position, and inside arrays of
//! documents a numeric segment is tried both as a field name and as a position.
//!
//! The walk calls a visitor for every candidate (`None` = missing) and stops as soon as the
//! visitor returns `true`, so `any`-style predicates never look further than they must. It does
//! not allocate.

use herald_value::{Map, Segment, Value};

/// What the walk does with an array found at the end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafArrays {
    /// Yield every element, then the array itself (equality, ranges, `$in`, `$type`, ...).
    Traverse,
    /// Yield only the array itself (`$size`, `$elemMatch`).
    Whole,
}

/// Visits every candidate value for `path` in the document `doc`. Returns `true` when the visitor
/// asked to stop.
#[inline]
pub fn walk<'a, F>(
    doc: &'a Map<String, Value>,
    path: &[Segment],
    leaf: LeafArrays,
    f: &mut F,
) -> bool
where
    F: FnMut(Option<&'a Value>) -> bool,
{
    let mut cur = doc;
    for (i, seg) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        match cur.get(&*seg.name) {
            None => return f(None),
            Some(v @ Value::Array(items)) => return walk_array(v, items, &path[i + 1..], leaf, f),
            Some(v) if last => return f(Some(v)),
            Some(Value::Object(m)) => cur = m,
            // A scalar in the middle of the path: the field is missing.
            Some(_) => return f(None),
        }
    }
    // An empty path names the document itself; callers never build one.
    false
}

fn walk_array<'a, F>(
    array: &'a Value,
    items: &'a [Value],
    rest: &[Segment],
    leaf: LeafArrays,
    f: &mut F,
) -> bool
where
    F: FnMut(Option<&'a Value>) -> bool,
{
    let Some(next) = rest.first() else {
        return match leaf {
            LeafArrays::Whole => f(Some(array)),
            LeafArrays::Traverse => items.iter().any(|e| f(Some(e))) || f(Some(array)),
        };
    };
    for (pos, item) in items.iter().enumerate() {
        let at_offset = next.index == Some(pos);
        match item {
            Value::Object(m) => {
                if walk(m, rest, leaf, f) {
                    return true;
                }
                if at_offset {
                    let stop = if rest.len() == 1 {
                        f(Some(item))
                    } else {
                        walk(m, &rest[1..], leaf, f)
                    };
                    if stop {
                        return true;
                    }
                }
            }
            _ if at_offset => {
                let stop = if rest.len() == 1 {
                    f(Some(item))
                } else if let Value::Array(inner) = item {
                    walk_array(item, inner, &rest[1..], leaf, f)
                } else {
                    false
                };
                if stop {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Resolves `path` when no array lies on it: `Ok(Some(v))` / `Ok(None)` (missing). Returns `Err`
/// as soon as an array is met, so the caller can fall back to the full walk. This is the fast path
/// for the common case of a scalar field.
#[inline]
pub fn resolve_plain<'a>(
    doc: &'a Map<String, Value>,
    path: &[Segment],
) -> Result<Option<&'a Value>, ()> {
    let mut cur = doc;
    for (i, seg) in path.iter().enumerate() {
        match cur.get(&*seg.name) {
            None => return Ok(None),
            Some(Value::Array(_)) => return Err(()),
            Some(v) if i + 1 == path.len() => return Ok(Some(v)),
            Some(Value::Object(m)) => cur = m,
            Some(_) => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::{json, FieldPath};

    fn collect(doc: Value, path: &str, leaf: LeafArrays) -> Vec<Option<Value>> {
        let p = FieldPath::parse(path).unwrap();
        let mut out = Vec::new();
        walk(doc.as_object().unwrap(), p.segments(), leaf, &mut |v| {
            out.push(v.cloned());
            false
        });
        out
    }

    #[test]
    fn arrays_of_documents() {
        let doc = json!({"a": [{"b": 1}, {"c": 2}, 7]});
        assert_eq!(
            collect(doc, "a.b", LeafArrays::Traverse),
            vec![Some(json!(1)), None]
        );
    }

    #[test]
    fn leaf_arrays() {
        let doc = json!({"a": [1, [2]]});
        assert_eq!(
            collect(doc.clone(), "a", LeafArrays::Traverse),
            vec![Some(json!(1)), Some(json!([2])), Some(json!([1, [2]]))]
        );
        assert_eq!(
            collect(doc, "a", LeafArrays::Whole),
            vec![Some(json!([1, [2]]))]
        );
    }

    #[test]
    fn numeric_segments() {
        let doc = json!({"a": [[1, 2], {"0": "x"}]});
        // Position 0 is the nested array; the document element is looked up by field name "0".
        assert_eq!(
            collect(doc.clone(), "a.0", LeafArrays::Traverse),
            vec![Some(json!([1, 2])), Some(json!("x"))]
        );
        assert_eq!(
            collect(doc.clone(), "a.1.0", LeafArrays::Traverse),
            vec![None, Some(json!("x"))]
        );
        assert_eq!(
            collect(doc, "a.0.1", LeafArrays::Traverse),
            vec![Some(json!(2)), None]
        );
        // Position and field name are both tried inside an array of documents.
        let doc = json!({"a": [{"0": "f"}, {"b": 1}]});
        assert_eq!(
            collect(doc, "a.0", LeafArrays::Traverse),
            vec![Some(json!("f")), Some(json!({"0": "f"})), None]
        );
    }

    #[test]
    fn nested_arrays_are_not_expanded() {
        let doc = json!({"a": [[{"b": 1}]]});
        assert!(collect(doc, "a.b", LeafArrays::Traverse).is_empty());
    }

    #[test]
    fn scalar_in_the_middle_is_missing() {
        assert_eq!(
            collect(json!({"a": 5}), "a.b", LeafArrays::Traverse),
            vec![None]
        );
        assert!(collect(json!({"a": [5]}), "a.b", LeafArrays::Traverse).is_empty());
    }
}
