//! The shared fixtures in `testdata/protocol/`: every valid example decodes into its type and
//! round-trips, every invalid one is refused with its code, every message kind has a fixture
//! file and every file names a kind; and the generated `error-codes.json` and `limits.json` are
//! fresh (`HERALD_BLESS=1 cargo test -p herald-protocol` rewrites them).

use herald_protocol::kinds::{round_trip, Kind};
use herald_protocol::{error_code_rows, ErrorCode};
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/protocol")
}

fn fixture_files() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir()).expect("testdata/protocol exists") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(kind) = name.strip_suffix(".json") else {
            continue;
        };
        if kind == "error-codes" || kind == "limits" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((kind.to_string(), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_kind_has_a_fixture_and_every_fixture_a_kind() {
    let files = fixture_files();
    for (name, v) in &files {
        assert!(
            Kind::from_name(name).is_some(),
            "testdata/protocol/{name}.json names a kind the Rust types do not know"
        );
        assert_eq!(
            v["kind"],
            name.as_str(),
            "{name}.json: 'kind' must be its name"
        );
    }
    for kind in Kind::ALL {
        assert!(
            files.iter().any(|(n, _)| n == kind.name()),
            "no fixture testdata/protocol/{}.json",
            kind.name()
        );
    }
}

#[test]
fn valid_examples_round_trip_and_invalid_ones_are_refused_with_their_code() {
    for (name, v) in fixture_files() {
        let kind = Kind::from_name(&name).expect("checked above");
        let valid = v["valid"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: valid"));
        assert!(!valid.is_empty(), "{name}: no valid example");
        for ex in valid {
            let once = round_trip(kind, ex.clone())
                .unwrap_or_else(|e| panic!("{name}: {ex} was refused: {e}"));
            assert_eq!(&once, ex, "{name}: encodes differently");
            let twice = round_trip(kind, once.clone()).unwrap();
            assert_eq!(once, twice, "{name}: {ex} does not round-trip");
        }
        for bad in v["invalid"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: invalid"))
        {
            let msg = &bad["message"];
            let code: ErrorCode = bad["code"].as_str().unwrap().parse().unwrap();
            assert!(bad["why"].is_string(), "{name}: {bad} lacks 'why'");
            match round_trip(kind, msg.clone()) {
                Ok(_) => panic!("{name}: {msg} was accepted ({})", bad["why"]),
                Err(e) => assert_eq!(e.code, code, "{name}: {msg}: {}", e.message),
            }
        }
    }
}

/// Checks (or with `HERALD_BLESS=1` writes) a generated file.
fn generated(file: &str, want: &Value) {
    let path = dir().join(file);
    let text = serde_json::to_string_pretty(want).unwrap() + "\n";
    if std::env::var_os("HERALD_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == text,
        "testdata/protocol/{file} is stale: run HERALD_BLESS=1 cargo test -p herald-protocol"
    );
}

#[test]
fn generated_files_are_fresh() {
    generated(
        "error-codes.json",
        &serde_json::to_value(error_code_rows()).unwrap(),
    );
    generated("limits.json", &herald_protocol::limits::limits_json());
}
