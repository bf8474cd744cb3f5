//! `GET /v1/cluster`: the cluster as this node sees it (`herald_protocol::ClusterStatus`), for
//! admin and service keys (as `/metrics`). A single node answers itself as the primary of a
//! one-node cluster with `cluster: null` (see `crate::cluster::single_node_status`).

use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use crate::api::error::ApiError;
use herald_protocol::{ClusterStatus, ErrorCode, StateDigest};

pub async fn status(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
    headers: HeaderMap,
) -> Json<ClusterStatus> {
    Json(match &st.cluster {
        Some(c) => c.status(),
        None => {
            // A single node does not know the address clients reach it by; the Host header
            // they used is the best answer.
            let host = headers
                .get("host")
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            crate::cluster::single_node_status(format!("http://{host}"), st.db.seq())
        }
    })
}

/// `GET /v1/cluster/digest`: the digest of this node's store (`herald_protocol::StateDigest`),
/// for the same keys. Reads every table, off the async threads.
pub async fn digest(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
) -> Result<Json<StateDigest>, ApiError> {
    let db = st.db.clone();
    let d = tokio::task::spawn_blocking(move || db.state_digest())
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    Ok(Json(StateDigest {
        index: d.index,
        seq: d.seq,
        digest: format!("{:016x}", d.digest),
    }))
}
