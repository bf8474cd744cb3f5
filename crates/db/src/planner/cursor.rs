//! Query cursors on ordered index scans: each stream of an [`OrderedScan`] is narrowed to the
//! index keys between the query's cursors, so a page "after [1700, 'm9']" seeks to that key
//! and reads about skip + limit entries instead of everything before it.
//!
//! An index key is `prefix ++ encoded values ++ id` (`layout.rs`), and an ordered scan's
//! entries come in result order, forwards or backwards, so a cursor's values encoded in the
//! index's directions (`herald_value::encode_key`), then its id, bound the keys to read. The
//! bounds may hold the cursor's own entry (and ids extending its id): the executor applies the
//! cursors exactly to every document it fetches (`Query::matches`), so a bound only has to keep
//! every document inside the cursors. A cursor that leaves out the null-or-missing group also
//! drops the collection scan that reads it (`nulls_by_scan`). A collection-group cursor's last
//! value, a `_path` after the id, is not used: the bounds keep the id's whole tie (a group
//! index's entries end `id 0x00 path`, all of them extending the id) and the group's fetch
//! applies the cursor exactly (`exec/group.rs`).

use super::{OrderedScan, Stream};
use crate::layout::prefix_end;
use herald_query::{Cursor, Direction, Query};
use herald_value::{compare, encode_key, encode_key_desc, Value};
use std::cmp::Ordering;

/// Narrows the streams of `scan` (an index whose sort fields have the directions `dirs`, after
/// the prefix each stream strips) to the query's cursors. A stream may become two: with
/// `reverse_ties`, the keys between a cursor with an id and the end of its tie group, and the
/// keys past the group.
pub(super) fn narrow(scan: &mut OrderedScan, query: &Query, dirs: &[Direction]) {
    let cursors = &query.cursors;
    if cursors.is_none() {
        return;
    }
    // The null-or-missing group comes first ascending and last descending; a cursor on that
    // side whose first value is above null leaves it out, and its collection scan with it.
    let null_side = if scan.backward {
        &cursors.end
    } else {
        &cursors.start
    };
    if null_side
        .as_ref()
        .and_then(|c| c.values.first())
        .is_some_and(|v| compare(v, &Value::Null) == Ordering::Greater)
    {
        scan.nulls_by_scan = false;
    }
    let mut streams = Vec::with_capacity(scan.streams.len());
    for s in std::mem::take(&mut scan.streams) {
        if s.start.len() < s.strip {
            streams.push(s);
            continue;
        }
        let prefix = &s.start[..s.strip];
        let mut keep: Vec<Interval> = vec![(s.start.clone(), Some(s.end.clone()))];
        // A start cursor keeps the keys after it in result order: higher keys forwards.
        for (c, high) in [
            (&cursors.start, !scan.backward),
            (&cursors.end, scan.backward),
        ] {
            if let Some(c) = c {
                let allowed = allowed(prefix, c, dirs, scan.reverse_ties, high);
                keep = intersect(&keep, &allowed);
            }
        }
        if keep.is_empty() {
            keep.push((s.start.clone(), Some(s.start.clone())));
        }
        for (start, end) in keep {
            streams.push(Stream {
                start,
                end: end.unwrap_or_else(|| s.end.clone()),
                strip: s.strip,
            });
        }
    }
    scan.streams = streams;
}

/// Keys from the first, up to the second (exclusive; `None`: no bound).
type Interval = (Vec<u8>, Option<Vec<u8>>);

/// The keys a cursor keeps, as intervals: those on its `high` side (higher keys) or low side,
/// with its tie group's ends inside when it is inclusive or names an id. The id narrows the
/// group: to the same side when the group's entries come in the sort's id order, and to the
/// other side when they come reversed (`reverse_ties`), which leaves the group's part and the
/// keys past it as two intervals. Keys sharing the id as a prefix stay on both sides: the
/// executor's exact check decides them.
fn allowed(
    prefix: &[u8],
    c: &Cursor,
    dirs: &[Direction],
    reverse_ties: bool,
    high: bool,
) -> Vec<Interval> {
    let mut group = prefix.to_vec();
    for (v, dir) in c.values.iter().zip(dirs) {
        match dir {
            Direction::Asc => encode_key(v, &mut group),
            Direction::Desc => encode_key_desc(v, &mut group),
        }
    }
    let group_end = prefix_end(&group);
    let id = c.values.get(dirs.len()).and_then(Value::as_str);
    let Some(id) = id else {
        // The group is inside or outside as a whole.
        return match (high, c.inclusive) {
            (true, true) => vec![(group, None)],
            (true, false) => vec![(group_end, None)],
            (false, true) => vec![(Vec::new(), Some(group_end))],
            (false, false) => vec![(Vec::new(), Some(group))],
        };
    };
    let at = [group.as_slice(), id.as_bytes()].concat();
    let past = prefix_end(&at);
    match (high, reverse_ties) {
        (true, false) => vec![(at, None)],
        (false, false) => vec![(Vec::new(), Some(past))],
        (true, true) => vec![(group, Some(past)), (group_end, None)],
        (false, true) => vec![(Vec::new(), Some(group)), (at, Some(group_end))],
    }
}

/// The intersection of two sets of disjoint intervals, in key order, empty ones dropped.
fn intersect(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    for (s1, e1) in a {
        for (s2, e2) in b {
            let start = s1.max(s2).clone();
            let end = match (e1, e2) {
                (Some(x), Some(y)) => Some(x.min(y).clone()),
                (Some(x), None) | (None, Some(x)) => Some(x.clone()),
                (None, None) => None,
            };
            if end.as_ref().is_none_or(|e| start < *e) {
                out.push((start, end));
            }
        }
    }
    out.sort();
    out
}
