//! From the protocol's writes (`/v1/commit` entries, `/v1/bulk` lines, WebSocket write
//! requests) to `herald_db::Write`, and from write results back to the protocol's.

use crate::api::error::{ApiError, ApiResult};
use herald_db::{Write, WriteResult};
use herald_protocol::{CommitResult, ErrorCode, WriteItem, WriteOp};
use herald_query::Update;
use serde_json::Value;

/// Parses an update spec (PATCH bodies and commit `update` members alike). An empty object is
/// refused rather than taken as a replacement that would empty the document.
pub fn parse_update(spec: &Value) -> ApiResult<Update> {
    let update = Update::parse(spec).map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
    if update.is_replacement() && spec.as_object().is_some_and(|m| m.is_empty()) {
        return Err(ApiError::new(
            ErrorCode::BadUpdate,
            "an empty update does nothing; use PUT to replace a document",
        ));
    }
    Ok(update)
}

/// The database's write for a protocol write: the document moves, the update is parsed.
pub fn to_db(w: herald_protocol::Write) -> ApiResult<Write> {
    use herald_protocol::Write as W;
    Ok(match w {
        W::Put {
            collection,
            id,
            doc,
            if_version,
        } => Write::Put {
            collection,
            id,
            doc,
            if_version,
        },
        W::Insert {
            collection,
            id,
            doc,
        } => Write::Insert {
            collection,
            id,
            doc,
        },
        W::Update {
            collection,
            id,
            update,
            upsert,
            if_version,
        } => Write::Update {
            collection,
            id,
            update: parse_update(&update)?,
            upsert,
            if_version,
        },
        W::Delete {
            collection,
            id,
            if_version,
        } => Write::Delete {
            collection,
            id,
            if_version,
        },
    })
}

/// Decodes one write of a commit or request.
pub fn decode_item(item: &WriteItem) -> ApiResult<Write> {
    to_db(item.decode()?)
}

/// Decodes one write from JSON text (a bulk line).
pub fn decode_line(line: &[u8]) -> ApiResult<Write> {
    use herald_protocol::Decode;
    to_db(herald_protocol::Write::decode(line)?)
}

pub fn op_of(op: herald_db::ChangeOp) -> WriteOp {
    match op {
        herald_db::ChangeOp::Insert => WriteOp::Insert,
        herald_db::ChangeOp::Update => WriteOp::Update,
        herald_db::ChangeOp::Delete => WriteOp::Delete,
    }
}

pub fn commit_result(r: &WriteResult) -> CommitResult {
    CommitResult {
        op: r.op.map(op_of),
        collection: r.collection.clone(),
        id: r.id.clone(),
        version: r.version,
    }
}
