//! Queries on the wire: the `POST /v1/query` body, the query part of a subscription, the SSE
//! subscribe parameters and the `explain` output.
//!
//! `filter`, `sort`, `skip`, `limit`, `projection` and the cursors (`startAt`, `startAfter`,
//! `endAt`, `endBefore`) stay JSON values: herald-query parses them, with their own error codes
//! (`bad_filter`, `bad_sort`, `bad_query`...).

use crate::decode::{members, Decode};
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

members! {
    collection_member: "collection" => String;
    collection_group_member: "collectionGroup" => Option<String>;
    explain_member: "explain" => Option<bool>;
    min_seq_member: "minSeq" => Option<u64>;
}

/// `POST /v1/query`: `{"collection" | "collectionGroup","filter"?,"sort"?,"skip"?,"limit"?,
/// "projection"?,"startAt"?,"startAfter"?,"endAt"?,"endBefore"?,"explain"?,"minSeq"?}`:
/// exactly one of `collection` and `collectionGroup` (`collection` is empty for a group query).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    #[serde(
        default,
        deserialize_with = "collection_member",
        skip_serializing_if = "String::is_empty"
    )]
    pub collection: String,
    /// Every collection whose last path segment is this name, at any depth.
    #[serde(
        rename = "collectionGroup",
        default,
        deserialize_with = "collection_group_member",
        skip_serializing_if = "Option::is_none"
    )]
    pub collection_group: Option<String>,
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
    /// Cursors (`startAt` or `startAfter`, `endAt` or `endBefore`): arrays of sort values,
    /// optionally then an `_id`; herald-query checks them against the sort.
    #[serde(rename = "startAt", default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Value>,
    #[serde(
        rename = "startAfter",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub start_after: Option<Value>,
    #[serde(rename = "endAt", default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<Value>,
    #[serde(rename = "endBefore", default, skip_serializing_if = "Option::is_none")]
    pub end_before: Option<Value>,
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

    fn check(&self) -> Result<(), crate::ProtocolError> {
        one_scope(&self.collection, &self.collection_group)
    }
}

/// Exactly one of `collection` and `collectionGroup` (`bad_query` otherwise).
pub(crate) fn one_scope(
    collection: &str,
    group: &Option<String>,
) -> Result<(), crate::ProtocolError> {
    match (collection.is_empty(), group) {
        (false, None) | (true, Some(_)) => Ok(()),
        (false, Some(_)) => Err(crate::ProtocolError::new(
            ErrorCode::BadQuery,
            "give 'collection' (one collection) or 'collectionGroup' (every collection with that \
             last segment), not both",
        )),
        (true, None) => Err(crate::ProtocolError::new(
            ErrorCode::BadQuery,
            "a query needs 'collection' (a collection path) or 'collectionGroup' (a group name)",
        )),
    }
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
            start_at: self.start_at,
            start_after: self.start_after,
            end_at: self.end_at,
            end_before: self.end_before,
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
    pub start_at: Option<Value>,
    pub start_after: Option<Value>,
    pub end_at: Option<Value>,
    pub end_before: Option<Value>,
}

/// `GET /v1/subscribe?collection=..&filter=<json>&...`: the SSE stream's parameters, each a
/// string as the URL carries it (all but `collection` hold JSON). `Last-Event-ID` overrides
/// `resumeFrom`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SubscribeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
    /// Instead of `collection`: every collection whose last path segment is this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection_group: Option<String>,
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
    /// JSON: a live aggregation's pipeline (an array of stages), instead of the query members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_before: Option<String>,
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
    /// Index entries read, including those of an abandoned trial of another plan.
    pub keys_examined: u64,
    pub docs_examined: u64,
    pub returned: u64,
    /// Index entries and documents counted to estimate the plans.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keys_sampled: u64,
    /// The chosen plan's estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    /// The other plans considered, with their estimates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Alternative>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn one() -> u64 {
    1
}

/// What a plan is estimated to examine; `atLeast` when a count stopped early (the true figure
/// is higher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Estimate {
    pub keys: u64,
    pub docs: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_least: bool,
}

/// A plan considered and not used; `abandoned` when it was tried first and gave up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Alternative {
    pub plan: PlanDescription,
    pub estimate: Estimate,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
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
    /// The ids in every one of these indexes' equality ranges (a zig-zag join).
    Intersection { indexes: Vec<String> },
    /// One index in sort order, stopping after skip + limit: `merged` ranges merged (one per
    /// combination of `$in` values), read backwards when `descending`; documents whose sort
    /// value is null or missing read by a collection scan when `nullsByScan`.
    #[serde(rename_all = "camelCase")]
    OrderedIndex {
        index: String,
        descending: bool,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        merged: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        nulls_by_scan: bool,
    },
    /// Every document of the collection. (A struct variant: a unit variant would let unknown
    /// members through.)
    CollectionScan {},
    /// A collection-group query without a group index serving it: each of `collections` ran
    /// its own plan (`plans`: the distinct ones), the results merged in sort order.
    GroupMerge {
        collections: u64,
        plans: Vec<PlanDescription>,
    },
}
