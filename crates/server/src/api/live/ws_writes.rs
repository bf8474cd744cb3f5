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
use crate::api::writes::{decode_item, op_of};
use crate::state::AppState;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::StreamExt;
use herald_db::{CommitOutcome, DbError, Ticket, Write};
use herald_protocol::{
    ServerMessage, WriteError, WriteRequest, WrittenFailed, WrittenOk, WrittenResult,
};
use std::borrow::Cow;
use std::time::Duration;

/// Writes queued and not yet settled, per connection; past it the connection stops reading.
pub const WS_WRITES_INFLIGHT_MAX: usize = 2048;

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

/// `{"type":"error","req",code,message,...}` for a request that failed as a whole (without
/// `req` when the request had no valid one).
pub fn request_error(req: Option<&str>, e: &ApiError) -> String {
    ServerMessage::Error {
        sub: None,
        req: req.map(Cow::Borrowed),
        code: e.code,
        message: Cow::Borrowed(&e.message),
        write: e.write.map(|w| w as u64),
        expected: e.versions.map(|v| v.0),
        actual: e.versions.map(|v| v.1),
    }
    .to_text()
}

pub(super) fn error_result(e: &ApiError) -> WrittenResult<'static> {
    WrittenResult::Failed(WrittenFailed {
        error: WriteError {
            code: e.code,
            message: Cow::Owned(e.message.clone()),
        },
    })
}

/// The per-write results of a committed transaction, `{"op","id","version","seq"}`; the ids
/// move out of the outcome.
fn results_of(out: CommitOutcome) -> impl Iterator<Item = WrittenResult<'static>> {
    let seq = out.seq;
    out.results.into_iter().map(move |r| {
        WrittenResult::Ok(WrittenOk {
            op: r.op.map(op_of),
            id: Cow::Owned(r.id),
            version: r.version,
            seq,
        })
    })
}

/// `{"type":"written","req","seq","results":[...]}`.
pub(super) fn written_reply(req: String, seq: u64, results: Vec<WrittenResult<'static>>) -> String {
    ServerMessage::Written {
        req: Cow::Owned(req),
        seq,
        results,
    }
    .to_text()
}

/// One write's outcome inside a non-atomic request.
enum Slot {
    Done(WrittenResult<'static>),
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

    /// Queues a write request (its shape already checked by the protocol's type). Returns the
    /// replies of earlier requests settled while waiting for room in the writer's queue, to
    /// send now. Every reply, an error of this request included, goes out in request order.
    ///
    /// On a node of a cluster that is not the primary, the request goes to the primary as
    /// `/v1/commit` calls made with `credential` (the connection's API key, if any): see
    /// `ws_forward`.
    pub async fn submit(
        &mut self,
        st: &AppState,
        request: WriteRequest,
        credential: Option<&str>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let WriteRequest {
            req,
            writes: items,
            atomic,
        } = request;
        let n = items.len();
        let future = if let Some(cluster) = st.cluster.clone().filter(|_| !st.is_primary()) {
            let credential = credential.map(str::to_string);
            Box::pin(super::ws_forward::forwarded_reply(
                st.clone(),
                cluster,
                credential,
                req,
                items,
                atomic,
            ))
        } else if atomic {
            let mut writes = Vec::with_capacity(n);
            for (i, item) in items.iter().enumerate() {
                match decode_item(item) {
                    Ok(w) => writes.push(w),
                    Err(e) => {
                        self.answer(request_error(Some(&req), &e.at_write(i)));
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
            for item in &items {
                let queued = match decode_item(item) {
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
    pub fn answer(&mut self, reply: String) {
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

/// The reply of an atomic request: every result with the one seq, or the request's error.
fn atomic_reply(req: String, ticket: Ticket<CommitOutcome, DbError>) -> BoxFuture<'static, String> {
    Box::pin(async move {
        match ticket.await {
            Ok(out) => {
                let seq = out.seq;
                written_reply(req, seq, results_of(out).collect())
            }
            Err(e) => request_error(Some(&req), &ApiError::from(DbError::from(e))),
        }
    })
}

/// The reply of a non-atomic request: one result per write, each its own transaction; `seq`
/// is the highest of them (0 when none committed).
fn each_reply(req: String, slots: Vec<Slot>) -> BoxFuture<'static, String> {
    Box::pin(async move {
        let mut seq = 0;
        let mut results = Vec::with_capacity(slots.len());
        for slot in slots {
            match slot {
                Slot::Done(r) => results.push(r),
                Slot::Waiting(t) => match t.await {
                    Ok(out) => {
                        seq = seq.max(out.seq);
                        results.extend(results_of(out));
                    }
                    Err(e) => results.push(error_result(&ApiError::from(DbError::from(e)))),
                },
            }
        }
        written_reply(req, seq, results)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_db::{Db, DbOptions, Durability, COMMIT_WRITES_MAX};
    use herald_protocol::WriteItem;
    use serde_json::{json, Value};

    fn state(dir: &std::path::Path) -> AppState {
        let opts = DbOptions {
            durability: Durability::NoSync,
            ..Default::default()
        };
        let db = Db::open(dir, opts).expect("open");
        let auth = crate::auth::Auth::load(&db, Default::default()).expect("auth");
        AppState::new(db, auth)
    }

    /// The reply is the JSON the protocol defines: field order, a missing op as null, ids and
    /// request ids escaped.
    #[test]
    fn replies_are_the_protocols_json() {
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
        let text = written_reply("r\"1".into(), out.seq, results_of(out).collect());
        let want = json!({"type": "written", "req": "r\"1", "seq": 42, "results": [
            {"op": "insert", "id": "plain", "version": 7, "seq": 42},
            {"op": "update", "id": "q\"uote\\é\u{1}", "version": 7, "seq": 42},
            {"op": null, "id": "gone", "version": 7, "seq": 42},
        ]});
        assert_eq!(text, want.to_string());
    }

    /// A request of `n` puts (0: a request the protocol would refuse, queued all the same).
    fn request(req: &str, n: usize) -> WriteRequest {
        let writes = (0..n)
            .map(|i| {
                WriteItem::of(&herald_protocol::Write::Put {
                    collection: "c".into(),
                    id: format!("{req}-{i}"),
                    doc: json!({"i": i}),
                    if_version: None,
                })
            })
            .collect();
        WriteRequest {
            req: req.into(),
            writes,
            atomic: false,
        }
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
            let early = w
                .submit(&st, request(&format!("r{requests}"), per), None)
                .await;
            assert!(early.is_empty(), "{early:?}");
            requests += 1;
            assert_eq!(w.inflight, requests * per);
        }
        assert_eq!(requests, WS_WRITES_INFLIGHT_MAX.div_ceil(per));
        // A malformed request queues no write; its error waits behind the earlier replies.
        let e = ApiError::new(herald_protocol::ErrorCode::BadRequest, "no writes");
        w.answer(request_error(Some("bad"), &e));
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
