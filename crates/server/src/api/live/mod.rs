//! Live queries: the WebSocket (`/v1/ws`, many subscriptions per connection, and write
//! requests from admin and service keys) and Server-Sent Events (`/v1/subscribe`, one
//! subscription per stream). Both feed the engine in `herald_db::live` and relay its messages
//! (`initial`, `changes`, `reset`, `error`), plus `heartbeat` when a connection has been idle
//! for [`HEARTBEAT`].
//!
//! - [`ws`]: the WebSocket connection loop and its client messages.
//! - [`sse`]: the SSE stream.
//! - [`session`]: who a WebSocket is (its principal, token expiry, renewal) and its rate limit.
//! - [`conn`]: one connection's bounded outbound queue and the encoding of what it carries.
//! - [`ws_writes`]: write requests on the WebSocket.
//!
//! Each connection has one bounded outbound queue ([`CONN_QUEUE_MAX`]) shared by its
//! subscriptions, so they are delivered in seq order. When the queue is full the engine drops
//! the connection's subscriptions and the connection is closed with a reason; the client
//! reconnects and resumes from the last seq it saw.
//!
//! An end user's subscriptions have the read rule ANDed into their filter
//! (`query::restrict`), so they see only readable documents; when the rules change, end-user
//! connections close (their clients reconnect and subscribe under the new rules). A live
//! aggregation (`pipeline` instead of the query members) has the rule ANDed into its head
//! `$match` the same way, before anything is aggregated (`pipeline_subscription`). A
//! collection-group subscription, a query or a pipeline, has each collection's rule ANDed in
//! for that collection's documents (`query::UserRestrict`, `start_group_subscription`).

pub mod conn;
pub mod session;
pub mod sse;
pub mod ws;
pub mod ws_forward;
pub mod ws_writes;

pub use herald_protocol::limits::{SUB_ID_BYTES_MAX, WS_MESSAGE_BYTES_MAX};
pub use sse::sse;
pub use ws::ws;

use crate::api::error::ApiError;
use crate::auth::Principal;
use crate::state::AppState;
use axum::http::HeaderMap;
use herald_protocol::{ErrorCode, QueryParts, ServerMessage};
use herald_query::pipeline::{LivePipeline, Pipeline, Stage};
use herald_query::Query;
use serde_json::json;
use std::borrow::Cow;
use std::time::Duration;

/// Messages waiting to be written to one connection.
pub const CONN_QUEUE_MAX: usize = 4096;
/// Subscriptions one connection may hold.
pub const SUBS_PER_CONN_MAX: usize = 256;
/// A connection idle this long gets a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Why a slow consumer's connection ends (the WebSocket close reason, the SSE `reset`'s).
pub const SLOW_CONSUMER: &str =
    "slow consumer: the outbound queue is full; reconnect with resumeFrom";

/// The `error` that ends a connection whose token expired unrenewed (WebSocket: no `sub`; SSE:
/// its one subscription).
pub fn token_expired(sub: Option<&'static str>) -> ServerMessage<'static> {
    let mut msg = ServerMessage::error(
        ErrorCode::TokenExpired,
        "the token expired; reconnect with a fresh one",
    );
    if let ServerMessage::Error { sub: s, .. } = &mut msg {
        *s = sub.map(Cow::Borrowed);
    }
    msg
}

/// A `reset` of subscription `sub` for `reason`.
pub fn reset(sub: &str, reason: &'static str) -> ServerMessage<'static> {
    ServerMessage::Reset {
        sub: Cow::Owned(sub.to_string()),
        reason: Cow::Borrowed(reason),
    }
}

/// An `error` about subscription `sub`, or (with `None`) about a message.
pub fn error_msg(sub: Option<&str>, e: &ApiError) -> ServerMessage<'static> {
    ServerMessage::Error {
        sub: sub.map(|s| Cow::Owned(s.to_string())),
        req: None,
        code: e.code,
        message: Cow::Owned(e.message.clone()),
        write: None,
        expected: None,
        actual: None,
    }
}

/// An end user's list up to a seq before the last rules change was built under other rules, so
/// it cannot be continued: such a resume becomes `reset` and a fresh `initial`.
fn resumable(
    st: &AppState,
    principal: &Principal,
    resume_from: Option<u64>,
    sub: &str,
    sink: &conn::ConnSink,
) -> Option<u64> {
    let r = resume_from?;
    if principal.user().is_some() && r <= st.auth.rules_seq() {
        sink.send_server(reset(
            sub,
            "the security rules changed since that seq; here is a fresh result",
        ));
        return None;
    }
    Some(r)
}

/// Hands a collection-group subscription to the engine: an end user's read rule is ANDed in
/// per collection (`query::UserRestrict`), and such a view is shared only by subscriptions of
/// the same user under the same rules. With `pipeline` it is a live aggregation over the
/// group: its head query runs over the group as the pull aggregation's does (documents with
/// `_path`, each collection's rule ANDed into the head `$match`), and the view is shared by
/// subscriptions of the same group, pipeline and (for end users) reader.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_group_subscription(
    st: &AppState,
    principal: &Principal,
    group: String,
    parts: QueryParts,
    pipeline: Option<Vec<serde_json::Value>>,
    sub: String,
    resume_from: Option<u64>,
    sink: std::sync::Arc<dyn herald_db::live::Sink>,
) -> Result<(), ApiError> {
    herald_db::check_group(&group)?;
    let scope = format!("*/{group}");
    let (query, filter, plan, key) = match pipeline {
        None => {
            let (query, key) = subscription_key(&scope, &parts)?;
            (query, parts.filter.clone(), None, key)
        }
        Some(stages) => {
            only_pipeline(&parts)?;
            let (plan, filter, spec) = live_pipeline(stages)?;
            let key = pipeline_key(&scope, &filter, &spec);
            (plan.head().clone(), filter, Some(plan), key)
        }
    };
    let (restrict, key) = match principal.user() {
        Some(user) => {
            let r = crate::api::query::UserRestrict::new(st, user, filter, query.clone());
            let who = format!("{key}\nrules {} user {:?}", st.auth.rules_seq(), user.ctx);
            (
                Some(std::sync::Arc::new(r) as std::sync::Arc<dyn herald_db::Restrict>),
                who,
            )
        }
        None => (None, key),
    };
    let req = herald_db::live::SubscribeRequest {
        sub,
        collection: String::new(),
        query,
        key,
        resume_from,
        sink,
    };
    match plan {
        None => st.live.subscribe_group(&group, req, restrict)?,
        Some(plan) => st
            .live
            .subscribe_group_pipeline(&group, req, restrict, plan)?,
    }
    Ok(())
}

/// A subscription's query, and its sharing key (equal keys share one engine view).
fn subscription(collection: &str, parts: &QueryParts) -> Result<(Query, String), ApiError> {
    herald_db::check_collection(collection)?;
    subscription_key(collection, parts)
}

/// The query and sharing key of a subscription to `scope` (a collection, or `*/group`).
/// A group's (`*/group`: no collection path starts with `*`) cursors are positions in the
/// group's order (`query::group_query_of`).
fn subscription_key(scope: &str, parts: &QueryParts) -> Result<(Query, String), ApiError> {
    let collection = scope;
    let query = match scope.starts_with("*/") {
        true => crate::api::query::group_query_of(parts)?,
        false => crate::api::query::query_of(parts)?,
    };
    let get = crate::api::query::or_null;
    let key = format!(
        "{collection}\n{}",
        json!([
            get(&parts.filter),
            get(&parts.sort),
            get(&parts.skip),
            get(&parts.limit),
            get(&parts.projection),
            get(&parts.start_at),
            get(&parts.start_after),
            get(&parts.end_at),
            get(&parts.end_before)
        ])
    );
    Ok((query, key))
}

/// A live aggregation's head query (an end user's read rule ANDed into its filter, as for a
/// pull aggregation), its checked pipeline and its sharing key. A pipeline comes without the
/// query members (`bad_query`); one the engine cannot maintain is refused by stage
/// (`unsupported_live`).
fn pipeline_subscription(
    st: &AppState,
    principal: &Principal,
    collection: &str,
    parts: &QueryParts,
    stages: Vec<serde_json::Value>,
) -> Result<(Query, std::sync::Arc<LivePipeline>, String), ApiError> {
    only_pipeline(parts)?;
    herald_db::check_collection(collection)?;
    let (plan, filter, spec) = live_pipeline(stages)?;
    let mut head = plan.head().clone();
    // The head filter as JSON, so a read rule is ANDed in exactly as for a query.
    let mut parts = QueryParts {
        filter,
        ..QueryParts::default()
    };
    if let Some(user) = principal.user() {
        crate::api::query::restrict(st, &mut parts, collection, user)?;
        head.filter = crate::api::query::query_of(&parts)?.filter;
    }
    let key = pipeline_key(collection, &parts.filter, &spec);
    Ok((head, plan, key))
}

/// A live pipeline: the checked pipeline, its head `$match` as JSON (for a read rule to be
/// ANDed into) and the stages as JSON.
fn live_pipeline(
    stages: Vec<serde_json::Value>,
) -> Result<
    (
        std::sync::Arc<LivePipeline>,
        Option<serde_json::Value>,
        serde_json::Value,
    ),
    ApiError,
> {
    let spec = serde_json::Value::Array(stages);
    let lib = |e: herald_query::QueryError| ApiError::lib(e.code(), e.to_string());
    let plan = LivePipeline::new(Pipeline::parse(&spec).map_err(lib)?).map_err(lib)?;
    let filter = match plan.pipeline().stages().first() {
        Some(Stage::Match(_)) => spec[0].get("$match").cloned(),
        _ => None,
    };
    Ok((std::sync::Arc::new(plan), filter, spec))
}

/// The sharing key of a live pipeline over `scope` with head filter `filter` (a rule ANDed
/// in). '\u{1}' cannot start a collection path (control characters are refused), so no
/// query's key (`{scope}\n...`) is ever a pipeline's.
fn pipeline_key(
    scope: &str,
    filter: &Option<serde_json::Value>,
    spec: &serde_json::Value,
) -> String {
    format!(
        "\u{1}pipeline\n{scope}\n{}",
        json!([crate::api::query::or_null(filter), spec])
    )
}

/// A subscription takes either `pipeline` or the query members, not both (`bad_query`).
fn only_pipeline(parts: &QueryParts) -> Result<(), ApiError> {
    let QueryParts {
        filter,
        sort,
        skip,
        limit,
        projection,
        start_at,
        start_after,
        end_at,
        end_before,
    } = parts;
    if [
        filter,
        sort,
        skip,
        limit,
        projection,
        start_at,
        start_after,
        end_at,
        end_before,
    ]
    .iter()
    .any(|m| m.is_some())
    {
        return Err(ApiError::new(
            ErrorCode::BadQuery,
            "a subscription takes either 'pipeline' or the query members (filter, sort, skip, \
             limit, projection, startAt, startAfter, endAt, endBefore), not both",
        ));
    }
    Ok(())
}

/// Refuses a request whose `Origin` is not allowed (`--allowed-origins`); requests without an
/// `Origin` (not from a browser) pass.
pub fn check_origin(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let (Some(allowed), Some(origin)) = (&st.auth.allowed_origins, headers.get("origin")) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    if allowed.iter().any(|a| a == origin) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("origin '{origin}' is not allowed"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::subscription;
    use crate::api::query::restrict_with;
    use crate::auth::UserAuth;
    use herald_protocol::QueryParts;
    use herald_rules::{AuthCtx, Rules};
    use serde_json::json;

    fn user(uid: &str, org: &str) -> UserAuth {
        let claims = json!({"sub": uid, "org": org});
        UserAuth {
            ctx: AuthCtx {
                uid: uid.into(),
                claims: claims.as_object().unwrap().clone(),
            },
            expires_at_ms: u64::MAX,
        }
    }

    /// The sharing key of a user's subscription (the engine shares one view per key).
    fn key(rules: &Rules, u: &UserAuth, collection: &str) -> String {
        let mut parts = QueryParts {
            filter: Some(json!({"n": {"$gt": 1}})),
            sort: Some(json!({"n": 1})),
            limit: Some(json!(5)),
            ..Default::default()
        };
        restrict_with(rules, &mut parts, collection, u).unwrap();
        subscription(collection, &parts).unwrap().1
    }

    #[test]
    fn users_with_the_same_substituted_rule_share_a_view_and_others_do_not() {
        let rules = Rules::parse(&json!({"rules": [
            {"match": "orgs/{o}/docs/{d}", "read": {"org": "$$auth.claims.org"}},
            {"match": "notes/{n}", "read": {"owner": "$$auth.uid"}}
        ]}))
        .unwrap();
        let (a, b, c) = (user("a", "acme"), user("b", "acme"), user("c", "other"));
        let docs = "orgs/x/docs";
        assert_eq!(key(&rules, &a, docs), key(&rules, &b, docs));
        assert_ne!(key(&rules, &a, docs), key(&rules, &c, docs));
        assert_ne!(key(&rules, &a, "notes"), key(&rules, &b, "notes"));
        assert!(key(&rules, &a, docs).contains("acme"));
    }
}
