//! Reading request bodies with a byte limit and JSON errors (rather than axum's plain-text
//! rejections), so every bad body gets a stable code.

use crate::api::error::{ApiError, ApiResult};
use axum::body::Body;
use herald_protocol::{Decode, ErrorCode};
use serde_json::Value;

/// Reads the whole body, refusing more than `limit` bytes with `body_too_large`.
pub async fn read_bytes(body: Body, limit: usize) -> ApiResult<axum::body::Bytes> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("the request body is over {limit} bytes"),
        )
    })
}

/// Reads and parses a JSON body (a document or an update: any JSON value).
pub async fn read_json(body: Body, limit: usize) -> ApiResult<Value> {
    let bytes = read_bytes(body, limit).await?;
    parse_json(&bytes, "the body")
}

/// Reads a body and decodes it as the protocol type `T`.
pub async fn read_typed<T: Decode>(body: Body, limit: usize) -> ApiResult<T> {
    let bytes = read_bytes(body, limit).await?;
    Ok(T::decode(&bytes)?)
}

/// Parses JSON; `what` names it in the message ("the body", "line"). Valid JSON that nests
/// deeper than the parser's recursion limit (128, twice the document limit) is
/// `document_too_deep`, as a shallower too-deep document is, rather than `bad_json`.
pub fn parse_json(bytes: &[u8], what: &str) -> ApiResult<Value> {
    herald_protocol::decode::parse_value(bytes).map_err(|e| {
        let mut e = ApiError::from(e);
        e.message = format!("{what}: {}", e.message);
        e
    })
}
