//! The `gantry` command line: parse arguments, load the configuration, run.

use anyhow::Context;
use clap::{Parser, Subcommand};
use gantry::config::{self, Config, ConfigFile};
use gantry::telemetry::{self, LogFormat};
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc malloc: a call allocates a few dozen small, short-lived
/// buffers across threads, which glibc's arenas serve noticeably slower (see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gantry: an MCP gateway. Exposes MCP servers (local stdio programs or Streamable
/// HTTP servers) to any MCP client over Streamable HTTP.
///
/// With no backend options, serves the built-in example server as a demo.
#[derive(Parser, Debug)]
#[command(name = "gantry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Full configuration file (TOML); see config/gantry.example.toml.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Expose a local stdio MCP server: the command line to run (repeatable).
    #[arg(long, value_name = "COMMAND LINE")]
    stdio: Vec<String>,
    /// Expose a Streamable HTTP MCP server by URL (repeatable).
    #[arg(long, value_name = "URL")]
    http: Vec<String>,
    /// Address to listen on (overrides the config file); port 0 picks a free port.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,
    /// Log line format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a configuration file and report every problem.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Run the built-in example MCP server over stdio (the demo backend).
    #[command(hide = true)]
    ExampleServer {
        /// Serve only the session era (protocol versions up to 2025-11-25), like a
        /// server written before 2026-07-28.
        #[arg(long)]
        session_era_only: bool,
    },
}

/// The demo backend: this same executable running the built-in example server.
fn demo_backend() -> anyhow::Result<config::BackendConfig> {
    let exe = std::env::current_exe().context("cannot locate the gantry executable")?;
    let quoted = shlex::try_quote(&exe.to_string_lossy())
        .map(|q| q.into_owned())
        .context("the gantry executable path cannot be quoted")?;
    config::stdio_backend("example", &format!("{quoted} example-server"))
        .map_err(anyhow::Error::msg)
}

fn build_config(cli: &Cli) -> anyhow::Result<Config> {
    let mut file = match &cli.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            toml::from_str::<ConfigFile>(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        None => ConfigFile::default(),
    };
    let many = cli.stdio.len() + cli.http.len() > 1;
    for (i, line) in cli.stdio.iter().enumerate() {
        let name = if many {
            format!("stdio{}", i + 1)
        } else {
            "stdio".into()
        };
        file.backends
            .push(config::stdio_backend(&name, line).map_err(anyhow::Error::msg)?);
    }
    for (i, url) in cli.http.iter().enumerate() {
        let name = if many {
            format!("http{}", i + 1)
        } else {
            "http".into()
        };
        file.backends.push(config::http_backend(&name, url));
    }
    if file.backends.is_empty() && cli.config.is_none() {
        file.backends.push(demo_backend()?);
    }
    if let Some(l) = &cli.listen {
        file.server.listen = l.clone();
    }
    let origin = cli
        .config
        .as_deref()
        .map_or_else(|| "command line".to_owned(), |p| p.display().to_string());
    Ok(file.validate(&origin, &|k| std::env::var(k).ok())?)
}

fn check_config(path: &Path) -> std::process::ExitCode {
    match Config::load(path) {
        Ok(cfg) => {
            let findings = config::preflight::check(&cfg, &|k| std::env::var(k).ok());
            if !findings.is_empty() {
                for f in &findings {
                    eprintln!("{}: {f}", path.display());
                }
                return std::process::ExitCode::FAILURE;
            }
            println!(
                "{}: ok ({} backend{}: {})",
                path.display(),
                cfg.backends.len(),
                if cfg.backends.len() == 1 { "" } else { "s" },
                cfg.backends
                    .iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `fut` on a multi-threaded runtime; an error is printed as `what: error`.
fn block_on(
    what: &str,
    logged: bool,
    fut: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(fut) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Once: a log line when logging is set up (it goes to stderr too), else
            // plain text.
            if logged {
                tracing::error!("{e:#}");
            } else {
                eprintln!("{what}: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal(stop: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    // Stop first: logging can fail (a closed stderr) and must not lose the signal.
    stop.cancel();
    tracing::info!("{which} received; shutting down");
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::CheckConfig { file }) => return check_config(file),
        Some(Command::ExampleServer { session_era_only }) => {
            let eras = if *session_era_only {
                gantry_example::Eras::SessionOnly
            } else {
                gantry_example::Eras::Both
            };
            return block_on("example server", false, gantry_example::serve_stdio(eras));
        }
        None => {}
    }
    telemetry::init(cli.log_format);
    if !gantry::supervisor::is_worker() {
        return gantry::supervisor::run();
    }
    if let Err(e) = gantry::supervisor::attach_worker() {
        eprintln!("gantry: {e}");
        return std::process::ExitCode::FAILURE;
    }
    block_on("gantry", true, run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let cfg = build_config(&cli)?;
    let open_files = gantry::front::raise_open_file_limit();
    tracing::debug!(?open_files, "open-file limit");
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let path = cfg.server.path.clone();
    if !addr.ip().is_loopback() && cfg.auth.api_keys.is_empty() {
        tracing::warn!(%addr, "listening beyond loopback without authentication: every caller is the anonymous principal");
    }
    for f in config::preflight::check(&cfg, &|k| std::env::var(k).ok()) {
        tracing::warn!("{f}");
    }
    let backends: Vec<String> = cfg.backends.iter().map(|b| b.name.clone()).collect();
    tracing::info!(backends = ?backends, "listening on http://{addr}{path}");
    eprintln!("gantry listening on http://{addr}{path}");
    let app = gantry::front::App::new(cfg)?;
    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    gantry::front::serve(app, listener, stop).await?;
    tracing::info!("stopped");
    Ok(())
}
