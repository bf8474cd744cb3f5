//! `POST /v1/bulk`: newline-delimited JSON writes for high-rate ingest. Not atomic as a whole:
//! each line is its own transaction, so lines group-commit together and a bad line fails alone.
//!
//! The body is streamed, never buffered whole. At most [`BULK_INFLIGHT_MAX`] lines wait for
//! their commit at once; past that, or when the write queue is full, the handler stops reading
//! the body until commits complete, which slows the client (TCP backpressure) instead of growing
//! server memory.

use crate::api::error::{ApiError, ApiResult};
use crate::api::writes::decode_line;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use futures_util::StreamExt;
use herald_db::{CommitOutcome, DbError, Ticket, Write};
use herald_protocol::ErrorCode;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::Duration;

/// Lines submitted but not yet committed, per request.
pub const BULK_INFLIGHT_MAX: usize = 2048;
/// Longest accepted line.
pub const BULK_LINE_BYTES_MAX: usize = 2 << 20;
/// Per-line errors reported in the response; later ones are only counted.
pub const BULK_ERRORS_REPORTED_MAX: usize = 100;

struct Tally {
    lines: u64,
    applied: u64,
    failed: u64,
    seq: u64,
    errors: Vec<Value>,
}

impl Tally {
    fn fail(&mut self, line: u64, code: ErrorCode, message: &str) {
        self.failed += 1;
        // Lines fail out of order (parse errors at once, commit errors when they settle), so
        // insert by line number: the response holds the first errors, in line order.
        let at = self
            .errors
            .partition_point(|e| e["line"].as_u64().is_some_and(|l| l < line));
        if at < BULK_ERRORS_REPORTED_MAX {
            self.errors.insert(
                at,
                json!({"line": line, "code": code.as_str(), "message": message}),
            );
            self.errors.truncate(BULK_ERRORS_REPORTED_MAX);
        }
    }
}

type Pending = (u64, Ticket<CommitOutcome, DbError>);

async fn settle(t: &mut Tally, (line, ticket): Pending) {
    match ticket.await {
        Ok(out) => {
            t.applied += 1;
            t.seq = t.seq.max(out.seq);
        }
        Err(e) => {
            let e = ApiError::from(DbError::from(e));
            t.fail(line, e.code, &e.message);
        }
    }
}

async fn submit_line(
    st: &AppState,
    t: &mut Tally,
    inflight: &mut VecDeque<Pending>,
    line_no: u64,
    line: &[u8],
) {
    let parsed = decode_line(line);
    let mut writes = match parsed {
        Ok(w) => vec![w],
        Err(e) => return t.fail(line_no, e.code, &e.message),
    };
    loop {
        if inflight.len() >= BULK_INFLIGHT_MAX {
            let oldest = inflight.pop_front().expect("non-empty");
            settle(t, oldest).await;
        }
        match try_queue(st, writes) {
            Submitted::Queued(ticket) => {
                inflight.push_back((line_no, ticket));
                return;
            }
            Submitted::Full(back) => {
                writes = back;
                match inflight.pop_front() {
                    Some(oldest) => settle(t, oldest).await,
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
            Submitted::Failed(e) => return t.fail(line_no, e.code, &e.message),
        }
    }
}

/// What [`try_queue`] did with a transaction.
pub(crate) enum Submitted {
    Queued(Ticket<CommitOutcome, DbError>),
    /// The write queue is full: here are the writes back, to retry once something settles.
    Full(Vec<Write>),
    Failed(ApiError),
}

/// Queues one transaction without blocking. The writes are not cloned: a full queue hands
/// them back (the shared ingest step of `/v1/bulk` and WebSocket writes).
pub(crate) fn try_queue(st: &AppState, writes: Vec<Write>) -> Submitted {
    match st.db.submit(writes, herald_db::QueueFull::Refuse) {
        Ok(ticket) => Submitted::Queued(ticket),
        Err(herald_db::Refused {
            error: DbError::Storage(e),
            writes: Some(back),
        }) if e.code() == "overloaded" => Submitted::Full(back),
        Err(refused) => Submitted::Failed(ApiError::from(refused.error)),
    }
}

pub async fn bulk(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
    body: Body,
) -> ApiResult<Json<Value>> {
    let mut stream = body.into_data_stream();
    let mut t = Tally {
        lines: 0,
        applied: 0,
        failed: 0,
        seq: 0,
        errors: Vec::new(),
    };
    let mut inflight: VecDeque<Pending> = VecDeque::new();
    let mut buf: Vec<u8> = Vec::new();
    // True while skipping the rest of an over-long line.
    let mut skipping = false;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                ErrorCode::BadRequest,
                format!("reading the body failed: {e}"),
            )
        })?;
        let mut rest: &[u8] = &chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(nl);
            rest = &tail[1..];
            if skipping {
                skipping = false;
                continue;
            }
            if buf.len() + head.len() > BULK_LINE_BYTES_MAX {
                // An over-long line whose end came in the same chunk as its newline.
                buf.clear();
                t.lines += 1;
                t.fail(
                    t.lines,
                    ErrorCode::BodyTooLarge,
                    &format!("line is over {BULK_LINE_BYTES_MAX} bytes"),
                );
                continue;
            }
            buf.extend_from_slice(head);
            let line = std::mem::take(&mut buf);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            t.lines += 1;
            let n = t.lines;
            submit_line(&st, &mut t, &mut inflight, n, &line).await;
        }
        if !skipping {
            buf.extend_from_slice(rest);
            if buf.len() > BULK_LINE_BYTES_MAX {
                t.lines += 1;
                t.fail(
                    t.lines,
                    ErrorCode::BodyTooLarge,
                    &format!("line is over {BULK_LINE_BYTES_MAX} bytes"),
                );
                buf.clear();
                skipping = true;
            }
        }
    }
    if !skipping && !buf.iter().all(u8::is_ascii_whitespace) {
        t.lines += 1;
        let (n, line) = (t.lines, std::mem::take(&mut buf));
        submit_line(&st, &mut t, &mut inflight, n, &line).await;
    }
    while let Some(p) = inflight.pop_front() {
        settle(&mut t, p).await;
    }
    Ok(Json(json!({
        "lines": t.lines, "applied": t.applied, "failed": t.failed,
        "seq": t.seq, "errors": t.errors,
    })))
}
