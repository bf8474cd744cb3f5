//! The sort key of one document, as MongoDB's key generator computes it: the value a key takes
//! ([`KeyValue`]), its order, and the direction that picks the best candidate. `sort.rs` builds
//! sort specifications and result order on top of this; nothing here knows a [`Sort`].
//!
//! [`Sort`]: crate::Sort
//!
//! A path that crosses an array yields one candidate value per element (null for elements that
//! have no such field, and for an empty array in the middle of the path; an empty array at the end
//! of the path is its own value, below null). A document's sort key is the best candidate: the
//! smallest for an ascending key, the largest for a descending one.
//!
//! With several sort keys, paths that cross *the same* array are expanded together, so the
//! candidate tuples pair values from the same element: sorting `{"a.c": 1, "a.b": 1}` over
//! `a: [{b: 4, c: 1}, {b: 1, c: 2}]` considers (1, 4) and (2, 1), not (1, 1). The key is the
//! best tuple in sort order. Paths crossing different arrays expand independently.

use herald_value::{compare, Map, Segment, Value};
use std::cmp::Ordering;

/// The direction of one sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Asc,
    Desc,
}

impl Direction {
    /// `ord`, the ascending order of two key values, seen in this direction.
    pub(crate) fn orient(self, ord: Ordering) -> Ordering {
        match self {
            Direction::Asc => ord,
            Direction::Desc => ord.reverse(),
        }
    }
}

/// The value one sort key takes for one document.
#[derive(Debug, Clone, Copy)]
pub enum KeyValue<'a> {
    EmptyArray,
    Null,
    Value(&'a Value),
}

impl KeyValue<'_> {
    fn rank(&self) -> u8 {
        match self {
            KeyValue::EmptyArray => 0,
            KeyValue::Null | KeyValue::Value(Value::Null) => 1,
            KeyValue::Value(_) => 2,
        }
    }

    /// The ascending order of two values of one key: an empty array, then null (and missing),
    /// then every other value in MongoDB's comparison order.
    pub fn order(&self, other: &KeyValue<'_>) -> Ordering {
        match (self, other) {
            (KeyValue::Value(a), KeyValue::Value(b)) => compare(a, b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// Most candidate tuples examined per document; past it the best found so far is used. Only
/// documents with huge parallel arrays under several sort keys come near it.
const TUPLES_MAX: usize = 10_000;

#[derive(Clone, Copy)]
enum Cursor<'a, 'p> {
    Done(KeyValue<'a>),
    /// Walking `rest` from inside an object.
    At(&'a Map<String, Value>, &'p [Segment]),
    /// Stopped at an array with `rest` still to walk (empty: the array ends the path).
    Arr(&'a Value, &'p [Segment]),
}

/// The sort key of `doc` for the given paths and directions.
pub fn sort_key<'a, 'p>(
    doc: &'a Map<String, Value>,
    paths: &[&'p [Segment]],
    dirs: &[Direction],
) -> Vec<KeyValue<'a>> {
    let cursors: Vec<Cursor<'a, 'p>> = paths.iter().map(|p| advance(Cursor::At(doc, p))).collect();
    let mut best = None;
    let mut budget = TUPLES_MAX;
    explore(cursors, dirs, &mut best, &mut budget);
    best.unwrap_or_else(|| vec![KeyValue::Null; paths.len()])
}

/// Walks through plain objects until the path ends, goes missing, or meets an array.
fn advance<'a, 'p>(c: Cursor<'a, 'p>) -> Cursor<'a, 'p> {
    let Cursor::At(mut obj, path) = c else {
        return c;
    };
    for (i, seg) in path.iter().enumerate() {
        match obj.get(&*seg.name) {
            None => return Cursor::Done(KeyValue::Null),
            Some(v @ Value::Array(_)) => return Cursor::Arr(v, &path[i + 1..]),
            Some(v) if i + 1 == path.len() => return Cursor::Done(KeyValue::Value(v)),
            Some(Value::Object(m)) => obj = m,
            Some(_) => return Cursor::Done(KeyValue::Null),
        }
    }
    Cursor::Done(KeyValue::Null)
}

/// The cursor for one element of an array the path is crossing.
fn step_into<'a, 'p>(elem: &'a Value, pos: usize, rest: &'p [Segment]) -> Cursor<'a, 'p> {
    let Some(next) = rest.first() else {
        return Cursor::Done(KeyValue::Value(elem));
    };
    match elem {
        Value::Object(m) => advance(Cursor::At(m, rest)),
        _ if next.index == Some(pos) => match elem {
            _ if rest.len() == 1 => Cursor::Done(KeyValue::Value(elem)),
            Value::Array(_) => Cursor::Arr(elem, &rest[1..]),
            _ => Cursor::Done(KeyValue::Null),
        },
        _ => Cursor::Done(KeyValue::Null),
    }
}

fn explore<'a, 'p>(
    cursors: Vec<Cursor<'a, 'p>>,
    dirs: &[Direction],
    best: &mut Option<Vec<KeyValue<'a>>>,
    budget: &mut usize,
) {
    if *budget == 0 {
        return;
    }
    let first_array = cursors.iter().find_map(|c| match c {
        Cursor::Arr(a, _) => Some(*a),
        _ => None,
    });
    let Some(array) = first_array else {
        *budget -= 1;
        let tuple: Vec<KeyValue<'a>> = cursors
            .iter()
            .map(|c| match c {
                Cursor::Done(kv) => *kv,
                _ => KeyValue::Null,
            })
            .collect();
        if best.as_ref().is_none_or(|b| better(&tuple, b, dirs)) {
            *best = Some(tuple);
        }
        return;
    };
    let items = array.as_array().map(Vec::as_slice).unwrap_or_default();
    let same = |c: &Cursor<'a, 'p>| matches!(c, Cursor::Arr(a, _) if std::ptr::eq(*a, array));
    if items.is_empty() {
        let next = cursors
            .iter()
            .map(|c| match c {
                Cursor::Arr(_, rest) if same(c) => Cursor::Done(if rest.is_empty() {
                    KeyValue::EmptyArray
                } else {
                    KeyValue::Null
                }),
                other => *other,
            })
            .collect();
        return explore(next, dirs, best, budget);
    }
    for (pos, elem) in items.iter().enumerate() {
        let next = cursors
            .iter()
            .map(|c| match c {
                Cursor::Arr(_, rest) if same(c) => step_into(elem, pos, rest),
                other => *other,
            })
            .collect();
        explore(next, dirs, best, budget);
    }
}

fn better(a: &[KeyValue<'_>], b: &[KeyValue<'_>], dirs: &[Direction]) -> bool {
    for ((x, y), dir) in a.iter().zip(b).zip(dirs) {
        let ord = dir.orient(x.order(y));
        if ord != Ordering::Equal {
            return ord == Ordering::Less;
        }
    }
    false
}
