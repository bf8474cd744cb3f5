//! `POST /v1/query`: a pull query, the protocol's `QueryBody` -> `QueryReply` (`{"docs","seq"}`,
//! plus `"explain"` when asked). Runs on the blocking pool: a query may read many pages from
//! disk.

use crate::api::body::read_typed;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::Json;
use herald_protocol::{
    Alternative, ErrorCode, Estimate, Explain, PlanDescription, QueryBody, QueryParts, QueryReply,
};
use herald_query::Query;
use serde_json::Value;

/// Largest query request body.
pub const QUERY_BODY_BYTES_MAX: usize = 1 << 20;

pub async fn query(
    State(st): State<AppState>,
    p: crate::auth::Principal,
    body: Body,
) -> ApiResult<Json<QueryReply>> {
    let body: QueryBody = read_typed(body, QUERY_BODY_BYTES_MAX).await?;
    crate::api::min_seq::wait_min_seq(&st, body.min_seq, false).await?;
    let explain = body.explain.unwrap_or(false);
    if let Some(group) = body.collection_group.clone() {
        return query_group(st, p, group, body.into_parts(), explain).await;
    }
    let collection = body.collection.clone();
    let mut parts = body.into_parts();
    if let Some(user) = p.user() {
        if explain {
            // Plans count examined documents, hidden ones included.
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ));
        }
        restrict(&st, &mut parts, &collection, user)?;
    }
    let q = query_of(&parts)?;
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || db.query(&collection, &q))
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    let explain = match explain {
        true => Some(explain_of(out.explain)),
        false => None,
    };
    Ok(Json(QueryReply {
        docs: out.docs,
        seq: out.seq,
        explain,
    }))
}

/// A collection-group query: with an end user, each collection's read rule is ANDed into the
/// query for that collection's documents (a collection without a readable rule contributes
/// nothing).
async fn query_group(
    st: AppState,
    p: crate::auth::Principal,
    group: String,
    parts: QueryParts,
    explain: bool,
) -> ApiResult<Json<QueryReply>> {
    herald_db::check_group(&group)?;
    let q = group_query_of(&parts)?;
    let restrict = match p.user() {
        Some(_) if explain => {
            return Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "explain needs an admin or service key",
            ))
        }
        Some(user) => Some(UserRestrict::new(
            &st,
            user,
            parts.filter.clone(),
            q.clone(),
        )),
        None => None,
    };
    let db = st.db.clone();
    let out = tokio::task::spawn_blocking(move || {
        db.query_group(
            &group,
            &q,
            restrict.as_ref().map(|r| r as &dyn herald_db::Restrict),
        )
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))??;
    Ok(Json(QueryReply {
        docs: out.docs,
        seq: out.seq,
        explain: explain.then(|| explain_of(out.explain)),
    }))
}

/// An end user's view of a collection group (pull queries, aggregations, subscriptions): for
/// each collection, `base` with its filter ANDed with that collection's read rule, under the
/// rules as they were when the request came.
pub struct UserRestrict {
    rules: std::sync::Arc<herald_rules::Rules>,
    ctx: herald_rules::AuthCtx,
    filter: Option<Value>,
    base: Query,
}

impl UserRestrict {
    /// `filter`: the user's filter as JSON (`base`'s), so the rule is ANDed in as for a query.
    pub fn new(
        st: &AppState,
        user: &crate::auth::UserAuth,
        filter: Option<Value>,
        base: Query,
    ) -> UserRestrict {
        UserRestrict {
            rules: st.auth.rules(),
            ctx: user.ctx.clone(),
            filter,
            base,
        }
    }
}

impl herald_db::Restrict for UserRestrict {
    fn query_for(&self, collection: &str) -> Option<Query> {
        let rule = self.rules.read_filter(collection, &self.ctx).ok()?;
        let parts = QueryParts {
            filter: Some(herald_rules::and_filters(self.filter.as_ref(), rule)),
            ..QueryParts::default()
        };
        let mut q = self.base.clone();
        q.filter = query_of(&parts).ok()?.filter;
        Some(q)
    }
}

/// The protocol's `Explain` for the database's account of how a query ran.
pub fn explain_of(e: herald_db::Explain) -> Explain {
    Explain {
        plan: plan_of(e.plan),
        keys_examined: e.keys_examined as u64,
        docs_examined: e.docs_examined as u64,
        returned: e.returned as u64,
        keys_sampled: e.keys_sampled as u64,
        estimate: e.estimate.map(estimate_of),
        alternatives: e
            .alternatives
            .into_iter()
            .map(|a| Alternative {
                plan: plan_of(a.plan),
                estimate: estimate_of(a.estimate),
                abandoned: a.abandoned,
            })
            .collect(),
    }
}

fn estimate_of(e: herald_db::Estimate) -> Estimate {
    Estimate {
        keys: e.keys,
        docs: e.docs,
        at_least: e.at_least,
    }
}

fn plan_of(p: herald_db::PlanDescription) -> PlanDescription {
    use herald_db::PlanDescription as Db;
    match p {
        Db::Ids { ids } => PlanDescription::Ids { ids: ids as u64 },
        Db::Index { index, ranges } => PlanDescription::Index {
            index,
            ranges: ranges as u64,
        },
        Db::Union { plans } => PlanDescription::Union {
            plans: plans.into_iter().map(plan_of).collect(),
        },
        Db::Intersection { indexes } => PlanDescription::Intersection { indexes },
        Db::OrderedIndex {
            index,
            descending,
            merged,
            nulls_by_scan,
        } => PlanDescription::OrderedIndex {
            index,
            descending,
            merged: merged as u64,
            nulls_by_scan,
        },
        Db::CollectionScan => PlanDescription::CollectionScan {},
        Db::GroupMerge { collections, plans } => PlanDescription::GroupMerge {
            collections: collections as u64,
            plans: plans.into_iter().map(plan_of).collect(),
        },
    }
}

/// ANDs the user's read rule for `collection` into the filter of a query or subscription, so
/// everything downstream (plans, results, positions, live changes) sees only readable
/// documents. The user's own filter is validated first, so its errors read as usual.
pub fn restrict(
    st: &AppState,
    parts: &mut QueryParts,
    collection: &str,
    user: &crate::auth::UserAuth,
) -> Result<(), ApiError> {
    restrict_with(&st.auth.rules(), parts, collection, user)
}

/// [`restrict`] with the given rules.
pub fn restrict_with(
    rules: &herald_rules::Rules,
    parts: &mut QueryParts,
    collection: &str,
    user: &crate::auth::UserAuth,
) -> Result<(), ApiError> {
    herald_db::check_collection(collection)?;
    query_of(parts)?;
    let rule = rules
        .read_filter(collection, &user.ctx)
        .map_err(crate::api::auth::read_denied)?;
    parts.filter = Some(herald_rules::and_filters(parts.filter.as_ref(), rule));
    Ok(())
}

/// The query of a request or subscription; absent members are defaults.
pub fn query_of(parts: &QueryParts) -> Result<Query, ApiError> {
    parse_parts(parts, false)
}

/// [`query_of`] for a collection-group query or subscription: its cursors are positions in the
/// group's order, so they may end with a `_path` after the `_id` (`Query::with_group_cursors`).
pub fn group_query_of(parts: &QueryParts) -> Result<Query, ApiError> {
    parse_parts(parts, true)
}

fn parse_parts(parts: &QueryParts, group: bool) -> Result<Query, ApiError> {
    let get = or_null;
    if !matches!(get(&parts.filter), Value::Null | Value::Object(_)) {
        return Err(ApiError::new(
            ErrorCode::BadFilter,
            "filter must be an object",
        ));
    }
    Query::from_parts(
        get(&parts.filter),
        get(&parts.sort),
        get(&parts.skip),
        get(&parts.limit),
        get(&parts.projection),
    )
    .and_then(|q| {
        let members = [
            get(&parts.start_at),
            get(&parts.start_after),
            get(&parts.end_at),
            get(&parts.end_before),
        ];
        match group {
            true => q.with_group_cursors(members),
            false => q.with_cursors(members),
        }
    })
    .map_err(|e| ApiError::lib(e.code(), e.to_string()))
}

/// An absent member as `null`, what herald-query takes for "default".
pub fn or_null(v: &Option<Value>) -> &Value {
    static NULL: Value = Value::Null;
    v.as_ref().unwrap_or(&NULL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field-by-field conversion and the db's serde form agree: decoding what the db would
    /// print gives the same protocol value, for every kind of plan.
    #[test]
    fn explain_of_matches_the_db_serialization() {
        use herald_db::PlanDescription as Db;
        let plan = Db::Union {
            plans: vec![
                Db::Ids { ids: 2 },
                Db::Index {
                    index: "c:n".into(),
                    ranges: 3,
                },
                Db::OrderedIndex {
                    index: "c:t".into(),
                    descending: true,
                    merged: 2,
                    nulls_by_scan: true,
                },
                Db::Intersection {
                    indexes: vec!["f:a".into(), "f:b".into()],
                },
                Db::CollectionScan,
            ],
        };
        let estimate = herald_db::Estimate {
            keys: 3,
            docs: 2,
            at_least: true,
        };
        let e = herald_db::Explain {
            plan,
            keys_examined: 7,
            docs_examined: 5,
            returned: 4,
            keys_sampled: 9,
            estimate: Some(estimate),
            alternatives: vec![herald_db::Alternative {
                plan: Db::CollectionScan,
                estimate,
                abandoned: true,
            }],
        };
        let decoded: Explain = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
        assert_eq!(explain_of(e), decoded);
    }
}
