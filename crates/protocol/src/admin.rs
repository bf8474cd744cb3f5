//! Definition bodies of the admin endpoints: composite indexes, index exemptions, triggers.
//! Their meaning is checked by the database (`herald_db`); the types refuse wrong shapes and
//! unknown members.

use crate::decode::{members, Decode};
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/indexes`: `{"collection" | "collectionGroup","name","fields":[{"path","order"?}]}`:
/// an index of one collection, or of collection-group scope (kept for every collection whose
/// last segment is the group's name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexBody {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub collection: String,
    #[serde(
        rename = "collectionGroup",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub collection_group: Option<String>,
    pub name: String,
    pub fields: Vec<IndexField>,
}

/// One field of a composite index; `order` is 1 (the default) or -1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexField {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<i64>,
}

impl Decode for IndexBody {
    const WHAT: &'static str = "an index definition";
    const BAD: ErrorCode = ErrorCode::BadIndex;

    fn check(&self) -> Result<(), crate::ProtocolError> {
        if self.collection.is_empty() == self.collection_group.is_none() {
            return Err(crate::ProtocolError::new(
                ErrorCode::BadIndex,
                "an index needs exactly one of 'collection' and 'collectionGroup'",
            ));
        }
        match self
            .fields
            .iter()
            .find_map(|f| f.order.filter(|o| *o != 1 && *o != -1))
        {
            Some(o) => Err(crate::ProtocolError::new(
                ErrorCode::BadIndex,
                format!("order must be 1 or -1, got {o}"),
            )),
            None => Ok(()),
        }
    }
}

/// `PUT /v1/indexes/exemptions`: `{"collection","exemptions":["path",...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExemptionsBody {
    pub collection: String,
    pub exemptions: Vec<String>,
}

impl Decode for ExemptionsBody {
    const WHAT: &'static str = "an exemptions body";
    const BAD: ErrorCode = ErrorCode::BadIndex;
}

/// `PUT /v1/triggers/{name}`: a function or a webhook run for writes to a collection pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerBody {
    pub collection: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u64>,
}

/// A trigger's webhook: POSTed with the event and an idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Map<String, Value>>,
}

impl Decode for TriggerBody {
    const WHAT: &'static str = "a trigger definition";
    const BAD: ErrorCode = ErrorCode::BadTrigger;
    const NOT_OBJECT: ErrorCode = ErrorCode::BadTrigger;
}

/// `POST /v1/triggers/{name}/dead/retry` and `.../purge`: `{"tasks":["seq.n",...]}` (or no
/// body: all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadSelection {
    /// Absent means all; `null` is refused (too easy to send by mistake for a purge).
    #[serde(
        default,
        deserialize_with = "tasks_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub tasks: Option<Vec<String>>,
}

fn tasks_member<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    tasks_list(d).map(Some)
}

members! {
    tasks_list: "tasks" => Vec<String>;
}

impl Decode for DeadSelection {
    const WHAT: &'static str = "a dead-letter selection";
}

/// `POST /v1/keys`: `{"role":"admin"|"service","name"?}` (the server checks the role and the
/// name's length).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    #[serde(deserialize_with = "role_member")]
    pub role: String,
    #[serde(
        default,
        deserialize_with = "name_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<String>,
}

members! {
    role_member: "role" => String;
    name_member: "name" => Option<String>;
}

impl Decode for KeyBody {
    const WHAT: &'static str = "a key";
}
