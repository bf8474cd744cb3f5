//! Typed errors of the query language, each with a stable snake_case code.
//!
//! The codes are part of the wire contract (the server maps them through its error table and the
//! conformance vectors name them), so a code never changes meaning once released.

use thiserror::Error;

/// Why a filter, sort, projection or query envelope was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QueryError {
    #[error("bad filter: {0}")]
    BadFilter(String),
    #[error("unknown operator '{op}' at '{path}'")]
    UnknownOperator { path: String, op: String },
    #[error("bad operand for '{op}' at '{path}': {reason}")]
    BadOperand {
        path: String,
        op: String,
        reason: String,
    },
    #[error("bad regular expression at '{path}': {reason}")]
    BadRegex { path: String, reason: String },
    #[error("unsupported regular expression at '{path}': {reason}")]
    UnsupportedRegex { path: String, reason: String },
    #[error("bad sort: {0}")]
    BadSort(String),
    #[error("bad projection: {0}")]
    BadProjection(String),
    #[error("bad query: {0}")]
    BadQuery(String),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    #[error("bad pipeline: {0}")]
    BadPipeline(String),
    /// A valid pipeline that cannot be maintained live: which stage, and why.
    #[error("{stage} is not maintained live: {reason}")]
    UnsupportedLive { stage: String, reason: String },
}

impl QueryError {
    /// The stable error code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::BadFilter(_) => "bad_filter",
            QueryError::UnknownOperator { .. } => "unknown_operator",
            QueryError::BadOperand { .. } => "bad_operand",
            QueryError::BadRegex { .. } => "bad_regex",
            QueryError::UnsupportedRegex { .. } => "unsupported_regex",
            QueryError::BadSort(_) => "bad_sort",
            QueryError::BadProjection(_) => "bad_projection",
            QueryError::BadQuery(_) => "bad_query",
            QueryError::LimitExceeded(_) => "limit_exceeded",
            QueryError::BadPipeline(_) => "bad_pipeline",
            QueryError::UnsupportedLive { .. } => "unsupported_live",
        }
    }

    pub(crate) fn operand(path: &str, op: &str, reason: impl Into<String>) -> QueryError {
        QueryError::BadOperand {
            path: path.to_string(),
            op: op.to_string(),
            reason: reason.into(),
        }
    }
}

/// Why an update was rejected. The document is never changed when an update fails.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UpdateError {
    #[error("bad update: {0}")]
    BadUpdate(String),
    #[error("unknown update operator '{0}'")]
    UnknownOperator(String),
    #[error("updating the path '{0}' would conflict with '{1}'")]
    ConflictingPaths(String, String),
    #[error("{0}")]
    TypeMismatch(String),
    #[error("{0}")]
    PathNotViable(String),
    #[error("the update would change the immutable field '_id'")]
    ImmutableField,
    #[error("numeric overflow: {0}")]
    NumericOverflow(String),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    #[error(transparent)]
    Query(#[from] QueryError),
}

impl UpdateError {
    pub fn code(&self) -> &'static str {
        match self {
            UpdateError::BadUpdate(_) => "bad_update",
            UpdateError::UnknownOperator(_) => "unknown_operator",
            UpdateError::ConflictingPaths(..) => "conflicting_update_paths",
            UpdateError::TypeMismatch(_) => "type_mismatch",
            UpdateError::PathNotViable(_) => "path_not_viable",
            UpdateError::ImmutableField => "immutable_field",
            UpdateError::NumericOverflow(_) => "numeric_overflow",
            UpdateError::LimitExceeded(_) => "limit_exceeded",
            UpdateError::Query(e) => e.code(),
        }
    }
}
