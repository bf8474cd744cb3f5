//! Turning an old and a new visible window into the ordered edits a client applies: `remove`,
//! `changeIndex` (moved, maybe changed), `change` (same place, new content) and `add`.
//!
//! Applying the events in order to the old list (remove at `oldIndex`, insert at `newIndex`)
//! yields the new list exactly. Removals come first (from the highest index down, so earlier
//! indexes stay valid), then a single left-to-right pass fixes every position.

use serde_json::Value;
use std::sync::Arc;

/// A document in a window: a `Value`, or a shared `Arc<Value>` (what live views hold, so a
/// window, its diff and its events copy a reference count instead of a document tree; at
/// 14,000 RockBench events/s, copies of each new event's document were a third of the
/// live-query thread's time).
pub trait WindowDoc: Clone {
    fn doc(&self) -> &Value;
    /// Whether two documents are equal (for a shared one, the same allocation is).
    fn same(&self, other: &Self) -> bool;
}

impl WindowDoc for Value {
    fn doc(&self) -> &Value {
        self
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
}

impl WindowDoc for Arc<Value> {
    fn doc(&self) -> &Value {
        self
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other) || **self == **other
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Add,
    Change,
    ChangeIndex,
    Remove,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Add => "add",
            EventKind::Change => "change",
            EventKind::ChangeIndex => "changeIndex",
            EventKind::Remove => "remove",
        }
    }
}

/// One edit of a subscriber's list. `old_index` is -1 for `add`, `new_index` -1 for `remove`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent<D = Value> {
    pub kind: EventKind,
    pub id: String,
    pub doc: Option<D>,
    pub old_index: i64,
    pub new_index: i64,
}

impl<D: WindowDoc> ChangeEvent<D> {
    /// Applies the event to a client list of (id, doc).
    pub fn apply(&self, list: &mut Vec<(String, Value)>) {
        if self.old_index >= 0 {
            list.remove(self.old_index as usize);
        }
        if self.new_index >= 0 {
            let doc = self.doc.as_ref().map_or(Value::Null, |d| d.doc().clone());
            list.insert(self.new_index as usize, (self.id.clone(), doc));
        }
    }
}

/// The events that turn `old` into `new` (both lists of (id, doc) in result order). `changed`
/// names the documents the commit wrote: when a written document and an untouched one trade
/// places, the written one is reported as moving, which is what happened.
pub fn diff_windows<D: WindowDoc>(
    old: &[(String, D)],
    new: &[(String, D)],
    changed: &std::collections::HashSet<&str>,
) -> Vec<ChangeEvent<D>> {
    let mut events = Vec::new();
    let in_new: std::collections::HashSet<&str> = new.iter().map(|(id, _)| id.as_str()).collect();
    let new_pos: std::collections::HashMap<&str, usize> = new
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let mut work: Vec<(String, D)> = old.to_vec();
    for i in (0..work.len()).rev() {
        if !in_new.contains(work[i].0.as_str()) {
            let (id, _) = work.remove(i);
            events.push(ChangeEvent {
                kind: EventKind::Remove,
                id,
                doc: None,
                old_index: i as i64,
                new_index: -1,
            });
        }
    }
    for (i, (id, doc)) in new.iter().enumerate() {
        // A written document sitting here but belonging further down moves down, rather than
        // the untouched documents moving up past it.
        while let Some((w, _)) = work.get(i) {
            let (w, p) = (w.clone(), new_pos.get(w.as_str()).copied().unwrap_or(0));
            if w == *id || !changed.contains(w.as_str()) || p <= i {
                break;
            }
            // Where it goes: before the first remaining document that belongs after it.
            let at = (i + 1..work.len())
                .find(|&k| new_pos.get(work[k].0.as_str()).is_some_and(|&q| q > p))
                .map_or(work.len() - 1, |k| k - 1);
            if at == i {
                break; // already in place relative to the rest; the generic pass settles it
            }
            let (wid, _) = work.remove(i);
            let wdoc = new[p].1.clone();
            work.insert(at, (wid.clone(), wdoc.clone()));
            events.push(ChangeEvent {
                kind: EventKind::ChangeIndex,
                id: wid,
                doc: Some(wdoc),
                old_index: i as i64,
                new_index: at as i64,
            });
        }
        if work.get(i).is_some_and(|(w, _)| w == id) {
            if !work[i].1.same(doc) {
                work[i].1 = doc.clone();
                events.push(ChangeEvent {
                    kind: EventKind::Change,
                    id: id.clone(),
                    doc: Some(doc.clone()),
                    old_index: i as i64,
                    new_index: i as i64,
                });
            }
            continue;
        }
        match work.iter().skip(i + 1).position(|(w, _)| w == id) {
            Some(off) => {
                let j = i + 1 + off;
                work.remove(j);
                work.insert(i, (id.clone(), doc.clone()));
                events.push(ChangeEvent {
                    kind: EventKind::ChangeIndex,
                    id: id.clone(),
                    doc: Some(doc.clone()),
                    old_index: j as i64,
                    new_index: i as i64,
                });
            }
            None => {
                work.insert(i, (id.clone(), doc.clone()));
                events.push(ChangeEvent {
                    kind: EventKind::Add,
                    id: id.clone(),
                    doc: Some(doc.clone()),
                    old_index: -1,
                    new_index: i as i64,
                });
            }
        }
    }
    debug_assert_eq!(work.len(), new.len());
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    fn l(ids: &[&str]) -> Vec<(String, Value)> {
        ids.iter()
            .map(|i| (i.to_string(), json!({"_id": i})))
            .collect()
    }

    fn check(old: &[&str], new: &[&str]) -> Vec<ChangeEvent> {
        let (o, n) = (l(old), l(new));
        let changed: std::collections::HashSet<&str> =
            ["a", "b", "c", "d", "x"].into_iter().collect();
        let ev = diff_windows(&o, &n, &changed);
        let mut w = o.clone();
        for e in &ev {
            e.apply(&mut w);
        }
        assert_eq!(w, n, "{old:?} -> {new:?} via {ev:?}");
        ev
    }

    #[test]
    fn edits_reproduce_the_new_window() {
        check(&["a", "b", "c"], &["a", "c"]);
        check(&["a", "b", "c"], &["c", "a", "b"]);
        check(&["a", "b", "c"], &["b", "c", "d"]);
        check(&["a", "b"], &["x", "a"]);
        check(&[], &["a"]);
        check(&["a"], &[]);
        let ev = check(&["a", "b", "c"], &["a", "c", "b"]);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, EventKind::ChangeIndex);
        check(&["a", "x", "b", "c"], &["a", "b", "c", "x"]);
        check(&["x", "a", "b"], &["a", "x", "b"]);
    }

    proptest::proptest! {
        #[test]
        fn any_two_windows_diff_into_applicable_edits(
            old in proptest::sample::subsequence((0..8).collect::<Vec<u8>>(), 0..8).prop_shuffle(),
            new in proptest::sample::subsequence((0..8).collect::<Vec<u8>>(), 0..8).prop_shuffle(),
            changed in proptest::collection::hash_set(0u8..8, 0..8),
        ) {
            let name = |i: &u8| format!("d{i}");
            let (o, n): (Vec<_>, Vec<_>) = (old.iter().map(|i| (name(i), json!(i))).collect(), new.iter().map(|i| (name(i), json!(i))).collect());
            let changed_names: Vec<String> = changed.iter().map(name).collect();
            let set = changed_names.iter().map(String::as_str).collect();
            let mut w = o.clone();
            for e in diff_windows(&o, &n, &set) {
                e.apply(&mut w);
            }
            proptest::prop_assert_eq!(w, n);
        }
    }

    #[test]
    fn the_written_document_is_the_one_that_moves() {
        let (o, n) = (l(&["a", "x", "b"]), l(&["a", "b", "x"]));
        let ev = diff_windows(&o, &n, &["x"].into_iter().collect());
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].id.as_str(), ev[0].old_index, ev[0].new_index),
            ("x", 1, 2)
        );
    }

    /// Shared documents compare by content when they are not the same allocation: an equal
    /// copy is no change, a changed one is.
    #[test]
    fn shared_documents_diff_by_content() {
        let a = Arc::new(json!({"_id": "a", "n": 1}));
        let old = vec![("a".to_string(), a.clone())];
        let same = vec![("a".to_string(), a.clone())];
        let equal = vec![("a".to_string(), Arc::new(json!({"_id": "a", "n": 1})))];
        let changed = vec![("a".to_string(), Arc::new(json!({"_id": "a", "n": 2})))];
        let set = ["a"].into_iter().collect();
        assert!(diff_windows(&old, &same, &set).is_empty());
        assert!(diff_windows(&old, &equal, &set).is_empty());
        let ev = diff_windows(&old, &changed, &set);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, EventKind::Change);
        assert_eq!(ev[0].doc.as_deref(), Some(&json!({"_id": "a", "n": 2})));
    }

    #[test]
    fn content_changes_in_place() {
        let old = l(&["a", "b"]);
        let mut new = old.clone();
        new[1].1 = json!({"_id": "b", "n": 1});
        let ev = diff_windows(&old, &new, &["b"].into_iter().collect());
        assert_eq!(
            ev,
            vec![ChangeEvent {
                kind: EventKind::Change,
                id: "b".into(),
                doc: Some(json!({"_id": "b", "n": 1})),
                old_index: 1,
                new_index: 1
            }]
        );
    }
}
