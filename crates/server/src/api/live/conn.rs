//! One live connection's outbound queue (WebSocket or SSE), and the encoding of what goes
//! through it into the protocol's server messages.
//!
//! The engine's messages carry shared documents and change batches; [`encode`] borrows them
//! into a `ServerMessage` and serializes that, so a view's batch is never deep-copied per
//! subscriber.

use crate::api::live::CONN_QUEUE_MAX;
use crate::notify_latency::NotifyLatency;
use crate::state::AppState;
use herald_db::live::{Message, Sink};
use herald_protocol::{ChangeEvent, ErrorCode, EventKind, ServerMessage};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Notify};

/// What waits in a connection's queue: the engine's messages, and the server's own that must
/// keep their place among them.
pub enum Out {
    Live(Message),
    Server(ServerMessage<'static>),
}

/// A connection's outbound queue, as the engine sees it.
pub struct ConnSink {
    conn: u64,
    tx: mpsc::Sender<Out>,
    overflow: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl ConnSink {
    fn push(&self, out: Out) -> bool {
        match self.tx.try_send(out) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow.store(true, Ordering::Release);
                self.wake.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Queues a message of the server's own, in order with the engine's.
    pub fn send_server(&self, msg: ServerMessage<'static>) -> bool {
        self.push(Out::Server(msg))
    }
}

impl Sink for ConnSink {
    fn send(&self, msg: Message) -> bool {
        self.push(Out::Live(msg))
    }

    fn conn(&self) -> u64 {
        self.conn
    }
}

pub struct Conn {
    pub id: u64,
    pub sink: Arc<ConnSink>,
    pub rx: mpsc::Receiver<Out>,
    pub overflow: Arc<AtomicBool>,
    pub wake: Arc<Notify>,
    /// The highest seq sent, so a heartbeat never claims less than what the client has.
    last_seq: u64,
    /// Where `changes` messages are timed from their commit (`/metrics`).
    db: herald_db::Db,
    latency: Arc<NotifyLatency>,
}

impl Conn {
    pub fn new(st: &AppState) -> Conn {
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
    pub fn note(&mut self, msg: &ServerMessage<'_>) {
        if let Some(s) = msg.seq() {
            self.last_seq = self.last_seq.max(s);
            if matches!(msg, ServerMessage::Changes { .. }) {
                if let Some(d) = self.db.feed().clock.since(s) {
                    self.latency.observe(d);
                }
            }
        }
    }

    /// The heartbeat for now: the engine's seq (read before draining, so every message up to it
    /// is already queued) or the last seq sent, whichever is higher.
    pub fn heartbeat(&self, engine_seq: u64) -> ServerMessage<'static> {
        ServerMessage::Heartbeat {
            seq: engine_seq.max(self.last_seq),
        }
    }
}

/// The protocol's message for a queued one, borrowing its documents and events.
pub fn encode(out: &Out) -> ServerMessage<'_> {
    let m = match out {
        Out::Server(m) => return m.clone(),
        Out::Live(m) => m,
    };
    match m {
        Message::Initial { sub, seq, docs } => ServerMessage::Initial {
            sub: Cow::Borrowed(sub),
            seq: *seq,
            docs: docs.iter().map(|d| Cow::Borrowed(&**d)).collect(),
        },
        Message::Changes { sub, seq, events } => ServerMessage::Changes {
            sub: Cow::Borrowed(sub),
            seq: *seq,
            changes: events
                .iter()
                .map(|e| ChangeEvent {
                    kind: kind(e.kind),
                    id: Cow::Borrowed(&e.id),
                    old_index: e.old_index,
                    new_index: e.new_index,
                    doc: e.doc.as_deref().map(Cow::Borrowed),
                })
                .collect(),
        },
        Message::Reset { sub, reason } => ServerMessage::Reset {
            sub: Cow::Borrowed(sub),
            reason: Cow::Owned(reason.to_string()),
        },
        Message::Error { sub, code, message } => ServerMessage::Error {
            sub: Some(Cow::Borrowed(sub)),
            req: None,
            code: ErrorCode::from_code(code).unwrap_or(ErrorCode::Internal),
            message: Cow::Borrowed(message),
            write: None,
            expected: None,
            actual: None,
        },
    }
}

fn kind(k: herald_db::live::EventKind) -> EventKind {
    use herald_db::live::EventKind as K;
    match k {
        K::Add => EventKind::Add,
        K::Change => EventKind::Change,
        K::ChangeIndex => EventKind::ChangeIndex,
        K::Remove => EventKind::Remove,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_db::live::{ChangeEvent as DbEvent, EventKind as DbKind, ResetReason};
    use serde_json::{json, Value};

    fn changes() -> Out {
        let doc = Arc::new(json!({"_id": "a", "n": 1}));
        let events: herald_db::live::Events = vec![
            DbEvent {
                kind: DbKind::Remove,
                id: "b".into(),
                doc: None,
                old_index: 1,
                new_index: -1,
            },
            DbEvent {
                kind: DbKind::ChangeIndex,
                id: "a".into(),
                doc: Some(doc),
                old_index: 0,
                new_index: 1,
            },
        ]
        .into();
        Out::Live(Message::Changes {
            sub: "s1".into(),
            seq: 9,
            events,
        })
    }

    /// The wire form is the one `docs/protocol.md` gives (and the engine's JSON gave).
    #[test]
    fn engine_messages_encode_to_the_protocols_json() {
        let text = encode(&changes()).to_text();
        let want = json!({"type": "changes", "sub": "s1", "seq": 9, "changes": [
            {"kind": "remove", "id": "b", "oldIndex": 1, "newIndex": -1},
            {"kind": "changeIndex", "id": "a", "oldIndex": 0, "newIndex": 1, "doc": {"_id": "a", "n": 1}},
        ]});
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), want);
        let reset = Out::Live(Message::Reset {
            sub: "s1".into(),
            reason: ResetReason::FellBehind,
        });
        assert_eq!(
            serde_json::from_str::<Value>(&encode(&reset).to_text()).unwrap(),
            json!({"type": "reset", "sub": "s1", "reason": "the live-query engine fell behind the commit log"})
        );
    }

    /// Every subscriber's message borrows the view's shared documents: no copy per subscriber.
    #[test]
    fn encoding_borrows_the_shared_documents() {
        let out = changes();
        let Out::Live(Message::Changes { events, .. }) = &out else {
            unreachable!()
        };
        let shared: &Value = events[1].doc.as_deref().unwrap();
        let ServerMessage::Changes { changes, .. } = encode(&out) else {
            panic!("not changes")
        };
        match &changes[1].doc {
            Some(Cow::Borrowed(d)) => assert!(std::ptr::eq(*d, shared)),
            other => panic!("copied: {other:?}"),
        }
    }
}
