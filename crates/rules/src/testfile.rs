//! Rules test files (`herald rules test FILE`): a rule set and a list of requests with the
//! expected answer, like the Firestore emulator's rules tests.
//!
//! ```json
//! {"rules": "notes.rules.json",
//!  "cases": [
//!   {"name": "owner reads", "auth": {"uid": "alice"}, "op": "read",
//!    "path": "notes/n1", "doc": {"owner": "alice"}, "expect": "allow"},
//!   {"name": "stranger edits", "auth": {"uid": "bob", "claims": {"role": "user"}},
//!    "op": "update", "path": "notes/n1", "before": {"owner": "alice"},
//!    "after": {"owner": "bob"}, "expect": "deny"}]}
//! ```
//!
//! `rules` is the rule set itself or a path relative to the test file. `auth` null (or absent)
//! is a request without credentials, which is always denied. `op` is `read` (with `doc`),
//! `create` (`after`), `update` (`before`, `after`) or `delete` (`before`). Documents get the
//! path's id as `_id` unless they carry it.

use crate::{AuthCtx, Rules};
use serde_json::{Map, Value};
use std::path::Path;

/// One case and its outcome.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub op: String,
    pub path: String,
    pub expect_allow: bool,
    pub allowed: bool,
    /// Why it was denied (`no rule`, `denied`, `hidden`, `unauthenticated`).
    pub reason: &'static str,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.expect_allow == self.allowed
    }
}

/// A test file that cannot be run; the message says where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct TestFileError(pub String);

fn bad(msg: impl Into<String>) -> TestFileError {
    TestFileError(msg.into())
}

/// Reads and runs a test file.
pub fn run_file(path: &Path) -> Result<Vec<CaseResult>, TestFileError> {
    let text = std::fs::read(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let v: Value = serde_json::from_slice(&text)
        .map_err(|e| bad(format!("{}: not valid JSON: {e}", path.display())))?;
    let rules = match v.get("rules") {
        Some(Value::String(rel)) => {
            let p = path.parent().unwrap_or(Path::new(".")).join(rel);
            let t = std::fs::read(&p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
            Rules::parse_text(&t).map_err(|e| bad(format!("{}: {e}", p.display())))?
        }
        Some(r @ Value::Object(_)) => Rules::parse(r).map_err(|e| bad(e.to_string()))?,
        _ => return Err(bad("'rules' must be a rule set or a path to one")),
    };
    run(&rules, &v)
}

/// Runs the `cases` of a parsed test file against `rules`.
pub fn run(rules: &Rules, file: &Value) -> Result<Vec<CaseResult>, TestFileError> {
    let Some(Value::Array(cases)) = file.get("cases") else {
        return Err(bad("'cases' must be an array"));
    };
    cases
        .iter()
        .enumerate()
        .map(|(i, c)| case(rules, c).map_err(|e| bad(format!("case {i}: {}", e.0))))
        .collect()
}

const CASE_MEMBERS: &[&str] = &[
    "name", "auth", "op", "path", "doc", "before", "after", "expect",
];

fn case(rules: &Rules, c: &Value) -> Result<CaseResult, TestFileError> {
    let Value::Object(m) = c else {
        return Err(bad("a case must be an object"));
    };
    if let Some(k) = m.keys().find(|k| !CASE_MEMBERS.contains(&k.as_str())) {
        return Err(bad(format!("unknown member '{k}'")));
    }
    let s = |k: &str| m.get(k).and_then(Value::as_str);
    let path = s("path").ok_or_else(|| bad("'path' must be a document path"))?;
    let (collection, id) = path
        .rsplit_once('/')
        .filter(|(c, _)| !c.split('/').count().is_multiple_of(2))
        .ok_or_else(|| bad(format!("'{path}' is not a document path (collection/id)")))?;
    let op = s("op").ok_or_else(|| bad("'op' must be read, create, update or delete"))?;
    let expect_allow = match s("expect") {
        Some("allow") => true,
        Some("deny") => false,
        _ => return Err(bad("'expect' must be \"allow\" or \"deny\"")),
    };
    let doc = |k: &str| -> Result<Option<Value>, TestFileError> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(d)) => {
                let mut out = Map::new();
                out.insert("_id".into(), d.get("_id").cloned().unwrap_or(id.into()));
                out.extend(
                    d.iter()
                        .filter(|(k, _)| *k != "_id")
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                Ok(Some(Value::Object(out)))
            }
            Some(_) => Err(bad(format!("'{k}' must be a document (an object)"))),
        }
    };
    let need = |k: &str| -> Result<Value, TestFileError> {
        doc(k)?.ok_or_else(|| bad(format!("a {op} case needs '{k}'")))
    };
    let auth = match m.get("auth") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            let uid = a
                .get("uid")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("'auth.uid' must be a string"))?;
            let claims = match a.get("claims") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(c)) => c.clone(),
                Some(_) => return Err(bad("'auth.claims' must be an object")),
            };
            Some(AuthCtx {
                uid: uid.into(),
                claims,
            })
        }
        Some(_) => return Err(bad("'auth' must be {\"uid\",\"claims\"} or null")),
    };
    let outcome = match auth {
        None => {
            // Validate the case even though the answer is known.
            match op {
                "read" | "create" | "update" | "delete" => Err("unauthenticated"),
                other => return Err(bad(format!("unknown op '{other}'"))),
            }
        }
        Some(auth) => {
            let r = match op {
                "read" => rules.can_read(collection, &need("doc")?, &auth),
                "create" => rules.check_write(collection, None, Some(&need("after")?), &auth),
                "update" => rules.check_write(
                    collection,
                    Some(&need("before")?),
                    Some(&need("after")?),
                    &auth,
                ),
                "delete" => rules.check_write(collection, Some(&need("before")?), None, &auth),
                other => return Err(bad(format!("unknown op '{other}'"))),
            };
            r.map_err(|d| match d {
                crate::Denial::NoRule => "no rule",
                crate::Denial::Denied => "denied",
                crate::Denial::Hidden => "hidden",
            })
        }
    };
    Ok(CaseResult {
        name: s("name").unwrap_or("").to_string(),
        op: op.to_string(),
        path: path.to_string(),
        expect_allow,
        allowed: outcome.is_ok(),
        reason: outcome.err().unwrap_or(""),
    })
}

/// The results as a text table, one line per case, and a summary line.
pub fn table(results: &[CaseResult]) -> String {
    let word = |b: bool| if b { "allow" } else { "deny" };
    let name_w = results
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let path_w = results
        .iter()
        .map(|r| r.path.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "{:>3}  {:<name_w$}  {:<6}  {:<path_w$}  {:<6}  {:<24}  result\n",
        "#", "case", "op", "path", "expect", "got"
    );
    for (i, r) in results.iter().enumerate() {
        let got = if r.allowed {
            "allow".to_string()
        } else {
            format!("deny ({})", r.reason)
        };
        out.push_str(&format!(
            "{:>3}  {:<name_w$}  {:<6}  {:<path_w$}  {:<6}  {:<24}  {}\n",
            i,
            r.name,
            r.op,
            r.path,
            word(r.expect_allow),
            got,
            if r.passed() { "ok" } else { "MISMATCH" }
        ));
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    out.push_str(&format!(
        "{} cases, {} passed, {} mismatched\n",
        results.len(),
        results.len() - failed,
        failed
    ));
    out
}
