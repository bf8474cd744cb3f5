//! The module-cycle check: within each crate under `crates/*/src`, the top-level modules
//! (`src/foo.rs` and everything under `src/foo/` are `foo`) import one another without a cycle,
//! so each crate reads bottom-up.
//!
//! A module uses another when its non-test code names `crate::other` (in a `use`, grouped
//! `use crate::{a, b::c}` included, or in a path in code), or `super::other` from the top level
//! of its own module, or an item the crate root imports from `other` (`crate::Name` where
//! `lib.rs` says `pub use other::Name`). Test code (`#[cfg(test)]` items and the files of
//! `#[cfg(test)] mod x;`) may reach anywhere and is not read; neither are comments and strings.

use super::repo_root;
use super::tokens::{lex, without_test_code, Tok, Token};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// Crates allowed a module cycle while one is being cut, by package name: reported, not failed.
/// Empty since issue 29 cut the last ones; a listed crate with no cycle left fails, so the list
/// can only shrink.
const CYCLES_ALLOWED: &[&str] = &[];

/// Where a module first names another: file (from `src/`), line and the path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Site {
    file: String,
    line: usize,
    path: String,
}

/// The uses between the top-level modules of one crate: `from -> to -> first site`.
type Graph = BTreeMap<String, BTreeMap<String, Site>>;

/// Every file under `dir` ending in `.rs`, relative to `dir`, with `/` separators, sorted.
fn rust_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(dir).expect("under dir");
                found.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// A file's place in its crate: its top-level module (`None` for the root, `lib.rs` or
/// `main.rs`) and its depth in the module tree (`foo.rs` and `foo/mod.rs` are 1).
fn place(file: &str) -> (Option<&str>, usize) {
    let parts: Vec<&str> = file.split('/').collect();
    if parts.len() == 1 && (file == "lib.rs" || file == "main.rs") {
        return (None, 0);
    }
    let top = parts[0].strip_suffix(".rs").unwrap_or(parts[0]);
    let depth = parts.len() - usize::from(parts.len() > 1 && file.ends_with("/mod.rs"));
    (Some(top), depth)
}

/// The directory that holds the files of a file's child modules.
fn children_dir(file: &str) -> String {
    let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
    let join = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            format!("{a}/{b}")
        }
    };
    match name {
        "lib.rs" | "main.rs" | "mod.rs" => dir.to_string(),
        _ => join(dir, name.strip_suffix(".rs").unwrap_or(name)),
    }
}

/// The names a path starting at `t[i]` (just after `crate::` or the `super::`s that reach the
/// root) takes from the root: one, or each first name of a `{...}` group.
fn root_names(t: &[Token], i: usize) -> Vec<(String, usize)> {
    match t.get(i).map(|x| &x.tok) {
        Some(Tok::Ident(name)) => vec![(name.clone(), i)],
        Some(Tok::Punct('{')) => {
            let mut names = Vec::new();
            let mut depth = 0;
            let mut expect_name = true;
            for (j, x) in t.iter().enumerate().skip(i) {
                match &x.tok {
                    Tok::Punct('{') => {
                        depth += 1;
                        expect_name = depth == 1;
                    }
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if depth == 1 => expect_name = true,
                    Tok::Ident(name) if expect_name && depth == 1 => {
                        if name != "self" {
                            names.push((name.clone(), j));
                        }
                        expect_name = false;
                    }
                    _ => expect_name = false,
                }
            }
            names
        }
        _ => Vec::new(),
    }
}

/// The root-level names a file's code uses, with their lines: `crate::name`, or
/// `super::name` from the top level of a module at `depth` 1 (deeper files' `super::` stay
/// within their own top-level module).
fn root_references(t: &[Token], depth: usize) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    // Brace depths at which inline `mod x {` blocks opened: each is one level deeper.
    let mut inline: Vec<usize> = Vec::new();
    let mut braces = 0usize;
    let mut i = 0;
    while i < t.len() {
        let x = &t[i];
        let after_sep = i > 0 && (t[i - 1].tok == Tok::PathSep || t[i - 1].is_punct('$'));
        if x.is_punct('{') {
            if i >= 2 && t[i - 2].is_ident("mod") && matches!(t[i - 1].tok, Tok::Ident(_)) {
                inline.push(braces);
            }
            braces += 1;
        } else if x.is_punct('}') {
            braces = braces.saturating_sub(1);
            if inline.last() == Some(&braces) {
                inline.pop();
            }
        } else if !after_sep
            && x.is_ident("crate")
            && t.get(i + 1).map(|s| &s.tok) == Some(&Tok::PathSep)
        {
            found.extend(root_names(t, i + 2));
        } else if !after_sep && x.is_ident("super") {
            let mut ups = 0;
            let mut j = i;
            while t.get(j).is_some_and(|s| s.is_ident("super"))
                && t.get(j + 1).map(|s| &s.tok) == Some(&Tok::PathSep)
            {
                ups += 1;
                j += 2;
            }
            if ups > 0 && ups == depth + inline.len() {
                found.extend(root_names(t, j));
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    found
        .into_iter()
        .map(|(name, j)| (name, t[j].line))
        .collect()
}

/// The names the root's `use` items bring in from a top-level module: `name -> module`.
fn root_imports(t: &[Token], modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut braces = 0usize;
    let mut i = 0;
    while i < t.len() {
        if t[i].is_punct('{') {
            braces += 1;
        } else if t[i].is_punct('}') {
            braces = braces.saturating_sub(1);
        }
        if braces > 0 || !t[i].is_ident("use") {
            i += 1;
            continue;
        }
        let end = (i..t.len())
            .find(|&j| t[j].is_punct(';'))
            .unwrap_or(t.len());
        let mut path = &t[i + 1..end];
        while path.len() >= 2
            && (path[0].is_ident("crate") || path[0].is_ident("self"))
            && path[1].tok == Tok::PathSep
        {
            path = &path[2..];
        }
        if let Some(Tok::Ident(module)) = path.first().map(|x| &x.tok) {
            if modules.contains(module) {
                for (k, x) in path.iter().enumerate().skip(1) {
                    let Tok::Ident(name) = &x.tok else { continue };
                    let next = path.get(k + 1);
                    let leaf = next.is_none_or(|n| n.is_punct(',') || n.is_punct('}'));
                    if leaf && name != "self" {
                        map.insert(name.clone(), module.clone());
                    }
                }
            }
        }
        i = end;
    }
    map
}

/// The module graph of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> Graph {
    let files = rust_files(src);
    let mut code = BTreeMap::new();
    let mut test_only: Vec<String> = Vec::new();
    for file in &files {
        let text = fs::read_to_string(src.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let non_test = without_test_code(lex(&text));
        let dir = children_dir(file);
        for m in &non_test.test_modules {
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            test_only.push(format!("{prefix}{m}.rs"));
            test_only.push(format!("{prefix}{m}/"));
        }
        if non_test.all_test {
            test_only.push(file.clone());
        }
        code.insert(file.clone(), non_test.tokens);
    }
    code.retain(|f, _| {
        !test_only
            .iter()
            .any(|t| f == t || (t.ends_with('/') && f.starts_with(t.as_str())))
    });
    let modules: BTreeSet<String> = code
        .keys()
        .filter_map(|f| place(f).0.map(str::to_string))
        .collect();
    let root = ["lib.rs", "main.rs"].iter().find_map(|r| code.get(*r));
    let imports = root.map(|t| root_imports(t, &modules)).unwrap_or_default();
    let mut graph = Graph::new();
    for (file, tokens) in &code {
        let (Some(from), depth) = place(file) else {
            continue;
        };
        graph.entry(from.to_string()).or_default();
        for (name, line) in root_references(tokens, depth) {
            let to = if modules.contains(&name) {
                &name
            } else if let Some(m) = imports.get(&name) {
                m
            } else {
                continue; // an item of the root itself
            };
            if to != from {
                let path = if *to == name {
                    name.clone()
                } else {
                    format!("{name} (from {to})")
                };
                graph
                    .entry(from.to_string())
                    .or_default()
                    .entry(to.clone())
                    .or_insert(Site {
                        file: file.clone(),
                        line,
                        path,
                    });
            }
        }
    }
    graph
}

/// The modules reachable from `from`.
fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut pending = vec![from.to_string()];
    while let Some(m) = pending.pop() {
        for next in graph.get(&m).into_iter().flat_map(|e| e.keys()) {
            if seen.insert(next.clone()) {
                pending.push(next.clone());
            }
        }
    }
    seen
}

/// The shortest way from `start` back to itself through `group` (which holds a cycle through
/// it), as the modules passed, `start` first and last.
fn shortest_cycle(graph: &Graph, start: &str, group: &BTreeSet<String>) -> Vec<String> {
    // Breadth-first; `previous[x]` is the module the search reached `x` from.
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut last = None;
    'search: while let Some(at) = queue.pop_front() {
        for next in graph[at].keys().filter(|n| group.contains(*n)) {
            if next == start {
                last = Some(at);
                break 'search;
            }
            if !previous.contains_key(next.as_str()) {
                previous.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    let mut at = last.expect("a cycle through start");
    let mut steps = vec![start.to_string()];
    while at != start {
        steps.push(at.to_string());
        at = previous[at];
    }
    steps.push(start.to_string());
    steps.reverse();
    steps
}

/// One line per group of mutually dependent modules: its members, and one shortest cycle
/// through the first of them with where each step is written.
fn cycles(graph: &Graph) -> Vec<String> {
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reachable(graph, m))).collect();
    let mut reported = BTreeSet::new();
    let mut found = Vec::new();
    for (m, from_m) in &reach {
        if !from_m.contains(*m) || reported.contains(*m) {
            continue;
        }
        let group: BTreeSet<String> = from_m
            .iter()
            .filter(|o| reach.get(o).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        reported.extend(group.iter().cloned());
        let steps = shortest_cycle(graph, m, &group);
        let sites: Vec<String> = steps
            .windows(2)
            .map(|w| {
                let s = &graph[&w[0]][&w[1]];
                format!("{}:{} uses {}", s.file, s.line, s.path)
            })
            .collect();
        found.push(format!(
            "{{{}}}: {} ({})",
            group.into_iter().collect::<Vec<_>>().join(", "),
            steps.join(" -> "),
            sites.join("; ")
        ));
    }
    found
}

/// The package name in a crate's `Cargo.toml`.
fn package_name(dir: &Path) -> String {
    let toml = fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    toml.lines()
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_string())
        })
        .expect("a package name")
}

/// The crates under `crates/` that have a `src/`, as `(package name, src)`.
fn crates(root: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<_> = fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| (package_name(&p), p.join("src")))
        .collect();
    found.sort();
    found
}

/// The failures of the crates `(name, cycles)` given what is allowed.
fn failures(found: &[(String, Vec<String>)], allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, cycles) in found {
        let allow = allowed.contains(&name.as_str());
        if !allow {
            out.extend(cycles.iter().map(|c| format!("{name}: {c}")));
        } else if cycles.is_empty() {
            out.push(format!(
                "{name}: no cycle left: remove it from the allow-list"
            ));
        }
    }
    for name in allowed {
        if !found.iter().any(|(n, _)| n == name) {
            out.push(format!("{name}: allow-listed but not found: remove it"));
        }
    }
    out
}

#[test]
fn no_import_cycles_between_the_modules_of_a_crate() {
    let root = repo_root();
    let mut found = Vec::new();
    for (name, src) in crates(&root) {
        let graph = module_graph(&src);
        // A reader that saw nothing would pass vacuously.
        if name == "herald-query" {
            assert!(graph["query"].contains_key("filter"), "{graph:#?}");
        }
        let cycles = cycles(&graph);
        if CYCLES_ALLOWED.contains(&name.as_str()) {
            for c in &cycles {
                eprintln!("allowed for now: {name}: {c}");
            }
        }
        found.push((name, cycles));
    }
    let failures = failures(&found, CYCLES_ALLOWED);
    assert!(
        failures.is_empty(),
        "modules that import each other (move what they share down into the module it belongs \
         to, or into a new bottom module):\n{failures:#?}"
    );
}

/// A fresh directory for one synthetic crate.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cycles-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (file, text) in files {
        let path = dir.join(file);
        fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        fs::write(path, text).expect("a file");
    }
}

#[test]
fn a_cycle_in_a_synthetic_crate_is_found_and_named() {
    let src = scratch("cycle");
    write_tree(
        &src,
        &[
            ("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n"),
            ("a.rs", "//! A.\nuse crate::{b::{X, Y}};\n"),
            ("b/mod.rs", "//! B.\nmod inner;\n"),
            (
                "b/inner.rs",
                "//! B inside.\n\nfn f() -> crate::Thing { todo!() }\n",
            ),
            (
                "c.rs",
                "//! C.\npub struct Thing;\nfn g() { super::a::h(); }\n",
            ),
        ],
    );
    let graph = module_graph(&src);
    let found = cycles(&graph);
    assert_eq!(
        found,
        ["{a, b, c}: a -> b -> c -> a (a.rs:2 uses b; b/inner.rs:3 uses Thing (from c); c.rs:3 uses a)"]
    );
    let failed = failures(&[("demo".to_string(), found)], &[]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with("demo: {a, b, c}: a -> b"),
        "{failed:?}"
    );
}

#[test]
fn comments_strings_tests_and_inner_paths_make_no_edges() {
    let src = scratch("no-cycle");
    write_tree(
        &src,
        &[
            ("lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod testing;\n"),
            ("a.rs", "//! A uses b.\nuse crate::b::X;\n"),
            (
                "b.rs",
                "//! B, whose tests may use a.\n// crate::a::y\n\
                 const S: &str = \"crate::a\";\nmod inner;\n\
                 #[cfg(test)]\nmod tests { use crate::a::Y; }\n#[cfg(test)]\nmod more;\n",
            ),
            ("b/inner.rs", "//! Inside b.\nuse super::a::Z;\n"),
            ("b/more.rs", "//! Test-only.\nuse crate::a::W;\n"),
            (
                "testing.rs",
                "//! Test-only.\nuse crate::a::V;\nuse crate::b::V;\n",
            ),
        ],
    );
    let graph = module_graph(&src);
    let edges: Vec<_> = graph
        .iter()
        .flat_map(|(f, tos)| tos.keys().map(move |t| format!("{f} -> {t}")))
        .collect();
    assert_eq!(edges, ["a -> b"]);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn the_allow_list_only_shrinks() {
    let found = vec![
        ("p".to_string(), vec!["{x, y}: x -> y -> x".to_string()]),
        ("q".to_string(), vec![]),
        ("r".to_string(), vec!["{x, y}: x -> y -> x".to_string()]),
    ];
    let failed = failures(&found, &["q", "r", "gone"]);
    assert_eq!(
        failed,
        [
            "p: {x, y}: x -> y -> x",
            "q: no cycle left: remove it from the allow-list",
            "gone: allow-listed but not found: remove it",
        ]
    );
}

#[test]
fn places_of_files() {
    assert_eq!(place("lib.rs"), (None, 0));
    assert_eq!(place("foo.rs"), (Some("foo"), 1));
    assert_eq!(place("foo/mod.rs"), (Some("foo"), 1));
    assert_eq!(place("foo/bar.rs"), (Some("foo"), 2));
    assert_eq!(place("foo/bar/mod.rs"), (Some("foo"), 2));
    assert_eq!(children_dir("lib.rs"), "");
    assert_eq!(children_dir("foo.rs"), "foo");
    assert_eq!(children_dir("foo/mod.rs"), "foo");
    assert_eq!(children_dir("foo/bar.rs"), "foo/bar");
}

#[test]
fn references_to_the_root() {
    let refs = |text: &str, depth| -> Vec<String> {
        root_references(&without_test_code(lex(text)).tokens, depth)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    assert_eq!(
        refs(
            "use crate::{a, b::{c, d}, self, e as f};\nfn g() { crate::h::i(); $crate::j; }",
            1
        ),
        ["a", "b", "e", "h"]
    );
    assert_eq!(refs("use super::a; use super::super::b;", 1), ["a"]);
    assert_eq!(refs("use super::a; use super::super::b;", 2), ["b"]);
    assert_eq!(
        refs("mod m { use super::a; use super::super::b; }", 1),
        ["b"]
    );
    assert_eq!(
        refs("pub(crate) fn f() {} pub(super) fn g() {}", 1),
        Vec::<String>::new()
    );
}

#[test]
fn imports_of_the_root() {
    let modules: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    let t = lex("mod a; mod b;\npub use a::{X, y::Z, W as V};\nuse self::b::U;\nuse std::fmt::Q;\nfn f() { use a::N; }");
    let got: Vec<_> = root_imports(&t, &modules).into_iter().collect();
    let pair = |n: &str, m: &str| (n.to_string(), m.to_string());
    assert_eq!(
        got,
        [
            pair("U", "b"),
            pair("V", "a"),
            pair("X", "a"),
            pair("Z", "a")
        ]
    );
}
