//! Resource limits and failures: time, memory and stack limits end a run with the right error,
//! script exceptions are reported, and the sandbox keeps working after every kind of failure.

use std::time::{Duration, Instant};

use crate::common::{result_of, MockHost};
use herald_script::{Limits, Sandbox, ScriptError};
use serde_json::json;

/// Limits whose time limit is far beyond what a memory bomb needs, so memory is what stops it.
fn generous_time() -> Limits {
    Limits {
        time_ms_max: 30_000,
        ..Limits::default()
    }
}

/// Asserts that a normal trigger still runs and sees a clean context.
fn assert_usable(sandbox: &mut Sandbox) {
    let source =
        r#"(event, db) => db.put("out", "result", {n: event.n * 2, fresh: typeof leaked})"#;
    assert_eq!(
        result_of(sandbox, source, json!({"n": 21})),
        json!({"n": 42, "fresh": "undefined"})
    );
}

fn run(sandbox: &mut Sandbox, source: &str) -> Result<(), ScriptError> {
    sandbox.run(source, &json!({}), &mut MockHost::default())
}

#[test]
fn an_infinite_loop_times_out() {
    let mut sandbox = Sandbox::new(Limits {
        time_ms_max: 100,
        ..Limits::default()
    })
    .unwrap();
    let start = Instant::now();
    let err = run(
        &mut sandbox,
        "() => { globalThis.leaked = 1; while (true) {} }",
    )
    .unwrap_err();
    let took = start.elapsed();
    assert_eq!(err, ScriptError::Timeout(100));
    assert_eq!(err.code(), "script_timeout");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_usable(&mut sandbox);
}

#[test]
fn a_timeout_cannot_be_caught_and_covers_async_work() {
    let mut sandbox = Sandbox::new(Limits {
        time_ms_max: 100,
        ..Limits::default()
    })
    .unwrap();
    let catching = "() => { for (;;) { try { while (true) {} } catch (e) {} } }";
    assert_eq!(run(&mut sandbox, catching), Err(ScriptError::Timeout(100)));
    assert_usable(&mut sandbox);
    let spinning_jobs = "() => { const spin = () => Promise.resolve().then(spin); spin(); }";
    assert_eq!(
        run(&mut sandbox, spinning_jobs),
        Err(ScriptError::Timeout(100))
    );
    assert_usable(&mut sandbox);
    let async_loop = "async () => { await null; while (true) {} }";
    assert_eq!(
        run(&mut sandbox, async_loop),
        Err(ScriptError::Timeout(100))
    );
    assert_usable(&mut sandbox);
}

#[test]
fn an_array_memory_bomb_runs_out_of_memory() {
    let mut sandbox = Sandbox::new(generous_time()).unwrap();
    let bomb =
        "() => { globalThis.leaked = 1; let a = []; while (true) a.push(new Array(1e6).fill(1)); }";
    let err = run(&mut sandbox, bomb).unwrap_err();
    assert_eq!(err, ScriptError::OutOfMemory);
    assert_eq!(err.code(), "script_memory");
    assert_usable(&mut sandbox);
}

#[test]
fn a_string_memory_bomb_runs_out_of_memory() {
    let mut sandbox = Sandbox::new(generous_time()).unwrap();
    let bomb = "() => { let s = 'x'; while (true) s += s; }";
    assert_eq!(run(&mut sandbox, bomb), Err(ScriptError::OutOfMemory));
    assert_usable(&mut sandbox);
}

#[test]
fn memory_bombs_that_catch_the_error_still_fail() {
    let mut sandbox = Sandbox::new(Limits {
        time_ms_max: 2_000,
        ..Limits::default()
    })
    .unwrap();
    // Catching the out-of-memory error frees the memory; retrying forever ends in the time limit.
    let stubborn = "() => { for (;;) { try { let a = []; while (true) a.push(new Array(1e5).fill(1)); } catch (e) {} } }";
    let err = run(&mut sandbox, stubborn).unwrap_err();
    assert!(
        matches!(err, ScriptError::Timeout(_) | ScriptError::OutOfMemory),
        "{err:?}"
    );
    assert_usable(&mut sandbox);
}

#[test]
fn memory_is_released_between_runs() {
    let mut sandbox = Sandbox::new(generous_time()).unwrap();
    // A run that leaves about 16 MiB of cyclic garbage behind...
    let hog = r#"(e, db) => {
        const a = []; for (let i = 0; i < 16; i++) { const o = {data: new Array(65536).fill(i)}; o.self = o; a.push(o); }
        a.push(a);
        db.put("out", "result", {n: a.length});
    }"#;
    // ...and one that allocates 20 MiB without creating objects, which would not prompt QuickJS to
    // collect it: the two fit in the 32 MiB limit only one at a time.
    let string = r#"(e, db) => db.put("out", "result", {n: "ab".repeat(10 * 1024 * 1024).length})"#;
    for _ in 0..3 {
        assert_eq!(result_of(&mut sandbox, hog, json!({})), json!({"n": 17}));
        assert_eq!(
            result_of(&mut sandbox, string, json!({})),
            json!({"n": 20 * 1024 * 1024})
        );
    }
}

#[test]
fn deep_recursion_throws_a_range_error() {
    let mut sandbox = Sandbox::new(Limits::default()).unwrap();
    match run(&mut sandbox, "() => { const f = n => f(n + 1) + 1; f(0); }").unwrap_err() {
        ScriptError::Thrown(text) => assert!(text.starts_with("RangeError"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_usable(&mut sandbox);
}

#[test]
fn a_thrown_error_is_reported_with_its_message_and_stack() {
    let mut sandbox = Sandbox::new(Limits::default()).unwrap();
    let source =
        "function (event, db) {\n  globalThis.leaked = 1;\n  throw new Error(\"boom\");\n}";
    let err = run(&mut sandbox, source).unwrap_err();
    assert_eq!(err.code(), "script_error");
    match &err {
        ScriptError::Thrown(text) => {
            assert!(text.starts_with("Error: boom\n"), "{text}");
            assert!(text.contains("trigger:3"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert_usable(&mut sandbox);
    assert_eq!(
        run(&mut sandbox, "() => { throw 'plain' }"),
        Err(ScriptError::Thrown("plain".into()))
    );
    assert_usable(&mut sandbox);
}

#[test]
fn host_calls_made_before_a_failure_are_not_undone_by_the_sandbox() {
    // The sandbox only reports; rolling back a failed trigger's writes is the host's business.
    let mut sandbox = Sandbox::new(Limits {
        time_ms_max: 100,
        ..Limits::default()
    })
    .unwrap();
    let mut host = MockHost::default();
    let source = r#"(e, db) => { db.put("a", "1", {n: 1}); while (true) {} }"#;
    assert_eq!(
        sandbox.run(source, &json!({}), &mut host),
        Err(ScriptError::Timeout(100))
    );
    assert_eq!(host.doc("a", "1"), Some(&json!({"n": 1})));
}

#[test]
fn a_sandbox_moves_to_another_thread() {
    let mut sandbox = Sandbox::new(Limits::default()).unwrap();
    assert_usable(&mut sandbox);
    let handle = std::thread::spawn(move || {
        assert_usable(&mut sandbox);
        sandbox
    });
    let mut sandbox = handle.join().unwrap();
    assert_usable(&mut sandbox);
}
