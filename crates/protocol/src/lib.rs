//! Herald's wire contract: the one table of error codes with their HTTP statuses and meanings,
//! and the error body every endpoint returns: `{"error":{"code":"...","message":"..."}}`.
//!
//! Codes are stable snake_case strings; the library crates define them on their error types and
//! this table decides how each travels over HTTP. `docs/protocol.md` lists the same table, and a
//! test checks the two agree.

use serde_json::{json, Value};

/// `(code, HTTP status, meaning)`, for every error code Herald returns.
pub const ERROR_CODES: &[(&str, u16, &str)] = &[
    // Request shape
    ("bad_json", 400, "the body is not valid JSON"),
    ("bad_request", 400, "the request is malformed (wrong member types, missing members)"),
    ("body_too_large", 413, "the request body is over the endpoint's limit"),
    ("route_not_found", 404, "no such endpoint"),
    ("method_not_allowed", 405, "the endpoint does not accept this method"),
    // Authentication and rules
    ("unauthenticated", 401, "missing, malformed, forged, expired or revoked credentials"),
    ("token_expired", 401, "the live connection's token expired without renewal; its subscriptions ended"),
    ("permission_denied", 403, "the credentials or the security rules do not allow this request"),
    ("bad_rules", 400, "the rule set does not validate; nothing changed"),
    ("key_not_found", 404, "no API key with this id"),
    ("rate_limited", 429, "too many messages on this connection; slow down"),
    // Paths and documents
    ("bad_path", 400, "bad collection path or document id (empty or '.'/'..' segments, control characters, '__' prefix, too long)"),
    ("not_found", 404, "the document does not exist"),
    ("already_exists", 409, "insert of an id that exists"),
    ("version_conflict", 409, "an ifVersion / If-Match precondition failed; nothing was applied"),
    ("id_mismatch", 400, "the body's _id contradicts the path"),
    ("bad_document", 400, "the document is not a JSON object or has a forbidden field name"),
    ("document_too_large", 413, "the document is over the size limit"),
    ("document_too_deep", 400, "the document nests deeper than the limit"),
    // Queries (herald-query)
    ("bad_filter", 400, "malformed filter"),
    ("unknown_operator", 400, "an operator Herald does not support"),
    ("bad_operand", 400, "an operator's operand has the wrong shape"),
    ("bad_regex", 400, "the regular expression does not compile"),
    ("unsupported_regex", 400, "the regular expression needs backtracking (look-around, backreferences)"),
    ("bad_sort", 400, "malformed sort"),
    ("bad_projection", 400, "malformed projection"),
    ("bad_query", 400, "malformed skip, limit or query member"),
    ("limit_exceeded", 400, "a limit on query or write size was exceeded"),
    ("result_too_large", 400, "the query would return too many documents; add a limit"),
    // Updates (herald-query)
    ("bad_update", 400, "malformed update"),
    ("conflicting_update_paths", 400, "two operators touch the same path or a path and its prefix"),
    ("type_mismatch", 400, "an update operator met a value of the wrong type"),
    ("path_not_viable", 400, "an update path goes through a scalar"),
    ("immutable_field", 400, "the update would change _id"),
    ("numeric_overflow", 400, "integer overflow or a non-finite result"),
    // Indexes
    ("bad_index", 400, "malformed index definition"),
    ("index_exists", 409, "an index with this name exists"),
    ("index_not_found", 404, "no index with this name"),
    // Server and storage
    ("bad_trigger", 400, "malformed trigger definition"),
    ("script_compile", 400, "a trigger's function is not a JavaScript function expression"),
    ("trigger_not_found", 404, "no trigger with this name"),
    ("overloaded", 503, "the write queue is full; retry later"),
    ("shutting_down", 503, "the server is shutting down"),
    ("storage_closed", 503, "the store is closed"),
    ("storage_io", 500, "a disk operation failed"),
    ("storage_corrupted", 500, "the data file is corrupted"),
    ("storage_incompatible_format", 500, "the data file needs an upgrade or was written by a newer Herald"),
    ("storage_locked", 500, "another process holds the data file"),
    ("commit_failed", 500, "the storage commit failed; nothing was applied"),
    ("entry_too_large", 413, "a stored entry is over the storage limit"),
    ("job_panicked", 500, "an internal error while applying the write; nothing was applied"),
    ("invalid_options", 500, "bad storage options"),
    ("storage_internal", 500, "internal storage error"),
    ("corrupt", 500, "stored data could not be decoded"),
    ("internal", 500, "internal error"),
];

/// The HTTP status for a code; unknown codes are internal errors.
pub fn http_status(code: &str) -> u16 {
    ERROR_CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(500, |(_, s, _)| *s)
}

/// The error body: `{"error":{"code","message"}}`, plus any extra members (e.g. `"write": 2`).
pub fn error_body(code: &str, message: &str, extra: Option<Value>) -> Value {
    let mut err = json!({"code": code, "message": message});
    if let (Some(Value::Object(extra)), Value::Object(m)) = (extra, &mut err) {
        m.extend(extra);
    }
    json!({ "error": err })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for (code, status, _) in ERROR_CODES {
            assert!(seen.insert(*code), "duplicate {code}");
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
            assert!((400..600).contains(status));
        }
    }

    #[test]
    fn docs_list_every_code() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/protocol.md"
        ))
        .expect("docs/protocol.md exists");
        for (code, status, _) in ERROR_CODES {
            assert!(
                doc.contains(&format!("| `{code}` | {status} |")),
                "docs/protocol.md lacks `{code}` with {status}"
            );
        }
    }
}
