//! Which index entries a document has: automatic single-field entries for every scalar reached
//! by a field path (array elements included, under the array's path, as MongoDB's implicit
//! traversal reaches them) and composite entries for declared indexes.
//!
//! Objects, arrays and values inside nested arrays are not indexed; queries on them scan. A write
//! replaces exactly the entries of the before-image with those of the after-image.
//!
//! A string longer than the database's `string_key_bytes_max` ([`STRING_KEY_BYTES_MAX`] for
//! stores created since it exists) is indexed by its first that many bytes
//! (`herald_value::encode_key_limited`), so a 700-byte text field costs an index entry of
//! ~150 bytes, not ~720. Index plans only yield candidates, which the executor checks with the
//! full filter, so results are unchanged; the paths where a string was cut are recorded
//! (`truncated`) and never provide sort order.

use crate::catalog::{CollectionCatalog, CompositeIndex};
use crate::error::DbError;
use crate::layout::{group_scope, group_suffix, index_key, index_prefix};
use crate::names::group_of;
use herald_query::{walk, Direction, LeafArrays};
use herald_value::{encode_key_desc_limited, encode_key_limited, FieldPath, Value};
use std::collections::BTreeSet;

/// Most index entries one document may have (all indexes together).
pub const INDEX_ENTRIES_PER_DOC_MAX: usize = 20_000;
/// Most entries one document may have in one composite index (the cross product of its fields).
pub const COMPOSITE_ENTRIES_PER_DOC_MAX: usize = 256;
/// Longest string an index entry holds whole, in UTF-8 bytes, in stores created since strings
/// are cut (older stores keep whole strings: their catalog has no limit). Long enough that
/// equality on identifiers, names, e-mail addresses and most URLs stays exact in the index.
pub const STRING_KEY_BYTES_MAX: usize = 128;

/// The name of the automatic index of a field path.
pub fn field_index_name(path: &str) -> String {
    format!("f:{path}")
}

/// `index_key(&index_prefix(collection, &field_index_name(path)), encoded, id)` in one
/// allocation: a document has one such key per indexed scalar (~30 for a 1 KB event), and the
/// three intermediate buffers were a tenth of the storage writer's time at high ingest rates.
fn field_index_key(collection: &str, path: &str, encoded: &[u8], id: &str) -> Vec<u8> {
    let len = collection.len() + path.len() + encoded.len() + id.len() + 4;
    let mut k = Vec::with_capacity(len);
    k.extend_from_slice(collection.as_bytes());
    k.push(0);
    k.extend_from_slice(b"f:");
    k.extend_from_slice(path.as_bytes());
    k.push(0);
    k.extend_from_slice(encoded);
    k.extend_from_slice(id.as_bytes());
    debug_assert_eq!(k.len(), len);
    k
}

pub fn composite_index_name(name: &str) -> String {
    format!("c:{name}")
}

/// The full index keys of `doc` (with id `id`) in `collection`, the paths along which it has
/// arrays and the paths where a string was cut (new ones are recorded by the caller).
#[derive(Default)]
pub struct Entries {
    pub keys: BTreeSet<Vec<u8>>,
    pub array_paths: BTreeSet<String>,
    pub truncated_paths: BTreeSet<String>,
    /// Paths where the document has an array, and where it has an object (not the root); see
    /// `CollectionCatalog::arrays`. Not collected under exempt paths.
    pub array_nodes: BTreeSet<String>,
    pub object_nodes: BTreeSet<String>,
}

/// The index entries of `doc`, strings cut at `string_key_bytes_max` bytes.
pub fn entries(
    collection: &str,
    id: &str,
    doc: &Value,
    cat: Option<&CollectionCatalog>,
    string_key_bytes_max: usize,
) -> Result<Entries, DbError> {
    let mut out = Entries::default();
    let mut path = String::new();
    let mut enc = Vec::with_capacity(32);
    if let Value::Object(m) = doc {
        for (k, v) in m {
            if k == "_id" {
                continue; // _id is the document key itself
            }
            path.clear();
            path.push_str(k);
            scalars(v, &mut path, false, &mut |p, v, under_array| {
                if cat.is_some_and(|c| c.is_exempt(p)) {
                    return Ok(());
                }
                let nodes = match v {
                    Value::Array(_) => Some(&mut out.array_nodes),
                    Value::Object(_) => Some(&mut out.object_nodes),
                    _ => None,
                };
                if let Some(nodes) = nodes {
                    if !nodes.contains(p) {
                        nodes.insert(p.to_string());
                    }
                    return Ok(());
                }
                // Array elements and cut strings repeat their path: copy it only once.
                if under_array && !out.array_paths.contains(p) {
                    out.array_paths.insert(p.to_string());
                }
                enc.clear();
                if encode_key_limited(v, string_key_bytes_max, &mut enc)
                    && !out.truncated_paths.contains(p)
                {
                    out.truncated_paths.insert(p.to_string());
                }
                out.keys.insert(field_index_key(collection, p, &enc, id));
                if out.keys.len() > INDEX_ENTRIES_PER_DOC_MAX {
                    return Err(too_many());
                }
                Ok(())
            })?;
        }
        if let Some(cat) = cat {
            for ci in &cat.composites {
                let prefix = index_prefix(collection, &composite_index_name(&ci.name));
                composite(&prefix, id, m, ci, string_key_bytes_max, &mut out)?;
            }
        }
    }
    if out.keys.len() > INDEX_ENTRIES_PER_DOC_MAX {
        return Err(too_many());
    }
    Ok(out)
}

fn too_many() -> DbError {
    DbError::LimitExceeded(format!(
        "document would have more than {INDEX_ENTRIES_PER_DOC_MAX} index entries; exempt large arrays or maps from indexing"
    ))
}

/// Visits every indexable scalar below `v`, whose path is `path`, and every array and object
/// (before what is inside them).
fn scalars(
    v: &Value,
    path: &mut String,
    under_array: bool,
    f: &mut dyn FnMut(&str, &Value, bool) -> Result<(), DbError>,
) -> Result<(), DbError> {
    match v {
        Value::Object(m) => {
            f(path, v, under_array)?;
            for (k, child) in m {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                scalars(child, path, under_array, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Array(items) => {
            f(path, v, under_array)?;
            for item in items {
                match item {
                    // Implicit traversal goes one array deep; nested arrays are not expanded.
                    Value::Array(_) => {}
                    _ => scalars(item, path, true, f)?,
                }
            }
            // An empty array has no entries; no range or equality on it can match, so it never
            // needs to be found through this index.
            Ok(())
        }
        scalar => f(path, scalar, under_array),
    }
}

/// The name of a composite index of collection-group scope, under its group's prefix.
pub fn group_index_name(name: &str) -> String {
    format!("g:{name}")
}

/// The entries of `doc` (`id` in `collection`) in the group-scoped composite indexes of its
/// collection's group (`groups`: those indexes), each key `group-prefix ++ values ++ id 0x00
/// path` and each value [`index_value`](crate::layout::index_value) of that suffix
/// (`layout::group_suffix`). Cut strings are reported in `truncated_paths`, marked on the
/// collection like its own indexes' ones.
pub fn group_entries(
    collection: &str,
    id: &str,
    doc: &Value,
    groups: &[CompositeIndex],
    string_key_bytes_max: usize,
) -> Result<Entries, DbError> {
    let mut out = Entries::default();
    let (Value::Object(m), false) = (doc, groups.is_empty()) else {
        return Ok(out);
    };
    let scope = group_scope(group_of(collection));
    let suffix = group_suffix(collection, id);
    for ci in groups {
        let prefix = index_prefix(&scope, &group_index_name(&ci.name));
        composite(&prefix, &suffix, m, ci, string_key_bytes_max, &mut out)?;
    }
    Ok(out)
}

/// One composite index's keys for a document: `prefix ++ values ++ id` (`id`: the document id,
/// or a group entry's suffix).
fn composite(
    prefix: &[u8],
    id: &str,
    doc: &herald_value::Map<String, Value>,
    ci: &CompositeIndex,
    string_key_bytes_max: usize,
    out: &mut Entries,
) -> Result<(), DbError> {
    // Per field, the distinct scalars its path reaches.
    let mut per_field: Vec<Vec<Vec<u8>>> = Vec::with_capacity(ci.fields.len());
    for field in &ci.fields {
        let path = FieldPath::parse(&field.path).map_err(|e| DbError::Corrupt(e.to_string()))?;
        let mut vals: BTreeSet<Vec<u8>> = BTreeSet::new();
        walk(doc, path.segments(), LeafArrays::Traverse, &mut |v| {
            if let Some(v) = v {
                if !matches!(v, Value::Array(_) | Value::Object(_)) {
                    let mut e = Vec::new();
                    let cut = if field.direction == Direction::Asc {
                        encode_key_limited(v, string_key_bytes_max, &mut e)
                    } else {
                        encode_key_desc_limited(v, string_key_bytes_max, &mut e)
                    };
                    if cut {
                        out.truncated_paths.insert(field.path.clone());
                    }
                    vals.insert(e);
                }
            }
            false
        });
        if vals.is_empty() {
            // A missing field (or one without scalars) is indexed as null, as in MongoDB, so a
            // query that constrains only leading fields still finds the document.
            let mut e = Vec::new();
            if field.direction == Direction::Asc {
                encode_key_limited(&Value::Null, 0, &mut e);
            } else {
                encode_key_desc_limited(&Value::Null, 0, &mut e);
            }
            vals.insert(e);
        }
        per_field.push(vals.into_iter().collect());
    }
    let total: usize = per_field.iter().map(Vec::len).product();
    if total > COMPOSITE_ENTRIES_PER_DOC_MAX {
        return Err(DbError::LimitExceeded(format!(
            "document would have {total} entries in composite index {} (limit {COMPOSITE_ENTRIES_PER_DOC_MAX})",
            ci.name
        )));
    }
    let mut combo = vec![0usize; per_field.len()];
    loop {
        let mut enc = Vec::new();
        for (i, &j) in combo.iter().enumerate() {
            enc.extend_from_slice(&per_field[i][j]);
        }
        out.keys.insert(index_key(prefix, &enc, id));
        // Advance the odometer.
        let mut i = combo.len();
        loop {
            if i == 0 {
                return Ok(());
            }
            i -= 1;
            combo[i] += 1;
            if combo[i] < per_field[i].len() {
                break;
            }
            combo[i] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn indexes_scalars_and_array_elements_under_the_array_path() {
        let doc = json!({"_id": "x", "a": 1, "tags": ["p", "q", ["nested"]], "items": [{"sku": "A"}, {"sku": "B"}], "o": {"n": null}});
        let e = entries("c", "x", &doc, None, usize::MAX).unwrap();
        assert_eq!(e.keys.len(), 6); // a, tags:p, tags:q, items.sku:A, items.sku:B, o.n:null
        assert!(e.array_paths.contains("tags"));
        assert!(e.array_paths.contains("items.sku"));
        assert!(!e.array_paths.contains("a"));
    }

    #[test]
    fn a_field_key_is_the_prefix_the_encoded_value_and_the_id() {
        let doc = json!({"_id": "x", "user": {"geo": {"lat": 1.5}}, "tags": ["p", "p"]});
        let e = entries("events", "x", &doc, None, usize::MAX).unwrap();
        let composed = |path: &str, v: &Value| {
            let mut enc = Vec::new();
            encode_key_limited(v, usize::MAX, &mut enc);
            index_key(&index_prefix("events", &field_index_name(path)), &enc, "x")
        };
        let want: BTreeSet<Vec<u8>> = [
            composed("user.geo.lat", &json!(1.5)),
            composed("tags", &json!("p")),
        ]
        .into();
        assert_eq!(e.keys, want);
        assert_eq!(e.array_paths, ["tags".to_string()].into());
    }

    #[test]
    fn composite_indexes_a_missing_field_as_null() {
        use crate::catalog::{IndexField, IndexState};
        let field = |path: &str, direction| IndexField {
            path: path.into(),
            direction,
        };
        let mut cat = CollectionCatalog::default();
        cat.composites.push(CompositeIndex {
            name: "gnt".into(),
            fields: vec![
                field("g", Direction::Asc),
                field("n", Direction::Asc),
                field("t", Direction::Desc),
            ],
            state: IndexState::Ready,
        });
        let prefix = index_prefix("c", &composite_index_name("gnt"));
        for doc in [
            json!({"_id": "x", "g": "a", "n": 1}),
            json!({"_id": "x", "n": 1, "t": {"o": 1}}),
        ] {
            let keys = entries("c", "x", &doc, Some(&cat), usize::MAX)
                .unwrap()
                .keys;
            assert_eq!(keys.iter().filter(|k| k.starts_with(&prefix)).count(), 1);
        }
    }

    #[test]
    fn long_strings_are_cut_and_their_paths_reported() {
        let long = "x".repeat(STRING_KEY_BYTES_MAX + 1);
        let doc = json!({"_id": "x", "s": long, "t": "short", "a": [long]});
        let e = entries("c", "x", &doc, None, STRING_KEY_BYTES_MAX).unwrap();
        assert_eq!(
            e.truncated_paths,
            BTreeSet::from(["a".to_string(), "s".to_string()])
        );
        let longest = e.keys.iter().map(Vec::len).max().unwrap();
        assert!(longest < STRING_KEY_BYTES_MAX + 20, "{longest}");
        let whole = entries("c", "x", &doc, None, usize::MAX).unwrap();
        assert!(whole.truncated_paths.is_empty());
        assert!(whole.keys.iter().map(Vec::len).max().unwrap() > STRING_KEY_BYTES_MAX);
    }

    #[test]
    fn exemptions_skip_paths_and_below() {
        let mut cat = CollectionCatalog::default();
        cat.exemptions.insert("o".into());
        let doc = json!({"_id": "x", "o": {"n": 1, "m": 2}, "od": 3});
        assert_eq!(
            entries("c", "x", &doc, Some(&cat), usize::MAX)
                .unwrap()
                .keys
                .len(),
            1
        );
    }
}
