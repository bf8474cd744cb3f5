//! The list of message kinds, one fixture file each in `testdata/protocol/`
//! (`<kind>.json`). The `kind_of_*` functions match exhaustively over the message enums, so a
//! new variant does not compile until it has a kind here, and the fixture test then fails until
//! the kind has a fixture file.

use crate::{AggregateBody, AggregateExplain, AggregateReply};
use crate::{
    ChangeEvent, ClientMessage, CommitBody, CommitReply, DeadLetters, DeadSelection, Decode,
    ErrorBody, ExemptionsBody, Explain, IndexBody, IndexInfo, IndexList, KeyBody, ProtocolError,
    QueryBody, QueryReply, ServerMessage, SubscribeParams, TriggerBody, TriggerInfo, TriggerList,
    TriggerStatus, Write,
};
use crate::{
    ClusterStatus, CollectionList, DeadPurged, DeadRetried, DocDeleted, DocUpdated, DocWritten,
    ExemptionsSet, Health, IndexDropped, KeyCreated, KeyList, KeyRevoked, RulesSet, StateDigest,
    TriggerDeleted,
};
use serde::Serialize;
use serde_json::Value;

macro_rules! kinds {
    ($($variant:ident = $name:literal,)*) => {
        /// A message kind: one variant of a message enum, or one body type.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind { $($variant,)* }

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)*];

            /// The fixture's name: `testdata/protocol/<name>.json`.
            pub fn name(self) -> &'static str {
                match self { $(Kind::$variant => $name,)* }
            }

            pub fn from_name(name: &str) -> Option<Kind> {
                match name { $($name => Some(Kind::$variant),)* _ => None }
            }
        }
    };
}

kinds! {
    ClientAuth = "client.auth",
    ClientSubscribe = "client.subscribe",
    ClientUnsubscribe = "client.unsubscribe",
    ClientWrite = "client.write",
    ServerInitial = "server.initial",
    ServerChanges = "server.changes",
    ServerReset = "server.reset",
    ServerError = "server.error",
    ServerHeartbeat = "server.heartbeat",
    ServerAuth = "server.auth",
    ServerWritten = "server.written",
    Change = "change",
    Write = "write",
    HttpQuery = "http.query",
    HttpQueryReply = "http.queryReply",
    HttpAggregate = "http.aggregate",
    HttpAggregateReply = "http.aggregateReply",
    AggregateExplain = "aggregateExplain",
    HttpCommit = "http.commit",
    HttpCommitReply = "http.commitReply",
    HttpBulkLine = "http.bulkLine",
    HttpIndex = "http.index",
    HttpIndexInfo = "http.indexInfo",
    HttpIndexList = "http.indexList",
    HttpExemptions = "http.exemptions",
    HttpTrigger = "http.trigger",
    HttpTriggerInfo = "http.triggerInfo",
    HttpTriggerStatus = "http.triggerStatus",
    HttpTriggerList = "http.triggerList",
    HttpDeadLetters = "http.deadLetters",
    HttpDeadSelection = "http.deadSelection",
    HttpKey = "http.key",
    HttpSubscribe = "http.subscribe",
    HttpHealth = "http.health",
    HttpClusterStatus = "http.clusterStatus",
    HttpStateDigest = "http.stateDigest",
    HttpCollectionList = "http.collectionList",
    HttpDocWritten = "http.docWritten",
    HttpDocUpdated = "http.docUpdated",
    HttpDocDeleted = "http.docDeleted",
    HttpKeyCreated = "http.keyCreated",
    HttpKeyList = "http.keyList",
    HttpKeyRevoked = "http.keyRevoked",
    HttpRulesSet = "http.rulesSet",
    HttpIndexDropped = "http.indexDropped",
    HttpExemptionsSet = "http.exemptionsSet",
    HttpTriggerDeleted = "http.triggerDeleted",
    HttpDeadRetried = "http.deadRetried",
    HttpDeadPurged = "http.deadPurged",
    Explain = "explain",
    Error = "error",
}

pub fn kind_of_client(m: &ClientMessage) -> Kind {
    match m {
        ClientMessage::Auth { .. } => Kind::ClientAuth,
        ClientMessage::Subscribe(_) => Kind::ClientSubscribe,
        ClientMessage::Unsubscribe { .. } => Kind::ClientUnsubscribe,
        ClientMessage::Write(_) => Kind::ClientWrite,
    }
}

pub fn kind_of_server(m: &ServerMessage<'_>) -> Kind {
    match m {
        ServerMessage::Initial { .. } => Kind::ServerInitial,
        ServerMessage::Changes { .. } => Kind::ServerChanges,
        ServerMessage::Reset { .. } => Kind::ServerReset,
        ServerMessage::Error { .. } => Kind::ServerError,
        ServerMessage::Heartbeat { .. } => Kind::ServerHeartbeat,
        ServerMessage::Auth { .. } => Kind::ServerAuth,
        ServerMessage::Written { .. } => Kind::ServerWritten,
    }
}

/// Decodes `v` as a message of `kind` and encodes it again; an error with its code when the
/// message is refused, or when it decodes as another kind of the same enum.
pub fn round_trip(kind: Kind, v: Value) -> Result<Value, ProtocolError> {
    fn again<T: Decode + Serialize>(v: Value) -> Result<(T, Value), ProtocolError> {
        let t = T::decode_value(v)?;
        let out = serde_json::to_value(&t).expect("a message serializes");
        Ok((t, out))
    }
    fn plain<T: Decode + Serialize>(v: Value) -> Result<Value, ProtocolError> {
        again::<T>(v).map(|(_, out)| out)
    }
    let other = |got: Kind| {
        Err(ProtocolError::new(
            crate::ErrorCode::BadRequest,
            format!("decodes as {}, not {}", got.name(), kind.name()),
        ))
    };
    match kind {
        Kind::ClientAuth | Kind::ClientSubscribe | Kind::ClientUnsubscribe | Kind::ClientWrite => {
            let (m, out) = again::<ClientMessage>(v)?;
            if let ClientMessage::Write(w) = &m {
                for item in &w.writes {
                    item.decode()?;
                }
            }
            match kind_of_client(&m) {
                k if k == kind => Ok(out),
                k => other(k),
            }
        }
        Kind::ServerInitial
        | Kind::ServerChanges
        | Kind::ServerReset
        | Kind::ServerError
        | Kind::ServerHeartbeat
        | Kind::ServerAuth
        | Kind::ServerWritten => {
            let (m, out) = again::<ServerMessage<'static>>(v)?;
            match kind_of_server(&m) {
                k if k == kind => Ok(out),
                k => other(k),
            }
        }
        Kind::Change => plain::<ChangeEvent<'static>>(v),
        Kind::Write | Kind::HttpBulkLine => plain::<Write>(v),
        Kind::HttpQuery => plain::<QueryBody>(v),
        Kind::HttpQueryReply => plain::<QueryReply>(v),
        Kind::HttpAggregate => plain::<AggregateBody>(v),
        Kind::HttpAggregateReply => plain::<AggregateReply>(v),
        Kind::AggregateExplain => plain::<AggregateExplain>(v),
        Kind::HttpCommit => {
            let (c, out) = again::<CommitBody>(v)?;
            for (i, item) in c.writes.iter().enumerate() {
                item.decode().map_err(|e| ProtocolError {
                    message: format!("write {i}: {}", e.message),
                    ..e
                })?;
            }
            Ok(out)
        }
        Kind::HttpCommitReply => plain::<CommitReply>(v),
        Kind::HttpIndex => plain::<IndexBody>(v),
        Kind::HttpIndexInfo => plain::<IndexInfo>(v),
        Kind::HttpIndexList => plain::<IndexList>(v),
        Kind::HttpExemptions => plain::<ExemptionsBody>(v),
        Kind::HttpTrigger => plain::<TriggerBody>(v),
        Kind::HttpTriggerInfo => plain::<TriggerInfo>(v),
        Kind::HttpTriggerStatus => plain::<TriggerStatus>(v),
        Kind::HttpTriggerList => plain::<TriggerList>(v),
        Kind::HttpDeadLetters => plain::<DeadLetters>(v),
        Kind::HttpDeadSelection => plain::<DeadSelection>(v),
        Kind::HttpKey => plain::<KeyBody>(v),
        Kind::HttpSubscribe => plain::<SubscribeParams>(v),
        Kind::HttpHealth => plain::<Health>(v),
        Kind::HttpClusterStatus => plain::<ClusterStatus>(v),
        Kind::HttpStateDigest => plain::<StateDigest>(v),
        Kind::HttpCollectionList => plain::<CollectionList>(v),
        Kind::HttpDocWritten => plain::<DocWritten>(v),
        Kind::HttpDocUpdated => plain::<DocUpdated>(v),
        Kind::HttpDocDeleted => plain::<DocDeleted>(v),
        Kind::HttpKeyCreated => plain::<KeyCreated>(v),
        Kind::HttpKeyList => plain::<KeyList>(v),
        Kind::HttpKeyRevoked => plain::<KeyRevoked>(v),
        Kind::HttpRulesSet => plain::<RulesSet>(v),
        Kind::HttpIndexDropped => plain::<IndexDropped>(v),
        Kind::HttpExemptionsSet => plain::<ExemptionsSet>(v),
        Kind::HttpTriggerDeleted => plain::<TriggerDeleted>(v),
        Kind::HttpDeadRetried => plain::<DeadRetried>(v),
        Kind::HttpDeadPurged => plain::<DeadPurged>(v),
        Kind::Explain => plain::<Explain>(v),
        Kind::Error => plain::<ErrorBody>(v),
    }
}
