//! A `HashMap`-backed [`Host`] that records what scripts ask of it, shared by the integration tests.

#![allow(dead_code)]

use std::collections::HashMap;

use herald_script::{Host, HostError, Limits, Sandbox};
use serde_json::{Map, Value};

/// An in-memory database: `docs[collection][id]`. `query` records each spec and answers with
/// `query_result`; `fail_next` makes the next call of any method fail with that error.
#[derive(Default)]
pub struct MockHost {
    pub docs: HashMap<String, HashMap<String, Value>>,
    pub queries: Vec<Value>,
    pub query_result: Vec<Value>,
    pub fail_next: Option<HostError>,
    pub calls: usize,
    pub next_id: u64,
}

impl MockHost {
    pub fn doc(&self, collection: &str, id: &str) -> Option<&Value> {
        self.docs.get(collection)?.get(id)
    }

    pub fn with_doc(mut self, collection: &str, id: &str, doc: Value) -> MockHost {
        self.docs
            .entry(collection.to_string())
            .or_default()
            .insert(id.to_string(), doc);
        self
    }

    fn begin(&mut self) -> Result<(), HostError> {
        self.calls += 1;
        self.fail_next.take().map_or(Ok(()), Err)
    }

    fn not_found(collection: &str, id: &str) -> HostError {
        HostError::new("not_found", format!("no document {id} in {collection}"))
    }
}

impl Host for MockHost {
    fn get(&mut self, collection: &str, id: &str) -> Result<Option<Value>, HostError> {
        self.begin()?;
        Ok(self.doc(collection, id).cloned())
    }

    fn query(&mut self, spec: &Value) -> Result<Vec<Value>, HostError> {
        self.begin()?;
        self.queries.push(spec.clone());
        Ok(self.query_result.clone())
    }

    fn put(&mut self, collection: &str, id: &str, doc: Value) -> Result<(), HostError> {
        self.begin()?;
        self.docs
            .entry(collection.to_string())
            .or_default()
            .insert(id.to_string(), doc);
        Ok(())
    }

    fn insert(&mut self, collection: &str, mut doc: Value) -> Result<String, HostError> {
        self.begin()?;
        let id = match doc.get("_id").and_then(Value::as_str) {
            Some(id) => id.to_string(),
            None => {
                self.next_id += 1;
                format!("gen-{}", self.next_id)
            }
        };
        let docs = self.docs.entry(collection.to_string()).or_default();
        if docs.contains_key(&id) {
            return Err(HostError::new(
                "duplicate_id",
                format!("{id} exists in {collection}"),
            ));
        }
        doc["_id"] = Value::String(id.clone());
        docs.insert(id.clone(), doc);
        Ok(id)
    }

    /// Understands `$set` and `$unset` of top-level fields, which is all the tests need.
    fn update(&mut self, collection: &str, id: &str, update: Value) -> Result<(), HostError> {
        self.begin()?;
        let doc = self
            .docs
            .get_mut(collection)
            .and_then(|docs| docs.get_mut(id))
            .ok_or_else(|| Self::not_found(collection, id))?;
        let fields = doc.as_object_mut().expect("documents are objects");
        for (op, args) in update.as_object().expect("update is an object") {
            let args = args.as_object().cloned().unwrap_or_else(Map::new);
            match op.as_str() {
                "$set" => fields.extend(args),
                "$unset" => args.keys().for_each(|k| {
                    fields.shift_remove(k);
                }),
                other => {
                    return Err(HostError::new(
                        "bad_update",
                        format!("unknown operator {other}"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn delete(&mut self, collection: &str, id: &str) -> Result<(), HostError> {
        self.begin()?;
        self.docs
            .get_mut(collection)
            .and_then(|docs| docs.remove(id))
            .map(drop)
            .ok_or_else(|| Self::not_found(collection, id))
    }
}

pub fn sandbox() -> Sandbox {
    Sandbox::new(Limits::default()).expect("sandbox")
}

/// Runs `source` with `event` against `host` in a fresh default sandbox.
pub fn run_with(
    source: &str,
    event: Value,
    host: &mut MockHost,
) -> Result<(), herald_script::ScriptError> {
    sandbox().run(source, &event, host)
}

/// A trigger that must succeed: runs it and returns what it stored in `out/result`.
pub fn result_of(sandbox: &mut Sandbox, source: &str, event: Value) -> Value {
    let mut host = MockHost::default();
    sandbox
        .run(source, &event, &mut host)
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    host.doc("out", "result").cloned().unwrap_or(Value::Null)
}
