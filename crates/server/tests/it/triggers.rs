//! Triggers over the HTTP API on a real server: definitions, a JavaScript fan-out, per-document
//! commit order, sandbox failures (infinite loop, memory bomb, exception) that fail only their
//! task, dead letters (inspect, retry, purge), webhooks with a stable idempotency key, status
//! and `/metrics`.

use crate::common::{nosync, Server};
use axum::http::{HeaderMap, StatusCode};
use herald::triggers::TriggerOptions;
use reqwest::Method;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Short limits and backoff so failures and retries happen within a test.
async fn start() -> Server {
    let opts = TriggerOptions {
        workers: 4,
        script: herald_script::Limits {
            time_ms_max: 200,
            memory_bytes_max: 16 << 20,
            ..herald_script::Limits::default()
        },
        webhook_timeout: Duration::from_millis(500),
        backoff_base_ms: 5,
        backoff_max_ms: 40,
    };
    Server::start_full(tempfile::tempdir().unwrap(), nosync(), opts).await
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn define(s: &Server, name: &str, def: Value) -> Value {
    s.json(Method::PUT, &format!("/v1/triggers/{name}"), &def)
        .await
        .ok(201)
}

async fn status(s: &Server, name: &str) -> Value {
    s.send(s.req(Method::GET, &format!("/v1/triggers/{name}")))
        .await
        .ok(200)
}

async fn dead(s: &Server, name: &str) -> Vec<Value> {
    let v = s
        .send(s.req(Method::GET, &format!("/v1/triggers/{name}/dead")))
        .await
        .ok(200);
    v["deadLetters"].as_array().unwrap().clone()
}

/// The Twitter example's triggers (examples/twitter), so the example stays true.
const FANOUT: &str = include_str!("../../../../examples/twitter/fanout.js");
const UNFOLLOW: &str = include_str!("../../../../examples/twitter/unfollow.js");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_trigger_fans_out_tweets() {
    let s = start().await;
    let def = define(
        &s,
        "fanout",
        json!({"collection": "tweets", "on": ["insert"], "function": FANOUT}),
    )
    .await;
    assert_eq!(def["name"], "fanout");
    s.put("users/ann", json!({"tweets": 0})).await;
    for f in ["bob", "cy", "dee"] {
        s.put(
            &format!("follows/{f}-ann"),
            json!({"follower": f, "followee": "ann"}),
        )
        .await;
    }
    for i in 0..5 {
        s.json(
            Method::POST,
            "/v1/docs/tweets",
            &json!({"_id": format!("t{i}"), "by": "ann", "text": format!("hello {i}")}),
        )
        .await
        .ok(201);
    }
    eventually("the fan-out", || async {
        status(&s, "fanout").await["pending"] == 0
    })
    .await;
    for f in ["bob", "cy", "dee"] {
        let q = s
            .query(json!({"collection": format!("timelines/{f}/entries"), "sort": {"_id": 1}}))
            .await;
        let ids: Vec<&str> = q["docs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["t0", "t1", "t2", "t3", "t4"], "timeline of {f}");
    }
    assert_eq!(s.get("users/ann").await.ok(200)["tweets"], 5);
    let st = status(&s, "fanout").await;
    assert_eq!(
        (st["executed"].as_u64(), st["failed"].as_u64()),
        (Some(5), Some(0))
    );
    assert!(st["oldestPendingAgeMs"].is_null());

    // Unfollowing removes the followee's tweets from the timeline.
    define(
        &s,
        "unfollow",
        json!({"collection": "follows", "on": ["delete"], "function": UNFOLLOW}),
    )
    .await;
    s.send(s.req(Method::DELETE, "/v1/docs/follows/cy-ann"))
        .await
        .ok(200);
    eventually("the unfollow", || async {
        status(&s, "unfollow").await["executed"] == 1
    })
    .await;
    let cy = s.query(json!({"collection": "timelines/cy/entries"})).await;
    assert_eq!(cy["docs"], json!([]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_document_run_in_commit_order() {
    let s = start().await;
    // Appends each new value of counters/c to a log, via get + put: any reordering or lost
    // update shows in the log.
    define(
        &s,
        "order",
        json!({"collection": "counters", "on": ["insert", "update"], "function": r#"function (e, db) {
            const key = "log-" + e.id;
            const log = db.get("logs", key) || {values: []};
            log.values.push(e.after.n);
            db.put("logs", key, log);
        }"#}),
    )
    .await;
    // Three documents written concurrently, each one sequentially.
    let one = |c: &'static str| {
        let s = &s;
        async move {
            for n in 0..40 {
                s.put(&format!("counters/{c}"), json!({"n": n})).await;
            }
        }
    };
    futures_util::join!(one("a"), one("b"), one("c"));
    eventually("the queue to drain", || async {
        status(&s, "order").await["pending"] == 0
    })
    .await;
    let expected: Vec<Value> = (0..40).map(|n| json!(n)).collect();
    for c in ["a", "b", "c"] {
        let log = s.get(&format!("logs/log-{c}")).await.ok(200);
        assert_eq!(log["values"].as_array().unwrap(), &expected, "log of {c}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_failures_fail_only_their_task() {
    let s = start().await;
    let bodies = [
        (
            "spin",
            "function (e, db) { while (true) {} }",
            "script_timeout",
        ),
        (
            "bomb",
            "function (e, db) { let a = []; while (true) a.push(new Array(1e6).fill(1)); }",
            "script_memory",
        ),
        (
            "throw",
            "function (e, db) { throw new Error('boom'); }",
            "script_error",
        ),
    ];
    for (name, src, _) in bodies {
        define(
            &s,
            name,
            json!({"collection": "jobs", "maxAttempts": 2, "function": src}),
        )
        .await;
    }
    define(
        &s,
        "good",
        json!({"collection": "jobs", "function": "function (e, db) { db.put('done', e.id, {ok: true}); }"}),
    )
    .await;
    s.put("jobs/j1", json!({})).await;
    for (name, _, code) in bodies {
        eventually("the dead letter", || async {
            dead(&s, name).await.len() == 1
        })
        .await;
        let letter = &dead(&s, name).await[0];
        assert_eq!(letter["attempts"], 2, "{name}");
        let err = letter["lastError"].as_str().unwrap();
        assert!(err.starts_with(code), "{name}: {err}");
        let st = status(&s, name).await;
        assert_eq!(
            (st["pending"].as_u64(), st["dead"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(st["failed"], 2);
        assert!(st["recentErrors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with(code));
    }
    assert!(s.get("done/j1").await.ok(200)["ok"] == true);
    assert!(dead(&s, "throw").await[0]["lastError"]
        .as_str()
        .unwrap()
        .contains("boom"));
    // The server kept serving, and the failed triggers keep working on later writes.
    s.put("jobs/j2", json!({})).await;
    eventually("the good trigger", || async {
        s.get("done/j2").await.status == 200
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_can_be_retried_and_purged() {
    let s = start().await;
    define(
        &s,
        "gated",
        json!({"collection": "in", "maxAttempts": 1, "function": r#"function (e, db) {
            if (!db.get("config", "open")) throw new Error("closed");
            db.put("out", e.id, {seen: true});
        }"#}),
    )
    .await;
    for i in 0..3 {
        s.put(&format!("in/d{i}"), json!({})).await;
    }
    eventually("three dead letters", || async {
        dead(&s, "gated").await.len() == 3
    })
    .await;
    let letters = dead(&s, "gated").await;
    let first = letters[0]["task"].as_str().unwrap().to_string();
    assert_eq!(letters[0]["id"], "d0");
    assert_eq!(letters[0]["op"], "insert");
    s.put("config/open", json!({})).await;
    let r = s
        .json(
            Method::POST,
            "/v1/triggers/gated/dead/retry",
            &json!({"tasks": [first]}),
        )
        .await
        .ok(200);
    assert_eq!(r["retried"], 1);
    eventually("the retried task", || async {
        s.get("out/d0").await.status == 200
    })
    .await;
    let r = s
        .send(s.req(Method::POST, "/v1/triggers/gated/dead/purge"))
        .await
        .ok(200);
    assert_eq!(r["purged"], 2);
    assert!(dead(&s, "gated").await.is_empty());
    assert_eq!(s.get("out/d1").await.status, 404);
    s.json(
        Method::POST,
        "/v1/triggers/gated/dead/retry",
        &json!({"tasks": [7]}),
    )
    .await
    .err(400, "bad_request");
    s.send(s.req(Method::GET, "/v1/triggers/gated/dead?limit=0"))
        .await
        .err(400, "bad_request");
    s.stop().await;
}

struct Metrics {
    text: String,
}

/// A local receiver that fails the first `fail_first` requests with 500.
async fn receiver(fail_first: usize) -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let log = log.clone();
            async move {
                let key = headers
                    .get("idempotency-key")
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default();
                assert_eq!(headers.get("x-secret").unwrap(), "s3");
                let mut log = log.lock().unwrap();
                log.push((key, body.0));
                if log.len() <= fail_first {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_retry_with_one_idempotency_key() {
    let s = start().await;
    let (url, seen) = receiver(2).await;
    define(
        &s,
        "hook",
        json!({"collection": "orders", "webhook": {"url": url, "headers": {"x-secret": "s3"}}}),
    )
    .await;
    s.put("orders/o1", json!({"total": 12})).await;
    eventually("the webhook to succeed", || async {
        status(&s, "hook").await["executed"] == 1
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(!seen[0].0.is_empty());
    assert!(seen.iter().all(|(k, _)| *k == seen[0].0), "{seen:?}");
    let attempts: Vec<u64> = seen
        .iter()
        .map(|(_, b)| b["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(seen[2].1["event"]["after"]["total"], 12);
    assert_eq!(seen[2].1["trigger"], "hook");
    let st = status(&s, "hook").await;
    assert_eq!(
        (st["failed"].as_u64(), st["pending"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(st["recentErrors"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("webhook_status"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_are_validated_listed_and_deleted() {
    let s = start().await;
    for (body, code) in [
        (
            json!({"collection": "t", "function": "not a function"}),
            "script_compile",
        ),
        (
            json!({"collection": "t", "function": "function ("}),
            "script_compile",
        ),
        (json!({"collection": "t"}), "bad_trigger"),
        (
            json!({"collection": "t", "function": "function(){}", "on": ["upsert"]}),
            "bad_trigger",
        ),
        (
            json!({"collection": "t", "function": "function(){}", "filter": {"$nope": 1}}),
            "unknown_operator",
        ),
        (
            json!({"collection": "a/b", "function": "function(){}"}),
            "bad_path",
        ),
        (
            json!({"collection": "t", "function": "function(){}", "extra": 1}),
            "bad_trigger",
        ),
        (
            json!({"collection": "t", "webhook": {"url": "http://x", "method": "GET"}}),
            "bad_trigger",
        ),
    ] {
        s.json(Method::PUT, "/v1/triggers/x", &body)
            .await
            .err(400, code);
    }
    s.json(
        Method::PUT,
        "/v1/triggers/__x",
        &json!({"collection": "t", "function": "function(){}"}),
    )
    .await
    .err(400, "bad_path");
    s.send(s.req(Method::GET, "/v1/triggers/x"))
        .await
        .err(404, "trigger_not_found");
    assert_eq!(
        s.send(s.req(Method::GET, "/v1/triggers")).await.ok(200)["triggers"],
        json!([])
    );
    define(
        &s,
        "b",
        json!({"collection": "users/*/posts", "function": "(e, db) => {}"}),
    )
    .await;
    define(
        &s,
        "a",
        json!({"collection": "t", "webhook": {"url": "http://127.0.0.1:9/x"}}),
    )
    .await;
    // Replacing answers 200.
    s.json(
        Method::PUT,
        "/v1/triggers/b",
        &json!({"collection": "users/*/posts", "on": ["delete"], "function": "(e, db) => {}"}),
    )
    .await
    .ok(200);
    let list = s.send(s.req(Method::GET, "/v1/triggers")).await.ok(200);
    let names: Vec<&str> = list["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(list["triggers"][1]["on"], json!(["delete"]));
    let metrics = s.req(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let metrics = Metrics {
        text: metrics.text().await.unwrap(),
    };
    assert!(
        metrics
            .text
            .contains("herald_trigger_pending_tasks{trigger=\"a\"} 0"),
        "{}",
        metrics.text
    );
    assert!(metrics
        .text
        .contains("# TYPE herald_trigger_executed_total counter"));
    for family in [
        "# TYPE herald_storage_log_sync_seconds histogram",
        "# TYPE herald_storage_durable_checkpoint_seconds histogram",
        "# TYPE herald_storage_log_bytes_total counter",
        "# TYPE herald_live_notify_latency_seconds histogram",
    ] {
        assert!(metrics.text.contains(family), "{family}");
    }
    s.send(s.req(Method::DELETE, "/v1/triggers/a"))
        .await
        .ok(200);
    s.send(s.req(Method::DELETE, "/v1/triggers/a"))
        .await
        .err(404, "trigger_not_found");
    s.stop().await;
}
