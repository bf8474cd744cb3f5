//! Who is asking: API keys (admin, service), end-user JSON Web Tokens, or nobody in particular
//! when authentication is not configured (everything open, loopback only). Also holds the
//! current security rules (the system record `rules`), swapped whole when replaced.
//!
//! A request's [`Principal`] decides everything downstream: `Open`, `Admin` and `Service` bypass
//! the rules (only `Open` and `Admin` may administer keys, rules, triggers and indexes); a
//! `User` reads through the read rule ANDed into every query and subscription and writes
//! through a guard evaluated inside the storage job.

pub mod keys;
pub mod token;

use herald_db::{Db, DbError};
use herald_rules::Rules;
use keys::{KeyStore, Role, KEY_PREFIX};
use std::sync::{Arc, RwLock};
pub use token::UserAuth;
use token::Verifier;

/// The system record holding the rules.
const RULES_RECORD: &str = "rules";

/// Authentication settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct AuthOptions {
    /// The bootstrap admin key (`--admin-key-file`).
    pub admin_key: Option<String>,
    /// The HS256 secret (`--jwt-secret-file`).
    pub jwt_secret: Option<Vec<u8>>,
    /// PEM public keys, Ed25519 or P-256 (`--jwt-public-keys`).
    pub jwt_public_keys: Option<Vec<u8>>,
    /// Rules installed at start (`--rules`), replacing the stored ones.
    pub rules: Option<Rules>,
    /// Origins a browser may open WebSockets and event streams from (`--allowed-origins`);
    /// `None`: any.
    pub allowed_origins: Option<Vec<String>>,
}

impl AuthOptions {
    /// Authentication is on when any credential source is configured.
    pub fn enabled(&self) -> bool {
        self.admin_key.is_some() || self.jwt_secret.is_some() || self.jwt_public_keys.is_some()
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Principal {
    /// Authentication is not configured: everything is allowed.
    Open,
    Admin,
    Service,
    User(Arc<UserAuth>),
}

impl Principal {
    /// May administer keys, rules, triggers and indexes.
    pub fn is_admin(&self) -> bool {
        matches!(self, Principal::Open | Principal::Admin)
    }

    /// The end user, if rules apply.
    pub fn user(&self) -> Option<&Arc<UserAuth>> {
        match self {
            Principal::User(u) => Some(u),
            _ => None,
        }
    }
}

/// Why credentials were refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Unauthenticated(pub String);

pub struct Auth {
    enabled: bool,
    admin_hash: Option<String>,
    verifier: Verifier,
    pub keys: KeyStore,
    rules: RwLock<Arc<Rules>>,
    /// Bumped when the rules change: end-user live connections close then, so no subscription
    /// keeps a read filter the new rules would not give.
    rules_epoch: tokio::sync::watch::Sender<u64>,
    /// Bumped when an API key is revoked: live connections opened with a key re-check it.
    keys_epoch: tokio::sync::watch::Sender<u64>,
    /// The commit seq when the rules last changed (0: not since start; an end user's resume from
    /// a seq at or before it starts afresh, since the list was built under other rules).
    rules_seq: std::sync::atomic::AtomicU64,
    pub allowed_origins: Option<Vec<String>>,
    /// The database's wall clock: token expiry is checked against it, so a test's manual clock
    /// expires tokens without waiting.
    clock: herald_db::Clock,
}

impl Auth {
    /// Loads the stored keys and rules; installs `--rules` if given.
    pub fn load(db: &Db, opts: AuthOptions) -> Result<Auth, String> {
        let enabled = opts.enabled();
        let verifier = Verifier::new(opts.jwt_secret.as_deref(), opts.jwt_public_keys.as_deref())?;
        let keys = KeyStore::load(db).map_err(|e| format!("loading API keys: {e}"))?;
        let stored = db
            .system_get(RULES_RECORD)
            .map_err(|e| format!("loading the rules: {e}"))?;
        let rules_given = opts
            .rules
            .as_ref()
            .is_some_and(|r| Some(r.source()) != stored.as_ref());
        let rules = match opts.rules {
            Some(r) => {
                db.system_put(RULES_RECORD, Some(r.source().clone()))
                    .map_err(|e| format!("storing the rules: {e}"))?;
                r
            }
            None => match stored {
                Some(v) => Rules::parse(&v).map_err(|e| format!("the stored rules: {e}"))?,
                None => Rules::default(),
            },
        };
        if let Some(k) = &opts.admin_key {
            if k.len() < 16 {
                return Err("the admin key must be at least 16 characters".into());
            }
        }
        Ok(Auth {
            enabled,
            admin_hash: opts.admin_key.as_deref().map(keys::hash_key),
            verifier,
            keys,
            rules: RwLock::new(Arc::new(rules)),
            rules_epoch: tokio::sync::watch::Sender::new(0),
            keys_epoch: tokio::sync::watch::Sender::new(0),
            // Rules given at start may differ from those of a list built before the restart.
            rules_seq: std::sync::atomic::AtomicU64::new(if rules_given { db.seq() } else { 0 }),
            allowed_origins: opts.allowed_origins,
            clock: db.clock().clone(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The principal of a bearer credential (`None`: no credential presented).
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, Unauthenticated> {
        if !self.enabled {
            return Ok(Principal::Open);
        }
        let Some(token) = bearer else {
            return Err(Unauthenticated(
                "missing credentials: send 'Authorization: Bearer <token or API key>'".into(),
            ));
        };
        if self.admin_hash.as_deref() == Some(keys::hash_key(token).as_str()) {
            return Ok(Principal::Admin);
        }
        if token.starts_with(KEY_PREFIX) {
            return match self.keys.lookup(token) {
                Some((_, Role::Admin)) => Ok(Principal::Admin),
                Some((_, Role::Service)) => Ok(Principal::Service),
                None => Err(Unauthenticated("unknown or revoked API key".into())),
            };
        }
        self.verifier
            .verify(token, self.clock.now_ms())
            .map(|u| Principal::User(Arc::new(u)))
            .map_err(Unauthenticated)
    }

    /// The clock tokens expire by (the database's).
    pub fn clock(&self) -> &herald_db::Clock {
        &self.clock
    }

    /// Whether end-user tokens can be verified at all.
    pub fn accepts_tokens(&self) -> bool {
        self.verifier.is_configured()
    }

    /// The current rules (a snapshot: a replacement does not change it).
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().expect("rules lock").clone()
    }

    /// Replaces the rules durably; blocks on the write.
    pub fn set_rules(&self, db: &Db, rules: Rules) -> Result<(), DbError> {
        let mut cur = self.rules.write().expect("rules lock");
        db.system_put(RULES_RECORD, Some(rules.source().clone()))?;
        *cur = Arc::new(rules);
        self.rules_seq
            .store(db.seq(), std::sync::atomic::Ordering::Release);
        self.rules_epoch.send_modify(|e| *e += 1);
        Ok(())
    }

    /// Revokes an API key (blocks on the durable write); live connections opened with it close.
    pub fn revoke_key(&self, db: &Db, id: &str) -> Result<bool, DbError> {
        let revoked = self.keys.revoke(db, id)?;
        if revoked {
            self.keys_epoch.send_modify(|e| *e += 1);
        }
        Ok(revoked)
    }

    /// Takes up a change of the system record `name` made elsewhere (replicated from the
    /// primary): the rules or the API keys are read again from `db`, and live connections react
    /// as to a change made here (end users' close on new rules; key connections re-check their
    /// key). Other records are not Auth's: `Ok(false)`.
    pub fn reload_from_db(&self, db: &Db, name: &str) -> Result<bool, String> {
        match name {
            RULES_RECORD => {
                let rules = match db.system_get(RULES_RECORD).map_err(|e| e.to_string())? {
                    Some(v) => Rules::parse(&v).map_err(|e| format!("the stored rules: {e}"))?,
                    None => Rules::default(),
                };
                let mut cur = self.rules.write().expect("rules lock");
                if cur.source() == rules.source() {
                    return Ok(true);
                }
                *cur = Arc::new(rules);
                self.rules_seq
                    .store(db.seq(), std::sync::atomic::Ordering::Release);
                self.rules_epoch.send_modify(|e| *e += 1);
                Ok(true)
            }
            keys::RECORD => {
                self.keys.reload(db).map_err(|e| e.to_string())?;
                // Connections opened with a key re-check it; one still valid stays open.
                self.keys_epoch.send_modify(|e| *e += 1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Changes when an API key is revoked.
    pub fn keys_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.keys_epoch.subscribe()
    }

    /// The commit seq at the last rules change.
    pub fn rules_seq(&self) -> u64 {
        self.rules_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Changes when the rules are replaced.
    pub fn rules_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rules_epoch.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_db::{DbOptions, Durability};
    use serde_json::json;

    fn open(dir: &std::path::Path) -> Db {
        let opts = DbOptions {
            durability: Durability::NoSync,
            ..Default::default()
        };
        Db::open(dir, opts).expect("open")
    }

    /// A change of the rules or keys records that did not go through this `Auth` (as on a
    /// follower, where replication writes them) is taken up by `reload_from_db`, with the same
    /// signals to live connections as a change made here.
    #[test]
    fn reload_from_db_takes_up_rules_and_keys_changed_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let opts = AuthOptions {
            admin_key: Some("admin-key-0123456789".into()),
            ..Default::default()
        };
        let auth = Auth::load(&db, opts).unwrap();
        let mut rules_rx = auth.rules_changed();
        let mut keys_rx = auth.keys_changed();

        // The rules record changes under Auth's feet.
        let source = json!({"rules": [{"match": "notes/{n}", "read": {}}]});
        db.system_put(RULES_RECORD, Some(source.clone())).unwrap();
        assert_ne!(auth.rules().source(), &source);
        assert_eq!(auth.reload_from_db(&db, RULES_RECORD), Ok(true));
        assert_eq!(auth.rules().source(), &source);
        assert!(rules_rx.has_changed().unwrap());
        rules_rx.borrow_and_update();
        assert_eq!(auth.rules_seq(), db.seq());
        // The same rules again: nothing to tell the connections.
        assert_eq!(auth.reload_from_db(&db, RULES_RECORD), Ok(true));
        assert!(!rules_rx.has_changed().unwrap());

        // A key created by another writer of the record (the primary).
        let elsewhere = KeyStore::load(&db).unwrap();
        let created = elsewhere
            .create(&db, "svc".into(), Role::Service, 0)
            .unwrap();
        assert!(auth.authenticate(Some(&created.key)).is_err());
        assert_eq!(auth.reload_from_db(&db, keys::RECORD), Ok(true));
        assert_eq!(
            auth.authenticate(Some(&created.key)),
            Ok(Principal::Service)
        );
        assert!(keys_rx.has_changed().unwrap());
        keys_rx.borrow_and_update();

        // ...and revoked there.
        assert!(elsewhere.revoke(&db, &created.id).unwrap());
        assert_eq!(auth.reload_from_db(&db, keys::RECORD), Ok(true));
        assert!(auth.authenticate(Some(&created.key)).is_err());
        assert!(keys_rx.has_changed().unwrap());

        // Records that are not Auth's.
        assert_eq!(auth.reload_from_db(&db, "something_else"), Ok(false));
    }
}
