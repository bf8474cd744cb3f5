//! `POST /v1/query`: a pull query, `{"collection","filter","sort","skip","limit","projection",
//! "explain"?}` -> `{"docs","seq"}` (+ `"explain"`). Runs on the blocking pool: a query may read
//! many pages from disk.

use crate::api::body::read_object;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use herald_query::Query;
use serde_json::{json, Value};

/// Largest query request body.
pub const QUERY_BODY_BYTES_MAX: usize = 1 << 20;
const MEMBERS: &[&str] = &[
    "collection",
    "filter",
    "sort",
    "skip",
    "limit",
    "projection",
    "explain",
];

pub async fn query(
    State(st): State<AppState>,
    p: crate::auth::Principal,
    body: Body,
) -> ApiResult<Json<Value>> {
    let mut m = read_object(body, QUERY_BODY_BYTES_MAX).await?;
    if let Some(k) = m.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(ApiError::new(
            "bad_query",
            format!("unknown query member '{k}'"),
        ));
    }
    let collection = match m.get("collection") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(ApiError::new(
                "bad_request",
                "a query needs 'collection' (a string)",
            ))
        }
    };
    let explain = match m.get("explain") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::new("bad_request", "explain must be a boolean")),
    };
    if let Some(user) = p.user() {
        if explain {
            // Plans count examined documents, hidden ones included.
            return Err(ApiError::new(
                "permission_denied",
                "explain needs an admin or service key",
            ));
        }
        restrict(&st, &mut m, &collection, user)?;
    }
    let q = query_of(&m)?;
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || db.query(&collection, &q))
        .await
        .map_err(|e| ApiError::new("internal", e.to_string()))??;
    let mut resp = json!({"docs": out.docs, "seq": out.seq});
    if explain {
        resp["explain"] = out.explain;
    }
    Ok(Json(resp))
}

/// ANDs the user's read rule for `collection` into the `filter` member of a query or
/// subscription, so everything downstream (plans, results, positions, live changes) sees only
/// readable documents. The user's own filter is validated first, so its errors read as usual.
pub fn restrict(
    st: &AppState,
    m: &mut serde_json::Map<String, Value>,
    collection: &str,
    user: &crate::auth::UserAuth,
) -> Result<(), ApiError> {
    restrict_with(&st.auth.rules(), m, collection, user)
}

/// [`restrict`] with the given rules.
pub fn restrict_with(
    rules: &herald_rules::Rules,
    m: &mut serde_json::Map<String, Value>,
    collection: &str,
    user: &crate::auth::UserAuth,
) -> Result<(), ApiError> {
    herald_db::check_collection(collection)?;
    query_of(m)?;
    let rule = rules
        .read_filter(collection, &user.ctx)
        .map_err(crate::api::auth::read_denied)?;
    let combined = herald_rules::and_filters(m.get("filter"), rule);
    m.insert("filter".into(), combined);
    Ok(())
}

/// The query of a request or subscription: `filter` (an object), `sort`, `skip`, `limit`,
/// `projection` members of `m`; absent members are defaults.
pub fn query_of(m: &serde_json::Map<String, Value>) -> Result<Query, ApiError> {
    let null = Value::Null;
    let get = |k: &str| m.get(k).unwrap_or(&null);
    if !matches!(get("filter"), Value::Null | Value::Object(_)) {
        return Err(ApiError::new("bad_filter", "filter must be an object"));
    }
    Query::from_parts(
        get("filter"),
        get("sort"),
        get("skip"),
        get("limit"),
        get("projection"),
    )
    .map_err(|e| ApiError::new(e.code(), e.to_string()))
}
