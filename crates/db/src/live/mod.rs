//! The incremental core of live queries: one maintained query result that absorbs committed
//! changes and reports, per commit, the exact edit of the visible window.
//!
//! This module is pure (no IO): it is given changes and, when it runs out of known documents, asks
//! a [`Refill`] for the top of the result at a given seq. The subscription registry, the change
//! feed and the WebSocket/SSE protocol build on it.
//!
//! Invariant (checked by the model test in `tests/it/live_model.rs`): after every commit, applying
//! the emitted events to the client's previous list yields exactly the pull query's result at that
//! commit's seq.
//!
//! Live aggregations (`agg.rs`) share the engine: their views register the pipeline's head query
//! with the grid like a query view, and feed the matched changes to herald-query's incremental
//! `LiveAgg`; their result rows are diffed into the same events.

mod agg;
mod diff;
pub mod engine;
pub mod grid;
pub mod matcher;
mod message;
pub mod scope;
mod view;

pub use diff::{diff_windows, ChangeEvent, EventKind};
pub use engine::{LiveEngine, Sink, SubscribeRequest, SUBSCRIBERS_PER_VIEW_MAX};
// The change feed moved out of `live` (it is the database's output, below `Db`); its names stay
// reachable here, and `feed` is in scope for the modules below (`live::feed::Commit`).
use crate::feed;
pub use crate::feed::{
    Commit, CommitClock, Feed, CLOCK_SLOTS, FEED_BYTES_MAX, FEED_RING_MAX, REAPER_BYTES_MAX,
};
pub use message::{Events, Gap, Message, ResetReason};
pub use view::{DocChange, LiveView, Refill, SLACK_DEFAULT};
