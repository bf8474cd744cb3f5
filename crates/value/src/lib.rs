//! Herald's document model: JSON values with MongoDB's total order, dotted field paths, the
//! order-preserving binary key codec used for index keys, and document limits.
//!
//! Documents are plain [`serde_json::Value`]s built with the `preserve_order` feature, so objects keep
//! their key order (MongoDB compares embedded documents field by field, in order). This crate adds
//! what JSON lacks for a database:
//!
//! - [`compare`]: one total order across all values, following MongoDB's comparison order
//!   (null < numbers < strings < objects < arrays < booleans; ints and doubles compare numerically).
//! - [`encode_key`]: a byte encoding with `encode(a) < encode(b)` exactly when `compare(a, b)` is
//!   `Less`, so a B-tree over encoded keys returns documents in query order.
//! - [`FieldPath`]: a parsed, validated dotted path such as `address.geo.0`.
//! - [`check_document`]: nesting depth and size limits.
//!
//! Nothing here does IO or allocates on the comparison path.

mod codec;
mod limits;
mod number;
mod order;
mod path;

pub use codec::{encode_key, encode_key_desc, encode_key_desc_limited, encode_key_limited, key_of};
pub use limits::{check_document, DocumentError, DocumentLimits, DOC_BYTES_MAX, DOC_DEPTH_MAX};
pub use number::{compare_numbers, Num};
pub use order::{bracket, compare, values_equal, Bracket};
pub use path::{FieldPath, PathError, Segment, PATH_BYTES_MAX, PATH_SEGMENTS_MAX};
pub use serde_json::{json, Map, Number, Value};
