//! The HTTP API under `/v1`: routes, and the fallbacks that keep every error JSON.

pub mod aggregate;
pub mod auth;
pub mod body;
pub mod bulk;
pub mod cluster;
pub mod collections;
pub mod commit;
pub mod console;
pub mod docs;
pub mod error;
pub mod forward;
pub mod indexes;
pub mod live;
pub mod metrics;
pub mod min_seq;
pub mod query;
pub mod triggers;
pub mod writes;

use crate::state::AppState;
use axum::extract::State;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use error::ApiError;
use herald_protocol::{ErrorCode, Health, HealthStatus, WriteRefusal};

/// `ok` while serving; `writes` says why writes are refused, if they are (a full disk, a
/// failed store): reads still work then.
async fn health(State(st): State<AppState>) -> Json<Health> {
    Json(Health {
        status: HealthStatus::Ok,
        seq: st.db.seq(),
        writes: st.db.write_refusal().map(|err| WriteRefusal {
            code: err.code().to_string(),
            message: err.to_string(),
        }),
    })
}

async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::RouteNotFound,
        "no such endpoint (see docs/protocol.md)",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this endpoint does not accept that method",
    )
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/cluster/digest", get(cluster::digest))
        .route("/v1/cluster/snapshot", get(cluster::snapshot))
        .route(
            "/v1/docs/{*path}",
            put(docs::put)
                .post(docs::insert)
                .get(docs::get)
                .patch(docs::patch)
                .delete(docs::delete),
        )
        .route("/v1/collections", get(collections::list))
        .route("/v1/query", post(query::query))
        .route("/v1/aggregate", post(aggregate::aggregate))
        .route("/v1/ws", get(live::ws))
        .route("/v1/subscribe", get(live::sse))
        .route("/v1/commit", post(commit::commit))
        .route("/v1/bulk", post(bulk::bulk))
        .route("/v1/indexes", post(indexes::create).get(indexes::list))
        .route("/v1/indexes/exemptions", put(indexes::exemptions))
        .route("/v1/indexes/{name}", axum::routing::delete(indexes::drop))
        .route("/v1/triggers", get(triggers::list))
        .route(
            "/v1/triggers/{name}",
            put(triggers::put)
                .get(triggers::get)
                .delete(triggers::delete),
        )
        .route("/v1/triggers/{name}/dead", get(triggers::dead))
        .route("/v1/triggers/{name}/dead/retry", post(triggers::retry))
        .route("/v1/triggers/{name}/dead/purge", post(triggers::purge))
        .route("/v1/keys", post(auth::create_key).get(auth::list_keys))
        .route("/v1/keys/{id}", axum::routing::delete(auth::revoke_key))
        .route("/v1/rules", put(auth::put_rules).get(auth::get_rules))
        .route("/metrics", get(metrics::metrics))
        .route("/console", get(console::index))
        .route("/console/", get(console::index))
        .route("/console/{file}", get(console::file))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Outermost first: a write on a follower is forwarded before anything else runs.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            min_seq::min_seq_reads,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::forward_writes,
        ))
        .with_state(state)
}
