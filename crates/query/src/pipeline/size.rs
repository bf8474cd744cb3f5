//! An estimate of the memory a value holds, for the byte limits of blocking stages and of
//! `$push`/`$addToSet` arrays. It counts payload plus a fixed overhead per node, so it grows with
//! the real allocation; it is not exact and need not be.

use herald_value::Value;

/// Overhead counted for every value node (enum tag, pointer, capacity slack).
const NODE_BYTES: usize = 16;

/// The estimated bytes `v` holds.
pub fn approx_bytes(v: &Value) -> usize {
    NODE_BYTES
        + match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(approx_bytes).sum(),
            Value::Object(m) => m.iter().map(|(k, v)| k.len() + approx_bytes(v)).sum(),
        }
}

/// The estimated bytes of a list of documents.
pub fn docs_bytes(docs: &[Value]) -> usize {
    docs.iter().map(approx_bytes).sum()
}
