//! Query cursors on ordered index scans: each stream of an [`OrderedScan`] is narrowed to the
//! index keys between the query's cursors, so a page "after [1700, 'm9']" seeks to that key
//! and reads about skip + limit entries instead of everything before it.
//!
//! An index key is `prefix ++ encoded values ++ id` (`layout.rs`), and an ordered scan's
//! entries come in result order, forwards or backwards, so a cursor's values encoded in the
//! index's directions (`herald_value::encode_key`) bound a contiguous run of keys. The bounds
//! may be loose by the cursor's own entry or, when ties come in the opposite id order
//! (`reverse_ties`), by the cursor's tie group: the executor applies the cursors exactly to
//! every document it fetches (`Query::matches`), so a bound only has to keep every document
//! inside the cursors.

use super::{OrderedScan, Stream};
use crate::layout::prefix_end;
use herald_query::{Cursor, Direction, Query};
use herald_value::{encode_key, encode_key_desc, Value};

/// Narrows the streams of `scan` (an index whose sort fields have the directions `dirs`, after
/// the prefix each stream strips) to the query's cursors.
pub(super) fn narrow(scan: &mut OrderedScan, query: &Query, dirs: &[Direction]) {
    let cursors = &query.cursors;
    if cursors.is_none() {
        return;
    }
    let has_id = |c: &Option<Cursor>| c.as_ref().is_some_and(|c| c.values.len() > dirs.len());
    if scan.reverse_ties && (has_id(&cursors.start) || has_id(&cursors.end)) {
        // The bounds hold the cursor's whole tie group: more than skip + limit may be met.
        scan.exact = false;
    }
    for s in &mut scan.streams {
        if s.start.len() < s.strip {
            continue;
        }
        let prefix = s.start[..s.strip].to_vec();
        if let Some(c) = &cursors.start {
            let b = Bound::of(&prefix, c, dirs, scan.reverse_ties);
            if scan.backward {
                lower_end(s, b.after());
            } else {
                raise_start(s, b.before());
            }
        }
        if let Some(c) = &cursors.end {
            let b = Bound::of(&prefix, c, dirs, scan.reverse_ties);
            if scan.backward {
                raise_start(s, b.before());
            } else {
                lower_end(s, b.after());
            }
        }
        if s.start > s.end {
            s.end = s.start.clone();
        }
    }
}

/// One cursor as index keys: the keys of its values' group, the id within it when the scan
/// meets the group in the sort's id order, and whether the cursor's own position is inside.
struct Bound {
    group: Vec<u8>,
    id: Option<String>,
    inclusive: bool,
}

impl Bound {
    fn of(prefix: &[u8], c: &Cursor, dirs: &[Direction], reverse_ties: bool) -> Bound {
        let mut group = prefix.to_vec();
        for (v, dir) in c.values.iter().zip(dirs) {
            match dir {
                Direction::Asc => encode_key(v, &mut group),
                Direction::Desc => encode_key_desc(v, &mut group),
            }
        }
        let id = c.values.get(dirs.len()).and_then(Value::as_str);
        Bound {
            group,
            // With an id the group's ends are inside; the id narrows it further only when the
            // entries of the group come in the sort's id order.
            inclusive: c.inclusive || id.is_some(),
            id: id.filter(|_| !reverse_ties).map(str::to_string),
        }
    }

    /// The smallest key that may be at or after the cursor in key order.
    fn before(&self) -> Vec<u8> {
        match &self.id {
            Some(id) => [self.group.as_slice(), id.as_bytes()].concat(),
            None if self.inclusive => self.group.clone(),
            None => prefix_end(&self.group),
        }
    }

    /// A key above every key that may be at or before the cursor in key order (exclusive).
    fn after(&self) -> Vec<u8> {
        match &self.id {
            Some(id) => prefix_end(&[self.group.as_slice(), id.as_bytes()].concat()),
            None if self.inclusive => prefix_end(&self.group),
            None => self.group.clone(),
        }
    }
}

fn raise_start(s: &mut Stream, key: Vec<u8>) {
    if key > s.start {
        s.start = key;
    }
}

fn lower_end(s: &mut Stream, key: Vec<u8>) {
    if key < s.end {
        s.end = key;
    }
}
