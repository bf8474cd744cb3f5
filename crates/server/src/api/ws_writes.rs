//! Writes over the WebSocket: `{"op":"write","req","writes":[...],"atomic":bool}` on `/v1/ws`.
//! Non-atomic requests give each write its own transaction, group-committed with everything else
//! in the writer's queue (as `/v1/bulk` does); atomic ones are one transaction (as
//! `/v1/commit`). Replies (`written`, or `error` for a request that failed as a whole) go out in
//! request order.
//!
//! Backpressure: a connection has at most [`WS_WRITES_INFLIGHT_MAX`] writes queued and not yet
//! settled (plus one request's worth). The connection loop stops reading the socket while the
//! bound is reached, so a fast client is slowed by TCP instead of growing server memory; when
//! the writer's queue is full, the request being queued waits for the connection's oldest
//! request to settle.

use crate::api::bulk::{try_queue, Submitted};
use crate::api::error::ApiError;
use crate::api::writes::parse_write;
use crate::state::AppState;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::StreamExt;
use herald_db::{CommitOutcome, DbError, Ticket, Write, COMMIT_WRITES_MAX};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Writes queued and not yet settled, per connection; past it the connection stops reading.
pub const WS_WRITES_INFLIGHT_MAX: usize = 2048;
/// Longest client-chosen request id.
pub const REQ_ID_BYTES_MAX: usize = 128;

const MEMBERS: &[&str] = &["op", "req", "writes", "atomic"];

/// A request being committed: its reply (JSON text), once every write settled, and its write
/// count.
type Pending = BoxFuture<'static, (usize, String)>;

/// The write requests of one connection that are queued and not yet answered.
#[derive(Default)]
pub struct WsWrites {
    pending: FuturesOrdered<Pending>,
    /// Writes in `pending` (not requests: one request may hold up to 500).
    inflight: usize,
}

/// `{"type":"error","req",code,message,...}` for a request that failed as a whole.
fn request_error(req: Option<&str>, e: &ApiError) -> Value {
    let mut v = json!({"type": "error", "code": e.code, "message": e.message});
    if let Some(r) = req {
        v["req"] = json!(r);
    }
    if let Some(Value::Object(extra)) = &e.extra {
        for (k, x) in extra {
            v[k] = x.clone();
        }
    }
    v
}

fn error_result(e: &ApiError) -> Value {
    json!({"error": {"code": e.code, "message": e.message}})
}

/// The per-write result of a committed transaction, `{"op","id","version","seq"}`, written onto
/// `out` as JSON text. A reply holds up to 500 of them; built as `Value` maps and then
/// serialized, they were a fifth of the HTTP workers' time at 14,000 RockBench events/s.
fn result_of(out: &CommitOutcome, i: usize, text: &mut String) {
    use std::fmt::Write;
    let r = &out.results[i];
    // The op names are plain ASCII words: nothing to escape.
    let _ = match r.op {
        Some(op) => write!(text, r#"{{"op":"{}""#, op.as_str()),
        None => write!(text, r#"{{"op":null"#),
    };
    text.push_str(r#","id":"#);
    push_json_str(text, &r.id);
    let _ = write!(text, r#","version":{},"seq":{}}}"#, r.version, out.seq);
}

/// `s` as a JSON string.
fn push_json_str(text: &mut String, s: &str) {
    text.push_str(&serde_json::to_string(s).expect("a string serializes"));
}

/// `{"type":"written","req","seq","results":[...]}` with results already written as text.
fn written_reply(req: &str, seq: u64, results: &str) -> String {
    let mut text = String::with_capacity(results.len() + req.len() + 64);
    text.push_str(r#"{"type":"written","req":"#);
    push_json_str(&mut text, req);
    text.push_str(&format!(r#","seq":{seq},"results":["#));
    text.push_str(results);
    text.push_str("]}");
    text
}

/// One write's outcome inside a non-atomic request.
enum Slot {
    Done(Value),
    Waiting(Ticket<CommitOutcome, DbError>),
}

impl WsWrites {
    /// Room to read another message from the socket.
    pub fn has_room(&self) -> bool {
        self.inflight < WS_WRITES_INFLIGHT_MAX
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The next reply, in request order (pending forever when there is none: guard with
    /// [`is_empty`](WsWrites::is_empty)).
    pub async fn next_reply(&mut self) -> Option<String> {
        let (n, reply) = self.pending.next().await?;
        self.inflight -= n;
        Some(reply)
    }

    /// Queues a write request. Returns the replies of earlier requests settled while waiting
    /// for room in the writer's queue, to send now. Every reply, an error of this request
    /// included, goes out in request order.
    pub async fn submit(&mut self, st: &AppState, mut m: Map<String, Value>) -> Vec<String> {
        let mut out = Vec::new();
        let req = match m.get("req") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= REQ_ID_BYTES_MAX => s.clone(),
            _ => {
                let e = ApiError::new(
                    "bad_request",
                    format!("'req' must be a string of 1 to {REQ_ID_BYTES_MAX} bytes"),
                );
                self.answer(request_error(None, &e));
                return out;
            }
        };
        let parsed = parse_request(&mut m);
        let (items, atomic) = match parsed {
            Ok(x) => x,
            Err(e) => {
                self.answer(request_error(Some(&req), &e));
                return out;
            }
        };
        let n = items.len();
        let future = if atomic {
            let mut writes = Vec::with_capacity(n);
            for (i, item) in items.into_iter().enumerate() {
                match parse_write(item) {
                    Ok(w) => writes.push(w),
                    Err(mut e) => {
                        e.message = format!("write {i}: {}", e.message);
                        e.extra = Some(json!({"write": i}));
                        self.answer(request_error(Some(&req), &e));
                        return out;
                    }
                }
            }
            match self.queue(st, writes, &mut out).await {
                Err(e) => {
                    self.answer(request_error(Some(&req), &e));
                    return out;
                }
                Ok(ticket) => atomic_reply(req, ticket),
            }
        } else {
            let mut slots = Vec::with_capacity(n);
            for item in items {
                let queued = match parse_write(item) {
                    Ok(w) => self.queue(st, vec![w], &mut out).await,
                    Err(e) => Err(e),
                };
                slots.push(match queued {
                    Ok(t) => Slot::Waiting(t),
                    Err(e) => Slot::Done(error_result(&e)),
                });
            }
            each_reply(req, slots)
        };
        self.inflight += n;
        self.pending
            .push_back(Box::pin(async move { (n, future.await) }));
        out
    }

    /// Queues a reply that needs no commit (a request refused as a whole) behind the earlier
    /// ones, so replies keep request order.
    fn answer(&mut self, reply: Value) {
        let reply = reply.to_string();
        self.pending.push_back(Box::pin(async move { (0, reply) }));
    }

    /// Queues one transaction; while the writer's queue is full, settles this connection's
    /// oldest request (its reply goes to `out`) or, with none, waits a millisecond.
    async fn queue(
        &mut self,
        st: &AppState,
        mut writes: Vec<Write>,
        out: &mut Vec<String>,
    ) -> Result<Ticket<CommitOutcome, DbError>, ApiError> {
        loop {
            match try_queue(st, writes) {
                Submitted::Queued(t) => return Ok(t),
                Submitted::Failed(e) => return Err(e),
                Submitted::Full(back) => {
                    writes = back;
                    match self.pending.is_empty() {
                        false => out.extend(self.next_reply().await),
                        true => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
            }
        }
    }
}

/// Checks the request's members: `writes` (1 to 500 entries) and `atomic` (default false).
fn parse_request(m: &mut Map<String, Value>) -> Result<(Vec<Value>, bool), ApiError> {
    if let Some(k) = m.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(ApiError::new(
            "bad_request",
            format!("unknown write member '{k}'"),
        ));
    }
    let atomic = match m.get("atomic") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ApiError::new(
                "bad_request",
                format!("'atomic' must be a boolean, got {other}"),
            ))
        }
    };
    let Some(Value::Array(items)) = m.remove("writes") else {
        return Err(ApiError::new(
            "bad_request",
            "a write request needs 'writes' (an array)",
        ));
    };
    if items.is_empty() {
        return Err(ApiError::new(
            "bad_request",
            "a write request needs at least one write",
        ));
    }
    if items.len() > COMMIT_WRITES_MAX {
        return Err(ApiError::new(
            "limit_exceeded",
            format!("a write request may hold at most {COMMIT_WRITES_MAX} writes"),
        ));
    }
    Ok((items, atomic))
}

/// The reply of an atomic request: every result with the one seq, or the request's error.
fn atomic_reply(req: String, ticket: Ticket<CommitOutcome, DbError>) -> BoxFuture<'static, String> {
    Box::pin(async move {
        match ticket.await {
            Ok(out) => {
                let mut results = String::new();
                for i in 0..out.results.len() {
                    if i > 0 {
                        results.push(',');
                    }
                    result_of(&out, i, &mut results);
                }
                written_reply(&req, out.seq, &results)
            }
            Err(e) => request_error(Some(&req), &ApiError::from(DbError::from(e))).to_string(),
        }
    })
}

/// The reply of a non-atomic request: one result per write, each its own transaction; `seq`
/// is the highest of them (0 when none committed).
fn each_reply(req: String, slots: Vec<Slot>) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let mut seq = 0;
        let mut results = String::with_capacity(slots.len() * 64);
        for (i, slot) in slots.into_iter().enumerate() {
            if i > 0 {
                results.push(',');
            }
            match slot {
                Slot::Done(v) => results.push_str(&v.to_string()),
                Slot::Waiting(t) => match t.await {
                    Ok(out) => {
                        seq = seq.max(out.seq);
                        result_of(&out, 0, &mut results);
                    }
                    Err(e) => results
                        .push_str(&error_result(&ApiError::from(DbError::from(e))).to_string()),
                },
            }
        }
        written_reply(&req, seq, &results)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_db::{Db, DbOptions, Durability};

    fn state(dir: &std::path::Path) -> AppState {
        let opts = DbOptions {
            durability: Durability::NoSync,
            ..Default::default()
        };
        let db = Db::open(dir, opts).expect("open");
        let auth = crate::auth::Auth::load(&db, Default::default()).expect("auth");
        AppState::new(db, auth)
    }

    /// The reply written as text is the JSON the `Value` form gave: field order, a missing op
    /// as null, ids and request ids escaped.
    #[test]
    fn replies_written_as_text_are_the_json_of_the_value_form() {
        use herald_db::{ChangeOp, CommitOutcome, WriteResult};
        let result = |id: &str, op| WriteResult {
            collection: "c".into(),
            id: id.into(),
            op,
            version: 7,
            record: None,
        };
        let out = CommitOutcome {
            seq: 42,
            results: vec![
                result("plain", Some(ChangeOp::Insert)),
                result("q\"uote\\é\u{1}", Some(ChangeOp::Update)),
                result("gone", None),
            ],
            changes: vec![],
            record_bytes: 0,
            tasks: vec![],
            replayed: false,
        };
        let mut results = String::new();
        for i in 0..out.results.len() {
            if i > 0 {
                results.push(',');
            }
            result_of(&out, i, &mut results);
        }
        let text = written_reply("r\"1", out.seq, &results);
        let want = json!({"type": "written", "req": "r\"1", "seq": 42, "results": [
            {"op": "insert", "id": "plain", "version": 7, "seq": 42},
            {"op": "update", "id": "q\"uote\\é\u{1}", "version": 7, "seq": 42},
            {"op": null, "id": "gone", "version": 7, "seq": 42},
        ]});
        assert_eq!(text, want.to_string());
    }

    fn request(req: &str, n: usize) -> Map<String, Value> {
        let writes: Vec<Value> = (0..n)
            .map(|i| json!({"op": "put", "collection": "c", "id": format!("{req}-{i}"), "doc": {"i": i}}))
            .collect();
        json!({"op": "write", "req": req, "writes": writes})
            .as_object()
            .cloned()
            .unwrap()
    }

    /// The in-flight count is what the connection loop's backpressure rests on: it rises with
    /// every queued write, reaches the bound, and falls only as replies are taken.
    #[tokio::test]
    async fn writes_in_flight_are_counted_until_their_reply() {
        let dir = tempfile::tempdir().unwrap();
        let st = state(dir.path());
        let mut w = WsWrites::default();
        let per = COMMIT_WRITES_MAX;
        let mut requests = 0;
        while w.has_room() {
            let early = w.submit(&st, request(&format!("r{requests}"), per)).await;
            assert!(early.is_empty(), "{early:?}");
            requests += 1;
            assert_eq!(w.inflight, requests * per);
        }
        assert_eq!(requests, WS_WRITES_INFLIGHT_MAX.div_ceil(per));
        // A malformed request queues no write; its error waits behind the earlier replies.
        assert!(w.submit(&st, request("bad", 0)).await.is_empty());
        assert_eq!(w.inflight, requests * per);
        for i in 0..requests {
            let r: Value = serde_json::from_str(&w.next_reply().await.unwrap()).unwrap();
            assert_eq!(r["req"], format!("r{i}"));
            assert_eq!(r["results"].as_array().unwrap().len(), per);
        }
        let e: Value = serde_json::from_str(&w.next_reply().await.unwrap()).unwrap();
        assert_eq!(
            (e["type"].as_str(), e["req"].as_str()),
            (Some("error"), Some("bad"))
        );
        assert!(w.is_empty() && w.has_room());
        assert_eq!(w.inflight, 0);
        assert_eq!(st.db.seq(), (requests * per) as u64);
    }
}
