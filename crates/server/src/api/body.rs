//! Reading request bodies with a byte limit and JSON errors (rather than axum's plain-text
//! rejections), so every bad body gets a stable code.

use crate::api::error::{ApiError, ApiResult};
use axum::body::Body;
use serde_json::Value;

/// Reads the whole body, refusing more than `limit` bytes with `body_too_large`.
pub async fn read_bytes(body: Body, limit: usize) -> ApiResult<axum::body::Bytes> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            "body_too_large",
            format!("the request body is over {limit} bytes"),
        )
    })
}

/// Reads and parses a JSON body.
pub async fn read_json(body: Body, limit: usize) -> ApiResult<Value> {
    let bytes = read_bytes(body, limit).await?;
    parse_json(&bytes, "the body")
}

/// Parses JSON; `what` names it in the message ("the body", "line"). Valid JSON that nests
/// deeper than the parser's recursion limit (128, twice the document limit) is
/// `document_too_deep`, as a shallower too-deep document is, rather than `bad_json`.
pub fn parse_json(bytes: &[u8], what: &str) -> ApiResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| {
        if e.to_string().starts_with("recursion limit exceeded") {
            ApiError::new(
                "document_too_deep",
                format!("{what} nests deeper than the document limit: {e}"),
            )
        } else {
            ApiError::new("bad_json", format!("{what} is not valid JSON: {e}"))
        }
    })
}

/// Reads a JSON body that must be an object.
pub async fn read_object(body: Body, limit: usize) -> ApiResult<serde_json::Map<String, Value>> {
    match read_json(body, limit).await? {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::new(
            "bad_request",
            format!("the body must be a JSON object, got {}", kind(&other)),
        )),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
