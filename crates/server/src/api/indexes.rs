//! Index management: `POST /v1/indexes` declares a composite index (built in the background,
//! 202), `GET /v1/indexes?collection=`, `DELETE /v1/indexes/{name}?collection=`, and
//! `PUT /v1/indexes/exemptions` replaces a collection's automatic-index exemptions.

use crate::api::body::read_object;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::StatusCode;
use axum::Json;
use herald_db::DbError;
use herald_query::Direction;
use serde_json::{json, Value};
use std::collections::HashMap;

const BODY_MAX: usize = 64 << 10;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> ApiResult<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new("internal", e.to_string()))??)
}

fn collection_param(params: &HashMap<String, String>) -> ApiResult<String> {
    params
        .get("collection")
        .cloned()
        .ok_or_else(|| ApiError::new("bad_request", "'collection' query parameter is required"))
}

/// A required string member of an index request.
fn required(m: &serde_json::Map<String, Value>, key: &str) -> ApiResult<String> {
    m.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ApiError::new("bad_index", format!("'{key}' is required")))
}

pub async fn create(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    body: Body,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let m = read_object(body, BODY_MAX).await?;
    let collection = required(&m, "collection")?;
    let name = required(&m, "name")?;
    let Some(Value::Array(items)) = m.get("fields") else {
        return Err(ApiError::new(
            "bad_index",
            "'fields' must be an array of {\"path\", \"order\"}",
        ));
    };
    let mut fields = Vec::new();
    for f in items {
        let path = f
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::new("bad_index", "every field needs a 'path'"))?;
        let dir = match f.get("order").and_then(Value::as_i64) {
            None | Some(1) => Direction::Asc,
            Some(-1) => Direction::Desc,
            Some(o) => {
                return Err(ApiError::new(
                    "bad_index",
                    format!("order must be 1 or -1, got {o}"),
                ))
            }
        };
        fields.push((path.to_string(), dir));
    }
    let db = st.db.clone();
    let index = blocking(move || db.create_index(&collection, &name, fields)).await?;
    Ok((StatusCode::ACCEPTED, Json(index)))
}

pub async fn list(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let collection = collection_param(&params)?;
    let db = st.db.clone();
    Ok(Json(blocking(move || db.list_indexes(&collection)).await?))
}

pub async fn drop(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    name: Result<Path<String>, PathRejection>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let Path(name) = name?;
    let collection = collection_param(&params)?;
    let db = st.db.clone();
    blocking(move || db.drop_index(&collection, &name)).await?;
    Ok(Json(json!({"dropped": true})))
}

pub async fn exemptions(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    body: Body,
) -> ApiResult<Json<Value>> {
    let m = read_object(body, BODY_MAX).await?;
    let collection = required(&m, "collection")?;
    let Some(Value::Array(items)) = m.get("exemptions") else {
        return Err(ApiError::new(
            "bad_index",
            "'exemptions' must be an array of field paths",
        ));
    };
    let paths: Vec<String> = items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| ApiError::new("bad_index", "exemptions are field path strings"))
        })
        .collect::<Result<_, _>>()?;
    let db = st.db.clone();
    blocking(move || db.set_exemptions(&collection, paths)).await?;
    Ok(Json(json!({"ok": true})))
}
