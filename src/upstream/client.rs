//! The HTTP client of one HTTP backend: its own pool of keep-alive connections on
//! hyper's connection API. The target is parsed once; a request is its headers and
//! body, with no generic client's per-request URL conversion, proxy matching, redirect
//! bookkeeping or pool lookup by origin. HTTP/1.1 gets one connection per request in
//! flight, put back when its answer has been read to the end, and driven by the task
//! that uses it (no connection task, no hop between tasks per request); a backend that
//! agreed to HTTP/2 (ALPN over TLS, or `version = "2"`: prior knowledge) gets one
//! multiplexed connection that every request shares, driven by its own task.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, HOST};
use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls_pki_types::{CertificateDer, ServerName};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A request body: always whole (one JSON-RPC message), at most in three parts that
/// go out with one vectored write: a large call's params follow the envelope's head
/// as they are, not copied into one string (`Core::send_request`). Its length is
/// known up front (`Content-Length`), so the connection stays open. As small as one
/// `Bytes`: requests and their futures are moved often, so the parts are boxed.
#[derive(Clone, Default)]
pub(super) struct Body(Inner);

#[derive(Clone)]
enum Inner {
    Whole(Bytes),
    Parts(Box<Parts>),
}

impl Default for Inner {
    fn default() -> Self {
        Inner::Whole(Bytes::new())
    }
}

#[derive(Clone)]
struct Parts {
    parts: [Bytes; 3],
    /// The next part to hand over.
    next: usize,
}

impl Parts {
    fn rest(&self) -> &[Bytes] {
        self.parts.get(self.next..).unwrap_or_default()
    }
}

impl Body {
    /// The bytes left to send.
    pub(super) fn len(&self) -> usize {
        match &self.0 {
            Inner::Whole(b) => b.len(),
            Inner::Parts(p) => p.rest().iter().map(Bytes::len).sum(),
        }
    }

    /// `head`, `middle` and `tail` in this order (empty ones are skipped).
    pub(super) fn parts(head: Bytes, middle: Bytes, tail: Bytes) -> Self {
        Self(Inner::Parts(Box::new(Parts {
            parts: [head, middle, tail],
            next: 0,
        })))
    }
}

impl From<Bytes> for Body {
    fn from(whole: Bytes) -> Self {
        Self(Inner::Whole(whole))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let next = match &mut self.0 {
            Inner::Whole(b) => Some(std::mem::take(b)).filter(|b| !b.is_empty()),
            Inner::Parts(p) => {
                let mut next = None;
                while let Some(part) = p.parts.get_mut(p.next) {
                    let part = std::mem::take(part);
                    p.next += 1;
                    if !part.is_empty() {
                        next = Some(part);
                        break;
                    }
                }
                next
            }
        };
        std::task::Poll::Ready(next.map(|part| Ok(hyper::body::Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Whole(b) => b.is_empty(),
            Inner::Parts(p) => p.rest().iter().all(Bytes::is_empty),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(u64::try_from(self.len()).unwrap_or(u64::MAX))
    }
}

/// Idle HTTP/1.1 connections kept per backend; more are closed when put back.
const MAX_IDLE: usize = 512;
/// An idle connection older than this is closed rather than reused.
const IDLE_FOR: Duration = Duration::from_secs(60);
/// How long a kept connection may take to become ready for its next request.
const READY_WITHIN: Duration = Duration::from_secs(1);

pub(crate) use crate::config::HttpVersion as Version;

/// Why a request did not get a response.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("no connection to {addr} within {after:?}")]
    ConnectTimeout { addr: String, after: Duration },
    #[error("TLS with {addr} failed: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} does not speak HTTP/2 (ALPN offered {offered})")]
    NoHttp2 { addr: String, offered: String },
    #[error("{0}")]
    Http(String),
}

impl ClientError {
    fn http(e: &hyper::Error) -> Self {
        Self::Http(crate::telemetry::error_chain(e))
    }
}

/// A stream an HTTP connection runs on: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin> Io for T {}

type H1Conn = http1::Connection<TokioIo<Box<dyn Io>>, Body>;

/// An HTTP/1.1 connection: its request handle and its state machine, which the task
/// using the connection polls (`drive`) while it waits for the answer and reads it.
pub(super) struct H1 {
    sender: http1::SendRequest<Body>,
    /// `None` once it finished (the connection closed): dropping it fails whatever
    /// waited on it.
    conn: Option<Pin<Box<H1Conn>>>,
}

/// Awaits `fut` while polling `conn` (first, so that what it reads or notices, such
/// as the server having closed the connection, is seen by `fut`); once the connection
/// ends it is dropped and `fut` (a response or body read, which then fails or
/// finishes) is awaited alone.
async fn drive<F: Future>(conn: &mut Option<Pin<Box<H1Conn>>>, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        let polling = async {
            match conn.as_mut() {
                Some(c) => c.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            r = polling => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "backend HTTP/1.1 connection ended");
                }
                *conn = None;
            }
            out = &mut fut => return out,
        }
    }
}

/// A connection a request went out on, held until its answer has been read.
pub(super) enum Lease {
    Http1(H1),
    Http2,
}

impl Lease {
    /// The next frame of `body`.
    pub(super) async fn frame(
        &mut self,
        body: &mut Incoming,
    ) -> Option<Result<hyper::body::Frame<Bytes>, hyper::Error>> {
        use http_body_util::BodyExt as _;
        match self {
            Lease::Http2 => body.frame().await,
            Lease::Http1(h) => drive(&mut h.conn, body.frame()).await,
        }
    }

    /// Reads a body to its end, refusing one larger than `max` bytes.
    pub(super) async fn read_body(&mut self, body: Incoming, max: usize) -> Result<Bytes, String> {
        use http_body_util::BodyExt as _;
        let limited = http_body_util::Limited::new(body, max);
        let collected = match self {
            Lease::Http2 => limited.collect().await,
            Lease::Http1(h) => drive(&mut h.conn, limited.collect()).await,
        };
        match collected {
            Ok(c) => Ok(c.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Err(format!("reply larger than {max} bytes"))
            }
            Err(e) => Err(format!("reading the reply failed: {e}")),
        }
    }
}

/// The client of one backend URL.
pub(super) struct Client {
    host: String,
    port: u16,
    /// `host:port` as written in the URL, for `Host` and messages.
    authority: HeaderValue,
    addr: String,
    /// The origin-form target (HTTP/1.1) and the absolute one (HTTP/2).
    path: Uri,
    absolute: Uri,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    version: Version,
    connect_timeout: Duration,
    idle: Mutex<Vec<(H1, Instant)>>,
    h2: Mutex<Option<http2::SendRequest<Body>>>,
}

enum Conn {
    H1(H1),
    H2(http2::SendRequest<Body>),
}

impl Client {
    /// A client of `url` (http or https), trusting the web PKI roots and `extra_ca`.
    pub(super) fn new(
        url: &str,
        version: Version,
        extra_ca: &[CertificateDer<'static>],
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        // Through the URL parser configuration validation uses (IDNA hosts become
        // their ASCII form, which an HTTP request line needs).
        let parsed = url::Url::parse(url).map_err(|e| format!("invalid url `{url}`: {e}"))?;
        let uri: Uri = parsed
            .as_str()
            .parse()
            .map_err(|e| format!("invalid url `{url}`: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(format!(
                    "invalid url `{url}`: the scheme must be http or https"
                ))
            }
        };
        let auth = uri
            .authority()
            .ok_or_else(|| format!("invalid url `{url}`: no host"))?
            .clone();
        let host = auth.host().trim_start_matches('[').trim_end_matches(']');
        let port = auth.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path_and_query = uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str)
            .to_owned();
        let path: Uri = path_and_query
            .parse()
            .map_err(|e| format!("invalid url path: {e}"))?;
        let absolute = Uri::builder()
            .scheme(if https { "https" } else { "http" })
            .authority(auth.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|e| format!("invalid url: {e}"))?;
        let tls = if https {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| format!("invalid url `{url}`: {e}"))?;
            let alpn = match version {
                Version::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
                Version::Http1 => vec![b"http/1.1".to_vec()],
                Version::Http2 => vec![b"h2".to_vec()],
            };
            Some((tls_connector(extra_ca, alpn)?, name))
        } else {
            None
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            authority: HeaderValue::from_str(auth.as_str())
                .map_err(|e| format!("invalid url host: {e}"))?,
            addr: auth.to_string(),
            path,
            absolute,
            tls,
            version,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            h2: Mutex::new(None),
        })
    }

    /// Sends one request; the response's body is read by the caller, who then gives
    /// the lease back with [`Client::release`] (a lease dropped instead closes an
    /// HTTP/1.1 connection, as it must when its answer was not read to the end).
    pub(super) async fn send(
        &self,
        method: Method,
        headers: HeaderMap,
        body: Body,
    ) -> Result<(Response<Incoming>, Lease), ClientError> {
        let mut req = Request::new(body);
        *req.method_mut() = method;
        *req.headers_mut() = headers;
        if let Some(h2) = self.live_h2() {
            return self.send_h2(h2, req).await;
        }
        *req.uri_mut() = self.path.clone();
        req.headers_mut().insert(HOST, self.authority.clone());
        // A kept connection first; one that closed meanwhile gives the request back.
        while let Some(mut h) = self.take_idle().await {
            let sent = drive(&mut h.conn, h.sender.try_send_request(req)).await;
            match sent {
                Ok(resp) => return Ok((resp, Lease::Http1(h))),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(ClientError::http(&e.into_error())),
                },
            }
        }
        match self.connect().await? {
            Conn::H1(mut h) => {
                let resp = drive(&mut h.conn, h.sender.send_request(req))
                    .await
                    .map_err(|e| ClientError::http(&e))?;
                Ok((resp, Lease::Http1(h)))
            }
            Conn::H2(s) => {
                req.headers_mut().remove(HOST);
                *self.h2.lock() = Some(s.clone());
                self.send_h2(s, req).await
            }
        }
    }

    /// Gives back the connection of an answer that was read to its end.
    pub(super) fn release(&self, lease: Lease) {
        if let Lease::Http1(h) = lease {
            let mut idle = self.idle.lock();
            if idle.len() < MAX_IDLE && h.conn.is_some() && !h.sender.is_closed() {
                idle.push((h, Instant::now()));
            }
        }
    }

    fn live_h2(&self) -> Option<http2::SendRequest<Body>> {
        let mut h2 = self.h2.lock();
        match &*h2 {
            Some(s) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                *h2 = None;
                None
            }
            None => None,
        }
    }

    async fn send_h2(
        &self,
        mut s: http2::SendRequest<Body>,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, Lease), ClientError> {
        *req.uri_mut() = self.absolute.clone();
        s.ready().await.map_err(|e| ClientError::http(&e))?;
        let resp = s
            .send_request(req)
            .await
            .map_err(|e| ClientError::http(&e))?;
        Ok((resp, Lease::Http2))
    }

    /// A kept HTTP/1.1 connection ready for a request (closed and stale ones are
    /// dropped on the way; polling one notices that the server closed it).
    async fn take_idle(&self) -> Option<H1> {
        loop {
            let (mut h, since) = self.idle.lock().pop()?;
            if h.conn.is_none() || h.sender.is_closed() || since.elapsed() > IDLE_FOR {
                continue;
            }
            let ready = drive(
                &mut h.conn,
                tokio::time::timeout(READY_WITHIN, h.sender.ready()),
            )
            .await;
            if let (Ok(Ok(())), true) = (ready, h.conn.is_some()) {
                return Some(h);
            }
        }
    }

    async fn connect(&self) -> Result<Conn, ClientError> {
        let addr = || self.addr.clone();
        let within = self.connect_timeout;
        let timed_out = || ClientError::ConnectTimeout {
            addr: addr(),
            after: within,
        };
        let tcp = tokio::time::timeout(
            within,
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| timed_out())?
        .map_err(|source| ClientError::Connect {
            addr: addr(),
            source,
        })?;
        // Small messages, each a whole request: no Nagle delay.
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(Box::new(tcp), self.version == Version::Http2).await,
            Some((connector, name)) => {
                let stream = tokio::time::timeout(within, connector.connect(name.clone(), tcp))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|source| ClientError::Tls {
                        addr: addr(),
                        source,
                    })?;
                let agreed = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                let h2 = agreed.as_deref() == Some(b"h2");
                if self.version == Version::Http2 && !h2 {
                    return Err(ClientError::NoHttp2 {
                        addr: addr(),
                        offered: agreed.map_or_else(
                            || "nothing".to_owned(),
                            |a| String::from_utf8_lossy(&a).into_owned(),
                        ),
                    });
                }
                handshake(Box::new(stream), h2).await
            }
        }
    }
}

/// The HTTP handshake on a connected stream (an HTTP/2 connection's task is spawned).
async fn handshake(io: Box<dyn Io>, h2: bool) -> Result<Conn, ClientError> {
    let io = TokioIo::new(io);
    if h2 {
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await
            .map_err(|e| ClientError::http(&e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "backend HTTP/2 connection ended");
            }
        });
        Ok(Conn::H2(sender))
    } else {
        let (sender, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| ClientError::http(&e))?;
        Ok(Conn::H1(H1 {
            sender,
            conn: Some(Box::pin(conn)),
        }))
    }
}

/// TLS trusting the web PKI roots and `extra_ca`, offering `alpn`.
fn tls_connector(
    extra_ca: &[CertificateDer<'static>],
    alpn: Vec<Vec<u8>>,
) -> Result<tokio_rustls::TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for ca in extra_ca {
        roots
            .add(ca.clone())
            .map_err(|e| format!("unusable CA certificate: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn;
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use http_body_util::BodyExt as _;
    use hyper::body::Body as _;

    /// Each non-empty part is a frame of its own, in order; the length is exact
    /// before and while the body is read; an empty body ends at once.
    #[tokio::test]
    async fn a_body_of_parts_is_its_parts_in_order_with_an_exact_length() {
        let mut body = Body::parts(
            Bytes::from_static(b"{\"params\":"),
            Bytes::from_static(b"{\"a\":1}"),
            Bytes::from_static(b"}"),
        );
        assert_eq!(body.size_hint().exact(), Some(18));
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
            let left: usize = 18 - frames.iter().map(Bytes::len).sum::<usize>();
            assert_eq!(body.size_hint().exact(), Some(left as u64));
            assert_eq!(body.is_end_stream(), left == 0);
        }
        assert_eq!(frames, ["{\"params\":", "{\"a\":1}", "}"]);

        // Empty parts are skipped, not sent as empty frames, and the body ends with
        // its last non-empty part.
        let mut body = Body::parts(Bytes::new(), Bytes::from_static(b"x"), Bytes::new());
        assert!(!body.is_end_stream());
        let x = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(x, "x");
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());

        let whole = Body::from(Bytes::from_static(b"{}"));
        assert_eq!(whole.size_hint().exact(), Some(2));
        assert_eq!(whole.collect().await.unwrap().to_bytes(), "{}");
        let mut empty = Body::default();
        assert!(empty.is_end_stream());
        assert!(empty.frame().await.is_none());
    }
}
