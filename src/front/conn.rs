//! Accepting connections, each phase bounded (README "Timeouts, caps and quotas"):
//!
//! - a connection must deliver a complete request head within `header_timeout` of
//!   opening or of its previous response (slowloris heads, idle keep-alive);
//! - a response write that makes no progress for `write_timeout` ends the connection
//!   (a client that stopped reading; what it missed stays resumable);
//! - at most `max_connections` at once: one more is answered `503` (`/healthz` still
//!   `200`) and closed, so the process never reaches its open-file limit;
//! - on shutdown every connection is told to finish, and whatever is still open when
//!   the caller says so (after `shutdown_grace`) is closed, however the client behaves.
//!
//! Body reads are bounded where bodies are read ([`super::http::read_body`]).

use super::own_wakes::{AbsorbOwnWakes, Spawner};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service as _;

/// How connections are bounded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnLimits {
    pub(crate) header_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) max_connections: usize,
}

/// Bytes read from and written to client connections (metrics).
#[derive(Clone)]
pub(crate) struct ByteCounters {
    pub(crate) received: prometheus::IntCounter,
    pub(crate) sent: prometheus::IntCounter,
}

/// Connections over the cap being answered `503` at once, at most; beyond that
/// they are closed unanswered (each holds a file descriptor for up to a second).
const MAX_REFUSING: usize = 64;

/// The connections being served, and how to end them.
pub(crate) struct Connections {
    tracker: TaskTracker,
    /// Tells every connection to finish its current exchange and close.
    finish: CancellationToken,
    /// Closes every connection now.
    kill: CancellationToken,
}

impl Connections {
    /// Tells every connection to finish what it is doing and close, then waits up
    /// to `patience` for them; closes the rest.
    pub(crate) async fn close(&self, patience: Duration) {
        self.finish.cancel();
        self.tracker.close();
        if tokio::time::timeout(patience, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::info!(
                connections = self.tracker.len(),
                "closing connections still open"
            );
            self.kill.cancel();
            self.tracker.wait().await;
        }
    }
}

/// What serves a connection's requests, told whose connection it is.
pub(crate) trait Serve: Clone + Send + 'static {
    type Future: std::future::Future<Output = Result<axum::response::Response, Infallible>>
        + Send
        + 'static;

    fn serve(&self, req: hyper::Request<Incoming>, peer: SocketAddr) -> Self::Future;
}

/// A router's handlers learn the peer as axum's `ConnectInfo`.
impl Serve for axum::Router {
    type Future = axum::routing::future::RouteFuture<Infallible>;

    fn serve(&self, mut req: hyper::Request<Incoming>, peer: SocketAddr) -> Self::Future {
        req.extensions_mut().insert(ConnectInfo(peer));
        // A router is always ready.
        self.clone().call(req.map(axum::body::Body::new))
    }
}

/// One connection's service: `S` and the connection's peer.
#[derive(Clone)]
struct FromPeer<S> {
    serve: S,
    peer: SocketAddr,
}

impl<S: Serve> hyper::service::Service<hyper::Request<Incoming>> for FromPeer<S> {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        self.serve.serve(req, self.peer)
    }
}

/// Accepts connections until `stop`, serving each with `routes`. Returns the
/// connections still open, to be ended with [`Connections::close`].
pub(crate) async fn accept<S: Serve>(
    listener: TcpListener,
    routes: S,
    limits: ConnLimits,
    bytes: ByteCounters,
    tls: Option<Arc<super::tls::Tls>>,
    stop: CancellationToken,
) -> Connections {
    let conns = Connections {
        tracker: TaskTracker::new(),
        finish: CancellationToken::new(),
        kill: CancellationToken::new(),
    };
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut builder = auto::Builder::new(Spawner);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(20))
        .max_concurrent_streams(256);
    let builder = Arc::new(builder);
    let mut fd_warned: Option<tokio::time::Instant> = None;
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors (or a transient accept error): wait a
                    // little rather than spin; the connections open keep working.
                    if fd_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(error = %e, "cannot accept a connection; retrying");
                        fd_warned = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Small SSE writes must not wait for the peer's delayed ACK (Nagle): ~40 ms a call.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Ok(p) = refusing.clone().try_acquire_owned() {
                conns.tracker.spawn(async move {
                    refuse(tcp).await;
                    drop(p);
                });
            }
            continue;
        };
        let svc = FromPeer {
            serve: routes.clone(),
            peer,
        };
        let (builder, finish, kill) = (builder.clone(), conns.finish.clone(), conns.kill.clone());
        let stalls = Stalls::new(tcp, limits.write_timeout, bytes.clone());
        let tls = tls.as_ref().map(|t| t.current());
        conns.tracker.spawn(async move {
            match tls {
                None => serve_one(TokioIo::new(stalls), &builder, svc, &finish, &kill, peer).await,
                Some(cfg) => {
                    // The handshake is a phase like the request head: bounded.
                    let handshake = tokio_rustls::TlsAcceptor::from(cfg).accept(stalls);
                    let stream = tokio::select! {
                        r = tokio::time::timeout(limits.header_timeout, handshake) => r,
                        _ = kill.cancelled() => return,
                    };
                    match stream {
                        Ok(Ok(s)) => {
                            serve_one(TokioIo::new(s), &builder, svc, &finish, &kill, peer).await
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
        });
    }
    conns
}

/// Serves one connection until it ends, is told to finish (then finishes its
/// exchange), or is killed. Polled through [`AbsorbOwnWakes`]: hyper's dispatcher
/// wakes its own task while it runs (the request body it hands the handler asks it
/// for more, an answer it is polling is finished by the same poll), and without the
/// wrapper each such wake-up costs a lone call a trip through the scheduler and an
/// idle worker roused for nothing (BENCHMARKS.md).
async fn serve_one<I, S>(
    io: I,
    builder: &auto::Builder<Spawner>,
    svc: S,
    finish: &CancellationToken,
    kill: &CancellationToken,
    peer: std::net::SocketAddr,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<axum::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    AbsorbOwnWakes::new(async move {
        let conn = builder.serve_connection(io, svc);
        tokio::pin!(conn);
        // Polled with the connection, so registered once (`Cancelled`), not on
        // each of the connection's polls.
        let mut killed = std::pin::pin!(crate::cancel::Cancelled::new(kill));
        let finished = tokio::select! {
            r = conn.as_mut() => Some(r),
            () = crate::cancel::Cancelled::new(finish) => None,
            () = killed.as_mut() => return,
        };
        let result = match finished {
            Some(r) => r,
            None => {
                conn.as_mut().graceful_shutdown();
                tokio::select! {
                    r = conn.as_mut() => r,
                    () = killed.as_mut() => return,
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    })
    .await;
}

/// Answers a connection over the cap: `200` for a liveness probe (the process is
/// alive), `503` for anything else; then closes it. Bounded to about a second.
async fn refuse(mut tcp: TcpStream) {
    let mut head = [0u8; 1024];
    let n = match tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut head)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    };
    let probe = head
        .get(..n)
        .is_some_and(|h| h.starts_with(b"GET /healthz ") || h.starts_with(b"HEAD /healthz "));
    let response = if probe {
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_owned()
    } else {
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Service Unavailable: too many open connections; retry later"}}"#;
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        tcp.write_all(response.as_bytes()).await?;
        tcp.shutdown().await
    })
    .await;
}

/// A TCP stream whose writes fail with `TimedOut` when they make no progress for
/// `limit`: a peer that stopped reading cannot hold a connection forever.
struct Stalls {
    inner: TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    bytes: ByteCounters,
}

impl Stalls {
    fn new(inner: TcpStream, limit: Duration, bytes: ByteCounters) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
            bytes,
        }
    }

    fn wrote(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r {
            self.bytes.sent.inc_by(*n as u64);
        }
    }

    /// Called when a write is pending: arms the stall timer on first call, and
    /// fails once it has run out.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            )),
            Poll::Pending => Ok(()),
        }
    }

    fn progress<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => {
                self.check(cx)?;
                Poll::Pending
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for Stalls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = buf.filled().len().saturating_sub(before);
            self.bytes.received.inc_by(n as u64);
        }
        r
    }
}

impl AsyncWrite for Stalls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&r);
        self.progress(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&r);
        self.progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Raises the soft open-file limit to the hard one (as most servers do; the default
/// soft limit of 1024 is far below what a gateway needs) and returns the limit now
/// in force (`None`: unknown).
pub fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// The connection cap in force: the configured one, or (0) half the open-file limit,
/// at most 10,000, so the process keeps descriptors for backends and logs.
pub(crate) fn connection_cap(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    usize::try_from(limit / 2)
        .unwrap_or(10_000)
        .clamp(16, 10_000)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{serve_one, Spawner};
    use crate::testkit::CountedWaker;
    use hyper_util::rt::TokioIo;
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    use std::future::Future as _;
    use std::task::Context;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    /// A request that is all there is served in one poll of its connection, and the
    /// connection's task is not woken by its own work on the way (hyper's dispatcher
    /// wakes itself when the handler reads the body; each such wake-up costs a lone
    /// call a trip through the scheduler and a worker roused for nothing).
    #[tokio::test]
    async fn a_ready_request_is_answered_in_one_poll_without_waking_its_own_task() {
        let app = axum::Router::new().route(
            "/echo",
            axum::routing::post(|body: bytes::Bytes| async move { body }),
        );
        let (mut client, server) = tokio::io::duplex(64 << 10);
        client
            .write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let builder = auto::Builder::new(Spawner);
        let (finish, kill) = (CancellationToken::new(), CancellationToken::new());
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let conn = serve_one(
            TokioIo::new(server),
            &builder,
            TowerToHyperService::new(app),
            &finish,
            &kill,
            peer,
        );
        let mut conn = std::pin::pin!(conn);
        let (task, waker) = CountedWaker::new();
        let polled = conn.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending(), "a kept-alive connection stays open");

        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(1), client.read(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"),
            "{answer}"
        );
        assert_eq!(task.count(), 0, "the connection's task woke itself");
        drop(client);
    }
}
