//! Small system records kept beside the data (the server's API keys and security rules):
//! named JSON values in the `meta` table under `system\0<name>`, written through the writer like
//! everything else (durable when acknowledged) and invisible to the document API, queries, the
//! commit log, live queries and triggers.

use super::Db;
use crate::error::DbError;
use herald_storage::{Table, WriteTxn};
use serde_json::Value;

pub(super) const META_SYSTEM_PREFIX: &[u8] = b"system\0";

fn system_key(name: &str) -> Vec<u8> {
    let mut k = META_SYSTEM_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

impl Db {
    /// The system record `name`, if stored.
    pub fn system_get(&self, name: &str) -> Result<Option<Value>, DbError> {
        let read = self.inner.store.read()?;
        match read.get(Table::Meta, &system_key(name))? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| DbError::Corrupt(format!("system record {name}: {e}"))),
            None => Ok(None),
        }
    }

    /// Stores (or with `None` deletes) the system record `name`; returns once durable.
    pub fn system_put(&self, name: &str, value: Option<Value>) -> Result<(), DbError> {
        let key = system_key(name);
        let ticket = self.inner.store.submit(move |txn: &mut WriteTxn<'_>| {
            match value {
                Some(v) => txn.put(
                    Table::Meta,
                    key,
                    serde_json::to_vec(&v).expect("JSON serializes"),
                )?,
                None => txn.delete(Table::Meta, key),
            }
            Ok::<_, DbError>(())
        })?;
        Ok(ticket.wait()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Db, DbOptions};
    use serde_json::json;

    #[test]
    fn system_records_survive_reopen_and_stay_out_of_documents() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), DbOptions::default()).unwrap();
            assert_eq!(db.system_get("rules").unwrap(), None);
            db.system_put("rules", Some(json!({"rules": []}))).unwrap();
            db.system_put("gone", Some(json!(1))).unwrap();
            db.system_put("gone", None).unwrap();
            assert_eq!(db.seq(), 0, "system records take no commit seq");
            db.close().unwrap();
        }
        let db = Db::open(dir.path(), DbOptions::default()).unwrap();
        assert_eq!(db.system_get("rules").unwrap(), Some(json!({"rules": []})));
        assert_eq!(db.system_get("gone").unwrap(), None);
    }
}
