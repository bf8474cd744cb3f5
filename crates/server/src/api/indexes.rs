//! Index management: `POST /v1/indexes` declares a composite index (built in the background,
//! 202) of a collection or, with `collectionGroup`, of collection-group scope;
//! `GET /v1/indexes?collection=` (or `?collectionGroup=`), `DELETE
//! /v1/indexes/{name}?collection=` (or `?collectionGroup=`), and
//! `PUT /v1/indexes/exemptions` replaces a collection's automatic-index exemptions.

use crate::api::body::read_typed;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::StatusCode;
use axum::Json;
use herald_db::{CompositeIndex, DbError, IndexListing};
use herald_protocol::ErrorCode;
use herald_protocol::{
    ExemptionsBody, ExemptionsSet, IndexBody, IndexDropped, IndexField, IndexInfo, IndexList,
    IndexState,
};
use herald_query::Direction;
use std::collections::HashMap;

const BODY_MAX: usize = 64 << 10;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> ApiResult<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??)
}

fn collection_param(params: &HashMap<String, String>) -> ApiResult<String> {
    params.get("collection").cloned().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "'collection' (or 'collectionGroup') query parameter is required",
        )
    })
}

/// `?collectionGroup=`: the request is about a collection group's indexes.
fn group_param(params: &HashMap<String, String>) -> ApiResult<Option<String>> {
    match (
        params.get("collectionGroup"),
        params.contains_key("collection"),
    ) {
        (Some(_), true) => Err(ApiError::new(
            ErrorCode::BadRequest,
            "give 'collection' or 'collectionGroup', not both",
        )),
        (g, _) => Ok(g.cloned()),
    }
}

pub async fn create(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    body: Body,
) -> ApiResult<(StatusCode, Json<IndexInfo>)> {
    let body: IndexBody = read_typed(body, BODY_MAX).await?;
    let IndexBody {
        collection,
        collection_group,
        name,
        fields,
    } = body;
    // The type checked each order is 1 or -1.
    let fields: Vec<(String, Direction)> = fields
        .into_iter()
        .map(|f| {
            let dir = match f.order {
                Some(-1) => Direction::Desc,
                _ => Direction::Asc,
            };
            (f.path, dir)
        })
        .collect();
    let db = st.db.clone();
    let index = blocking(move || match collection_group {
        Some(g) => db.create_group_index(&g, &name, fields),
        None => db.create_index(&collection, &name, fields),
    })
    .await?;
    Ok((StatusCode::ACCEPTED, Json(index_info(&index))))
}

pub async fn list(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<IndexList>> {
    if let Some(g) = group_param(&params)? {
        let db = st.db.clone();
        let group = g.clone();
        let list = blocking(move || db.list_group_indexes(&group)).await?;
        return Ok(Json(IndexList {
            collection: String::new(),
            collection_group: Some(g),
            composite: list.iter().map(index_info).collect(),
            exemptions: vec![],
            building: vec![],
        }));
    }
    let collection = collection_param(&params)?;
    let db = st.db.clone();
    let listing = blocking(move || db.list_indexes(&collection)).await?;
    Ok(Json(index_list(listing)))
}

fn index_list(l: IndexListing) -> IndexList {
    IndexList {
        collection: l.collection,
        collection_group: None,
        composite: l.composite.iter().map(index_info).collect(),
        exemptions: l.exemptions,
        building: l.building,
    }
}

fn index_info(ci: &CompositeIndex) -> IndexInfo {
    IndexInfo {
        name: ci.name.clone(),
        fields: ci
            .fields
            .iter()
            .map(|f| IndexField {
                path: f.path.clone(),
                order: Some(match f.direction {
                    Direction::Asc => 1,
                    Direction::Desc => -1,
                }),
            })
            .collect(),
        state: match ci.state {
            herald_db::IndexState::Building => IndexState::Building,
            herald_db::IndexState::Ready => IndexState::Ready,
        },
    }
}

pub async fn drop(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    name: Result<Path<String>, PathRejection>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<IndexDropped>> {
    let Path(name) = name?;
    let db = st.db.clone();
    if let Some(g) = group_param(&params)? {
        blocking(move || db.drop_group_index(&g, &name)).await?;
        return Ok(Json(IndexDropped { dropped: true }));
    }
    let collection = collection_param(&params)?;
    blocking(move || db.drop_index(&collection, &name)).await?;
    Ok(Json(IndexDropped { dropped: true }))
}

pub async fn exemptions(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    body: Body,
) -> ApiResult<Json<ExemptionsSet>> {
    let ExemptionsBody {
        collection,
        exemptions: paths,
    } = read_typed(body, BODY_MAX).await?;
    let db = st.db.clone();
    blocking(move || db.set_exemptions(&collection, paths)).await?;
    Ok(Json(ExemptionsSet { ok: true }))
}
