//! Test harness for the HTTP integration tests: an in-process server on a real socket
//! (127.0.0.1, port 0, temp data dir), request helpers that check every response against the
//! protocol's error table, raw-socket requests for paths a URL library would normalise, WebSocket
//! helpers, "nothing changed" snapshots, and helpers for driving the `herald` binary as a child
//! process.

#![allow(dead_code)] // the crash-test binary uses a subset

use herald::{serve_with, ServeConfig};
use herald_db::{DbOptions, Durability};
use herald_protocol::ErrorCode;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every error `(code, status)` any response in this test binary carried.
static SEEN: Mutex<BTreeMap<String, u16>> = Mutex::new(BTreeMap::new());

/// The error codes seen so far in this test binary, with their statuses.
pub fn seen_codes() -> BTreeMap<String, u16> {
    SEEN.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The status the protocol table gives `code`, if it is in the table.
pub fn table_status(code: &str) -> Option<u16> {
    ErrorCode::from_code(code).map(ErrorCode::http_status)
}

/// A response, with the body parsed as JSON (every Herald response is JSON).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub etag: Option<String>,
    pub text: String,
    pub body: Value,
}

impl Resp {
    /// Builds a response and checks the contract every response obeys: the body is JSON; an
    /// error status carries `{"error":{"code","message"}}` whose code is in the protocol table
    /// with exactly this status; a success carries no `error`.
    pub fn new(status: u16, etag: Option<String>, text: String) -> Resp {
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("status {status}: the body is not JSON ({e}): {text:?}"));
        if status >= 400 {
            let code = body["error"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("status {status} without an error code: {text}"));
            assert!(
                body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "error without a message: {text}"
            );
            let expected = table_status(code)
                .unwrap_or_else(|| panic!("code {code:?} is not a herald_protocol::ErrorCode"));
            let retryable = ErrorCode::from_code(code).map(ErrorCode::retryable);
            assert_eq!(
                body["error"]["retryable"].as_bool(),
                retryable,
                "the error body's retryable disagrees with the table: {text}"
            );
            assert_eq!(
                status, expected,
                "code {code} came with {status}, the table says {expected}"
            );
            SEEN.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(code.to_string(), status);
        } else {
            assert!(body.get("error").is_none(), "success with an error: {text}");
        }
        Resp {
            status,
            etag,
            text,
            body,
        }
    }

    /// Asserts the status and returns the body.
    #[track_caller]
    pub fn ok(self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected response: {}", self.text);
        self.body
    }

    /// Asserts an error response with this status and code; returns the `error` object.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> Value {
        assert_eq!(
            (self.status, self.body["error"]["code"].as_str()),
            (status, Some(code)),
            "unexpected response: {}",
            self.text
        );
        self.body["error"].clone()
    }

    pub fn code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }
}

/// What a set of documents and the commit sequence looked like at one moment.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub seq: u64,
    /// `(path, Some((document, etag)))`, or `None` where the document did not exist.
    pub docs: Vec<(String, Option<(Value, String)>)>,
}

/// A Herald server running in this process on 127.0.0.1:0 with its own temp data dir.
pub struct Server {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    dir: Option<TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), String>>>,
}

/// Options for fast tests: acknowledge writes before fsync.
pub fn nosync() -> DbOptions {
    DbOptions {
        durability: Durability::NoSync,
        ..Default::default()
    }
}

impl Server {
    /// Starts a server with `NoSync` durability.
    pub async fn start() -> Server {
        Server::start_with(nosync()).await
    }

    /// Starts a server on a fresh temp dir.
    pub async fn start_with(db: DbOptions) -> Server {
        Server::start_in(tempfile::tempdir().expect("temp dir"), db).await
    }

    /// Starts a server on `dir` (its `data` subdirectory), e.g. one a stopped server used.
    pub async fn start_in(dir: TempDir, db: DbOptions) -> Server {
        Server::start_full(dir, db, Default::default()).await
    }

    /// Starts a server on `dir` with the given trigger worker options.
    pub async fn start_full(
        dir: TempDir,
        db: DbOptions,
        triggers: herald::triggers::TriggerOptions,
    ) -> Server {
        Server::start_config(dir, db, triggers, Default::default()).await
    }

    /// Starts a server on `dir` with authentication options.
    pub async fn start_auth(dir: TempDir, auth: herald::auth::AuthOptions) -> Server {
        Server::start_config(dir, nosync(), Default::default(), auth).await
    }

    /// Starts a server on `dir` with these database and authentication options (a manual
    /// clock in `db.clock` lets a test expire tokens without waiting).
    pub async fn start_auth_with(
        dir: TempDir,
        db: DbOptions,
        auth: herald::auth::AuthOptions,
    ) -> Server {
        Server::start_config(dir, db, Default::default(), auth).await
    }

    async fn start_config(
        dir: TempDir,
        db: DbOptions,
        triggers: herald::triggers::TriggerOptions,
        auth: herald::auth::AuthOptions,
    ) -> Server {
        Server::start_node(dir, db, triggers, auth, None).await
    }

    /// Starts a server as a node of a cluster that `view` describes (a test's fake: the
    /// replication itself is not here).
    pub async fn start_cluster(
        auth: herald::auth::AuthOptions,
        view: std::sync::Arc<dyn herald::cluster::ClusterView>,
    ) -> Server {
        let setup: herald::ClusterSetup = Box::new(move |_| Ok(view));
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_node(dir, nosync(), Default::default(), auth, Some(setup)).await
    }

    async fn start_node(
        dir: TempDir,
        db: DbOptions,
        triggers: herald::triggers::TriggerOptions,
        auth: herald::auth::AuthOptions,
        cluster: Option<herald::ClusterSetup>,
    ) -> Server {
        let config = ServeConfig {
            data: dir.path().join("data"),
            listen: "127.0.0.1:0".parse().expect("address"),
            db,
            triggers,
            auth,
            grid: None,
            cluster: Default::default(),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (bound_tx, bound_rx) = oneshot::channel::<SocketAddr>();
        let task = tokio::spawn(serve_with(
            config,
            cluster,
            async {
                let _ = stop_rx.await;
            },
            move |addr| {
                let _ = bound_tx.send(addr);
            },
        ));
        let addr = match bound_rx.await {
            Ok(a) => a,
            Err(_) => panic!("server did not start: {:?}", task.await),
        };
        Server {
            addr,
            client: reqwest::Client::new(),
            dir: Some(dir),
            shutdown: Some(stop_tx),
            task: Some(task),
        }
    }

    /// Shuts down gracefully, checks that the database closed cleanly, and hands back the
    /// data dir (deleted when dropped).
    pub async fn stop(mut self) -> TempDir {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let task = self.task.take().expect("running");
        let res = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("server stops within 20 s")
            .expect("server task");
        res.expect("server shut down cleanly");
        self.dir.take().expect("data dir")
    }

    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{}", self.addr, path_and_query)
    }

    /// A request to `path_and_query` (e.g. `/v1/query`).
    pub fn req(&self, method: Method, path_and_query: &str) -> RequestBuilder {
        self.client.request(method, self.url(path_and_query))
    }

    /// Sends a request and checks the response contract.
    pub async fn send(&self, rb: RequestBuilder) -> Resp {
        let r = rb.send().await.expect("request");
        let status = r.status().as_u16();
        let etag = r
            .headers()
            .get("etag")
            .map(|v| v.to_str().expect("ascii etag").to_string());
        let text = r.text().await.expect("body");
        Resp::new(status, etag, text)
    }

    /// `method path` with a JSON body.
    pub async fn json(&self, method: Method, path_and_query: &str, body: &Value) -> Resp {
        self.send(self.req(method, path_and_query).json(body)).await
    }

    /// `method path` with a raw body, sent as application/json.
    pub async fn raw_body(
        &self,
        method: Method,
        path_and_query: &str,
        body: impl Into<reqwest::Body>,
    ) -> Resp {
        self.send(
            self.req(method, path_and_query)
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    /// `GET /v1/docs/{path}`.
    pub async fn get(&self, doc_path: &str) -> Resp {
        self.send(self.req(Method::GET, &format!("/v1/docs/{doc_path}")))
            .await
    }

    /// `PUT /v1/docs/{path}`, expecting success; returns `{"id","version","seq"}`.
    pub async fn put(&self, doc_path: &str, doc: Value) -> Value {
        self.json(Method::PUT, &format!("/v1/docs/{doc_path}"), &doc)
            .await
            .ok(200)
    }

    /// `POST /v1/query`, expecting success.
    pub async fn query(&self, q: Value) -> Value {
        self.json(Method::POST, "/v1/query", &q).await.ok(200)
    }

    /// The last committed seq, from `GET /v1/health`.
    pub async fn seq(&self) -> u64 {
        let h = self.send(self.req(Method::GET, "/v1/health")).await.ok(200);
        assert_eq!(h["status"], "ok");
        h["seq"].as_u64().expect("seq is a number")
    }

    /// Records `seq` and the given documents (with their ETags).
    pub async fn snapshot(&self, doc_paths: &[&str]) -> Snapshot {
        let seq = self.seq().await;
        let mut docs = Vec::new();
        for p in doc_paths {
            let r = self.get(p).await;
            let d = match r.status {
                200 => Some((r.body, r.etag.expect("GET has an ETag"))),
                404 => {
                    r.err(404, "not_found");
                    None
                }
                s => panic!("GET {p}: unexpected {s}: {}", r.text),
            };
            docs.push((p.to_string(), d));
        }
        Snapshot { seq, docs }
    }

    /// Asserts that `seq` did not move and every document in the snapshot is as it was.
    #[track_caller]
    pub fn assert_unchanged(
        &self,
        before: &Snapshot,
    ) -> impl std::future::Future<Output = ()> + '_ {
        let paths: Vec<String> = before.docs.iter().map(|(p, _)| p.clone()).collect();
        let before_seq = before.seq;
        let before_docs: Vec<_> = before.docs.iter().map(|(_, d)| d.clone()).collect();
        let caller = std::panic::Location::caller();
        async move {
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let now = self.snapshot(&refs).await;
            assert_eq!(now.seq, before_seq, "seq moved (checked at {caller})");
            for ((p, d), b) in now.docs.iter().zip(&before_docs) {
                assert_eq!(d, b, "document {p} changed (checked at {caller})");
            }
        }
    }

    /// Sends `head` (request line and headers, without the final blank line) and `body` over a
    /// fresh TCP connection exactly as given, so nothing normalises the path.
    pub async fn raw_request(&self, method: &str, target: &str, body: &[u8]) -> Resp {
        let head = format!(
            "{method} {target} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n",
            self.addr,
            body.len()
        );
        self.raw_exchange(head.as_bytes(), body).await
    }

    /// Writes `head`, a blank line and `body` to a new connection and reads the response.
    pub async fn raw_exchange(&self, head: &[u8], body: &[u8]) -> Resp {
        let mut sock = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let mut out = head.to_vec();
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        sock.write_all(&out).await.expect("write request");
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), sock.read_to_end(&mut buf))
            .await
            .expect("response within 30 s")
            .expect("read response");
        parse_http_response(&buf)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Parses an HTTP/1.1 response read to EOF (plain or chunked body).
pub fn parse_http_response(buf: &[u8]) -> Resp {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(buf)));
    let head = std::str::from_utf8(&buf[..split]).expect("ascii head");
    let mut rest = &buf[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let mut etag = None;
    let mut chunked = false;
    for l in lines {
        let (k, v) = l.split_once(':').expect("header line");
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "etag" {
            etag = Some(v.to_string());
        } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        let mut out = Vec::new();
        loop {
            let nl = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk size line");
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..nl]).expect("hex").trim(), 16)
                    .expect("chunk size");
            rest = &rest[nl + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        out
    } else {
        rest.to_vec()
    };
    Resp::new(status, etag, String::from_utf8(body).expect("UTF-8 body"))
}

/// A `herald` child process whose stderr lines arrive on a channel; killed if still running
/// when dropped.
pub struct Herald {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    /// Every stderr line received so far.
    pub seen: Vec<String>,
}

impl Herald {
    /// Spawns `herald <args>` with stderr piped.
    pub fn spawn(args: &[&str]) -> Herald {
        let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn herald");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Herald {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `needle` and returns it.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e}); stderr so far: {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for `herald: listening on http://ADDR` and returns ADDR.
    pub fn wait_listening(&mut self) -> SocketAddr {
        let l = self.wait_line("listening on", Duration::from_secs(60));
        l.rsplit("http://")
            .next()
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("no address in {l:?}"))
    }

    /// Waits for the process to exit; returns its exit code (None if killed by a signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "herald did not exit within {timeout:?}; stderr: {:?}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// All remaining stderr (after the process exited).
    pub fn drain(&mut self) -> Vec<String> {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        self.seen.clone()
    }

    /// Sends SIGTERM to this child (by its pid).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }
}

impl Drop for Herald {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// Posts an NDJSON body to `/v1/bulk` and returns the parsed summary.
    pub async fn json_raw_bulk(&self, ndjson: &str) -> Value {
        let resp = self
            .client
            .post(self.url("/v1/bulk"))
            .body(ndjson.to_string())
            .send()
            .await
            .expect("bulk");
        resp.json().await.expect("bulk summary")
    }
}

/// WebSocket helpers for `/v1/ws` tests.
pub mod ws {
    use super::Server;
    use futures_util::{SinkExt, StreamExt};
    use serde_json::Value;
    use std::time::Duration;
    use tokio_tungstenite::tungstenite::Message;

    pub type Ws = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    pub async fn connect(s: &Server) -> Ws {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", s.addr))
            .await
            .expect("ws connect");
        ws
    }

    pub async fn send(ws: &mut Ws, v: Value) {
        ws.send(Message::Text(v.to_string().into()))
            .await
            .expect("ws send");
    }

    /// The next message that is not a heartbeat.
    pub async fn next(ws: &mut Ws) -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(20), ws.next())
                .await
                .expect("a message within 20 s")
                .expect("open")
                .expect("ok");
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] != "heartbeat" {
                    return v;
                }
            }
        }
    }
}
