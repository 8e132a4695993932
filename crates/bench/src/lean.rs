//! The load generator's HTTP client: one HTTP/1.1 connection per client on raw hyper
//! (no pool, no redirect or proxy logic, no per-request client state), so that the
//! generator costs as little CPU per call as the servers it measures. A connection
//! the server closed is opened again once per request.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use std::net::SocketAddr;
use std::time::Duration;

/// One keep-alive connection to the server.
pub(crate) struct LeanConn {
    addr: SocketAddr,
    /// `https://`: TLS to the server (`shared+tls`), trusting the bench's certificate.
    tls: Option<tokio_rustls::TlsConnector>,
    authority: String,
    path: String,
    timeout: Duration,
    sender: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

/// What a response was: status, `Mcp-Session-Id`, whether it is SSE, the body.
pub(crate) struct Answer {
    pub status: u16,
    pub session: Option<String>,
    pub sse: bool,
    pub body: Bytes,
}

impl LeanConn {
    /// A connection (opened on first use) to `url` (`http://127.0.0.1:PORT/path`).
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Self> {
        let u: http::Uri = url.parse().context("the server URL")?;
        let tls = match u.scheme_str() {
            Some("http") => None,
            Some("https") => Some(
                crate::tls::connector()
                    .with_context(|| format!("{url}: no certificate to trust (shared+tls)"))?,
            ),
            _ => bail!("the lean client speaks http and https only: {url}"),
        };
        let authority = u
            .authority()
            .context("the server URL has no host")?
            .to_string();
        let addr: SocketAddr = authority
            .parse()
            .with_context(|| format!("{authority} is not an IP address and port"))?;
        Ok(Self {
            addr,
            tls,
            authority,
            path: u
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            timeout,
            sender: tokio::sync::Mutex::new(None),
        })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>> {
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connect {}", self.addr))?;
        stream.set_nodelay(true)?;
        let Some(tls) = &self.tls else {
            return handshake(stream).await;
        };
        let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
        let stream = tls
            .connect(name, stream)
            .await
            .with_context(|| format!("TLS with {}", self.addr))?;
        handshake(stream).await
    }

    /// POSTs `body` with `headers`; reads the whole answer.
    pub(crate) async fn post(&self, headers: &[(&str, &str)], body: String) -> Result<Answer> {
        self.send(http::Method::POST, headers, body).await
    }

    /// Sends one request with `headers` and `body`; reads the whole answer.
    pub(crate) async fn send(
        &self,
        method: http::Method,
        headers: &[(&str, &str)],
        body: String,
    ) -> Result<Answer> {
        self.send_bytes(method, headers, Bytes::from(body)).await
    }

    /// [`LeanConn::send`] of a body already in bytes.
    pub(crate) async fn send_bytes(
        &self,
        method: http::Method,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer> {
        tokio::time::timeout(self.timeout, self.send_once(method, headers, body))
            .await
            .map_err(|_| anyhow!("no answer within {:?}", self.timeout))?
    }

    async fn send_once(
        &self,
        method: http::Method,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer> {
        let mut slot = self.sender.lock().await;
        // A kept connection the server closed: one new one, once.
        for attempt in 0..2 {
            let mut sender = match slot.take() {
                Some(s) if !s.is_closed() => s,
                _ => self.connect().await?,
            };
            if sender.ready().await.is_err() {
                if attempt == 0 {
                    continue;
                }
                bail!("the connection closed");
            }
            let mut req = http::Request::builder()
                .method(method.clone())
                .uri(self.path.as_str())
                .header(http::header::HOST, self.authority.as_str())
                .header(http::header::CONTENT_TYPE, "application/json");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req.body(Full::new(body.clone()))?;
            let resp = match sender.send_request(req).await {
                Ok(r) => r,
                Err(e) if attempt == 0 && e.is_canceled() => continue,
                Err(e) => return Err(e.into()),
            };
            let status = resp.status().as_u16();
            let session = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let sse = resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("text/event-stream"));
            let body = resp.into_body().collect().await?.to_bytes();
            *slot = Some(sender);
            return Ok(Answer {
                status,
                session,
                sse,
                body,
            });
        }
        bail!("the connection closed twice")
    }
}

/// An HTTP/1.1 connection over `io`, driven by a task of its own.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}
