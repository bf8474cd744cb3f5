//! Counts of WebSocket connections for `/metrics`: how many are open, and how many the server
//! dropped because their client stopped reading (a write stalled past `WS_SEND_STALL`). A
//! client that reads nothing cannot be told why; these say it to the operator.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct WsStats {
    open: AtomicU64,
    stalled: AtomicU64,
}

/// Counts one open connection until dropped.
pub struct OpenGuard<'a>(&'a WsStats);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WsStats {
    pub fn opened(&self) -> OpenGuard<'_> {
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self)
    }

    pub fn stalled(&self) {
        self.stalled.fetch_add(1, Ordering::Relaxed);
    }

    /// The two families in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP herald_ws_connections Open WebSocket connections.\n\
             # TYPE herald_ws_connections gauge\n\
             herald_ws_connections {}\n\
             # HELP herald_ws_stalled_total WebSocket connections dropped because a write to the \
             client stalled (it stopped reading).\n\
             # TYPE herald_ws_stalled_total counter\n\
             herald_ws_stalled_total {}",
            self.open.load(Ordering::Relaxed),
            self.stalled.load(Ordering::Relaxed),
        );
    }
}
