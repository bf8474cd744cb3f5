//! The `db` object: each method reaches the host with the right arguments, results come back as
//! JavaScript values, bad arguments throw `TypeError`s, and host errors surface with their codes.

use crate::common::{result_of, run_with, sandbox, MockHost};
use herald_script::{HostError, ScriptError};
use serde_json::json;

#[test]
fn get_put_insert_update_delete_round_trip() {
    let mut host = MockHost::default().with_doc("users", "u1", json!({"name": "ada", "age": 36}));
    let source = r#"function (event, db) {
        const user = db.get("users", "u1");
        db.put("copies", "c1", {name: user.name, age: user.age + 1});
        const id = db.insert("log", {msg: "copied " + user.name});
        const named = db.insert("log", {_id: "fixed", msg: "named"});
        db.update("copies", "c1", {$set: {seen: true}, $unset: {age: 1}});
        db.delete("users", "u1");
        db.put("out", "ids", {id, named});
    }"#;
    run_with(source, json!({}), &mut host).unwrap();
    assert_eq!(
        host.doc("copies", "c1"),
        Some(&json!({"name": "ada", "seen": true}))
    );
    assert_eq!(host.doc("users", "u1"), None);
    assert_eq!(
        host.doc("out", "ids"),
        Some(&json!({"id": "gen-1", "named": "fixed"}))
    );
    assert_eq!(
        host.doc("log", "gen-1"),
        Some(&json!({"msg": "copied ada", "_id": "gen-1"}))
    );
    assert_eq!(host.calls, 7);
}

#[test]
fn query_passes_the_spec_through_and_returns_an_array() {
    let mut host = MockHost {
        query_result: vec![json!({"_id": "a", "n": 1}), json!({"_id": "b", "n": 2})],
        ..MockHost::default()
    };
    let source = r#"(event, db) => {
        const docs = db.query({collection: "items", filter: {n: {$gt: 0}}, sort: [["n", -1]],
                               skip: 1, limit: 10, extra: undefined});
        db.put("out", "result", {isArray: Array.isArray(docs), total: docs.reduce((s, d) => s + d.n, 0)});
    }"#;
    run_with(source, json!({}), &mut host).unwrap();
    let spec = json!({"collection": "items", "filter": {"n": {"$gt": 0}}, "sort": [["n", -1]],
                      "skip": 1, "limit": 10});
    assert_eq!(host.queries, vec![spec.clone()]);
    let keys: Vec<_> = host.queries[0]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["collection", "filter", "sort", "skip", "limit"]);
    assert_eq!(
        host.doc("out", "result"),
        Some(&json!({"isArray": true, "total": 3}))
    );
}

#[test]
fn reading_a_missing_document_returns_null() {
    let mut sb = sandbox();
    let source = r#"(e, db) => db.put("out", "result", {doc: db.get("nothing", "here"),
                                                       isNull: db.get("nothing", "here") === null})"#;
    assert_eq!(
        result_of(&mut sb, source, json!({})),
        json!({"doc": null, "isNull": true})
    );
}

#[test]
fn event_fields_are_visible() {
    let mut sb = sandbox();
    let event = json!({"op": "update", "collection": "items", "before": {"x": 1},
                       "after": {"x": 2, "tags": ["a", "b"]}});
    let source = r#"function (event, db) {
        db.put("out", "result", {op: event.op, x: event.after.x, was: event.before.x,
                                 tag: event.after.tags[1]});
    }"#;
    assert_eq!(
        result_of(&mut sb, source, event),
        json!({"op": "update", "x": 2, "was": 1, "tag": "b"})
    );
}

#[test]
fn key_order_and_number_kinds_survive_both_ways() {
    let mut sb = sandbox();
    let event = json!({"doc": {"z": 1, "a": 2, "m": {"y": 1, "b": 2}},
                       "max": 9007199254740991_i64, "min": -9007199254740991_i64, "half": 1.5,
                       "tenth": 0.1});
    let source = r#"(event, db) => db.put("out", "result", {
        doc: event.doc, max: event.max, min: event.min, half: event.half, tenth: event.tenth,
        sum: event.tenth + 0.2, two: 4 / 2, big: 2 ** 60, later: {b: 1, a: 2}})"#;
    let out = result_of(&mut sb, source, event);
    assert_eq!(
        serde_json::to_string(&out).unwrap(),
        r#"{"doc":{"z":1,"a":2,"m":{"y":1,"b":2}},"max":9007199254740991,"min":-9007199254740991,"half":1.5,"tenth":0.1,"sum":0.30000000000000004,"two":2,"big":1.152921504606847e+18,"later":{"b":1,"a":2}}"#
    );
    assert_eq!(out["max"].as_i64(), Some(9007199254740991));
    assert_eq!(out["min"].as_i64(), Some(-9007199254740991));
    assert!(out["half"].is_f64());
    assert!(out["two"].is_i64() || out["two"].is_u64());
    assert!(out["big"].is_f64());
}

#[test]
fn wrong_arguments_throw_type_errors_into_the_script() {
    let mut sb = sandbox();
    let source = r#"(event, db) => {
        const errors = [];
        const attempts = [
            () => db.get("c"), () => db.get(1, "x"), () => db.put("c", "id", [1]),
            () => db.put("c", "id", null), () => db.put("c", "id"), () => db.insert("c", "doc"),
            () => db.update("c", "id", 5), () => db.delete("c", {}), () => db.query({filter: {}}),
            () => db.query("items"), () => db.put("c", "id", {n: 10n}),
        ];
        for (const attempt of attempts) {
            try { attempt(); errors.push("no error"); }
            catch (e) { errors.push(e instanceof TypeError ? e.message : "not a TypeError: " + e); }
        }
        db.put("out", "result", {errors});
    }"#;
    let out = result_of(&mut sb, source, json!({}));
    let errors: Vec<&str> = out["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(errors[0], "db.get: missing argument id");
    assert_eq!(errors[1], "db.get: collection must be a string, not int");
    assert_eq!(errors[2], "db.put: doc must be an object, not array");
    assert_eq!(errors[3], "db.put: doc must be an object, not null");
    assert_eq!(errors[4], "db.put: missing argument doc");
    assert_eq!(errors[5], "db.insert: doc must be an object, not string");
    assert_eq!(errors[6], "db.update: update must be an object, not int");
    assert_eq!(errors[7], "db.delete: id must be a string, not object");
    assert_eq!(errors[8], "db.query: spec.collection must be a string");
    assert_eq!(errors[9], "db.query: spec must be an object, not string");
    assert!(errors[10].contains("BigInt"), "{}", errors[10]);
}

#[test]
fn an_uncaught_wrong_argument_fails_the_run_as_thrown() {
    let mut host = MockHost::default();
    let err = run_with("(e, db) => db.get()", json!({}), &mut host).unwrap_err();
    match err {
        ScriptError::Thrown(text) => {
            assert!(text.starts_with("TypeError: db.get: missing"), "{text}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(host.calls, 0);
}

#[test]
fn an_uncaught_host_error_fails_the_run_with_the_host_error() {
    let mut host = MockHost::default();
    let err = run_with(
        r#"(e, db) => { db.delete("users", "ghost"); }"#,
        json!({}),
        &mut host,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ScriptError::Host(HostError::new("not_found", "no document ghost in users"))
    );
    assert_eq!(err.code(), "script_host");

    // Rethrowing the caught error is still the host's error; wrapping it is the script's own.
    let rethrow = r#"(e, db) => { try { db.delete("users", "ghost") } catch (err) { throw err } }"#;
    assert!(matches!(
        run_with(rethrow, json!({}), &mut host),
        Err(ScriptError::Host(_))
    ));
    let wrap = r#"(e, db) => { try { db.delete("users", "ghost") } catch (err) { throw new Error("wrapped " + err.message) } }"#;
    match run_with(wrap, json!({}), &mut host).unwrap_err() {
        ScriptError::Thrown(text) => assert!(
            text.starts_with("Error: wrapped not_found: no document"),
            "{text}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_caught_host_error_lets_the_run_succeed() {
    let mut host = MockHost {
        fail_next: Some(HostError::new("conflict", "try again")),
        ..MockHost::default()
    };
    let source = r#"(event, db) => {
        try { db.put("a", "1", {}); } catch (e) {
            db.put("out", "result", {code: e.code, message: e.message, isError: e instanceof Error});
        }
    }"#;
    run_with(source, json!({}), &mut host).unwrap();
    assert_eq!(
        host.doc("out", "result"),
        Some(&json!({"code": "conflict", "message": "conflict: try again", "isError": true}))
    );
    assert_eq!(host.doc("a", "1"), None);
}

#[test]
fn async_functions_await_db_calls_and_report_rejections() {
    let mut sb = sandbox();
    let mut host = MockHost::default().with_doc("c", "1", json!({"n": 1}));
    let source = r#"async (event, db) => {
        const doc = await db.get("c", "1");
        await null;
        db.put("c", "2", {n: doc.n + 1});
    }"#;
    sb.run(source, &json!({}), &mut host).unwrap();
    assert_eq!(host.doc("c", "2"), Some(&json!({"n": 2})));

    let missing = r#"async (event, db) => { await null; db.update("c", "nope", {$set: {a: 1}}); }"#;
    let err = sb.run(missing, &json!({}), &mut host).unwrap_err();
    assert!(
        matches!(&err, ScriptError::Host(e) if e.code == "not_found"),
        "{err:?}"
    );

    let rejects = r#"async () => { await null; throw new RangeError("late") }"#;
    match sb.run(rejects, &json!({}), &mut host).unwrap_err() {
        ScriptError::Thrown(text) => assert!(text.starts_with("RangeError: late"), "{text}"),
        other => panic!("{other:?}"),
    }

    let never = "() => new Promise(() => {})";
    match sb.run(never, &json!({}), &mut host).unwrap_err() {
        ScriptError::Thrown(text) => assert!(text.contains("never settled"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn microtasks_queued_by_a_synchronous_function_still_run() {
    let mut host = MockHost::default();
    let source = r#"(e, db) => { Promise.resolve(7).then(n => db.put("out", "result", {n})); }"#;
    run_with(source, json!({}), &mut host).unwrap();
    assert_eq!(host.doc("out", "result"), Some(&json!({"n": 7})));
}

#[test]
fn db_methods_detached_from_db_still_work_and_console_discards() {
    let mut sb = sandbox();
    let source = r#"(e, db) => {
        const { put } = db;
        console.log("not printed", {a: 1}); console.error("nor this");
        put("out", "result", {ok: true, names: Object.keys(db)});
    }"#;
    let names = json!(["get", "query", "put", "insert", "update", "delete"]);
    assert_eq!(
        result_of(&mut sb, source, json!({})),
        json!({"ok": true, "names": names})
    );
}
