//! [`TaskHost`]: the `db` handle a trigger function calls. Reads come from the database and
//! see the task's own earlier writes; writes are buffered and committed only when the function
//! returns, together with the task's removal from its queue.
//!
//! Isolation: every document the function reads by id is remembered with its version, and the
//! commit re-checks those versions (`task_conflict` re-runs the task on fresh data), so a
//! read-modify-write through `get` + `put` never loses a concurrent update. `update` with
//! operators is applied to the document as it is at commit time, so counters (`$inc`) compose
//! with concurrent writers without conflicts. Query results are not re-checked.

use herald_db::triggers::{ReadCheck, TASK_WRITES_MAX};
use herald_db::{check_collection, check_segment, Db, DbError, Write};
use herald_query::{Query, Update};
use herald_script::{Host, HostError};
use serde_json::{Map, Value};
use std::collections::HashMap;

type Key = (String, String);

pub struct TaskHost<'a> {
    db: &'a Db,
    /// Documents as this task has left them: `None` = deleted.
    overlay: HashMap<Key, Option<Value>>,
    writes: Vec<Write>,
    /// Version of each document read by id (0 = missing), first read wins.
    reads: HashMap<Key, u64>,
}

fn host_err(e: DbError) -> HostError {
    HostError {
        code: e.code().to_string(),
        message: e.to_string(),
    }
}

fn bad(message: impl Into<String>) -> HostError {
    HostError {
        code: "bad_request".into(),
        message: message.into(),
    }
}

impl<'a> TaskHost<'a> {
    pub fn new(db: &'a Db) -> TaskHost<'a> {
        TaskHost {
            db,
            overlay: HashMap::new(),
            writes: Vec::new(),
            reads: HashMap::new(),
        }
    }

    /// The buffered writes and the versions to re-check at commit.
    pub fn finish(self) -> (Vec<Write>, Vec<ReadCheck>) {
        let reads = self
            .reads
            .into_iter()
            .map(|((collection, id), version)| ReadCheck {
                collection,
                id,
                version,
            })
            .collect();
        (self.writes, reads)
    }

    fn check(collection: &str, id: &str) -> Result<(), HostError> {
        check_collection(collection).map_err(host_err)?;
        check_segment(id, "document id").map_err(host_err)
    }

    fn push(&mut self, w: Write) -> Result<(), HostError> {
        if self.writes.len() >= TASK_WRITES_MAX {
            return Err(HostError {
                code: "limit_exceeded".into(),
                message: format!("a trigger task may make at most {TASK_WRITES_MAX} writes"),
            });
        }
        self.writes.push(w);
        Ok(())
    }

    /// The document as this task sees it, recording the version read from the database.
    fn current(&mut self, collection: &str, id: &str) -> Result<Option<Value>, HostError> {
        let key = (collection.to_string(), id.to_string());
        if let Some(doc) = self.overlay.get(&key) {
            return Ok(doc.clone());
        }
        let stored = self.db.get(collection, id).map_err(host_err)?;
        self.reads
            .entry(key)
            .or_insert(stored.as_ref().map_or(0, |s| s.version));
        Ok(stored.map(|s| s.doc))
    }
}

/// Puts `_id` first, as stored documents have it.
fn with_id(doc: Value, id: &str) -> Result<Value, HostError> {
    let Value::Object(m) = doc else {
        return Err(bad("a document must be an object"));
    };
    let mut out = Map::with_capacity(m.len() + 1);
    out.insert("_id".into(), Value::String(id.to_string()));
    for (k, v) in m {
        if k == "_id" {
            if v.as_str() != Some(id) {
                return Err(bad(format!(
                    "the document's _id {v} contradicts the id {id:?}"
                )));
            }
            continue;
        }
        out.insert(k, v);
    }
    Ok(Value::Object(out))
}

impl Host for TaskHost<'_> {
    fn get(&mut self, collection: &str, id: &str) -> Result<Option<Value>, HostError> {
        Self::check(collection, id)?;
        self.current(collection, id)
    }

    fn query(&mut self, spec: &Value) -> Result<Vec<Value>, HostError> {
        let Value::Object(m) = spec else {
            return Err(bad(
                "query takes {collection, filter?, sort?, skip?, limit?}",
            ));
        };
        let collection = m
            .get("collection")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("query needs a 'collection' string"))?
            .to_string();
        check_collection(&collection).map_err(host_err)?;
        let rest: Map<String, Value> = m
            .iter()
            .filter(|(k, _)| *k != "collection")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let query = Query::parse(&Value::Object(rest)).map_err(|e| host_err(e.into()))?;
        let mine: Vec<(&String, &Option<Value>)> = self
            .overlay
            .iter()
            .filter(|((c, _), _)| *c == collection)
            .map(|((_, id), doc)| (id, doc))
            .collect();
        if mine.is_empty() {
            return Ok(self.db.query(&collection, &query).map_err(host_err)?.docs);
        }
        // Ask the database for enough documents that, after dropping the ones this task has
        // rewritten, the window [skip, skip+limit) is still covered; then merge in this
        // task's own versions and run the query over the union.
        let mut base = query.clone();
        base.skip = 0;
        base.limit = query.limit.map(|l| query.skip + l + mine.len());
        base.projection = Default::default();
        let stored = self.db.query(&collection, &base).map_err(host_err)?.docs;
        let mut union: Vec<Value> = stored
            .into_iter()
            .filter(|d| {
                let id = d.get("_id").and_then(Value::as_str).unwrap_or_default();
                !mine.iter().any(|(mid, _)| mid.as_str() == id)
            })
            .collect();
        union.extend(mine.iter().filter_map(|(_, doc)| (*doc).clone()));
        Ok(query.run(&union))
    }

    fn put(&mut self, collection: &str, id: &str, doc: Value) -> Result<(), HostError> {
        Self::check(collection, id)?;
        let doc = with_id(doc, id)?;
        self.push(Write::Put {
            collection: collection.into(),
            id: id.into(),
            doc: doc.clone(),
            if_version: None,
        })?;
        self.overlay
            .insert((collection.into(), id.into()), Some(doc));
        Ok(())
    }

    fn insert(&mut self, collection: &str, doc: Value) -> Result<String, HostError> {
        let id = match doc.get("_id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(bad(format!("_id must be a string, got {other}"))),
            None => herald_db::generate_id(),
        };
        Self::check(collection, &id)?;
        if self.current(collection, &id)?.is_some() {
            return Err(host_err(DbError::AlreadyExists {
                collection: collection.into(),
                id,
            }));
        }
        let doc = with_id(doc, &id)?;
        self.push(Write::Insert {
            collection: collection.into(),
            id: Some(id.clone()),
            doc: doc.clone(),
        })?;
        self.overlay
            .insert((collection.into(), id.clone()), Some(doc));
        Ok(id)
    }

    fn update(&mut self, collection: &str, id: &str, update: Value) -> Result<(), HostError> {
        Self::check(collection, id)?;
        let parsed = Update::parse(&update).map_err(|e| host_err(e.into()))?;
        // What the task will see afterwards; the commit applies the operators again to the
        // document as it is then. The base version is not recorded: `$inc` needs no lock.
        let key = (collection.to_string(), id.to_string());
        let before = match self.overlay.get(&key) {
            Some(doc) => doc.clone(),
            None => self
                .db
                .get(collection, id)
                .map_err(host_err)?
                .map(|s| s.doc),
        };
        let Some(before) = before else {
            return Err(host_err(DbError::NotFound {
                collection: collection.into(),
                id: id.into(),
            }));
        };
        let now = self.db.clock().now_ms() as i64;
        let after = parsed.apply(&before, now).map_err(|e| host_err(e.into()))?;
        self.push(Write::Update {
            collection: collection.into(),
            id: id.into(),
            update: parsed,
            upsert: false,
            if_version: None,
        })?;
        self.overlay.insert(key, Some(after));
        Ok(())
    }

    fn delete(&mut self, collection: &str, id: &str) -> Result<(), HostError> {
        Self::check(collection, id)?;
        self.push(Write::Delete {
            collection: collection.into(),
            id: id.into(),
            if_version: None,
        })?;
        self.overlay.insert((collection.into(), id.into()), None);
        Ok(())
    }
}
