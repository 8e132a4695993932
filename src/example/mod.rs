//! The example MCP server, written with the official Rust SDK (rmcp) so that Gantry
//! is always tested against an independent MCP implementation.
//!
//! It implements the fixture of the MCP conformance suite
//! (`@modelcontextprotocol/conformance`, protocol 2025-11-25) plus two tools for
//! gateway tests: `echo {message}` and `slow {ms}`. It is built into the library so
//! that `gantry` with no arguments can serve it as a demo (`gantry example-server`
//! runs it over stdio), and it is also the `gantry-example` binary.

mod fixtures;
mod server;
mod sessions;

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use rmcp::{
    transport::{StreamableHttpServerConfig, StreamableHttpService},
    ServiceExt,
};
use tokio_util::sync::CancellationToken;

use self::{server::ExampleServer, sessions::ReconnectableSessions};

/// Serves MCP over stdio until the client closes stdin.
pub async fn serve_stdio() -> anyhow::Result<()> {
    let service = ExampleServer::new(None)
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP initialization over stdio failed")?;
    service.waiting().await.context("stdio service failed")?;
    Ok(())
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
pub async fn serve_http(addr: &str) -> anyhow::Result<()> {
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
    let service = StreamableHttpService::new(
        move || Ok(ExampleServer::new(Some(handler_sessions.clone()))),
        sessions,
        config,
    );
    let router = axum::Router::new().route_service("/mcp", service);

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
