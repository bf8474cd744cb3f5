//! The views one cell matches, by global key: the cell's state between batches. The matching
//! itself is the database's pure cell matching (`herald_db::live::grid`), given the views'
//! filters and one write partition of a commit; this module keeps the keys, the start seqs and
//! the local ids that matching uses.

use crate::grid::wire::Registration;
use herald_db::live::Commit;
use herald_query::Filter;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A view as the cell holds it.
struct View {
    key: String,
    collection: String,
    filter: Arc<Filter>,
    /// The cell matches only commits with a greater seq.
    from: u64,
}

/// The views of one cell (one row's views), each with a small id of its own.
#[derive(Default)]
pub struct CellViews {
    views: BTreeMap<u32, View>,
    by_key: HashMap<String, u32>,
    next: u32,
}

/// `(seq, view key, change indexes ascending)`, as a cell record carries them.
pub type Match = (u64, String, Vec<u32>);

impl CellViews {
    pub fn len(&self) -> usize {
        self.views.len()
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// Adds a view; a filter this node cannot parse is skipped (the front end parsed it, so
    /// only a node of another version could refuse it) and reported as `false`.
    pub fn add(&mut self, key: &str, reg: &Registration) -> bool {
        if self.by_key.contains_key(key) {
            return true;
        }
        let Ok(filter) = Filter::parse(&reg.filter) else {
            return false;
        };
        let id = self.next;
        self.next += 1;
        self.by_key.insert(key.to_string(), id);
        self.views.insert(
            id,
            View {
                key: key.to_string(),
                collection: reg.collection.clone(),
                filter: Arc::new(filter),
                from: reg.from_seq,
            },
        );
        true
    }

    pub fn remove(&mut self, key: &str) {
        if let Some(id) = self.by_key.remove(key) {
            self.views.remove(&id);
        }
    }

    /// Keeps only the views whose key `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let gone: Vec<String> = self
            .by_key
            .keys()
            .filter(|k| !keep(k))
            .cloned()
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// The matches of commit `commit` in write partition `part` of `parts`, for the views
    /// `only` accepts (all when `None`), each view only past its start seq.
    pub fn matches(
        &self,
        commit: &Commit,
        part: u32,
        parts: u32,
        only: Option<&dyn Fn(&str) -> bool>,
        out: &mut Vec<Match>,
    ) {
        let mut hits: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (i, ch) in commit.changes.iter().enumerate() {
            if write_partition(&ch.collection, &ch.id, parts) != part {
                continue;
            }
            for (&id, v) in &self.views {
                if v.from >= commit.seq || v.collection != ch.collection {
                    continue;
                }
                if only.is_some_and(|f| !f(&v.key)) {
                    continue;
                }
                let hit = [&ch.before, &ch.after]
                    .into_iter()
                    .flatten()
                    .any(|image| v.filter.matches(image));
                if hit {
                    hits.entry(id).or_default().push(i as u32);
                }
            }
        }
        for (id, indexes) in hits {
            out.push((commit.seq, self.views[&id].key.clone(), indexes));
        }
    }
}

/// Stand-in until the seam lands: FNV-1a over collection and id.
pub fn write_partition(collection: &str, id: &str, parts: u32) -> u32 {
    let mut h = 0xcbf29ce484222325u64;
    for b in collection.bytes().chain([0]).chain(id.bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    (h % parts.max(1) as u64) as u32
}
