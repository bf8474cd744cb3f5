//! The tidy test: every Rust file under `crates/` starts with a `//!` line saying what it owns,
//! and no Rust file there, nor TypeScript file of the SDK's or the console's sources, is over
//! [`LINES_MAX`] lines (the point where a file has stopped being one concept; split it by
//! concept, not by size).
//!
//! `cargo test -p herald-tidy`. It reads files only; it never changes one. The module-cycle
//! check is `tidy/cycles.rs`.

// Beside this file rather than in `tests/`, where Cargo would build each as its own test.
#[path = "tidy/cycles.rs"]
mod cycles;
#[path = "tidy/tokens.rs"]
mod tokens;

use std::fs;
use std::path::{Path, PathBuf};

/// Files longer than this fail.
const LINES_MAX: usize = 1_000;

/// Test files allowed over [`LINES_MAX`] for now, as paths from the repository root. Only test
/// files belong here, and only until they are split; an entry that is no longer over the limit
/// (or no longer exists) fails the test, so the list can only shrink. Empty: no file is over
/// the limit today.
const LONG_TEST_FILES_ALLOWED: &[&str] = &[];

/// Directories never walked: build output, installed packages, hidden directories.
fn skipped(dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "target" || name == "node_modules" || name.starts_with('.')
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Every file under `dir` whose name ends with `.{ext}`, as paths from `root`, sorted.
fn files(root: &Path, dir: &str, ext: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.join(dir)];
    while let Some(dir) = pending.pop() {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                if !skipped(&path) {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == ext) {
                let relative = path.strip_prefix(root).expect("under the root");
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

fn read(root: &Path, file: &str) -> String {
    fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Whether a Rust file's first line is a `//!` comment.
fn has_header(text: &str) -> bool {
    text.lines().next().is_some_and(|l| l.starts_with("//!"))
}

/// The files of `all` (with their texts) over [`LINES_MAX`] lines that are not allowed to be,
/// plus the allowed ones that are not (stale entries).
fn too_long(all: &[(String, String)], allowed: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, text) in all {
        let lines = text.lines().count();
        let allow = allowed.contains(&file.as_str());
        if lines > LINES_MAX && !allow {
            found.push(format!(
                "{file}: {lines} lines (at most {LINES_MAX}; split it by concept)"
            ));
        }
        if lines <= LINES_MAX && allow {
            found.push(format!(
                "{file}: {lines} lines: remove it from the allow-list"
            ));
        }
    }
    for file in allowed {
        if !all.iter().any(|(f, _)| f == file) {
            found.push(format!("{file}: allow-listed but not found: remove it"));
        }
    }
    found
}

fn with_texts(root: &Path, files: Vec<String>) -> Vec<(String, String)> {
    files
        .into_iter()
        .map(|f| {
            let text = read(root, &f);
            (f, text)
        })
        .collect()
}

#[test]
fn every_rust_file_starts_with_a_header_line() {
    let root = repo_root();
    let rust = files(&root, "crates", "rs");
    // A wrong root would pass vacuously.
    assert!(
        rust.contains(&"crates/tidy/tests/tidy.rs".to_string()),
        "{rust:?}"
    );
    let missing: Vec<_> = rust
        .iter()
        .filter(|f| !has_header(&read(&root, f)))
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not start with a `//!` line saying what they own:\n{missing:#?}"
    );
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let root = repo_root();
    let mut all = with_texts(&root, files(&root, "crates", "rs"));
    for dir in ["ts/sdk/src", "ts/console/src"] {
        let ts = files(&root, dir, "ts");
        assert!(!ts.is_empty(), "no TypeScript files in {dir}");
        all.extend(with_texts(&root, ts));
    }
    let found = too_long(&all, LONG_TEST_FILES_ALLOWED);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_checks_themselves() {
    assert!(has_header("//! What this owns.\nfn f() {}\n"));
    assert!(!has_header("// A plain comment.\n"));
    assert!(!has_header("\n//! Too late.\n"));
    assert!(!has_header(""));
    let long = "x\n".repeat(LINES_MAX + 1);
    let short = "x\n".repeat(LINES_MAX);
    let all = vec![
        ("a.rs".to_string(), long.clone()),
        ("b.rs".to_string(), short.clone()),
        ("c.rs".to_string(), long),
        ("d.rs".to_string(), short),
    ];
    let found = too_long(&all, &["c.rs", "d.rs", "gone.rs"]);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("a.rs: 1001 lines"), "{found:#?}");
    assert!(
        found[1].starts_with("d.rs: 1000 lines: remove it"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("gone.rs: allow-listed but not found"),
        "{found:#?}"
    );
}
