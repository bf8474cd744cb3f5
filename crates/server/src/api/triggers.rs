//! Trigger management: `PUT/GET/DELETE /v1/triggers/{name}`, `GET /v1/triggers`, and the dead
//! letters of a trigger: `GET .../dead`, `POST .../dead/retry`, `POST .../dead/purge`.

use crate::api::body::{parse_json, read_bytes};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::StatusCode;
use axum::Json;
use herald_db::triggers::{Action, DeadLetter, TriggerDef, TriggerStatus, DEAD_LIST_MAX};
use herald_db::DbError;
use herald_protocol as protocol;
use herald_protocol::ErrorCode;
use herald_protocol::{DeadSelection, Decode, TriggerBody};
use std::collections::HashMap;

/// Largest trigger definition body (the source limit plus room for JSON escaping).
const BODY_MAX: usize = 1 << 20;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
}

pub async fn put(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    Path(name): Path<String>,
    body: Body,
) -> ApiResult<(StatusCode, Json<protocol::TriggerInfo>)> {
    let bytes = read_bytes(body, BODY_MAX).await?;
    // The protocol's type refuses wrong shapes and unknown members; the database checks the
    // definition's meaning (patterns, filter, URL, limits) on the same JSON.
    TriggerBody::decode(&bytes)?;
    let body = parse_json(&bytes, "the body")?;
    let def = TriggerDef::parse(&name, &body)?;
    let db = st.db.clone();
    let (stored, created) = blocking(move || {
        if let Action::Function(source) = &def.action {
            // Refuse source that is not a function expression now, not at the first task.
            let mut sandbox = herald_script::Sandbox::new(herald_script::Limits::default())
                .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
            sandbox
                .check(source)
                .map_err(|e| ApiError::new(ErrorCode::ScriptCompile, e.to_string()))?;
        }
        Ok(db.put_trigger(def)?)
    })
    .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(trigger_info(&stored))))
}

pub async fn get(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    Path(name): Path<String>,
) -> ApiResult<Json<protocol::TriggerStatus>> {
    let db = st.db.clone();
    let status = blocking(move || Ok(db.trigger_status(&name)?)).await?;
    Ok(Json(trigger_status(status)))
}

pub async fn list(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
) -> ApiResult<Json<protocol::TriggerList>> {
    let db = st.db.clone();
    let triggers = blocking(move || {
        let defs = db.triggers().defs();
        let mut out = Vec::with_capacity(defs.len());
        for d in defs.iter() {
            match db.trigger_status(&d.name) {
                Ok(s) => out.push(trigger_status(s)),
                // Deleted between the listing and the lookup.
                Err(DbError::TriggerNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    })
    .await?;
    Ok(Json(protocol::TriggerList { triggers }))
}

pub async fn delete(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    Path(name): Path<String>,
) -> ApiResult<Json<protocol::TriggerDeleted>> {
    let db = st.db.clone();
    let n = name.clone();
    blocking(move || Ok(db.delete_trigger(&n)?)).await?;
    Ok(Json(protocol::TriggerDeleted { deleted: name }))
}

pub async fn dead(
    State(st): State<AppState>,
    _: crate::api::auth::RequireAdmin,
    Path(name): Path<String>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
) -> ApiResult<Json<protocol::DeadLetters>> {
    let limit = match params.get("limit") {
        None => 100,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=DEAD_LIST_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::BadRequest,
                    format!("limit must be an integer from 1 to {DEAD_LIST_MAX}"),
                )
            })?,
    };
    let after = params.get("after").cloned();
    let db = st.db.clone();
    let letters = blocking(move || Ok(db.dead_letters(&name, after.as_deref(), limit)?)).await?;
    Ok(Json(protocol::DeadLetters {
        dead_letters: letters.into_iter().map(dead_letter).collect(),
    }))
}

/// A stored definition as the API shows it.
fn trigger_info(def: &TriggerDef) -> protocol::TriggerInfo {
    let (function, webhook) = match &def.action {
        Action::Function(source) => (Some(source.clone()), None),
        Action::Webhook { url, headers } => (
            None,
            Some(protocol::Webhook {
                url: url.clone(),
                headers: Some(headers.clone()),
            }),
        ),
    };
    protocol::TriggerInfo {
        name: def.name.clone(),
        collection: def.collection.clone(),
        on: def.on.clone(),
        max_attempts: def.max_attempts,
        filter: def.filter.clone(),
        function,
        webhook,
    }
}

fn trigger_status(s: TriggerStatus) -> protocol::TriggerStatus {
    let queue = protocol::TriggerQueue {
        pending: s.pending,
        oldest_pending_age_ms: s.oldest_pending_age_ms,
        dead: s.dead,
        executed: s.executed,
        failed: s.failed,
        conflicts: s.conflicts,
        recent_errors: s
            .recent_errors
            .into_iter()
            .map(|e| protocol::TriggerError {
                at_ms: e.at_ms,
                task: e.task,
                message: e.message,
            })
            .collect(),
    };
    protocol::TriggerStatus::new(trigger_info(&s.def), queue)
}

fn dead_letter(d: DeadLetter) -> protocol::DeadLetter {
    let t = d.task;
    protocol::DeadLetter {
        task: d.id.label(),
        seq: t.seq,
        collection: t.collection,
        id: t.id,
        op: t.op,
        before: t.before,
        after: t.after,
        depth: t.depth,
        attempts: t.attempts,
        created_ms: t.created_ms,
        last_error: t.last_error,
    }
}

/// `{"tasks": ["seq.n", ...]}` selects dead letters; an empty body or no `tasks` means all.
async fn selection(body: Body) -> ApiResult<Option<Vec<String>>> {
    let bytes = crate::api::body::read_bytes(body, BODY_MAX).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Ok(DeadSelection::decode(&bytes)?.tasks)
}

pub async fn retry(
    st: State<AppState>,
    _: crate::api::auth::RequireAdmin,
    name: Path<String>,
    body: Body,
) -> ApiResult<Json<protocol::DeadRetried>> {
    let retried = move_dead(st, name, body, true).await?;
    Ok(Json(protocol::DeadRetried { retried }))
}

pub async fn purge(
    st: State<AppState>,
    _: crate::api::auth::RequireAdmin,
    name: Path<String>,
    body: Body,
) -> ApiResult<Json<protocol::DeadPurged>> {
    let purged = move_dead(st, name, body, false).await?;
    Ok(Json(protocol::DeadPurged { purged }))
}

/// Moves the selected dead letters back into the queue (`requeue`) or deletes them; how many.
async fn move_dead(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Body,
    requeue: bool,
) -> ApiResult<u64> {
    let ids = selection(body).await?;
    let db = st.db.clone();
    let n = blocking(move || {
        Ok(if requeue {
            db.retry_dead(&name, ids)?
        } else {
            db.purge_dead(&name, ids)?
        })
    })
    .await?;
    Ok(n)
}
