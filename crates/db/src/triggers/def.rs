//! Trigger definitions: what a trigger listens to (collection pattern, operations, filter) and
//! what it runs (a JavaScript function or a webhook), parsed and validated from the API's JSON.
//!
//! The database layer stores and matches definitions; it does not run them. Whether a
//! function's source compiles is checked by the server, which owns the script engine.

use crate::error::DbError;
use crate::names::{check_segment, COLLECTION_PATH_BYTES_MAX, COLLECTION_SEGMENTS_MAX};
use crate::txn::ChangeOp;
use herald_query::Filter;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest JavaScript source of a function trigger, in bytes.
pub const FUNCTION_SOURCE_BYTES_MAX: usize = 256 * 1024;
/// Most triggers per database.
pub const TRIGGERS_MAX: usize = 256;
/// Default and largest number of attempts before a task becomes a dead letter.
pub const ATTEMPTS_MAX_DEFAULT: u32 = 8;
pub const ATTEMPTS_MAX_LIMIT: u32 = 100;
/// Most webhook headers, and longest webhook URL.
pub const WEBHOOK_HEADERS_MAX: usize = 32;
pub const WEBHOOK_URL_BYTES_MAX: usize = 2048;

/// What a trigger does with each task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// JavaScript source of `function (event, db) { ... }`.
    Function(String),
    Webhook {
        url: String,
        headers: Map<String, Value>,
    },
}

/// A stored trigger definition.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerDef {
    pub name: String,
    /// Unique per definition ever created; the queue's key prefix. Recreating a trigger under
    /// the same name gets a new uid, so leftovers of the old queue can never run under it.
    pub uid: u64,
    /// Collection path; a `*` segment matches any one segment (`users/*/posts`).
    pub collection: String,
    pub on: Vec<String>,
    /// The filter as given (parsed again on load); `None` matches every document.
    pub filter: Option<Value>,
    pub action: Action,
    pub max_attempts: u32,
    #[serde(skip)]
    parsed: Option<Filter>,
}

impl TriggerDef {
    /// Parses the body of `PUT /v1/triggers/{name}`. `uid` is assigned by the caller. Unknown
    /// members are refused before this, by the wire protocol's type (`herald_protocol::
    /// TriggerBody`); this checks what the definition means.
    pub fn parse(name: &str, body: &Value) -> Result<TriggerDef, DbError> {
        check_segment(name, "trigger name")?;
        let bad = |m: String| DbError::BadTrigger(m);
        let Value::Object(m) = body else {
            return Err(bad("a trigger definition must be an object".into()));
        };
        let collection = match m.get("collection") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(bad("'collection' must be a collection path string".into())),
        };
        check_pattern(&collection)?;
        let on = match m.get("on") {
            None => vec!["insert".into(), "update".into(), "delete".into()],
            Some(Value::Array(ops)) if !ops.is_empty() => {
                let mut out: Vec<String> = Vec::new();
                for op in ops {
                    match op.as_str() {
                        Some(s @ ("insert" | "update" | "delete")) => {
                            if !out.iter().any(|o| o == s) {
                                out.push(s.to_string());
                            }
                        }
                        _ => {
                            return Err(bad(format!(
                                "'on' lists operations among \"insert\", \"update\", \"delete\"; got {op}"
                            )))
                        }
                    }
                }
                out
            }
            Some(_) => return Err(bad("'on' must be a non-empty array".into())),
        };
        let filter = match m.get("filter") {
            None | Some(Value::Null) => None,
            Some(f) => {
                Filter::parse(f)?;
                Some(f.clone())
            }
        };
        let action = match (m.get("function"), m.get("webhook")) {
            (Some(Value::String(src)), None) => {
                if src.len() > FUNCTION_SOURCE_BYTES_MAX {
                    return Err(DbError::LimitExceeded(format!(
                        "a trigger function's source may be at most {FUNCTION_SOURCE_BYTES_MAX} bytes"
                    )));
                }
                Action::Function(src.clone())
            }
            (None, Some(w)) => parse_webhook(w)?,
            (Some(_), Some(_)) => {
                return Err(bad("give either 'function' or 'webhook', not both".into()))
            }
            (Some(_), None) => return Err(bad("'function' must be a string of JavaScript".into())),
            (None, None) => return Err(bad("a trigger needs a 'function' or a 'webhook'".into())),
        };
        let max_attempts = match m.get("maxAttempts") {
            None => ATTEMPTS_MAX_DEFAULT,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=ATTEMPTS_MAX_LIMIT as u64).contains(&n) => n as u32,
                _ => {
                    return Err(bad(format!(
                        "'maxAttempts' must be an integer from 1 to {ATTEMPTS_MAX_LIMIT}"
                    )))
                }
            },
        };
        let mut def = TriggerDef {
            name: name.to_string(),
            uid: 0,
            collection,
            on,
            filter,
            action,
            max_attempts,
            parsed: None,
        };
        def.prepare()?;
        Ok(def)
    }

    /// Parses the filter; called after deserializing a stored definition.
    pub(crate) fn prepare(&mut self) -> Result<(), DbError> {
        self.parsed = match &self.filter {
            Some(f) => Some(Filter::parse(f)?),
            None => None,
        };
        Ok(())
    }

    /// Whether a change to a document of `collection` fires this trigger. The filter is tested
    /// against the after-image, or the before-image for a delete.
    pub fn fires(
        &self,
        collection: &str,
        op: ChangeOp,
        before: Option<&Value>,
        after: Option<&Value>,
    ) -> bool {
        if !self.on.iter().any(|o| o == op.as_str())
            || !pattern_matches(&self.collection, collection)
        {
            return false;
        }
        match (&self.parsed, after.or(before)) {
            (None, _) => true,
            (Some(f), Some(doc)) => f.matches(doc),
            (Some(_), None) => false,
        }
    }
}

fn parse_webhook(w: &Value) -> Result<Action, DbError> {
    let bad = |m: &str| DbError::BadTrigger(m.to_string());
    let Value::Object(m) = w else {
        return Err(bad("'webhook' must be an object {\"url\", \"headers\"?}"));
    };
    let url = match m.get("url") {
        Some(Value::String(u)) => u.clone(),
        _ => return Err(bad("'webhook.url' must be a string")),
    };
    if !(url.starts_with("http://") || url.starts_with("https://"))
        || url.len() > WEBHOOK_URL_BYTES_MAX
    {
        return Err(bad(
            "'webhook.url' must be an http:// or https:// URL of at most 2048 bytes",
        ));
    }
    let headers = match m.get("headers") {
        None => Map::new(),
        Some(Value::Object(h)) => {
            if h.len() > WEBHOOK_HEADERS_MAX {
                return Err(bad("a webhook may have at most 32 headers"));
            }
            for (k, v) in h {
                let token = !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                let value_ok = v
                    .as_str()
                    .is_some_and(|s| s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)));
                if !token || !value_ok {
                    return Err(DbError::BadTrigger(format!(
                        "webhook header '{}' needs a token name and a printable string value",
                        k.escape_debug()
                    )));
                }
            }
            h.clone()
        }
        Some(_) => return Err(bad("'webhook.headers' must be an object of strings")),
    };
    Ok(Action::Webhook { url, headers })
}

/// Checks a collection pattern: a collection path in which any segment may be `*`.
pub fn check_pattern(pattern: &str) -> Result<(), DbError> {
    if pattern.len() > COLLECTION_PATH_BYTES_MAX {
        return Err(DbError::BadPath("collection pattern is too long".into()));
    }
    let segments: Vec<&str> = pattern.split('/').collect();
    if segments.len() > COLLECTION_SEGMENTS_MAX || segments.len().is_multiple_of(2) {
        return Err(DbError::BadPath(format!(
            "'{}' is not a collection pattern (an odd number of segments, '*' for any one)",
            pattern.escape_debug()
        )));
    }
    for s in segments.iter().filter(|s| **s != "*") {
        check_segment(s, "collection pattern segment")?;
    }
    Ok(())
}

/// Whether `collection` matches `pattern` segment by segment (`*` matches any one segment).
pub fn pattern_matches(pattern: &str, collection: &str) -> bool {
    let mut p = pattern.split('/');
    let mut c = collection.split('/');
    loop {
        match (p.next(), c.next()) {
            (None, None) => return true,
            (Some(ps), Some(cs)) if ps == "*" || ps == cs => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_match_segment_by_segment() {
        assert!(pattern_matches("tweets", "tweets"));
        assert!(!pattern_matches("tweets", "tweets2"));
        assert!(pattern_matches("users/*/posts", "users/u1/posts"));
        assert!(!pattern_matches("users/*/posts", "users/u1/posts/p1/likes"));
        assert!(!pattern_matches("users/*/posts", "users"));
        assert!(pattern_matches("*", "anything"));
        assert!(check_pattern("users/*/posts").is_ok());
        assert!(check_pattern("users/*").is_err());
        assert!(check_pattern("").is_err());
    }

    /// (Unknown members are the wire protocol's to refuse: `testdata/protocol/http.trigger.json`
    /// and the server's trigger tests.)
    #[test]
    fn parse_refuses_bad_definitions() {
        let ok = json!({"collection": "t", "function": "function (e, db) {}"});
        let def = TriggerDef::parse("fan", &ok).unwrap();
        assert_eq!(def.on, ["insert", "update", "delete"]);
        assert_eq!(def.max_attempts, ATTEMPTS_MAX_DEFAULT);
        for bad in [
            json!({"collection": "t"}),
            json!({"collection": "t", "function": 1}),
            json!({"collection": "t", "function": "f", "webhook": {"url": "http://x"}}),
            json!({"collection": "t", "webhook": {"url": "ftp://x"}}),
            json!({"collection": "t", "webhook": {"url": "http://x", "headers": {"a b": "c"}}}),
            json!({"collection": "t", "on": ["upsert"], "function": "f"}),
            json!({"collection": "t", "on": [], "function": "f"}),
            json!({"collection": "a/b", "function": "f"}),
            json!({"collection": "t", "filter": {"$bogus": 1}, "function": "f"}),
            json!({"collection": "t", "maxAttempts": 0, "function": "f"}),
        ] {
            assert!(TriggerDef::parse("x", &bad).is_err(), "{bad}");
        }
        assert!(TriggerDef::parse("a/b", &ok).is_err());
    }

    #[test]
    fn fires_on_operation_pattern_and_filter() {
        let def = TriggerDef::parse(
            "t",
            &json!({"collection": "u/*/p", "on": ["insert", "delete"], "filter": {"x": 1}, "function": "f"}),
        )
        .unwrap();
        let one = json!({"x": 1});
        let two = json!({"x": 2});
        assert!(def.fires("u/a/p", ChangeOp::Insert, None, Some(&one)));
        assert!(!def.fires("u/a/p", ChangeOp::Insert, None, Some(&two)));
        assert!(!def.fires("u/a/p", ChangeOp::Update, Some(&one), Some(&one)));
        assert!(def.fires("u/a/p", ChangeOp::Delete, Some(&one), None));
        assert!(!def.fires("v/a/p", ChangeOp::Insert, None, Some(&one)));
    }
}
