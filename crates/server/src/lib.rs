//! The Herald server: the HTTP API (axum on tokio) over the embedded database, and graceful
//! shutdown. The only crate that knows tokio, HTTP and wire JSON.
//!
//! Shutdown: on SIGTERM or Ctrl-C the listener stops accepting, in-flight requests finish (their
//! writes are acknowledged only once durable), then the database drains its write queue and
//! closes the file.

pub mod api;
pub mod auth;
pub mod bench;
pub mod bench_fanout;
pub mod bench_live;
pub mod state;
pub mod triggers;

use herald_db::{Db, DbOptions};
use state::AppState;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub db: DbOptions,
    pub triggers: triggers::TriggerOptions,
    /// Keys, tokens, rules; all `None`: no authentication (loopback only).
    pub auth: auth::AuthOptions,
}

/// Opens the database, binds, and serves until `shutdown` completes. Calls `on_bound` with the
/// bound address (useful with port 0).
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    let data = config.data.clone();
    let opts = config.db.clone();
    let db = tokio::task::spawn_blocking(move || Db::open(&data, opts))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot open the database in {}: {e}", config.data.display()))?;
    let (db2, auth_opts) = (db.clone(), config.auth.clone());
    let auth = tokio::task::spawn_blocking(move || auth::Auth::load(&db2, auth_opts))
        .await
        .map_err(|e| e.to_string())??;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    on_bound(listener.local_addr().map_err(|e| e.to_string())?);
    let state = AppState::new(db.clone(), auth);
    let live = state.live.clone();
    let mut trigger_service = triggers::TriggerService::start(db.clone(), config.triggers.clone());
    let app = api::router(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| format!("server error: {e}"))?;
    // The engine holds a database handle; stop it (and drop ours) so the close below is the
    // last one and makes everything durable, in nosync mode too.
    tokio::task::spawn_blocking(move || {
        trigger_service.stop();
        drop(trigger_service);
        live.stop();
        drop(live);
        db.close()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("closing the database: {e}"))
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
