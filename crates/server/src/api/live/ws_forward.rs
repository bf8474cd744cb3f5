//! WebSocket write requests on a node that is not the primary: sent to the primary as the
//! equivalent `POST /v1/commit` calls with the connection's credentials, and answered with the
//! same `written` / `error` messages a primary would send. An atomic request is one commit; a
//! non-atomic one is one commit per write (each its own transaction, as on the primary), at
//! most [`WS_FORWARD_CONCURRENCY`] at once, results in request order.
//!
//! Writes that do not decode are answered here exactly as the primary path answers them,
//! without a round trip. Before the reply goes out the node waits (bounded) until it has
//! applied the reply's seq, as for forwarded HTTP writes (`api::forward`).

use crate::api::error::ApiError;
use crate::api::forward::{primary_of, unavailable, FORWARDED_HEADER};
use crate::api::writes::decode_item;
use crate::cluster::{wait_for, ClusterView, MIN_SEQ_WAIT};
use crate::state::AppState;
use futures_util::StreamExt;
use herald_protocol::{
    CommitBody, CommitReply, ErrorBody, ErrorCode, WriteItem, WrittenOk, WrittenResult,
};
use std::borrow::Cow;
use std::sync::Arc;

/// Commits of one non-atomic request in flight to the primary at once.
pub const WS_FORWARD_CONCURRENCY: usize = 16;

/// The reply (JSON text) of a write request forwarded to the primary.
pub async fn forwarded_reply(
    st: AppState,
    cluster: Arc<dyn ClusterView>,
    credential: Option<String>,
    req: String,
    items: Vec<WriteItem>,
    atomic: bool,
) -> String {
    let base = match primary_of(&cluster, &Default::default()) {
        Ok(b) => b,
        Err(e) => return super::ws_writes::request_error(Some(&req), &e),
    };
    let call = Call {
        st: &st,
        base: &base,
        node: cluster.node_id(),
        credential: credential.as_deref(),
    };
    if atomic {
        for (i, item) in items.iter().enumerate() {
            if let Err(e) = decode_item(item) {
                return super::ws_writes::request_error(Some(&req), &e.at_write(i));
            }
        }
        return match call.commit(items).await {
            Ok(reply) => {
                call.applied(reply.seq).await;
                let seq = reply.seq;
                super::ws_writes::written_reply(req, seq, results_of(reply).collect())
            }
            Err(e) => super::ws_writes::request_error(Some(&req), &e),
        };
    }
    let outcomes: Vec<Result<CommitReply, ApiError>> = futures_util::stream::iter(items)
        .map(|item| {
            let call = &call;
            async move {
                decode_item(&item)?;
                call.commit(vec![item]).await
            }
        })
        .buffered(WS_FORWARD_CONCURRENCY)
        .collect()
        .await;
    let mut seq = 0;
    let mut results = Vec::with_capacity(outcomes.len());
    for out in outcomes {
        match out {
            Ok(reply) => {
                seq = seq.max(reply.seq);
                results.extend(results_of(reply));
            }
            Err(e) => results.push(super::ws_writes::error_result(&e)),
        }
    }
    call.applied(seq).await;
    super::ws_writes::written_reply(req, seq, results)
}

/// One request's calls to the primary.
struct Call<'a> {
    st: &'a AppState,
    base: &'a str,
    node: String,
    credential: Option<&'a str>,
}

impl Call<'_> {
    /// `POST /v1/commit` on the primary: its reply, or its error as this node's.
    async fn commit(&self, writes: Vec<WriteItem>) -> Result<CommitReply, ApiError> {
        use herald_protocol::Decode;
        let body = CommitBody {
            writes,
            mutation_id: None,
        };
        let mut rb = self
            .st
            .forwarder
            .post(format!("{}/v1/commit", self.base.trim_end_matches('/')))
            .header(FORWARDED_HEADER, &self.node)
            .json(&body);
        if let Some(c) = self.credential {
            rb = rb.bearer_auth(c);
        }
        let lost = |e: reqwest::Error| {
            unavailable(format!(
                "the primary ({}) did not answer: {e}; retry (the write may have been applied)",
                self.base
            ))
        };
        let answer = rb.send().await.map_err(lost)?;
        let status = answer.status();
        let ok = status.is_success();
        let bytes = answer.bytes().await.map_err(lost)?;
        if ok {
            return CommitReply::decode(&bytes).map_err(|e| {
                ApiError::new(
                    ErrorCode::Internal,
                    format!("the primary's commit reply: {}", e.message),
                )
            });
        }
        let body = ErrorBody::decode(&bytes).map_err(|e| match status.is_server_error() {
            // Not Herald's answer (a proxy in between, a node going down): try again later.
            true => unavailable(format!(
                "the primary ({}) answered HTTP {status} without a Herald error; retry",
                self.base
            )),
            false => ApiError::new(
                ErrorCode::Internal,
                format!("the primary's error: {}", e.message),
            ),
        })?;
        let d = body.error;
        let mut e = ApiError::new(d.code, d.message);
        e.write = d.write.map(|w| w as usize);
        e.versions = d.expected.zip(d.actual);
        Err(e)
    }

    /// Waits (bounded) until this node has applied `seq`, so the client's next read here sees
    /// the write; past the bound the reply goes out anyway (the write succeeded).
    async fn applied(&self, seq: u64) {
        let db = self.st.db.clone();
        wait_for(move || db.seq(), seq, MIN_SEQ_WAIT).await;
    }
}

/// The per-write results of a commit reply, `{"op","id","version","seq"}`.
fn results_of(reply: CommitReply) -> impl Iterator<Item = WrittenResult<'static>> {
    let seq = reply.seq;
    reply.results.into_iter().map(move |r| {
        WrittenResult::Ok(WrittenOk {
            op: r.op,
            id: Cow::Owned(r.id),
            version: r.version,
            seq,
        })
    })
}
