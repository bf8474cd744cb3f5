//! What a trigger can see and keep: source checking, a fresh global scope per run, no way out of
//! the sandbox, and the cost of a run.

use std::time::Instant;

use crate::common::{result_of, sandbox, MockHost};
use herald_script::{Limits, Sandbox, ScriptError};
use serde_json::json;

#[test]
fn check_accepts_function_expressions() {
    let mut sandbox = sandbox();
    for source in [
        "function (event, db) {}",
        "(e, db) => {}",
        "e => e.x",
        "async function (event, db) { await null; }",
        "async (e, db) => {}",
        "function named(event, db) { return named; }",
        "  function (event, db) {\n  // body\n}  // trailing comment",
        "function (event, db) { while (true) {} }",
    ] {
        assert_eq!(sandbox.check(source), Ok(()), "{source}");
    }
}

#[test]
fn check_refuses_what_is_not_a_function_expression() {
    let mut sandbox = sandbox();
    for source in [
        "not a function",
        "1+",
        "function(",
        "42",
        "",
        "null",
        "({handler() {}})",
        "function f() {} function g() {}",
        "import os from 'os'",
        "(() => { throw new Error('at top level') })()",
        "function (e, db) {}\0",
    ] {
        match sandbox.check(source) {
            Err(err @ ScriptError::Compile(_)) => assert_eq!(err.code(), "script_compile"),
            other => panic!("{source:?}: {other:?}"),
        }
    }
    match sandbox.check("1+").unwrap_err() {
        ScriptError::Compile(text) => assert!(text.starts_with("SyntaxError"), "{text}"),
        other => panic!("{other:?}"),
    }
    match sandbox.check("42").unwrap_err() {
        ScriptError::Compile(text) => assert!(text.contains("type int"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_refuses_source_that_is_not_a_function() {
    let mut host = MockHost::default();
    let err = sandbox()
        .run("'just a string'", &json!({}), &mut host)
        .unwrap_err();
    assert!(matches!(err, ScriptError::Compile(_)), "{err:?}");
    let err = sandbox()
        .run("function (", &json!({}), &mut host)
        .unwrap_err();
    assert!(matches!(err, ScriptError::Compile(_)), "{err:?}");
}

#[test]
fn globals_do_not_leak_between_runs() {
    let mut sandbox = sandbox();
    let first = r#"(e, db) => {
        globalThis.x = 1; var y = 2;
        Array.prototype.polluted = true; Object.prototype.alsoPolluted = true;
        JSON.parse = () => ({hijacked: true});
        db.put("out", "result", {x: typeof x});
    }"#;
    assert_eq!(
        result_of(&mut sandbox, first, json!({})),
        json!({"x": "number"})
    );
    let second = r#"(e, db) => db.put("out", "result", {
        x: typeof x, y: typeof y, array: [].polluted === undefined, object: ({}).alsoPolluted === undefined,
        json: JSON.parse("{\"a\": 1}").a, event: e.a
    })"#;
    assert_eq!(
        result_of(&mut sandbox, second, json!({"a": 1})),
        json!({"x": "undefined", "y": "undefined", "array": true, "object": true, "json": 1, "event": 1})
    );
}

#[test]
fn nothing_outside_ecmascript_is_reachable() {
    let mut sandbox = sandbox();
    let source = r#"(e, db) => {
        const names = ["require", "std", "os", "process", "module", "exports", "setTimeout",
                       "setInterval", "fetch", "XMLHttpRequest", "performance", "navigator",
                       "scriptArgs", "print", "WeakRef", "FinalizationRegistry", "Deno", "Bun"];
        const defined = names.filter(n => typeof globalThis[n] !== "undefined");
        db.put("out", "result", {defined, json: typeof JSON, math: typeof Math.max,
                                 date: typeof Date.now, regexp: /a+/.test("caa"),
                                 map: new Map([[1, 2]]).get(1), console: typeof console.log});
    }"#;
    assert_eq!(
        result_of(&mut sandbox, source, json!({})),
        json!({"defined": [], "json": "object", "math": "function", "date": "function",
               "regexp": true, "map": 2, "console": "function"})
    );
}

#[test]
fn modules_cannot_be_imported() {
    let mut sandbox = sandbox();
    let source = r#"async (e, db) => {
        const failures = [];
        for (const name of ["os", "std", "./local.js", "fs"]) {
            try { await import(name); failures.push(name + ": loaded"); }
            catch (err) { failures.push(name + ": refused"); }
        }
        db.put("out", "result", {failures});
    }"#;
    let out = result_of(&mut sandbox, source, json!({}));
    assert_eq!(
        out,
        json!({"failures": ["os: refused", "std: refused", "./local.js: refused", "fs: refused"]})
    );
    let uncaught = "() => import('os')";
    let err = sandbox
        .run(uncaught, &json!({}), &mut MockHost::default())
        .unwrap_err();
    assert!(matches!(err, ScriptError::Thrown(_)), "{err:?}");
}

#[test]
fn scripts_run_in_strict_mode() {
    let mut sandbox = sandbox();
    let err = sandbox
        .run(
            "() => { undeclared = 1 }",
            &json!({}),
            &mut MockHost::default(),
        )
        .unwrap_err();
    match err {
        ScriptError::Thrown(text) => assert!(text.starts_with("ReferenceError"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn db_is_only_what_the_function_receives() {
    let mut sandbox = sandbox();
    // Smuggling `db` out through a global does not reach the next run: its context is gone.
    let first = r#"(e, db) => { globalThis.saved = db; Object.prototype.saved = db; }"#;
    sandbox
        .run(first, &json!({}), &mut MockHost::default())
        .unwrap();
    let second =
        r#"(e, db) => db.put("out", "result", {saved: typeof saved, viaProto: typeof ({}).saved})"#;
    assert_eq!(
        result_of(&mut sandbox, second, json!({})),
        json!({"saved": "undefined", "viaProto": "undefined"})
    );
}

/// Not a benchmark with assertions: prints the cost of a run so it can be watched. Build with
/// `--release` for meaningful numbers (QuickJS's C code is unoptimised in debug builds).
#[test]
fn cost_of_a_run() {
    let mut sandbox = Sandbox::new(Limits::default()).unwrap();
    let mut host = MockHost::default().with_doc("users", "u1", json!({"name": "ada", "n": 1}));
    let event =
        json!({"op": "insert", "collection": "users", "after": {"_id": "u1", "name": "ada"}});
    let cases = [
        ("trivial", "function (event, db) {}"),
        (
            "one get",
            r#"function (event, db) { db.get("users", event.after._id); }"#,
        ),
        (
            "get + put",
            r#"function (event, db) {
            const u = db.get("users", event.after._id);
            db.put("audit", event.after._id, {op: event.op, name: u.name, n: u.n + 1});
        }"#,
        ),
    ];
    const RUNS: u32 = 1000;
    for (name, source) in cases {
        sandbox.run(source, &event, &mut host).unwrap();
        let start = Instant::now();
        for _ in 0..RUNS {
            sandbox.run(source, &event, &mut host).unwrap();
        }
        let per_run = start.elapsed() / RUNS;
        println!("cost of a run ({name}): {per_run:?} per run over {RUNS} runs");
    }
    let start = Instant::now();
    for _ in 0..RUNS {
        sandbox
            .check("function (event, db) { db.get('a', 'b'); }")
            .unwrap();
    }
    println!("cost of a check: {:?}", start.elapsed() / RUNS);
}
