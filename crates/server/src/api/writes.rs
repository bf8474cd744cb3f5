//! Parsing the wire form of a write (`/v1/commit` entries and `/v1/bulk` lines) into a
//! `herald_db::Write`, and rendering write results.

use crate::api::body::kind;
use crate::api::error::{ApiError, ApiResult};
use herald_db::{Write, WriteResult};
use herald_query::Update;
use serde_json::{json, Map, Value};

const MEMBERS: &[&str] = &[
    "op",
    "collection",
    "id",
    "doc",
    "update",
    "ifVersion",
    "upsert",
];

fn bad(msg: String) -> ApiError {
    ApiError::new("bad_request", msg)
}

fn string(m: &Map<String, Value>, key: &str) -> ApiResult<Option<String>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad(format!(
            "'{key}' must be a string, got {}",
            kind(other)
        ))),
    }
}

fn required(m: &Map<String, Value>, key: &str, op: &str) -> ApiResult<String> {
    string(m, key)?.ok_or_else(|| bad(format!("a {op} write needs '{key}'")))
}

pub fn if_version(v: Option<&Value>) -> ApiResult<Option<u64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => Err(bad(format!(
            "ifVersion must be a non-negative integer, got {other}"
        ))),
    }
}

/// Parses an update spec (PATCH bodies and commit `update` members alike). An empty object is
/// refused rather than taken as a replacement that would empty the document.
pub fn parse_update(spec: &Value) -> ApiResult<Update> {
    let update = Update::parse(spec).map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    if update.is_replacement() && spec.as_object().is_some_and(|m| m.is_empty()) {
        return Err(ApiError::new(
            "bad_update",
            "an empty update does nothing; use PUT to replace a document",
        ));
    }
    Ok(update)
}

/// Parses one wire write.
pub fn parse_write(v: Value) -> ApiResult<Write> {
    let Value::Object(mut m) = v else {
        return Err(bad(format!("a write must be an object, got {}", kind(&v))));
    };
    if let Some(k) = m.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(bad(format!("unknown write member '{k}'")));
    }
    let op = required(&m, "op", "")?;
    let collection = required(&m, "collection", &op)?;
    let iv = if_version(m.get("ifVersion"))?;
    let only = |m: &Map<String, Value>, allowed: &[&str]| -> ApiResult<()> {
        match m.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(bad(format!("'{k}' does not apply to a {op} write"))),
            None => Ok(()),
        }
    };
    Ok(match op.as_str() {
        "put" => {
            only(&m, &["op", "collection", "id", "doc", "ifVersion"])?;
            let id = required(&m, "id", "put")?;
            let doc = m
                .remove("doc")
                .ok_or_else(|| bad("a put write needs 'doc'".into()))?;
            Write::Put {
                collection,
                id,
                doc,
                if_version: iv,
            }
        }
        "insert" => {
            only(&m, &["op", "collection", "id", "doc"])?;
            let id = string(&m, "id")?;
            let doc = m
                .remove("doc")
                .ok_or_else(|| bad("an insert write needs 'doc'".into()))?;
            Write::Insert {
                collection,
                id,
                doc,
            }
        }
        "update" => {
            only(
                &m,
                &["op", "collection", "id", "update", "ifVersion", "upsert"],
            )?;
            let id = required(&m, "id", "update")?;
            let spec = m
                .get("update")
                .ok_or_else(|| bad("an update write needs 'update'".into()))?;
            let update = parse_update(spec)?;
            let upsert = match m.get("upsert") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => return Err(bad(format!("upsert must be a boolean, got {other}"))),
            };
            Write::Update {
                collection,
                id,
                update,
                upsert,
                if_version: iv,
            }
        }
        "delete" => {
            only(&m, &["op", "collection", "id", "ifVersion"])?;
            let id = required(&m, "id", "delete")?;
            Write::Delete {
                collection,
                id,
                if_version: iv,
            }
        }
        other => {
            return Err(bad(format!(
                "unknown write op '{other}' (expected put, insert, update or delete)"
            )))
        }
    })
}

pub fn result_json(r: &WriteResult) -> Value {
    json!({
        "op": r.op.map(|o| o.as_str()),
        "collection": r.collection,
        "id": r.id,
        "version": r.version,
    })
}
