//! A minimal HTTP/1.1 keep-alive client for benchmark load generation: one connection, one
//! request at a time, the request written with a single `write` and the response parsed with
//! `httparse`. It exists so that a benchmark's client, which shares the machine's cores with
//! the server, costs as little CPU as `wrk` would rather than a full client stack's (URL
//! parsing, header maps, connection pool) for every request.
//!
//! It speaks only what Herald's server answers: a status line, headers and a body of
//! `content-length` bytes (no chunked responses, which the server does not send for JSON).

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most response headers parsed.
const HEADERS_MAX: usize = 32;
/// Largest response head accepted.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Largest response body accepted (a bound on what a connection buffers).
const BODY_BYTES_MAX: usize = 64 << 20;

/// A response: status and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One keep-alive connection. After an I/O or protocol error the connection is dropped and the
/// next request opens a new one.
pub struct Conn {
    addr: SocketAddr,
    host: String,
    stream: Option<TcpStream>,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            host: addr.to_string(),
            stream: None,
            out: Vec::with_capacity(2048),
            buf: Vec::with_capacity(8192),
        }
    }

    /// Sends `method path` with an optional JSON body and reads the whole response.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        let result = self.exchange(method, path, body).await;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            self.stream = Some(s);
            self.buf.clear();
        }
        self.out.clear();
        self.out.extend_from_slice(method.as_bytes());
        self.out.push(b' ');
        self.out.extend_from_slice(path.as_bytes());
        self.out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        self.out.extend_from_slice(self.host.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        if let Some(body) = body {
            self.out
                .extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
            self.out
                .extend_from_slice(body.len().to_string().as_bytes());
            self.out.extend_from_slice(b"\r\n\r\n");
            self.out.extend_from_slice(body);
        } else {
            self.out.extend_from_slice(b"\r\n");
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("write: {e}"))?;

        // Read until the head parses, then until the body is complete.
        let (status, head_len, body_len, close) = loop {
            let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let status = resp.code.unwrap_or(0);
                    let mut body_len = None;
                    let mut close = false;
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            body_len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse::<usize>().ok());
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            return Err("chunked responses are not supported".into());
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            close = h.value.eq_ignore_ascii_case(b"close");
                        }
                    }
                    let body_len = body_len.ok_or("response without content-length")?;
                    if body_len > BODY_BYTES_MAX {
                        return Err(format!("response body of {body_len} bytes is too large"));
                    }
                    break (status, head_len, body_len, close);
                }
                Ok(httparse::Status::Partial) if self.buf.len() < HEAD_BYTES_MAX => {}
                Ok(httparse::Status::Partial) => return Err("response head too large".into()),
                Err(e) => return Err(format!("bad response: {e}")),
            }
            read_more(stream, &mut self.buf).await?;
        };
        while self.buf.len() < head_len + body_len {
            read_more(stream, &mut self.buf).await?;
        }
        let body = self.buf[head_len..head_len + body_len].to_vec();
        self.buf.drain(..head_len + body_len);
        if close {
            self.stream = None;
        }
        Ok(Response { status, body })
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    let start = buf.len();
    buf.resize(start + 8192, 0);
    match stream.read(&mut buf[start..]).await {
        Ok(0) => {
            buf.truncate(start);
            Err("connection closed by the server".into())
        }
        Ok(n) => {
            buf.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            buf.truncate(start);
            Err(format!("read: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request on a connection with `responses` in turn.
    async fn serve(responses: Vec<&'static [u8]>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 65536];
            for r in responses {
                let _ = s.read(&mut buf).await.unwrap();
                // Split the response in two writes to exercise partial reads.
                let (a, b) = r.split_at(r.len() / 2);
                s.write_all(a).await.unwrap();
                s.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                s.write_all(b).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn reads_responses_on_one_connection() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}",
        ])
        .await;
        let mut c = Conn::new(addr);
        let r = c.request("PUT", "/a", Some(b"{}")).await.unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        let r = c.request("GET", "/b", None).await.unwrap();
        assert_eq!((r.status, r.body.as_slice()), (409, &b"{}"[..]));
    }

    #[tokio::test]
    async fn refuses_chunked_and_missing_length() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        ])
        .await;
        let err = Conn::new(addr).request("GET", "/", None).await.unwrap_err();
        assert!(err.contains("chunked"), "{err}");
        let addr = serve(vec![b"HTTP/1.1 200 OK\r\n\r\n"]).await;
        let err = Conn::new(addr).request("GET", "/", None).await.unwrap_err();
        assert!(err.contains("content-length"), "{err}");
    }
}
