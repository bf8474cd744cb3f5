//! The Herald server: the HTTP API (axum on tokio) over the embedded database, and graceful
//! shutdown. The only crate that knows tokio, HTTP and wire JSON.
//!
//! Shutdown: on SIGTERM or Ctrl-C the listener stops accepting, in-flight requests finish (their
//! writes are acknowledged only once durable), then the database drains its write queue and
//! closes the file.

pub mod api;
pub mod auth;
pub mod cluster;
#[cfg(feature = "cluster")]
mod cluster_node;
pub mod notify_latency;
pub mod state;
pub mod triggers;
pub mod ws_stats;

use cluster::ClusterView;
use herald_db::{Db, DbOptions};
use state::AppState;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Bounds of `herald serve --cache-mib`: below 16 MiB redb would mostly read pages from the
/// file; the upper bound only catches a unit mistake (1 TiB).
pub const CACHE_MIB_MIN: u64 = 16;
pub const CACHE_MIB_MAX: u64 = 1 << 20;

/// The live-query matching grid for `herald serve --grid-rows Q --grid-partitions W`: either
/// flag picks the threaded grid (the other defaults to 1); with neither, the default for this
/// many cores. `None`: matching on the live engine's thread (`Inline`).
///
/// The default is measured on 2 cores (docs/live-queries.md, "Matching grid";
/// crates/bench/results/2026-11-27-grid): one row per core and one partition. With 2 rows,
/// queries no index serves were matched on both cores (12,500 `$or` queries at 1,000 writes/s
/// with p99 14 ms, where the engine's own thread saturated below 10,000), for 3-7% of a core
/// more at light load; so the default matches on the engine's thread until there are
/// `THREADS_FROM_VIEWS_DEFAULT` views (`Adaptive`). On one core a cell thread adds hand-offs and
/// no core: inline.
pub fn grid_config(
    rows: Option<u32>,
    parts: Option<u32>,
    cores: usize,
) -> Result<Option<herald_db::live::grid::ThreadsConfig>, String> {
    use herald_db::live::grid::{ThreadsConfig, GRID_DIM_MAX, THREADS_FROM_VIEWS_DEFAULT};
    let config = match (rows, parts) {
        (None, None) if cores <= 1 => return Ok(None),
        (None, None) => ThreadsConfig {
            rows: cores.min(GRID_DIM_MAX as usize) as u32,
            threads_from_views: THREADS_FROM_VIEWS_DEFAULT,
            ..ThreadsConfig::default()
        },
        (r, p) => ThreadsConfig {
            rows: r.unwrap_or(1),
            parts: p.unwrap_or(1),
            ..ThreadsConfig::default()
        },
    };
    config.validate()?;
    Ok(Some(config))
}

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub db: DbOptions,
    pub triggers: triggers::TriggerOptions,
    /// Keys, tokens, rules; all `None`: no authentication (loopback only).
    pub auth: auth::AuthOptions,
    /// How live queries are matched: `None` on the live engine's thread (`Inline`), else by
    /// the in-process grid of this shape (docs/live-queries.md, "Matching grid").
    pub grid: Option<herald_db::live::grid::ThreadsConfig>,
    /// Join this cluster instead of running alone (docs/cluster.md).
    #[cfg(feature = "cluster")]
    pub cluster: Option<herald_cluster::ClusterOptions>,
    /// Built without cluster mode: always a single node.
    #[cfg(not(feature = "cluster"))]
    pub cluster: (),
}

/// Opens the database, binds, and serves until `shutdown` completes. Calls `on_bound` with the
/// bound address (useful with port 0).
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    serve_with(config, None, shutdown, on_bound).await
}

/// Makes this node's view of its cluster once the database is open (the replication needs the
/// database; the server needs the view before it serves).
pub type ClusterSetup = Box<dyn FnOnce(&Db) -> Result<Arc<dyn ClusterView>, String> + Send>;

/// [`serve`] as a node of a cluster when `cluster` is given: writes are forwarded to the
/// primary while this node is not it, and triggers run only on the primary (see
/// `api::forward`, `triggers::dispatch`). `None` is [`serve`].
pub async fn serve_with(
    config: ServeConfig,
    cluster: Option<ClusterSetup>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    if let Some(g) = &config.grid {
        g.validate()?;
    }
    let (db, node, grid) = open(&config).await?;
    let (db2, auth_opts) = (db.clone(), config.auth.clone());
    let auth = tokio::task::spawn_blocking(move || auth::Auth::load(&db2, auth_opts))
        .await
        .map_err(|e| e.to_string())??;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    on_bound(listener.local_addr().map_err(|e| e.to_string())?);
    let view = match cluster {
        Some(setup) => Some(setup(&db)?),
        #[cfg(feature = "cluster")]
        None => node
            .as_ref()
            .map(|n| cluster_node::view(n.clone(), db.clone(), grid.clone())),
        #[cfg(not(feature = "cluster"))]
        None => None,
    };
    // A cluster node with a grid matches through the Kafka grid (it is that grid's front end);
    // otherwise matching runs in this process (threads of the configured shape, or inline).
    #[cfg(feature = "cluster")]
    let mut state = match &grid {
        Some(g) => {
            let front = g
                .front_end()
                .map_err(|e| format!("cannot join the matching grid: {e}"))?;
            AppState::with_matching(db.clone(), auth, Box::new(front))
        }
        None => AppState::with_grid(db.clone(), auth, config.grid.clone()),
    };
    #[cfg(not(feature = "cluster"))]
    let mut state = AppState::with_grid(db.clone(), auth, config.grid.clone());
    #[cfg(not(feature = "cluster"))]
    let () = grid;
    if let Some(v) = &view {
        state = state.with_cluster(v.clone());
    }
    // Keys and rules another node changed reach this one through replication.
    let auth = state.auth.clone();
    db.on_replicated_system_change(move |db, name| {
        if let Err(e) = auth.reload_from_db(db, name) {
            eprintln!("herald: taking up the replicated record {name}: {e}");
        }
    });
    let live = state.live.clone();
    let mut trigger_service =
        triggers::TriggerService::start_in(db.clone(), config.triggers.clone(), view);
    let app = api::router(state);
    serve_http(listener, app, shutdown).await;
    // Leave the cluster first: another node takes over at once (the grid's cells too).
    #[cfg(feature = "cluster")]
    if let Some(g) = grid {
        g.stop();
    }
    #[cfg(feature = "cluster")]
    drop(node);
    #[cfg(not(feature = "cluster"))]
    let () = node;
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

#[cfg(feature = "cluster")]
type ClusterNode = Option<std::sync::Arc<herald_cluster::Node>>;
#[cfg(not(feature = "cluster"))]
type ClusterNode = ();
#[cfg(feature = "cluster")]
type ClusterGrid = Option<std::sync::Arc<herald_cluster::grid::Grid>>;
#[cfg(not(feature = "cluster"))]
type ClusterGrid = ();

/// Opens the database, alone or as a node of its cluster (with its share of the matching grid
/// when the cluster has one).
async fn open(config: &ServeConfig) -> Result<(Db, ClusterNode, ClusterGrid), String> {
    let data = config.data.clone();
    let opts = config.db.clone();
    #[cfg(feature = "cluster")]
    if let Some(cluster) = config.cluster.clone() {
        let key = config.auth.admin_key.clone();
        let runtime = tokio::runtime::Handle::current();
        let shape = cluster.grid;
        let (node, db, grid) = tokio::task::spawn_blocking(move || {
            use herald_cluster::{Node, StartError};
            let (node, db) = match Node::start(cluster.clone(), &data, opts.clone()) {
                Err(StartError::NeedsSnapshot(why)) => {
                    eprintln!("herald: {why}");
                    Node::bootstrap(&cluster, &data, |url, file| {
                        runtime.block_on(fetch_snapshot(url, key.as_deref(), file))
                    })?;
                    Node::start(cluster, &data, opts)
                }
                started => started,
            }?;
            let grid = match shape {
                Some(shape) => Some(herald_cluster::grid::Grid::start(&node, shape)?),
                None => None,
            };
            Ok::<_, StartError>((node, db, grid))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot join the cluster: {e}"))?;
        return Ok((
            db,
            Some(std::sync::Arc::new(node)),
            grid.map(std::sync::Arc::new),
        ));
    }
    let db = tokio::task::spawn_blocking(move || Db::open(&data, opts))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot open the database in {}: {e}", config.data.display()))?;
    #[cfg(feature = "cluster")]
    return Ok((db, None, None));
    #[cfg(not(feature = "cluster"))]
    Ok((db, (), ()))
}

/// Downloads another node's snapshot (`GET /v1/cluster/snapshot`) into `file`.
#[cfg(feature = "cluster")]
async fn fetch_snapshot(
    url: &str,
    key: Option<&str>,
    file: &std::path::Path,
) -> Result<(), String> {
    use futures_util::StreamExt;
    use std::io::Write;
    let url = format!("{}/v1/cluster/snapshot", url.trim_end_matches('/'));
    let mut req = http_client().get(&url);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        let status = resp.status();
        return Err(format!(
            "{url}: {status}: {}",
            resp.text().await.unwrap_or_default()
        ));
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?,
    );
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("{url}: {e}"))?;
        out.write_all(&chunk).map_err(|e| e.to_string())?;
    }
    out.into_inner()
        .map_err(|e| e.to_string())?
        .sync_all()
        .map_err(|e| e.to_string())
}

/// An HTTP/1 client must send a request's headers within this long, or its connection is
/// closed: slow-header ("slowloris") clients cannot hold connections open for free. hyper also
/// counts the idle time before a keep-alive connection's next request, so a connection idle
/// this long is closed too.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long Herald's own HTTP clients (`herald keys`, herald-bench) keep an idle pooled
/// connection: well under [`HEADER_READ_TIMEOUT`], so a client never reuses a connection the
/// server is closing at that moment (which fails the request).
pub const CLIENT_POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// A `reqwest` client builder for talking to a Herald server (see [`CLIENT_POOL_IDLE`]).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().pool_idle_timeout(CLIENT_POOL_IDLE)
}

/// A `reqwest` client for talking to a Herald server (see [`CLIENT_POOL_IDLE`]).
pub fn http_client() -> reqwest::Client {
    http_client_builder()
        .build()
        .expect("an HTTP client with default TLS-free settings builds")
}

/// Accepts connections and serves `app` on each (with upgrades, for WebSockets) until
/// `shutdown` completes; then stops accepting, lets every connection finish its in-flight
/// requests, and returns when all are done. `axum::serve` does this too, but sets no timer, so
/// it cannot bound the time a client takes to send its headers.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use tokio::sync::watch;

    // `signal`: tells connections to shut down gracefully; `close`: its receivers are the
    // running connections, so `closed()` resolves when the last one ends.
    let (signal_tx, signal_rx) = watch::channel(());
    let (close_tx, close_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Per-connection errors (reset before accept) and resource exhaustion: back
                // off briefly instead of spinning.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut signal_rx = signal_rx.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    _ = signal_rx.changed(), if !shutting_down => {
                        shutting_down = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(close_rx);
        });
    }
    drop(listener);
    let _ = signal_tx.send(());
    drop(close_rx);
    close_tx.closed().await;
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

#[cfg(test)]
mod tests {
    use super::grid_config;

    #[test]
    fn grid_defaults_follow_the_cores_and_flags_win() {
        assert_eq!(grid_config(None, None, 1), Ok(None));
        let g = grid_config(None, None, 2).unwrap().unwrap();
        assert_eq!((g.rows, g.parts, g.depth), (2, 1, 32));
        // The default switches to the cell threads only with enough views; flags mean always.
        assert_eq!(g.threads_from_views, 256);
        let g = grid_config(None, None, 8).unwrap().unwrap();
        assert_eq!((g.rows, g.parts), (8, 1));
        let g = grid_config(None, None, 200).unwrap().unwrap();
        assert_eq!(g.rows, 64);
        let g = grid_config(Some(1), None, 2).unwrap().unwrap();
        assert_eq!((g.rows, g.parts, g.threads_from_views), (1, 1, 0));
        let g = grid_config(None, Some(4), 1).unwrap().unwrap();
        assert_eq!((g.rows, g.parts), (1, 4));
        assert!(grid_config(Some(0), None, 2).unwrap_err().contains("rows"));
        assert!(grid_config(None, Some(65), 2)
            .unwrap_err()
            .contains("partitions"));
    }
}
