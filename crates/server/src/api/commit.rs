//! `POST /v1/commit`: several writes applied atomically, `{"writes":[...]}` ->
//! `{"seq","results"}`. A failed `ifVersion` fails the whole commit with 409 and names the write.
//! An optional `mutationId` makes the commit idempotent: a retry with a remembered id applies
//! nothing and answers the original `seq` and `results` with `"replayed": true`.

use crate::api::body::read_object;
use crate::api::error::{ApiError, ApiResult};
use crate::api::writes::{parse_write, result_json};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// Largest commit request body.
pub const COMMIT_BODY_BYTES_MAX: usize = 16 << 20;

pub async fn commit(
    State(st): State<AppState>,
    p: crate::auth::Principal,
    body: Body,
) -> ApiResult<Json<Value>> {
    let mut m = read_object(body, COMMIT_BODY_BYTES_MAX).await?;
    if let Some(k) = m.keys().find(|k| *k != "writes" && *k != "mutationId") {
        return Err(ApiError::new(
            "bad_request",
            format!("unknown commit member '{k}'"),
        ));
    }
    let mutation_id = match m.remove("mutationId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            return Err(ApiError::new(
                "bad_request",
                "'mutationId' must be a string",
            ))
        }
    };
    let Some(Value::Array(items)) = m.remove("writes") else {
        return Err(ApiError::new(
            "bad_request",
            "a commit needs 'writes' (an array)",
        ));
    };
    let mut writes = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        writes.push(parse_write(item).map_err(|mut e| {
            e.message = format!("write {i}: {}", e.message);
            e.extra = Some(json!({"write": i}));
            e
        })?);
    }
    let out = crate::api::auth::submit_mutation_as(&st, &p, writes, mutation_id).await?;
    let results: Vec<Value> = out.results.iter().map(result_json).collect();
    let mut body = json!({"seq": out.seq, "results": results});
    if out.replayed {
        body["replayed"] = Value::Bool(true);
    }
    Ok(Json(body))
}
