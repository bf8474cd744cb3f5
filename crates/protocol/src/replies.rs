//! Answers of the admin endpoints: index listings, trigger definitions and their queues, dead
//! letters. The database returns its own typed results (`herald_db`); the server converts them
//! into these, whose encoding is the wire format. Member order is the order the SDK and the
//! console see; documents (a dead letter's images, a trigger's filter) stay `Value`.

use crate::admin::{IndexField, Webhook};
use crate::decode::Decode;
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Whether a composite index is being filled (not yet used by queries) or ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexState {
    Building,
    Ready,
}

/// A composite index: `POST /v1/indexes`' answer and each of a listing's `composite`.
/// Every field carries its `order` (1 or -1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexInfo {
    pub name: String,
    pub fields: Vec<IndexField>,
    pub state: IndexState,
}

impl Decode for IndexInfo {
    const WHAT: &'static str = "an index";
}

/// `GET /v1/indexes?collection=`: the composite indexes, the exempt paths and the automatic
/// indexes being rebuilt after an exemption was lifted. With `?collectionGroup=` instead:
/// the group's composite indexes (`collection` empty, no exemptions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexList {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub collection: String,
    #[serde(
        rename = "collectionGroup",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub collection_group: Option<String>,
    pub composite: Vec<IndexInfo>,
    pub exemptions: Vec<String>,
    pub building: Vec<String>,
}

impl Decode for IndexList {
    const WHAT: &'static str = "an index listing";
}

/// A stored trigger definition, as `PUT /v1/triggers/{name}` answers it: defaults filled in,
/// exactly one of `function` and `webhook`, the webhook's `headers` always present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerInfo {
    pub name: String,
    pub collection: String,
    pub on: Vec<String>,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
}

impl Decode for TriggerInfo {
    const WHAT: &'static str = "a trigger";
}

/// `GET /v1/triggers/{name}`: the definition's members followed by its queue and counters.
/// (The members are repeated rather than flattened: serde cannot refuse unknown members of a
/// flattened struct.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerStatus {
    pub name: String,
    pub collection: String,
    pub on: Vec<String>,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    pub pending: u64,
    /// Age of the oldest queued task; `null` when the queue is empty.
    pub oldest_pending_age_ms: Option<u64>,
    pub dead: u64,
    pub executed: u64,
    pub failed: u64,
    pub conflicts: u64,
    pub recent_errors: Vec<TriggerError>,
}

impl TriggerStatus {
    pub fn new(def: TriggerInfo, queue: TriggerQueue) -> TriggerStatus {
        let TriggerInfo {
            name,
            collection,
            on,
            max_attempts,
            filter,
            function,
            webhook,
        } = def;
        TriggerStatus {
            name,
            collection,
            on,
            max_attempts,
            filter,
            function,
            webhook,
            pending: queue.pending,
            oldest_pending_age_ms: queue.oldest_pending_age_ms,
            dead: queue.dead,
            executed: queue.executed,
            failed: queue.failed,
            conflicts: queue.conflicts,
            recent_errors: queue.recent_errors,
        }
    }
}

/// The queue half of a [`TriggerStatus`].
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerQueue {
    pub pending: u64,
    pub oldest_pending_age_ms: Option<u64>,
    pub dead: u64,
    pub executed: u64,
    pub failed: u64,
    pub conflicts: u64,
    pub recent_errors: Vec<TriggerError>,
}

impl Decode for TriggerStatus {
    const WHAT: &'static str = "a trigger status";
}

/// One of a trigger's recent task errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TriggerError {
    pub at_ms: u64,
    /// The task's label, `"seq.n"`.
    pub task: String,
    pub message: String,
}

/// `GET /v1/triggers`: every trigger's status, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerList {
    pub triggers: Vec<TriggerStatus>,
}

impl Decode for TriggerList {
    const WHAT: &'static str = "a trigger listing";
}

/// A task that used up its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeadLetter {
    /// The task's label, `"seq.n"`: what a dead-letter selection names.
    pub task: String,
    pub seq: u64,
    pub collection: String,
    pub id: String,
    pub op: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub depth: u32,
    pub attempts: u32,
    pub created_ms: u64,
    pub last_error: Option<String>,
}

/// `GET /v1/triggers/{name}/dead`: dead letters in queue order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeadLetters {
    pub dead_letters: Vec<DeadLetter>,
}

impl Decode for DeadLetters {
    const WHAT: &'static str = "a dead-letter listing";

    /// The images are documents (objects) or `null`.
    fn check(&self) -> Result<(), crate::ProtocolError> {
        let image = |v: &Option<Value>| v.as_ref().is_none_or(Value::is_object);
        match self
            .dead_letters
            .iter()
            .find(|d| !image(&d.before) || !image(&d.after))
        {
            Some(d) => Err(crate::ProtocolError::new(
                ErrorCode::BadRequest,
                format!("dead letter {}: an image is a document or null", d.task),
            )),
            None => Ok(()),
        }
    }
}
