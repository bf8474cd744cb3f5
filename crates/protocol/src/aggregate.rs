//! Aggregations on the wire: the `POST /v1/aggregate` body and its reply.
//!
//! The pipeline stays JSON: herald-query parses it, with its own codes (`bad_pipeline`,
//! `unknown_operator` for a stage or operator Herald does not run, `limit_exceeded`, and the
//! filter/sort/projection codes inside stages).

use crate::decode::{members, Decode};
use crate::error::ErrorCode;
use crate::query::Explain;
use serde::{Deserialize, Serialize};
use serde_json::Value;

members! {
    collection_member: "collection" => String;
    collection_group_member: "collectionGroup" => Option<String>;
    pipeline_member: "pipeline" => Vec<Value>;
    explain_member: "explain" => Option<bool>;
    min_seq_member: "minSeq" => Option<u64>;
}

/// `POST /v1/aggregate`: `{"collection","pipeline","explain"?,"minSeq"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateBody {
    #[serde(
        default,
        deserialize_with = "collection_member",
        skip_serializing_if = "String::is_empty"
    )]
    pub collection: String,
    /// Instead of `collection`: every collection whose last path segment is this name.
    #[serde(
        rename = "collectionGroup",
        default,
        deserialize_with = "collection_group_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub collection_group: Option<String>,
    /// The stages, in order (`[{"$match": {...}}, {"$group": {...}}]`).
    #[serde(deserialize_with = "pipeline_member")]
    pub pipeline: Vec<Value>,
    #[serde(
        default,
        deserialize_with = "explain_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub explain: Option<bool>,
    /// As in `POST /v1/query`: answer only once the node has applied this seq.
    #[serde(
        rename = "minSeq",
        default,
        deserialize_with = "min_seq_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_seq: Option<u64>,
}

impl Decode for AggregateBody {
    const WHAT: &'static str = "an aggregation";
    const UNKNOWN: ErrorCode = ErrorCode::BadQuery;

    fn check(&self) -> Result<(), crate::ProtocolError> {
        crate::query::one_scope(&self.collection, &self.collection_group)
    }
}

/// The reply of `POST /v1/aggregate`: the pipeline's output documents and the seq of the snapshot
/// they were computed from, with `explain` when asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateReply {
    pub docs: Vec<Value>,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<AggregateExplain>,
}

impl Decode for AggregateReply {
    const WHAT: &'static str = "an aggregation reply";
}

/// `"explain"` of an aggregation: the query that read the collection (the head `$match`, and a
/// `$sort`/`$skip`/`$limit` right after it), explained as `POST /v1/query` explains it, and the
/// stages the server ran in memory after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AggregateExplain {
    pub query: Explain,
    /// How many leading stages the query answered.
    pub stages_in_query: u64,
    /// The names of the stages run in memory, in order (`["$group", "$sort"]`).
    pub stages: Vec<String>,
}

impl Decode for AggregateExplain {
    const WHAT: &'static str = "an aggregation explain";
}
