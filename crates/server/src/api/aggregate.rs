//! `POST /v1/aggregate`: a pull aggregation, the protocol's `AggregateBody` -> `AggregateReply`
//! (`{"docs","seq"}`, plus `"explain"` when asked).
//!
//! The head of the pipeline (a leading `$match`, and a `$sort`/`$skip`/`$limit` right after it)
//! runs as a query through the database's planner at one snapshot, with an end user's read rule
//! ANDed into its filter exactly as `POST /v1/query` does: the stages after it only ever see
//! documents the user may read, so a user's count counts only those. `Db::aggregate` runs it
//! (counts and min/max from indexes, streamed groups, or the rest of the pipeline in memory over
//! the query's result, bounded by herald-query's limits), on the blocking pool like a query.
//! With `collectionGroup`, `Db::aggregate_group` runs it over the group (documents carry
//! `_path`, an end user's rule ANDed in per collection): counts add up each collection's count,
//! min/max come from the first document of a sorted group query, and otherwise the rest of the
//! pipeline runs in memory over the group query's result.

use crate::api::body::read_typed;
use crate::api::error::{ApiError, ApiResult};
use crate::api::query::{explain_of, query_of, restrict, UserRestrict, QUERY_BODY_BYTES_MAX};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use herald_db::{AggregateOutcome, DbError, Restrict, AGGREGATE_DOCS_MAX, QUERY_DOCS_MAX};
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
    if let Some(group) = body.collection_group {
        return aggregate_group(st, p, group, body.pipeline, explain).await;
    }
    let spec = Value::Array(body.pipeline);
    let pipeline = Pipeline::parse(&spec).map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
    let mut filter = None;
    if let Some(user) = p.user() {
        if explain {
            // Plans count examined documents, hidden ones included.
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ));
        }
        // The head filter as JSON, so the rule is ANDed in exactly as for a query.
        let mut parts = QueryParts {
            filter: match pipeline.stages().first() {
                Some(Stage::Match(_)) => spec[0].get("$match").cloned(),
                _ => None,
            },
            ..QueryParts::default()
        };
        restrict(&st, &mut parts, &collection, user)?;
        filter = Some(query_of(&parts)?.filter);
    }
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || {
        let out = db
            .aggregate(&collection, &pipeline, filter)
            .map_err(too_large)?;
        Ok::<_, ApiError>(reply(out, &pipeline, explain))
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    Ok(Json(out))
}

/// An aggregation over a collection group (`Db::aggregate_group`).
async fn aggregate_group(
    st: AppState,
    p: crate::auth::Principal,
    group: String,
    stages: Vec<Value>,
    explain: bool,
) -> ApiResult<Json<AggregateReply>> {
    herald_db::check_group(&group)?;
    let spec = Value::Array(stages);
    let pipeline = Pipeline::parse(&spec).map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
    let (q, _) = pipeline.head_query(QUERY_DOCS_MAX);
    let restrict = match p.user() {
        Some(_) if explain => {
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ))
        }
        Some(user) => {
            let head_filter = match pipeline.stages().first() {
                Some(Stage::Match(_)) => spec[0].get("$match").cloned(),
                _ => None,
            };
            Some(UserRestrict::new(&st, user, head_filter, q.clone()))
        }
        None => None,
    };
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || {
        let out = db
            .aggregate_group(
                &group,
                &pipeline,
                restrict.as_ref().map(|r| r as &dyn Restrict),
            )
            .map_err(too_large)?;
        Ok::<_, ApiError>(reply(out, &pipeline, explain))
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    Ok(Json(out))
}

/// The reply to an aggregation, with `explain` when asked: how the head ran, and the stages
/// after the ones it answered.
fn reply(out: AggregateOutcome, pipeline: &Pipeline, explain: bool) -> AggregateReply {
    let explain = explain.then(|| AggregateExplain {
        query: explain_of(out.explain),
        stages_in_query: out.stages_in_query as u64,
        stages: pipeline.stages()[out.stages_in_query.min(pipeline.stages().len())..]
            .iter()
            .map(|s| s.name().to_string())
            .collect(),
    });
    AggregateReply {
        docs: out.docs,
        seq: out.seq,
        explain,
    }
}

/// The database's caps on an aggregation's input: say which, and what to do.
fn too_large(e: DbError) -> ApiError {
    match e {
        DbError::ResultTooLarge(n) if n == AGGREGATE_DOCS_MAX => ApiError::new(
            ErrorCode::ResultTooLarge,
            format!("the aggregation reads more than {n} documents; narrow its leading $match"),
        ),
        DbError::ResultTooLarge(n) => ApiError::new(
            ErrorCode::ResultTooLarge,
            format!(
                "the aggregation's head query returns more than {n} documents; narrow its \
                 leading $match, $limit it, or end the per-document stages after it in a \
                 $group or $count (those stream up to {AGGREGATE_DOCS_MAX} documents)"
            ),
        ),
        e => e.into(),
    }
}
