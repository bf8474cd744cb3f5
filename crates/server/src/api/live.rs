//! Live queries over WebSocket (`/v1/ws`, many subscriptions per connection, and write requests
//! from admin and service keys: `ws_writes`) and Server-Sent Events (`/v1/subscribe`, one
//! subscription per stream). Both feed the engine in
//! `herald_db::live` and relay its messages: `initial`, `changes`, `reset`, `error`, plus
//! `heartbeat` when a connection has been idle for the heartbeat interval.
//!
//! With authentication configured, a connection carries a [`Principal`]: from the upgrade
//! request's `Authorization: Bearer`, or from a first message `{"op":"auth","token":"..."}`
//! (within [`WS_AUTH_TIMEOUT`]). An end user's subscriptions have the read rule ANDed into
//! their filter (`query::restrict`), so they see only readable documents. A token may be renewed
//! with another `auth` message; when it expires unrenewed the connection gets
//! `{"type":"error","code":"token_expired"}` and closes, and nothing is sent after the expiry
//! instant. When the rules change, end-user connections close (their clients reconnect and
//! subscribe under the new rules).
//!
//! Each connection has one bounded outbound queue ([`CONN_QUEUE_MAX`]) shared by its
//! subscriptions, so they are delivered in seq order. When the queue is full the engine drops the
//! connection's subscriptions and the connection is closed with a reason; the client reconnects
//! and resumes from the last seq it saw.

use crate::api::auth::{bearer, principal_of};
use crate::api::error::ApiError;
use crate::api::ws_writes::WsWrites;
use crate::auth::{now_ms, Principal};
use crate::notify_latency::NotifyLatency;
use crate::state::AppState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query as UrlQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::SinkExt;
use herald_db::live::{Sink, SubscribeRequest};
use herald_query::Query;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Messages waiting to be written to one connection.
pub const CONN_QUEUE_MAX: usize = 4096;
/// Subscriptions one connection may hold.
pub const SUBS_PER_CONN_MAX: usize = 256;
/// Largest client message on a WebSocket.
pub const WS_MESSAGE_BYTES_MAX: usize = 256 << 10;
/// Longest client-chosen subscription id.
pub const SUB_ID_BYTES_MAX: usize = 128;
/// A connection idle this long gets a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// With authentication on, a WebSocket must authenticate within this long of opening.
pub const WS_AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// A WebSocket without subscriptions that sends nothing for this long is closed.
pub const WS_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Client messages per second a WebSocket may send, sustained...
pub const WS_MESSAGES_PER_SEC: f64 = 200.0;
/// ...and in a burst. Past that the connection gets `rate_limited` and is closed.
pub const WS_MESSAGES_BURST: f64 = 1000.0;

/// Most queued messages written to a WebSocket with one flush.
const OUT_BATCH_MAX: usize = 64;
const SLOW_CONSUMER: &str = "slow consumer: the outbound queue is full; reconnect with resumeFrom";

/// A connection's outbound queue, as the engine sees it.
struct ConnSink {
    conn: u64,
    tx: mpsc::Sender<Value>,
    overflow: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl Sink for ConnSink {
    fn send(&self, msg: Value) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow.store(true, Ordering::Release);
                self.wake.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn conn(&self) -> u64 {
        self.conn
    }
}

struct Conn {
    id: u64,
    sink: Arc<ConnSink>,
    rx: mpsc::Receiver<Value>,
    overflow: Arc<AtomicBool>,
    wake: Arc<Notify>,
    /// The highest seq sent, so a heartbeat never claims less than what the client has.
    last_seq: u64,
    /// Where `changes` messages are timed from their commit (`/metrics`).
    db: herald_db::Db,
    latency: Arc<NotifyLatency>,
}

impl Conn {
    fn new(st: &AppState) -> Conn {
        let id = st.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CONN_QUEUE_MAX);
        let overflow = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Notify::new());
        let sink = Arc::new(ConnSink {
            conn: id,
            tx,
            overflow: overflow.clone(),
            wake: wake.clone(),
        });
        Conn {
            id,
            sink,
            rx,
            overflow,
            wake,
            last_seq: 0,
            db: st.db.clone(),
            latency: st.notify_latency.clone(),
        }
    }

    /// Called for every message just before it is handed to the socket.
    fn note(&mut self, msg: &Value) {
        if let Some(s) = msg.get("seq").and_then(Value::as_u64) {
            self.last_seq = self.last_seq.max(s);
            if msg["type"] == "changes" {
                if let Some(d) = self.db.feed().clock.since(s) {
                    self.latency.observe(d);
                }
            }
        }
    }

    /// The heartbeat for now: the engine's seq (read before draining, so every message up to it
    /// is already queued) or the last seq sent, whichever is higher.
    fn heartbeat(&self, engine_seq: u64) -> Value {
        json!({"type": "heartbeat", "seq": engine_seq.max(self.last_seq)})
    }
}

/// An end user's list up to a seq before the last rules change was built under other rules, so
/// it cannot be continued: such a resume becomes `reset` and a fresh `initial`.
fn resumable(
    st: &AppState,
    principal: &Principal,
    resume_from: Option<u64>,
    sub: &str,
    sink: &dyn Sink,
) -> Option<u64> {
    let r = resume_from?;
    if principal.user().is_some() && r <= st.auth.rules_seq() {
        let reason = "the security rules changed since that seq; here is a fresh result";
        sink.send(json!({"type": "reset", "sub": sub, "reason": reason}));
        return None;
    }
    Some(r)
}

/// Parses a subscription's query parts into an engine request (without sink).
fn subscription(m: &Map<String, Value>) -> Result<(String, Query, String), ApiError> {
    let collection = m
        .get("collection")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::new("bad_request", "a subscription needs 'collection'"))?;
    herald_db::check_collection(collection)?;
    let query = crate::api::query::query_of(m)?;
    let null = Value::Null;
    let get = |k: &str| m.get(k).unwrap_or(&null);
    let key = format!(
        "{collection}\n{}",
        json!([
            get("filter"),
            get("sort"),
            get("skip"),
            get("limit"),
            get("projection")
        ])
    );
    Ok((collection.to_string(), query, key))
}

fn error_msg(sub: Option<&str>, e: &ApiError) -> Value {
    let mut v = json!({"type": "error", "code": e.code, "message": e.message});
    if let Some(s) = sub {
        v["sub"] = json!(s);
    }
    v
}

/// Refuses a request whose `Origin` is not allowed (`--allowed-origins`); requests without an
/// `Origin` (not from a browser) pass.
pub fn check_origin(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let (Some(allowed), Some(origin)) = (&st.auth.allowed_origins, headers.get("origin")) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    if allowed.iter().any(|a| a == origin) {
        Ok(())
    } else {
        Err(ApiError::new(
            "permission_denied",
            format!("origin '{origin}' is not allowed"),
        ))
    }
}

pub async fn ws(
    State(st): State<AppState>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if let Err(e) = check_origin(&st, &headers) {
        return e.into_response();
    }
    // A bearer header authenticates now; without one, the first message must.
    let principal = match bearer(&headers) {
        Some(cred) => match principal_of(&st, &headers) {
            Ok(p) => Some((p, Some(cred.to_string()))),
            Err(e) => return e.into_response(),
        },
        None if !st.auth.enabled() => Some((Principal::Open, None)),
        None => None,
    };
    upgrade
        .max_message_size(WS_MESSAGE_BYTES_MAX)
        .on_upgrade(move |socket| run_ws(st, socket, principal))
}

/// A token bucket for client messages.
struct RateLimit {
    tokens: f64,
    at: tokio::time::Instant,
}

impl RateLimit {
    fn new() -> RateLimit {
        RateLimit {
            tokens: WS_MESSAGES_BURST,
            at: tokio::time::Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * WS_MESSAGES_PER_SEC;
        self.tokens = (self.tokens + refill).min(WS_MESSAGES_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The authentication state of one WebSocket.
struct Session {
    principal: Option<Principal>,
    /// When the end user's token expires (`None`: keys, open mode, or not yet authenticated).
    expires: Option<tokio::time::Instant>,
    /// The API key the connection authenticated with, re-checked when a key is revoked.
    key: Option<String>,
}

impl Session {
    fn set(&mut self, p: Principal, credential: Option<&str>) {
        self.key = match p {
            Principal::Admin | Principal::Service => credential.map(str::to_string),
            Principal::Open | Principal::User(_) => None,
        };
        self.expires = p.user().map(|u| {
            let left = u.expires_at_ms.saturating_sub(now_ms());
            tokio::time::Instant::now() + Duration::from_millis(left)
        });
        self.principal = Some(p);
    }

    fn expired(&self) -> bool {
        self.expires
            .is_some_and(|at| tokio::time::Instant::now() >= at)
    }
}

/// The claims that identify a user's rights: all but the token's own lifetime and id.
fn stable_claims(p: &Principal) -> Option<Map<String, Value>> {
    p.user().map(|u| {
        let mut c = u.ctx.claims.clone();
        for k in ["exp", "iat", "nbf", "jti"] {
            c.remove(k);
        }
        c
    })
}

/// What the loop does after a client message.
enum Next {
    Continue,
    /// Send this, then close with a policy-violation frame and this reason.
    Close(Option<Value>, &'static str),
    /// A write request from a trusted principal, for the connection's `WsWrites`.
    Write(Map<String, Value>),
}

async fn send_json(socket: &mut WebSocket, v: &Value) -> bool {
    // `serde_json::to_string` writes bytes straight; `Value`'s `Display` goes through a
    // formatter adapter, slower for the large replies and change batches sent here.
    let text = serde_json::to_string(v).expect("a Value serializes");
    send_text(socket, text).await
}

async fn send_text(socket: &mut WebSocket, text: String) -> bool {
    socket.send(Message::Text(text.into())).await.is_ok()
}

async fn close(socket: &mut WebSocket, reason: &'static str) {
    let frame = CloseFrame {
        code: 1008,
        reason: reason.into(),
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

async fn run_ws(
    st: AppState,
    mut socket: WebSocket,
    principal: Option<(Principal, Option<String>)>,
) {
    let mut conn = Conn::new(&st);
    let mut subs: HashSet<String> = HashSet::new();
    let mut writes = WsWrites::default();
    let mut session = Session {
        principal: None,
        expires: None,
        key: None,
    };
    if let Some((p, credential)) = principal {
        session.set(p, credential.as_deref());
    }
    let opened = tokio::time::Instant::now();
    let mut last_client = opened;
    let mut rate = RateLimit::new();
    let mut rules_changed = st.auth.rules_changed();
    let mut keys_changed = st.auth.keys_changed();
    let mut idle = tokio::time::interval(HEARTBEAT);
    idle.reset();
    let far = Duration::from_secs(365 * 24 * 3600);
    loop {
        let expiry = session.expires.unwrap_or(opened + far);
        let auth_deadline = if session.principal.is_none() {
            opened + WS_AUTH_TIMEOUT
        } else {
            opened + far
        };
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(expiry) => {
                let msg = json!({"type": "error", "code": "token_expired",
                    "message": "the token expired; reconnect with a fresh one"});
                st.live.disconnect(conn.id);
                let _ = send_json(&mut socket, &msg).await;
                close(&mut socket, "token expired").await;
                break;
            }
            _ = tokio::time::sleep_until(auth_deadline) => {
                let e = ApiError::new("unauthenticated", "no credentials within the handshake timeout");
                let _ = send_json(&mut socket, &error_msg(None, &e)).await;
                close(&mut socket, "authentication timeout").await;
                break;
            }
            changed = rules_changed.changed(), if session.principal.as_ref().is_some_and(|p| p.user().is_some()) => {
                if changed.is_ok() {
                    st.live.disconnect(conn.id);
                    close(&mut socket, "the security rules changed; reconnect").await;
                    break;
                }
            }
            changed = keys_changed.changed(), if session.key.is_some() => {
                if changed.is_ok() && st.auth.authenticate(session.key.as_deref()).is_err() {
                    st.live.disconnect(conn.id);
                    let e = ApiError::new("unauthenticated", "the connection's API key was revoked");
                    let _ = send_json(&mut socket, &error_msg(None, &e)).await;
                    close(&mut socket, "API key revoked").await;
                    break;
                }
            }
            // Replies first, so answered writes free room before more are read.
            reply = writes.next_reply(), if !writes.is_empty() => {
                let Some(reply) = reply else { continue };
                if !send_text(&mut socket, reply).await { break }
                idle.reset();
            }
            // Not read while the connection's writes in flight are at their bound (backpressure).
            incoming = socket.recv(), if writes.has_room() => {
                let text = match incoming {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(Message::Binary(_))) => {
                        let e = ApiError::new("bad_request", "messages must be JSON text");
                        if !send_json(&mut socket, &error_msg(None, &e)).await { break }
                        continue;
                    }
                    Some(Ok(_)) => continue,
                };
                last_client = tokio::time::Instant::now();
                if !rate.take() {
                    let e = ApiError::new("rate_limited", format!(
                        "more than {WS_MESSAGES_PER_SEC} messages per second (bursts of {WS_MESSAGES_BURST})"));
                    let _ = send_json(&mut socket, &error_msg(None, &e)).await;
                    close(&mut socket, "rate limit exceeded").await;
                    break;
                }
                let (reply, next) = client_message(&st, &conn, &mut subs, &mut session, text.as_str());
                if let Some(reply) = reply {
                    if !send_json(&mut socket, &reply).await { break }
                }
                match next {
                    Next::Continue => {}
                    Next::Write(m) => {
                        let mut ok = true;
                        for r in writes.submit(&st, m).await {
                            if !send_text(&mut socket, r).await { ok = false; break }
                        }
                        if !ok { break }
                    }
                    Next::Close(msg, reason) => {
                        if let Some(m) = msg {
                            let _ = send_json(&mut socket, &m).await;
                        }
                        close(&mut socket, reason).await;
                        break;
                    }
                }
            }
            out = conn.rx.recv() => {
                let Some(msg) = out else { break };
                if session.expired() { continue }
                // This message and up to OUT_BATCH_MAX - 1 more already queued go out with one
                // flush (one socket write) instead of one each: a `limit: 1` subscription to the
                // newest of 14,000 inserts a second gets a message per commit.
                let mut ok = true;
                let mut next = Some(msg);
                let mut sent = 0;
                while let Some(msg) = next.take() {
                    if session.expired() { break }
                    conn.note(&msg);
                    // A subscription the engine ended with an error frees its id.
                    if msg["type"] == "error" {
                        if let Some(sub) = msg["sub"].as_str() {
                            subs.remove(sub);
                        }
                    }
                    let text = serde_json::to_string(&msg).expect("a Value serializes");
                    if socket.feed(Message::Text(text.into())).await.is_err() { ok = false; break }
                    sent += 1;
                    if sent < OUT_BATCH_MAX {
                        next = conn.rx.try_recv().ok();
                    }
                }
                if !ok || socket.flush().await.is_err() { break }
                idle.reset();
            }
            _ = conn.wake.notified() => {
                if conn.overflow.load(Ordering::Acquire) {
                    close(&mut socket, SLOW_CONSUMER).await;
                    break;
                }
            }
            _ = idle.tick() => {
                if subs.is_empty() && last_client.elapsed() >= WS_IDLE_TIMEOUT {
                    close(&mut socket, "idle").await;
                    break;
                }
                if session.principal.is_none() || session.expired() { continue }
                let seq = st.live.seq();
                let mut ok = true;
                while let Ok(msg) = conn.rx.try_recv() {
                    conn.note(&msg);
                    if !send_json(&mut socket, &msg).await { ok = false; break }
                }
                if !ok || !send_json(&mut socket, &conn.heartbeat(seq)).await { break }
            }
        }
    }
    st.live.disconnect(conn.id);
}

/// `{"op":"auth","token":"..."}`: authenticates the connection or renews its token.
fn auth_message(
    st: &AppState,
    session: &mut Session,
    m: &Map<String, Value>,
) -> (Option<Value>, Next) {
    let first = session.principal.is_none();
    let fail = |e: ApiError| {
        // A failed renewal leaves the current token in force until it expires.
        if first {
            (
                None,
                Next::Close(Some(error_msg(None, &e)), "authentication failed"),
            )
        } else {
            (Some(error_msg(None, &e)), Next::Continue)
        }
    };
    let Some(token) = m.get("token").and_then(Value::as_str) else {
        return fail(ApiError::new(
            "bad_request",
            "an auth message needs 'token' (a string)",
        ));
    };
    let p = match st.auth.authenticate(Some(token)) {
        Ok(p) => p,
        Err(e) => return fail(ApiError::new("unauthenticated", e.0)),
    };
    if let Some(cur) = &session.principal {
        let same_user = match (cur, &p) {
            (Principal::User(a), Principal::User(b)) => a.ctx.uid == b.ctx.uid,
            (a, b) => a == b,
        };
        if !same_user || stable_claims(cur) != stable_claims(&p) {
            let e = ApiError::new(
                "unauthenticated",
                "a renewal must carry the same identity and claims; reconnect to change them",
            );
            return (
                None,
                Next::Close(Some(error_msg(None, &e)), "identity changed"),
            );
        }
    }
    let (uid, expires_at) = match &p {
        Principal::User(u) => (json!(u.ctx.uid), json!(u.expires_at_ms)),
        _ => (Value::Null, Value::Null),
    };
    session.set(p, Some(token));
    (
        Some(json!({"type": "auth", "ok": true, "uid": uid, "expiresAt": expires_at})),
        Next::Continue,
    )
}

/// Handles one client message: an immediate reply (errors, auth answers), if any, and
/// whether to close.
fn client_message(
    st: &AppState,
    conn: &Conn,
    subs: &mut HashSet<String>,
    session: &mut Session,
    text: &str,
) -> (Option<Value>, Next) {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return (
                Some(error_msg(
                    None,
                    &ApiError::new("bad_json", format!("message is not valid JSON: {e}")),
                )),
                Next::Continue,
            )
        }
    };
    let Value::Object(mut m) = v else {
        return (
            Some(error_msg(
                None,
                &ApiError::new("bad_request", "a message must be an object"),
            )),
            Next::Continue,
        );
    };
    if m.get("op").and_then(Value::as_str) == Some("auth") {
        return auth_message(st, session, &m);
    }
    let Some(principal) = session.principal.clone() else {
        let e = ApiError::new(
            "unauthenticated",
            "the first message must be {\"op\":\"auth\",\"token\":\"...\"}",
        );
        return (
            None,
            Next::Close(Some(error_msg(None, &e)), "not authenticated"),
        );
    };
    if m.get("op").and_then(Value::as_str) == Some("write") {
        // Like `/v1/bulk`: high-rate ingest is for admin and service keys; end users write
        // through the rules with `/v1/commit` and the document endpoints.
        if principal.user().is_some() {
            let mut e = error_msg(
                None,
                &ApiError::new(
                    "permission_denied",
                    "write requests need an admin or service key",
                ),
            );
            if let Some(r) = m.get("req").filter(|r| r.is_string()) {
                e["req"] = r.clone();
            }
            return (Some(e), Next::Continue);
        }
        return (None, Next::Write(m));
    }
    (
        subscription_message(st, conn, subs, &principal, &mut m),
        Next::Continue,
    )
}

/// `subscribe` and `unsubscribe`.
fn subscription_message(
    st: &AppState,
    conn: &Conn,
    subs: &mut HashSet<String>,
    principal: &Principal,
    m: &mut Map<String, Value>,
) -> Option<Value> {
    let sub = match m.get("sub") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= SUB_ID_BYTES_MAX => s.clone(),
        _ => {
            return Some(error_msg(
                None,
                &ApiError::new(
                    "bad_request",
                    format!("'sub' must be a string of 1 to {SUB_ID_BYTES_MAX} bytes"),
                ),
            ))
        }
    };
    match m.get("op").and_then(Value::as_str) {
        Some("subscribe") => {
            if subs.contains(&sub) {
                return Some(error_msg(
                    Some(&sub),
                    &ApiError::new(
                        "bad_request",
                        format!("subscription '{sub}' already exists on this connection"),
                    ),
                ));
            }
            if subs.len() >= SUBS_PER_CONN_MAX {
                return Some(error_msg(
                    Some(&sub),
                    &ApiError::new(
                        "limit_exceeded",
                        format!("at most {SUBS_PER_CONN_MAX} subscriptions per connection"),
                    ),
                ));
            }
            const MEMBERS: &[&str] = &[
                "op",
                "sub",
                "collection",
                "filter",
                "sort",
                "skip",
                "limit",
                "projection",
                "resumeFrom",
            ];
            if let Some(k) = m.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
                return Some(error_msg(
                    Some(&sub),
                    &ApiError::new("bad_request", format!("unknown subscribe member '{k}'")),
                ));
            }
            let resume_from = match m.get("resumeFrom") {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_u64() {
                    Some(s) => Some(s),
                    None => {
                        return Some(error_msg(
                            Some(&sub),
                            &ApiError::new(
                                "bad_request",
                                "resumeFrom must be a seq (non-negative integer)",
                            ),
                        ))
                    }
                },
            };
            let collection = m
                .get("collection")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let (Some(user), Some(collection)) = (principal.user(), collection) {
                if let Err(e) = crate::api::query::restrict(st, m, &collection, user) {
                    return Some(error_msg(Some(&sub), &e));
                }
            }
            let (collection, query, key) = match subscription(m) {
                Ok(x) => x,
                Err(e) => return Some(error_msg(Some(&sub), &e)),
            };
            let resume_from = resumable(st, principal, resume_from, &sub, &*conn.sink);
            let req = SubscribeRequest {
                sub: sub.clone(),
                collection,
                query,
                key,
                resume_from,
                sink: conn.sink.clone(),
            };
            match st.live.subscribe(req) {
                Ok(()) => {
                    subs.insert(sub);
                    None
                }
                Err(e) => Some(error_msg(Some(&sub), &ApiError::from(e))),
            }
        }
        Some("unsubscribe") => {
            subs.remove(&sub);
            st.live
                .unsubscribe(conn.id, &sub)
                .err()
                .map(|e| error_msg(Some(&sub), &ApiError::from(e)))
        }
        _ => Some(error_msg(
            Some(&sub),
            &ApiError::new(
                "bad_request",
                "'op' must be \"auth\", \"subscribe\", \"unsubscribe\" or \"write\"",
            ),
        )),
    }
}

/// `GET /v1/subscribe?collection=..&filter=<json>&sort=<json>&skip=..&limit=..&projection=<json>`
/// as Server-Sent Events; `id:` is the seq, so `Last-Event-ID` resumes.
pub async fn sse(
    State(st): State<AppState>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut m = Map::new();
    for (k, v) in &params {
        let parsed = match k.as_str() {
            "collection" => Value::String(v.clone()),
            "filter" | "sort" | "projection" | "skip" | "limit" | "resumeFrom" => {
                match serde_json::from_str(v) {
                    Ok(p) => p,
                    Err(e) => {
                        return ApiError::new(
                            "bad_json",
                            format!("parameter '{k}' is not valid JSON: {e}"),
                        )
                        .into_response()
                    }
                }
            }
            other => {
                return ApiError::new("bad_request", format!("unknown parameter '{other}'"))
                    .into_response()
            }
        };
        m.insert(k.clone(), parsed);
    }
    if let Err(e) = check_origin(&st, &headers) {
        return e.into_response();
    }
    let principal = match principal_of(&st, &headers) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let collection = m
        .get("collection")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let (Some(user), Some(collection)) = (principal.user(), collection) {
        if let Err(e) = crate::api::query::restrict(&st, &mut m, &collection, user) {
            return e.into_response();
        }
    }
    let expires = principal.user().map(|u| {
        tokio::time::Instant::now()
            + Duration::from_millis(u.expires_at_ms.saturating_sub(now_ms()))
    });
    let (collection, query, key) = match subscription(&m) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let header_resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    let resume_from = header_resume.or_else(|| m.get("resumeFrom").and_then(Value::as_u64));
    let conn = Conn::new(&st);
    let resume_from = resumable(&st, &principal, resume_from, "sse", &*conn.sink);
    let req = SubscribeRequest {
        sub: "sse".into(),
        collection,
        query,
        key,
        resume_from,
        sink: conn.sink.clone(),
    };
    if let Err(e) = st.live.subscribe(req) {
        return ApiError::from(e).into_response();
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
    /// Resolves with the event that ends the stream.
    async fn ended(&mut self) -> Value {
        match self {
            Watch::Rules(rx) => {
                let _ = rx.changed().await;
                json!({"type": "reset", "sub": "sse", "reason": "the security rules changed; reconnect"})
            }
            Watch::Key(rx, key, auth) => loop {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                if auth.authenticate(Some(key)).is_err() {
                    return json!({"type": "error", "sub": "sse", "code": "unauthenticated",
                        "message": "the stream's API key was revoked"});
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

fn event(msg: &Value) -> Event {
    let e = Event::default().data(msg.to_string());
    match msg.get("seq").and_then(Value::as_u64) {
        Some(s) => e.id(s.to_string()),
        None => e,
    }
}

/// The SSE stream of one connection: queued messages, heartbeats when idle, and an end when the
/// client is too slow.
fn async_stream(
    state: SseState,
    expires: Option<tokio::time::Instant>,
) -> impl futures_util::Stream<Item = EventResult> {
    let expiry_msg = || {
        let msg = json!({"type": "error", "sub": "sse", "code": "token_expired",
            "message": "the token expired; reconnect with a fresh one"});
        Event::default().data(msg.to_string())
    };
    futures_util::stream::unfold(Some(state), move |state| async move {
        let (live, mut conn, guard, mut watch) = state?;
        let far = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let expiry = expires.unwrap_or(far);
        if tokio::time::Instant::now() >= expiry {
            return Some((Ok(expiry_msg()), None));
        }
        if conn.overflow.load(Ordering::Acquire) {
            let msg = json!({"type": "reset", "sub": "sse", "reason": SLOW_CONSUMER});
            return Some((Ok(Event::default().data(msg.to_string())), None));
        }
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(expiry) => {
                Some((Ok(expiry_msg()), None))
            }
            msg = async { watch.as_mut().expect("guarded").ended().await }, if watch.is_some() => {
                Some((Ok(Event::default().data(msg.to_string())), None))
            }
            out = conn.rx.recv() => {
                let msg = out?;
                conn.note(&msg);
                let ev = event(&msg);
                Some((Ok(ev), Some((live, conn, guard, watch))))
            }
            _ = conn.wake.notified() => {
                let msg = json!({"type": "reset", "sub": "sse", "reason": SLOW_CONSUMER});
                Some((Ok(Event::default().data(msg.to_string())), None))
            }
            _ = tokio::time::sleep(HEARTBEAT) => {
                let seq = live.seq();
                match conn.rx.try_recv() {
                    Ok(msg) => {
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
    })
}

#[cfg(test)]
mod tests {
    use super::subscription;
    use crate::api::query::restrict_with;
    use crate::auth::UserAuth;
    use herald_rules::{AuthCtx, Rules};
    use serde_json::{json, Map, Value};

    fn user(uid: &str, org: &str) -> UserAuth {
        let claims = json!({"sub": uid, "org": org});
        UserAuth {
            ctx: AuthCtx {
                uid: uid.into(),
                claims: claims.as_object().unwrap().clone(),
            },
            expires_at_ms: u64::MAX,
        }
    }

    /// The sharing key of a user's subscription (the engine shares one view per key).
    fn key(rules: &Rules, u: &UserAuth, collection: &str) -> String {
        let mut m: Map<String, Value> = json!({"collection": collection, "filter": {"n": {"$gt": 1}}, "sort": {"n": 1}, "limit": 5})
            .as_object()
            .unwrap()
            .clone();
        restrict_with(rules, &mut m, collection, u).unwrap();
        subscription(&m).unwrap().2
    }

    #[test]
    fn users_with_the_same_substituted_rule_share_a_view_and_others_do_not() {
        let rules = Rules::parse(&json!({"rules": [
            {"match": "orgs/{o}/docs/{d}", "read": {"org": "$$auth.claims.org"}},
            {"match": "notes/{n}", "read": {"owner": "$$auth.uid"}}
        ]}))
        .unwrap();
        let (a, b, c) = (user("a", "acme"), user("b", "acme"), user("c", "other"));
        let docs = "orgs/x/docs";
        assert_eq!(key(&rules, &a, docs), key(&rules, &b, docs));
        assert_ne!(key(&rules, &a, docs), key(&rules, &c, docs));
        assert_ne!(key(&rules, &a, "notes"), key(&rules, &b, "notes"));
        assert!(key(&rules, &a, docs).contains("acme"));
    }
}
