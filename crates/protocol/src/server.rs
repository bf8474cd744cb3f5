//! Server-to-client messages (WebSocket text messages, and the `data:` of SSE events), tagged by
//! `type`: `initial`, `changes`, `reset`, `error`, `heartbeat`, and the replies `auth` and
//! `written`.
//!
//! The types borrow (`Cow`): the server serializes a message straight from the engine's shared
//! documents and events, so a view's change batch is encoded for each subscriber without a deep
//! copy of it. Decoding (clients, tests) gives owned values.

use crate::decode::Decode;
use crate::error::ErrorCode;
use crate::write::WriteOp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A message from the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ServerMessage<'a> {
    /// The visible window of subscription `sub` as of commit `seq`.
    Initial {
        sub: Cow<'a, str>,
        seq: u64,
        docs: Vec<Cow<'a, Value>>,
    },
    /// The edits commit `seq` made to the window, in order.
    Changes {
        sub: Cow<'a, str>,
        seq: u64,
        changes: Vec<ChangeEvent<'a>>,
    },
    /// Continuity is lost; a fresh `initial` follows.
    Reset {
        sub: Cow<'a, str>,
        reason: Cow<'a, str>,
    },
    /// A subscription failed (`sub`), a request failed as a whole (`req`), or a message was
    /// refused (neither).
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sub: Option<Cow<'a, str>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        req: Option<Cow<'a, str>>,
        code: ErrorCode,
        message: Cow<'a, str>,
        /// The write of an atomic request the error is about.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        write: Option<u64>,
        /// For `version_conflict`: the version expected and the one found.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actual: Option<u64>,
    },
    /// The connection is idle; everything up to `seq` was sent.
    Heartbeat { seq: u64 },
    /// The answer to an `auth` message (`uid` and `expiresAt` null for keys and open mode).
    #[serde(rename_all = "camelCase")]
    Auth {
        ok: bool,
        uid: Option<Cow<'a, str>>,
        expires_at: Option<u64>,
    },
    /// The reply to a write request: one result per write, in order; `seq` is the highest
    /// commit of the request (0 if none committed).
    Written {
        req: Cow<'a, str>,
        seq: u64,
        results: Vec<WrittenResult<'a>>,
    },
}

impl<'a> ServerMessage<'a> {
    /// An error about a subscription, a request or a message (`sub` and `req` both `None`).
    pub fn error(code: ErrorCode, message: impl Into<Cow<'a, str>>) -> ServerMessage<'a> {
        ServerMessage::Error {
            sub: None,
            req: None,
            code,
            message: message.into(),
            write: None,
            expected: None,
            actual: None,
        }
    }

    /// The seq a message carries (what SSE puts in `id:`), if any.
    pub fn seq(&self) -> Option<u64> {
        match self {
            ServerMessage::Initial { seq, .. }
            | ServerMessage::Changes { seq, .. }
            | ServerMessage::Heartbeat { seq }
            | ServerMessage::Written { seq, .. } => Some(*seq),
            _ => None,
        }
    }

    /// The message as JSON text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a server message serializes")
    }
}

impl Decode for ServerMessage<'static> {
    const WHAT: &'static str = "a server message";
}

/// The kind of an edit to a subscriber's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EventKind {
    Add,
    Change,
    ChangeIndex,
    Remove,
}

/// One edit: remove at `oldIndex` (-1 for `add`), then insert `doc` at `newIndex` (-1 for
/// `remove`, which carries no `doc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChangeEvent<'a> {
    pub kind: EventKind,
    pub id: Cow<'a, str>,
    pub old_index: i64,
    pub new_index: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<Cow<'a, Value>>,
}

impl Decode for ChangeEvent<'static> {
    const WHAT: &'static str = "a change event";
}

/// One write's result in a `written` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WrittenResult<'a> {
    Ok(WrittenOk<'a>),
    Failed(WrittenFailed<'a>),
}

/// A committed write: what it did, the document's id and version, and its own commit's seq.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrittenOk<'a> {
    pub op: Option<WriteOp>,
    pub id: Cow<'a, str>,
    pub version: u64,
    pub seq: u64,
}

/// A write that failed alone (non-atomic requests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrittenFailed<'a> {
    pub error: WriteError<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteError<'a> {
    pub code: ErrorCode,
    pub message: Cow<'a, str>,
}
