//! What the live-query engine sends a subscriber: typed messages, not wire JSON (the server
//! turns them into the protocol's server messages). Documents and change batches are shared
//! (`Arc`): every subscriber of a view gets the same batch, never a copy of it.

use crate::live::diff::ChangeEvent;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// One change batch of a view, shared by all its subscribers.
pub type Events = Arc<[ChangeEvent<Arc<Value>>]>;

/// A message for one subscription (`sub`).
#[derive(Debug, Clone)]
pub enum Message {
    /// The visible window as of `seq`, projected.
    Initial {
        sub: String,
        seq: u64,
        docs: Vec<Arc<Value>>,
    },
    /// The edits commit `seq` made to the window, in order.
    Changes {
        sub: String,
        seq: u64,
        events: Events,
    },
    /// Continuity is lost; a fresh `Initial` follows.
    Reset { sub: String, reason: ResetReason },
    /// The subscription failed and is gone.
    Error {
        sub: String,
        code: &'static str,
        message: String,
    },
}

impl Message {
    pub fn sub(&self) -> &str {
        match self {
            Message::Initial { sub, .. }
            | Message::Changes { sub, .. }
            | Message::Reset { sub, .. }
            | Message::Error { sub, .. } => sub,
        }
    }

    pub(crate) fn error(sub: &str, e: &crate::DbError) -> Message {
        Message::Error {
            sub: sub.to_string(),
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// Why the engine resets a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// A resume from `from` cannot be replayed.
    Resume { from: u64, gap: Gap },
    /// A resume was replayed, but its view cannot start where the replay ended.
    ReplayBehind,
    /// The engine fell behind the retained commit log.
    FellBehind,
}

/// Why a resume's history is not available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// The seq is ahead of the engine.
    Unknown,
    /// The commit log no longer reaches back to it.
    LogGone,
    /// More changes followed it than a query may undo (`QUERY_DOCS_MAX`).
    TooMany,
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gap::Unknown => "that seq is unknown here (ahead of the live-query engine)",
            Gap::LogGone => "the commit log no longer reaches back to it",
            Gap::TooMany => {
                "more changes to the collection followed it than a query may undo to rebuild \
                 the result as of it (QUERY_DOCS_MAX)"
            }
        })
    }
}

impl fmt::Display for ResetReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResetReason::Resume { from, gap } => {
                write!(
                    f,
                    "cannot resume from seq {from}: {gap}; here is a fresh result"
                )
            }
            ResetReason::ReplayBehind => f.write_str(
                "the engine is too far behind the newest commit to continue this subscription \
                 where the replay ended; here is a fresh result",
            ),
            ResetReason::FellBehind => {
                f.write_str("the live-query engine fell behind the commit log")
            }
        }
    }
}
