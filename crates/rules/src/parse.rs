//! Parsing and validating a rule set: `{"rules":[{"match","read","create","update","delete",
//! "fields"}]}`. Validation is complete: a rule set that parses here cannot fail later for a
//! reason of its own (a token may still lack a claim a rule needs; that denies, see `eval.rs`).

use crate::placeholders::{substitute, Resolve};
use crate::RulesError;
use herald_query::Filter;
use serde_json::Value;
use std::collections::BTreeSet;

/// Most rules in one set.
pub const RULES_MAX: usize = 1000;
/// Largest rule set, as JSON text.
pub const RULES_BYTES_MAX: usize = 1 << 20;
/// Most segments in a `match` pattern.
pub const PATTERN_SEGMENTS_MAX: usize = 64;

/// One segment of a `match` pattern.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seg {
    Lit(String),
    Var(String),
}

/// A validated rule.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// The collection part of the pattern (all segments but the last).
    pub(crate) collection: Vec<Seg>,
    pub(crate) read: Option<Value>,
    pub(crate) create: Option<Value>,
    pub(crate) update: Option<Value>,
    pub(crate) delete: Option<Value>,
    /// Top-level fields a create or update may set, change or remove (`_id` aside); `None`
    /// means any.
    pub(crate) fields: Option<BTreeSet<String>>,
}

/// A validated rule set, with the JSON it came from (what `GET /v1/rules` returns).
#[derive(Debug, Clone)]
pub struct Rules {
    pub(crate) rules: Vec<Rule>,
    source: Value,
}

impl Default for Rules {
    /// No rules: every end-user request is denied.
    fn default() -> Self {
        Rules {
            rules: Vec::new(),
            source: serde_json::json!({"rules": []}),
        }
    }
}

fn bad(msg: impl Into<String>) -> RulesError {
    RulesError(msg.into())
}

impl Rules {
    /// Parses and fully validates a rule set.
    pub fn parse(v: &Value) -> Result<Rules, RulesError> {
        let Value::Object(top) = v else {
            return Err(bad("rules must be an object {\"rules\":[...]}"));
        };
        if let Some(k) = top.keys().find(|k| *k != "rules") {
            return Err(bad(format!("unknown member '{k}' (expected only 'rules')")));
        }
        let Some(Value::Array(items)) = top.get("rules") else {
            return Err(bad("'rules' must be an array"));
        };
        if items.len() > RULES_MAX {
            return Err(bad(format!("at most {RULES_MAX} rules")));
        }
        let rules = items
            .iter()
            .enumerate()
            .map(|(i, r)| rule(r).map_err(|e| bad(format!("rule {i}: {}", e.0))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rules {
            rules,
            source: v.clone(),
        })
    }

    /// Parses rule-set JSON text (a file or a request body).
    pub fn parse_text(text: &[u8]) -> Result<Rules, RulesError> {
        if text.len() > RULES_BYTES_MAX {
            return Err(bad(format!("the rule set is over {RULES_BYTES_MAX} bytes")));
        }
        let v: Value =
            serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        Rules::parse(&v)
    }

    /// The rule set as given.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// The first rule whose pattern matches `collection`, with the path variables it binds.
    pub(crate) fn find(&self, collection: &str) -> Option<(&Rule, Vec<(&str, String)>)> {
        let segs: Vec<&str> = collection.split('/').collect();
        'rules: for r in &self.rules {
            if r.collection.len() != segs.len() {
                continue;
            }
            let mut vars = Vec::new();
            for (p, s) in r.collection.iter().zip(&segs) {
                match p {
                    Seg::Lit(l) if l == s => {}
                    Seg::Lit(_) => continue 'rules,
                    Seg::Var(name) => vars.push((name.as_str(), s.to_string())),
                }
            }
            return Some((r, vars));
        }
        None
    }
}

const RULE_MEMBERS: &[&str] = &["match", "read", "create", "update", "delete", "fields"];

fn rule(v: &Value) -> Result<Rule, RulesError> {
    let Value::Object(m) = v else {
        return Err(bad("a rule must be an object"));
    };
    if let Some(k) = m.keys().find(|k| !RULE_MEMBERS.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown member '{k}' (expected match, read, create, update, delete, fields)"
        )));
    }
    let Some(Value::String(pattern)) = m.get("match") else {
        return Err(bad(
            "'match' must be a string such as \"users/{uid}/posts/{postId}\"",
        ));
    };
    let (collection, id_var) = parse_pattern(pattern)?;
    let vars: Vec<&str> = collection
        .iter()
        .filter_map(|s| match s {
            Seg::Var(v) => Some(v.as_str()),
            Seg::Lit(_) => None,
        })
        .collect();
    let filter = |op: &str| -> Result<Option<Value>, RulesError> {
        match m.get(op) {
            None => Ok(None),
            Some(f @ Value::Object(_)) => {
                check_filter(f, &vars, &id_var).map_err(|e| bad(format!("'{op}': {}", e.0)))?;
                Ok(Some(f.clone()))
            }
            Some(_) => Err(bad(format!("'{op}' must be a filter (an object)"))),
        }
    };
    let fields = match m.get("fields") {
        None => None,
        Some(Value::Array(items)) => {
            let mut set = BTreeSet::new();
            for f in items {
                match f {
                    Value::String(s) if !s.is_empty() && !s.contains('.') && !s.starts_with('$') => {
                        set.insert(s.clone());
                    }
                    _ => {
                        return Err(bad(format!(
                            "'fields' lists top-level field names (strings without '.' or a leading '$'), got {f}"
                        )))
                    }
                }
            }
            Some(set)
        }
        Some(_) => return Err(bad("'fields' must be an array of field names")),
    };
    let (read, create, update, delete) = (
        filter("read")?,
        filter("create")?,
        filter("update")?,
        filter("delete")?,
    );
    Ok(Rule {
        collection: collection.clone(),
        read,
        create,
        update,
        delete,
        fields,
    })
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `users/{uid}/posts/{postId}` -> the collection segments and the id variable.
fn parse_pattern(p: &str) -> Result<(Vec<Seg>, String), RulesError> {
    let segs: Vec<&str> = p.split('/').collect();
    if !segs.len().is_multiple_of(2) || segs.len() > PATTERN_SEGMENTS_MAX {
        return Err(bad(format!(
            "'match' must be a document path pattern (collection/{{id}}, an even number of segments up to {PATTERN_SEGMENTS_MAX}), got \"{p}\""
        )));
    }
    let mut out = Vec::with_capacity(segs.len());
    let mut names = BTreeSet::new();
    for s in &segs {
        if let Some(name) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            if !is_name(name) || name == "auth" {
                return Err(bad(format!(
                    "bad variable '{{{name}}}' in \"{p}\": names are letters, digits and '_', and 'auth' is reserved"
                )));
            }
            if !names.insert(name) {
                return Err(bad(format!(
                    "variable '{{{name}}}' appears twice in \"{p}\""
                )));
            }
            out.push(Seg::Var(name.to_string()));
        } else if s.is_empty()
            || s.contains(['{', '}'])
            || s.starts_with("__")
            || *s == "."
            || *s == ".."
            || s.chars().any(char::is_control)
        {
            return Err(bad(format!("bad segment '{s}' in \"{p}\"")));
        } else {
            out.push(Seg::Lit(s.to_string()));
        }
    }
    let Some(Seg::Var(id_var)) = out.pop() else {
        return Err(bad(format!(
            "the last segment of \"{p}\" must be a variable naming the document id, e.g. {{docId}}"
        )));
    };
    Ok((out, id_var))
}

/// Every `$$` placeholder of a filter must be known, and the filter must compile with values in
/// place of the placeholders.
fn check_filter(f: &Value, vars: &[&str], id_var: &str) -> Result<(), RulesError> {
    let mut problem = None;
    let mut check = |name: &str| -> Option<Value> {
        if name == "auth.uid" {
        } else if let Some(c) = name.strip_prefix("auth.claims.") {
            if c.is_empty() || c.split('.').any(str::is_empty) {
                problem.get_or_insert(format!("bad claim reference '$${name}'"));
            }
        } else if name == id_var {
            problem.get_or_insert(format!(
                "'$${name}' is the document id; compare '_id' instead"
            ));
        } else if !vars.contains(&name) {
            problem.get_or_insert(format!(
                "unknown reference '$${name}' (use $$auth.uid, $$auth.claims.<name>, or a variable of 'match': {})",
                vars.iter().map(|v| format!("$${v}")).collect::<Vec<_>>().join(", ")
            ));
        }
        Some(Value::String("x".into()))
    };
    let sample = substitute(f, &mut check as &mut Resolve).expect("the sample resolves all");
    if let Some(p) = problem {
        return Err(bad(p));
    }
    Filter::parse(&sample).map_err(|e| bad(format!("{} ({})", e, e.code())))?;
    Ok(())
}
