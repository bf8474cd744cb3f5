//! Writes on a node that is not the primary: forwarded to the primary over HTTP, its answer
//! (status, headers, body) returned as-is, so a client sees the same responses and error codes
//! on every node. A middleware in front of every route; single nodes and the primary pass
//! straight through.
//!
//! Invariants:
//! - A forwarded request carries [`FORWARDED_HEADER`]; a node that receives one while not the
//!   primary answers `unavailable` instead of forwarding again, so two nodes that disagree on
//!   who is primary cannot bounce a write between them.
//! - No primary known, or the primary unreachable: `unavailable` with `Retry-After: 1`. A
//!   write that reached the primary but whose answer was lost may have been applied (as with
//!   any network failure); `mutationId` makes a retried commit safe.
//! - Before answering a forwarded write that carries a `seq`, the node waits (bounded by
//!   [`MIN_SEQ_WAIT`]) until it has applied that seq, so the client's next read here sees its
//!   write. Past the bound the answer goes out anyway (the write did succeed); a read with
//!   `minSeq` then waits or says `unavailable`.

use crate::api::error::ApiError;
use crate::cluster::{wait_for, ClusterView, MIN_SEQ_WAIT};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use herald_protocol::ErrorCode;
use std::sync::Arc;

/// Marks a request forwarded by a node (its value: that node's id).
pub const FORWARDED_HEADER: &str = "herald-forwarded";

/// Largest answer of the primary read whole (to find its `seq`); write answers are small (a
/// bulk answer lists at most 100 errors), so a bigger one is passed on without waiting.
const ANSWER_BYTES_MAX: usize = 1 << 20;

/// Whether a request writes: every PUT, POST, PATCH and DELETE under `/v1/` except
/// `POST /v1/query` and `POST /v1/aggregate` (reads with a body).
pub fn is_write(method: &Method, path: &str) -> bool {
    let writes = matches!(
        *method,
        Method::PUT | Method::POST | Method::PATCH | Method::DELETE
    );
    writes && path.starts_with("/v1/") && path != "/v1/query" && path != "/v1/aggregate"
}

/// Headers that belong to one connection (RFC 9110 section 7.6.1) or that the forwarding
/// client sets itself; every other header goes through, both ways.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// `unavailable` (503, `Retry-After: 1`).
pub fn unavailable(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::Unavailable, message)
}

/// The middleware: writes on a node that is not the primary go to the primary.
pub async fn forward_writes(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(cluster) = st.cluster.clone() else {
        return next.run(req).await;
    };
    if !is_write(req.method(), req.uri().path()) || st.is_primary() {
        return next.run(req).await;
    }
    match forward(&st, &cluster, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// The primary to send a write to, or why there is none.
pub fn primary_of(cluster: &Arc<dyn ClusterView>, headers: &HeaderMap) -> Result<String, ApiError> {
    if headers.contains_key(FORWARDED_HEADER) {
        return Err(unavailable(
            "this node is not the primary (a forwarded write is not forwarded again); retry",
        ));
    }
    cluster
        .primary_url()
        .ok_or_else(|| unavailable("no primary is known (failover in progress); retry"))
}

async fn forward(
    st: &AppState,
    cluster: &Arc<dyn ClusterView>,
    req: Request,
) -> Result<Response, ApiError> {
    let base = primary_of(cluster, req.headers())?;
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 1);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        FORWARDED_HEADER,
        cluster
            .node_id()
            .parse()
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the node id is not a header value"))?,
    );
    // The body streams through: a bulk upload is never buffered here.
    let body = reqwest::Body::wrap_stream(body.into_data_stream());
    let answer = st
        .forwarder
        .request(parts.method, &url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(|e| unreachable_primary(&base, &e))?;
    relay(st, answer, &base).await
}

fn unreachable_primary(base: &str, e: &reqwest::Error) -> ApiError {
    unavailable(format!(
        "the primary ({base}) did not answer: {e}; retry (a write may have been applied: \
         use mutationId to make retries safe)"
    ))
}

/// The primary's answer as this node's, once this node has applied the write's seq.
async fn relay(st: &AppState, answer: reqwest::Response, base: &str) -> Result<Response, ApiError> {
    let status = StatusCode::from_u16(answer.status().as_u16())
        .map_err(|_| ApiError::new(ErrorCode::Internal, "the primary's status is not HTTP"))?;
    let mut headers = HeaderMap::with_capacity(answer.headers().len());
    for (name, value) in answer.headers() {
        if !hop_by_hop(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    let small = answer
        .content_length()
        .is_some_and(|n| n as usize <= ANSWER_BYTES_MAX);
    let body = if status.is_success() && small {
        let bytes = answer
            .bytes()
            .await
            .map_err(|e| unreachable_primary(base, &e))?;
        if let Some(seq) = seq_of(&bytes) {
            let db = st.db.clone();
            wait_for(move || db.seq(), seq, MIN_SEQ_WAIT).await;
        }
        Body::from(bytes)
    } else {
        Body::from_stream(answer.bytes_stream())
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    Ok(resp)
}

/// The top-level `seq` of a JSON answer (every write answer has one).
pub fn seq_of(bytes: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()?
        .get("seq")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_every_changing_method_under_v1_but_query() {
        assert!(is_write(&Method::PUT, "/v1/docs/c/a"));
        assert!(is_write(&Method::POST, "/v1/commit"));
        assert!(is_write(&Method::POST, "/v1/triggers/t/dead/retry"));
        assert!(is_write(&Method::DELETE, "/v1/keys/k1"));
        assert!(!is_write(&Method::POST, "/v1/query"));
        assert!(!is_write(&Method::POST, "/v1/aggregate"));
        assert!(!is_write(&Method::GET, "/v1/docs/c/a"));
        assert!(!is_write(&Method::GET, "/v1/ws"));
        assert!(!is_write(&Method::POST, "/console/x"));
    }

    #[test]
    fn the_seq_of_an_answer() {
        assert_eq!(seq_of(br#"{"id":"a","version":1,"seq":42}"#), Some(42));
        assert_eq!(seq_of(br#"{"deleted":true}"#), None);
        assert_eq!(seq_of(b"not json"), None);
    }
}
