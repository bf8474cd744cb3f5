//! What a live view watches: one collection, or a collection group (every collection whose
//! last segment is the group's name, including ones created after the view), and how a
//! group's documents and changes reach its view: known by full path (the change's id, since
//! ids repeat across collections), each document with `_path`, and a document the reader may
//! not see (its own collection's read rule, [`Restrict`]) absent, so the rule is part of the
//! filtering before the window, never a post-filter.

use crate::db::Db;
use crate::error::DbError;
use crate::exec::{with_path, Restrict, GROUP_COLLECTIONS_MAX};
use crate::layout::group_scope;
use crate::names::group_of;
use herald_query::Query;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A view's scope.
#[derive(Clone)]
pub enum Scope {
    Collection(String),
    Group(Arc<GroupScope>),
}

/// A collection-group view's scope.
pub struct GroupScope {
    pub name: String,
    /// The query as the subscriber wrote it (the view's own query also sorts by `_path`).
    pub query: Query,
    pub restrict: Option<Arc<dyn Restrict>>,
    /// Per collection, the query that decides visibility there (`None`: nothing visible);
    /// at most [`GROUP_COLLECTIONS_MAX`] remembered.
    visible: Mutex<HashMap<String, Option<Arc<Query>>>>,
}

impl Scope {
    pub fn group(name: &str, query: Query, restrict: Option<Arc<dyn Restrict>>) -> Scope {
        Scope::Group(Arc::new(GroupScope {
            name: name.to_string(),
            query,
            restrict,
            visible: Mutex::new(HashMap::new()),
        }))
    }

    /// The key the matching grid files the view under: the collection, or `*/group`.
    pub fn key(&self) -> String {
        match self {
            Scope::Collection(c) => c.clone(),
            Scope::Group(g) => group_scope(&g.name),
        }
    }

    /// Whether a change to `collection` is in scope.
    pub fn holds(&self, collection: &str) -> bool {
        match self {
            Scope::Collection(c) => c == collection,
            Scope::Group(g) => group_of(collection) == g.name,
        }
    }

    /// The first `n` documents of the result in the newest snapshot (unprojected, skip 0),
    /// and its seq. `query`: the view's query (for a group, its user query is used).
    pub fn top(
        &self,
        db: &Db,
        query: &Query,
        n: Option<usize>,
    ) -> Result<(Vec<Value>, u64), DbError> {
        let window = |q: &Query| {
            let mut q = q.clone();
            q.skip = 0;
            q.projection = herald_query::Projection::all();
            q.limit = n;
            q
        };
        let out = match self {
            Scope::Collection(c) => db.query(c, &window(query))?,
            Scope::Group(g) => db.query_group(&g.name, &window(&g.query), g.restrict.as_deref())?,
        };
        Ok((out.docs, out.seq))
    }

    /// The id a change's document has in the view: its id, or for a group its full path.
    pub fn id_of(&self, collection: &str, id: &str) -> String {
        match self {
            Scope::Collection(_) => id.to_string(),
            Scope::Group(_) => format!("{collection}/{id}"),
        }
    }

    /// An image of a change as the view sees it: for a group, with `_path`, and absent when
    /// the reader may not see it.
    pub fn image(&self, collection: &str, id: &str, doc: Option<&Value>) -> Option<Value> {
        let doc = doc?;
        match self {
            Scope::Collection(_) => Some(doc.clone()),
            Scope::Group(g) => {
                let visible = match &g.restrict {
                    None => true,
                    Some(r) => {
                        let mut cache = g.visible.lock().expect("visible lock");
                        if !cache.contains_key(collection) {
                            if cache.len() >= GROUP_COLLECTIONS_MAX {
                                cache.clear();
                            }
                            let q = r.query_for(collection).map(Arc::new);
                            cache.insert(collection.to_string(), q);
                        }
                        cache[collection]
                            .as_ref()
                            .is_some_and(|q| q.filter.matches(doc))
                    }
                };
                visible.then(|| with_path(doc.clone(), collection, id))
            }
        }
    }
}
