//! Database errors, each with a stable snake_case code that the server maps to HTTP.

use herald_query::{QueryError, UpdateError};
use herald_storage::StorageError;
use herald_value::DocumentError;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum DbError {
    #[error("bad path: {0}")]
    BadPath(String),
    #[error("document {collection}/{id} not found")]
    NotFound { collection: String, id: String },
    #[error("document {collection}/{id} already exists")]
    AlreadyExists { collection: String, id: String },
    #[error("write {index} ({collection}/{id}): expected version {expected}, found {actual}")]
    VersionConflict {
        index: usize,
        collection: String,
        id: String,
        expected: u64,
        /// 0 when the document does not exist.
        actual: u64,
    },
    #[error("the body's _id {body:?} contradicts the path's id {path:?}")]
    IdMismatch { path: String, body: String },
    #[error("bad document: {0}")]
    BadDocument(#[from] DocumentError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Update(#[from] UpdateError),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    #[error("query would return more than {0} documents; add a limit")]
    ResultTooLarge(usize),
    #[error("index error: {0}")]
    BadIndex(String),
    #[error("index {0} already exists")]
    IndexExists(String),
    #[error("index {0} not found")]
    IndexNotFound(String),
    #[error("bad trigger: {0}")]
    BadTrigger(String),
    #[error("trigger {0} not found")]
    TriggerNotFound(String),
    #[error("this write would fire a trigger chain deeper than {0} (a cycle of triggers?)")]
    TriggerDepth(u32),
    #[error("document {collection}/{id} changed while the task ran")]
    TaskConflict { collection: String, id: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// The commit log no longer reaches back to seq `after + 1` (see
    /// [`LogRead::Gone`](crate::LogRead::Gone)): an expected state for a reader that fell
    /// behind the log's retention, not corruption. `floor` is the oldest seq it holds.
    #[error("the commit log no longer reaches back to seq {}", .after + 1)]
    LogGone { after: u64, floor: Option<u64> },
    /// A caller's [`WriteGuard`](crate::WriteGuard) refused write `index`; nothing was applied.
    #[error("{message}")]
    Rejected {
        code: &'static str,
        message: String,
        index: usize,
    },
}

impl DbError {
    pub fn code(&self) -> &'static str {
        match self {
            DbError::BadPath(_) => "bad_path",
            DbError::NotFound { .. } => "not_found",
            DbError::AlreadyExists { .. } => "already_exists",
            DbError::VersionConflict { .. } => "version_conflict",
            DbError::IdMismatch { .. } => "id_mismatch",
            DbError::BadDocument(DocumentError::TooLarge { .. }) => "document_too_large",
            DbError::BadDocument(DocumentError::TooDeep(_)) => "document_too_deep",
            DbError::BadDocument(_) => "bad_document",
            DbError::Query(e) => e.code(),
            DbError::Update(e) => e.code(),
            DbError::BadRequest(_) => "bad_request",
            DbError::LimitExceeded(_) => "limit_exceeded",
            DbError::ResultTooLarge(_) => "result_too_large",
            DbError::BadIndex(_) => "bad_index",
            DbError::IndexExists(_) => "index_exists",
            DbError::IndexNotFound(_) => "index_not_found",
            DbError::BadTrigger(_) => "bad_trigger",
            DbError::TriggerNotFound(_) => "trigger_not_found",
            DbError::TriggerDepth(_) => "trigger_depth_exceeded",
            DbError::TaskConflict { .. } => "task_conflict",
            DbError::Storage(e) => e.code(),
            DbError::Corrupt(_) => "corrupt",
            DbError::LogGone { .. } => "log_gone",
            DbError::Rejected { code, .. } => code,
        }
    }
}

impl<E: Into<DbError>> From<herald_storage::WriteError<E>> for DbError {
    fn from(e: herald_storage::WriteError<E>) -> Self {
        match e {
            herald_storage::WriteError::Job(e) => e.into(),
            herald_storage::WriteError::Storage(e) => DbError::Storage(e),
        }
    }
}
