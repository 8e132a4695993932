//! Logging setup: human-readable text (coloured only on a terminal), or JSON lines
//! with `--log-format json`. The filter comes from `RUST_LOG` (default `info`).
//! Logs go to stderr.

pub mod metrics;

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Safe to call once; later calls are ignored.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        // A closed stderr must not turn every log line into a panic report.
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
