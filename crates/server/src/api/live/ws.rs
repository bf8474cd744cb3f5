//! The WebSocket `/v1/ws`: the connection loop (client messages, the outbound queue,
//! heartbeats, token expiry, rules and key changes, the rate limit, write replies) and the
//! handling of each client message, decoded as the protocol's `ClientMessage`.

use crate::api::auth::{bearer, principal_of};
use crate::api::error::ApiError;
use crate::api::live::conn::{encode, Conn};
use crate::api::live::session::{
    auth_failed, auth_message, reached, RateLimit, Session, WS_AUTH_TIMEOUT, WS_IDLE_TIMEOUT,
    WS_MESSAGES_BURST, WS_MESSAGES_PER_SEC, WS_SEND_STALL,
};
use crate::api::live::ws_writes::{request_error, WsWrites};
use crate::api::live::{
    check_origin, error_msg, pipeline_subscription, resumable, subscription, token_expired,
    HEARTBEAT, SLOW_CONSUMER, SUBS_PER_CONN_MAX, WS_MESSAGE_BYTES_MAX,
};
use crate::auth::Principal;
use crate::state::AppState;
use crate::ws_stats::WsStats;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::SinkExt;
use herald_db::live::SubscribeRequest;
use herald_db::Clock;
use herald_protocol::error::WS_CLOSE_POLICY;
use herald_protocol::limits::REQ_ID_BYTES_MAX;
use herald_protocol::{
    ClientMessage, Decode, ErrorCode, ProtocolError, ServerMessage, Subscribe, WriteRequest,
};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most queued messages written to a WebSocket with one flush.
const OUT_BATCH_MAX: usize = 64;
/// How long a closing connection waits for the client's close frame (see [`close`]).
const CLOSE_LINGER: Duration = Duration::from_secs(5);
/// Most client messages read and discarded while a connection closes.
const CLOSE_LINGER_MESSAGES_MAX: usize = 1024;

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

/// What the loop does after a client message.
pub enum Next {
    Continue,
    /// Send this, then close with a policy-violation frame and this reason.
    Close(Option<ServerMessage<'static>>, &'static str),
    /// A write request from a trusted principal, for the connection's `WsWrites`.
    Write(WriteRequest),
    /// The error of a write request refused as a whole, queued behind the connection's earlier
    /// write replies (replies keep request order).
    WriteRefused(String),
    /// A subscription whose `minSeq` this node has not applied yet: the loop waits for it
    /// (bounded), then subscribes.
    SubscribeAfter(Box<Subscribe>, Principal),
}

/// A connection's socket, whose every write is bounded by [`WS_SEND_STALL`] on the database's
/// clock: a client that stops reading (half-open, or just not reading) fills the socket's
/// buffers and then its bounded outbound queue; past the bound its connection is dropped and
/// counted (`herald_ws_stalled_total`) instead of holding a task and a socket forever.
struct Socket {
    ws: WebSocket,
    clock: Clock,
    stats: Arc<WsStats>,
}

impl Socket {
    async fn send_msg(&mut self, msg: &ServerMessage<'_>) -> bool {
        self.send_text(msg.to_text()).await
    }

    async fn send_text(&mut self, text: String) -> bool {
        let sent = self.ws.send(Message::Text(text.into()));
        matches!(
            stall_bounded(&self.clock, &self.stats, sent).await,
            Some(Ok(()))
        )
    }
}

/// `write` (a write to a connection's socket), or `None` if it stalled past [`WS_SEND_STALL`]
/// on `clock` (then counted in `stats`).
async fn stall_bounded<T>(
    clock: &Clock,
    stats: &WsStats,
    write: impl std::future::Future<Output = T>,
) -> Option<T> {
    let deadline = clock
        .now_ms()
        .saturating_add(WS_SEND_STALL.as_millis() as u64);
    tokio::select! {
        out = write => Some(out),
        _ = reached(clock, deadline) => {
            stats.stalled();
            None
        }
    }
}

/// Closes the connection with `reason`, after an error with code `after` if one was sent: the
/// close code is that error's (`ErrorCode::ws_close`), else a policy violation.
///
/// Then it lingers: it reads and discards what the client still sends until the client's close
/// frame, for at most [`CLOSE_LINGER`] and [`CLOSE_LINGER_MESSAGES_MAX`] messages. Dropping a
/// socket with unread input makes the kernel answer with a reset, and a reset can destroy the
/// replies and the close frame before the client has read them. A client that reads nothing
/// cannot hold the task either: sending the close frame has the same bound.
async fn close(socket: &mut WebSocket, after: Option<ErrorCode>, reason: &'static str) {
    let frame = CloseFrame {
        code: after
            .and_then(ErrorCode::ws_close)
            .unwrap_or(WS_CLOSE_POLICY),
        reason: reason.into(),
    };
    let linger = async {
        if socket.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
        for _ in 0..CLOSE_LINGER_MESSAGES_MAX {
            match socket.recv().await {
                None | Some(Ok(Message::Close(_))) => return,
                // The library ends the stream after a read error.
                Some(Err(_)) => return,
                Some(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_LINGER, linger).await;
}

/// Why reading a client message failed.
enum ReadError {
    /// A message over [`WS_MESSAGE_BYTES_MAX`] (the library reads it, up to its frame bound,
    /// and refuses it).
    TooLarge,
    /// A text message that is not UTF-8.
    NotUtf8,
    /// The connection broke, or the client broke the protocol.
    Other,
}

fn read_error(e: &axum::Error) -> ReadError {
    let inner = std::error::Error::source(e).and_then(|s| s.downcast_ref::<tungstenite::Error>());
    match inner {
        Some(tungstenite::Error::Capacity(_)) => ReadError::TooLarge,
        Some(tungstenite::Error::Utf8(_)) => ReadError::NotUtf8,
        _ => ReadError::Other,
    }
}

/// The code of an error message.
fn code_of(msg: &ServerMessage<'_>) -> Option<ErrorCode> {
    match msg {
        ServerMessage::Error { code, .. } => Some(*code),
        _ => None,
    }
}

async fn run_ws(st: AppState, socket: WebSocket, principal: Option<(Principal, Option<String>)>) {
    let stats = st.ws_stats.clone();
    let _open = stats.opened();
    let mut socket = Socket {
        ws: socket,
        clock: st.auth.clock().clone(),
        stats: stats.clone(),
    };
    let mut conn = Conn::new(&st);
    let mut subs: HashSet<String> = HashSet::new();
    let mut writes = WsWrites::default();
    let mut session = Session::default();
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
    let clock = st.auth.clock().clone();
    loop {
        let auth_deadline = if session.principal.is_none() {
            opened + WS_AUTH_TIMEOUT
        } else {
            opened + far
        };
        tokio::select! {
            biased;
            _ = reached(&clock, session.expires_at_ms.unwrap_or(u64::MAX)), if session.expires_at_ms.is_some() => {
                st.live.disconnect(conn.id);
                let _ = socket.send_msg(&token_expired(None)).await;
                close(&mut socket.ws, Some(ErrorCode::TokenExpired), "token expired").await;
                break;
            }
            _ = tokio::time::sleep_until(auth_deadline) => {
                let e = ApiError::new(ErrorCode::Unauthenticated, "no credentials within the handshake timeout");
                let _ = socket.send_msg(&error_msg(None, &e)).await;
                close(&mut socket.ws, Some(e.code), "authentication timeout").await;
                break;
            }
            changed = rules_changed.changed(), if session.principal.as_ref().is_some_and(|p| p.user().is_some()) => {
                if changed.is_ok() {
                    st.live.disconnect(conn.id);
                    close(&mut socket.ws, None, "the security rules changed; reconnect").await;
                    break;
                }
            }
            changed = keys_changed.changed(), if session.key.is_some() => {
                if changed.is_ok() && st.auth.authenticate(session.key.as_deref()).is_err() {
                    st.live.disconnect(conn.id);
                    let e = ApiError::new(ErrorCode::Unauthenticated, "the connection's API key was revoked");
                    let _ = socket.send_msg(&error_msg(None, &e)).await;
                    close(&mut socket.ws, Some(e.code), "API key revoked").await;
                    break;
                }
            }
            // Replies first, so answered writes free room before more are read.
            reply = writes.next_reply(), if !writes.is_empty() => {
                let Some(reply) = reply else { continue };
                if !socket.send_text(reply).await { break }
                idle.reset();
            }
            // Not read while the connection's writes in flight are at their bound (backpressure).
            incoming = socket.ws.recv(), if writes.has_room() => {
                // A binary message gets an error and the connection goes on; every message
                // counts against the rate limit, whatever it holds.
                let text = match incoming {
                    Some(Ok(Message::Text(t))) => Ok(t),
                    Some(Ok(Message::Binary(_))) => {
                        Err(ApiError::new(ErrorCode::BadRequest, "messages must be JSON text"))
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Err(e)) => {
                        // The library ends the stream after any read error, so the connection
                        // ends here. The replies to earlier messages are already written; the
                        // client learns why (error, then the close frame).
                        let (e, reason) = match read_error(&e) {
                            ReadError::TooLarge => (ApiError::new(ErrorCode::MessageTooLarge, format!(
                                "a message is over {WS_MESSAGE_BYTES_MAX} bytes")),
                                "a message is over the size limit"),
                            ReadError::NotUtf8 => (ApiError::new(ErrorCode::BadJson,
                                "a text message is not UTF-8"), "a text message is not UTF-8"),
                            ReadError::Other => break,
                        };
                        let _ = socket.send_msg(&error_msg(None, &e)).await;
                        close(&mut socket.ws, Some(e.code), reason).await;
                        break;
                    }
                    Some(Ok(_)) => continue,
                };
                last_client = tokio::time::Instant::now();
                if !rate.take() {
                    let e = ApiError::new(ErrorCode::RateLimited, format!(
                        "more than {WS_MESSAGES_PER_SEC} messages per second (bursts of {WS_MESSAGES_BURST})"));
                    let _ = socket.send_msg(&error_msg(None, &e)).await;
                    close(&mut socket.ws, Some(e.code), "rate limit exceeded").await;
                    break;
                }
                let text = match text {
                    Ok(t) => t,
                    Err(e) => {
                        if !socket.send_msg(&error_msg(None, &e)).await { break }
                        continue;
                    }
                };
                let (reply, next) = client_message(&st, &conn, &mut subs, &mut session, text.as_str());
                if let Some(reply) = reply {
                    if !socket.send_msg(&reply).await { break }
                }
                match next {
                    Next::Continue => {}
                    Next::WriteRefused(reply) => writes.answer(reply),
                    Next::SubscribeAfter(s, principal) => {
                        // Waits here (at most MIN_SEQ_WAIT): the client asked for this
                        // subscription to start no earlier than its seq.
                        let waited = crate::api::min_seq::wait_min_seq(&st, s.min_seq, true).await;
                        let reply = match waited {
                            Ok(()) => subscribe(&st, &conn, &mut subs, &principal, *s),
                            Err(e) => Some(error_msg(Some(&s.sub), &e)),
                        };
                        if let Some(reply) = reply {
                            if !socket.send_msg(&reply).await { break }
                        }
                    }
                    Next::Write(request) => {
                        let mut ok = true;
                        for r in writes.submit(&st, request, session.key.as_deref()).await {
                            if !socket.send_text(r).await { ok = false; break }
                        }
                        if !ok { break }
                    }
                    Next::Close(msg, reason) => {
                        if let Some(m) = &msg {
                            let _ = socket.send_msg(m).await;
                        }
                        close(&mut socket.ws, msg.as_ref().and_then(code_of), reason).await;
                        break;
                    }
                }
            }
            out = conn.rx.recv() => {
                let Some(out) = out else { break };
                if session.expired(&clock) { continue }
                // This message and up to OUT_BATCH_MAX - 1 more already queued go out with one
                // flush (one socket write) instead of one each: a `limit: 1` subscription to a
                // collection under fast inserts gets a message per commit.
                let Socket { ws, clock: sclock, stats } = &mut socket;
                let batch = async {
                    let mut next = Some(out);
                    let mut sent = 0;
                    while let Some(out) = next.take() {
                        if session.expired(&clock) { break }
                        let msg = encode(&out);
                        conn.note(&msg);
                        // A subscription the engine ended with an error frees its id.
                        if let ServerMessage::Error { sub: Some(sub), .. } = &msg {
                            subs.remove(sub.as_ref());
                        }
                        let text = msg.to_text();
                        if ws.feed(Message::Text(text.into())).await.is_err() { return false }
                        sent += 1;
                        if sent < OUT_BATCH_MAX {
                            next = conn.rx.try_recv().ok();
                        }
                    }
                    ws.flush().await.is_ok()
                };
                if stall_bounded(sclock, stats, batch).await != Some(true) { break }
                idle.reset();
            }
            _ = conn.wake.notified() => {
                if conn.overflow.load(Ordering::Acquire) {
                    close(&mut socket.ws, None, SLOW_CONSUMER).await;
                    break;
                }
            }
            _ = idle.tick() => {
                if subs.is_empty() && last_client.elapsed() >= WS_IDLE_TIMEOUT {
                    close(&mut socket.ws, None, "idle").await;
                    break;
                }
                if session.principal.is_none() || session.expired(&clock) { continue }
                let seq = st.live.seq();
                let mut ok = true;
                while let Ok(out) = conn.rx.try_recv() {
                    let msg = encode(&out);
                    conn.note(&msg);
                    if !socket.send_msg(&msg).await { ok = false; break }
                }
                if !ok || !socket.send_msg(&conn.heartbeat(seq)).await { break }
            }
        }
    }
    st.live.disconnect(conn.id);
}

/// Handles one client message: an immediate reply (errors, auth answers), if any, and
/// whether to close.
fn client_message(
    st: &AppState,
    conn: &Conn,
    subs: &mut HashSet<String>,
    session: &mut Session,
    text: &str,
) -> (Option<ServerMessage<'static>>, Next) {
    let msg = match ClientMessage::decode(text.as_bytes()) {
        Ok(m) => m,
        Err(e) => return refused(session, text, e),
    };
    if let ClientMessage::Auth { token } = &msg {
        return auth_message(st, session, token);
    }
    let Some(principal) = session.principal.clone() else {
        return not_authenticated();
    };
    match msg {
        ClientMessage::Auth { .. } => unreachable!("handled above"),
        ClientMessage::Write(request) => {
            // Like `/v1/bulk`: high-rate ingest is for admin and service keys; end users write
            // through the rules with `/v1/commit` and the document endpoints.
            if principal.user().is_some() {
                return (Some(write_denied(Some(&request.req))), Next::Continue);
            }
            (None, Next::Write(request))
        }
        ClientMessage::Subscribe(s) => match s.min_seq {
            Some(min) if st.db.seq().min(st.live.seq()) < min => {
                (None, Next::SubscribeAfter(s, principal))
            }
            _ => (subscribe(st, conn, subs, &principal, *s), Next::Continue),
        },
        ClientMessage::Unsubscribe { sub } => {
            subs.remove(&sub);
            let reply = st
                .live
                .unsubscribe(conn.id, &sub)
                .err()
                .map(|e| error_msg(Some(&sub), &ApiError::from(e)));
            (reply, Next::Continue)
        }
    }
}

fn not_authenticated() -> (Option<ServerMessage<'static>>, Next) {
    let e = ApiError::new(
        ErrorCode::Unauthenticated,
        "the first message must be {\"op\":\"auth\",\"token\":\"...\"}",
    );
    (
        None,
        Next::Close(Some(error_msg(None, &e)), "not authenticated"),
    )
}

fn write_denied(req: Option<&str>) -> ServerMessage<'static> {
    let mut msg = ServerMessage::error(
        ErrorCode::PermissionDenied,
        "write requests need an admin or service key",
    );
    if let ServerMessage::Error { req: r, .. } = &mut msg {
        *r = req.map(|s| Cow::Owned(s.to_string()));
    }
    msg
}

/// A message the protocol refused. Its error names the subscription or request it was meant
/// for when the message says so (a valid `sub` or `req`); an `auth` message's failure, or any
/// message before authentication, is handled as such.
fn refused(
    session: &Session,
    text: &str,
    e: ProtocolError,
) -> (Option<ServerMessage<'static>>, Next) {
    let e = ApiError::from(e);
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let op = v.get("op").and_then(Value::as_str);
    let id = |k: &str, max: usize| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= max)
            .map(str::to_string)
    };
    if v.is_object() && op == Some("auth") {
        return auth_failed(session, e);
    }
    if matches!(e.code, ErrorCode::BadJson | ErrorCode::DocumentTooDeep) || !v.is_object() {
        return (Some(error_msg(None, &e)), Next::Continue);
    }
    let Some(principal) = &session.principal else {
        return not_authenticated();
    };
    let mut msg = error_msg(None, &e);
    if let ServerMessage::Error { sub, .. } = &mut msg {
        match op {
            Some("write") => {
                let r = id("req", REQ_ID_BYTES_MAX);
                if principal.user().is_some() {
                    return (Some(write_denied(r.as_deref())), Next::Continue);
                }
                return (None, Next::WriteRefused(request_error(r.as_deref(), &e)));
            }
            Some("subscribe" | "unsubscribe") => {
                *sub = id("sub", crate::api::live::SUB_ID_BYTES_MAX).map(Cow::Owned);
            }
            _ => {}
        }
    }
    (Some(msg), Next::Continue)
}

/// `subscribe`: checks the connection's subscriptions, restricts an end user's query by the
/// read rule, and hands the subscription to the engine. The reply is an error, if any.
fn subscribe(
    st: &AppState,
    conn: &Conn,
    subs: &mut HashSet<String>,
    principal: &Principal,
    mut s: Subscribe,
) -> Option<ServerMessage<'static>> {
    let pipeline = s.pipeline.take();
    let group = s.collection_group.take();
    let (sub, collection, mut parts, resume_from) = s.into_parts();
    let fail = |e: ApiError| Some(error_msg(Some(&sub), &e));
    if subs.contains(&sub) {
        return fail(ApiError::new(
            ErrorCode::BadRequest,
            format!("subscription '{sub}' already exists on this connection"),
        ));
    }
    if subs.len() >= SUBS_PER_CONN_MAX {
        return fail(ApiError::new(
            ErrorCode::LimitExceeded,
            format!("at most {SUBS_PER_CONN_MAX} subscriptions per connection"),
        ));
    }
    if let Some(group) = group {
        let resume_from = resumable(st, principal, resume_from, &sub, &conn.sink);
        let sink = conn.sink.clone();
        return match super::start_group_subscription(
            st,
            principal,
            group,
            parts,
            pipeline,
            sub.clone(),
            resume_from,
            sink,
        ) {
            Ok(()) => {
                subs.insert(sub);
                None
            }
            Err(e) => fail(e),
        };
    }
    let plan = match pipeline {
        Some(stages) => match pipeline_subscription(st, principal, &collection, &parts, stages) {
            Ok((head, plan, key)) => Some((head, plan, key)),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let (query, plan, key) = match plan {
        Some((head, plan, key)) => (head, Some(plan), key),
        None => {
            if let Some(user) = principal.user() {
                if let Err(e) = crate::api::query::restrict(st, &mut parts, &collection, user) {
                    return fail(e);
                }
            }
            match subscription(&collection, &parts) {
                Ok((query, key)) => (query, None, key),
                Err(e) => return fail(e),
            }
        }
    };
    let resume_from = resumable(st, principal, resume_from, &sub, &conn.sink);
    let req = SubscribeRequest {
        sub: sub.clone(),
        collection,
        query,
        key,
        resume_from,
        sink: conn.sink.clone(),
    };
    let subscribed = match plan {
        Some(plan) => st.live.subscribe_pipeline(req, plan),
        None => st.live.subscribe(req),
    };
    match subscribed {
        Ok(()) => {
            subs.insert(sub);
            None
        }
        Err(e) => fail(ApiError::from(e)),
    }
}
