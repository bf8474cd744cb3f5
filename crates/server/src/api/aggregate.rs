//! `POST /v1/aggregate`: a pull aggregation, the protocol's `AggregateBody` -> `AggregateReply`
//! (`{"docs","seq"}`, plus `"explain"` when asked).
//!
//! The head of the pipeline (a leading `$match`, and a `$sort`/`$skip`/`$limit` right after it)
//! runs as a query through the database's planner at one snapshot, with an end user's read rule
//! ANDed into its filter exactly as `POST /v1/query` does: the stages after it only ever see
//! documents the user may read, so a user's count counts only those. The rest of the pipeline
//! runs in memory over the query's result (herald-query's `pipeline`, bounded by its limits), on
//! the blocking pool like a query. With `collectionGroup` the head query runs over the group
//! (documents carry `_path`), an end user's rule ANDed in per collection.

use crate::api::body::read_typed;
use crate::api::error::{ApiError, ApiResult};
use crate::api::query::{explain_of, query_of, restrict, UserRestrict, QUERY_BODY_BYTES_MAX};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use herald_db::{DbError, Restrict, QUERY_DOCS_MAX};
use herald_protocol::{AggregateBody, AggregateExplain, AggregateReply, ErrorCode, QueryParts};
use herald_query::pipeline::{Pipeline, Stage};
use serde_json::Value;

pub async fn aggregate(
    State(st): State<AppState>,
    p: crate::auth::Principal,
    body: Body,
) -> ApiResult<Json<AggregateReply>> {
    let body: AggregateBody = read_typed(body, QUERY_BODY_BYTES_MAX).await?;
    crate::api::min_seq::wait_min_seq(&st, body.min_seq, false).await?;
    let explain = body.explain.unwrap_or(false);
    let collection = body.collection;
    let group = body.collection_group;
    let spec = Value::Array(body.pipeline);
    let pipeline = Pipeline::parse(&spec).map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
    let (mut q, covered) = pipeline.head_query(QUERY_DOCS_MAX);
    let head_filter = match pipeline.stages().first() {
        Some(Stage::Match(_)) => spec[0].get("$match").cloned(),
        _ => None,
    };
    let mut user_restrict = None;
    if let (Some(g), Some(user)) = (&group, p.user()) {
        if explain {
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ));
        }
        herald_db::check_group(g)?;
        user_restrict = Some(UserRestrict::new(&st, user, head_filter.clone(), q.clone()));
    } else if let Some(user) = p.user() {
        if explain {
            // Plans count examined documents, hidden ones included.
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ));
        }
        // The head filter as JSON, so the rule is ANDed in exactly as for a query.
        let mut parts = QueryParts {
            filter: head_filter,
            ..QueryParts::default()
        };
        restrict(&st, &mut parts, &collection, user)?;
        q.filter = query_of(&parts)?.filter;
    }
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || {
        let head = match &group {
            Some(g) => db.query_group(g, &q, user_restrict.as_ref().map(|r| r as &dyn Restrict)),
            None => db.query(&collection, &q),
        }
        .map_err(too_large)?;
        let docs = pipeline
            .run_from(covered, head.docs)
            .map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
        let explain = explain.then(|| AggregateExplain {
            query: explain_of(head.explain),
            stages_in_query: covered as u64,
            stages: pipeline.stages()[covered..]
                .iter()
                .map(|s| s.name().to_string())
                .collect(),
        });
        Ok::<_, ApiError>(AggregateReply {
            docs,
            seq: head.seq,
            explain,
        })
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    Ok(Json(out))
}

/// The database's cap on a query's result is the cap on an aggregation's input: say so.
fn too_large(e: DbError) -> ApiError {
    match e {
        DbError::ResultTooLarge(n) => ApiError::new(
            ErrorCode::ResultTooLarge,
            format!(
                "the aggregation reads more than {n} documents; narrow its leading $match \
                 (or $limit it)"
            ),
        ),
        e => e.into(),
    }
}
