//! Authentication and security rules against a real server on a real socket: credentials and
//! keys (`http.rs`), reads and writes through the rules (`rules.rs`), live queries with tokens,
//! renewal and expiry (`live.rs`), live aggregations (`live_agg.rs`), and the attack list of docs/security.md (`attacks.rs`).

mod attacks;
mod groups;
mod http;
mod live;
mod live_agg;
mod live_agg_group;
mod rules;

use crate::common::{self, Resp, Server};
use futures_util::{SinkExt, StreamExt};
use herald::auth::AuthOptions;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef";
pub const SECRET: &[u8] = b"test-hs256-secret-0123456789abcdef-0123456789";

pub fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../testdata/auth/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The rules most tests use: notes readable when public or owned, writable by their owner
/// (fields limited); per-user items; `secret` has no rule.
pub fn notes_rules() -> Value {
    json!({"rules": [
        {"match": "notes/{noteId}",
         "read": {"$or": [{"public": true}, {"owner": "$$auth.uid"}]},
         "create": {"after.owner": "$$auth.uid"},
         "update": {"before.owner": "$$auth.uid", "after.owner": "$$auth.uid"},
         "delete": {"before.owner": "$$auth.uid"},
         "fields": ["owner", "text", "public", "n"]},
        {"match": "teams/{team}/docs/{d}",
         "read": {"team": "$$auth.claims.team"}}
    ]})
}

pub fn options() -> AuthOptions {
    AuthOptions {
        admin_key: Some(ADMIN_KEY.into()),
        jwt_secret: Some(SECRET.to_vec()),
        jwt_public_keys: Some([testdata("ed25519.pub.pem"), testdata("p256.pub.pem")].concat()),
        rules: Some(herald_rules::Rules::parse(&notes_rules()).unwrap()),
        allowed_origins: None,
    }
}

/// A server with authentication and the notes rules.
pub async fn secure() -> Server {
    Server::start_auth(tempfile::tempdir().unwrap(), options()).await
}

/// [`secure`] on a manual clock: tokens expire when the test advances it, not with real time.
pub async fn secure_on(clock: &herald_db::Clock) -> Server {
    let db = herald_db::DbOptions {
        clock: clock.clone(),
        ..crate::common::nosync()
    };
    Server::start_auth_with(tempfile::tempdir().unwrap(), db, options()).await
}

pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An HS256 token for `sub` valid for `secs` seconds, with extra claims.
pub fn token(sub: &str, secs: i64, claims: Value) -> String {
    let mut c = json!({"sub": sub, "exp": now_s() + secs});
    for (k, v) in claims.as_object().unwrap() {
        c[k] = v.clone();
    }
    sign(Algorithm::HS256, &EncodingKey::from_secret(SECRET), &c)
}

pub fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    encode(&Header::new(alg), claims, key).unwrap()
}

/// `method path` with a JSON body and a bearer credential.
pub async fn call(s: &Server, cred: &str, method: Method, path: &str, body: Option<Value>) -> Resp {
    let mut rb = s.req(method, path).bearer_auth(cred);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    s.send(rb).await
}

pub async fn admin_put(s: &Server, path: &str, doc: Value) {
    call(
        s,
        ADMIN_KEY,
        Method::PUT,
        &format!("/v1/docs/{path}"),
        Some(doc),
    )
    .await
    .ok(200);
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket, with these extra request headers.
pub async fn ws_with(
    s: &Server,
    headers: &[(&str, &str)],
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{}/v1/ws", s.addr)
        .into_client_request()
        .unwrap();
    for (k, v) in headers {
        let name = axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// The next message that is not a heartbeat; `None` when the connection closed.
pub async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(15), ws.next())
            .await
            .expect("a message within 15 s");
        match m {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] != "heartbeat" {
                    return Some(v);
                }
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// Authenticates with the first message and checks the answer.
pub async fn ws_auth(s: &Server, tok: &str) -> Ws {
    let mut ws = ws_with(s, &[]).await.unwrap();
    send(&mut ws, json!({"op": "auth", "token": tok})).await;
    let a = next(&mut ws).await.unwrap();
    assert_eq!(
        (&a["type"], &a["ok"]),
        (&json!("auth"), &json!(true)),
        "{a}"
    );
    ws
}

pub fn ids(docs: &Value) -> Vec<String> {
    docs.as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect()
}
