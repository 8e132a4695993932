//! MCP over HTTP/2 on a stream of the test's choosing (cleartext with prior
//! knowledge, or TLS after ALPN chose `h2`), with hyper's client: reqwest here speaks
//! HTTP/1.1 only.

use http_body_util::{BodyExt as _, Full};
use serde_json::json;
use std::time::Duration;

/// Opens a session over one HTTP/2 connection on `io` to `url` (initialize, then
/// `notifications/initialized`) and calls `echo` with `message`; panics with what
/// came back if any step fails.
pub async fn session_over<T>(io: T, url: &str, message: &str)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut h2 = handshake(io).await;
    let url: hyper::Uri = url.parse().unwrap();
    let mut session: Option<String> = None;
    let mut exchange = async |body: serde_json::Value| {
        let mut req = hyper::Request::post(url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let req = req
            .body(Full::new(bytes::Bytes::from(body.to_string())))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), h2.send_request(req))
            .await
            .expect("an answer over HTTP/2 within 10 s")
            .unwrap();
        let status = resp.status();
        if let Some(s) = resp.headers().get("mcp-session-id") {
            session = Some(s.to_str().unwrap().to_owned());
        }
        let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
            .await
            .expect("the body within 10 s")
            .unwrap()
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let (status, body) = exchange(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h2","version":"0"}}}))
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"protocolVersion\""), "{body}");
    let (status, body) =
        exchange(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = exchange(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"echo","arguments":{"message":message}}}))
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(message), "{body}");
}

/// A `HEAD` of `url` over one HTTP/2 connection on `io`: the status, the headers,
/// and the body as it arrived (a stream the server ends uncleanly is an `Err`).
pub async fn head<T>(
    io: T,
    url: &str,
) -> (
    hyper::StatusCode,
    hyper::HeaderMap,
    Result<bytes::Bytes, String>,
)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut h2 = handshake(io).await;
    let req = hyper::Request::head(url)
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), h2.send_request(req))
        .await
        .expect("an answer over HTTP/2 within 10 s")
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("the body within 10 s")
        .map(|b| b.to_bytes())
        .map_err(|e| e.to_string());
    (parts.status, parts.headers, body)
}

/// The client side of an HTTP/2 connection on `io`, its connection task spawned.
async fn handshake<T>(io: T) -> hyper::client::conn::http2::SendRequest<Full<bytes::Bytes>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    h2
}

/// A TCP connection to a Gantry at `base` (`http://ADDR`), for cleartext HTTP/2.
pub async fn tcp(base: &str) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap()
}
