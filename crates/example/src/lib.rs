//! The example MCP server, written with the official Rust SDK (rmcp) so that Gantry
//! is always tested against an independent MCP implementation.
//!
//! It implements the fixture of the MCP conformance suite
//! (`@modelcontextprotocol/conformance`) for protocol 2025-11-25 (session era) and
//! 2026-07-28 (stateless era), plus two tools for gateway tests: `echo {message}`
//! and `slow {ms}`. It is its own crate, so the gateway library compiles none of it;
//! the `gantry` executable embeds it as its demo (`gantry example-server` runs it over
//! stdio), and the `gantry` package builds it as the `gantry-example` binary.
//!
//! Both eras are served on one endpoint, as rmcp classifies each message (see
//! `README.md` beside this file); [`Eras::SessionOnly`] hides the stateless era.

pub mod cli;
mod fixtures;
mod input_required;
mod mrtr;
mod peer_tools;
mod record;
mod server;
mod session_era_only;
mod sessions;
mod state;

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use rmcp::{
    transport::{async_rw::AsyncRwTransport, StreamableHttpServerConfig, StreamableHttpService},
    ServiceExt,
};
use tokio_util::sync::CancellationToken;

pub use self::state::Eras;
use self::{
    server::ExampleServer, session_era_only::SessionEraOnly, sessions::ReconnectableSessions,
    state::ServerState,
};

fn server_state(eras: Eras) -> anyhow::Result<Arc<ServerState>> {
    Ok(Arc::new(
        ServerState::new(eras).context("cannot create the requestState key")?,
    ))
}

/// Serves MCP over stdio (newline-delimited JSON-RPC) until the client closes stdin.
///
/// With [`Eras::Both`] rmcp picks the era from the first message: `initialize`
/// opens a session; a request whose `_meta` names 2026-07-28 opens the stateless
/// era, where every request carries its own `_meta`; `server/discover` is answered
/// either way without choosing.
pub async fn serve_stdio(eras: Eras) -> anyhow::Result<()> {
    let server = ExampleServer::new(server_state(eras)?, None);
    let stdout = tokio::io::stdout();
    // The client closing stdin ends the server, also while a `subscriptions/listen`
    // stream (which the SDK waits for) is open.
    let eof = CancellationToken::new();
    let stdin: Box<dyn tokio::io::AsyncRead + Send + Unpin> =
        match record::Recorder::from_env("MB_RECORD")? {
            Some(r) => Box::new(EofSignal::new(record::tee_stdin(r), eof.clone())),
            None => Box::new(EofSignal::new(tokio::io::stdin(), eof.clone())),
        };
    let service = match eras {
        Eras::SessionOnly => {
            server
                .serve(SessionEraOnly::new(AsyncRwTransport::new_server(
                    stdin, stdout,
                )))
                .await
        }
        _ => server.serve((stdin, stdout)).await,
    }
    .context("MCP initialization over stdio failed")?;
    tokio::select! {
        r = service.waiting() => {
            r.context("stdio service failed")?;
        }
        () = eof.cancelled() => {
            // What is being answered gets a moment to be written.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// A reader that cancels a token when it reaches the end of its input.
struct EofSignal<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R> EofSignal<R> {
    fn new(inner: R, eof: CancellationToken) -> Self {
        Self { inner, eof }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &r {
            if buf.filled().len() == before && buf.remaining() > 0 {
                self.eof.cancel();
            }
        }
        r
    }
}

/// `Host` values accepted by the DNS-rebinding protection.
fn allowed_hosts(bound: SocketAddr) -> Vec<String> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
    ];
    let ip = bound.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        hosts.push(match ip {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        });
    }
    hosts
}

/// Browser `Origin` values accepted (requests without `Origin` are accepted too).
fn allowed_origins(hosts: &[String]) -> Vec<String> {
    hosts
        .iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect()
}

/// Serves Streamable HTTP at `http://ADDR/mcp` until Ctrl-C; prints the bound URL
/// to stderr.
///
/// With [`Eras::Both`] rmcp routes each POST: `initialize` and requests on an
/// `Mcp-Session-Id` go to the session; a request whose `_meta` carries the
/// 2026-07-28 envelope is served statelessly (no session, SEP-2243 headers checked).
pub async fn serve_http(addr: &str, eras: Eras) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr().context("no local address")?;

    let shutdown = CancellationToken::new();
    let hosts = allowed_hosts(bound);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(allowed_origins(&hosts))
        .with_allowed_hosts(hosts)
        .with_cancellation_token(shutdown.child_token());
    let sessions = Arc::new(ReconnectableSessions::default());
    let handler_sessions = sessions.clone();
    let state = server_state(eras)?;
    // rmcp calls this for every session and for every stateless request.
    let service = StreamableHttpService::new(
        move || {
            Ok(ExampleServer::new(
                state.clone(),
                Some(handler_sessions.clone()),
            ))
        },
        sessions,
        config,
    );
    let mut router = axum::Router::new().route_service("/mcp", service);
    if eras == Eras::SessionOnly {
        router = router.layer(axum::middleware::from_fn(session_era_only::http_gate));
    }
    let recorders = (
        record::Recorder::from_env("MB_RECORD")?,
        record::Recorder::from_env("MB_RECORD_HEADERS")?,
    );
    if recorders.0.is_some() || recorders.1.is_some() {
        // Outermost: what arrived, before any gate answered it.
        router = router.layer(axum::middleware::from_fn_with_state(
            recorders,
            record::http,
        ));
    }

    eprintln!("listening on http://{bound}/mcp");
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("HTTP server failed")?;
    Ok(())
}
