//! Seed corpora, generated at run time from the repository's test vectors
//! (`testdata/protocol`, `testdata/conformance`, `testdata/rules`) and from the encoders, so
//! nothing large is committed: `scripts/fuzz` writes them with the `fuzz-seeds` binary.

use herald_db::decoders::encode_commit_record;
use herald_db::{Change, ChangeOp};
use herald_storage::decoders::{log_block, wal_record};
use herald_storage::Table;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The repository's root (this crate is `crates/fuzz-targets`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read_json(rel: &str) -> Value {
    let path = repo_root().join(rel);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `valid` messages and the `message` of each `invalid` one in a protocol fixture.
fn fixture_messages(kind: &str) -> Vec<Value> {
    let v = read_json(&format!("testdata/protocol/{kind}.json"));
    let mut out: Vec<Value> = v["valid"].as_array().cloned().unwrap_or_default();
    for bad in v["invalid"].as_array().into_iter().flatten() {
        out.push(bad["message"].clone());
    }
    out
}

/// The member `key` of every case in the conformance files whose name starts with `prefix`.
fn conformance(prefix: &str, key: &str) -> Vec<Value> {
    let dir = repo_root().join("testdata/conformance");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/conformance")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".json"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let v = read_json(&format!("testdata/conformance/{n}"));
        for case in v["cases"].as_array().into_iter().flatten() {
            if let Some(x) = case.get(key) {
                out.push(x.clone());
            }
        }
    }
    out
}

fn texts(values: Vec<Value>) -> Vec<Vec<u8>> {
    values.iter().map(|v| v.to_string().into_bytes()).collect()
}

/// The seeds of target `name` (empty for an unknown one).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "ws_message" => {
            let mut v = Vec::new();
            for k in [
                "client.auth",
                "client.subscribe",
                "client.unsubscribe",
                "client.write",
            ] {
                v.extend(fixture_messages(k));
            }
            texts(v)
        }
        "bulk_line" => {
            let mut v = fixture_messages("http.bulkLine");
            v.extend(fixture_messages("write"));
            texts(v)
        }
        "query" => {
            let mut v = conformance("", "query");
            v.extend(conformance("", "filter"));
            texts(v)
        }
        "update" => texts(
            conformance("update", "update")
                .into_iter()
                .chain(conformance("upsert", "update"))
                .collect(),
        ),
        "rules" => vec![
            std::fs::read(repo_root().join("testdata/rules/notes.rules.json"))
                .expect("testdata/rules/notes.rules.json"),
        ],
        "trigger_def" => texts(fixture_messages("http.trigger")),
        "jwt" => {
            let claims =
                json!({"sub": "u1", "exp": 1_767_229_200u64, "nbf": 1_767_225_000u64, "role": "x"});
            let mut signed = vec![1];
            signed.extend(claims.to_string().into_bytes());
            let mut text = vec![0];
            text.extend(crate::text::signed_token(claims.to_string().as_bytes()).into_bytes());
            vec![signed, text]
        }
        "wal" => {
            let entries = vec![
                (Table::Docs, b"c\0a".to_vec(), Some(br#"{"n":1}"#.to_vec())),
                (
                    Table::Meta,
                    b"seq".to_vec(),
                    Some(9u64.to_be_bytes().to_vec()),
                ),
                (Table::Docs, b"c\0b".to_vec(), None),
            ];
            let record = wal_record(4, 2, &entries);
            // A segment of two records, one torn; and a record's body alone.
            let mut segment = record.clone();
            segment.extend_from_slice(&wal_record(5, 4, &entries[..1]));
            segment.truncate(segment.len() - 3);
            vec![record[32..].to_vec(), record, segment]
        }
        "log_block" => vec![log_block(&[
            (&9u64.to_be_bytes()[..], br#"{"seq":9}"#),
            (&10u64.to_be_bytes()[..], b""),
        ])],
        "commit_log" => {
            let change = |op, before: Option<Value>, after: Option<Value>| Change {
                collection: "rooms/r1/messages".into(),
                id: "m1".into(),
                op,
                version: 3,
                before,
                after,
            };
            vec![encode_commit_record(
                12,
                1_700_000_000_000,
                &[
                    change(ChangeOp::Insert, None, Some(json!({"_id": "m1", "n": 1.5}))),
                    change(
                        ChangeOp::Update,
                        Some(json!({"_id": "m1"})),
                        Some(json!({"_id": "m1", "a": [1, {"b": null}]})),
                    ),
                    change(ChangeOp::Delete, Some(json!({"_id": "m1"})), None),
                ],
            )]
        }
        _ => Vec::new(),
    }
}
