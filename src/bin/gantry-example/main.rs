//! `gantry-example`: the example MCP server (see `gantry::example`).
//!
//! ```text
//! gantry-example                        # MCP over stdio (newline-delimited JSON-RPC)
//! gantry-example --http 127.0.0.1:PORT  # Streamable HTTP at http://127.0.0.1:PORT/mcp
//! ```
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    match cli.http {
        Some(addr) => gantry::example::serve_http(&addr, gantry::example::Eras::Both).await,
        None => gantry::example::serve_stdio(gantry::example::Eras::Both).await,
    }
}
