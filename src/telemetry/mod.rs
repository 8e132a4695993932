//! Logging setup: human-readable text (coloured only on a terminal), or JSON lines
//! with `--log-format json`. The filter comes from `RUST_LOG` (default `info`).
//! Logs go to stderr.

pub mod metrics;
pub mod trace;

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

/// An error with its causes, each once ("error sending request: … Connection
/// refused"): what a log line or an operator's message needs.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// A duration as people write it, rounded to what matters: `1s` (not
/// `999ms 995us 562ns`), `1.5s`, `250ms`, `2m 30s`.
pub fn human(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        return format!("{}us", d.as_micros());
    }
    if ms < 999.5 {
        return format!("{}ms", ms.round());
    }
    let tenths = (d.as_secs_f64() * 10.0).round() / 10.0;
    if tenths < 60.0 {
        let s = format!("{tenths:.1}");
        return format!("{}s", s.strip_suffix(".0").unwrap_or(&s));
    }
    let whole = std::time::Duration::from_secs(d.as_secs_f64().round() as u64);
    humantime::format_duration(whole).to_string()
}

#[cfg(test)]
mod tests {
    use super::human;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        for (d, want) in [
            (Duration::from_nanos(999_995_562), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(999_400), "999ms"),
            (Duration::from_micros(12), "12us"),
            (Duration::from_secs(60), "1m"),
            (Duration::from_millis(150_400), "2m 30s"),
            (Duration::from_secs(30 * 60), "30m"),
        ] {
            assert_eq!(human(d), want, "{d:?}");
        }
    }
}
