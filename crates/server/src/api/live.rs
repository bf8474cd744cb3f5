//! Live queries over WebSocket (`/v1/ws`, many subscriptions per connection) and Server-Sent
//! Events (`/v1/subscribe`, one subscription per stream). Both feed the engine in
//! `herald_db::live` and relay its messages: `initial`, `changes`, `reset`, `error`, plus
//! `heartbeat` when a connection has been idle for the heartbeat interval.
//!
//! Each connection has one bounded outbound queue ([`CONN_QUEUE_MAX`]) shared by its
//! subscriptions, so they are delivered in seq order. When the queue is full the engine drops the
//! connection's subscriptions and the connection is closed with a reason; the client reconnects
//! and resumes from the last seq it saw.

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query as UrlQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
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
        }
    }

    fn note(&mut self, msg: &Value) {
        if let Some(s) = msg.get("seq").and_then(Value::as_u64) {
            self.last_seq = self.last_seq.max(s);
        }
    }

    /// The heartbeat for now: the engine's seq (read before draining, so every message up to it
    /// is already queued) or the last seq sent, whichever is higher.
    fn heartbeat(&self, engine_seq: u64) -> Value {
        json!({"type": "heartbeat", "seq": engine_seq.max(self.last_seq)})
    }
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

pub async fn ws(State(st): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    upgrade
        .max_message_size(WS_MESSAGE_BYTES_MAX)
        .on_upgrade(move |socket| run_ws(st, socket))
}

async fn run_ws(st: AppState, mut socket: WebSocket) {
    let mut conn = Conn::new(&st);
    let mut subs: HashSet<String> = HashSet::new();
    let mut idle = tokio::time::interval(HEARTBEAT);
    idle.reset();
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let text = match incoming {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(Message::Binary(_))) => {
                        let e = ApiError::new("bad_request", "messages must be JSON text");
                        if socket.send(Message::Text(error_msg(None, &e).to_string().into())).await.is_err() { break }
                        continue;
                    }
                    Some(Ok(_)) => continue,
                };
                if let Some(reply) = client_message(&st, &conn, &mut subs, text.as_str()) {
                    if socket.send(Message::Text(reply.to_string().into())).await.is_err() { break }
                }
            }
            out = conn.rx.recv() => {
                let Some(msg) = out else { break };
                conn.note(&msg);
                // A subscription the engine ended with an error frees its id.
                if msg["type"] == "error" {
                    if let Some(sub) = msg["sub"].as_str() {
                        subs.remove(sub);
                    }
                }
                if socket.send(Message::Text(msg.to_string().into())).await.is_err() { break }
                idle.reset();
            }
            _ = conn.wake.notified() => {
                if conn.overflow.load(Ordering::Acquire) {
                    let frame = CloseFrame { code: 1008, reason: SLOW_CONSUMER.into() };
                    let _ = socket.send(Message::Close(Some(frame))).await;
                    break;
                }
            }
            _ = idle.tick() => {
                let seq = st.live.seq();
                while let Ok(msg) = conn.rx.try_recv() {
                    conn.note(&msg);
                    if socket.send(Message::Text(msg.to_string().into())).await.is_err() { break }
                }
                if socket.send(Message::Text(conn.heartbeat(seq).to_string().into())).await.is_err() { break }
            }
        }
    }
    st.live.disconnect(conn.id);
}

/// Handles one client message; returns an immediate reply (errors), if any.
fn client_message(
    st: &AppState,
    conn: &Conn,
    subs: &mut HashSet<String>,
    text: &str,
) -> Option<Value> {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Some(error_msg(
                None,
                &ApiError::new("bad_json", format!("message is not valid JSON: {e}")),
            ))
        }
    };
    let Value::Object(m) = v else {
        return Some(error_msg(
            None,
            &ApiError::new("bad_request", "a message must be an object"),
        ));
    };
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
            let (collection, query, key) = match subscription(&m) {
                Ok(x) => x,
                Err(e) => return Some(error_msg(Some(&sub), &e)),
            };
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
                "'op' must be \"subscribe\" or \"unsubscribe\"",
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
    let stream = async_stream((live, conn, guard));
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
    state: (herald_db::live::LiveEngine, Conn, DisconnectOnDrop),
) -> impl futures_util::Stream<Item = EventResult> {
    futures_util::stream::unfold(Some(state), |state| async move {
        let (live, mut conn, guard) = state?;
        if conn.overflow.load(Ordering::Acquire) {
            let msg = json!({"type": "reset", "sub": "sse", "reason": SLOW_CONSUMER});
            return Some((Ok(Event::default().data(msg.to_string())), None));
        }
        tokio::select! {
            out = conn.rx.recv() => {
                let msg = out?;
                conn.note(&msg);
                let ev = event(&msg);
                Some((Ok(ev), Some((live, conn, guard))))
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
                        Some((Ok(ev), Some((live, conn, guard))))
                    }
                    Err(_) => {
                        let hb = conn.heartbeat(seq);
                        Some((Ok(event(&hb)), Some((live, conn, guard))))
                    }
                }
            }
        }
    })
}
