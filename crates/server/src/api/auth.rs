//! Credentials on the HTTP API: the [`Principal`] extractor (`Authorization: Bearer`), the
//! `RequireAdmin` and `RequireTrusted` guards, end-user writes through the rules
//! ([`submit_as`]), and the key and rule endpoints: `POST/GET /v1/keys`,
//! `DELETE /v1/keys/{id}`, `PUT/GET /v1/rules`.

use crate::api::body::{read_bytes, read_typed};
use crate::api::error::{ApiError, ApiResult};
use crate::auth::keys::{Role, KEY_NAME_BYTES_MAX};
use crate::auth::{Principal, UserAuth};
use crate::state::AppState;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_db::{CommitOutcome, DbError, Guard, Write, WriteEffect, WriteGuard};
use herald_protocol::{ErrorCode, KeyBody, KeyList, KeyRevoked, RulesSet};
use herald_rules::{Denial, Rules};
use serde_json::Value;
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
        .map_err(|e| ApiError::new(ErrorCode::Unauthenticated, e.0))
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
                ErrorCode::PermissionDenied,
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
                ErrorCode::PermissionDenied,
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
        ErrorCode::PermissionDenied,
        "the security rules do not allow reading this collection",
    )
}

/// What the guard must know of each write besides its effect, taken off the write before it
/// is submitted: for an end user the database checks neither `ifVersion` nor insert-ness, so
/// that the guard can answer for a hidden document exactly as for a missing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteMeta {
    /// An update without upsert or a delete: its document must exist.
    pub needs_existing: bool,
    /// An insert: its document must not exist.
    pub insert: bool,
    /// The `ifVersion` precondition.
    pub if_version: Option<u64>,
}

/// Prepares an end user's writes: returns each write's [`WriteMeta`] and the writes with the
/// preconditions the guard takes over removed (an insert with an id becomes a put, checked by
/// the guard to replace nothing; `ifVersion` is cleared).
pub fn for_guard(writes: Vec<Write>) -> (Vec<Write>, Vec<WriteMeta>) {
    writes
        .into_iter()
        .map(|w| match w {
            Write::Insert {
                collection,
                id,
                doc,
            } => {
                // The id is the given one or the document's `_id`; only a generated id is
                // certainly free.
                let meta = WriteMeta {
                    needs_existing: false,
                    insert: true,
                    if_version: None,
                };
                match id.or_else(|| doc.get("_id").and_then(Value::as_str).map(str::to_string)) {
                    Some(id) => (
                        Write::Put {
                            collection,
                            id,
                            doc,
                            if_version: None,
                        },
                        meta,
                    ),
                    None => (
                        Write::Insert {
                            collection,
                            id: None,
                            doc,
                        },
                        meta,
                    ),
                }
            }
            Write::Put {
                collection,
                id,
                doc,
                if_version,
            } => (
                Write::Put {
                    collection,
                    id,
                    doc,
                    if_version: None,
                },
                WriteMeta {
                    needs_existing: false,
                    insert: false,
                    if_version,
                },
            ),
            Write::Update {
                collection,
                id,
                update,
                upsert,
                if_version,
            } => (
                Write::Update {
                    collection,
                    id,
                    update,
                    upsert,
                    if_version: None,
                },
                WriteMeta {
                    needs_existing: !upsert,
                    insert: false,
                    if_version,
                },
            ),
            Write::Delete {
                collection,
                id,
                if_version,
            } => (
                Write::Delete {
                    collection,
                    id,
                    if_version: None,
                },
                WriteMeta {
                    needs_existing: true,
                    insert: false,
                    if_version,
                },
            ),
        })
        .unzip()
}

/// The guard of an end user's transaction: runs inside the storage job, write by write, on
/// the exact stored document. A document the user may not read counts as absent, so every
/// answer about it (`not_found`, `version_conflict` with actual 0, a refused create) is the
/// answer for a missing one, and it is given before anything is computed from the hidden
/// document (no update error can tell its contents). Then each computed write goes through the
/// rules. The first refused write, in order, decides the answer.
pub struct RulesGuard {
    rules: Arc<Rules>,
    user: Arc<UserAuth>,
    meta: Vec<WriteMeta>,
}

fn denied(index: usize) -> DbError {
    DbError::Rejected {
        code: "permission_denied",
        message: format!("write {index}: {WRITE_DENIED}"),
        index,
    }
}

impl Guard for RulesGuard {
    fn before(
        &self,
        index: usize,
        collection: &str,
        id: &str,
        before: Option<&Value>,
        before_version: u64,
    ) -> Result<(), DbError> {
        let m = self.meta[index];
        let hidden =
            before.is_some_and(|b| self.rules.can_read(collection, b, &self.user.ctx).is_err());
        let absent = before.is_none() || hidden;
        if absent && m.needs_existing {
            return Err(DbError::NotFound {
                collection: collection.to_string(),
                id: id.to_string(),
            });
        }
        let actual = if absent { 0 } else { before_version };
        if let Some(expected) = m.if_version.filter(|x| *x != actual) {
            return Err(DbError::VersionConflict {
                index,
                collection: collection.to_string(),
                id: id.to_string(),
                expected,
                actual,
            });
        }
        if m.insert && !absent {
            return Err(DbError::AlreadyExists {
                collection: collection.to_string(),
                id: id.to_string(),
            });
        }
        if hidden {
            return Err(denied(index));
        }
        Ok(())
    }

    fn after(&self, e: &WriteEffect<'_>) -> Result<(), DbError> {
        self.rules
            .check_write(e.collection, e.before, e.after, &self.user.ctx)
            .map_err(|_| denied(e.index))
    }
}

/// The guard for `user`'s writes described by `meta` (from [`for_guard`]).
pub fn rules_guard(rules: Arc<Rules>, user: Arc<UserAuth>, meta: Vec<WriteMeta>) -> WriteGuard {
    Arc::new(RulesGuard { rules, user, meta })
}

/// Submits a transaction as `p`: end users through the rules, everyone else directly.
pub async fn submit_as(
    st: &AppState,
    p: &Principal,
    writes: Vec<Write>,
) -> ApiResult<CommitOutcome> {
    submit_mutation_as(st, p, writes, None).await
}

/// Like [`submit_as`], for a commit that may carry a client mutation id (`POST /v1/commit`): a
/// retry with a remembered id applies nothing and returns the original outcome.
pub async fn submit_mutation_as(
    st: &AppState,
    p: &Principal,
    writes: Vec<Write>,
    mutation_id: Option<String>,
) -> ApiResult<CommitOutcome> {
    let txn = match p.user() {
        None => herald_db::Transaction::new(writes),
        Some(user) => {
            let (writes, meta) = for_guard(writes);
            let guard = rules_guard(st.auth.rules(), user.clone(), meta);
            herald_db::Transaction::new(writes).guard(guard)
        }
    };
    let txn = txn.mutation_id(mutation_id);
    let queued = st.db.submit(txn, herald_db::QueueFull::Refuse);
    Ok(queued.map_err(|refused| refused.error)?.await?)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> ApiResult<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??)
}

/// `POST /v1/keys` `{"role":"admin"|"service","name"?}` -> `201 {"id","name","role","createdAt","key"}`.
pub async fn create_key(
    State(st): State<AppState>,
    _: RequireAdmin,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let body: KeyBody = read_typed(body, KEYS_BODY_BYTES_MAX).await?;
    let role = Role::parse(&body.role).ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "'role' must be \"admin\" or \"service\"",
        )
    })?;
    let name = body.name.unwrap_or_default();
    if name.len() > KEY_NAME_BYTES_MAX {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("'name' must be a string of at most {KEY_NAME_BYTES_MAX} bytes"),
        ));
    }
    let st2 = st.clone();
    let out = blocking(move || {
        st2.auth
            .keys
            .create(&st2.db, name, role, st2.db.clock().now_ms())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// `GET /v1/keys` -> `{"keys":[{"id","name","role","createdAt"}]}` (never the secrets).
pub async fn list_keys(State(st): State<AppState>, _: RequireAdmin) -> Json<KeyList> {
    Json(KeyList {
        keys: st.auth.keys.list(),
    })
}

/// `DELETE /v1/keys/{id}` -> `{"revoked": id}`; `404 key_not_found`.
pub async fn revoke_key(
    State(st): State<AppState>,
    _: RequireAdmin,
    Path(id): Path<String>,
) -> ApiResult<Json<KeyRevoked>> {
    let st2 = st.clone();
    let id2 = id.clone();
    if blocking(move || st2.auth.revoke_key(&st2.db, &id2)).await? {
        Ok(Json(KeyRevoked { revoked: id }))
    } else {
        Err(ApiError::new(
            ErrorCode::KeyNotFound,
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
) -> ApiResult<Json<RulesSet>> {
    let bytes = read_bytes(body, RULES_BODY_BYTES_MAX).await?;
    let rules = Rules::parse_text(&bytes).map_err(|e| ApiError::lib(e.code(), e.to_string()))?;
    let n = rules.source()["rules"].as_array().map_or(0, Vec::len) as u64;
    let st2 = st.clone();
    blocking(move || st2.auth.set_rules(&st2.db, rules)).await?;
    Ok(Json(RulesSet { rules: n }))
}
