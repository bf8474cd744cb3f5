//! MongoDB's own tests as data, run against Herald's query core: the server's golden query
//! outputs (`golden/`: `$match` and `$project` over small collections) and the unit tests of its
//! update operators (`update-nodes/`). The data is not in this repository (its licences differ):
//! it is read from `$HERALD_MONGO_SPEC`, else `../shared/mongo-spec` beside the repository, else
//! `/work/shared/mongo-spec`. Every case either agrees with MongoDB or is listed in
//! `DIVERGENCES` with its reason; a listed case that starts to agree fails too, so the list
//! stays true. docs/query-language.md ("MongoDB's own tests") has the summary.

use herald_query::{Query, Update};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Cases where Herald knowingly differs from MongoDB, by case name, with the reason.
const DIVERGENCES: &[(&str, &str)] = &[
    (
        r#"match_with_in: [ { "$match" : { "a" : { "$type" : "double" } } } ]"#,
        "the shell inserted `1` as a double; in JSON Herald reads a number without a fraction \
         or exponent as an integer, so `$type: \"double\"` matches none of these documents \
         (written `1.0` they match)",
    ),
    (
        "SetNodeTest.ApplyNumericObject",
        "an artifact of the data, not a difference: the C++ test expects \
         `{a: {b: 0, '2': {b: 2}}}` (the created field after the existing one, as Herald \
         does), but the extraction went through a JavaScript object, which puts integer-like \
         keys first",
    ),
    (
        "ArithmeticNodeTest.ApplyNumericObject",
        "the same artifact as SetNodeTest.ApplyNumericObject",
    ),
];

fn spec_dir() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("HERALD_MONGO_SPEC") {
        candidates.push(PathBuf::from(d));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/mongo-spec"));
    candidates.push(PathBuf::from("/work/shared/mongo-spec"));
    candidates
        .into_iter()
        .find(|d| d.join("update-nodes/update-nodes.json").is_file())
}

/// Object keys sorted at every depth: the golden files normalise field order.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let b: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(
                b.into_iter()
                    .map(|(k, v)| (k.clone(), v))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A document line of the shell's output as JSON; `None` when it holds a value JSON cannot
/// express (`undefined`).
fn shell_doc(line: &str) -> Option<Value> {
    if line.contains("undefined") {
        return None;
    }
    Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("golden line {line:?}: {e}")))
}

struct GoldenCase {
    name: String,
    docs: Vec<Value>,
    /// Documents of the collection JSON cannot express (left out of `docs`), by `_id`.
    dropped: Vec<Value>,
    pipeline: Value,
    expected: Vec<Option<Value>>,
}

fn golden_cases(path: &Path) -> Vec<GoldenCase> {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    enum At {
        Nothing,
        Docs,
        Indexes,
        Results,
    }
    let mut at = At::Nothing;
    let (mut docs, mut dropped) = (Vec::new(), Vec::new());
    let mut cases: Vec<GoldenCase> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(h) = line.strip_prefix("[jsTest] ") {
            if h.ends_with("Inserting docs:") {
                docs = Vec::new();
                dropped = Vec::new();
                at = At::Docs;
            } else if h == "Creating indexes:" {
                at = At::Indexes;
            } else if let Some(p) = h
                .strip_prefix("Query: ")
                .or_else(|| h.strip_prefix("Pipeline: "))
            {
                cases.push(GoldenCase {
                    name: format!("{file}: {p}"),
                    docs: docs.clone(),
                    dropped: dropped.clone(),
                    pipeline: serde_json::from_str(p).unwrap(),
                    expected: Vec::new(),
                });
                at = At::Results;
            }
            continue;
        }
        if line.starts_with("Collection count") {
            at = At::Nothing;
        }
        if !line.starts_with('{') {
            continue;
        }
        match at {
            At::Docs => match shell_doc(line) {
                Some(d) => docs.push(d),
                None => {
                    let id = line
                        .split(',')
                        .next()
                        .and_then(|s| s.split(':').nth(1))
                        .map(|s| s.trim().trim_end_matches('}').trim().to_string())
                        .unwrap_or_default();
                    dropped.push(serde_json::from_str(&id).unwrap_or(Value::Null));
                }
            },
            At::Results => cases.last_mut().unwrap().expected.push(shell_doc(line)),
            At::Indexes | At::Nothing => {}
        }
    }
    cases
}

enum Outcome {
    Agree,
    Differ(String),
    /// Not comparable with JSON, with the reason.
    Skip(&'static str),
}

fn run_golden(case: &GoldenCase) -> Outcome {
    let mut spec = Map::new();
    for stage in case.pipeline.as_array().unwrap() {
        let (name, arg) = stage.as_object().unwrap().iter().next().unwrap();
        let key = match name.as_str() {
            "$match" if !spec.contains_key("projection") => "filter",
            "$project" => "projection",
            _ => return Outcome::Skip("a pipeline Herald's find cannot express"),
        };
        spec.insert(key.to_string(), arg.clone());
    }
    // The results of documents JSON cannot express cannot be compared: left out, by `_id`.
    // Without `_id` in the results they cannot be told apart: then Herald's results must be
    // the expected ones less exactly one result per document left out (a weaker check).
    let mut expected = Vec::new();
    let mut unknown = 0;
    for e in &case.expected {
        match e {
            Some(d) if !case.dropped.is_empty() && d.get("_id").is_none() => {
                unknown += 1;
                expected.push(sorted(d).to_string())
            }
            Some(d) if case.dropped.iter().any(|id| d.get("_id") == Some(id)) => {}
            Some(d) => expected.push(sorted(d).to_string()),
            None if !case.dropped.is_empty() => unknown += 1,
            None => return Outcome::Skip("undefined in a result"),
        }
    }
    let query = match Query::parse(&Value::Object(spec)) {
        Ok(q) => q,
        Err(e) => return Outcome::Differ(format!("refused: {e}")),
    };
    let mut got: Vec<String> = query
        .run(case.docs.iter())
        .iter()
        .map(|d| sorted(d).to_string())
        .collect();
    expected.sort();
    got.sort();
    if unknown > 0 {
        let mut rest = expected.clone();
        let mut missing = Vec::new();
        for g in &got {
            match rest.iter().position(|e| e == g) {
                Some(i) => {
                    rest.remove(i);
                }
                None => missing.push(g.clone()),
            }
        }
        return if missing.is_empty() && got.len() + case.dropped.len() == case.expected.len() {
            Outcome::Agree
        } else {
            Outcome::Differ(format!(
                "not among MongoDB's results: {missing:?}; {} results for {} documents \
                 expressible in JSON, MongoDB gave {} for {}",
                got.len(),
                case.docs.len(),
                case.expected.len(),
                case.docs.len() + case.dropped.len()
            ))
        };
    }
    if got == expected {
        Outcome::Agree
    } else {
        Outcome::Differ(format!("expected {expected:?}\n      got {got:?}"))
    }
}

/// Extended JSON (`$numberDouble`, `$numberLong`, `$numberInt`) as plain JSON numbers of the
/// same type.
fn plain(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, x) = m.iter().next().unwrap();
            let s = x.as_str().unwrap_or_default();
            match k.as_str() {
                "$numberDouble" => Value::from(s.parse::<f64>().unwrap()),
                "$numberLong" | "$numberInt" => Value::from(s.parse::<i64>().unwrap()),
                _ => Value::Object(m.iter().map(|(k, v)| (k.clone(), plain(v))).collect()),
            }
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), plain(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(plain).collect()),
        other => other.clone(),
    }
}

fn run_update(t: &Value) -> Outcome {
    let (update, doc) = (plain(&t["update"]), plain(&t["doc"]));
    let result = Update::parse(&update).and_then(|u| u.apply(&doc, 0));
    match (&t["expect"]["doc"], &t["expect"]["error"], result) {
        (Value::Null, Value::String(_), Err(_)) => Outcome::Agree,
        (Value::Null, Value::String(code), Ok(d)) => {
            Outcome::Differ(format!("MongoDB refuses ({code}), Herald gives {d}"))
        }
        (want, _, Ok(d)) => {
            // Field order is data: compared as serialised.
            let want = plain(want);
            if serde_json::to_vec(&want).unwrap() == serde_json::to_vec(&d).unwrap() {
                Outcome::Agree
            } else {
                Outcome::Differ(format!("expected {want}, got {d}"))
            }
        }
        (want, _, Err(e)) => Outcome::Differ(format!("expected {want}, Herald refuses: {e}")),
    }
}

#[test]
fn mongodb_golden_queries_and_update_operator_tests() {
    let Some(dir) = spec_dir() else {
        eprintln!(
            "SKIPPED: MongoDB's test data not found (set HERALD_MONGO_SPEC to the mongo-spec \
             directory, see ../shared/mongo-spec/README.md)"
        );
        return;
    };
    let mut outcomes: Vec<(String, Outcome)> = Vec::new();
    let mut golden: Vec<PathBuf> = std::fs::read_dir(dir.join("golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    golden.sort();
    for path in golden {
        for case in golden_cases(&path) {
            let o = run_golden(&case);
            outcomes.push((case.name, o));
        }
    }
    let updates: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("update-nodes/update-nodes.json")).unwrap(),
    )
    .unwrap();
    let (mut skipped_upstream, mut n_updates) = (0, 0);
    for tests in updates["files"].as_object().unwrap().values() {
        for t in tests.as_array().unwrap() {
            if t.get("skip").is_some() {
                skipped_upstream += 1;
                continue;
            }
            n_updates += 1;
            outcomes.push((t["test"].as_str().unwrap().to_string(), run_update(t)));
        }
    }
    let (mut agree, mut skip, mut known) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, o) in &outcomes {
        let listed = DIVERGENCES.iter().find(|(n, _)| n == name);
        match (o, listed) {
            (Outcome::Agree, None) => agree += 1,
            (Outcome::Agree, Some(_)) => failures.push(format!(
                "{name}: listed in DIVERGENCES but agrees with MongoDB now; remove it"
            )),
            (Outcome::Skip(why), _) => {
                skip += 1;
                eprintln!("skip {name}: {why}");
            }
            (Outcome::Differ(_), Some(_)) => known += 1,
            (Outcome::Differ(d), None) => failures.push(format!("{name}:\n      {d}")),
        }
    }
    eprintln!(
        "mongo-spec: {} cases ({} golden, {n_updates} update tests; {skipped_upstream} update \
         tests marked skip in the data): {agree} agree, {known} known divergences, {skip} not \
         comparable in JSON, {} failures",
        outcomes.len(),
        outcomes.len() - n_updates,
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
