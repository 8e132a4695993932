//! The `gantry-example` command line (the binary is built by the `gantry` package,
//! so Gantry's tests and CI find it next to `gantry`).
//!
//! ```text
//! gantry-example                        # MCP over stdio (newline-delimited JSON-RPC)
//! gantry-example --http 127.0.0.1:PORT  # Streamable HTTP at http://127.0.0.1:PORT/mcp
//! gantry-example --session-era-only ... # only protocol versions up to 2025-11-25
//! gantry-example --session-era-peer-tools ... # both eras; tools that ask the client
//!                                       # do so in the session era only
//! ```
//!
//! Both protocol eras are served by default: the session era (`initialize`,
//! 2024-11-05 .. 2025-11-25) and the stateless era (per-request `_meta`, 2026-07-28).
//!
//! Diagnostics go to stderr (filter with `RUST_LOG`, default `warn`).

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Example MCP server for the Gantry gateway (MCP conformance fixture + echo/slow tools).
#[derive(Debug, Parser)]
#[command(name = "gantry-example", version)]
struct Cli {
    /// Serve Streamable HTTP on this address (endpoint `/mcp`) instead of stdio,
    /// e.g. `127.0.0.1:8080` or `localhost:0`. Port 0 picks a free port; the
    /// bound address is printed to stderr.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    /// Behave like a server written before protocol 2026-07-28: `server/discover`
    /// is unknown (-32601), every client must `initialize` first, and only the
    /// session-era versions (up to 2025-11-25) are negotiated.
    #[arg(long)]
    session_era_only: bool,
    /// Serve both eras, but let the tools that ask the client (sampling,
    /// elicitation) work in the session era only, like servers whose SDK cannot
    /// ask a stateless-era client: asked statelessly they fail (-32601 inside the
    /// tool result).
    #[arg(long, conflicts_with = "session_era_only")]
    session_era_peer_tools: bool,
}

/// Runs the example server as its command line says; returns when it ends.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    let eras = if cli.session_era_only {
        crate::Eras::SessionOnly
    } else if cli.session_era_peer_tools {
        crate::Eras::BothWithSessionEraPeerTools
    } else {
        crate::Eras::Both
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.http {
            Some(addr) => crate::serve_http(&addr, eras).await,
            None => crate::serve_stdio(eras).await,
        }
    })
}
