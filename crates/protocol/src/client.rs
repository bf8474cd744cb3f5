//! Client-to-server WebSocket messages (`/v1/ws`), tagged by `op`: `auth`, `subscribe`,
//! `unsubscribe`, `write`.
//!
//! Decoded in one pass from a flat member list that refuses unknown members, then checked per
//! op (a member of another op is refused by name). The writes of a `write` request stay JSON
//! text ([`WriteItem`]) until each is decoded, so one malformed write fails alone in a
//! non-atomic request.

use crate::decode::{members, Decode};
use crate::error::ErrorCode;
use crate::limits::{COMMIT_WRITES_MAX, REQ_ID_BYTES_MAX, SUB_ID_BYTES_MAX};
use crate::query::QueryParts;
use crate::write::WriteItem;
use crate::ProtocolError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A message from the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", try_from = "RawClientMessage")]
pub enum ClientMessage {
    /// Authenticates the connection, or renews its token.
    Auth {
        token: String,
    },
    Subscribe(Box<Subscribe>),
    Unsubscribe {
        sub: String,
    },
    Write(WriteRequest),
}

/// `{"op":"subscribe","sub","collection",...query,"resumeFrom"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscribe {
    pub sub: String,
    /// Empty for a collection-group subscription.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub collection: String,
    /// Instead of `collection`: every collection whose last path segment is this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Value>,
    /// A live aggregation: the stages of `POST /v1/aggregate`'s `pipeline` (not together with
    /// the query members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_before: Option<Value>,
    /// Resume after this seq instead of receiving an `initial`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<u64>,
    /// Answer only once the node has applied this seq (read-your-writes on any node of a
    /// cluster); past the server's bound, `unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seq: Option<u64>,
}

impl Subscribe {
    /// The query members, for herald-query.
    pub fn into_parts(self) -> (String, String, QueryParts, Option<u64>) {
        let parts = QueryParts {
            filter: self.filter,
            sort: self.sort,
            skip: self.skip,
            limit: self.limit,
            projection: self.projection,
            start_at: self.start_at,
            start_after: self.start_after,
            end_at: self.end_at,
            end_before: self.end_before,
        };
        (self.sub, self.collection, parts, self.resume_from)
    }
}

/// `{"op":"write","req","writes":[...],"atomic"?}`: 1 to [`COMMIT_WRITES_MAX`] writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub req: String,
    pub writes: Vec<WriteItem>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic: bool,
}

members! {
    op_member: "op" => String;
    token_member: "token" => Option<String>;
    sub_member: "sub" => Option<String>;
    collection_member: "collection" => Option<String>;
    collection_group_member: "collectionGroup" => Option<String>;
    resume_from_member: "resumeFrom" => Option<u64>;
    min_seq_member: "minSeq" => Option<u64>;
    req_member: "req" => Option<String>;
    writes_member: "writes" => Option<Vec<WriteItem>>;
    pipeline_member: "pipeline" => Option<Vec<Value>>;
    atomic_member: "atomic" => Option<bool>;
}

/// Every member any client message may have.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawClientMessage {
    #[serde(deserialize_with = "op_member")]
    op: String,
    #[serde(default, deserialize_with = "token_member")]
    token: Option<String>,
    #[serde(default, deserialize_with = "sub_member")]
    sub: Option<String>,
    #[serde(default, deserialize_with = "collection_member")]
    collection: Option<String>,
    #[serde(default, deserialize_with = "collection_group_member")]
    collection_group: Option<String>,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    sort: Option<Value>,
    #[serde(default)]
    skip: Option<Value>,
    #[serde(default)]
    limit: Option<Value>,
    #[serde(default)]
    projection: Option<Value>,
    #[serde(default, deserialize_with = "pipeline_member")]
    pipeline: Option<Vec<Value>>,
    #[serde(default)]
    start_at: Option<Value>,
    #[serde(default)]
    start_after: Option<Value>,
    #[serde(default)]
    end_at: Option<Value>,
    #[serde(default)]
    end_before: Option<Value>,
    #[serde(default, deserialize_with = "resume_from_member")]
    resume_from: Option<u64>,
    #[serde(default, deserialize_with = "min_seq_member")]
    min_seq: Option<u64>,
    #[serde(default, deserialize_with = "req_member")]
    req: Option<String>,
    #[serde(default, deserialize_with = "writes_member")]
    writes: Option<Vec<WriteItem>>,
    #[serde(default, deserialize_with = "atomic_member")]
    atomic: Option<bool>,
}

impl RawClientMessage {
    /// The members present, by wire name, other than `op`.
    fn present(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut add = |p: bool, name| {
            if p {
                out.push(name)
            }
        };
        add(self.token.is_some(), "token");
        add(self.sub.is_some(), "sub");
        add(self.collection.is_some(), "collection");
        add(self.collection_group.is_some(), "collectionGroup");
        add(self.filter.is_some(), "filter");
        add(self.sort.is_some(), "sort");
        add(self.skip.is_some(), "skip");
        add(self.limit.is_some(), "limit");
        add(self.projection.is_some(), "projection");
        add(self.pipeline.is_some(), "pipeline");
        add(self.start_at.is_some(), "startAt");
        add(self.start_after.is_some(), "startAfter");
        add(self.end_at.is_some(), "endAt");
        add(self.end_before.is_some(), "endBefore");
        add(self.resume_from.is_some(), "resumeFrom");
        add(self.min_seq.is_some(), "minSeq");
        add(self.req.is_some(), "req");
        add(self.writes.is_some(), "writes");
        add(self.atomic.is_some(), "atomic");
        out
    }
}

const SUBSCRIBE_MEMBERS: &[&str] = &[
    "sub",
    "collection",
    "collectionGroup",
    "filter",
    "sort",
    "skip",
    "limit",
    "projection",
    "pipeline",
    "startAt",
    "startAfter",
    "endAt",
    "endBefore",
    "resumeFrom",
    "minSeq",
];

impl TryFrom<RawClientMessage> for ClientMessage {
    type Error = String;

    fn try_from(r: RawClientMessage) -> Result<ClientMessage, String> {
        let op = r.op.clone();
        let allowed: &[&str] = match op.as_str() {
            "auth" => &["token"],
            "subscribe" => SUBSCRIBE_MEMBERS,
            "unsubscribe" => &["sub"],
            "write" => &["req", "writes", "atomic"],
            _ => {
                return Err(
                    "'op' must be \"auth\", \"subscribe\", \"unsubscribe\" or \"write\"".into(),
                )
            }
        };
        if let Some(m) = r.present().into_iter().find(|m| !allowed.contains(m)) {
            return Err(format!("unknown {op} member '{m}'"));
        }
        let needs = |m: &str| format!("{op} needs '{m}'");
        Ok(match op.as_str() {
            "auth" => ClientMessage::Auth {
                token: r
                    .token
                    .ok_or_else(|| "an auth message needs 'token' (a string)".to_string())?,
            },
            "subscribe" => ClientMessage::Subscribe(Box::new(Subscribe {
                sub: r.sub.ok_or_else(|| needs("sub"))?,
                collection: match (&r.collection, &r.collection_group) {
                    (Some(_), Some(_)) => {
                        return Err("give 'collection' or 'collectionGroup', not both".into())
                    }
                    (None, None) => {
                        return Err("a subscription needs 'collection' or 'collectionGroup'".into())
                    }
                    _ => r.collection.unwrap_or_default(),
                },
                collection_group: r.collection_group,
                filter: r.filter,
                sort: r.sort,
                skip: r.skip,
                limit: r.limit,
                projection: r.projection,
                pipeline: r.pipeline,
                start_at: r.start_at,
                start_after: r.start_after,
                end_at: r.end_at,
                end_before: r.end_before,
                resume_from: r.resume_from,
                min_seq: r.min_seq,
            })),
            "unsubscribe" => ClientMessage::Unsubscribe {
                sub: r.sub.ok_or_else(|| needs("sub"))?,
            },
            _ => ClientMessage::Write(WriteRequest {
                req: r.req.ok_or_else(|| needs("req"))?,
                writes: r
                    .writes
                    .ok_or_else(|| "a write request needs 'writes' (an array)".to_string())?,
                atomic: r.atomic.unwrap_or(false),
            }),
        })
    }
}

impl Decode for ClientMessage {
    const WHAT: &'static str = "a message";

    fn check(&self) -> Result<(), ProtocolError> {
        let bad = |m: String| Err(ProtocolError::new(ErrorCode::BadRequest, m));
        let sub_ok = |s: &str| !s.is_empty() && s.len() <= SUB_ID_BYTES_MAX;
        match self {
            ClientMessage::Subscribe(s) if !sub_ok(&s.sub) => bad(format!(
                "'sub' must be a string of 1 to {SUB_ID_BYTES_MAX} bytes"
            )),
            ClientMessage::Unsubscribe { sub } if !sub_ok(sub) => bad(format!(
                "'sub' must be a string of 1 to {SUB_ID_BYTES_MAX} bytes"
            )),
            ClientMessage::Write(w) if w.req.is_empty() || w.req.len() > REQ_ID_BYTES_MAX => bad(
                format!("'req' must be a string of 1 to {REQ_ID_BYTES_MAX} bytes"),
            ),
            ClientMessage::Write(w) if w.writes.is_empty() => {
                bad("a write request needs at least one write".into())
            }
            ClientMessage::Write(w) if w.writes.len() > COMMIT_WRITES_MAX => {
                Err(ProtocolError::new(
                    ErrorCode::LimitExceeded,
                    format!("a write request may hold at most {COMMIT_WRITES_MAX} writes"),
                ))
            }
            _ => Ok(()),
        }
    }
}
