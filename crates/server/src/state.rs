//! State shared by every request handler.

use crate::auth::Auth;
use crate::cluster::ClusterView;
use crate::notify_latency::NotifyLatency;
use crate::ws_stats::WsStats;
use herald_db::live::grid::{Matching, ThreadsConfig};
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
    /// The cluster this node is part of; `None`: a single node (no forwarding, no roles).
    pub cluster: Option<Arc<dyn ClusterView>>,
    /// Forwards writes to the primary (`api::forward`); pooled connections, so a follower
    /// does not open one per write.
    pub forwarder: reqwest::Client,
    /// Open WebSocket connections and those dropped for stalling (`/metrics`).
    pub ws_stats: Arc<WsStats>,
}

impl AppState {
    pub fn new(db: Db, auth: Auth) -> AppState {
        AppState::with_grid(db, auth, None)
    }

    /// [`AppState::new`] with live queries matched by a threaded grid of this shape (`None`:
    /// on the engine's thread).
    pub fn with_grid(db: Db, auth: Auth, grid: Option<ThreadsConfig>) -> AppState {
        let live = match grid {
            Some(g) => LiveEngine::start_with(db.clone(), herald_db::live::grid::start(g)),
            None => LiveEngine::start(db.clone()),
        };
        AppState::with_live(db, auth, live)
    }

    /// A state whose live-query engine matches through `matching` (a matching grid).
    pub fn with_matching(db: Db, auth: Auth, matching: Box<dyn Matching>) -> AppState {
        let live = LiveEngine::start_with(db.clone(), matching);
        AppState::with_live(db, auth, live)
    }

    fn with_live(db: Db, auth: Auth, live: LiveEngine) -> AppState {
        AppState {
            db,
            live,
            next_conn: Arc::new(AtomicU64::new(1)),
            auth: Arc::new(auth),
            notify_latency: Arc::default(),
            cluster: None,
            forwarder: crate::cluster::forward_client(),
            ws_stats: Arc::default(),
        }
    }

    /// This state as a node of a cluster: writes go to the primary while `view` says this node
    /// is not it (see `api::forward`). Set before serving (`api::router` takes the state).
    pub fn with_cluster(mut self, view: Arc<dyn ClusterView>) -> AppState {
        self.cluster = Some(view);
        self
    }

    /// Whether this node commits writes itself: a single node, or the cluster's primary.
    pub fn is_primary(&self) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|c| c.role() == crate::cluster::Role::Primary)
    }

    /// Largest body for a single document: the document limit plus room for JSON escaping.
    pub fn doc_body_limit(&self) -> usize {
        self.db.limits().bytes_max * 2 + (64 << 10)
    }
}
