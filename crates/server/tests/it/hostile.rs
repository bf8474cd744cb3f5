//! Misbehaving clients against a real server on a real socket (docs/protocol.md, "Misbehaving
//! clients"): each way a client can misbehave ends in a defined answer, and the replies to what
//! it sent before are delivered first.

use crate::common::ws::{connect, send, Ws};
use crate::common::{self, Server};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// Everything the server sends until it closes: the text messages (heartbeats left out) and the
/// close frame's code and reason, if one came.
async fn until_closed(ws: &mut Ws) -> (Vec<Value>, Option<(u16, String)>) {
    let mut msgs = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("the server answers or closes within 20 s");
        match m {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] != "heartbeat" {
                    msgs.push(v);
                }
            }
            Some(Ok(Message::Close(frame))) => {
                let frame = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                return (msgs, frame);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                panic!("the connection broke without a close frame: {e} after {msgs:?}")
            }
            None => return (msgs, None),
        }
    }
}

/// Garbage, an unknown op, then a 5 MB message: the first two get their errors, then the
/// connection closes with `message_too_large`'s close code and a reason that says why.
#[tokio::test]
async fn replies_arrive_before_an_oversized_message_closes_the_connection() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    ws.send(Message::Text("{not json".into())).await.unwrap();
    send(&mut ws, json!({"op": "frobnicate", "sub": "s"})).await;
    let huge = json!({"op": "subscribe", "sub": "s", "collection": "c",
        "filter": {"t": "x".repeat(5 << 20)}});
    let _ = ws.send(Message::Text(huge.to_string().into())).await;
    let (msgs, close) = until_closed(&mut ws).await;
    let codes: Vec<&str> = msgs
        .iter()
        .map(|m| m["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        codes,
        ["bad_json", "bad_request", "message_too_large"],
        "{msgs:?}"
    );
    let (code, reason) = close.expect("a close frame");
    assert_eq!(code, u16::from(CloseCode::Size));
    assert!(reason.contains("message is over"), "{reason}");
    s.stop().await;
}

/// The value of a `/metrics` line `name value`.
async fn metric(s: &Server, name: &str) -> u64 {
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
        .unwrap_or_else(|| panic!("/metrics has no {name}"))
}

/// Polls `name` until it reads `want` (bounded: 20 s).
async fn wait_metric(s: &Server, name: &str, want: u64) {
    let start = std::time::Instant::now();
    loop {
        let got = metric(s, name).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{name} is {got}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts `n` documents that each move a `sort: {n: -1}, limit: 1` window (so every one is a
/// `changes` message to its subscriber), about 2 KB each.
async fn flood(s: &Server, n: usize) {
    let big = "x".repeat(2000);
    let mut body = String::new();
    for i in 0..n {
        body.push_str(&json!({"op": "put", "collection": "c", "id": format!("d{i}"), "doc": {"n": i, "pad": big}}).to_string());
        body.push('\n');
    }
    assert_eq!(s.json_raw_bulk(&body).await["applied"], n);
}

/// A client that stops reading and never closes (half-open): the socket's buffers fill, then the
/// bounded queue; the server's write stalls, and past `WS_SEND_STALL` (on the database's clock,
/// advanced here) the connection is dropped and counted. Without the bound it would hold its
/// task and socket for as long as the peer's TCP stays up.
#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_after_the_stall_bound() {
    let clock = herald_db::Clock::manual_at_now();
    let mut db = common::nosync();
    db.clock = clock.clone();
    let s = Server::start_with(db).await;
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"n": -1}, "limit": 1}),
    )
    .await;
    assert_eq!(crate::common::ws::next(&mut ws).await["type"], "initial");
    wait_metric(&s, "herald_ws_connections", 1).await;
    // Enough to fill both sockets' buffers (tens of MB), so the server's write blocks.
    flood(&s, 9000).await;
    assert_eq!(metric(&s, "herald_ws_stalled_total").await, 0);
    // The advance cuts a write already blocked; one that blocks later gets its own deadline, so
    // advance again until the stall is seen (bounded).
    let start = std::time::Instant::now();
    while metric(&s, "herald_ws_stalled_total").await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the stalled connection was kept"
        );
        clock.advance(Duration::from_secs(31));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_metric(&s, "herald_ws_connections", 0).await;
    drop(ws);
    s.stop().await;
}
