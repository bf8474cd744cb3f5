//! `GET /v1/cluster`: the cluster as this node sees it (`herald_protocol::ClusterStatus`), for
//! admin and service keys (as `/metrics`). A single node answers itself as the primary of a
//! one-node cluster with `cluster: null` (see `crate::cluster::single_node_status`).

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use herald_protocol::{ClusterStatus, ErrorCode, GridCell, StateDigest};

pub async fn status(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
    headers: HeaderMap,
) -> Json<ClusterStatus> {
    Json(match &st.cluster {
        Some(c) => with_waiting(&st, c.status()),
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

/// Adds the cells this node's engine waits on to a grid status (the cluster view knows the
/// cells this node runs; the engine knows what its subscriptions wait for).
pub fn with_waiting(st: &AppState, mut status: ClusterStatus) -> ClusterStatus {
    if let Some(grid) = &mut status.grid {
        let seq = st.db.seq();
        grid.waiting = st
            .live
            .cells()
            .into_iter()
            .map(|c| GridCell {
                row: c.row,
                part: c.part,
                seq: c.seq,
                lag_seqs: seq.saturating_sub(c.seq),
                views: c.views as u64,
                node: c.node,
            })
            .collect();
    }
    status
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

/// Snapshot bytes sent per body chunk.
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// `GET /v1/cluster/snapshot`: a snapshot of this node's store (`herald_cluster::snapshot`'s
/// format), for a node that must start where the log no longer reaches (admin or service key).
/// Written to a temporary file first (one consistent read of the store, not held open while a
/// slow client downloads), then streamed; `404 route_not_found` on a single node.
pub async fn snapshot(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
) -> Result<axum::response::Response, ApiError> {
    let Some(cluster) = st.cluster.clone() else {
        return Err(ApiError::new(
            ErrorCode::RouteNotFound,
            "a single node has no cluster snapshot",
        ));
    };
    let file = tokio::task::spawn_blocking(move || -> Result<std::fs::File, String> {
        let mut file = tempfile_in_data()?;
        cluster.write_snapshot(&mut file)?;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| e.to_string())?;
        Ok(file)
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
    .map_err(|e| ApiError::new(ErrorCode::Unavailable, e))?;
    let file = std::sync::Arc::new(std::sync::Mutex::new(file));
    let chunks = futures_util::stream::unfold(file, |file| async move {
        let f = file.clone();
        let chunk = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut buf = vec![0; SNAPSHOT_CHUNK_BYTES];
            let n = f.lock().expect("snapshot file").read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>(buf)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match chunk {
            Ok(buf) if buf.is_empty() => None,
            Ok(buf) => Some((Ok::<_, std::io::Error>(axum::body::Bytes::from(buf)), file)),
            Err(e) => Some((Err(e), file)),
        }
    });
    Ok(axum::response::Response::builder()
        .header("content-type", "application/octet-stream")
        .body(axum::body::Body::from_stream(chunks))
        .expect("a valid response"))
}

/// An anonymous temporary file (deleted when closed).
fn tempfile_in_data() -> Result<std::fs::File, String> {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "herald-snapshot-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}
