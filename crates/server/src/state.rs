//! State shared by every request handler.

use crate::auth::Auth;
use crate::notify_latency::NotifyLatency;
use herald_db::live::LiveEngine;
use herald_db::Db;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub live: LiveEngine,
    /// Source of connection ids for live-query sinks.
    pub next_conn: Arc<AtomicU64>,
    /// Credentials and rules.
    pub auth: Arc<Auth>,
    /// Commit -> `changes` message sent, over every live connection (`/metrics`).
    pub notify_latency: Arc<NotifyLatency>,
}

impl AppState {
    pub fn new(db: Db, auth: Auth) -> AppState {
        let live = LiveEngine::start(db.clone());
        AppState {
            db,
            live,
            next_conn: Arc::new(AtomicU64::new(1)),
            auth: Arc::new(auth),
            notify_latency: Arc::default(),
        }
    }

    /// Largest body for a single document: the document limit plus room for JSON escaping.
    pub fn doc_body_limit(&self) -> usize {
        self.db.limits().bytes_max * 2 + (64 << 10)
    }
}
