//! Herald's security rules: which end user may read and write which documents.
//!
//! A rule set is JSON, `{"rules":[{"match":"users/{uid}/posts/{postId}","read":{...},
//! "create":{...},"update":{...},"delete":{...},"fields":[...]}]}` (docs/security.md). The first
//! rule whose pattern matches a collection applies; a collection no rule matches is closed to
//! end users. Every condition is a filter in Herald's query language with placeholders:
//! `$$auth.uid`, `$$auth.claims.<name>` and the pattern's collection variables (`$$uid`).
//!
//! - Reads: [`Rules::read_filter`] gives the filter to AND into a query or subscription, so a
//!   user's results, changes and positions are those of the readable documents only.
//! - Writes: [`Rules::check_write`] decides from the document before and after the write,
//!   evaluated as the envelope `{"before": ..., "after": ...}`.
//!
//! Pure: no IO, no clock, no async. The server calls it; `herald rules test` runs
//! [`testfile`] cases against it.

mod eval;
mod parse;
mod placeholders;
pub mod testfile;

pub use eval::{and_filters, AuthCtx, Denial, WriteOp};
pub use parse::{Rules, PATTERN_SEGMENTS_MAX, RULES_BYTES_MAX, RULES_MAX};

/// A rule set that does not validate (code `bad_rules`); the message says where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad rules: {0}")]
pub struct RulesError(pub String);

impl RulesError {
    pub fn code(&self) -> &'static str {
        "bad_rules"
    }
}

#[cfg(test)]
mod tests;
