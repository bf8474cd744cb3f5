//! The type groups of one path: views indexed by a `$type` (or `$exists: true`) conjunct, found
//! by the type bits of the values the path reaches in an image.
//!
//! `$exists: true` holds when the path reaches any value, `$type` when it reaches one of the
//! set's types; both walk the path as the filter does (array elements, then the array itself).
//! So a probe walks the path once, takes the union of the type bits it met, and adds the views
//! of each bit: exactly the views whose conjunct holds. `$exists: true` is the set of every type.

use super::{ViewId, ViewSet};
use herald_query::{walk, LeafArrays, TypeSet};
use herald_value::{FieldPath, Map, Value};

/// The type bits a `TypeSet` can hold.
const BITS: usize = 16;

/// Every type a stored value can have (`TypeSet::of` gives one of these): `$exists: true`.
pub(super) const ANY: u16 = TypeSet::DOUBLE
    | TypeSet::STRING
    | TypeSet::OBJECT
    | TypeSet::ARRAY
    | TypeSet::BOOL
    | TypeSet::NULL
    | TypeSet::INT
    | TypeSet::LONG;

pub(super) struct Types {
    pub(super) parsed: FieldPath,
    /// Per type bit, the views whose set holds it (a view is in each of its bits).
    by_bit: [Vec<ViewId>; BITS],
    pub(super) views: usize,
}

impl Types {
    pub(super) fn new(parsed: FieldPath) -> Types {
        Types {
            parsed,
            by_bit: Default::default(),
            views: 0,
        }
    }

    pub(super) fn add(&mut self, key: ViewId, set: u16) {
        for (bit, views) in self.by_bit.iter_mut().enumerate() {
            if set & (1 << bit) != 0 {
                views.push(key);
            }
        }
        self.views += 1;
    }

    pub(super) fn remove(&mut self, key: ViewId, set: u16) {
        for (bit, views) in self.by_bit.iter_mut().enumerate() {
            if set & (1 << bit) != 0 {
                if let Some(i) = views.iter().position(|v| *v == key) {
                    views.swap_remove(i);
                }
            }
        }
        self.views -= 1;
    }

    pub(super) fn probe(&self, doc: &Map<String, Value>, out: &mut ViewSet) {
        let mut met = 0u16;
        walk(
            doc,
            self.parsed.segments(),
            LeafArrays::Traverse,
            &mut |v| {
                if let Some(v) = v {
                    met |= TypeSet::of(v);
                }
                false
            },
        );
        for (bit, views) in self.by_bit.iter().enumerate() {
            if met & (1 << bit) != 0 {
                out.extend(views.iter().copied());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn any_holds_the_type_of_every_value() {
        for v in [
            json!(1),
            json!(1.5),
            json!(1u64 << 40),
            json!(u64::MAX),
            json!("s"),
            json!([]),
            json!({}),
            json!(null),
            json!(true),
        ] {
            assert_ne!(TypeSet::of(&v) & ANY, 0, "{v}");
        }
    }
}
