//! The write path: a transaction of document writes, validated on the caller's thread
//! ([`prepare`]) and applied inside one storage job ([`apply`], in `apply.rs`).
//!
//! Checks that do not need the stored state (paths, document shape and limits, `_id`) run on the
//! caller's thread before the job is queued; the job reads the current documents, checks
//! `ifVersion` preconditions, computes the new documents, replaces their index entries, assigns
//! the next commit `seq` and appends the commit record. If anything fails the job returns an
//! error and the storage layer discards all of its writes: a transaction applies entirely or not
//! at all, and a failed transaction consumes no `seq`.

mod apply;

pub(crate) use apply::{apply, ApplyCtx};

use crate::commitlog::LogRetention;
use crate::error::DbError;
use crate::layout::encode_doc;
use crate::mutations::MutationRetention;
use crate::names::{check_collection, check_segment, generate_id};
use crate::txn::Write;
use herald_value::{check_document, DocumentLimits, Value};

/// Settings the job needs.
#[derive(Debug, Clone)]
pub struct WriteSettings {
    pub limits: DocumentLimits,
    /// The commit log's retention and pruning hint.
    pub log: LogRetention,
    pub mutations: MutationRetention,
}

/// Per write, the stored record of a put or inserted document (`encode_doc` with version 0;
/// [`apply`] writes the version in): serialized by [`prepare`] on the caller's thread, so the
/// one storage writer does not spend its time on it. `None` for
/// updates and deletes, whose documents only the writer knows.
pub type Encoded = Vec<Option<Vec<u8>>>;

/// Validates what can be validated without the store, fills in generated ids and `_id`, and
/// serializes put and inserted documents ([`Encoded`]).
/// `writes_max` is [`COMMIT_WRITES_MAX`](crate::COMMIT_WRITES_MAX) for clients and `TASK_WRITES_MAX` for trigger tasks.
pub fn prepare(
    writes: &mut [Write],
    limits: &DocumentLimits,
    writes_max: usize,
) -> Result<Encoded, DbError> {
    if writes.is_empty() {
        return Err(DbError::BadRequest(
            "a commit needs at least one write".into(),
        ));
    }
    if writes.len() > writes_max {
        return Err(DbError::LimitExceeded(format!(
            "a commit may hold at most {writes_max} writes"
        )));
    }
    for w in writes.iter_mut() {
        match w {
            Write::Put {
                collection,
                id,
                doc,
                ..
            } => {
                check_collection(collection)?;
                check_segment(id, "document id")?;
                set_id(doc, id)?;
                check_document(doc, limits)?;
            }
            Write::Insert {
                collection,
                id,
                doc,
            } => {
                check_collection(collection)?;
                let chosen = match (id.take(), doc.get("_id")) {
                    (Some(i), _) => i,
                    (None, Some(Value::String(s))) => s.clone(),
                    (None, Some(other)) => {
                        return Err(DbError::BadRequest(format!(
                            "_id must be a string, got {other}"
                        )));
                    }
                    (None, None) => generate_id(),
                };
                check_segment(&chosen, "document id")?;
                set_id(doc, &chosen)?;
                check_document(doc, limits)?;
                *id = Some(chosen);
            }
            Write::Update { collection, id, .. } | Write::Delete { collection, id, .. } => {
                check_collection(collection)?;
                check_segment(id, "document id")?;
            }
        }
    }
    Ok(writes
        .iter()
        .map(|w| w.supplied().map(|doc| encode_doc(0, doc)))
        .collect())
}

/// Puts `_id` first in the document; an `_id` that contradicts `id` is an error.
pub(crate) fn set_id(doc: &mut Value, id: &str) -> Result<(), DbError> {
    let Value::Object(m) = doc else {
        return Err(DbError::BadDocument(
            herald_value::DocumentError::NotAnObject,
        ));
    };
    match m.get("_id") {
        Some(Value::String(s)) if s == id => {}
        Some(other) => {
            return Err(DbError::IdMismatch {
                path: id.to_string(),
                body: other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string()),
            })
        }
        None => {}
    }
    if m.keys().next().map(String::as_str) != Some("_id") {
        // Moves an existing `_id` (equal to `id`, checked above) or inserts one, first.
        m.shift_insert(0, "_id".into(), Value::String(id.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod set_id_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_id_comes_first_and_the_other_fields_keep_their_order() {
        for (mut doc, id) in [
            (json!({"a": 1, "_id": "x", "b": 2}), "x"),
            (json!({"a": 1, "b": 2}), "x"),
            (json!({"_id": "x", "a": 1, "b": 2}), "x"),
        ] {
            set_id(&mut doc, id).unwrap();
            let keys: Vec<&str> = doc
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["_id", "a", "b"]);
            assert_eq!(doc["_id"], "x");
        }
        let mut doc = json!({"a": 1, "_id": "y"});
        assert!(matches!(
            set_id(&mut doc, "x"),
            Err(DbError::IdMismatch { .. })
        ));
    }
}
