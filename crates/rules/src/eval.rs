//! Applying rules for one end user: placeholder substitution (`$$auth.uid`,
//! `$$auth.claims.<name>`, path variables), the read filter to AND into a query, and write
//! decisions from the before/after images.
//!
//! Substitution is one pass over the rule's JSON, never over the user's query, and a
//! substituted value is never scanned again: a uid of `"$$auth.claims.admin"` stays a string.
//! A value that lands where a field's condition goes is wrapped in `{"$eq": value}` when it is
//! an object, so a claim such as `{"$ne": null}` is compared as data and never read as an
//! operator.

use crate::parse::{Rule, Rules};
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

pub(crate) type Resolve<'a> = dyn FnMut(&str) -> Option<Value> + 'a;

/// A filter with every `$$name` placeholder resolved; `None` when one does not resolve.
pub(crate) fn substitute(filter: &Value, resolve: &mut Resolve) -> Option<Value> {
    match filter {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, v) in m {
                let v = match k.as_str() {
                    "$and" | "$or" | "$nor" => match v {
                        Value::Array(xs) => Value::Array(
                            xs.iter()
                                .map(|x| substitute(x, resolve))
                                .collect::<Option<_>>()?,
                        ),
                        other => raw(other, resolve)?,
                    },
                    k if k.starts_with('$') => raw(v, resolve)?,
                    _ => field_value(v, resolve)?,
                };
                out.insert(k.clone(), v);
            }
            Some(Value::Object(out))
        }
        other => raw(other, resolve),
    }
}

fn placeholder(v: &Value) -> Option<&str> {
    v.as_str().and_then(|s| s.strip_prefix("$$"))
}

fn is_operator_object(m: &Map<String, Value>) -> bool {
    m.keys().next().is_some_and(|k| k.starts_with('$'))
}

/// The condition of a field: a placeholder, an operator object, or a literal.
fn field_value(v: &Value, resolve: &mut Resolve) -> Option<Value> {
    if let Some(name) = placeholder(v) {
        return Some(match resolve(name)? {
            obj @ Value::Object(_) => json!({ "$eq": obj }),
            other => other,
        });
    }
    match v {
        Value::Object(m) if is_operator_object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (op, arg) in m {
                let arg = match (op.as_str(), arg) {
                    ("$elemMatch", Value::Object(inner)) if !is_operator_object(inner) => {
                        substitute(arg, resolve)?
                    }
                    ("$elemMatch" | "$not", Value::Object(_)) => field_value(arg, resolve)?,
                    _ => raw(arg, resolve)?,
                };
                out.insert(op.clone(), arg);
            }
            Some(Value::Object(out))
        }
        other => raw(other, resolve),
    }
}

/// An operand or literal: placeholders become their values as they are.
fn raw(v: &Value, resolve: &mut Resolve) -> Option<Value> {
    if let Some(name) = placeholder(v) {
        return resolve(name);
    }
    Some(match v {
        Value::Array(xs) => {
            Value::Array(xs.iter().map(|x| raw(x, resolve)).collect::<Option<_>>()?)
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| Some((k.clone(), raw(x, resolve)?)))
                .collect::<Option<_>>()?,
        ),
        other => other.clone(),
    })
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
