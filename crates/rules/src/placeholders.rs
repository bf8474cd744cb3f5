//! Placeholder substitution in a rule's filter: every `$$name` replaced by the value a resolver
//! gives for it. Used to apply a rule for one user (`eval.rs`) and to validate a rule with
//! sample values (`parse.rs`); it knows neither users nor rule sets.
//!
//! Substitution is one pass over the rule's JSON, never over the user's query, and a
//! substituted value is never scanned again: a uid of `"$$auth.claims.admin"` stays a string.
//! A value that lands where a field's condition goes is wrapped in `{"$eq": value}` when it is
//! an object, so a claim such as `{"$ne": null}` is compared as data and never read as an
//! operator.

use serde_json::{json, Map, Value};

/// The value of a placeholder, given its name without the `$$`; `None` when it has none.
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
