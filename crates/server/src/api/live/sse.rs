//! Server-Sent Events: `GET /v1/subscribe?collection=..&filter=<json>&sort=<json>&skip=..&
//! limit=..&projection=<json>&resumeFrom=..` (or `pipeline=<json>` for a live aggregation instead
//! of the query parameters), one subscription (`"sse"`) per stream. Each event's
//! `data:` is a server message and its `id:` the message's seq, so an `EventSource` that
//! reconnects sends `Last-Event-ID` and resumes.

use crate::api::auth::{bearer, principal_of};
use crate::api::error::ApiError;
use crate::api::live::conn::{encode, Conn};
use crate::api::live::session::reached;
use crate::api::live::{
    check_origin, pipeline_subscription, reset, resumable, start_group_subscription, subscription,
    token_expired, HEARTBEAT, SLOW_CONSUMER,
};
use crate::auth::Principal;
use crate::state::AppState;
use axum::extract::{Query as UrlQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use herald_db::live::SubscribeRequest;
use herald_db::Clock;
use herald_protocol::{Decode, ErrorCode, QueryParts, ServerMessage, SubscribeParams};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// The stream's one subscription id.
const SUB: &str = "sse";

/// The parameters as the protocol's type: unknown ones refused, each JSON one parsed.
type Params = (SubscribeParams, QueryParts, Option<Vec<Value>>);

fn params_of(params: HashMap<String, String>) -> Result<Params, ApiError> {
    let m: Map<String, Value> = params
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let p = SubscribeParams::decode_value(Value::Object(m))?;
    let json = |k: &str, v: &Option<String>| -> Result<Option<Value>, ApiError> {
        v.as_deref()
            .map(|s| {
                serde_json::from_str(s).map_err(|e| {
                    ApiError::new(
                        ErrorCode::BadJson,
                        format!("parameter '{k}' is not valid JSON: {e}"),
                    )
                })
            })
            .transpose()
    };
    let parts = QueryParts {
        filter: json("filter", &p.filter)?,
        sort: json("sort", &p.sort)?,
        skip: json("skip", &p.skip)?,
        limit: json("limit", &p.limit)?,
        projection: json("projection", &p.projection)?,
        start_at: json("startAt", &p.start_at)?,
        start_after: json("startAfter", &p.start_after)?,
        end_at: json("endAt", &p.end_at)?,
        end_before: json("endBefore", &p.end_before)?,
    };
    json("resumeFrom", &p.resume_from)?;
    let pipeline = match json("pipeline", &p.pipeline)? {
        None => None,
        Some(Value::Array(stages)) => Some(stages),
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::BadPipeline,
                "parameter 'pipeline' must be a JSON array of stages",
            ))
        }
    };
    Ok((p, parts, pipeline))
}

pub async fn sse(
    State(st): State<AppState>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let (params, mut parts, pipeline) = match params_of(params) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_origin(&st, &headers) {
        return e.into_response();
    }
    let principal = match principal_of(&st, &headers) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let group = params.collection_group.clone();
    let collection = match (params.collection.clone(), &group) {
        (Some(_), Some(_)) => {
            return ApiError::new(
                ErrorCode::BadQuery,
                "give 'collection' or 'collectionGroup', not both",
            )
            .into_response()
        }
        (Some(c), None) => c,
        (None, Some(_)) => String::new(),
        (None, None) => {
            return ApiError::new(
                ErrorCode::BadRequest,
                "a subscription needs 'collection' or 'collectionGroup'",
            )
            .into_response()
        }
    };
    // A group's subscription (query or pipeline) is built by `start_group_subscription`.
    let (query, plan, key, group_pipeline) = match (pipeline, &group) {
        (pipeline, Some(_)) => (
            herald_query::Query::default(),
            None,
            String::new(),
            pipeline,
        ),
        (Some(stages), None) => {
            match pipeline_subscription(&st, &principal, &collection, &parts, stages) {
                Ok((head, plan, key)) => (head, Some(plan), key, None),
                Err(e) => return e.into_response(),
            }
        }
        (None, None) => {
            if let Some(user) = principal.user() {
                if let Err(e) = crate::api::query::restrict(&st, &mut parts, &collection, user) {
                    return e.into_response();
                }
            }
            match subscription(&collection, &parts) {
                Ok((query, key)) => (query, None, key, None),
                Err(e) => return e.into_response(),
            }
        }
    };
    let expires = principal
        .user()
        .map(|u| (st.auth.clock().clone(), u.expires_at_ms));
    let header_resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    let param_resume = params
        .resume_from
        .as_deref()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v.as_u64());
    let resume_from = header_resume.or(param_resume);
    let conn = Conn::new(&st);
    let resume_from = resumable(&st, &principal, resume_from, SUB, &conn.sink);
    let subscribed = match group {
        Some(g) => start_group_subscription(
            &st,
            &principal,
            g,
            parts,
            group_pipeline,
            SUB.into(),
            resume_from,
            conn.sink.clone(),
        ),
        None => {
            let req = SubscribeRequest {
                sub: SUB.into(),
                collection,
                query,
                key,
                resume_from,
                sink: conn.sink.clone(),
            };
            match plan {
                Some(plan) => st.live.subscribe_pipeline(req, plan),
                None => st.live.subscribe(req),
            }
            .map_err(ApiError::from)
        }
    };
    if let Err(e) = subscribed {
        return e.into_response();
    }
    let live = st.live.clone();
    let guard = DisconnectOnDrop {
        live: live.clone(),
        conn: conn.id,
    };
    // An end user's stream ends when the rules change (the client reconnects under the new
    // ones); a key's stream ends when that key is revoked.
    let watch = match &principal {
        Principal::User(_) => Some(Watch::Rules(st.auth.rules_changed())),
        Principal::Admin | Principal::Service => bearer(&headers)
            .map(|k| Watch::Key(st.auth.keys_changed(), k.to_string(), st.auth.clone())),
        Principal::Open => None,
    };
    let stream = async_stream((live, conn, guard, watch), expires);
    Sse::new(stream).into_response()
}

struct DisconnectOnDrop {
    live: herald_db::live::LiveEngine,
    conn: u64,
}

impl Drop for DisconnectOnDrop {
    fn drop(&mut self) {
        self.live.disconnect(self.conn);
    }
}

type EventResult = Result<Event, std::convert::Infallible>;

/// What ends an SSE stream besides the client: a rules change (end users) or the revocation of
/// its API key.
enum Watch {
    Rules(tokio::sync::watch::Receiver<u64>),
    Key(
        tokio::sync::watch::Receiver<u64>,
        String,
        std::sync::Arc<crate::auth::Auth>,
    ),
}

impl Watch {
    /// Resolves with the message that ends the stream.
    async fn ended(&mut self) -> ServerMessage<'static> {
        match self {
            Watch::Rules(rx) => {
                let _ = rx.changed().await;
                reset(SUB, "the security rules changed; reconnect")
            }
            Watch::Key(rx, key, auth) => loop {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                if auth.authenticate(Some(key)).is_err() {
                    let mut msg = ServerMessage::error(
                        ErrorCode::Unauthenticated,
                        "the stream's API key was revoked",
                    );
                    if let ServerMessage::Error { sub, .. } = &mut msg {
                        *sub = Some(Cow::Borrowed(SUB));
                    }
                    return msg;
                }
            },
        }
    }
}

/// An SSE stream's state: the engine, the connection, its disconnect guard, and its watch.
type SseState = (
    herald_db::live::LiveEngine,
    Conn,
    DisconnectOnDrop,
    Option<Watch>,
);

/// The event of a message: its JSON as `data:`, its seq (if any) as `id:`.
fn event(msg: &ServerMessage<'_>) -> Event {
    let e = Event::default().data(msg.to_text());
    match msg.seq() {
        Some(s) => e.id(s.to_string()),
        None => e,
    }
}

/// The SSE stream of one connection: queued messages, heartbeats when idle, and an end when the
/// client is too slow.
fn async_stream(
    state: SseState,
    expires: Option<(Clock, u64)>,
) -> impl futures_util::Stream<Item = EventResult> {
    // The ending messages carry no seq: their events have no `id:`.
    let end = |msg: ServerMessage<'static>| Event::default().data(msg.to_text());
    futures_util::stream::unfold(Some(state), move |state| {
        let expires = expires.clone();
        async move {
            let (live, mut conn, guard, mut watch) = state?;
            if expires
                .as_ref()
                .is_some_and(|(clock, at)| clock.now_ms() >= *at)
            {
                return Some((Ok(end(token_expired(Some(SUB)))), None));
            }
            if conn.overflow.load(Ordering::Acquire) {
                return Some((Ok(end(reset(SUB, SLOW_CONSUMER))), None));
            }
            tokio::select! {
                biased;
                _ = async { let (clock, at) = expires.as_ref().expect("guarded"); reached(clock, *at).await }, if expires.is_some() => {
                    Some((Ok(end(token_expired(Some(SUB)))), None))
                }
                msg = async { watch.as_mut().expect("guarded").ended().await }, if watch.is_some() => {
                    Some((Ok(end(msg)), None))
                }
                out = conn.rx.recv() => {
                    let out = out?;
                    let msg = encode(&out);
                    conn.note(&msg);
                    let ev = event(&msg);
                    Some((Ok(ev), Some((live, conn, guard, watch))))
                }
                _ = conn.wake.notified() => {
                    Some((Ok(end(reset(SUB, SLOW_CONSUMER))), None))
                }
                _ = tokio::time::sleep(HEARTBEAT) => {
                    let seq = live.seq();
                    match conn.rx.try_recv() {
                        Ok(out) => {
                            let msg = encode(&out);
                            conn.note(&msg);
                            let ev = event(&msg);
                            Some((Ok(ev), Some((live, conn, guard, watch))))
                        }
                        Err(_) => {
                            let hb = conn.heartbeat(seq);
                            Some((Ok(event(&hb)), Some((live, conn, guard, watch))))
                        }
                    }
                }
            }
        }
    })
}
