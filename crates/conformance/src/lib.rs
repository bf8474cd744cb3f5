//! Runs Herald's language-neutral conformance vectors (`testdata/conformance/*.json`) against the
//! Rust query core (queries, aggregation pipelines, updates), and evaluates single cases for the differential test against `mingo`.
//!
//! A case is evaluated by [`eval`] into an answer object; [`check_case`] compares that answer with
//! the case's expectation. The file format is documented in `testdata/conformance/README.md`.

use herald_query::pipeline::Pipeline;
use herald_query::{Filter, Query, Update};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Evaluates one request: a query case (`docs` + `query`), a pipeline case (`docs` +
/// `pipeline`), an update case (`doc` + `update`), or an upsert case (`filter` + `update` +
/// `upsert`). Returns `{"ids","docs"}`, `{"docs"}`, `{"doc"}` or `{"error","message"}`.
pub fn eval(req: &Value) -> Value {
    let now = req.get("now").and_then(Value::as_i64).unwrap_or(0);
    if let Some(pipeline) = req.get("pipeline") {
        let docs = req.get("docs").and_then(Value::as_array).cloned();
        return eval_pipeline(pipeline, docs.unwrap_or_default());
    }
    if let Some(docs) = req.get("docs") {
        let docs = docs.as_array().cloned().unwrap_or_default();
        // A collection-group case: cursors and order are the group's, results known by `_path`.
        let group = req.get("group").and_then(Value::as_bool) == Some(true);
        let spec = req.get("query").unwrap_or(&Value::Null);
        let parsed = match group {
            true => Query::parse_group(spec).map(|mut q| {
                q.sort = q.sort.for_group();
                q
            }),
            false => Query::parse(spec),
        };
        let query = match parsed {
            Ok(q) => q,
            Err(e) => return error(e.code(), &e.to_string()),
        };
        let key = if group { "_path" } else { "_id" };
        let ids_of = |d: &Value| d.get(key).cloned().unwrap_or(Value::Null);
        // Ids come from the unprojected result so projections that drop _id can still be checked.
        let mut unprojected = query.clone();
        unprojected.projection = herald_query::Projection::all();
        let ids: Vec<Value> = unprojected.run(&docs).iter().map(ids_of).collect();
        let out = query.run(&docs);
        return json!({"ids": ids, "docs": out});
    }
    let update = match Update::parse(req.get("update").unwrap_or(&Value::Null)) {
        Ok(u) => u,
        Err(e) => return error(e.code(), &e.to_string()),
    };
    let result = if req.get("upsert").and_then(Value::as_bool) == Some(true) {
        match Filter::parse(req.get("filter").unwrap_or(&json!({}))) {
            Ok(f) => update.upsert_document(&f, now),
            Err(e) => return error(e.code(), &e.to_string()),
        }
    } else {
        update.apply(req.get("doc").unwrap_or(&Value::Null), now)
    };
    match result {
        Ok(doc) => json!({ "doc": doc }),
        Err(e) => error(e.code(), &e.to_string()),
    }
}

/// Runs a pipeline as the server does: its head as a query over the collection (so the input is
/// in `_id` order unless the head sorts), the rest in memory.
fn eval_pipeline(spec: &Value, docs: Vec<Value>) -> Value {
    let pipeline = match Pipeline::parse(spec) {
        Ok(p) => p,
        Err(e) => return error(e.code(), &e.to_string()),
    };
    let (head, covered) = pipeline.head_query(usize::MAX);
    match pipeline.run_from(covered, head.run(&docs)) {
        Ok(out) => json!({ "docs": out }),
        Err(e) => error(e.code(), &e.to_string()),
    }
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": code, "message": message})
}

/// Compares an answer with the case's expectation; `Err` explains the difference.
pub fn check_case(case: &Value) -> Result<(), String> {
    let got = eval(case);
    let shown = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    if let Some(code) = case.get("error") {
        return match got.get("error") {
            Some(c) if c == code => Ok(()),
            _ => Err(format!("expected error {code}, got {}", shown(&got))),
        };
    }
    if let Some(e) = got.get("error") {
        return Err(format!("unexpected error {e}: {}", got["message"]));
    }
    // Documents are compared by their serialization: key order and int-vs-double matter.
    let (want, have) = if let Some(ids) = case.get("expect").filter(|_| case.get("docs").is_some())
    {
        (ids, &got["ids"])
    } else if let Some(docs) = case.get("expectDocs") {
        (docs, &got["docs"])
    } else if let Some(doc) = case.get("expect") {
        (doc, &got["doc"])
    } else {
        return Err("case has no expectation".into());
    };
    if shown(want) == shown(have) {
        Ok(())
    } else {
        Err(format!("expected {}, got {}", shown(want), shown(have)))
    }
}

/// The outcome of running every vector file in a directory.
#[derive(Debug, Default)]
pub struct Report {
    pub cases: usize,
    pub failures: Vec<String>,
}

pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance")
}

/// Runs every `*.json` file in `dir`.
pub fn check_dir(dir: &Path) -> Result<Report, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut report = Report::default();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let doc: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        for case in doc["cases"].as_array().into_iter().flatten() {
            report.cases += 1;
            if let Err(why) = check_case(case) {
                report.failures.push(format!(
                    "{name} / {}: {why}",
                    case["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    Ok(report)
}
