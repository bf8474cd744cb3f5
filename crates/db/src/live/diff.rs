//! Turning an old and a new visible window into the ordered edits a client applies: `remove`,
//! `changeIndex` (moved, maybe changed), `change` (same place, new content) and `add`.
//!
//! Applying the events in order to the old list (remove at `oldIndex`, insert at `newIndex`)
//! yields the new list exactly. Removals come first (from the highest index down, so earlier
//! indexes stay valid), then a single left-to-right pass fixes every position.

use serde_json::{json, Value};

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
pub struct ChangeEvent {
    pub kind: EventKind,
    pub id: String,
    pub doc: Option<Value>,
    pub old_index: i64,
    pub new_index: i64,
}

impl ChangeEvent {
    /// The wire form: `{"kind","id","doc"?,"oldIndex","newIndex"}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"kind": self.kind.as_str(), "id": self.id, "oldIndex": self.old_index, "newIndex": self.new_index});
        if let Some(d) = &self.doc {
            v["doc"] = d.clone();
        }
        v
    }

    /// Applies the event to a client list of (id, doc).
    pub fn apply(&self, list: &mut Vec<(String, Value)>) {
        if self.old_index >= 0 {
            list.remove(self.old_index as usize);
        }
        if self.new_index >= 0 {
            let doc = self.doc.clone().unwrap_or(Value::Null);
            list.insert(self.new_index as usize, (self.id.clone(), doc));
        }
    }
}

/// The events that turn `old` into `new` (both lists of (id, doc) in result order).
pub fn diff_windows(old: &[(String, Value)], new: &[(String, Value)]) -> Vec<ChangeEvent> {
    let mut events = Vec::new();
    let in_new: std::collections::HashSet<&str> = new.iter().map(|(id, _)| id.as_str()).collect();
    let mut work: Vec<(String, Value)> = old.to_vec();
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
        if work.get(i).is_some_and(|(w, _)| w == id) {
            if work[i].1 != *doc {
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

    fn l(ids: &[&str]) -> Vec<(String, Value)> {
        ids.iter()
            .map(|i| (i.to_string(), json!({"_id": i})))
            .collect()
    }

    fn check(old: &[&str], new: &[&str]) -> Vec<ChangeEvent> {
        let (o, n) = (l(old), l(new));
        let ev = diff_windows(&o, &n);
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
    }

    #[test]
    fn content_changes_in_place() {
        let old = l(&["a", "b"]);
        let mut new = old.clone();
        new[1].1 = json!({"_id": "b", "n": 1});
        let ev = diff_windows(&old, &new);
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
