//! `/v1/docs/{path}`: one document by path. PUT upserts, POST to a collection inserts, GET
//! reads (version in `ETag`), PATCH applies update operators, DELETE removes. `If-Match: "N"`
//! on PUT, PATCH and DELETE is an `ifVersion` precondition.

use crate::api::auth::{read_denied, submit_as};
use crate::api::body::read_json;
use crate::api::error::{ApiError, ApiResult};
use crate::api::writes::parse_update;
use crate::auth::Principal;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_db::{split_document_path, CommitOutcome, Write};
use herald_protocol::{DocDeleted, DocUpdated, DocWritten, ErrorCode};
use std::collections::HashMap;

fn if_match(headers: &HeaderMap) -> ApiResult<Option<u64>> {
    let Some(v) = headers.get("if-match") else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("").trim().trim_matches('"');
    s.parse::<u64>().map(Some).map_err(|_| {
        ApiError::new(
            ErrorCode::BadRequest,
            "If-Match must be a document version, e.g. \"3\"",
        )
    })
}

pub async fn commit_one(state: &AppState, p: &Principal, w: Write) -> ApiResult<CommitOutcome> {
    submit_as(state, p, vec![w]).await
}

pub async fn put(
    State(st): State<AppState>,
    p: Principal,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let Path(path) = path?;
    let (collection, id) = split_document_path(&path)?;
    let doc = read_json(body, st.doc_body_limit()).await?;
    let w = Write::Put {
        collection: collection.into(),
        id: id.into(),
        doc,
        if_version: if_match(&headers)?,
    };
    let out = commit_one(&st, &p, w).await?;
    let r = &out.results[0];
    Ok(Json(DocWritten {
        id: r.id.clone(),
        version: r.version,
        seq: out.seq,
    })
    .into_response())
}

pub async fn insert(
    State(st): State<AppState>,
    p: Principal,
    collection: Result<Path<String>, PathRejection>,
    body: Body,
) -> ApiResult<Response> {
    let Path(collection) = collection?;
    let doc = read_json(body, st.doc_body_limit()).await?;
    herald_db::check_collection(&collection)?;
    let w = Write::Insert {
        collection,
        id: None,
        doc,
    };
    let out = commit_one(&st, &p, w).await?;
    let r = &out.results[0];
    Ok((
        StatusCode::CREATED,
        Json(DocWritten {
            id: r.id.clone(),
            version: r.version,
            seq: out.seq,
        }),
    )
        .into_response())
}

pub async fn get(
    State(st): State<AppState>,
    p: Principal,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Response> {
    let Path(path) = path?;
    let (collection, id) = split_document_path(&path)?;
    let (c, i) = (collection.to_string(), id.to_string());
    let db = st.db.clone();
    let rules = p.user().map(|_| st.auth.rules());
    if let (Some(rules), Some(user)) = (&rules, p.user()) {
        rules
            .read_filter(collection, &user.ctx)
            .map_err(read_denied)?;
    }
    let found = tokio::task::spawn_blocking(move || db.get(&c, &i))
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    // A document the user may not read answers exactly as a missing one.
    let found = match (found, &rules, p.user()) {
        (Some(d), Some(rules), Some(user)) => rules
            .can_read(collection, &d.doc, &user.ctx)
            .ok()
            .map(|_| d),
        (found, _, _) => found,
    };
    match found {
        Some(d) => {
            let mut resp = Json(d.doc).into_response();
            let etag = HeaderValue::from_str(&format!("\"{}\"", d.version))
                .expect("digits are a valid header");
            resp.headers_mut().insert("etag", etag);
            Ok(resp)
        }
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("document {collection}/{id} not found"),
        )),
    }
}

pub async fn patch(
    State(st): State<AppState>,
    p: Principal,
    path: Result<Path<String>, PathRejection>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let Path(path) = path?;
    let (collection, id) = split_document_path(&path)?;
    let upsert = match params.get("upsert").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("upsert must be true or false, got '{other}'"),
            ))
        }
    };
    let spec = read_json(body, st.doc_body_limit()).await?;
    let update = parse_update(&spec)?;
    let w = Write::Update {
        collection: collection.into(),
        id: id.into(),
        update,
        upsert,
        if_version: if_match(&headers)?,
    };
    let out = commit_one(&st, &p, w).await?;
    let r = &out.results[0];
    Ok(Json(DocUpdated {
        doc: r.doc(),
        version: r.version,
        seq: out.seq,
    })
    .into_response())
}

pub async fn delete(
    State(st): State<AppState>,
    p: Principal,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Path(path) = path?;
    let (collection, id) = split_document_path(&path)?;
    let w = Write::Delete {
        collection: collection.into(),
        id: id.into(),
        if_version: if_match(&headers)?,
    };
    let out = commit_one(&st, &p, w).await?;
    Ok(Json(DocDeleted {
        deleted: out.results[0].op.is_some(),
        seq: out.seq,
    })
    .into_response())
}
