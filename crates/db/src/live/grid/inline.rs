//! `Inline`: the grid of one cell, matched on the engine thread when a commit is collected.

use super::{CellMatcher, CellStatus, GridError, Matches, Matching};
use crate::live::feed::Commit;
use crate::live::matcher::ViewId;
use herald_query::Filter;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
pub struct Inline {
    cell: CellMatcher,
    pending: VecDeque<Arc<Commit>>,
    seq: u64,
}

impl Matching for Inline {
    fn add_view(&mut self, id: ViewId, collection: &str, filter: Arc<Filter>) {
        self.cell.add(id, collection, filter);
    }

    fn remove_view(&mut self, id: ViewId) {
        self.cell.remove(id);
    }

    fn dispatch(&mut self, commit: Arc<Commit>) {
        self.pending.push_back(commit);
    }

    fn collect(&mut self, _timeout: Duration) -> Result<Option<Matches>, GridError> {
        let Some(commit) = self.pending.pop_front() else {
            return Ok(None);
        };
        let views = self.cell.match_commit(&commit, 0, 1, None);
        self.seq = commit.seq;
        Ok(Some(Matches { commit, views }))
    }

    fn clear(&mut self) {
        self.pending.clear();
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn depth(&self) -> usize {
        1
    }

    fn cells(&self) -> Vec<CellStatus> {
        vec![CellStatus {
            row: 0,
            part: 0,
            seq: self.seq,
            views: self.cell.len(),
            node: None,
        }]
    }
}
