//! The server on a node of a cluster, without Kafka: a "follower" is a real server whose
//! `ClusterView` is a test fake naming a second, single-node server as its primary. Writes sent
//! to the follower must answer exactly as the primary's (they are the primary's), reads stay
//! local, the loop guard and `unavailable` cases hold, and `minSeq` waits (on any server).
//!
//! The follower's own database is not replicated here, so tests that must not wait for a
//! forwarded write's seq first raise the follower's seq above anything the primary reaches
//! ([`ahead`]).

use crate::auth::{call, next, options, ws_with, ADMIN_KEY};
use crate::common::{Resp, Server};
use herald::cluster::{ClusterView, Role};
use herald_protocol::{ClusterStatus, NodeRole, NodeStatus};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A node's view of the cluster, set by the test.
struct FakeView {
    id: String,
    role: Mutex<Role>,
    primary: Mutex<Option<String>>,
}

impl FakeView {
    fn new(role: Role, primary: Option<String>) -> Arc<FakeView> {
        Arc::new(FakeView {
            id: "n2".into(),
            role: Mutex::new(role),
            primary: Mutex::new(primary),
        })
    }

    fn set_role(&self, role: Role) {
        *self.role.lock().unwrap() = role;
    }
}

impl ClusterView for FakeView {
    fn role(&self) -> Role {
        *self.role.lock().unwrap()
    }

    fn primary_url(&self) -> Option<String> {
        self.primary.lock().unwrap().clone()
    }

    fn node_id(&self) -> String {
        self.id.clone()
    }

    fn status(&self) -> ClusterStatus {
        let node = |id: &str, role| NodeStatus {
            id: id.into(),
            url: format!("http://{id}"),
            role,
            applied_seq: 7,
            lag_seqs: 0,
            last_seen_ms: 5,
        };
        ClusterStatus {
            cluster: Some("test".into()),
            node_id: self.id.clone(),
            epoch: 3,
            primary: Some("n1".into()),
            nodes: vec![
                node("n1", NodeRole::Primary),
                node("n2", self.role().node_role()),
            ],
            grid: None,
        }
    }
}

/// Seqs the follower is raised to by [`ahead`]: more than any test here writes on a primary.
const AHEAD: u64 = 300;

/// A primary (single node, authentication on) and a follower forwarding to it.
async fn pair() -> (Server, Server, Arc<FakeView>) {
    let primary = Server::start_auth(tempfile::tempdir().unwrap(), options()).await;
    let view = FakeView::new(Role::Follower, Some(primary.url("")));
    let follower = Server::start_cluster(options(), view.clone()).await;
    (primary, follower, view)
}

/// Raises the follower's own seq to [`AHEAD`] (writing while its view says primary), so that
/// forwarded writes never wait for their seq on it.
async fn ahead(follower: &Server, view: &FakeView) {
    view.set_role(Role::Primary);
    let lines: String = (0..AHEAD)
        .map(|i| {
            format!(
                "{}\n",
                json!({"op": "put", "collection": "pad", "id": format!("p{i}"), "doc": {}})
            )
        })
        .collect();
    let r = follower
        .send(
            follower
                .req(Method::POST, "/v1/bulk")
                .bearer_auth(ADMIN_KEY)
                .body(lines),
        )
        .await
        .ok(200);
    assert_eq!(r["applied"], AHEAD);
    view.set_role(Role::Follower);
}

async fn admin(s: &Server, m: Method, path: &str, body: Option<Value>) -> Resp {
    call(s, ADMIN_KEY, m, path, body).await
}

fn retry_after(r: &reqwest::Response) -> Option<&str> {
    r.headers().get("retry-after").and_then(|v| v.to_str().ok())
}

/// The same failing request straight to the primary and through the follower: the same
/// status and body.
async fn same_error(
    primary: &Server,
    follower: &Server,
    rb: impl Fn(&Server) -> reqwest::RequestBuilder,
) -> Resp {
    let direct = primary.send(rb(primary)).await;
    let forwarded = follower.send(rb(follower)).await;
    assert!(direct.status >= 400, "{}", direct.text);
    assert_eq!(
        (forwarded.status, &forwarded.body),
        (direct.status, &direct.body)
    );
    forwarded
}

#[tokio::test]
async fn every_write_kind_is_forwarded_and_answered_as_the_primary_answers() {
    let (primary, follower, view) = pair().await;
    ahead(&follower, &view).await;
    let fseq = follower.seq().await;

    // Documents.
    let put = admin(
        &follower,
        Method::PUT,
        "/v1/docs/c/a",
        Some(json!({"n": 1})),
    )
    .await
    .ok(200);
    assert_eq!(
        (put["id"].as_str(), put["version"].as_u64()),
        (Some("a"), Some(1))
    );
    assert_eq!(put["seq"].as_u64(), Some(primary.seq().await));
    let got = admin(&primary, Method::GET, "/v1/docs/c/a", None)
        .await
        .ok(200);
    assert_eq!(got["n"], 1);
    let ins = admin(&follower, Method::POST, "/v1/docs/c", Some(json!({"n": 2})))
        .await
        .ok(201);
    assert!(ins["id"].is_string());
    let patched = admin(
        &follower,
        Method::PATCH,
        "/v1/docs/c/a",
        Some(json!({"$set": {"n": 5}})),
    )
    .await
    .ok(200);
    assert_eq!(patched["doc"]["n"], 5);
    let commit = json!({"writes": [
        {"op": "put", "collection": "c", "id": "b", "doc": {"n": 3}},
        {"op": "delete", "collection": "c", "id": "a"}
    ]});
    let committed = admin(&follower, Method::POST, "/v1/commit", Some(commit))
        .await
        .ok(200);
    assert_eq!(committed["results"].as_array().unwrap().len(), 2);
    let deleted = admin(&follower, Method::DELETE, "/v1/docs/c/b", None)
        .await
        .ok(200);
    assert_eq!(deleted["deleted"], true);
    admin(&primary, Method::GET, "/v1/docs/c/b", None)
        .await
        .err(404, "not_found");
    let bulk = follower
        .send(
            follower
                .req(Method::POST, "/v1/bulk")
                .bearer_auth(ADMIN_KEY)
                .body("{\"op\":\"put\",\"collection\":\"c\",\"id\":\"x\",\"doc\":{}}\n{\"op\":\"put\",\"collection\":\"c\",\"id\":\"y\",\"doc\":{}}\n"),
        )
        .await
        .ok(200);
    assert_eq!(bulk["applied"], 2);
    admin(&primary, Method::GET, "/v1/docs/c/y", None)
        .await
        .ok(200);

    // Administration.
    let index = json!({"collection": "c", "name": "by_n", "fields": [{"path": "n", "order": 1}, {"path": "m", "order": 1}]});
    admin(&follower, Method::POST, "/v1/indexes", Some(index))
        .await
        .ok(202);
    let ex = json!({"collection": "c", "exemptions": ["body"]});
    admin(&follower, Method::PUT, "/v1/indexes/exemptions", Some(ex))
        .await
        .ok(200);
    let listed = admin(&primary, Method::GET, "/v1/indexes?collection=c", None)
        .await
        .ok(200);
    assert_eq!(listed["exemptions"], json!(["body"]));
    let trigger = json!({"collection": "c", "on": ["insert"], "function": "function (e, db) {}"});
    admin(&follower, Method::PUT, "/v1/triggers/t", Some(trigger))
        .await
        .ok(201);
    admin(
        &follower,
        Method::POST,
        "/v1/triggers/t/dead/retry",
        Some(json!({})),
    )
    .await
    .ok(200);
    admin(
        &follower,
        Method::POST,
        "/v1/triggers/t/dead/purge",
        Some(json!({})),
    )
    .await
    .ok(200);
    admin(&follower, Method::DELETE, "/v1/triggers/t", None)
        .await
        .ok(200);
    admin(&primary, Method::GET, "/v1/triggers/t", None)
        .await
        .err(404, "trigger_not_found");
    let key = admin(
        &follower,
        Method::POST,
        "/v1/keys",
        Some(json!({"role": "service", "name": "w"})),
    )
    .await
    .ok(201);
    let service = key["key"].as_str().unwrap().to_string();
    let rules = json!({"rules": [{"match": "c/{d}", "read": {}}]});
    admin(&follower, Method::PUT, "/v1/rules", Some(rules.clone()))
        .await
        .ok(200);
    assert_eq!(
        admin(&primary, Method::GET, "/v1/rules", None)
            .await
            .ok(200)["rules"],
        rules["rules"]
    );

    // Errors are the primary's, body and status.
    let conflict = same_error(&primary, &follower, |s| {
        s.req(Method::PUT, "/v1/docs/c/x")
            .bearer_auth(ADMIN_KEY)
            .header("if-match", "\"99\"")
            .json(&json!({}))
    })
    .await;
    conflict.err(409, "version_conflict");
    same_error(&primary, &follower, |s| {
        s.req(Method::PUT, "/v1/docs/c/x")
            .bearer_auth(ADMIN_KEY)
            .header("content-type", "application/json")
            .body("{")
    })
    .await
    .err(400, "bad_json");
    // The service key exists only on the primary: the follower does not judge credentials.
    same_error(&primary, &follower, |s| {
        s.req(Method::POST, "/v1/indexes")
            .bearer_auth(&service)
            .json(&json!({"collection": "c", "name": "i2", "fields": [{"path": "m", "order": 1}, {"path": "n", "order": 1}]}))
    })
    .await
    .err(403, "permission_denied");
    same_error(&primary, &follower, |s| {
        s.req(Method::PUT, "/v1/docs/c/z").json(&json!({}))
    })
    .await
    .err(401, "unauthenticated");
    admin(
        &follower,
        Method::DELETE,
        &format!("/v1/keys/{}", key["id"].as_str().unwrap()),
        None,
    )
    .await
    .ok(200);

    // Reads stay on the follower, whose own database nothing above wrote to.
    assert_eq!(follower.seq().await, fseq);
    admin(&follower, Method::GET, "/v1/docs/c/y", None)
        .await
        .err(404, "not_found");
    let q = admin(
        &follower,
        Method::POST,
        "/v1/query",
        Some(json!({"collection": "c"})),
    )
    .await
    .ok(200);
    assert_eq!(q["docs"], json!([]));
}

#[tokio::test]
async fn a_forwarded_write_is_not_forwarded_again_and_no_primary_is_unavailable() {
    let (primary, follower, view) = pair().await;
    let client = reqwest::Client::new();
    // The loop guard: a forwarded request reaching a node that is not primary.
    let r = client
        .put(follower.url("/v1/docs/c/a"))
        .bearer_auth(ADMIN_KEY)
        .header("herald-forwarded", "n3")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), retry_after(&r)), (503, Some("1")));
    Resp::new(503, None, r.text().await.unwrap()).err(503, "unavailable");
    // ...while the primary (here: a single node) serves it.
    let r = client
        .put(primary.url("/v1/docs/c/a"))
        .bearer_auth(ADMIN_KEY)
        .header("herald-forwarded", "n2")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // No primary known.
    view.set_role(Role::Candidate);
    *view.primary.lock().unwrap() = None;
    let r = client
        .post(follower.url("/v1/commit"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"writes": []}))
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), retry_after(&r)), (503, Some("1")));
    Resp::new(503, None, r.text().await.unwrap()).err(503, "unavailable");

    // The primary down.
    let dead = primary.url("");
    primary.stop().await;
    view.set_role(Role::Follower);
    *view.primary.lock().unwrap() = Some(dead);
    let r = client
        .delete(follower.url("/v1/docs/c/a"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), retry_after(&r)), (503, Some("1")));
    Resp::new(503, None, r.text().await.unwrap()).err(503, "unavailable");
    // Reads still work.
    call(&follower, ADMIN_KEY, Method::GET, "/v1/health", None)
        .await
        .ok(200);
}

#[tokio::test]
async fn a_forwarded_write_is_answered_once_this_node_has_applied_it() {
    let (primary, follower, view) = pair().await;
    for i in 0..5 {
        call(
            &primary,
            ADMIN_KEY,
            Method::PUT,
            &format!("/v1/docs/c/{i}"),
            Some(json!({})),
        )
        .await
        .ok(200);
    }
    // The "replication": 300 ms from now, the follower's seq passes the primary's.
    let raise = {
        let (url, view) = (follower.url("/v1/bulk"), view.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            view.set_role(Role::Primary);
            let lines: String = (0..10)
                .map(|i| {
                    format!(
                        "{{\"op\":\"put\",\"collection\":\"pad\",\"id\":\"{i}\",\"doc\":{{}}}}\n"
                    )
                })
                .collect();
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(ADMIN_KEY)
                .body(lines)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            view.set_role(Role::Follower);
        })
    };
    let t = Instant::now();
    let put = call(
        &follower,
        ADMIN_KEY,
        Method::PUT,
        "/v1/docs/c/mine",
        Some(json!({})),
    )
    .await
    .ok(200);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "answered after {:?}",
        t.elapsed()
    );
    assert!(follower.seq().await >= put["seq"].as_u64().unwrap());
    raise.await.unwrap();
}

#[tokio::test]
async fn websocket_writes_on_a_follower_are_the_primarys() {
    let (primary, follower, view) = pair().await;
    ahead(&follower, &view).await;
    let fseq = follower.seq().await;
    let auth = format!("Bearer {ADMIN_KEY}");
    let mut ws = ws_with(&follower, &[("authorization", &auth)])
        .await
        .unwrap();
    let mut direct = ws_with(&primary, &[("authorization", &auth)])
        .await
        .unwrap();
    crate::auth::send(
        &mut ws,
        json!({"op": "write", "req": "r1", "writes": [
            {"op": "put", "collection": "c", "id": "a", "doc": {"n": 1}},
            {"op": "insert", "collection": "c", "id": "a", "doc": {}},
            {"op": "put", "collection": "c", "id": "b", "doc": {}}
        ]}),
    )
    .await;
    let w = next(&mut ws).await.unwrap();
    assert_eq!(
        (w["type"].as_str(), w["req"].as_str()),
        (Some("written"), Some("r1"))
    );
    let results = w["results"].as_array().unwrap();
    assert_eq!(results[0]["id"], "a");
    assert_eq!(results[1]["error"]["code"], "already_exists");
    assert_eq!(results[2]["version"], 1);
    assert_eq!(w["seq"], results[2]["seq"]);
    call(&primary, ADMIN_KEY, Method::GET, "/v1/docs/c/b", None)
        .await
        .ok(200);

    // An atomic request that fails: the same error message as the primary's own.
    let conflict = |req: &str| {
        json!({"op": "write", "req": req, "atomic": true, "writes": [
            {"op": "put", "collection": "c", "id": "z", "doc": {}},
            {"op": "put", "collection": "c", "id": "a", "doc": {}, "ifVersion": 7}
        ]})
    };
    crate::auth::send(&mut ws, conflict("r2")).await;
    crate::auth::send(&mut direct, conflict("r2")).await;
    let (e, d) = (
        next(&mut ws).await.unwrap(),
        next(&mut direct).await.unwrap(),
    );
    assert_eq!(e, d);
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("error"), Some("version_conflict"))
    );
    assert_eq!(
        (
            e["write"].as_u64(),
            e["expected"].as_u64(),
            e["actual"].as_u64()
        ),
        (Some(1), Some(7), Some(1))
    );
    crate::auth::send(
        &mut ws,
        json!({"op": "write", "req": "r3", "atomic": true, "writes": [
            {"op": "put", "collection": "c", "id": "z", "doc": {}}
        ]}),
    )
    .await;
    let ok = next(&mut ws).await.unwrap();
    assert_eq!(ok["type"], "written");
    assert_eq!(ok["seq"].as_u64(), Some(primary.seq().await));
    assert_eq!(
        follower.seq().await,
        fseq,
        "nothing was written on the follower itself"
    );
}

#[tokio::test]
async fn min_seq_waits_for_the_seq_then_answers() {
    let s = Server::start().await;
    s.put("c/a", json!({})).await;
    let seq = s.seq().await;
    // Reached already: at once.
    s.send(s.req(Method::GET, &format!("/v1/docs/c/a?minSeq={seq}")))
        .await
        .ok(200);
    // Ahead: the answer waits for the write that reaches it.
    let later = |path: &'static str| {
        let url = s.url(&format!("/v1/docs/{path}"));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            reqwest::Client::new()
                .put(url)
                .json(&json!({"late": true}))
                .send()
                .await
                .unwrap();
        })
    };
    let w = later("c/b");
    let t = Instant::now();
    let doc = s
        .send(s.req(Method::GET, &format!("/v1/docs/c/b?minSeq={}", seq + 1)))
        .await
        .ok(200);
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert_eq!(doc["late"], true);
    w.await.unwrap();
    let w = later("c/d");
    let q = s.query(json!({"collection": "c", "minSeq": seq + 2})).await;
    assert!(q["seq"].as_u64().unwrap() >= seq + 2);
    assert_eq!(q["docs"].as_array().unwrap().len(), 3);
    w.await.unwrap();
    // The WebSocket subscribe waits too: its initial reflects the seq.
    let w = later("c/e");
    let mut ws = crate::common::ws::connect(&s).await;
    crate::common::ws::send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "minSeq": seq + 3}),
    )
    .await;
    let initial = crate::common::ws::next(&mut ws).await;
    assert_eq!(initial["type"], "initial", "{initial}");
    assert!(initial["seq"].as_u64().unwrap() >= seq + 3, "{initial}");
    assert_eq!(initial["docs"].as_array().unwrap().len(), 4, "{initial}");
    w.await.unwrap();
    // Not a seq.
    s.send(s.req(Method::GET, "/v1/health?minSeq=soon"))
        .await
        .err(400, "bad_request");
}

#[tokio::test]
async fn min_seq_past_the_bound_is_unavailable() {
    let s = Server::start().await;
    let far = 1u64 << 40;
    let t = Instant::now();
    let client = reqwest::Client::new();
    let (get, sse, query) = tokio::join!(
        client
            .get(s.url(&format!("/v1/health?minSeq={far}")))
            .send(),
        client
            .get(s.url(&format!("/v1/subscribe?collection=c&minSeq={far}")))
            .send(),
        client
            .post(s.url("/v1/query"))
            .json(&json!({"collection": "c", "minSeq": far}))
            .send(),
    );
    assert!(t.elapsed() >= herald::cluster::MIN_SEQ_WAIT);
    for r in [get.unwrap(), sse.unwrap(), query.unwrap()] {
        assert_eq!((r.status().as_u16(), retry_after(&r)), (503, Some("1")));
        Resp::new(503, None, r.text().await.unwrap()).err(503, "unavailable");
    }
    let mut ws = crate::common::ws::connect(&s).await;
    crate::common::ws::send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "minSeq": far}),
    )
    .await;
    let e = crate::common::ws::next(&mut ws).await;
    assert_eq!(
        (e["type"].as_str(), e["sub"].as_str(), e["code"].as_str()),
        (Some("error"), Some("s"), Some("unavailable"))
    );
}

#[tokio::test]
async fn the_cluster_status() {
    // A single node: itself, primary, no cluster name.
    let s = Server::start().await;
    let st = s.send(s.req(Method::GET, "/v1/cluster")).await.ok(200);
    assert_eq!(st["cluster"], Value::Null);
    assert_eq!(st["primary"], st["nodeId"]);
    assert_eq!(st["epoch"], 0);
    assert_eq!(st["nodes"][0]["role"], "primary");
    assert_eq!(st["nodes"][0]["url"], s.url(""));
    herald_protocol::kinds::round_trip(herald_protocol::kinds::Kind::HttpClusterStatus, st)
        .unwrap();
    // A node of a cluster: what its view says; admin and service keys only (as /metrics).
    let (_primary, follower, _view) = pair().await;
    let st = call(&follower, ADMIN_KEY, Method::GET, "/v1/cluster", None)
        .await
        .ok(200);
    assert_eq!(
        (
            st["cluster"].as_str(),
            st["nodeId"].as_str(),
            st["primary"].as_str()
        ),
        (Some("test"), Some("n2"), Some("n1"))
    );
    assert_eq!(st["nodes"][1]["role"], "follower");
    let user = crate::auth::token("u", 60, json!({}));
    call(&follower, &user, Method::GET, "/v1/cluster", None)
        .await
        .err(403, "permission_denied");
    let m = follower
        .req(Method::GET, "/metrics")
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("herald_cluster_role 1"), "{m}");
    assert!(m.contains("herald_cluster_epoch 3"), "{m}");
    assert!(m.contains("herald_cluster_lag_seqs{node=\"n1\"} 0"), "{m}");
}
