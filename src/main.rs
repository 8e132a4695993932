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
#[command(
    name = "gantry",
    version = gantry::VERSION,
    about,
    after_help = "Examples:
  gantry                                      the built-in demo server at http://127.0.0.1:8080/mcp
  gantry --stdio 'npx -y @modelcontextprotocol/server-everything'
  gantry --stdio files='npx -y @modelcontextprotocol/server-filesystem /srv' \\
         --stdio gh='npx -y @modelcontextprotocol/server-github' --env-pass GITHUB_TOKEN \\
         --session-mode shared
  gantry --http docs=https://mcp.example.com/mcp --listen 0.0.0.0:8080
  gantry --config gantry.toml                 everything else: see config/gantry.example.toml
  gantry check-config gantry.toml             every problem of a file, in one run
  gantry status http://127.0.0.1:8080         a running Gantry's backends (--key for [auth])

--env, --env-pass and --session-mode apply to the --stdio or --http given just before them."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Full configuration file (TOML); see config/gantry.example.toml.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Expose a local stdio MCP server: `[NAME=]COMMAND LINE` (repeatable).
    #[arg(long, value_name = "[NAME=]COMMAND LINE")]
    stdio: Vec<String>,
    /// Expose a Streamable HTTP MCP server: `[NAME=]URL` (repeatable).
    #[arg(long, value_name = "[NAME=]URL")]
    http: Vec<String>,
    /// Set a variable for the --stdio backend given before it (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Pass this variable from Gantry's environment to the --stdio backend given
    /// before it (repeatable; by default only PATH, HOME, LANG and a few more are).
    #[arg(long, value_name = "VAR")]
    env_pass: Vec<String>,
    /// Session mode of the backend given before it: per-session (default), shared
    /// or per-user.
    #[arg(long, value_name = "MODE")]
    session_mode: Vec<String>,
    /// Address to listen on (overrides the config file); port 0 picks a free port.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,
    /// Log line format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Where each option sat on the command line (to tie --env to its backend).
    #[arg(skip)]
    order: Vec<(usize, Opt)>,
}

/// Makes an [`Opt`] from the option's index among its kind.
type MakeOpt = fn(usize) -> Opt;

/// A backend option, for ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Stdio(usize),
    Http(usize),
    Env(usize),
    EnvPass(usize),
    SessionMode(usize),
}

impl Cli {
    /// Parses the command line, remembering the order of the backend options.
    fn parse_ordered() -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Self::command().get_matches();
        let mut cli = match Self::from_arg_matches(&matches) {
            Ok(c) => c,
            Err(e) => e.exit(),
        };
        let kinds: [(&str, MakeOpt); 5] = [
            ("stdio", Opt::Stdio),
            ("http", Opt::Http),
            ("env", Opt::Env),
            ("env_pass", Opt::EnvPass),
            ("session_mode", Opt::SessionMode),
        ];
        for (id, make) in kinds {
            if let Some(indices) = matches.indices_of(id) {
                cli.order
                    .extend(indices.enumerate().map(|(n, at)| (at, make(n))));
            }
        }
        cli.order.sort_by_key(|(at, _)| *at);
        cli
    }
}

/// `NAME=rest` when the part before `=` is a backend name (and not part of a URL or a
/// command): the name and the rest.
fn named(value: &str) -> Option<(&str, &str)> {
    let (name, rest) = value.split_once('=')?;
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !rest.trim().is_empty();
    ok.then_some((name, rest))
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a configuration file and report every problem (and, unless
    /// --file-only, commands of stdio backends that this machine does not have).
    CheckConfig {
        /// The file to check.
        file: PathBuf,
        /// Check the file only, not whether its commands exist here (for a file meant
        /// for another machine or a container image).
        #[arg(long)]
        file_only: bool,
        /// Also show what reloading a running instance started from this file would
        /// change: backends added, changed, removed, and settings that need a restart.
        #[arg(long, value_name = "RUNNING_FILE")]
        against: Option<PathBuf>,
        /// Print the configuration in force: every default filled in, `${VAR}`,
        /// `*_file` and `GANTRY_*` applied, secrets shown as `<redacted>`.
        #[arg(long)]
        effective: bool,
    },
    /// Show a running Gantry's backends: state, mode, connections, restarts, eras,
    /// last error. Exit status 0 when ready, 2 when not ready, 1 when it cannot be
    /// asked.
    Status {
        /// Where Gantry listens (its origin or its MCP endpoint URL).
        #[arg(default_value = "http://127.0.0.1:8080")]
        url: String,
        /// An API key, when Gantry has `[auth]` keys (or set GANTRY_API_KEY).
        #[arg(long, env = "GANTRY_API_KEY", hide_env_values = true)]
        key: Option<String>,
        /// Print the `/status` JSON as it came.
        #[arg(long)]
        json: bool,
    },
    /// Check that a Gantry is alive (`/healthz`) or, with --ready, serving (`/readyz`):
    /// one line of output, exit status 0 healthy, 1 not. For a container's
    /// HEALTHCHECK (the image needs no curl).
    Healthcheck {
        /// Where Gantry listens (its origin, or any URL of it).
        #[arg(
            default_value = "http://127.0.0.1:8080",
            env = "GANTRY_HEALTHCHECK_URL"
        )]
        url: String,
        /// Ask `/readyz` (every required backend up, not shutting down).
        #[arg(long)]
        ready: bool,
        /// Give up after this long.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Print an argon2 hash of a password read from standard input (one line), for
    /// `password_hash` in `[[auth.builtin.users]]`.
    HashPassword,
    /// Run the built-in example MCP server over stdio (the demo backend).
    #[command(hide = true)]
    ExampleServer {
        /// Serve only the session era (protocol versions up to 2025-11-25), like a
        /// server written before 2026-07-28.
        #[arg(long)]
        session_era_only: bool,
    },
}

/// `gantry hash-password`: one line of standard input, hashed.
fn hash_password() -> std::process::ExitCode {
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() {
        eprintln!("gantry hash-password: cannot read standard input");
        return std::process::ExitCode::from(1);
    }
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        eprintln!("gantry hash-password: give the password on standard input (echo -n 'pw' | gantry hash-password)");
        return std::process::ExitCode::from(1);
    }
    match gantry::auth::builtin::hash_password(password) {
        Ok(h) => {
            println!("{h}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gantry hash-password: {e}");
            std::process::ExitCode::from(1)
        }
    }
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

/// Applies `--env`, `--env-pass` or `--session-mode` to a backend.
fn apply(b: &mut config::BackendConfig, opt: Opt, flag: &str, value: &str) -> anyhow::Result<()> {
    match opt {
        Opt::SessionMode(_) => {
            b.session_mode = match value {
                "per-session" => config::SessionMode::PerSession,
                "shared" => config::SessionMode::Shared,
                "per-user" => config::SessionMode::PerUser,
                _ => anyhow::bail!("{flag} {value}: expected per-session, shared or per-user"),
            };
        }
        Opt::Env(_) | Opt::EnvPass(_) => {
            let Some(s) = b.stdio.as_mut() else {
                anyhow::bail!("{flag} {value}: only a --stdio backend has an environment");
            };
            if matches!(opt, Opt::Env(_)) {
                let (k, v) = value
                    .split_once('=')
                    .filter(|(k, _)| !k.is_empty())
                    .ok_or_else(|| anyhow::anyhow!("{flag} {value}: expected KEY=VALUE"))?;
                s.env.insert(k.to_owned(), v.to_owned());
            } else if !s.inherit_env.iter().any(|k| k == value) {
                s.inherit_env.push(value.to_owned());
            }
        }
        Opt::Stdio(_) | Opt::Http(_) => {}
    }
    Ok(())
}

fn build_config(cli: &Cli) -> anyhow::Result<Config> {
    let mut file = match &cli.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            config::parse_all(&text)
                .map_err(|e| anyhow::anyhow!("{}: {}", p.display(), e.join("\n")))?
        }
        None => ConfigFile::default(),
    };
    let many = cli.stdio.len() + cli.http.len() > 1;
    let first_cli_backend = file.backends.len();
    // The backend the options after it apply to.
    let mut last: Option<usize> = None;
    let mut counts = (0, 0);
    for (_, opt) in &cli.order {
        match *opt {
            Opt::Stdio(i) => {
                let line = cli.stdio.get(i).map(String::as_str).unwrap_or_default();
                counts.0 += 1;
                let (name, line) = match named(line) {
                    Some((n, l)) => (n.to_owned(), l),
                    None if many => (format!("stdio{}", counts.0), line),
                    None => ("stdio".to_owned(), line),
                };
                let b = config::stdio_backend(&name, line)
                    .map_err(|e| anyhow::anyhow!("--stdio {line}: {e}"))?;
                file.backends.push(b);
                last = Some(file.backends.len() - 1);
            }
            Opt::Http(i) => {
                let value = cli.http.get(i).map(String::as_str).unwrap_or_default();
                counts.1 += 1;
                let (name, url) = match named(value) {
                    Some((n, u)) if !n.contains(':') => (n.to_owned(), u),
                    _ if many => (format!("http{}", counts.1), value),
                    _ => ("http".to_owned(), value),
                };
                file.backends.push(config::http_backend(&name, url));
                last = Some(file.backends.len() - 1);
            }
            Opt::Env(i) | Opt::EnvPass(i) | Opt::SessionMode(i) => {
                let (flag, value) = match *opt {
                    Opt::Env(_) => ("--env", cli.env.get(i)),
                    Opt::EnvPass(_) => ("--env-pass", cli.env_pass.get(i)),
                    _ => ("--session-mode", cli.session_mode.get(i)),
                };
                let value = value.map(String::as_str).unwrap_or_default();
                let b = last
                    .and_then(|l| file.backends.get_mut(l))
                    .filter(|_| last >= Some(first_cli_backend))
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "{flag} {value}: give it after the --stdio or --http it is for"
                        )
                    })?;
                apply(b, *opt, flag, value)?;
            }
        }
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
    Ok(file.validate(&origin)?)
}

fn check_config(
    path: &Path,
    file_only: bool,
    against: Option<&Path>,
    effective: bool,
) -> std::process::ExitCode {
    let running = match against.map(Config::load) {
        Some(Err(e)) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
        Some(Ok(c)) => Some(c),
        None => None,
    };
    match Config::load(path) {
        Ok(cfg) => {
            let findings = if file_only {
                Vec::new()
            } else {
                config::preflight::check(&cfg, &|k| std::env::var(k).ok())
            };
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
            if effective {
                match cfg.effective_toml() {
                    Ok(t) => println!("\n# The configuration in force (secrets redacted):\n{t}"),
                    Err(e) => {
                        eprintln!("cannot show the configuration: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                }
            }
            if let (Some(old), Some(running)) = (&running, against) {
                let plan = gantry::router::ReloadPlan::between(old, &old.backends, &cfg);
                println!(
                    "reload of a Gantry started from {}: {}",
                    running.display(),
                    plan.summary()
                );
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `gantry healthcheck`: one line, exit 0 healthy, 1 not.
fn healthcheck(url: &str, ready: bool, timeout: std::time::Duration) -> std::process::ExitCode {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("gantry healthcheck: cannot start the runtime");
        return std::process::ExitCode::FAILURE;
    };
    match rt.block_on(gantry::status_cli::healthcheck(url, ready, timeout)) {
        Ok(line) => {
            println!("healthy: {line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!("unhealthy: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `fut` on a multi-threaded runtime; an error is printed as `what: error`.
fn status(url: &str, key: Option<&str>, json: bool) -> std::process::ExitCode {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("gantry status: cannot start the runtime");
        return std::process::ExitCode::FAILURE;
    };
    match rt.block_on(gantry::status_cli::fetch(url, key)) {
        Ok((ready, full)) => {
            let report = gantry::status_cli::render(url, &ready, &full);
            if json {
                println!("{full:#}");
            } else {
                print!("{}", report.text);
            }
            if report.ready {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("gantry status: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The environment variable that sets how many worker threads the runtime has
/// (tokio's own name for it; tokio would panic on a value it cannot read).
const WORKER_THREADS_VAR: &str = "TOKIO_WORKER_THREADS";

/// The worker threads asked for in [`WORKER_THREADS_VAR`] (`None`: one per CPU).
fn worker_threads() -> Result<Option<usize>, String> {
    let Some(v) = std::env::var_os(WORKER_THREADS_VAR) else {
        return Ok(None);
    };
    v.to_str()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| (1..=1024).contains(n))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{WORKER_THREADS_VAR}={}: give a whole number of worker threads from 1 to 1024, \
                 or leave it unset for one per CPU",
                v.to_string_lossy()
            )
        })
}

fn block_on(
    what: &str,
    logged: bool,
    fut: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    match worker_threads() {
        Ok(Some(n)) => {
            builder.worker_threads(n);
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("{what}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let rt = match builder.enable_all().build() {
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

/// SIGHUP (and, with `server.watch_config`, a change of the file's contents):
/// the configuration is built again as at start (file, then environment, then
/// flags) and applied; one that does not load changes nothing.
async fn reload_on_signal(
    cli: Cli,
    app: std::sync::Arc<gantry::front::App>,
    stop: CancellationToken,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler; reload is off");
        return;
    };
    let watched = cli.config.clone().filter(|_| app.cfg.server.watch_config);
    let read = |p: &Path| std::fs::read(p).ok();
    let mut last = watched.as_deref().and_then(read);
    loop {
        let why = tokio::select! {
            _ = stop.cancelled() => return,
            _ = hup.recv() => "SIGHUP",
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)), if watched.is_some() => {
                let now = watched.as_deref().and_then(read);
                if now.is_none() || now == last {
                    continue;
                }
                last = now;
                "the configuration file changed"
            }
        };
        if cli.config.is_none() {
            tracing::warn!("{why}: nothing to reload (no --config file)");
            continue;
        }
        match build_config(&cli) {
            Ok(new) => {
                let plan = app.reload(new).await;
                tracing::info!(
                    added = ?plan.added,
                    changed = ?plan.changed,
                    removed = ?plan.removed,
                    needs_restart = ?plan.needs_restart,
                    "{why}: configuration reloaded ({})",
                    plan.summary()
                );
            }
            Err(e) => {
                tracing::error!("{why}: the new configuration is not valid, the running one stays in force: {e:#}");
            }
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
    let cli = Cli::parse_ordered();
    match &cli.command {
        Some(Command::CheckConfig {
            file,
            file_only,
            against,
            effective,
        }) => return check_config(file, *file_only, against.as_deref(), *effective),
        Some(Command::Status { url, key, json }) => return status(url, key.as_deref(), *json),
        Some(Command::Healthcheck {
            url,
            ready,
            timeout,
        }) => return healthcheck(url, *ready, *timeout),
        Some(Command::HashPassword) => return hash_password(),
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
    if let Err(e) = worker_threads() {
        eprintln!("gantry: {e}");
        return std::process::ExitCode::FAILURE;
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
    if !addr.ip().is_loopback() && cfg.auth.api_keys.is_empty() && cfg.auth.oauth.is_none() {
        tracing::warn!(%addr, "listening beyond loopback without authentication: every caller is the anonymous principal");
    }
    for f in config::preflight::check(&cfg, &|k| std::env::var(k).ok()) {
        tracing::warn!("{f}");
    }
    let backends: Vec<String> = cfg.backends.iter().map(|b| b.name.clone()).collect();
    let scheme = if cfg.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut cfg = cfg;
    let tokens = cfg.auth.oauth.is_some() || cfg.auth.mode == config::AuthMode::Builtin;
    if tokens && cfg.server.public_url.is_none() {
        // On loopback (validated): the URL this listener is reached at.
        cfg.server.public_url = Some(format!("{scheme}://{addr}{path}"));
    }
    let app = gantry::front::App::new(cfg)?;
    tracing::info!(backends = ?backends, "listening on {scheme}://{addr}{path}");
    eprintln!("gantry listening on {scheme}://{addr}{path}");
    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    tokio::spawn(reload_on_signal(cli, app.clone(), stop.clone()));
    gantry::front::serve(app, listener, stop).await?;
    tracing::info!("stopped");
    Ok(())
}
