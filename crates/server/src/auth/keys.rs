//! API keys: random secrets with a role (`admin` or `service`), of which only the SHA-256 hash
//! is stored (the system record `api_keys`). The secret is shown once, when created. Revoking
//! removes the hash from memory once the removal is durable, so a revoked key fails from the
//! next request on.

use herald_db::{Db, DbError};
use herald_protocol::{KeyCreated, KeyInfo};
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::RwLock;

/// The system record holding the key list.
pub const RECORD: &str = "api_keys";
/// Most API keys.
pub const KEYS_MAX: usize = 1000;
/// Longest key name.
pub const KEY_NAME_BYTES_MAX: usize = 256;
/// Every API key starts with this, so a bearer value is told from a JWT at a glance.
pub const KEY_PREFIX: &str = "hk_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Service,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "service" => Some(Role::Service),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Service => "service",
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    id: String,
    name: String,
    role: Role,
    hash: String,
    created_ms: u64,
}

impl Entry {
    fn public(&self) -> KeyInfo {
        KeyInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            role: self.role.as_str().to_string(),
            created_at: self.created_ms,
        }
    }
}

/// SHA-256 of a key, hex.
pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The API keys: the durable list and an in-memory map from hash to entry.
pub struct KeyStore {
    entries: RwLock<Vec<Entry>>,
    by_hash: RwLock<HashMap<String, (String, Role)>>,
    /// Serializes changes (read-modify-write of the record).
    change: std::sync::Mutex<()>,
}

impl KeyStore {
    pub fn load(db: &Db) -> Result<KeyStore, DbError> {
        let store = KeyStore {
            entries: RwLock::new(Vec::new()),
            by_hash: RwLock::new(HashMap::new()),
            change: std::sync::Mutex::new(()),
        };
        store.install(Self::read(db)?);
        Ok(store)
    }

    /// Replaces the keys in memory with the stored ones (a follower learns of keys created
    /// and revoked on the primary this way).
    pub fn reload(&self, db: &Db) -> Result<(), DbError> {
        let _g = self.change.lock().expect("keys change lock");
        self.install(Self::read(db)?);
        Ok(())
    }

    /// The stored keys.
    fn read(db: &Db) -> Result<Vec<Entry>, DbError> {
        let mut entries = Vec::new();
        if let Some(Value::Array(items)) = db.system_get(RECORD)? {
            for it in items {
                let s = |k: &str| it.get(k).and_then(Value::as_str).map(str::to_string);
                let (Some(id), Some(hash), Some(role)) =
                    (s("id"), s("hash"), s("role").and_then(|r| Role::parse(&r)))
                else {
                    return Err(DbError::Corrupt(format!("API key record: {it}")));
                };
                entries.push(Entry {
                    id,
                    name: s("name").unwrap_or_default(),
                    role,
                    hash,
                    created_ms: it.get("createdAt").and_then(Value::as_u64).unwrap_or(0),
                });
            }
        }
        Ok(entries)
    }

    fn install(&self, entries: Vec<Entry>) {
        let map = entries
            .iter()
            .map(|e| (e.hash.clone(), (e.id.clone(), e.role)))
            .collect();
        *self.by_hash.write().expect("keys lock") = map;
        *self.entries.write().expect("keys lock") = entries;
    }

    fn persist(db: &Db, entries: &[Entry]) -> Result<(), DbError> {
        let v: Vec<Value> = entries
            .iter()
            .map(|e| json!({"id": e.id, "name": e.name, "role": e.role.as_str(), "hash": e.hash, "createdAt": e.created_ms}))
            .collect();
        db.system_put(RECORD, Some(Value::Array(v)))
    }

    /// The role of a presented key, if it is a live key.
    pub fn lookup(&self, secret: &str) -> Option<(String, Role)> {
        self.by_hash
            .read()
            .expect("keys lock")
            .get(&hash_key(secret))
            .cloned()
    }

    /// Creates a key; returns its public description and the secret (shown once). Blocks on
    /// the durable write.
    pub fn create(
        &self,
        db: &Db,
        name: String,
        role: Role,
        now_ms: u64,
    ) -> Result<KeyCreated, DbError> {
        let _g = self.change.lock().expect("keys change lock");
        let mut entries = self.entries.read().expect("keys lock").clone();
        if entries.len() >= KEYS_MAX {
            return Err(DbError::LimitExceeded(format!(
                "at most {KEYS_MAX} API keys"
            )));
        }
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut secret);
        let mut id = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut id);
        let secret = format!("{KEY_PREFIX}{}", hex::encode(secret));
        let entry = Entry {
            id: hex::encode(id),
            name,
            role,
            hash: hash_key(&secret),
            created_ms: now_ms,
        };
        let KeyInfo {
            id,
            name,
            role,
            created_at,
        } = entry.public();
        let out = KeyCreated {
            id,
            name,
            role,
            created_at,
            key: secret,
        };
        entries.push(entry);
        Self::persist(db, &entries)?;
        self.install(entries);
        Ok(out)
    }

    pub fn list(&self) -> Vec<KeyInfo> {
        self.entries
            .read()
            .expect("keys lock")
            .iter()
            .map(Entry::public)
            .collect()
    }

    /// Revokes a key; `false` if there is no such key.
    pub fn revoke(&self, db: &Db, id: &str) -> Result<bool, DbError> {
        let _g = self.change.lock().expect("keys change lock");
        let mut entries = self.entries.read().expect("keys lock").clone();
        let before = entries.len();
        entries.retain(|e| e.id != id);
        if entries.len() == before {
            return Ok(false);
        }
        Self::persist(db, &entries)?;
        self.install(entries);
        Ok(true)
    }
}
