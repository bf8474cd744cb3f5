//! The error codes: one enum that gives each code's string, HTTP status, meaning, WebSocket close
//! code and whether a client may retry; and the HTTP error body.
//!
//! Library crates keep returning `&'static str` codes from their error types (they know nothing
//! of HTTP); the server maps them here with [`ErrorCode::from_code`], and a server test checks
//! that every code a library can produce is known.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The close code a WebSocket gets after the `error` message that ends it (policy violation).
pub const WS_CLOSE_POLICY: u16 = 1008;
/// The close code of a connection ended by a message over the size limit (RFC 6455: "message
/// too big").
pub const WS_CLOSE_TOO_BIG: u16 = 1009;

macro_rules! error_codes {
    ($( $variant:ident = ($code:literal, $http:literal, $ws:expr, $retry:literal, $meaning:literal), )*) => {
        /// Every stable error code Herald returns.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $($variant,)* }

        impl ErrorCode {
            /// Every code, in the order of the table in `docs/protocol.md`.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The wire string (stable, snake_case).
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The HTTP status of an error body with this code.
            pub const fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $http,)* }
            }

            /// The WebSocket close code when this error ends a connection (it is sent as an
            /// `error` message first); `None` for errors that leave the connection open.
            pub const fn ws_close(self) -> Option<u16> {
                match self { $(ErrorCode::$variant => $ws,)* }
            }

            /// Whether the same request may succeed later unchanged (so a client retries it with
            /// backoff). Bad input, refusals, and damage an operator must repair are not.
            pub const fn retryable(self) -> bool {
                match self { $(ErrorCode::$variant => $retry,)* }
            }

            /// What the code means, as `docs/protocol.md` states it.
            pub const fn meaning(self) -> &'static str {
                match self { $(ErrorCode::$variant => $meaning,)* }
            }

            /// The code for a wire string.
            pub fn from_code(code: &str) -> Option<ErrorCode> {
                match code { $($code => Some(ErrorCode::$variant),)* _ => None }
            }
        }
    };
}

const CLOSE: Option<u16> = Some(WS_CLOSE_POLICY);

error_codes! {
    // Request shape
    BadJson = ("bad_json", 400, None, false, "the body is not valid JSON"),
    BadRequest = ("bad_request", 400, None, false, "the request is malformed (wrong member types, missing or unknown members)"),
    BodyTooLarge = ("body_too_large", 413, None, false, "the request body is over the endpoint's limit"),
    MessageTooLarge = ("message_too_large", 413, Some(WS_CLOSE_TOO_BIG), false, "a WebSocket message is over the size limit; the connection closes after the replies to earlier messages"),
    RouteNotFound = ("route_not_found", 404, None, false, "no such endpoint"),
    MethodNotAllowed = ("method_not_allowed", 405, None, false, "the endpoint does not accept this method"),
    // Authentication and rules
    Unauthenticated = ("unauthenticated", 401, CLOSE, false, "missing, malformed, forged, expired or revoked credentials"),
    TokenExpired = ("token_expired", 401, CLOSE, false, "the live connection's token expired without renewal; its subscriptions ended"),
    PermissionDenied = ("permission_denied", 403, None, false, "the credentials or the security rules do not allow this request"),
    BadRules = ("bad_rules", 400, None, false, "the rule set does not validate; nothing changed"),
    KeyNotFound = ("key_not_found", 404, None, false, "no API key with this id"),
    RateLimited = ("rate_limited", 429, CLOSE, true, "too many messages on this connection; slow down"),
    // Paths and documents
    BadPath = ("bad_path", 400, None, false, "bad collection path or document id (empty or '.'/'..' segments, control characters, '*', '__' prefix, too long)"),
    NotFound = ("not_found", 404, None, false, "the document does not exist"),
    AlreadyExists = ("already_exists", 409, None, false, "insert of an id that exists"),
    VersionConflict = ("version_conflict", 409, None, false, "an ifVersion / If-Match precondition failed; nothing was applied"),
    IdMismatch = ("id_mismatch", 400, None, false, "the body's _id contradicts the path"),
    BadDocument = ("bad_document", 400, None, false, "the document is not a JSON object or has a forbidden field name"),
    DocumentTooLarge = ("document_too_large", 413, None, false, "the document is over the size limit"),
    DocumentTooDeep = ("document_too_deep", 400, None, false, "the document nests deeper than the limit"),
    // Queries (herald-query)
    BadFilter = ("bad_filter", 400, None, false, "malformed filter"),
    UnknownOperator = ("unknown_operator", 400, None, false, "an operator Herald does not support"),
    BadOperand = ("bad_operand", 400, None, false, "an operator's operand has the wrong shape"),
    BadRegex = ("bad_regex", 400, None, false, "the regular expression does not compile"),
    UnsupportedRegex = ("unsupported_regex", 400, None, false, "the regular expression needs backtracking (look-around, backreferences)"),
    BadSort = ("bad_sort", 400, None, false, "malformed sort"),
    BadProjection = ("bad_projection", 400, None, false, "malformed projection"),
    BadQuery = ("bad_query", 400, None, false, "malformed skip, limit or query member"),
    BadPipeline = ("bad_pipeline", 400, None, false, "malformed aggregation pipeline or stage"),
    UnsupportedLive = ("unsupported_live", 400, None, false, "a valid pipeline that cannot be maintained live; the message names the stage and why"),
    LimitExceeded = ("limit_exceeded", 400, None, false, "a limit on query or write size was exceeded"),
    ResultTooLarge = ("result_too_large", 400, None, false, "the query would return too many documents; add a limit"),
    // Updates (herald-query)
    BadUpdate = ("bad_update", 400, None, false, "malformed update"),
    ConflictingUpdatePaths = ("conflicting_update_paths", 400, None, false, "two operators touch the same path or a path and its prefix"),
    TypeMismatch = ("type_mismatch", 400, None, false, "an update operator met a value of the wrong type"),
    PathNotViable = ("path_not_viable", 400, None, false, "an update path goes through a scalar"),
    ImmutableField = ("immutable_field", 400, None, false, "the update would change _id"),
    NumericOverflow = ("numeric_overflow", 400, None, false, "integer overflow or a non-finite result"),
    // Indexes
    BadIndex = ("bad_index", 400, None, false, "malformed index definition"),
    IndexExists = ("index_exists", 409, None, false, "an index with this name exists"),
    IndexNotFound = ("index_not_found", 404, None, false, "no index with this name"),
    // Server and storage
    BadTrigger = ("bad_trigger", 400, None, false, "malformed trigger definition"),
    ScriptCompile = ("script_compile", 400, None, false, "a trigger's function is not a JavaScript function expression"),
    TriggerNotFound = ("trigger_not_found", 404, None, false, "no trigger with this name"),
    // Trigger task errors: in a trigger's dead letters and recent errors, never an HTTP answer
    TaskConflict = ("task_conflict", 409, None, true, "the documents a trigger task read kept changing (8 re-runs)"),
    TriggerDepthExceeded = ("trigger_depth_exceeded", 400, None, false, "a chain of triggers 16 deep (a cycle?)"),
    Overloaded = ("overloaded", 503, None, true, "the write queue is full; retry later"),
    Unavailable = ("unavailable", 503, None, true, "this node cannot serve the request now: no primary is known (failover in progress), Kafka is unreachable, or the node has not applied the seq asked for; retry"),
    ShuttingDown = ("shutting_down", 503, None, true, "the server is shutting down"),
    StorageClosed = ("storage_closed", 503, None, true, "the store is closed"),
    StorageIo = ("storage_io", 500, None, true, "a disk operation failed"),
    StorageCorrupted = ("storage_corrupted", 500, None, false, "the data file is corrupted"),
    StorageFull = ("storage_full", 507, None, true, "the disk is full: nothing was applied; writes resume by themselves once space is freed"),
    StorageIncompatibleFormat = ("storage_incompatible_format", 500, None, false, "the data file needs an upgrade or was written by a newer Herald"),
    StorageLocked = ("storage_locked", 500, None, false, "another process holds the data file"),
    CommitFailed = ("commit_failed", 500, None, true, "the storage commit failed; nothing was applied"),
    EntryTooLarge = ("entry_too_large", 413, None, false, "a stored entry is over the storage limit"),
    JobPanicked = ("job_panicked", 500, None, false, "an internal error while applying the write; nothing was applied"),
    InvalidOptions = ("invalid_options", 500, None, false, "bad storage options"),
    StorageInternal = ("storage_internal", 500, None, false, "internal storage error"),
    LogGone = ("log_gone", 410, None, true, "the commit log no longer reaches back to the seq a live result needed; subscribe again"),
    Corrupt = ("corrupt", 500, None, false, "stored data could not be decoded"),
    Internal = ("internal", 500, None, false, "internal error"),
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The code is not in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCode(pub String);

impl fmt::Display for UnknownCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown error code '{}'", self.0)
    }
}

impl std::error::Error for UnknownCode {}

impl FromStr for ErrorCode {
    type Err = UnknownCode;
    fn from_str(s: &str) -> Result<ErrorCode, UnknownCode> {
        ErrorCode::from_code(s).ok_or_else(|| UnknownCode(s.to_string()))
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One row of `testdata/protocol/error-codes.json`, what the TypeScript SDK reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorCodeRow {
    pub code: ErrorCode,
    pub http: u16,
    pub ws_close: Option<u16>,
    pub retryable: bool,
}

/// The error table as `testdata/protocol/error-codes.json` holds it.
pub fn error_code_rows() -> Vec<ErrorCodeRow> {
    ErrorCode::ALL
        .iter()
        .map(|&code| ErrorCodeRow {
            code,
            http: code.http_status(),
            ws_close: code.ws_close(),
            retryable: code.retryable(),
        })
        .collect()
}

/// The HTTP error body: `{"error":{"code","message","retryable",...}}`. `write`, `expected` and
/// `actual` are given for a failed precondition (`version_conflict`) or a malformed write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The inside of [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// Added in the typed protocol (old clients ignore it): whether the client may retry.
    pub retryable: bool,
    /// The index of the write the error is about, in a commit or write request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<u64>,
    /// For `version_conflict`: the version the write expected and the one it found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<u64>,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
                retryable: code.retryable(),
                write: None,
                expected: None,
                actual: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for &code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "duplicate {s}");
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{s}"
            );
            assert!((400..600).contains(&code.http_status()));
            assert_eq!(s.parse::<ErrorCode>(), Ok(code));
            assert_eq!(serde_json::to_value(code).unwrap(), s);
        }
        assert!("no_such_code".parse::<ErrorCode>().is_err());
    }

    /// Unavailable is retryable; bad input and damage are not (the SDK retried
    /// `storage_corrupted` forever when it guessed from the status).
    #[test]
    fn retryable_is_decided_per_code() {
        for code in [
            ErrorCode::Overloaded,
            ErrorCode::Unavailable,
            ErrorCode::ShuttingDown,
            ErrorCode::RateLimited,
        ] {
            assert!(code.retryable(), "{code}");
        }
        for code in [
            ErrorCode::StorageCorrupted,
            ErrorCode::BadRequest,
            ErrorCode::VersionConflict,
        ] {
            assert!(!code.retryable(), "{code}");
        }
    }

    #[test]
    fn docs_list_every_code_with_status_and_retryable() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/protocol.md"
        ))
        .expect("docs/protocol.md exists");
        for &code in ErrorCode::ALL {
            let ws = code.ws_close().map_or("-".to_string(), |c| c.to_string());
            let row = format!(
                "| `{code}` | {} | {ws} | {} |",
                code.http_status(),
                if code.retryable() { "yes" } else { "no" }
            );
            assert!(doc.contains(&row), "docs/protocol.md lacks the row {row}");
        }
    }
}
