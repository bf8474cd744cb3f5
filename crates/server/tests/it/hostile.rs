//! Misbehaving clients against a real server on a real socket (docs/protocol.md, "Misbehaving
//! clients"): each way a client can misbehave ends in a defined answer, and the replies to what
//! it sent before are delivered first.

use crate::common::ws::{connect, send, Ws};
use crate::common::Server;
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
