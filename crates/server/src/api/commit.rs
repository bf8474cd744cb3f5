//! `POST /v1/commit`: several writes applied atomically, `{"writes":[...]}` ->
//! `{"seq","results"}`. A failed `ifVersion` fails the whole commit with 409 and names the write.
//! An optional `mutationId` makes the commit idempotent: a retry with a remembered id applies
//! nothing and answers the original `seq` and `results` with `"replayed": true`.

use crate::api::body::read_bytes;
use crate::api::error::ApiResult;
use crate::api::writes::{commit_result, decode_item};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use herald_protocol::{CommitBody, CommitReply, Decode};

/// Largest commit request body.
pub const COMMIT_BODY_BYTES_MAX: usize = 16 << 20;

pub async fn commit(
    State(st): State<AppState>,
    p: crate::auth::Principal,
    body: Body,
) -> ApiResult<Json<CommitReply>> {
    let bytes = read_bytes(body, COMMIT_BODY_BYTES_MAX).await?;
    let body = CommitBody::decode(&bytes)?;
    let mut writes = Vec::with_capacity(body.writes.len());
    for (i, item) in body.writes.iter().enumerate() {
        writes.push(decode_item(item).map_err(|e| e.at_write(i))?);
    }
    let out = crate::api::auth::submit_mutation_as(&st, &p, writes, body.mutation_id).await?;
    Ok(Json(CommitReply {
        seq: out.seq,
        results: out.results.iter().map(commit_result).collect(),
        replayed: out.replayed,
    }))
}
