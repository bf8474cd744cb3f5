//! Writes on the wire: one write (`/v1/commit` entries, `/v1/bulk` lines, WebSocket write
//! requests), the commit body and its reply.
//!
//! [`Write`] is decoded from a flat member list in one pass ([`RawWrite`], refusing unknown
//! members) and then checked per op, so a document is parsed straight into its `Value` and
//! never buffered or copied on the way.

use crate::decode::{members, present, Decode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// What a committed write did (`null` in a result: a delete of a missing document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteOp {
    Insert,
    Update,
    Delete,
}

impl WriteOp {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteOp::Insert => "insert",
            WriteOp::Update => "update",
            WriteOp::Delete => "delete",
        }
    }
}

/// One write. `update` stays JSON: herald-query parses it (with its own error codes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", try_from = "RawWrite")]
pub enum Write {
    #[serde(rename_all = "camelCase")]
    Put {
        collection: String,
        id: String,
        doc: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        if_version: Option<u64>,
    },
    Insert {
        collection: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        doc: Value,
    },
    #[serde(rename_all = "camelCase")]
    Update {
        collection: String,
        id: String,
        update: Value,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        upsert: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        if_version: Option<u64>,
    },
    #[serde(rename_all = "camelCase")]
    Delete {
        collection: String,
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        if_version: Option<u64>,
    },
}

impl Write {
    pub fn collection(&self) -> &str {
        match self {
            Write::Put { collection, .. }
            | Write::Insert { collection, .. }
            | Write::Update { collection, .. }
            | Write::Delete { collection, .. } => collection,
        }
    }
}

members! {
    op_member: "op" => String;
    collection_member: "collection" => Option<String>;
    id_member: "id" => Option<String>;
    if_version_member: "ifVersion" => Option<u64>;
    upsert_member: "upsert" => Option<bool>;
}

/// Every member any write may have; [`Write`]'s `TryFrom` decides which apply to its op.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWrite {
    #[serde(deserialize_with = "op_member")]
    op: String,
    #[serde(default, deserialize_with = "collection_member")]
    collection: Option<String>,
    #[serde(default, deserialize_with = "id_member")]
    id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    doc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    update: Option<Value>,
    #[serde(default, deserialize_with = "if_version_member")]
    if_version: Option<u64>,
    #[serde(default, deserialize_with = "upsert_member")]
    upsert: Option<bool>,
}

impl TryFrom<RawWrite> for Write {
    type Error = String;

    fn try_from(r: RawWrite) -> Result<Write, String> {
        let op = r.op.as_str();
        if !matches!(op, "put" | "insert" | "update" | "delete") {
            return Err(format!(
                "unknown write op '{op}' (expected put, insert, update or delete)"
            ));
        }
        let a = if op == "insert" || op == "update" {
            "an"
        } else {
            "a"
        };
        let needs = |m: &str| format!("{a} {op} write needs '{m}'");
        let not_for = |m: &str| format!("'{m}' does not apply to {a} {op} write");
        let collection = r.collection.ok_or_else(|| needs("collection"))?;
        let no = |present: bool, m: &str| if present { Err(not_for(m)) } else { Ok(()) };
        Ok(match op {
            "put" => {
                no(r.update.is_some(), "update")?;
                no(r.upsert.is_some(), "upsert")?;
                Write::Put {
                    collection,
                    id: r.id.ok_or_else(|| needs("id"))?,
                    doc: r.doc.ok_or_else(|| needs("doc"))?,
                    if_version: r.if_version,
                }
            }
            "insert" => {
                no(r.update.is_some(), "update")?;
                no(r.upsert.is_some(), "upsert")?;
                no(r.if_version.is_some(), "ifVersion")?;
                Write::Insert {
                    collection,
                    id: r.id,
                    doc: r.doc.ok_or_else(|| needs("doc"))?,
                }
            }
            "update" => {
                no(r.doc.is_some(), "doc")?;
                Write::Update {
                    collection,
                    id: r.id.ok_or_else(|| needs("id"))?,
                    update: r.update.ok_or_else(|| needs("update"))?,
                    upsert: r.upsert.unwrap_or(false),
                    if_version: r.if_version,
                }
            }
            _ => {
                no(r.doc.is_some(), "doc")?;
                no(r.update.is_some(), "update")?;
                no(r.upsert.is_some(), "upsert")?;
                Write::Delete {
                    collection,
                    id: r.id.ok_or_else(|| needs("id"))?,
                    if_version: r.if_version,
                }
            }
        })
    }
}

impl Decode for Write {
    const WHAT: &'static str = "a write";
}

/// One write of a commit or write request, kept as its JSON text until it is decoded: a
/// malformed write fails alone in a non-atomic request and names its index in an atomic one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WriteItem(pub Box<RawValue>);

impl WriteItem {
    pub fn decode(&self) -> Result<Write, crate::ProtocolError> {
        Write::decode(self.0.get().as_bytes())
    }

    /// The item for a write (the SDK side, tests).
    pub fn of(w: &Write) -> WriteItem {
        WriteItem(serde_json::value::to_raw_value(w).expect("a write serializes"))
    }
}

impl PartialEq for WriteItem {
    fn eq(&self, other: &WriteItem) -> bool {
        self.0.get() == other.0.get()
    }
}

members! {
    writes_member: "writes" => Vec<WriteItem>;
    mutation_id_member: "mutationId" => Option<String>;
}

/// `POST /v1/commit`: `{"writes":[...],"mutationId"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommitBody {
    #[serde(deserialize_with = "writes_member")]
    pub writes: Vec<WriteItem>,
    #[serde(
        default,
        deserialize_with = "mutation_id_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub mutation_id: Option<String>,
}

/// The mutation id's length and characters are checked by the database (one rule for every
/// entry point).
impl Decode for CommitBody {
    const WHAT: &'static str = "a commit";
}

/// The reply of `POST /v1/commit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitReply {
    pub seq: u64,
    pub results: Vec<CommitResult>,
    /// True when the `mutationId` was remembered and nothing was applied again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

impl Decode for CommitReply {
    const WHAT: &'static str = "a commit reply";
}

/// One write's result in a [`CommitReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitResult {
    pub op: Option<WriteOp>,
    pub collection: String,
    pub id: String,
    pub version: u64,
}
