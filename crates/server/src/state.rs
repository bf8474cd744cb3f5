//! State shared by every request handler.

use herald_db::Db;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
}

impl AppState {
    /// Largest body for a single document: the document limit plus room for JSON escaping.
    pub fn doc_body_limit(&self) -> usize {
        self.db.limits().bytes_max * 2 + (64 << 10)
    }
}
