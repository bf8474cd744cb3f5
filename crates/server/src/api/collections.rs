//! `GET /v1/collections`: the collections that hold documents (admin and service keys), found by
//! the database's skip-scan (one seek per collection, not a read of every document).

use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::extract::{Query as UrlQuery, State};
use axum::Json;
use herald_db::COLLECTIONS_LIST_MAX;
use herald_protocol::{CollectionInfo, CollectionList, ErrorCode};
use std::collections::HashMap;

/// Collections per answer when `limit` is absent.
pub const COLLECTIONS_PAGE_DEFAULT: usize = 1000;

/// `?limit=` (1 to [`COLLECTIONS_LIST_MAX`]) and `?after=<name>` page through the names, which
/// come in byte order; `"more": true` says the page is full and there may be more after it.
pub async fn list(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<CollectionList>> {
    let limit = match params.get("limit") {
        None => COLLECTIONS_PAGE_DEFAULT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=COLLECTIONS_LIST_MAX).contains(&n) => n,
            _ => {
                return Err(ApiError::new(
                    ErrorCode::BadRequest,
                    format!("'limit' must be an integer from 1 to {COLLECTIONS_LIST_MAX}"),
                ))
            }
        },
    };
    let after = params.get("after").cloned();
    let db = st.db.clone();
    let names = tokio::task::spawn_blocking(move || db.list_collections(after.as_deref(), limit))
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    let more = names.len() == limit;
    let collections = names
        .into_iter()
        .map(|name| CollectionInfo { name })
        .collect();
    Ok(Json(CollectionList { collections, more }))
}
