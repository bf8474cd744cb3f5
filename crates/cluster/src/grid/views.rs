//! The views one cell matches, by global key: the cell's state between batches. The matching
//! itself is the database's pure cell matching (`herald_db::live::grid::CellMatcher`: the
//! predicate index over the views' filters, applied to one write partition of a commit); this
//! module keeps the keys, the start seqs and the small ids that matching uses.

use crate::grid::wire::Registration;
use herald_db::live::grid::CellMatcher;
use herald_db::live::matcher::ViewId;
use herald_db::live::Commit;
use herald_query::Filter;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// `(seq, view key, change indexes ascending)`, as a cell record carries them.
pub type Match = (u64, String, Vec<u32>);

/// The views of one cell (one row's views), each with a small id of its own.
#[derive(Default)]
pub struct CellViews {
    matcher: CellMatcher,
    /// Per id, the view's key and the seq it starts after (the cell matches later commits).
    views: HashMap<ViewId, (String, u64)>,
    by_key: HashMap<String, ViewId>,
    free: Vec<ViewId>,
    next: ViewId,
}

impl CellViews {
    pub fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.views.len()
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Adds a view; a filter this node cannot parse (only a node of another version could
    /// refuse what the front end parsed) is refused with `false`.
    pub fn add(&mut self, key: &str, reg: &Registration) -> bool {
        if self.by_key.contains_key(key) {
            return true;
        }
        let Ok(filter) = Filter::parse(&reg.filter) else {
            return false;
        };
        let id = self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        });
        self.matcher.add(id, &reg.collection, Arc::new(filter));
        self.by_key.insert(key.to_string(), id);
        self.views.insert(id, (key.to_string(), reg.from_seq));
        true
    }

    /// Keeps only the views whose key `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let gone: Vec<String> = self.by_key.keys().filter(|k| !keep(k)).cloned().collect();
        for k in gone {
            if let Some(id) = self.by_key.remove(&k) {
                self.views.remove(&id);
                self.matcher.remove(id);
                self.free.push(id);
            }
        }
    }

    /// The ids of these keys (for [`CellViews::matches`]' `only`).
    pub fn ids<'a>(&self, keys: impl IntoIterator<Item = &'a String>) -> HashSet<ViewId> {
        keys.into_iter()
            .filter_map(|k| self.by_key.get(k).copied())
            .collect()
    }

    /// Appends the matches of `commit` in write partition `part` of `parts`, for the views in
    /// `only` (all when `None`), each view only past its start seq; views in key order, so
    /// every owner of the cell writes the same record for the same input.
    pub fn matches(
        &self,
        commit: &Commit,
        part: u32,
        parts: u32,
        only: Option<&HashSet<ViewId>>,
        out: &mut Vec<Match>,
    ) {
        let mut found: Vec<Match> = self
            .matcher
            .match_commit(commit, part, parts, only)
            .into_iter()
            .filter_map(|(id, indexes)| {
                let (key, from) = self.views.get(&id)?;
                (*from < commit.seq).then(|| (commit.seq, key.clone(), indexes))
            })
            .collect();
        found.sort();
        out.extend(found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_db::{Change, ChangeOp};
    use serde_json::json;

    /// A collection-group view travels as the scope key `*/group` in its registration; a cell
    /// matches it against the changes of every collection of the group, at any depth.
    #[test]
    fn a_group_registration_matches_every_collection_of_its_group() {
        let mut views = CellViews::default();
        let reg = |collection: &str| Registration {
            collection: collection.into(),
            filter: json!({"n": {"$gte": 1}}),
            row: 0,
            from_seq: 0,
            node: "n1".into(),
        };
        assert!(views.add("g", &reg("*/things")));
        assert!(views.add("c", &reg("things")));
        let change = |collection: &str, n: i64| Change {
            collection: collection.into(),
            id: "d".into(),
            op: ChangeOp::Insert,
            version: 1,
            before: None,
            after: Some(json!({"_id": "d", "n": n})),
        };
        let commit = Commit {
            seq: 3,
            changes: vec![
                change("things", 1),
                change("a/b/things", 2),
                change("a/b/things", 0),
                change("thingsx", 5),
                change("things/x/other", 5),
            ],
            bytes: 0,
        };
        let mut out = Vec::new();
        views.matches(&commit, 0, 1, None, &mut out);
        assert_eq!(
            out,
            vec![
                (3, "c".to_string(), vec![0]),
                (3, "g".to_string(), vec![0, 1])
            ]
        );
    }
}
