//! The index catalog: per collection, the single-field exemptions, the composite indexes and the
//! paths known to hold arrays ("multikey") or cut strings; for the database, how long a string
//! an index entry holds whole. Persisted as JSON in the `meta` table and changed
//! only by write jobs, so every change commits atomically with the writes it affects.

use herald_query::Direction;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Catalog {
    pub collections: BTreeMap<String, CollectionCatalog>,
    /// Strings longer than this (in bytes) are cut in index entries. Fixed when the store is
    /// created; absent in stores from before strings were cut, whose entries hold every string
    /// whole (and keep doing so, so one index never mixes the two forms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_key_bytes_max: Option<usize>,
    /// Counts the catalog changes made since the database opened (not persisted). Index
    /// entries computed outside the writer are used only if it has not moved since.
    #[serde(skip)]
    pub generation: u64,
    /// Whether the collections' `arrays` and `objects` record every document's shape: true for
    /// stores created since they exist. Without it no index provides sort order unless the
    /// filter holds the sort field to a range of scalars (what the planner did before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shapes_tracked: bool,
    /// Composite indexes of collection-group scope, by group name (the last segment of the
    /// collections they cover): kept for every collection of the group, existing or future.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, Vec<CompositeIndex>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CollectionCatalog {
    /// Field paths (and everything below them) without automatic single-field indexes.
    #[serde(default)]
    pub exemptions: BTreeSet<String>,
    #[serde(default)]
    pub composites: Vec<CompositeIndex>,
    /// Paths along which some document ever had an array. Sticky: never cleared, so an index
    /// on such a path is never used to produce sort order (arrays sort by min/max element).
    #[serde(default)]
    pub multikey: BTreeSet<String>,
    /// Paths where some index entry holds a cut string (see `indexer`). Sticky like
    /// `multikey`: ties among cut strings are in id order, so such an index never provides
    /// sort order.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub truncated: BTreeSet<String>,
    /// Paths where some document ever had an array value (empty, nested or not), and paths
    /// where one had an object value. Sticky like `multikey`. A document's sort key at such a
    /// path is not the one scalar its index entries place it by (an object sorts after every
    /// string, an empty array below null, an array by its min or max), so an index serves a
    /// sort by a path only when neither it nor a path above it is an array and it is no object.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub arrays: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub objects: BTreeSet<String>,
    /// Field paths whose automatic index is being (re)built after an exemption was lifted; the
    /// planner does not use them until the build finishes.
    #[serde(default)]
    pub building_fields: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompositeIndex {
    pub name: String,
    pub fields: Vec<IndexField>,
    pub state: IndexState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexField {
    pub path: String,
    #[serde(with = "direction")]
    pub direction: Direction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexState {
    /// Maintained by every write, being filled for existing documents; not used by queries.
    Building,
    Ready,
}

mod direction {
    use herald_query::Direction;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Direction, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i8(if *d == Direction::Asc { 1 } else { -1 })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Direction, D::Error> {
        Ok(if i8::deserialize(d)? >= 0 {
            Direction::Asc
        } else {
            Direction::Desc
        })
    }
}

impl CollectionCatalog {
    /// Whether `path` is exempt from automatic indexing: it or a path above it is listed.
    pub fn is_exempt(&self, path: &str) -> bool {
        covers(&self.exemptions, path)
    }

    /// Whether the automatic index of `path` is being rebuilt: it or a path above it had its
    /// exemption lifted and the build has not finished.
    pub fn is_building(&self, path: &str) -> bool {
        covers(&self.building_fields, path)
    }

    /// Whether every document's sort key at `path` is the single scalar (or null, for a missing
    /// value) its index entries are placed by: no document had an array at the path or above
    /// it, nor an object at it, nor a cut string. Only meaningful when shapes are tracked.
    pub fn orders_by(&self, path: &str) -> bool {
        if self.objects.contains(path)
            || self.multikey.contains(path)
            || self.truncated.contains(path)
        {
            return false;
        }
        let mut above = path;
        loop {
            if self.arrays.contains(above) {
                return false;
            }
            match above.rfind('.') {
                Some(i) => above = &above[..i],
                None => return true,
            }
        }
    }
}

/// Whether `paths` holds `path` or a path above it.
fn covers(paths: &BTreeSet<String>, path: &str) -> bool {
    paths.iter().any(|e| {
        path == e || (path.starts_with(e.as_str()) && path.as_bytes().get(e.len()) == Some(&b'.'))
    })
}

impl Catalog {
    pub fn collection(&self, name: &str) -> Option<&CollectionCatalog> {
        self.collections.get(name)
    }

    /// The catalog a collection group's plans see: its group-scoped composite indexes, and
    /// the union of the exemptions, rebuilding paths and shape marks of every collection of
    /// the group the catalog knows (a mark in any one of them keeps a group index from giving
    /// order; a collection the catalog does not know has no marks).
    pub fn group(&self, group: &str) -> CollectionCatalog {
        let mut out = CollectionCatalog {
            composites: self.groups.get(group).cloned().unwrap_or_default(),
            ..CollectionCatalog::default()
        };
        for (name, cc) in &self.collections {
            if name.rsplit('/').next() != Some(group) {
                continue;
            }
            out.exemptions.extend(cc.exemptions.iter().cloned());
            out.building_fields
                .extend(cc.building_fields.iter().cloned());
            out.multikey.extend(cc.multikey.iter().cloned());
            out.truncated.extend(cc.truncated.iter().cloned());
            out.arrays.extend(cc.arrays.iter().cloned());
            out.objects.extend(cc.objects.iter().cloned());
        }
        out
    }

    /// The longest string index entries hold whole (unlimited in old stores).
    pub fn key_string_limit(&self) -> usize {
        self.string_key_bytes_max.unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path gives order unless it or a path above it held an array, it held an object, or it
    /// is multikey or cut; an object above it is fine (`a: {b: 1}` sorts by `a.b` = 1).
    #[test]
    fn orders_by_looks_at_the_path_and_the_arrays_above_it() {
        let cc = CollectionCatalog {
            arrays: ["a".to_string(), "m.n".to_string()].into(),
            objects: ["o".to_string(), "m".to_string()].into(),
            multikey: ["k".to_string()].into(),
            truncated: ["s".to_string()].into(),
            ..CollectionCatalog::default()
        };
        for (path, orders) in [
            ("a", false),
            ("a.b", false),
            ("m.n.x", false),
            ("o", false),
            ("o.x", true),
            ("m.x", true),
            ("k", false),
            ("s", false),
            ("ab", true),
            ("t", true),
        ] {
            assert_eq!(cc.orders_by(path), orders, "{path}");
        }
    }
}
