//! Applying rules for one end user: the values of the placeholders (`$$auth.uid`,
//! `$$auth.claims.<name>`, path variables) for that user, the read filter to AND into a query,
//! and write decisions from the before/after images. How placeholders are substituted is
//! `placeholders.rs`.

use crate::parse::{Rule, Rules};
use crate::placeholders::substitute;
use herald_query::Filter;
use serde_json::{json, Map, Value};

/// Who an end-user request comes from: the verified token's `sub` and its claims.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthCtx {
    pub uid: String,
    pub claims: Map<String, Value>,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// No rule matches the collection: end users may do nothing there.
    NoRule,
    /// The rule (or its absence for this operation, or a claim it needs) refuses.
    Denied,
    /// The write's document exists but the user may not read it: answer as for a missing one.
    Hidden,
}

/// A write, by its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    Create,
    Update,
    Delete,
}

impl WriteOp {
    /// The operation a before/after pair is; `None` for a write that changed nothing.
    pub fn of(before: Option<&Value>, after: Option<&Value>) -> Option<WriteOp> {
        match (before, after) {
            (None, Some(_)) => Some(WriteOp::Create),
            (Some(_), Some(_)) => Some(WriteOp::Update),
            (Some(_), None) => Some(WriteOp::Delete),
            (None, None) => None,
        }
    }
}

/// The value of `$$name` for this user and path; `None` when it does not exist (a missing claim).
fn lookup(name: &str, auth: &AuthCtx, vars: &[(&str, String)]) -> Option<Value> {
    if name == "auth.uid" {
        return Some(Value::String(auth.uid.clone()));
    }
    if let Some(path) = name.strip_prefix("auth.claims.") {
        let mut segs = path.split('.');
        let mut cur = auth.claims.get(segs.next()?)?;
        for s in segs {
            cur = cur.as_object()?.get(s)?;
        }
        return Some(cur.clone());
    }
    vars.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| Value::String(v.clone()))
}

fn resolved(filter: &Value, auth: &AuthCtx, vars: &[(&str, String)]) -> Option<Value> {
    substitute(filter, &mut |name: &str| lookup(name, auth, vars))
}

impl Rules {
    /// The filter `auth` may read `collection` through (to AND into every query and
    /// subscription), or why it may not read there at all.
    pub fn read_filter(&self, collection: &str, auth: &AuthCtx) -> Result<Value, Denial> {
        let (rule, vars) = self.find(collection).ok_or(Denial::NoRule)?;
        let read = rule.read.as_ref().ok_or(Denial::Denied)?;
        let f = resolved(read, auth, &vars).ok_or(Denial::Denied)?;
        // A claim of an unexpected type can make the filter not compile; that denies.
        Filter::parse(&f).map_err(|_| Denial::Denied)?;
        Ok(f)
    }

    /// Whether `auth` may read `doc` of `collection`.
    pub fn can_read(&self, collection: &str, doc: &Value, auth: &AuthCtx) -> Result<(), Denial> {
        let f = self.read_filter(collection, auth)?;
        let f = Filter::parse(&f).map_err(|_| Denial::Denied)?;
        if f.matches(doc) {
            Ok(())
        } else {
            Err(Denial::Hidden)
        }
    }

    /// Whether `auth` may make this write: `before`/`after` are the document before and after
    /// it (`None`: absent). A write whose document exists but is not readable is `Hidden`
    /// whatever its rule says, and so is a write that changes nothing (a delete of a missing
    /// document), so the answer never depends on whether a hidden document exists.
    pub fn check_write(
        &self,
        collection: &str,
        before: Option<&Value>,
        after: Option<&Value>,
        auth: &AuthCtx,
    ) -> Result<(), Denial> {
        let (rule, vars) = self.find(collection).ok_or(Denial::NoRule)?;
        if let Some(b) = before {
            self.can_read(collection, b, auth)
                .map_err(|_| Denial::Hidden)?;
        }
        let Some(op) = WriteOp::of(before, after) else {
            return Err(Denial::Hidden);
        };
        let filter = match op {
            WriteOp::Create => &rule.create,
            WriteOp::Update => &rule.update,
            WriteOp::Delete => &rule.delete,
        };
        let filter = filter.as_ref().ok_or(Denial::Denied)?;
        let f = resolved(filter, auth, &vars).ok_or(Denial::Denied)?;
        let f = Filter::parse(&f).map_err(|_| Denial::Denied)?;
        let mut envelope = Map::new();
        if let Some(b) = before {
            envelope.insert("before".into(), b.clone());
        }
        if let Some(a) = after {
            envelope.insert("after".into(), a.clone());
        }
        if !f.matches_map(&envelope) {
            return Err(Denial::Denied);
        }
        if op != WriteOp::Delete && !fields_allowed(rule, before, after) {
            return Err(Denial::Denied);
        }
        Ok(())
    }
}

/// With `fields`, every top-level field a write adds, changes or removes must be listed.
fn fields_allowed(rule: &Rule, before: Option<&Value>, after: Option<&Value>) -> bool {
    let Some(allowed) = &rule.fields else {
        return true;
    };
    let empty = Map::new();
    let b = before.and_then(Value::as_object).unwrap_or(&empty);
    let a = after.and_then(Value::as_object).unwrap_or(&empty);
    let changed = |k: &String| k != "_id" && !allowed.contains(k);
    a.iter().all(|(k, v)| !changed(k) || b.get(k) == Some(v))
        && b.keys().all(|k| !changed(k) || a.contains_key(k))
}

/// ANDs a rule's read filter into a user's query filter (`None` or `{}`: no filter).
pub fn and_filters(user: Option<&Value>, rule: Value) -> Value {
    let user_empty = match user {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(_) => false,
    };
    let rule_empty = rule.as_object().is_some_and(Map::is_empty);
    match (user_empty, rule_empty) {
        (true, _) => rule,
        (false, true) => user.cloned().unwrap_or(Value::Null),
        (false, false) => json!({"$and": [user.cloned().unwrap_or(Value::Null), rule]}),
    }
}
