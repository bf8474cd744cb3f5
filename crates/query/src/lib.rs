//! Herald's query language core: MongoDB-compatible filters, sort, skip/limit, projection and
//! update operators, and aggregation pipelines over JSON documents.
//!
//! Everything here is pure: no IO, no async, no clocks (callers pass `now` in), deterministic.
//! Queries are parsed once into typed plans ([`Filter`], [`Sort`], [`Projection`], [`Update`])
//! and then evaluated many times; a malformed query is refused at parse time with a typed error
//! whose [`code`](QueryError::code) is stable.
//!
//! The semantics are MongoDB's, including implicit array traversal (`walk.rs`), null matching
//! missing fields, type-bracketed comparisons and the BSON comparison order. The contract is the
//! language-neutral vectors in `testdata/conformance/`, which the TypeScript SDK runs too.

mod apply;
mod cursor;
mod date;
mod error;
mod filter;
pub mod limits;
mod parse;
pub mod pipeline;
mod projection;
mod query;
mod regex;
mod sort;
mod sortkey;
mod update;
mod walk;

pub use cursor::{Cursor, Cursors, CURSOR_MEMBERS};
pub use date::iso8601_utc;
pub use error::{QueryError, UpdateError};
pub use filter::{CmpOp, Expr, FieldExpr, FieldOp, Filter, InList, Test, TypeSet};
pub use projection::Projection;
pub use query::Query;
pub use regex::Pattern;
pub use sort::{Sort, SortKey, PATH_MEMBER};
pub use sortkey::{Direction, KeyValue};
pub use update::Update;
pub use walk::{walk, LeafArrays};
