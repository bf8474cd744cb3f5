//! Credentials on the HTTP API: the [`Principal`] extractor (`Authorization: Bearer`), the
//! `RequireAdmin` and `RequireTrusted` guards, end-user writes through the rules
//! ([`submit_as`]), and the key and rule endpoints: `POST/GET /v1/keys`,
//! `DELETE /v1/keys/{id}`, `PUT/GET /v1/rules`.

use crate::api::body::{kind, read_bytes, read_object};
use crate::api::error::{ApiError, ApiResult};
use crate::auth::keys::{Role, KEY_NAME_BYTES_MAX};
use crate::auth::{Principal, UserAuth};
use crate::state::AppState;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_db::{CommitOutcome, DbError, Write, WriteGuard};
use herald_rules::{Denial, Rules};
use serde_json::{json, Value};
use std::sync::Arc;

/// Largest `PUT /v1/rules` body.
pub const RULES_BODY_BYTES_MAX: usize = herald_rules::RULES_BYTES_MAX;
/// Largest `POST /v1/keys` body.
const KEYS_BODY_BYTES_MAX: usize = 4 << 10;

/// The message of every refused end-user write: the same whether or not a hidden document
/// exists.
pub const WRITE_DENIED: &str = "the security rules do not allow this write";

/// The bearer credential of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, rest) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// The principal of a request's headers.
pub fn principal_of(st: &AppState, headers: &HeaderMap) -> ApiResult<Principal> {
    st.auth
        .authenticate(bearer(headers))
        .map_err(|e| ApiError::new("unauthenticated", e.0))
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        principal_of(st, &parts.headers)
    }
}

/// Present in a handler's arguments: the request must come from an admin key (or the server
/// runs without authentication).
pub struct RequireAdmin;

impl FromRequestParts<AppState> for RequireAdmin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        if principal_of(st, &parts.headers)?.is_admin() {
            Ok(RequireAdmin)
        } else {
            Err(ApiError::new(
                "permission_denied",
                "this endpoint needs an admin key",
            ))
        }
    }
}

/// Present in a handler's arguments: the request must come from an admin or service key.
pub struct RequireTrusted;

impl FromRequestParts<AppState> for RequireTrusted {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        match principal_of(st, &parts.headers)? {
            Principal::User(_) => Err(ApiError::new(
                "permission_denied",
                "this endpoint needs an admin or service key",
            )),
            _ => Ok(RequireTrusted),
        }
    }
}

/// Maps a read denial: no rule or a rule that refuses this user outright is `permission_denied`.
pub fn read_denied(d: Denial) -> ApiError {
    debug_assert_ne!(d, Denial::Hidden);
    ApiError::new(
        "permission_denied",
        "the security rules do not allow reading this collection",
    )
}

/// A guard that checks every write of a transaction against `rules` for `user`, inside the
/// storage job (so on the exact before-image). `needs_existing[i]`: write `i` is an update
/// without upsert or a delete, whose answer for a hidden document must be that of a missing one.
pub fn rules_guard(
    rules: Arc<Rules>,
    user: Arc<UserAuth>,
    needs_existing: Vec<bool>,
) -> WriteGuard {
    Arc::new(move |effects| {
        for e in effects {
            if let Err(d) = rules.check_write(e.collection, e.before, e.after, &user.ctx) {
                let hidden_as_missing = d == Denial::Hidden && needs_existing[e.index];
                return Err(if hidden_as_missing {
                    DbError::NotFound {
                        collection: e.collection.to_string(),
                        id: e.id.to_string(),
                    }
                } else {
                    DbError::Rejected {
                        code: "permission_denied",
                        message: format!("write {}: {WRITE_DENIED}", e.index),
                        index: e.index,
                    }
                });
            }
        }
        Ok(())
    })
}

/// Which writes of a transaction require their document to exist (update without upsert,
/// delete): for those, a hidden document answers `not_found` like a missing one.
pub fn needs_existing(writes: &[Write]) -> Vec<bool> {
    writes
        .iter()
        .map(|w| match w {
            Write::Update { upsert, .. } => !upsert,
            Write::Delete { .. } => true,
            Write::Put { .. } | Write::Insert { .. } => false,
        })
        .collect()
}

/// Submits a transaction as `p`: end users through the rules, everyone else directly.
pub async fn submit_as(
    st: &AppState,
    p: &Principal,
    writes: Vec<Write>,
) -> ApiResult<CommitOutcome> {
    let Some(user) = p.user() else {
        return Ok(st.db.try_submit(writes)?.await?);
    };
    let rules = st.auth.rules();
    let guard = rules_guard(rules.clone(), user.clone(), needs_existing(&writes));
    let inserts: Vec<(usize, String, String)> = writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| match w {
            Write::Insert {
                collection,
                id: Some(id),
                ..
            } => Some((i, collection.clone(), id.clone())),
            _ => None,
        })
        .collect();
    match st.db.try_submit_guarded(writes, guard)?.await {
        Ok(out) => Ok(out),
        Err(e) => {
            let e = DbError::from(e);
            // An insert onto an existing id fails before the rules run; if that document is
            // hidden from the user, answer as a refused create rather than confirm it exists.
            if let DbError::AlreadyExists { collection, id } = &e {
                let (db, c, i) = (st.db.clone(), collection.clone(), id.clone());
                let existing = blocking(move || db.get(&c, &i)).await?;
                let readable =
                    existing.is_some_and(|d| rules.can_read(collection, &d.doc, &user.ctx).is_ok());
                if !readable {
                    let index = inserts
                        .iter()
                        .find(|(_, c, i)| c == collection && i == id)
                        .map_or(0, |(i, _, _)| *i);
                    return Err(ApiError::new(
                        "permission_denied",
                        format!("write {index}: {WRITE_DENIED}"),
                    ));
                }
            }
            Err(e.into())
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> ApiResult<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new("internal", e.to_string()))??)
}

/// `POST /v1/keys` `{"role":"admin"|"service","name"?}` -> `201 {"id","name","role","createdAt","key"}`.
pub async fn create_key(
    State(st): State<AppState>,
    _: RequireAdmin,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let m = read_object(body, KEYS_BODY_BYTES_MAX).await?;
    if let Some(k) = m.keys().find(|k| *k != "role" && *k != "name") {
        return Err(ApiError::new(
            "bad_request",
            format!("unknown key member '{k}'"),
        ));
    }
    let role = match m.get("role") {
        Some(Value::String(r)) => Role::parse(r),
        _ => None,
    }
    .ok_or_else(|| ApiError::new("bad_request", "'role' must be \"admin\" or \"service\""))?;
    let name = match m.get("name") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() <= KEY_NAME_BYTES_MAX => s.clone(),
        Some(other) => {
            return Err(ApiError::new(
                "bad_request",
                format!(
                    "'name' must be a string of at most {KEY_NAME_BYTES_MAX} bytes, got {}",
                    kind(other)
                ),
            ))
        }
    };
    let st2 = st.clone();
    let out = blocking(move || {
        st2.auth
            .keys
            .create(&st2.db, name, role, crate::auth::now_ms())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// `GET /v1/keys` -> `{"keys":[{"id","name","role","createdAt"}]}` (never the secrets).
pub async fn list_keys(State(st): State<AppState>, _: RequireAdmin) -> Json<Value> {
    Json(json!({"keys": st.auth.keys.list()}))
}

/// `DELETE /v1/keys/{id}` -> `{"revoked": id}`; `404 key_not_found`.
pub async fn revoke_key(
    State(st): State<AppState>,
    _: RequireAdmin,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let st2 = st.clone();
    let id2 = id.clone();
    if blocking(move || st2.auth.revoke_key(&st2.db, &id2)).await? {
        Ok(Json(json!({"revoked": id})))
    } else {
        Err(ApiError::new(
            "key_not_found",
            format!("no API key with id '{id}'"),
        ))
    }
}

/// `GET /v1/rules` -> the rule set.
pub async fn get_rules(State(st): State<AppState>, _: RequireAdmin) -> Json<Value> {
    Json(st.auth.rules().source().clone())
}

/// `PUT /v1/rules` with a rule set: validated whole, then stored durably and applied to
/// requests and subscriptions made from then on. `400 bad_rules` changes nothing.
pub async fn put_rules(
    State(st): State<AppState>,
    _: RequireAdmin,
    body: axum::body::Body,
) -> ApiResult<Json<Value>> {
    let bytes = read_bytes(body, RULES_BODY_BYTES_MAX).await?;
    let rules = Rules::parse_text(&bytes).map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    let n = rules.source()["rules"].as_array().map_or(0, Vec::len);
    let st2 = st.clone();
    blocking(move || st2.auth.set_rules(&st2.db, rules)).await?;
    Ok(Json(json!({"rules": n})))
}
