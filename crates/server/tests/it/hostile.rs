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
    let start = std::time::Instant::now();
    loop {
        // Heartbeats keep coming while the connection is open: bound the whole wait too.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not closed within 30 s: {msgs:?}"
        );
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

/// A client that reads, but more slowly than its subscription produces: the bounded queue
/// overflows and the connection closes with 1008 and the slow-consumer reason after what was
/// queued (docs/protocol.md), never a stalled write or growing memory. `HERALD_SLOW=1`.
#[tokio::test]
async fn a_slow_reader_is_closed_as_a_slow_consumer() {
    // ~20 s in a debug build; CI covers the close itself with live.rs's slow consumer.
    if !std::env::var("HERALD_SLOW").is_ok_and(|v| v == "1") {
        println!("skipped: the slow reader runs with HERALD_SLOW=1");
        return;
    }
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c", "sort": {"n": -1}, "limit": 1}),
    )
    .await;
    assert_eq!(crate::common::ws::next(&mut ws).await["type"], "initial");
    // Slow (2 ms a message) while the writes come, then at full speed to see the end.
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let slow = flooding.clone();
    let reader = tokio::spawn(async move {
        let mut changes = 0;
        loop {
            if slow.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            match tokio::time::timeout(Duration::from_secs(20), ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    if v["type"] == "changes" {
                        changes += 1;
                    }
                }
                Ok(Some(Ok(Message::Close(f)))) => {
                    return (
                        changes,
                        f.map(|f| (u16::from(f.code), f.reason.to_string())),
                    )
                }
                Ok(Some(Ok(_))) => {}
                other => panic!("no close frame: {other:?}"),
            }
        }
    });
    flood(&s, 9000).await;
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let (changes, close) = reader.await.unwrap();
    let (code, reason) = close.expect("a close frame");
    assert_eq!(code, 1008);
    assert!(reason.starts_with("slow consumer"), "{reason}");
    assert!(
        changes < 9000,
        "the queue bound cut it off ({changes} changes)"
    );
    s.stop().await;
}

/// Subscribe floods: past 256 subscriptions each further one fails alone with
/// `limit_exceeded` (the connection stays usable and unsubscribing frees room); past the message
/// rate limit the connection gets `rate_limited` and a 1008 close frame.
#[tokio::test]
async fn subscription_floods_hit_the_subscription_limit_then_the_rate_limit() {
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    for i in 0..300 {
        send(&mut ws, json!({"op": "subscribe", "sub": format!("s{i}"), "collection": "c", "filter": {"n": i}})).await;
    }
    let mut refused = Vec::new();
    let mut initial = 0;
    while initial + refused.len() < 300 {
        let m = crate::common::ws::next(&mut ws).await;
        match m["type"].as_str() {
            Some("initial") => initial += 1,
            Some("error") => {
                assert_eq!(m["code"], "limit_exceeded", "{m}");
                refused.push(m["sub"].as_str().unwrap().to_string());
            }
            _ => panic!("{m}"),
        }
    }
    assert_eq!((initial, refused.len()), (256, 44));
    send(&mut ws, json!({"op": "unsubscribe", "sub": "s0"})).await;
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "again", "collection": "c"}),
    )
    .await;
    assert_eq!(crate::common::ws::next(&mut ws).await["type"], "initial");
    // 302 messages so far; a burst of 1000 more goes over the rate limit.
    for i in 0..1000 {
        let m = json!({"op": "unsubscribe", "sub": format!("none{i}")});
        if ws.send(Message::Text(m.to_string().into())).await.is_err() {
            break;
        }
    }
    let (msgs, close) = until_closed(&mut ws).await;
    let last = msgs.last().expect("the rate limit's error");
    assert_eq!(last["code"], "rate_limited", "{last}");
    let (code, reason) = close.expect("a close frame");
    assert_eq!((code, reason.as_str()), (1008, "rate limit exceeded"));
    s.stop().await;
}

/// Bulk lines over 2 MiB fail alone with `body_too_large` at their line number, whether the
/// line ends with a newline or the body does; the lines around them are applied.
#[tokio::test]
async fn huge_bulk_lines_fail_alone() {
    let s = Server::start().await;
    let line =
        |id: &str| json!({"op": "put", "collection": "c", "id": id, "doc": {"n": 1}}).to_string();
    let huge =
        json!({"op": "put", "collection": "c", "id": "h", "doc": {"t": "x".repeat(3 << 20)}})
            .to_string();
    let body = format!("{}\n{huge}\n{}\n", line("a"), line("b"));
    let out = s.json_raw_bulk(&body).await;
    assert_eq!(
        (
            out["lines"].as_u64(),
            out["applied"].as_u64(),
            out["failed"].as_u64()
        ),
        (Some(3), Some(2), Some(1)),
        "{out}"
    );
    assert_eq!(out["errors"][0]["line"], 2);
    assert_eq!(out["errors"][0]["code"], "body_too_large");
    let out = s.json_raw_bulk(&format!("{}\n{huge}", line("c"))).await;
    assert_eq!(
        (
            out["lines"].as_u64(),
            out["applied"].as_u64(),
            out["failed"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{out}"
    );
    assert_eq!(out["errors"][0]["line"], 2);
    assert_eq!(s.get("c/h").await.status, 404);
    assert_eq!(s.get("c/c").await.status, 200);
    s.stop().await;
}

/// Binary frames get an error each and the connection goes on, but they count against the
/// message rate limit, so a flood of them is closed like any other; a text frame that is not
/// UTF-8 ends the connection with `bad_json` and a close frame that says why.
#[tokio::test]
async fn non_text_garbage_is_answered_and_rate_limited() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let s = Server::start().await;
    let mut ws = connect(&s).await;
    ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(
        crate::common::ws::next(&mut ws).await["code"],
        "bad_request"
    );
    send(
        &mut ws,
        json!({"op": "subscribe", "sub": "s", "collection": "c"}),
    )
    .await;
    assert_eq!(crate::common::ws::next(&mut ws).await["type"], "initial");
    for _ in 0..1100 {
        if ws.send(Message::Binary(vec![0].into())).await.is_err() {
            break;
        }
    }
    let (msgs, close) = until_closed(&mut ws).await;
    assert_eq!(msgs.last().unwrap()["code"], "rate_limited");
    assert_eq!(close.expect("a close frame").0, 1008);

    let mut ws = connect(&s).await;
    send(&mut ws, json!({"op": "frobnicate"})).await;
    let not_utf8 = Frame::message(vec![b'{', 0xff, 0xfe], OpCode::Data(Data::Text), true);
    ws.send(Message::Frame(not_utf8)).await.unwrap();
    let (msgs, close) = until_closed(&mut ws).await;
    let codes: Vec<&str> = msgs
        .iter()
        .map(|m| m["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(codes, ["bad_request", "bad_json"]);
    assert_eq!(
        close.expect("a close frame"),
        (1008, "a text message is not UTF-8".to_string())
    );
    s.stop().await;
}
