//! What a trigger run receives: the `event` a trigger function is called with, and the body
//! POSTed to a webhook (docs/triggers.md). The server builds them from the database's task.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The change that fired a trigger: `{"op","collection","id","before","after","seq"}`, the
/// images `null` where the document did not exist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerEvent {
    pub op: String,
    pub collection: String,
    pub id: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub seq: u64,
}

/// A webhook task's POST body; `attempt` counts from 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookCall {
    pub trigger: String,
    pub task: String,
    pub attempt: u32,
    pub event: TriggerEvent,
}
