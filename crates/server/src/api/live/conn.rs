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
