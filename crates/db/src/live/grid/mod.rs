//! The matching grid's seam: how the live-query engine has a commit's changes matched against
//! its views, by cells that each own a share of the views (a query partition, a grid *row*) and
//! see a share of the changes (a write partition, by document).
//!
//! The engine is the front end and the sorting stage: it dispatches commits in seq order to a
//! [`Matching`], collects each commit's [`Matches`] in the same order once every cell has
//! reported it, and applies them to its `LiveView`s (windows, refills) and subscribers. A cell
//! needs no per-query result state: with both images of each change, "matches before or after"
//! is all it decides (InvaliDB's stateless filtering stage); ordering, limit and offset stay in
//! the sorting stage.
//!
//! Implementations: [`Inline`] matches on the engine thread (one cell); the threaded in-process
//! grid and the Kafka grid across machines implement the same trait; [`Adaptive`] (the server's
//! default) is the threaded grid while there are enough views, inline below.
//!
//! Contract every implementation keeps (the engine's correctness rests on it):
//! - `collect` returns commits in the order they were dispatched, each exactly once, with, for
//!   every view registered when the commit was dispatched, every change index whose before- or
//!   after-image the view's filter matches (a superset is allowed: the view checks again).
//! - `add_view` / `remove_view` take effect from the next dispatched commit. The engine adds
//!   views only when nothing is in flight; it may remove one with commits in flight (a view it
//!   dropped while applying a batch), and ignores matches reported for it afterwards.

mod adaptive;
mod cell;
mod inline;
mod threads;

pub use adaptive::{Adaptive, THREADS_FROM_VIEWS_DEFAULT};
pub use cell::CellMatcher;
pub use inline::Inline;
pub use threads::{Threads, ThreadsConfig, GRID_DEPTH_DEFAULT, GRID_DEPTH_MAX, GRID_DIM_MAX};

use crate::live::feed::Commit;
use crate::live::matcher::ViewId;
use herald_query::Filter;
use std::sync::Arc;
use std::time::Duration;

/// One commit's matches: per view it touches, the indexes into `commit.changes` of the changes
/// whose before- or after-image its filter matches, ascending.
#[derive(Debug, Clone)]
pub struct Matches {
    pub commit: Arc<Commit>,
    pub views: Vec<(ViewId, Vec<u32>)>,
}

/// Why a grid could not deliver a commit's matches; the engine answers with a reset of every
/// subscriber and a fresh result (as when it falls behind the commit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GridError {
    /// The grid lost track (a bound was passed, a cell's history is gone): the reason.
    Lost(String),
}

impl std::fmt::Display for GridError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GridError::Lost(why) => write!(f, "the matching grid lost track: {why}"),
        }
    }
}

/// One cell as a front end or a grid node sees it, for `/metrics` and the cluster status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellStatus {
    /// Query partition (grid row).
    pub row: u32,
    /// Write partition.
    pub part: u32,
    /// The newest seq the cell has matched.
    pub seq: u64,
    /// Views the cell matches.
    pub views: usize,
    /// Where it runs (`None`: this process).
    pub node: Option<String>,
}

/// What the live-query engine asks of a matching grid (see the module docs for the contract).
pub trait Matching: Send {
    /// From the next dispatched commit on, view `id` of `collection` is matched with `filter`.
    fn add_view(&mut self, id: ViewId, collection: &str, filter: Arc<Filter>);
    /// From the next dispatched commit on, view `id` is no longer matched.
    fn remove_view(&mut self, id: ViewId);
    /// Hands over the next commit, in seq order.
    fn dispatch(&mut self, commit: Arc<Commit>);
    /// The matches of the oldest dispatched commit not yet collected, once complete; `Ok(None)`
    /// when none is in flight or it is not complete within `timeout`.
    fn collect(&mut self, timeout: Duration) -> Result<Option<Matches>, GridError>;
    /// Forgets every commit in flight (the engine is about to rebuild every view): `collect`
    /// never returns them, even if a cell reports them later.
    fn clear(&mut self);
    /// Commits dispatched and not yet collected.
    fn in_flight(&self) -> usize;
    /// How many commits may be in flight at once (at least 1).
    fn depth(&self) -> usize;
    /// The cells, for observability.
    fn cells(&self) -> Vec<CellStatus>;
}

/// The in-process grid `config` describes: [`Adaptive`] when it sets `threads_from_views`, else
/// [`Threads`].
pub fn start(config: ThreadsConfig) -> Box<dyn Matching> {
    match config.threads_from_views {
        0 => Box::new(Threads::start(config)),
        n => Box::new(Adaptive::new(config, n)),
    }
}

/// The write partition (of `parts`) a document's changes belong to: FNV-1a over the collection
/// and id, so it is the same on every machine and every run (a grid spread over machines relies
/// on that).
pub fn write_partition(collection: &str, id: &str, parts: u32) -> u32 {
    if parts <= 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in collection
        .as_bytes()
        .iter()
        .chain(std::iter::once(&0u8))
        .chain(id.as_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(parts)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_partitions_are_stable_and_spread() {
        // Fixed values: a grid across machines needs every node to agree, across releases too.
        assert_eq!(write_partition("things", "a", 1), 0);
        assert_eq!(
            write_partition("things", "a", 4),
            write_partition("things", "a", 4)
        );
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[write_partition("things", &format!("d{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        let a = (0..64)
            .filter(|&p| write_partition("ab", "c", 64) == p)
            .count();
        assert_eq!(a, 1);
    }
}
