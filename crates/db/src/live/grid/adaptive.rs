//! `Adaptive`: the threaded grid only while there are enough views for its hand-offs to pay;
//! below that, matching on the engine's thread.
//!
//! Why: a threaded grid wakes every cell for every batch of commits and gathers their reports,
//! a fixed cost per commit and cell whatever the views. With a few views matching is a few
//! filter tests per change, cheaper than the hand-offs: at 20,000 RockBench events/s with one
//! subscription, the two idle cells of the default 2 x 1 grid used ~4% of the server's CPU.
//! With thousands of views no index serves, matching is what saturates the engine's thread and
//! the cells earn their keep.
//!
//! The switch happens only when nothing is in flight (the engine adds views only then; a view
//! removed while commits are in flight is removed from the active side and the switch waits for
//! the next quiet call), so the [`Matching`] contract holds across it: every commit is matched
//! entirely by one side, with the views registered when it was dispatched.

use super::{CellStatus, GridError, Inline, Matches, Matching, Threads, ThreadsConfig};
use crate::live::feed::Commit;
use crate::live::matcher::{ViewId, ViewMap};
use herald_query::Filter;
use std::sync::Arc;
use std::time::Duration;

/// Views from which the server's default grid matches on its cell threads; it goes back to the
/// engine's thread below half of it. A cell hand-off costs about as much as testing a few
/// hundred scanned filters against a change (`herald-bench live`, docs/live-queries.md).
pub const THREADS_FROM_VIEWS_DEFAULT: usize = 256;

pub struct Adaptive {
    config: ThreadsConfig,
    /// Go threaded at this many views; back inline below half of it.
    threads_from: usize,
    inline: Inline,
    /// Started the first time the views reach `threads_from`, then kept (idle when inline).
    threads: Option<Threads>,
    threaded: bool,
    /// Every registered view, to move them from one side to the other.
    views: ViewMap<(String, Arc<Filter>)>,
}

impl Adaptive {
    /// A grid of `config`'s shape from `threads_from` views on (at least 1), inline below
    /// (`config.threads_from_views` is not consulted).
    pub fn new(config: ThreadsConfig, threads_from: usize) -> Adaptive {
        Adaptive {
            config,
            threads_from: threads_from.max(1),
            inline: Inline::default(),
            threads: None,
            threaded: false,
            views: ViewMap::default(),
        }
    }

    /// Whether commits are matched by the cell threads now.
    pub fn threaded(&self) -> bool {
        self.threaded
    }

    fn active(&mut self) -> &mut dyn Matching {
        match (self.threaded, self.threads.as_mut()) {
            (true, Some(t)) => t,
            _ => &mut self.inline,
        }
    }

    fn active_ref(&self) -> &dyn Matching {
        match (self.threaded, self.threads.as_ref()) {
            (true, Some(t)) => t,
            _ => &self.inline,
        }
    }

    /// Moves every view to the side the view count calls for, when nothing is in flight.
    fn rebalance(&mut self) {
        let n = self.views.len();
        let want = match self.threaded {
            false => n >= self.threads_from,
            true => n >= self.threads_from.div_ceil(2),
        };
        if want == self.threaded || self.active_ref().in_flight() > 0 {
            return;
        }
        let ids: Vec<ViewId> = self.views.keys().copied().collect();
        for &id in &ids {
            self.active().remove_view(id);
        }
        if want && self.threads.is_none() {
            self.threads = Some(Threads::start(self.config.clone()));
        }
        self.threaded = want;
        for id in ids {
            let (scope, filter) = self.views[&id].clone();
            self.active().add_view(id, &scope, filter);
        }
    }
}

impl Matching for Adaptive {
    fn add_view(&mut self, id: ViewId, collection: &str, filter: Arc<Filter>) {
        self.views
            .insert(id, (collection.to_string(), Arc::clone(&filter)));
        self.active().add_view(id, collection, filter);
        self.rebalance();
    }

    fn remove_view(&mut self, id: ViewId) {
        if self.views.remove(&id).is_some() {
            self.active().remove_view(id);
            self.rebalance();
        }
    }

    fn dispatch(&mut self, commit: Arc<Commit>) {
        self.active().dispatch(commit);
    }

    fn collect(&mut self, timeout: Duration) -> Result<Option<Matches>, GridError> {
        self.active().collect(timeout)
    }

    fn clear(&mut self) {
        self.active().clear();
    }

    fn in_flight(&self) -> usize {
        self.active_ref().in_flight()
    }

    fn depth(&self) -> usize {
        self.active_ref().depth()
    }

    fn cells(&self) -> Vec<CellStatus> {
        self.active_ref().cells()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Change, ChangeOp};
    use serde_json::json;

    fn commit(seq: u64, a: i64) -> Arc<Commit> {
        Arc::new(Commit {
            seq,
            changes: vec![Change {
                collection: "c".into(),
                id: format!("d{seq}"),
                op: ChangeOp::Insert,
                version: 1,
                before: None,
                after: Some(json!({"a": a})),
            }],
            bytes: 0,
        })
    }

    fn filter(a: i64) -> Arc<Filter> {
        Arc::new(Filter::parse(&json!({"a": a})).unwrap())
    }

    fn run(g: &mut Adaptive, c: Arc<Commit>) -> Vec<(ViewId, Vec<u32>)> {
        g.dispatch(c);
        loop {
            if let Some(m) = g.collect(Duration::from_secs(5)).unwrap() {
                let mut v = m.views;
                v.sort();
                return v;
            }
        }
    }

    /// Crossing the threshold up and down moves every view, and each side matches exactly the
    /// views registered at the time.
    #[test]
    fn switches_sides_with_the_view_count_and_keeps_every_view() {
        let config = ThreadsConfig {
            rows: 2,
            ..ThreadsConfig::default()
        };
        let mut g = Adaptive::new(config, 4);
        for id in 0..3 {
            g.add_view(id, "c", filter(id as i64));
        }
        assert!(!g.threaded());
        assert_eq!(run(&mut g, commit(1, 2)), vec![(2, vec![0])]);
        g.add_view(3, "c", filter(2));
        assert!(g.threaded(), "4 views reach the threshold");
        assert_eq!(g.cells().len(), 2);
        assert_eq!(run(&mut g, commit(2, 2)), vec![(2, vec![0]), (3, vec![0])]);
        g.remove_view(0);
        g.remove_view(1);
        assert!(g.threaded(), "2 views are still half the threshold");
        assert_eq!(run(&mut g, commit(3, 2)), vec![(2, vec![0]), (3, vec![0])]);
        g.remove_view(2);
        assert!(!g.threaded(), "below half: back inline");
        assert_eq!(g.cells().len(), 1);
        assert_eq!(run(&mut g, commit(4, 2)), vec![(3, vec![0])]);
        assert_eq!(run(&mut g, commit(5, 0)), vec![]);
    }

    /// A view removed while commits are in flight (the engine drops a broken view mid-batch)
    /// leaves the side as it is until nothing is in flight.
    #[test]
    fn never_switches_with_commits_in_flight() {
        let mut g = Adaptive::new(ThreadsConfig::default(), 4);
        for id in 0..4 {
            g.add_view(id, "c", filter(1));
        }
        assert!(g.threaded());
        g.dispatch(commit(1, 1));
        for id in 0..3 {
            g.remove_view(id);
        }
        assert!(g.threaded(), "a commit is in flight");
        let m = loop {
            if let Some(m) = g.collect(Duration::from_secs(5)).unwrap() {
                break m;
            }
        };
        assert_eq!(m.commit.seq, 1);
        g.remove_view(7); // unknown: nothing changes
        assert!(g.threaded());
        g.add_view(9, "c", filter(5));
        assert!(g.threaded(), "two views: half the threshold");
        g.remove_view(9);
        assert!(!g.threaded(), "quiet now, one view: inline");
        assert_eq!(run(&mut g, commit(2, 1)), vec![(3, vec![0])]);
    }
}
