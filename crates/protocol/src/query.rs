//! Queries on the wire: the `POST /v1/query` body, the query part of a subscription, the SSE
//! subscribe parameters and the `explain` output.
//!
//! `filter`, `sort`, `skip`, `limit` and `projection` stay JSON values: herald-query parses
//! them, with their own error codes (`bad_filter`, `bad_sort`, `bad_query`...).

use crate::decode::{members, Decode};
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

members! {
    collection_member: "collection" => String;
    explain_member: "explain" => Option<bool>;
    min_seq_member: "minSeq" => Option<u64>;
}

/// `POST /v1/query`: `{"collection","filter"?,"sort"?,"skip"?,"limit"?,"projection"?,"explain"?,
/// "minSeq"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    #[serde(deserialize_with = "collection_member")]
    pub collection: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Value>,
    #[serde(
        default,
        deserialize_with = "explain_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub explain: Option<bool>,
    /// Answer only once the node has applied this seq (read-your-writes on any node of a
    /// cluster); past the server's bound, `unavailable`.
    #[serde(
        rename = "minSeq",
        default,
        deserialize_with = "min_seq_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_seq: Option<u64>,
}

impl Decode for QueryBody {
    const WHAT: &'static str = "a query";
    const UNKNOWN: ErrorCode = ErrorCode::BadQuery;
}

impl QueryBody {
    /// The query members, for herald-query.
    pub fn into_parts(self) -> QueryParts {
        QueryParts {
            filter: self.filter,
            sort: self.sort,
            skip: self.skip,
            limit: self.limit,
            projection: self.projection,
        }
    }
}

/// The query members shared by `POST /v1/query`, subscriptions and SSE streams, as JSON for
/// herald-query. Absent and `null` are the same: the default. (Not a wire type itself: each
/// message lists the members inline, so unknown ones are refused by that message's type.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryParts {
    pub filter: Option<Value>,
    pub sort: Option<Value>,
    pub skip: Option<Value>,
    pub limit: Option<Value>,
    pub projection: Option<Value>,
}

/// `GET /v1/subscribe?collection=..&filter=<json>&...`: the SSE stream's parameters, each a
/// string as the URL carries it (all but `collection` hold JSON). `Last-Event-ID` overrides
/// `resumeFrom`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SubscribeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<String>,
    /// JSON: a seq the node must have applied before the stream starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seq: Option<String>,
}

impl Decode for SubscribeParams {
    const WHAT: &'static str = "the subscribe parameters";
}

/// The reply of `POST /v1/query`: the documents and the seq they reflect, with `explain` when
/// asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryReply {
    pub docs: Vec<Value>,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

impl Decode for QueryReply {
    const WHAT: &'static str = "a query reply";
}

/// `"explain"` in a query reply: the plan chosen and what running it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Explain {
    pub plan: PlanDescription,
    pub keys_examined: u64,
    pub docs_examined: u64,
    pub returned: u64,
}

impl Decode for Explain {
    const WHAT: &'static str = "an explain";
}

/// How a query is answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PlanDescription {
    /// Point reads of this many ids.
    Ids { ids: u64 },
    /// Ranges of one index.
    Index { index: String, ranges: u64 },
    /// The union of several plans (`$or`).
    Union { plans: Vec<PlanDescription> },
    /// One index in sort order, stopping after skip + limit.
    OrderedIndex { index: String, descending: bool },
    /// Every document of the collection. (A struct variant: a unit variant would let unknown
    /// members through.)
    CollectionScan {},
}
