//! `CellMatcher`: the pure matching of one grid cell, the views of one query partition against
//! the changes of one write partition of a commit.

use super::write_partition;
use crate::layout::scope_group;
use crate::live::feed::Commit;
use crate::live::matcher::{Matcher, ViewId, ViewMap, ViewSet};
use crate::names::group_of;
use herald_query::Filter;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The views of one query partition: per collection the predicate index over them, per
/// collection group (views registered under `*/group`, see `layout::group_scope`) another, and
/// each view's filter for the exact check of its candidates. A change is matched against its
/// collection's views and its group's (the last segment of its collection), so a group view
/// also sees collections created after it was added.
#[derive(Default)]
pub struct CellMatcher {
    matchers: HashMap<String, Matcher>,
    groups: HashMap<String, Matcher>,
    views: ViewMap<(String, Arc<Filter>)>,
}

impl CellMatcher {
    /// Adds view `id` of `scope`: a collection path, or `*/group` for a collection group.
    pub fn add(&mut self, id: ViewId, scope: &str, filter: Arc<Filter>) {
        self.remove(id);
        let (map, key) = match scope_group(scope) {
            Some(g) => (&mut self.groups, g),
            None => (&mut self.matchers, scope),
        };
        map.entry(key.to_string()).or_default().add(id, &filter);
        self.views.insert(id, (scope.to_string(), filter));
    }

    pub fn remove(&mut self, id: ViewId) {
        let Some((scope, _)) = self.views.remove(&id) else {
            return;
        };
        let (map, key) = match scope_group(&scope) {
            Some(g) => (&mut self.groups, g),
            None => (&mut self.matchers, scope.as_str()),
        };
        if let Some(m) = map.get_mut(key) {
            m.remove(id);
            if m.is_empty() {
                map.remove(key);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.views.len()
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// The matches of the changes of `commit` in write partition `part` of `parts`: per view,
    /// the indexes of the changes whose before- or after-image its filter matches, ascending.
    /// `only`: match just these views (a grid node catching up views it learned late).
    pub fn match_commit(
        &self,
        commit: &Commit,
        part: u32,
        parts: u32,
        only: Option<&HashSet<ViewId>>,
    ) -> Vec<(ViewId, Vec<u32>)> {
        let mut out: ViewMap<Vec<u32>> = ViewMap::default();
        let mut cand = ViewSet::default();
        for (i, ch) in commit.changes.iter().enumerate() {
            let own = self.matchers.get(&ch.collection);
            let group = match self.groups.is_empty() {
                true => None,
                false => self.groups.get(group_of(&ch.collection)),
            };
            if own.is_none() && group.is_none() {
                continue;
            }
            if parts > 1 && write_partition(&ch.collection, &ch.id, parts) != part {
                continue;
            }
            cand.clear();
            for m in own.into_iter().chain(group) {
                for image in [&ch.before, &ch.after].into_iter().flatten() {
                    m.probe(image, &mut cand);
                }
            }
            let scanned = own.into_iter().chain(group).flat_map(|m| m.scanned());
            for id in cand.iter().chain(scanned) {
                if only.is_some_and(|o| !o.contains(id)) {
                    continue;
                }
                let Some((_, filter)) = self.views.get(id) else {
                    continue;
                };
                let hit = ch.after.as_ref().is_some_and(|a| filter.matches(a))
                    || ch.before.as_ref().is_some_and(|b| filter.matches(b));
                if hit {
                    let idx = out.entry(*id).or_default();
                    // A view both probed and scanned is checked twice; record the change once.
                    if idx.last() != Some(&(i as u32)) {
                        idx.push(i as u32);
                    }
                }
            }
        }
        out.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Change, ChangeOp};
    use serde_json::{json, Value};

    fn change(id: &str, before: Option<Value>, after: Option<Value>) -> Change {
        Change {
            collection: "c".into(),
            id: id.into(),
            op: ChangeOp::Update,
            version: 1,
            before,
            after,
        }
    }

    #[test]
    fn matches_either_image_once_per_change_and_honours_partitions() {
        let mut cell = CellMatcher::default();
        let f = |v: Value| Arc::new(Filter::parse(&v).unwrap());
        cell.add(1, "c", f(json!({"a": 1})));
        cell.add(2, "c", f(json!({"b": {"$regex": "x"}})));
        cell.add(3, "other", f(json!({})));
        let commit = Commit {
            seq: 7,
            changes: vec![
                change("d1", Some(json!({"a": 1})), Some(json!({"a": 2}))),
                change("d2", None, Some(json!({"b": "yxy"}))),
                change("d3", Some(json!({"a": 3})), None),
            ],
            bytes: 0,
        };
        let mut all = cell.match_commit(&commit, 0, 1, None);
        all.sort();
        assert_eq!(all, vec![(1, vec![0]), (2, vec![1])]);
        // Every change lands in exactly one of 3 write partitions.
        let mut union: Vec<(ViewId, Vec<u32>)> = Vec::new();
        for p in 0..3 {
            for (v, idx) in cell.match_commit(&commit, p, 3, None) {
                union.push((v, idx));
            }
        }
        union.sort();
        assert_eq!(union, vec![(1, vec![0]), (2, vec![1])]);
        let only = HashSet::from([2]);
        assert_eq!(
            cell.match_commit(&commit, 0, 1, Some(&only)),
            vec![(2, vec![1])]
        );
        cell.remove(1);
        cell.remove(2);
        cell.remove(3);
        assert!(cell.is_empty() && cell.matchers.is_empty());
    }

    /// A group view (`*/m`) sees the changes of every collection whose last segment is `m`,
    /// at any depth, and no other.
    #[test]
    fn a_group_view_matches_every_collection_of_its_group() {
        let mut cell = CellMatcher::default();
        cell.add(1, "*/m", Arc::new(Filter::parse(&json!({"a": 1})).unwrap()));
        cell.add(2, "r/x/m", Arc::new(Filter::parse(&json!({})).unwrap()));
        let at = |c: &str| Change {
            collection: c.into(),
            ..change("d", None, Some(json!({"a": 1})))
        };
        let commit = Commit {
            seq: 1,
            changes: vec![at("m"), at("r/x/m"), at("a/b/c/d/m"), at("mm"), at("m/x/n")],
            bytes: 0,
        };
        let mut all = cell.match_commit(&commit, 0, 1, None);
        all.sort();
        assert_eq!(all, vec![(1, vec![0, 1, 2]), (2, vec![1])]);
        cell.remove(1);
        cell.remove(2);
        assert!(cell.is_empty() && cell.groups.is_empty());
    }
}
