//! The module layering test: every top-level module of the crate uses only modules of lower
//! layers, as the list in `lib.rs`'s docs declares them; so there is no import cycle between
//! modules, and the docs say how the crate is layered.
//!
//! It reads the sources, not the compiler's view: every `crate::` path outside comments and
//! test modules counts (in `use` lines or inline), and a name the crate root re-exports counts
//! as a use of the module it comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The modules `lib.rs` declares.
fn modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            Some(l.strip_prefix("mod ")?.strip_suffix(';')?.to_string())
        })
        .collect()
}

/// Words made of identifier characters, in order.
fn words(s: &str) -> Vec<&str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Name -> module for the crate root's `pub use module::{...}` re-exports.
fn reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let mut names = words(rest).into_iter();
        let Some(module) = names.next().filter(|m| modules.contains(*m)) else {
            continue;
        };
        for name in names {
            out.insert(name.to_string(), module.to_string());
        }
    }
    out
}

/// Layer number -> modules, from the numbered list in `lib.rs`'s docs (`//! 3. ...`): the
/// backquoted names of modules in each item.
fn declared_layers(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let mut layer = None;
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            break;
        };
        let doc = doc.trim();
        // An item starts with its number; a blank line ends the list's current item.
        match doc.split_once(". ").map(|(n, _)| n.parse::<usize>()) {
            Some(Ok(n)) => layer = Some(n),
            _ if doc.is_empty() => layer = None,
            _ => {}
        }
        let Some(n) = layer else { continue };
        for quoted in doc.split('`').skip(1).step_by(2) {
            if modules.contains(quoted) {
                let before = out.insert(quoted.to_string(), n);
                assert!(
                    before.is_none_or(|b| b == n),
                    "lib.rs lists `{quoted}` in two layers"
                );
            }
        }
    }
    out
}

/// The non-test code of a source file: comment lines dropped, and everything from a
/// `#[cfg(test)]` module on.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        let next = lines.get(i + 1).map_or("", |l| l.trim());
        if t == "#[cfg(test)]" && (next.starts_with("mod ") || next.starts_with("pub mod ")) {
            break;
        }
        if !t.starts_with("//") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The first segment of every `crate::` path in `code` (each item of a `crate::{...}` group).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                if let Some(first) = words(item.split("::").next().unwrap_or("")).first() {
                    out.push(first.to_string());
                }
            }
        } else if let Some(first) = words(rest).first() {
            out.push(first.to_string());
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// (user, used) for every use of one top-level module by another.
fn uses(modules: &BTreeSet<String>, reexports: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut out = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(src()).expect("under src");
        let first = rel.components().next().expect("a component");
        let top = first.as_os_str().to_string_lossy();
        let top = top.strip_suffix(".rs").unwrap_or(&top).to_string();
        if top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for name in crate_paths(&code(&text)) {
            let used = if modules.contains(&name) {
                Some(name)
            } else {
                reexports.get(&name).cloned()
            };
            if let Some(used) = used.filter(|u| *u != top) {
                out.insert((top.clone(), used));
            }
        }
    }
    out.into_iter().collect()
}

#[test]
fn every_module_uses_only_lower_layers() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let modules = modules(&lib);
    let layers = declared_layers(&lib, &modules);
    let unlisted: Vec<_> = modules
        .iter()
        .filter(|m| !layers.contains_key(*m) && m.as_str() != "layering")
        .collect();
    assert!(
        unlisted.is_empty(),
        "lib.rs's layer list lacks {unlisted:?}"
    );
    let uses = uses(&modules, &reexports(&lib, &modules));
    assert!(uses.len() > 20, "the scan found too few uses: {uses:?}");
    let upward: Vec<String> = uses
        .iter()
        .filter(|(user, used)| layers.get(used) >= layers.get(user))
        .map(|(user, used)| {
            format!(
                "{user} (layer {}) uses {used} (layer {})",
                layers[user], layers[used]
            )
        })
        .collect();
    assert!(upward.is_empty(), "uses that do not go down: {upward:#?}");
}

#[test]
fn the_scanner_sees_paths_groups_and_reexports() {
    let code = code(
        "use crate::a::X;\n// crate::b\nfn f() { crate::c::g(); }\nuse crate::{d, e::Y, Z};\n\
         #[cfg(test)]\nmod tests { use crate::f; }\n",
    );
    assert_eq!(crate_paths(&code), ["a", "c", "d", "e", "Z"]);
    let lib = "//! 1. `b`: x\n//!    and `c`\n//! 0. `a`\n\nmod a;\npub mod b;\nmod c;\n\
               pub use a::{P, Q};\n";
    let modules = modules(lib);
    assert_eq!(modules.len(), 3);
    assert_eq!(reexports(lib, &modules)["Q"], "a");
    let layers = declared_layers(lib, &modules);
    assert_eq!((layers["a"], layers["b"], layers["c"]), (0, 1, 1));
}
