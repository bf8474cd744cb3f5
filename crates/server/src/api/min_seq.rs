//! Read-your-writes on any node: a read may name a `minSeq` (a seq its client saw acknowledged,
//! possibly by another node), and is answered only once this node has applied it, so the
//! answer's `seq` is at least `minSeq`. Past [`MIN_SEQ_WAIT`] the read is `unavailable`
//! (retryable). On a single node the seq has usually been reached already.
//!
//! GET endpoints (SSE `/v1/subscribe` included) take it as the `minSeq` query parameter,
//! handled by the middleware here for all of them; `POST /v1/query` and the WebSocket
//! `subscribe` message carry it as a member and call [`wait_min_seq`].

use crate::api::error::{ApiError, ApiResult};
use crate::api::forward::unavailable;
use crate::cluster::{wait_for, MIN_SEQ_WAIT};
use crate::state::AppState;
use axum::extract::{Query, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use herald_protocol::ErrorCode;
use std::collections::HashMap;

/// Waits until this node has applied `min_seq` (and, for a subscription, its live-query engine
/// has caught up with it too, so the `initial` reflects it); `unavailable` past the bound.
pub async fn wait_min_seq(st: &AppState, min_seq: Option<u64>, live: bool) -> ApiResult<()> {
    let Some(min) = min_seq else { return Ok(()) };
    let (db, engine) = (st.db.clone(), st.live.clone());
    let applied = move || match live {
        true => db.seq().min(engine.seq()),
        false => db.seq(),
    };
    if wait_for(applied, min, MIN_SEQ_WAIT).await {
        return Ok(());
    }
    Err(unavailable(format!(
        "this node has not applied seq {min} within {} s (it is at {}); retry",
        MIN_SEQ_WAIT.as_secs(),
        st.db.seq()
    )))
}

/// The `minSeq` query parameter, if any.
pub fn min_seq_param(req: &Request) -> ApiResult<Option<u64>> {
    if !req.uri().query().is_some_and(|q| q.contains("minSeq")) {
        return Ok(None);
    }
    let Query(params) = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, e.to_string()))?;
    let Some(v) = params.get("minSeq") else {
        return Ok(None);
    };
    v.trim().parse::<u64>().map(Some).map_err(|_| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("minSeq must be a seq (a non-negative integer), got '{v}'"),
        )
    })
}

/// The middleware: a GET with `?minSeq=` waits for it before its handler runs.
pub async fn min_seq_reads(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    let min = match min_seq_param(&req) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let live = req.uri().path() == "/v1/subscribe";
    if let Err(e) = wait_min_seq(&st, min, live).await {
        return e.into_response();
    }
    next.run(req).await
}
