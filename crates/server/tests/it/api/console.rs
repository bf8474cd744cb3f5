//! The web console's routes (`/console` and its assets, embedded in the binary), the collections
//! list (`GET /v1/collections`) and the notification latency histogram on `/metrics`.

use super::*;
use common::ws;

/// A raw GET: status, content type and body bytes (the console's files are not JSON).
async fn fetch(s: &Server, path: &str) -> (u16, String, Vec<u8>) {
    let r = s.client.get(s.url(path)).send().await.expect("request");
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ctype, r.bytes().await.expect("body").to_vec())
}

#[tokio::test]
async fn console_serves_the_page_and_its_assets() {
    let s = Server::start().await;
    for path in ["/console", "/console/", "/console/index.html"] {
        let (status, ctype, body) = fetch(&s, path).await;
        assert_eq!((status, ctype.as_str()), (200, "text/html; charset=utf-8"));
        let html = String::from_utf8(body).unwrap();
        assert!(html.contains("<title>Herald console</title>"), "{html}");
        assert!(html.contains(r#"src="/console/console.js""#));
    }
    let (status, ctype, js) = fetch(&s, "/console/console.js").await;
    assert_eq!(
        (status, ctype.as_str()),
        (200, "text/javascript; charset=utf-8")
    );
    // The bundle is the console built on the SDK: its API calls are in it.
    let js = String::from_utf8(js).unwrap();
    assert!(js.contains("/v1/collections") && js.contains("/v1/ws"));
    let (status, ctype, _) = fetch(&s, "/console/console.css").await;
    assert_eq!((status, ctype.as_str()), (200, "text/css; charset=utf-8"));
    s.send(s.req(Method::GET, "/console/missing.js"))
        .await
        .err(404, "route_not_found");
    s.send(s.req(Method::POST, "/console"))
        .await
        .err(405, "method_not_allowed");
    s.stop().await;
}

#[tokio::test]
async fn collections_lists_every_collection_with_documents_and_pages() {
    let s = Server::start().await;
    let list = |q: &'static str| {
        let s = &s;
        async move {
            s.send(s.req(Method::GET, &format!("/v1/collections{q}")))
                .await
                .ok(200)
        }
    };
    assert_eq!(list("").await, json!({"collections": [], "more": false}));
    for p in [
        "users/u1",
        "users/u2",
        "rooms/r1/messages/m1",
        "a/x",
        "users/u1/posts/p1",
    ] {
        s.put(p, json!({"n": 1})).await;
    }
    let names = json!([{"name": "a"}, {"name": "rooms/r1/messages"}, {"name": "users"}, {"name": "users/u1/posts"}]);
    assert_eq!(list("").await, json!({"collections": names, "more": false}));
    assert_eq!(
        list("?limit=2").await,
        json!({"collections": [{"name": "a"}, {"name": "rooms/r1/messages"}], "more": true})
    );
    assert_eq!(
        list("?limit=2&after=rooms%2Fr1%2Fmessages").await,
        json!({"collections": [{"name": "users"}, {"name": "users/u1/posts"}], "more": true})
    );
    assert_eq!(
        list("?after=users%2Fu1%2Fposts").await,
        json!({"collections": [], "more": false})
    );
    for bad in ["?limit=0", "?limit=x", "?limit=10001"] {
        s.send(s.req(Method::GET, &format!("/v1/collections{bad}")))
            .await
            .err(400, "bad_request");
    }
    // A collection whose last document is deleted is no longer listed.
    s.send(s.req(Method::DELETE, "/v1/docs/a/x")).await.ok(200);
    assert_eq!(
        list("?limit=1").await["collections"],
        json!([{"name": "rooms/r1/messages"}])
    );
    s.stop().await;
}

/// The sample `name` on `/metrics` (without labels).
async fn metric(s: &Server, name: &str) -> f64 {
    let text = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in {text}"))
}

#[tokio::test]
async fn metrics_time_every_changes_message_from_its_commit() {
    let s = Server::start().await;
    assert_eq!(
        metric(&s, "herald_live_notify_latency_seconds_count").await,
        0.0
    );
    let mut w = ws::connect(&s).await;
    ws::send(
        &mut w,
        json!({"op": "subscribe", "sub": "a", "collection": "c"}),
    )
    .await;
    ws::send(
        &mut w,
        json!({"op": "subscribe", "sub": "b", "collection": "c", "sort": {"n": -1}, "limit": 1}),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(ws::next(&mut w).await["type"], "initial");
    }
    for n in 0..3 {
        s.put(&format!("c/d{n}"), json!({"n": n})).await;
        for _ in 0..2 {
            assert_eq!(ws::next(&mut w).await["type"], "changes");
        }
    }
    // Six changes messages (two subscriptions, three commits), each timed once; the initial
    // results are not commits and are not timed.
    assert_eq!(
        metric(&s, "herald_live_notify_latency_seconds_count").await,
        6.0
    );
    assert_eq!(
        metric(&s, "herald_live_notify_latency_seconds_bucket{le=\"+Inf\"}").await,
        6.0
    );
    let sum = metric(&s, "herald_live_notify_latency_seconds_sum").await;
    assert!(sum > 0.0 && sum < 6.0 * 2.5, "{sum}");
    s.stop().await;
}

/// The checkpointer's work per table is on `/metrics`: it is most of a durable write's cost, so
/// an operator (and the next optimisation) needs to see it.
#[tokio::test]
async fn metrics_show_what_checkpoints_wrote_per_table() {
    let s = Server::start().await;
    for n in 0..3 {
        s.put(&format!("c/d{n}"), json!({"n": n})).await;
    }
    let docs = r#"herald_storage_checkpoint_entries_total{table="docs"}"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The entries are counted as each table is written, the checkpoint once it commits: a
    // scrape in between sees the first without the second, so wait for both.
    while metric(&s, docs).await < 3.0 || metric(&s, "herald_storage_checkpoints_total").await < 1.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint of the 3 documents"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Three documents with an indexed field each.
    let index = r#"herald_storage_checkpoint_entries_total{table="index"}"#;
    assert!(metric(&s, index).await >= 3.0);
    assert!(
        metric(
            &s,
            r#"herald_storage_checkpoint_seconds_total{table="index"}"#
        )
        .await
            > 0.0
    );
    assert!(metric(&s, "herald_storage_checkpoint_commit_seconds_total").await > 0.0);
    // Present (and a number) even when no merge ever held redb's write transaction.
    assert!(metric(&s, "herald_storage_checkpoint_wait_seconds_total").await >= 0.0);
    assert!(metric(&s, "herald_storage_layers_bytes").await >= 0.0);
    // The checkpoint wrote the index entries as a run.
    assert!(metric(&s, "herald_storage_index_runs").await >= 1.0);
    assert!(metric(&s, "herald_storage_index_run_merges_total").await >= 0.0);
}
