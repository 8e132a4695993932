//! `gantry-bench`: a closed-loop load generator for Gantry.
//!
//! N concurrent clients, each with its own MCP session and its own keep-alive HTTP
//! connection, call the `echo` tool in a loop with a P-byte payload and check every
//! answer (exact text, right id). Each (N, P) is measured against, in turn:
//!
//! * `direct`: a minimal Streamable HTTP MCP server with no gateway (this same binary
//!   run as `gantry-bench --serve-direct`, JSON responses, or one-event SSE streams
//!   with `--direct-sse`): the floor;
//! * `shared` / `per-session` / `per-user`: Gantry in front of a stdio echo backend
//!   in that `session_mode` (`per-user`: every 4 clients share one API key, so one
//!   backend process);
//! * `relay` / `relay-per-session` / `relay-http`: the floor of one backend hop, a
//!   relay that does only what no gateway can avoid (relay.rs), in front of the same
//!   backend as `shared` / `per-session` / `http`.
//!
//! Every server runs as a child process started for one measurement and stopped after
//! it, so CPU time (of the whole process tree, from `/proc`: see [`proc::cpu_delta`])
//! and RSS (`VmRSS` from `/proc/<pid>/status`, summed over the tree) are read the same
//! way for every target. Then K idle sessions are opened against Gantry in `shared`
//! mode and the RSS growth per session is reported. BENCHMARKS.md describes the method.
//!
//! ```text
//! cargo build --profile dist --workspace --bins
//! target/dist/gantry-bench                                   # full matrix (~3 min)
//! target/dist/gantry-bench --duration 2s --clients 1,16 --payloads 100 --idle-sessions 0
//! target/dist/gantry-bench --markdown > results.md           # table for BENCHMARKS.md
//! target/dist/gantry-bench soak --duration 10m --sessions 20  # soak (see soak.rs)
//! ```
//!
//! Only 127.0.0.1 is used. Every loop is bounded in time and count; every process the
//! bench starts is killed when it ends, on error, and on Ctrl-C / SIGTERM.
// A load generator measures wall-clock time: `std::time::Instant` is right here.
#![allow(clippy::disallowed_types)]

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod issuer;
mod lean;
mod pin;
mod relay;
mod soak;
mod tls;

/// The `session_mode` values of Gantry the bench can measure. Adding a mode is one
/// line here: it becomes a valid `--modes` value and its name goes into the
/// generated configuration unchanged.
/// `shared+limit` and `shared+redis-limit` are `shared` with one rate-limit rule
/// every call passes (counted in memory, or in a redis-server the bench starts): the
/// overhead of a limit check per call.
/// `per-session+warm` is `per-session` with backends started ahead (`pool.min_idle`):
/// with `--op session`, a new session's first call without waiting for a process.
/// `http+h2` is `http` over HTTP/2 with prior knowledge (`http.version = "2"`): one
/// multiplexed connection to the backend instead of one per call in flight.
/// `catalog` is three `shared` backends merged into one catalog (tools named
/// `b0__echo` …): with `--op list`, what `tools/list` costs from Gantry's cache.
/// `shared+jwt` is `shared` behind OAuth: every client has its own access token, an
/// ES256 JWT of an issuer the bench runs (`issuer.rs`), checked on every request.
/// `shared+tls` is `shared` with Gantry terminating TLS itself (`server.tls`, a
/// certificate the bench makes; `tls.rs`).
const GANTRY_MODES: &[&str] = &[
    "shared",
    "http",
    "http+h2",
    "per-session",
    "per-session+warm",
    "per-user",
    "shared+limit",
    "shared+redis-limit",
    "shared+jwt",
    "shared+tls",
    "catalog",
];

/// Warm backends kept by `per-session+warm` (`pool.min_idle`).
const WARM_IDLE: usize = 8;

/// Backends of the `catalog` mode.
const CATALOG_BACKENDS: usize = 3;

/// In `per-user` mode, how many client sessions share one principal (API key), and
/// so one backend process.
const SESSIONS_PER_USER: usize = 4;

/// The API key of bench principal `user` (only `per-user` rows authenticate).
fn api_key(user: usize) -> String {
    format!("gantry-bench-key-{user}")
}

/// The MCP protocol version the clients speak.
const PROTOCOL: &str = "2025-11-25";
/// The stateless era's version (`--era stateless`).
const STATELESS_PROTOCOL: &str = "2026-07-28";
/// What every stateless-era request carries in `params` (a trailing comma: more
/// members follow).
static STATELESS_META: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The `_meta` member of a stateless-era request's params (with its trailing comma),
/// declaring the capabilities of `--client-capabilities` (`{}` until it is set).
fn stateless_meta() -> &'static str {
    STATELESS_META.get_or_init(|| stateless_meta_with("{}"))
}

/// `--client-capabilities`: a JSON object, written compactly.
fn parse_capabilities(s: &str) -> std::result::Result<String, String> {
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Ok(v.to_string()),
        Ok(_) => Err("capabilities must be a JSON object".to_owned()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

fn stateless_meta_with(capabilities: &str) -> String {
    format!(
        r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{capabilities},"io.modelcontextprotocol/clientInfo":{{"name":"gantry-bench","version":"0"}}}},"#
    )
}
/// Hard bound of one client's loop, whatever the duration.
const MAX_CALLS_PER_CLIENT: u64 = 50_000_000;
/// A client gives up after this many failed calls (every one is counted and reported).
const MAX_ERRORS_PER_CLIENT: u64 = 20;
/// Sessions opened at once while setting up clients or idle sessions.
const SETUP_CONCURRENCY: usize = 16;
/// A started server must print its address within this.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server gets to exit after SIGTERM before it (and its tree) is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Lines of a server's stderr kept to explain a failure.
const LOG_TAIL: usize = 40;

/// Closed-loop benchmark of Gantry against a direct MCP server (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "gantry-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Mode>,
    /// The gantry executable. Default: `gantry` next to this binary.
    #[arg(long, value_name = "PATH")]
    gantry: Option<PathBuf>,
    /// Measured time per (target, N, P).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Load applied before measuring, per (target, N, P).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Numbers of concurrent clients (sessions, connections).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    clients: Vec<usize>,
    /// Echo payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,10240")]
    payloads: Vec<usize>,
    /// Targets, measured in this order for each (N, P): `direct` and Gantry session
    /// modes (`shared`, `per-session`, `per-user`).
    #[arg(long, value_delimiter = ',', default_value = "direct,shared,per-session,per-user", value_parser = parse_target)]
    modes: Vec<Target>,
    /// Idle sessions opened against Gantry in `shared` mode to measure memory per
    /// session; 0 skips the measurement.
    #[arg(long, default_value_t = 2000, value_name = "K")]
    idle_sessions: usize,
    /// Print the results as Markdown tables (for BENCHMARKS.md).
    #[arg(long)]
    markdown: bool,
    /// Send `Accept: application/json` only, so Gantry answers with plain JSON instead
    /// of an SSE stream (default: `application/json, text/event-stream`, as the
    /// specification requires of clients).
    #[arg(long)]
    json_only: bool,
    /// The `direct` server (and so the `http` backend and `relay-http`'s) answers a
    /// request as a one-event SSE stream when the client accepts it, as the official
    /// SDKs' servers do by default, instead of as JSON: `direct` then costs its
    /// clients the same SSE parsing Gantry's answers do, and `http` measures the
    /// backend path that reads SSE.
    #[arg(long)]
    direct_sse: bool,
    /// Deadline of one HTTP request.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// `RUST_LOG` given to gantry.
    #[arg(long, default_value = "info", value_name = "FILTER")]
    gantry_log: String,
    /// The stdio backend behind Gantry: `echo` (a minimal echo server built into this
    /// binary, the counterpart of the direct server) or `example` (the rmcp-based
    /// example server, `gantry example-server`).
    #[arg(long, default_value = "echo", value_parser = ["echo", "example"])]
    backend: String,
    /// What each client does in its loop: `echo` (a `tools/call` of `echo` with the
    /// payload) or `list` (`tools/list`, checked for the tools expected; the payload
    /// size is not used). With `list`, the `catalog` mode reports how many lists
    /// reached its backends. `session`: a new session each time (initialize,
    /// notifications/initialized, one `echo`, DELETE): calls/s is sessions/s and the
    /// latency the time to a new session's first answer; `per-session+warm` keeps
    /// backends started ahead (`pool.min_idle`).
    #[arg(long, default_value = "echo", value_parser = ["echo", "list", "session"])]
    op: String,
    /// The clients' protocol eras: `session` (initialize, then Mcp-Session-Id on every
    /// request; 2025-11-25) and/or `stateless` (2026-07-28: no initialize, `_meta` and
    /// the Mcp-Method / Mcp-Name headers on every request). With both, each target is
    /// measured in both eras back to back and stateless rows get their calls/s as a
    /// ratio to the same target's session-era row ("÷ session era").
    #[arg(long, default_value = "session", value_delimiter = ',', value_parser = ["session", "stateless"])]
    era: Vec<String>,
    /// The capabilities a stateless-era client declares in every request's `_meta`
    /// (a JSON object), e.g. `{"roots":{"listChanged":true},"sampling":{},"elicitation":{}}`
    /// as SDK clients send them.
    #[arg(long, default_value = "{}", value_name = "JSON", value_parser = parse_capabilities)]
    client_capabilities: String,
    /// Threads of the load generator (the clients run on them; 1: one core, a
    /// current-thread runtime). A row whose generator kept its threads ≥ 90 % busy
    /// gets no ratio: the generator, not the server, set its pace.
    #[arg(long, default_value_t = 1, value_name = "N")]
    generator_threads: usize,
    /// Pinned layout: the load generator on CPU 0, every server (Gantry and its
    /// backends, a relay, the direct server) on CPU 1, so that calls/s is what one
    /// core of server does and the generator cannot take from it. Needs 2 CPUs and
    /// `taskset` (util-linux).
    #[arg(long)]
    pin: bool,
    /// Rounds of the whole matrix (interleaved: every cell once per round); each row
    /// reports the round with the median calls/s and the range over all rounds.
    #[arg(long, default_value_t = 1, value_name = "N")]
    rounds: usize,
    /// Offered load instead of a closed loop at full speed: the clients together start
    /// this many calls per second (each client one every N / RATE seconds, the clients
    /// staggered; a call that ends late is followed at once by the next, with no
    /// catching up). CPU per call is then compared at equal load: at full speed a
    /// faster path shares each wake-up among more calls. A row that fell short of
    /// 95 % of the rate is marked so. Latency is then the service time of each call.
    #[arg(long, value_name = "CALLS_PER_S")]
    rate: Option<f64>,
    /// Internal: run the direct MCP server (prints its URL on stderr).
    #[arg(long, hide = true)]
    serve_direct: bool,
    /// Internal: `--serve-direct` answers with SSE when accepted (`--direct-sse`).
    #[arg(long, hide = true)]
    serve_sse: bool,
    /// Internal: run the minimal stdio echo MCP server.
    #[arg(long, hide = true)]
    serve_stdio_echo: bool,
    /// Internal: run a relay (`stdio`, `per-session`, `http`; see relay.rs).
    #[arg(long, hide = true, value_name = "KIND")]
    serve_relay: Option<String>,
    /// Internal: the HTTP backend of `--serve-relay http`.
    #[arg(long, hide = true, value_name = "URL")]
    relay_to: Option<String>,
}

/// Modes other than the closed-loop matrix.
#[derive(clap::Subcommand, Debug)]
enum Mode {
    /// Long-running mixed load against Gantry (per-session stdio backends, session
    /// churn, slow / cancelled / failing calls), sampling memory, file descriptors and
    /// processes; fails if they grow or if any call fails unexpectedly.
    Soak(soak::SoakArgs),
}

/// What a measurement runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    /// The in-binary minimal MCP server, no gateway.
    Direct,
    /// Gantry with the example server over stdio in this `session_mode`.
    Gantry(&'static str),
    /// The floor of one backend hop: a relay that does only what cannot be avoided
    /// (see relay.rs), in front of the same echo backend as that Gantry mode.
    Relay(&'static str),
}

/// The relays (`relay-<mode>`): the Gantry mode each is the floor of, and the kind
/// `--serve-relay` takes.
const RELAYS: &[(&str, &str, &str)] = &[
    ("relay", "shared", "stdio"),
    ("relay-per-session", "per-session", "per-session"),
    ("relay-http", "http", "http"),
];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Gantry(mode) | Target::Relay(mode) => mode,
        }
    }
}

fn parse_target(s: &str) -> Result<Target, String> {
    if s == "direct" {
        return Ok(Target::Direct);
    }
    if let Some((name, ..)) = RELAYS.iter().find(|r| r.0 == s) {
        return Ok(Target::Relay(name));
    }
    GANTRY_MODES
        .iter()
        .find(|m| **m == s)
        .map(|m| Target::Gantry(m))
        .ok_or_else(|| {
            let relays: Vec<&str> = RELAYS.iter().map(|r| r.0).collect();
            format!(
                "`{s}` is not one of: direct, {}, {}",
                GANTRY_MODES.join(", "),
                relays.join(", ")
            )
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.serve_stdio_echo {
        return match stdio_echo::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gantry-bench stdio echo server: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(kind) = &cli.serve_relay {
        return match relay::serve(kind, cli.relay_to.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gantry-bench relay: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if cli.serve_direct {
        return match direct::serve(cli.serve_sse) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gantry-bench direct server: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // Orphans of the servers we start (a backend whose gantry died) are re-parented
    // to us, so the final sweep finds them. Best effort.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let threads = cli.generator_threads.max(1);
    if cli.pin {
        if let Err(e) = pin::generator() {
            eprintln!("gantry-bench: --pin: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let _ = STATELESS_META.set(stateless_meta_with(&cli.client_capabilities));
    let soak = matches!(cli.command, Some(Mode::Soak(_)));
    let built = if soak {
        // The soak mixes many kinds of load; it keeps the default runtime.
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    let rt = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gantry-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(async {
        tokio::select! {
            r = async {
                match cli.command {
                    Some(Mode::Soak(args)) => soak::run(args).await,
                    None => run(cli).await,
                }
            } => r,
            s = stop_signal() => Err(anyhow!("{s} received; stopped")),
        }
    });
    // Dropping the runtime aborts the client tasks; the servers were killed when
    // `run` returned or was dropped. Sweep whatever is left anyway.
    drop(rt);
    proc::kill_descendants(std::process::id());
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("gantry-bench: some measurements failed (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gantry-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // No handlers: never resolve, the run ends by itself.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Everything one run needs besides the matrix.
struct Env {
    gantry: PathBuf,
    bench: PathBuf,
    dir: TempDir,
    clk_tck: u64,
    accept: &'static str,
    request_timeout: Duration,
    gantry_log: String,
    backend: String,
    /// `echo` or `list` (`--op`).
    op: String,
    /// The redis-server of `shared+redis-limit` (started when that target is measured).
    redis: Option<Redis>,
    /// The identity provider of `shared+jwt` (started when that target is measured).
    issuer: Option<issuer::Issuer>,
    /// Gantry's certificate in `shared+tls` rows (made when that target is measured).
    tls: Option<tls::Tls>,
    /// `--generator-threads`.
    generator_threads: usize,
    /// `--rate`: calls per second offered by all clients together.
    rate: Option<f64>,
    /// `--direct-sse`.
    direct_sse: bool,
}

impl Env {
    /// The arguments that start the direct server.
    fn direct_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from("--serve-direct")];
        if self.direct_sse {
            args.push("--serve-sse".into());
        }
        args
    }
}

/// A redis-server on a loopback port, killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = pin::server_command(Path::new("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("cannot run redis-server (apt-get install redis-server)")?;
        let r = Self { child, port };
        let end = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > end {
                bail!("redis-server did not listen on {port}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(r)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the matrix and the idle-session measurement. `Ok(false)`: some cell failed.
async fn run(cli: Cli) -> Result<bool> {
    if cli.clients.is_empty() || cli.payloads.is_empty() || cli.modes.is_empty() {
        bail!("--clients, --payloads and --modes must each name at least one value");
    }
    if cli.clients.contains(&0) {
        bail!("--clients: every value must be at least 1");
    }
    if cli.duration.is_zero() {
        bail!("--duration must be positive");
    }
    if cli.era.is_empty() {
        bail!("--era must name at least one era");
    }
    if let Some(rate) = cli.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of calls per second, not {rate}");
        }
    }
    if cli.op == "session" && cli.era.iter().any(|e| e == "stateless") {
        bail!("--op session measures session creation: the stateless era has none");
    }
    if cli.op != "list" && cli.modes.contains(&Target::Gantry("catalog")) {
        bail!("--modes catalog measures tools/list: use it with --op list");
    }
    let bench = std::env::current_exe().context("cannot locate the gantry-bench executable")?;
    let gantry = match &cli.gantry {
        Some(p) => p.clone(),
        None => bench
            .parent()
            .map(|d| d.join("gantry"))
            .context("the bench executable has no directory")?,
    };
    let needs_gantry =
        cli.idle_sessions > 0 || cli.modes.iter().any(|t| matches!(t, Target::Gantry(_)));
    if needs_gantry && !gantry.is_file() {
        bail!(
            "{} does not exist: build it with `cargo build --profile dist --workspace --bins` (or --release) or pass --gantry PATH",
            gantry.display()
        );
    }
    let gantry = gantry.canonicalize().unwrap_or(gantry);
    let dir = TempDir::new()?;
    let tls = if cli.modes.contains(&Target::Gantry("shared+tls")) {
        Some(tls::Tls::make(&dir.0)?)
    } else {
        None
    };
    let env = Env {
        gantry,
        bench,
        dir,
        clk_tck: clock_ticks(),
        accept: if cli.json_only {
            "application/json"
        } else {
            "application/json, text/event-stream"
        },
        request_timeout: cli.request_timeout,
        gantry_log: cli.gantry_log.clone(),
        backend: cli.backend.clone(),
        op: cli.op.clone(),
        redis: if cli.modes.contains(&Target::Gantry("shared+redis-limit")) {
            Some(Redis::start()?)
        } else {
            None
        },
        issuer: if cli.modes.contains(&Target::Gantry("shared+jwt")) {
            Some(issuer::Issuer::start().await?)
        } else {
            None
        },
        tls,
        generator_threads: cli.generator_threads.max(1),
        rate: cli.rate,
        direct_sse: cli.direct_sse,
    };
    let mut eras: Vec<bool> = cli.era.iter().map(|e| e == "stateless").collect();
    eras.dedup();
    // A target's eras are measured back to back: their ratio sees the same host.
    let mut cells: Vec<(usize, usize, Target, bool)> = Vec::new();
    for &n in &cli.clients {
        for &p in &cli.payloads {
            for &t in &cli.modes {
                for &stateless in &eras {
                    cells.push((n, p, t, stateless));
                }
            }
        }
    }
    let per_cell = cli.warmup + cli.duration;
    eprintln!(
        "gantry-bench: {} measurements of {} + {} warm-up; gantry {}; CLK_TCK {}; {} CPUs; Accept: {}",
        cells.len(),
        humantime::format_duration(cli.duration),
        humantime::format_duration(cli.warmup),
        env.gantry.display(),
        env.clk_tck,
        pin::machine_cpus(),
        env.accept,
    );
    eprintln!(
        "gantry-bench: at least {} of load in total",
        humantime::format_duration(per_cell.mul_f64(cells.len() as f64))
    );
    let rounds = cli.rounds.max(1);
    let mut by_cell: Vec<Vec<CellResult>> = (0..cells.len()).map(|_| Vec::new()).collect();
    for (step, i) in (0..rounds).flat_map(|_| 0..cells.len()).enumerate() {
        let Some(&(n, p, target, stateless)) = cells.get(i) else {
            continue;
        };
        eprint!(
            "[{}/{}] {:<11} {:<9} N={n:<4} P={p:<6} ",
            step + 1,
            cells.len() * rounds,
            target.name(),
            era_name(stateless),
        );
        let r = measure(&env, target, n, p, stateless, cli.warmup, cli.duration).await;
        match &r.failed {
            None => eprintln!(
                "{:>8.0} calls/s  p50 {} ms  p99 {} ms  errors {}  (setup {:.2} s, stop {:.2} s)",
                r.rate(),
                fmt_ms(r.p50_us),
                fmt_ms(r.p99_us),
                r.errors,
                r.setup.as_secs_f64(),
                r.stop.as_secs_f64(),
            ),
            Some(why) => eprintln!("FAILED: {why}"),
        }
        if let Some(n) = r.backend_lists {
            eprintln!(
                "    its {CATALOG_BACKENDS} backends answered {n} tools/list in all (Gantry answered {})",
                r.calls
            );
        }
        if let Some(e) = &r.first_error {
            eprintln!("    first error: {e}");
        }
        if let Some(w) = &r.first_warning {
            eprintln!("    server logged {} warning(s); first: {w}", r.warnings);
        }
        if let Some(c) = by_cell.get_mut(i) {
            c.push(r);
        }
    }
    let paired: Vec<Option<Paired>> = (0..cells.len())
        .map(|i| paired_p50(&cells, &by_cell, i))
        .collect();
    let results: Vec<CellResult> = by_cell
        .into_iter()
        .zip(paired)
        .filter_map(|(rounds, paired)| {
            let mut r = median_round(rounds)?;
            r.paired_p50 = paired;
            Some(r)
        })
        .collect();
    let idle = if cli.idle_sessions > 0 {
        eprintln!(
            "idle sessions: opening {} against gantry (shared)",
            cli.idle_sessions
        );
        match idle_sessions(&env, cli.idle_sessions).await {
            Ok(r) => Some(Ok(r)),
            Err(e) => {
                eprintln!("idle sessions FAILED: {e:#}");
                Some(Err(format!("{e:#}")))
            }
        }
    } else {
        None
    };
    print!("{}", report(&cli, &env, &results, idle.as_ref()));
    let ok = results.iter().all(|r| r.failed.is_none() && r.errors == 0)
        && idle.as_ref().is_none_or(|r| r.is_ok());
    Ok(ok)
}

// ---------------------------------------------------------------------------------
// One measurement
// ---------------------------------------------------------------------------------

/// The outcome of one (target, N, P).
struct CellResult {
    target: Target,
    /// Its clients spoke the stateless era.
    stateless: bool,
    clients: usize,
    payload: usize,
    /// Calls completed (and verified) inside the measured window.
    calls: u64,
    /// Calls that failed or were answered wrongly, at any time.
    errors: u64,
    first_error: Option<String>,
    window: Duration,
    p50_us: u64,
    p99_us: u64,
    /// Server process tree CPU time over the window, in µs.
    server_cpu_us: Option<f64>,
    /// CPU time of the server process alone (gantry without its backends), in µs.
    root_cpu_us: Option<f64>,
    /// This process's CPU time over the window, in µs (the load generator).
    bench_cpu_us: Option<f64>,
    /// Server process tree RSS at the end of the window, in KiB.
    rss_kib: u64,
    procs: usize,
    setup: Duration,
    /// Time the server took to exit after SIGTERM.
    stop: Duration,
    warnings: u64,
    first_warning: Option<String>,
    failed: Option<String>,
    /// `catalog` mode: `tools/list` requests its backends answered during the cell
    /// (set-up and warm-up included).
    backend_lists: Option<u64>,
    /// `--rounds` > 1: the lowest and highest calls/s over the rounds.
    range: Option<(f64, f64)>,
    /// `--rounds` > 1: its p50 ÷ `direct`'s p50, round by round.
    paired_p50: Option<Paired>,
}

/// A ratio taken within each round (a row against `direct` measured minutes apart
/// in the same round, not against `direct`'s median round): its median and range.
#[derive(Clone, Copy)]
struct Paired {
    median: f64,
    lo: f64,
    hi: f64,
}

/// Cell `i`'s p50 ÷ `direct`'s at the same N, P and era, round by round (rounds in
/// which either failed left out); `None` for `direct` itself, with one round, or
/// with no `direct` cell.
fn paired_p50(
    cells: &[(usize, usize, Target, bool)],
    by_cell: &[Vec<CellResult>],
    i: usize,
) -> Option<Paired> {
    let &(n, p, target, stateless) = cells.get(i)?;
    if target == Target::Direct {
        return None;
    }
    let j = cells
        .iter()
        .position(|&(dn, dp, t, ds)| (dn, dp, t, ds) == (n, p, Target::Direct, stateless))?;
    let ok = |r: &&CellResult| r.failed.is_none() && r.p50_us > 0;
    let mut ratios: Vec<f64> = by_cell
        .get(i)?
        .iter()
        .zip(by_cell.get(j)?)
        .filter(|(a, b)| ok(a) && ok(b))
        .map(|(a, b)| a.p50_us as f64 / b.p50_us as f64)
        .collect();
    if ratios.len() < 2 {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(Paired {
        median: *ratios.get(ratios.len() / 2)?,
        lo: *ratios.first()?,
        hi: *ratios.last()?,
    })
}

impl CellResult {
    fn empty(target: Target, stateless: bool, clients: usize, payload: usize) -> Self {
        Self {
            target,
            stateless,
            clients,
            payload,
            calls: 0,
            errors: 0,
            first_error: None,
            window: Duration::ZERO,
            p50_us: 0,
            p99_us: 0,
            server_cpu_us: None,
            root_cpu_us: None,
            bench_cpu_us: None,
            rss_kib: 0,
            procs: 0,
            setup: Duration::ZERO,
            stop: Duration::ZERO,
            warnings: 0,
            first_warning: None,
            failed: None,
            backend_lists: None,
            range: None,
            paired_p50: None,
        }
    }

    fn rate(&self) -> f64 {
        let s = self.window.as_secs_f64();
        if s > 0.0 {
            self.calls as f64 / s
        } else {
            0.0
        }
    }

    /// The share of its threads the load generator kept busy over the window.
    fn generator_busy(&self, threads: usize) -> Option<f64> {
        let window_us = self.window.as_secs_f64() * 1e6 * threads.max(1) as f64;
        self.bench_cpu_us
            .filter(|_| window_us > 0.0)
            .map(|c| c / window_us)
    }

    /// Whether the generator, not the server, set this row's pace.
    fn generator_bound(&self, threads: usize) -> bool {
        self.generator_busy(threads)
            .is_some_and(|b| b >= GENERATOR_SATURATED)
    }

    fn per_call(&self, total_us: Option<f64>) -> Option<f64> {
        total_us
            .filter(|_| self.calls > 0)
            .map(|t| t / self.calls as f64)
    }
}

/// `session` or `stateless`.
fn era_name(stateless: bool) -> &'static str {
    if stateless {
        "stateless"
    } else {
        "session"
    }
}

/// The round of one cell with the median calls/s (a failed round counts as the
/// slowest), carrying the range of calls/s over all its rounds.
fn median_round(mut rounds: Vec<CellResult>) -> Option<CellResult> {
    let rate = |r: &CellResult| if r.failed.is_some() { -1.0 } else { r.rate() };
    rounds.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let range = (
        rounds.first().map_or(0.0, rate).max(0.0),
        rounds.last().map_or(0.0, rate).max(0.0),
    );
    let count = rounds.len();
    let errors: u64 = rounds.iter().map(|r| r.errors).sum();
    let mut median = rounds.into_iter().nth(count / 2)?;
    median.errors = errors;
    if count > 1 {
        median.range = Some(range);
    }
    Some(median)
}

async fn measure(
    env: &Env,
    target: Target,
    n: usize,
    p: usize,
    stateless: bool,
    warmup: Duration,
    duration: Duration,
) -> CellResult {
    let mut cell = CellResult::empty(target, stateless, n, p);
    let mut server = match start_target(env, target, n + 16).await {
        Ok(s) => s,
        Err(e) => {
            cell.failed = Some(format!("{e:#}"));
            return cell;
        }
    };
    if let Err(e) = load(env, &server, &mut cell, warmup, duration).await {
        cell.failed = Some(format!("{e:#}"));
    }
    let stopping = Instant::now();
    let stop = server.stop().await;
    cell.stop = stopping.elapsed();
    let (warnings, first) = server.warnings();
    cell.warnings = warnings;
    cell.first_warning = first;
    if let Err(e) = stop {
        cell.failed.get_or_insert_with(|| format!("{e:#}"));
    }
    if target == Target::Gantry("catalog") {
        cell.backend_lists = Some(take_list_counts(env));
    }
    cell
}

async fn start_target(env: &Env, target: Target, max_sessions: usize) -> Result<Server> {
    match target {
        Target::Direct => {
            Server::start(
                "direct",
                &env.bench,
                &env.direct_args(),
                &[],
                "direct listening on ",
                true,
            )
            .await
        }
        Target::Gantry(mode) => start_gantry(env, mode, max_sessions).await,
        Target::Relay(name) => start_relay(env, name).await,
    }
}

async fn start_relay(env: &Env, name: &str) -> Result<Server> {
    let kind = RELAYS.iter().find(|r| r.0 == name).map_or("stdio", |r| r.2);
    let mut args: Vec<OsString> = vec!["--serve-relay".into(), kind.into()];
    // `relay-http`: the very server `direct` measures behind it, as for `http`.
    let backend = if kind == "http" {
        let b = Server::start(
            "direct (relay backend)",
            &env.bench,
            &env.direct_args(),
            &[],
            "direct listening on ",
            true,
        )
        .await?;
        args.extend(["--relay-to".into(), b.url.clone().into()]);
        Some(b)
    } else {
        None
    };
    Server::start(name, &env.bench, &args, &[], "relay listening on ", true)
        .await
        .map(|mut s| {
            s.companion = backend.map(Box::new);
            s
        })
}

async fn start_gantry(env: &Env, mode: &str, max_sessions: usize) -> Result<Server> {
    // `http`: the very server `direct` measures, as Gantry's HTTP backend.
    let backend = if mode == "http" || mode == "http+h2" {
        Some(
            Server::start(
                "direct (http backend)",
                &env.bench,
                &env.direct_args(),
                &[],
                "direct listening on ",
                true,
            )
            .await?,
        )
    } else {
        None
    };
    let mut config = gantry_config(env, mode, max_sessions.max(64));
    if let Some(b) = &backend {
        let url = toml::Value::String(b.url.clone());
        let version = if mode == "http+h2" {
            ", version = \"2\""
        } else {
            ""
        };
        config = config.replace(
            "session_mode = \"http\"\npool = { max_connections = 0 }\n",
            &format!("session_mode = \"shared\"\nhttp = {{ url = {url}{version} }}\n# "),
        );
    }
    let path = env.dir.0.join(format!("gantry-{mode}.toml"));
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))?;
    Server::start(
        &format!("gantry ({mode})"),
        &env.gantry,
        &[
            "--config".into(),
            path.into_os_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &[("RUST_LOG", env.gantry_log.as_str())],
        "gantry listening on ",
        false,
    )
    .await
    .map(|mut s| {
        s.companion = backend.map(Box::new);
        s
    })
}

/// The configuration of Gantry in `mode` in front of the chosen stdio backend.
fn gantry_config(env: &Env, mode: &str, max_sessions: usize) -> String {
    let (command, arg) = if env.backend == "example" {
        (&env.gantry, "example-server")
    } else {
        (&env.bench, "--serve-stdio-echo")
    };
    let command = toml::Value::String(command.display().to_string());
    let arg = toml::Value::String(arg.to_owned());
    let keys = api_key_entries(mode, max_sessions);
    // One rule every call passes: what a limit check costs, not what it refuses.
    let rule = "[[limits.rules]]\nname = \"bench\"\nrate = \"1000000/s\"\nkey = [\"principal\", \"tool\"]\nmethods = [\"tools/call\"]\n";
    let limits = match (mode.split_once('+').map(|(_, l)| l), &env.redis) {
        (Some("limit"), _) => rule.to_owned(),
        (Some("redis-limit"), Some(r)) => format!(
            "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"redis://127.0.0.1:{}\"\n{rule}",
            r.port
        ),
        (Some("jwt"), _) => env
            .issuer
            .as_ref()
            .map(issuer::Issuer::gantry_config)
            .unwrap_or_default(),
        _ => String::new(),
    };
    if mode == "catalog" {
        let mut out = format!(
            "# Generated by gantry-bench.\n\
             [server]\n\
             listen = \"127.0.0.1:0\"\n\
             max_sessions = {max_sessions}\n\
             max_sessions_per_client = 0\n\
             session_rate_per_client = 0\n"
        );
        for b in 0..CATALOG_BACKENDS {
            let count = toml::Value::String(list_count_file(env, b).display().to_string());
            let _ = write!(
                out,
                "\n[[backends]]\nname = \"b{b}\"\nsession_mode = \"shared\"\n\
                 stdio = {{ command = {command}, args = [{arg}], env = {{ BENCH_LIST_COUNT = {count} }} }}\n"
            );
        }
        return out;
    }
    // Backends started ahead of the sessions that will take them.
    let pool = if mode.ends_with("+warm") {
        format!("pool = {{ max_connections = 0, min_idle = {WARM_IDLE} }}")
    } else {
        "pool = { max_connections = 0 }".to_owned()
    };
    let tls = match (&env.tls, mode) {
        (Some(t), "shared+tls") => t.server_line(),
        _ => String::new(),
    };
    let mode = mode.split_once('+').map_or(mode, |(m, _)| m);
    let mode = toml::Value::String(mode.to_owned());
    format!(
        "# Generated by gantry-bench.\n\
         [server]\n\
         listen = \"127.0.0.1:0\"\n\
         max_sessions = {max_sessions}\n\
         # One load generator is one client: no per-client quota, no process cap.\n\
         max_sessions_per_client = 0\n\
         session_rate_per_client = 0\n\
         {tls}\
         \n\
         [[backends]]\n\
         name = \"echo\"\n\
         session_mode = {mode}\n\
         {pool}\n\
         stdio = {{ command = {command}, args = [{arg}] }}\n{keys}\n{limits}"
    )
}

/// Where backend `b` of the `catalog` mode counts the lists it answers.
fn list_count_file(env: &Env, b: usize) -> PathBuf {
    env.dir.0.join(format!("lists-b{b}"))
}

/// Lists the `catalog` backends answered (and forgets them, for the next cell).
fn take_list_counts(env: &Env) -> u64 {
    (0..CATALOG_BACKENDS)
        .map(|b| {
            let f = list_count_file(env, b);
            let n = std::fs::read_to_string(&f).map_or(0, |t| t.lines().count() as u64);
            let _ = std::fs::remove_file(&f);
            n
        })
        .sum()
}

/// `[[auth.api_keys]]` entries for the principals of `max_sessions` clients, when
/// `mode` is `per-user`; nothing otherwise.
fn api_key_entries(mode: &str, max_sessions: usize) -> String {
    use sha2::Digest;
    use std::fmt::Write;
    let mut out = String::new();
    if mode != "per-user" {
        return out;
    }
    for user in 0..max_sessions.div_ceil(SESSIONS_PER_USER) {
        let digest = sha2::Sha256::digest(api_key(user).as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let _ = write!(
            out,
            "\n[[auth.api_keys]]\nprincipal = \"bench-user-{user}\"\nsha256 = \"{hex}\"\n"
        );
    }
    out
}

/// What a client does in its loop (`--op`).
#[derive(Debug, Clone, Copy)]
enum Op {
    Echo,
    /// A new session per loop: initialize, one `echo`, DELETE.
    Session,
    /// `tools/list`, which must name this many tools.
    List {
        tools: usize,
    },
}

impl Op {
    fn of(env: &Env, target: Target) -> Self {
        match (env.op.as_str(), target) {
            ("list", Target::Gantry("catalog")) => Op::List {
                tools: CATALOG_BACKENDS,
            },
            ("list", _) => Op::List { tools: 1 },
            ("session", _) => Op::Session,
            _ => Op::Echo,
        }
    }
}

/// What one client brought back.
#[derive(Default)]
struct ClientOutcome {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

/// Opens `cell.clients` sessions, runs the closed loop, fills `cell`.
async fn load(
    env: &Env,
    server: &Server,
    cell: &mut CellResult,
    warmup: Duration,
    duration: Duration,
) -> Result<()> {
    let setup_started = Instant::now();
    let clients = open_clients(env, &server.url, cell.clients, cell.target, cell.stateless).await?;
    cell.setup = setup_started.elapsed();
    // One call each before the clock starts: connections are warm and (per-session)
    // every backend has answered once.
    {
        use futures::StreamExt;
        let size = cell.payload;
        let op = Op::of(env, cell.target);
        futures::stream::iter(&clients)
            .map(|c| async move {
                c.call(op, 0, size)
                    .await
                    .with_context(|| format!("client {}: first call", c.index))
            })
            .buffer_unordered(4 * SETUP_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()?;
    }
    let start = tokio::time::Instant::now();
    let window_start = start + warmup;
    let window_end = window_start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    let op = Op::of(env, cell.target);
    let n = cell.clients;
    for (i, c) in clients.into_iter().enumerate() {
        let size = cell.payload;
        let pace = env.rate.map(|rate| Pace::of(rate, n, i, start));
        tasks.spawn(async move { c.run_loop(op, size, pace, window_start, window_end).await });
    }
    tokio::time::sleep_until(window_start).await;
    let companion = server.companion.as_ref().map(|c| c.pid);
    let cpu0 = proc::cpu_sample(server.pid, true);
    let side0 = companion.map(|p| proc::cpu_sample(p, true));
    let self0 = proc::cpu_sample(std::process::id(), false);
    tokio::time::sleep_until(window_end).await;
    let cpu1 = proc::cpu_sample(server.pid, true);
    let side1 = companion.map(|p| proc::cpu_sample(p, true));
    let self1 = proc::cpu_sample(std::process::id(), false);
    // Calls are counted by their completion time inside [window_start, window_end).
    cell.window = duration;
    let mem = proc::tree_memory(server.pid);
    let side_mem = companion.map(proc::tree_memory);
    cell.rss_kib = mem.rss_kib + side_mem.as_ref().map_or(0, |m| m.rss_kib);
    cell.procs = mem.procs + side_mem.as_ref().map_or(0, |m| m.procs);
    let tick_ns = 1_000_000_000 / env.clk_tck;
    let (mut tree_ns, root_ns) = proc::cpu_delta(&cpu0, &cpu1, tick_ns);
    if let (Some(a), Some(b)) = (&side0, &side1) {
        tree_ns += proc::cpu_delta(a, b, tick_ns).0;
    }
    cell.server_cpu_us = Some(tree_ns as f64 / 1000.0);
    cell.root_cpu_us = Some(root_ns as f64 / 1000.0);
    cell.bench_cpu_us = Some(proc::cpu_delta(&self0, &self1, tick_ns).0 as f64 / 1000.0);
    // Every client stops at `window_end`, after at most one more call.
    let deadline = env.request_timeout + Duration::from_secs(5);
    let mut latencies = Vec::new();
    let joined = tokio::time::timeout(deadline, async {
        while let Some(r) = tasks.join_next().await {
            let o = r.unwrap_or_else(|e| ClientOutcome {
                errors: 1,
                first_error: Some(format!("client task failed: {e}")),
                ..ClientOutcome::default()
            });
            latencies.extend(o.latencies_us);
            cell.errors += o.errors;
            if cell.first_error.is_none() {
                cell.first_error = o.first_error;
            }
        }
    })
    .await;
    if joined.is_err() {
        bail!("clients did not stop within {deadline:?} after the window");
    }
    latencies.sort_unstable();
    cell.calls = latencies.len() as u64;
    cell.p50_us = percentile(&latencies, 50.0);
    cell.p99_us = percentile(&latencies, 99.0);
    Ok(())
}

/// One client's schedule under `--rate`: a call every `every`, the first at `at`.
#[derive(Debug, Clone, Copy)]
struct Pace {
    at: tokio::time::Instant,
    every: Duration,
}

impl Pace {
    /// Client `index` of `clients` sharing `rate` calls/s, staggered from `start` so
    /// that the clients' calls do not start together.
    fn of(rate: f64, clients: usize, index: usize, start: tokio::time::Instant) -> Self {
        let every = Duration::from_secs_f64(clients as f64 / rate);
        let offset = every.mul_f64(index as f64 / clients as f64);
        Self {
            at: start + offset,
            every,
        }
    }

    /// When the next call starts, given the time now: on schedule, or at once when
    /// behind it (a late client does not catch up with a burst).
    fn next(&mut self, now: tokio::time::Instant) -> tokio::time::Instant {
        let at = self.at.max(now);
        self.at = at + self.every;
        at
    }
}

/// Under `--rate`, the share of the offered calls/s a row must reach to count as
/// having kept it.
const RATE_KEPT: f64 = 0.95;

fn percentile(sorted: &[u32], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted.get(i).copied().map_or(0, u64::from)
}

/// Opens `n` sessions, `SETUP_CONCURRENCY` at a time; fails on the first that fails.
/// In `per-user` rows every `SESSIONS_PER_USER` consecutive clients share an API key;
/// in `shared+jwt` rows each client has an access token of its own.
async fn open_clients(
    env: &Env,
    url: &str,
    n: usize,
    target: Target,
    stateless: bool,
) -> Result<Vec<McpClient>> {
    use futures::StreamExt;
    let mut opened: Vec<McpClient> = futures::stream::iter(0..n)
        .map(|i| async move {
            let mut c = McpClient::new_lean(i, url, env.accept, env.request_timeout)?;
            c.api_key = match (target, &env.issuer) {
                (Target::Gantry("per-user"), _) => Some(api_key(i / SESSIONS_PER_USER)),
                (Target::Gantry("shared+jwt"), Some(issuer)) => {
                    Some(issuer.token(&format!("bench-user-{i}"))?)
                }
                _ => None,
            };
            c.stateless = stateless;
            if !c.stateless {
                c.initialize()
                    .await
                    .with_context(|| format!("client {i}: initialize"))?;
            }
            Ok::<_, anyhow::Error>(c)
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    opened.sort_by_key(|c| c.index);
    Ok(opened)
}

/// The payload of call `seq` of client `client`: exactly `size` printable ASCII bytes
/// that need no JSON escaping and differ between clients and calls, so a response
/// delivered to the wrong client or call cannot pass for the right one.
/// After the client and call, the filler cycles through these (whole slices at a
/// time: at 10 KB a byte at a time cost the generator more than the server's call).
fn payload(size: usize, client: usize, seq: u64) -> String {
    const FILL: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = format!("c{client}s{seq}:");
    s.truncate(size);
    s.reserve(size - s.len());
    while s.len() < size {
        let n = (size - s.len()).min(FILL.len());
        s.push_str(FILL.get(..n).unwrap_or_default());
    }
    s
}

// ---------------------------------------------------------------------------------
// The MCP client
// ---------------------------------------------------------------------------------

/// One client: its own session and its own keep-alive connection.
struct McpClient {
    index: usize,
    http: reqwest::Client,
    url: String,
    accept: &'static str,
    session: String,
    /// Sent as a bearer token when set.
    api_key: Option<String>,
    /// The measuring path's connection (raw hyper); `None`: reqwest (soak, idle).
    lean: Option<lean::LeanConn>,
    /// 2026-07-28 era: no session; `_meta` and Mcp-* headers on every request.
    stateless: bool,
}

/// The part of a JSON-RPC message the bench checks.
#[derive(Deserialize)]
struct Reply {
    id: Option<Value>,
    method: Option<String>,
    result: Option<CallResult>,
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallResult {
    content: Vec<Content>,
    #[serde(default)]
    is_error: bool,
}

#[derive(Deserialize)]
struct Content {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

impl McpClient {
    fn new(index: usize, url: &str, accept: &'static str, timeout: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .tcp_nodelay(true)
            .no_proxy()
            .timeout(timeout)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            index,
            http,
            url: url.to_owned(),
            accept,
            session: String::new(),
            api_key: None,
            lean: None,
            stateless: false,
        })
    }

    /// A client whose JSON-RPC messages go over one raw hyper connection.
    fn new_lean(index: usize, url: &str, accept: &'static str, timeout: Duration) -> Result<Self> {
        let mut c = Self::new(index, url, accept, timeout)?;
        c.lean = Some(lean::LeanConn::new(url, timeout)?);
        Ok(c)
    }

    /// POSTs one JSON-RPC message; returns status, session header and the messages
    /// of the body (one for JSON, every non-empty `data` for SSE).
    async fn post(&self, body: String) -> Result<(u16, Option<String>, Vec<String>)> {
        self.post_named(body, None).await
    }

    /// [`Self::post`] of a request with this method and name (the stateless era's
    /// Mcp-Method / Mcp-Name headers).
    async fn post_named(
        &self,
        body: String,
        named: Option<(&str, Option<&str>)>,
    ) -> Result<(u16, Option<String>, Vec<String>)> {
        let Some(conn) = &self.lean else {
            return Self::read(self.send(body).await?).await;
        };
        let bearer = self.api_key.as_ref().map(|k| format!("Bearer {k}"));
        let mut headers: Vec<(&str, &str)> = vec![("accept", self.accept)];
        if let Some(b) = &bearer {
            headers.push(("authorization", b));
        }
        if !self.session.is_empty() {
            headers.push(("mcp-session-id", &self.session));
            headers.push(("mcp-protocol-version", PROTOCOL));
        }
        if self.stateless {
            headers.push(("mcp-protocol-version", STATELESS_PROTOCOL));
            if let Some((method, name)) = named {
                headers.push(("mcp-method", method));
                if let Some(n) = name {
                    headers.push(("mcp-name", n));
                }
            }
        }
        let a = conn.post(&headers, body).await?;
        Ok((a.status, a.session, Self::messages(a.sse, &a.body)?))
    }

    /// The JSON-RPC messages of a body: one for JSON, every non-empty `data` for SSE.
    fn messages(sse: bool, bytes: &[u8]) -> Result<Vec<String>> {
        Ok(if sse {
            let mut parser = gantry::sse::Parser::new(64 << 20);
            parser
                .feed(bytes)
                .map_err(|e| anyhow!("bad SSE body: {e}"))?
                .into_iter()
                .map(|e| e.data)
                .filter(|d| !d.trim().is_empty())
                .collect()
        } else if bytes.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            vec![String::from_utf8(bytes.to_vec()).context("body is not UTF-8")?]
        })
    }

    /// POSTs one JSON-RPC message; returns once the response head has arrived.
    async fn send(&self, body: String) -> Result<reqwest::Response> {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", self.accept);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        if !self.session.is_empty() {
            rb = rb
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", PROTOCOL);
        }
        Ok(rb.body(body).send().await?)
    }

    /// Reads a response to its end: status, session header and the messages of the
    /// body (one for JSON, every non-empty `data` for SSE).
    async fn read(resp: reqwest::Response) -> Result<(u16, Option<String>, Vec<String>)> {
        let status = resp.status().as_u16();
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let bytes = resp.bytes().await?;
        Ok((status, session, Self::messages(sse, &bytes)?))
    }

    async fn initialize(&mut self) -> Result<()> {
        let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name":"gantry-bench","version": env!("CARGO_PKG_VERSION")}}});
        let (status, session, messages) = self.post(body.to_string()).await?;
        if status != 200 {
            bail!("initialize: HTTP {status}: {}", clip(&messages.join(" ")));
        }
        let answered = messages.iter().any(|m| {
            serde_json::from_str::<Value>(m).is_ok_and(|v| {
                v.get("id") == Some(&json!(0)) && v.pointer("/result/protocolVersion").is_some()
            })
        });
        if !answered {
            bail!("initialize: no result in {}", clip(&messages.join(" ")));
        }
        self.session = session.context("initialize: no Mcp-Session-Id header")?;
        let (status, _, _) = self
            .post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned())
            .await?;
        if status != 202 {
            bail!("notifications/initialized: HTTP {status}, expected 202");
        }
        Ok(())
    }

    /// Calls `echo` with `message` as JSON-RPC id `seq`; checks the answer exactly.
    async fn echo(&self, seq: u64, message: &str) -> Result<()> {
        let meta = if self.stateless { stateless_meta() } else { "" };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{seq},"method":"tools/call","params":{{{meta}"name":"echo","arguments":{{"message":"{message}"}}}}}}"#
        );
        let (status, _, messages) = self
            .post_named(body, Some(("tools/call", Some("echo"))))
            .await?;
        if status != 200 {
            bail!("call {seq}: HTTP {status}: {}", clip(&messages.join(" ")));
        }
        let want_id = Value::from(seq);
        let mut found = None;
        for m in &messages {
            let r: Reply = serde_json::from_str(m)
                .with_context(|| format!("call {seq}: not JSON-RPC: {}", clip(m)))?;
            if r.method.is_some() {
                continue; // a notification or request riding on the stream
            }
            if r.id.as_ref() != Some(&want_id) {
                bail!("call {seq}: response with id {:?}: {}", r.id, clip(m));
            }
            if let Some(e) = r.error {
                bail!("call {seq}: error {}", clip(&e.to_string()));
            }
            found = Some(r.result.with_context(|| format!("call {seq}: no result"))?);
        }
        let result = found.with_context(|| format!("call {seq}: no response in the body"))?;
        if result.is_error {
            bail!("call {seq}: the tool reported an error");
        }
        match result.content.as_slice() {
            [c] if c.kind == "text" && c.text.as_deref() == Some(message) => Ok(()),
            [c] if c.kind == "text" => bail!(
                "call {seq}: echo mismatch: sent {} bytes, got {} bytes: {}",
                message.len(),
                c.text.as_deref().map_or(0, str::len),
                clip(c.text.as_deref().unwrap_or_default())
            ),
            other => bail!(
                "call {seq}: {} content blocks, expected one text",
                other.len()
            ),
        }
    }

    /// One call of the loop: `echo` with call `seq`'s payload, or `tools/list`.
    async fn call(&self, op: Op, seq: u64, size: usize) -> Result<()> {
        match op {
            Op::Echo | Op::Session => self.echo(seq, &payload(size, self.index, seq)).await,
            Op::List { tools } => self.list(seq, tools).await,
        }
    }

    /// `tools/list` as JSON-RPC id `seq`; checks it names `tools` tools, each with
    /// an input schema.
    async fn list(&self, seq: u64, tools: usize) -> Result<()> {
        let body = if self.stateless {
            format!(
                r#"{{"jsonrpc":"2.0","id":{seq},"method":"tools/list","params":{{{}}}}}"#,
                stateless_meta().trim_end_matches(',')
            )
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{seq},"method":"tools/list"}}"#)
        };
        let (status, _, messages) = self.post_named(body, Some(("tools/list", None))).await?;
        if status != 200 {
            bail!("list {seq}: HTTP {status}: {}", clip(&messages.join(" ")));
        }
        let want_id = Value::from(seq);
        let answer = messages
            .iter()
            .filter_map(|m| serde_json::from_str::<Value>(m).ok())
            .find(|v| v.get("id") == Some(&want_id))
            .with_context(|| format!("list {seq}: no response in the body"))?;
        let listed = answer
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .with_context(|| format!("list {seq}: no tools in {}", clip(&answer.to_string())))?;
        if listed.len() != tools || listed.iter().any(|t| !t["inputSchema"].is_object()) {
            bail!(
                "list {seq}: {} tools, expected {tools}: {}",
                listed.len(),
                clip(&answer.to_string())
            );
        }
        Ok(())
    }

    /// `--op session`: a new session, its first call, its end (DELETE); the time
    /// from the initialize to the call's answer.
    async fn session_cycle(&mut self, seq: u64, size: usize) -> Result<Duration> {
        self.session.clear();
        let t0 = tokio::time::Instant::now();
        self.initialize().await?;
        self.echo(seq, &payload(size, self.index, seq)).await?;
        let first_answer = t0.elapsed();
        let session = std::mem::take(&mut self.session);
        let headers = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", PROTOCOL),
        ];
        let status = match &self.lean {
            Some(conn) => {
                conn.send(http::Method::DELETE, &headers, String::new())
                    .await?
                    .status
            }
            None => {
                let mut rb = self.http.delete(&self.url);
                for (k, v) in headers {
                    rb = rb.header(k, v);
                }
                rb.send().await?.status().as_u16()
            }
        };
        // 405: a server that does not let clients end sessions (allowed).
        if !(200..300).contains(&status) && status != 405 {
            bail!("DELETE of session {seq}: HTTP {status}");
        }
        Ok(first_answer)
    }

    /// The closed loop: call, check, record, until `end` (or the call bound).
    async fn run_loop(
        mut self,
        op: Op,
        size: usize,
        mut pace: Option<Pace>,
        window_start: tokio::time::Instant,
        end: tokio::time::Instant,
    ) -> ClientOutcome {
        let mut out = ClientOutcome {
            latencies_us: Vec::with_capacity(4096),
            ..ClientOutcome::default()
        };
        for seq in 1..=MAX_CALLS_PER_CLIENT {
            if let Some(p) = &mut pace {
                let at = p.next(tokio::time::Instant::now());
                if at >= end {
                    break;
                }
                tokio::time::sleep_until(at).await;
            }
            if tokio::time::Instant::now() >= end {
                break;
            }
            let t0 = tokio::time::Instant::now();
            let r = match op {
                Op::Session => self.session_cycle(seq, size).await,
                _ => self.call(op, seq, size).await.map(|()| t0.elapsed()),
            };
            let t1 = tokio::time::Instant::now();
            match r {
                // Calls completing inside the window count (closed loop, steady state).
                Ok(took) if t1 >= window_start && t1 < end => {
                    let us = took.as_micros();
                    out.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
                Ok(_) => {}
                Err(e) => {
                    out.errors += 1;
                    out.first_error
                        .get_or_insert_with(|| format!("client {}: {e:#}", self.index));
                    if out.errors >= MAX_ERRORS_PER_CLIENT {
                        break;
                    }
                }
            }
        }
        out
    }
}

fn clip(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", s.get(..end).unwrap_or_default(), s.len())
}

// ---------------------------------------------------------------------------------
// Idle sessions
// ---------------------------------------------------------------------------------

struct IdleResult {
    sessions: usize,
    before_kib: u64,
    after_kib: u64,
    open_time: Duration,
}

impl IdleResult {
    fn bytes_per_session(&self) -> f64 {
        (self.after_kib as f64 - self.before_kib as f64) * 1024.0 / self.sessions as f64
    }
}

/// Opens `k` sessions (initialize + initialized, nothing else) against Gantry in
/// `shared` mode and measures the growth of its process tree's RSS.
async fn idle_sessions(env: &Env, k: usize) -> Result<IdleResult> {
    use futures::StreamExt;
    let mut server = start_gantry(env, "shared", k + 64).await?;
    let outcome = async {
        // Warm up: the shared backend is started and has answered a call.
        let mut first = McpClient::new(0, &server.url, env.accept, env.request_timeout)?;
        first.initialize().await.context("first session")?;
        first
            .echo(1, &payload(100, 0, 1))
            .await
            .context("first call")?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = proc::tree_memory(server.pid).rss_kib;
        let started = Instant::now();
        // A few connections open all the sessions; the sessions then sit idle.
        let workers: Vec<McpClient> = (0..SETUP_CONCURRENCY)
            .map(|i| McpClient::new(i, &server.url, env.accept, env.request_timeout))
            .collect::<Result<_>>()?;
        let per_worker = k.div_ceil(SETUP_CONCURRENCY);
        let opened = futures::stream::iter(workers.into_iter().enumerate())
            .map(|(w, mut c)| async move {
                let count = per_worker.min(k.saturating_sub(w * per_worker));
                for _ in 0..count {
                    c.session.clear();
                    c.initialize().await?;
                }
                Ok::<usize, anyhow::Error>(count)
            })
            .buffer_unordered(SETUP_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .sum::<Result<usize>>()?;
        let open_time = started.elapsed();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = proc::tree_memory(server.pid).rss_kib;
        // The gateway still answers.
        first
            .echo(2, &payload(100, 0, 2))
            .await
            .context("call after opening the idle sessions")?;
        Ok::<_, anyhow::Error>(IdleResult {
            sessions: opened,
            before_kib: before,
            after_kib: after,
            open_time,
        })
    }
    .await;
    let stopped = server.stop().await;
    let r = outcome?;
    stopped?;
    Ok(r)
}

// ---------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------

/// A generator busier than this share of its threads saturated them.
const GENERATOR_SATURATED: f64 = 0.9;

fn fmt_ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

fn fmt_ratio(value: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 => {
            let r = value / b;
            match r {
                r if r >= 100.0 => format!(" ({r:.0}×)"),
                r if r >= 10.0 => format!(" ({r:.1}×)"),
                r if r >= 0.1 => format!(" ({r:.2}×)"),
                r => format!(" ({r:.3}×)"),
            }
        }
        _ => String::new(),
    }
}

fn report(
    cli: &Cli,
    env: &Env,
    results: &[CellResult],
    idle: Option<&Result<IdleResult, String>>,
) -> String {
    let both_eras = results.iter().any(|r| r.stateless) && results.iter().any(|r| !r.stateless);
    let mut headers = vec![
        "target",
        "N",
        "P (B)",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "CPU µs/call",
        "root proc µs/call",
        "RSS MiB",
        "procs",
        "bench CPU µs/call",
        "bench busy",
        "setup s",
        "errors",
    ];
    if both_eras {
        headers.insert(1, "era");
        headers.insert(5, "÷ session era");
    }
    let direct: HashMap<(usize, usize, bool), &CellResult> = results
        .iter()
        .filter(|r| r.target == Target::Direct && r.failed.is_none())
        .map(|r| ((r.clients, r.payload, r.stateless), r))
        .collect();
    // Each target's session-era rows, for the stateless rows' "÷ session era".
    let session_era: HashMap<(Target, usize, usize), &CellResult> = results
        .iter()
        .filter(|r| !r.stateless && r.failed.is_none())
        .map(|r| ((r.target, r.clients, r.payload), r))
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in results {
        let base = direct
            .get(&(r.clients, r.payload, r.stateless))
            .copied()
            .filter(|_| r.target != Target::Direct);
        let with_era = |mut row: Vec<String>, vs_session: String| {
            if both_eras {
                row.insert(1, era_name(r.stateless).to_owned());
                row.insert(5, vs_session);
            }
            row
        };
        if let Some(why) = &r.failed {
            let mut row = vec![
                r.target.name().to_owned(),
                r.clients.to_string(),
                r.payload.to_string(),
                format!("FAILED: {}", clip(why.lines().next().unwrap_or_default())),
            ];
            row.resize(headers.len() - if both_eras { 2 } else { 0 }, String::new());
            rows.push(with_era(row, String::new()));
            continue;
        }
        // Not when the generator set the pace of either row.
        let vs_session = session_era
            .get(&(r.target, r.clients, r.payload))
            .filter(|s| r.stateless && !s.generator_bound(env.generator_threads))
            .filter(|_| !r.generator_bound(env.generator_threads))
            .map_or_else(String::new, |s| format!("{:.2}", r.rate() / s.rate()));
        let cpu = r.per_call(r.server_cpu_us);
        let base_cpu = base.and_then(|b| b.per_call(b.server_cpu_us));
        // No ratio when the generator saturated, in this row or in its baseline.
        let threads = env.generator_threads;
        let gen_bound =
            r.generator_bound(threads) || base.is_some_and(|b| b.generator_bound(threads));
        let base = base.filter(|_| !gen_bound);
        let row = vec![
            r.target.name().to_owned(),
            r.clients.to_string(),
            r.payload.to_string(),
            format!(
                "{:.0}{}{}{}",
                r.rate(),
                if gen_bound {
                    " (generator-bound)".to_owned()
                } else {
                    fmt_ratio(r.rate(), base.map(CellResult::rate))
                },
                r.range
                    .map(|(lo, hi)| format!(" [{lo:.0}–{hi:.0}]"))
                    .unwrap_or_default(),
                if env.rate.is_some_and(|rate| r.rate() < RATE_KEPT * rate) {
                    " (below the offered rate)"
                } else {
                    ""
                }
            ),
            format!(
                "{}{}{}",
                fmt_ms(r.p50_us),
                fmt_ratio(r.p50_us as f64, base.map(|b| b.p50_us as f64)),
                r.paired_p50
                    .filter(|_| base.is_some())
                    .map(|q| format!(" {{{:.2}× [{:.2}–{:.2}]}}", q.median, q.lo, q.hi))
                    .unwrap_or_default()
            ),
            format!(
                "{}{}",
                fmt_ms(r.p99_us),
                fmt_ratio(r.p99_us as f64, base.map(|b| b.p99_us as f64))
            ),
            match cpu {
                Some(c) => format!("{c:.0}{}", fmt_ratio(c, base_cpu)),
                None => "n/a".into(),
            },
            // The gateway (or relay) process alone against `direct`'s whole CPU:
            // what the hop costs beside the backend it fronts.
            r.per_call(r.root_cpu_us).map_or_else(
                || "n/a".into(),
                |c| format!("{c:.0}{}", fmt_ratio(c, base_cpu)),
            ),
            format!(
                "{:.1}{}",
                r.rss_kib as f64 / 1024.0,
                fmt_ratio(r.rss_kib as f64, base.map(|b| b.rss_kib as f64))
            ),
            r.procs.to_string(),
            r.per_call(r.bench_cpu_us)
                .map_or_else(|| "n/a".into(), |c| format!("{c:.0}")),
            r.generator_busy(threads)
                .map_or_else(|| "n/a".into(), |b| format!("{:.0}%", b * 100.0)),
            format!("{:.2}", r.setup.as_secs_f64()),
            r.errors.to_string(),
        ];
        rows.push(with_era(row, vs_session));
    }
    let mut out = String::new();
    let about = format!(
        "{}{}{}{} s measured after {} s warm-up per row; {} CPUs; load generator on {} thread(s) (\"bench busy\": the share of them it kept busy; at ≥ {:.0} % the row is generator-bound and gets no ratios); CLK_TCK {}; Accept: {}; CPU and RSS are of the server process tree, \"root proc\" of the server process alone (gantry's supervisor and gateway without its backends; its ratio is to `direct`'s CPU per call); ratios are to `direct` at the same N and P{}",
        if cli.rounds > 1 {
            format!(
                "median of {} interleaved rounds (the round with the median calls/s; [range] of calls/s over the rounds; {{p50 ÷ direct's p50 in the same round: median [range] over the rounds}}); ",
                cli.rounds
            )
        } else {
            String::new()
        },
        if pin::pinned() {
            format!(
                "pinned: load generator on CPU {}, every server process tree on CPU {} (calls/s is one server core's); ",
                pin::GENERATOR_CPU,
                pin::SERVER_CPU
            )
        } else {
            String::new()
        },
        env.rate.map_or_else(String::new, |rate| format!(
            "offered load: {rate:.0} calls/s from all clients together, paced (not a closed loop at full speed; a row below {:.0} % of it is marked); ",
            RATE_KEPT * 100.0
        )),
        cli.duration.as_secs_f64(),
        cli.warmup.as_secs_f64(),
        pin::machine_cpus(),
        env.generator_threads,
        GENERATOR_SATURATED * 100.0,
        env.clk_tck,
        env.accept,
        if both_eras {
            " and era; \"÷ session era\": a stateless-era row's calls/s over the same target's session-era row (measured right before it in each round)"
        } else {
            ""
        },
    );
    if cli.markdown {
        let _ = writeln!(out, "\n{about}.\n");
        let _ = writeln!(out, "| {} |", headers.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            headers
                .iter()
                .enumerate()
                .map(|(i, _)| if i == 0 { " --- |" } else { " ---: |" })
                .collect::<String>()
        );
        for row in &rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    } else {
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let pad = w.saturating_sub(cell.chars().count());
                // Names left, numbers right.
                if i < if both_eras { 4 } else { 3 } {
                    let _ = write!(s, "{cell}{}  ", " ".repeat(pad));
                } else {
                    let _ = write!(s, "{}{cell}  ", " ".repeat(pad));
                }
            }
            s.trim_end().to_owned()
        };
        let _ = writeln!(out, "\n{about}\n");
        let head: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
        let _ = writeln!(out, "{}", line(&head));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row));
        }
    }
    if let Some(idle) = idle {
        let _ = writeln!(out);
        match idle {
            Ok(r) => {
                let text = format!(
                    "Idle sessions (gantry, shared): {} sessions opened in {:.1} s; RSS {:.1} MiB → {:.1} MiB; {:.0} bytes per session",
                    r.sessions,
                    r.open_time.as_secs_f64(),
                    r.before_kib as f64 / 1024.0,
                    r.after_kib as f64 / 1024.0,
                    r.bytes_per_session()
                );
                let _ = writeln!(out, "{text}");
            }
            Err(e) => {
                let _ = writeln!(out, "Idle sessions (gantry, shared): FAILED: {e}");
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------

/// The last lines a server wrote to stderr, and its warnings.
#[derive(Default)]
struct LogTail {
    lines: VecDeque<String>,
    warnings: u64,
    first_warning: Option<String>,
    /// The first `EARLY_WARNINGS` warnings.
    early: Vec<String>,
}

/// Warnings of a server kept whole (besides the count).
const EARLY_WARNINGS: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A server process started by the bench (in its own process group). It and every
/// process below it are killed when it is stopped or dropped.
struct Server {
    label: String,
    child: Child,
    pid: u32,
    url: String,
    log: Arc<Mutex<LogTail>>,
    /// Held open so the direct server sees EOF (and exits) when the bench dies.
    stdin: Option<ChildStdin>,
    done: bool,
    /// A server this one relays to that is not its child (`http` mode: the direct
    /// server as Gantry's HTTP backend); its CPU and memory count as this one's.
    companion: Option<Box<Server>>,
}

impl Server {
    async fn start(
        label: &str,
        program: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        ready_prefix: &'static str,
        watch_stdin: bool,
    ) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let mut cmd = pin::server_command(program);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(if watch_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let log = Arc::new(Mutex::new(LogTail::default()));
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        let mut server = Self {
            label: label.to_owned(),
            child,
            pid,
            url: String::new(),
            log: log.clone(),
            stdin,
            done: false,
            companion: None,
        };
        let stderr = server
            .child
            .stderr
            .take()
            .context("the child has no stderr pipe")?;
        std::thread::Builder::new()
            .name(format!("stderr-{pid}"))
            .spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(url) = line.strip_prefix(ready_prefix) {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(url.trim().to_owned());
                        }
                    }
                    let mut g = lock(&log);
                    // The server's own level (the field after the timestamp), not a
                    // backend's stderr line that it relays at INFO.
                    let level = line.split_whitespace().nth(1);
                    if matches!(level, Some("WARN" | "ERROR")) {
                        g.warnings += 1;
                        if g.first_warning.is_none() {
                            g.first_warning = Some(clip(&line));
                        }
                        if g.early.len() < EARLY_WARNINGS {
                            g.early.push(clip(&line));
                        }
                    }
                    g.lines.push_back(line);
                    while g.lines.len() > LOG_TAIL {
                        g.lines.pop_front();
                    }
                }
            })
            .context("cannot start a thread")?;
        match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(url)) => {
                server.url = url;
                Ok(server)
            }
            outcome => {
                let why = match outcome {
                    Err(_) => format!("did not start within {START_TIMEOUT:?}"),
                    Ok(Err(_)) => "exited before listening".to_owned(),
                    Ok(Ok(_)) => String::new(),
                };
                // Let the reader thread take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let tail = server.log_tail();
                server.kill_now();
                if tail.is_empty() {
                    bail!("{label} {why}, printing nothing");
                }
                bail!("{label} {why}; its last output:\n{tail}")
            }
        }
    }

    fn log_tail(&self) -> String {
        let g = lock(&self.log);
        g.lines
            .iter()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn warnings(&self) -> (u64, Option<String>) {
        let g = lock(&self.log);
        (g.warnings, g.first_warning.clone())
    }

    /// How many warnings the server logged, and the first few of them.
    fn early_warnings(&self) -> (u64, Vec<String>) {
        let g = lock(&self.log);
        (g.warnings, g.early.clone())
    }

    /// SIGTERM, up to `STOP_GRACE` to exit, then SIGKILL; then kills whatever it
    /// left running below it. Errors if it had to be killed.
    async fn stop(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let below = proc::descendants(self.pid);
        drop(self.stdin.take());
        let _ = kill(pid_of(self.pid), Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        let mut exited = false;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                exited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !exited {
            self.kill_now();
            bail!(
                "{} did not exit within {STOP_GRACE:?} of SIGTERM; killed",
                self.label
            );
        }
        self.done = true;
        let left = proc::kill_list(&below);
        if left > 0 {
            bail!(
                "{} exited but left {left} process(es) running; killed",
                self.label
            );
        }
        Ok(())
    }

    /// SIGKILL to the server's group and to every process below it; reaps it.
    fn kill_now(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let below = proc::descendants(self.pid);
        let _ = killpg(pid_of(self.pid), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        proc::kill_list(&below);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill_now();
    }
}

fn pid_of(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        let p = std::env::temp_dir().join(format!("gantry-bench-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(Self(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kernel's clock tick (`getconf CLK_TCK`), 100 if it cannot be read.
fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Process-tree accounting from `/proc`.
mod proc {
    use super::{kill, killpg, pid_of, Signal};
    use std::collections::HashMap;

    /// Fields of `/proc/<pid>/stat` the bench uses.
    pub(crate) struct Stat {
        pub ppid: u32,
        pub zombie: bool,
        /// utime + stime, in clock ticks.
        pub own: u64,
        /// cutime + cstime (children it reaped), in clock ticks.
        pub reaped: u64,
        pub start: u64,
    }

    pub(crate) fn stat(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: split after it.
        let (_, rest) = text.rsplit_once(')')?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): field k is f[k - 3].
        let num = |k: usize| f.get(k - 3).and_then(|v| v.parse::<u64>().ok());
        Some(Stat {
            zombie: f.first().is_some_and(|s| *s == "Z" || *s == "X"),
            ppid: u32::try_from(num(4)?).ok()?,
            own: num(14)? + num(15)?,
            reaped: num(16)? + num(17)?,
            start: num(22)?,
        })
    }

    /// Every live process below `root` (not `root`), with its start time.
    pub(crate) fn descendants(root: u32) -> Vec<(u32, u64)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut children: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some(s) = stat(pid).filter(|s| !s.zombie) {
                children.entry(s.ppid).or_default().push((pid, s.start));
            }
        }
        let mut out = Vec::new();
        let mut todo = vec![root];
        // Bounded: each pid is visited once (a pid has one parent).
        while let Some(p) = todo.pop() {
            if let Some(kids) = children.remove(&p) {
                for k in kids {
                    todo.push(k.0);
                    out.push(k);
                }
            }
        }
        out
    }

    /// `root` and everything below it.
    fn tree(root: u32) -> Vec<u32> {
        let mut pids = vec![root];
        pids.extend(descendants(root).into_iter().map(|(p, _)| p));
        pids
    }

    /// CPU accounting of one process at one instant.
    pub(crate) struct ProcCpu {
        start: u64,
        /// utime + stime and cutime + cstime, in clock ticks.
        own_ticks: u64,
        reaped_ticks: u64,
        /// Its threads and their summed time on CPU in ns (`/proc/<pid>/task/*/schedstat`).
        threads: Option<(Vec<u32>, u64)>,
    }

    /// CPU accounting of a process tree at one instant.
    pub(crate) struct TreeCpu {
        /// The server process itself: `root`, and for gantry (a supervisor and its
        /// gateway worker, the same executable) the worker too.
        server: Vec<u32>,
        procs: HashMap<u32, ProcCpu>,
    }

    /// `root` and its direct children running the same executable (gantry's worker), not
    /// counting a relay's echo backends (also `gantry-bench`).
    fn server_procs(root: u32) -> Vec<u32> {
        let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
        let mine = exe(root);
        let mut out = vec![root];
        out.extend(
            descendants(root)
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| stat(*p).is_some_and(|s| s.ppid == root))
                .filter(|p| mine.is_some() && exe(*p) == mine)
                .filter(|p| !is_bench_echo(*p)),
        );
        out
    }

    /// A `gantry-bench --serve-stdio-echo` child: a relay's backend, the same
    /// executable as the relay but not part of the server process.
    fn is_bench_echo(pid: u32) -> bool {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"--serve-stdio-echo"))
    }

    fn proc_cpu(pid: u32) -> Option<ProcCpu> {
        let s = stat(pid)?;
        Some(ProcCpu {
            start: s.start,
            own_ticks: s.own,
            reaped_ticks: s.reaped,
            threads: thread_ns(pid),
        })
    }

    fn thread_ns(pid: u32) -> Option<(Vec<u32>, u64)> {
        let mut tids = Vec::new();
        let mut ns = 0u64;
        for e in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let tid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
            ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
            tids.push(tid);
        }
        tids.sort_unstable();
        Some((tids, ns))
    }

    /// Samples `root` and, if `tree`, every process below it.
    pub(crate) fn cpu_sample(root: u32, tree: bool) -> TreeCpu {
        let mut pids = vec![root];
        if tree {
            pids.extend(descendants(root).into_iter().map(|(p, _)| p));
        }
        TreeCpu {
            server: server_procs(root),
            procs: pids
                .into_iter()
                .filter_map(|p| proc_cpu(p).map(|c| (p, c)))
                .collect(),
        }
    }

    /// CPU time between two samples, in ns: (whole tree, root alone).
    ///
    /// `/proc/<pid>/stat` rounds each process's time down to a clock tick (10 ms),
    /// which is no use for hundreds of backends using a few ms each; so a process
    /// whose threads did not change between the samples is measured with the
    /// nanosecond `schedstat` of its threads, any other with its ticks. Time of
    /// children reaped in between comes from cutime + cstime (ticks).
    pub(crate) fn cpu_delta(a: &TreeCpu, b: &TreeCpu, tick_ns: u64) -> (u64, u64) {
        let mut total = 0u64;
        let mut root = 0u64;
        for (pid, pb) in &b.procs {
            let before = a.procs.get(pid).filter(|pa| pa.start == pb.start);
            let (own, reaped) = match before {
                Some(pa) => {
                    let own = match (&pa.threads, &pb.threads) {
                        (Some((ta, na)), Some((tb, nb))) if ta == tb && nb >= na => nb - na,
                        _ => pb.own_ticks.saturating_sub(pa.own_ticks) * tick_ns,
                    };
                    (
                        own,
                        pb.reaped_ticks.saturating_sub(pa.reaped_ticks) * tick_ns,
                    )
                }
                // Born during the interval: all of its time is inside it.
                None => (
                    pb.threads.as_ref().map_or(pb.own_ticks * tick_ns, |t| t.1),
                    pb.reaped_ticks * tick_ns,
                ),
            };
            total += own + reaped;
            if b.server.contains(pid) {
                root += own;
            }
        }
        (total, root)
    }

    pub(crate) struct Memory {
        pub rss_kib: u64,
        pub procs: usize,
    }

    /// Sum of `VmRSS` over `root` and its descendants.
    pub(crate) fn tree_memory(root: u32) -> Memory {
        let pids = tree(root);
        let rss_kib = pids.iter().filter_map(|p| rss_kib(*p)).sum();
        Memory {
            rss_kib,
            procs: pids.len(),
        }
    }

    pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// SIGKILLs the listed processes that still exist (same pid *and* start time, so
    /// a recycled pid is never hit), and their process groups when they lead one.
    /// Returns how many were still running.
    pub(crate) fn kill_list(list: &[(u32, u64)]) -> usize {
        let mut n = 0;
        for &(pid, start) in list {
            if stat(pid).is_some_and(|s| s.start == start && !s.zombie) {
                n += 1;
                let _ = killpg(pid_of(pid), Signal::SIGKILL);
                let _ = kill(pid_of(pid), Signal::SIGKILL);
            }
        }
        if n > 0 {
            // Orphans re-parented to us (we are a subreaper) must be reaped.
            std::thread::sleep(std::time::Duration::from_millis(50));
            for &(pid, _) in list {
                let _ = nix::sys::wait::waitpid(
                    pid_of(pid),
                    Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                );
            }
        }
        n
    }

    /// Kills every process below `root`.
    pub(crate) fn kill_descendants(root: u32) {
        kill_list(&descendants(root));
    }
}

// ---------------------------------------------------------------------------------
// The direct server
// ---------------------------------------------------------------------------------

/// A minimal Streamable HTTP MCP server answering `echo` with JSON responses: the
/// floor the gateway is compared to. Runs as `gantry-bench --serve-direct`.
mod direct {
    use super::{lock, HashSet, Mutex};
    use anyhow::{Context, Result};
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::serve::ListenerExt;
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[derive(Default)]
    struct Sessions {
        live: Mutex<HashSet<String>>,
        next: AtomicU64,
        /// Answer with a one-event SSE stream when the client accepts one.
        sse: bool,
    }

    pub(crate) fn serve(sse: bool) -> Result<()> {
        crate::on_stdin_end(|| std::process::exit(0))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime")?;
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .context("cannot listen on 127.0.0.1")?;
            let addr = listener.local_addr()?;
            let app = axum::Router::new()
                .route("/mcp", axum::routing::post(post))
                .with_state(Arc::new(Sessions {
                    sse,
                    ..Sessions::default()
                }));
            eprintln!("direct listening on http://{addr}/mcp");
            // The floor: no Nagle delay on any response, however it is written.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
                .context("HTTP server failed")
        })?;
        // SIGINT stops gracefully; SIGTERM (its default action) ends the process.
        Ok(())
    }

    /// A message as the answer: JSON, or (`sse`) a one-event SSE stream.
    fn json_response(body: Value, session: Option<String>, sse: bool) -> Response {
        let (content_type, text) = if sse {
            (
                "text/event-stream",
                format!("event: message\ndata: {body}\n\n"),
            )
        } else {
            ("application/json", body.to_string())
        };
        let mut resp = (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, content_type)],
            text,
        )
            .into_response();
        if let Some(v) = session.and_then(|s| axum::http::HeaderValue::from_str(&s).ok()) {
            resp.headers_mut().insert("mcp-session-id", v);
        }
        resp
    }

    fn error(id: Value, code: i64, message: &str, sse: bool) -> Response {
        json_response(
            json!({"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}),
            None,
            sse,
        )
    }

    async fn post(
        State(sessions): State<Arc<Sessions>>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> Response {
        let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
            return (StatusCode::BAD_REQUEST, "invalid JSON").into_response();
        };
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(id) = msg.get("id").cloned() else {
            // A notification or a response.
            return StatusCode::ACCEPTED.into_response();
        };
        let sse = sessions.sse
            && headers
                .get(axum::http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("text/event-stream"));
        if method == "initialize" {
            let n = sessions.next.fetch_add(1, Ordering::Relaxed);
            let sid = format!("{:016x}{n:016x}", std::process::id());
            lock(&sessions.live).insert(sid.clone());
            let version = msg
                .pointer("/params/protocolVersion")
                .cloned()
                .unwrap_or_else(|| json!(super::PROTOCOL));
            return json_response(
                json!({"jsonrpc":"2.0","id":id,"result":{
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "gantry-bench-direct", "version": env!("CARGO_PKG_VERSION")}}}),
                Some(sid),
                sse,
            );
        }
        // A stateless-era request (2026-07-28) needs no session; its results carry
        // `resultType`.
        let stateless = headers
            .get("mcp-protocol-version")
            .is_some_and(|v| v.as_bytes() == super::STATELESS_PROTOCOL.as_bytes());
        let known = stateless
            || headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|s| lock(&sessions.live).contains(s));
        if !known {
            return (StatusCode::NOT_FOUND, "unknown session").into_response();
        }
        match method {
            // It speaks both eras, as a dual-era server does: Gantry's stateless-era
            // callers get a stateless-era connection to it (`http` mode with
            // `--era stateless`), its session-era callers a session.
            "server/discover" if stateless => json_response(
                json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete",
                    "supportedVersions":[super::STATELESS_PROTOCOL],
                    "capabilities":{"tools":{}},
                    "_meta":{"io.modelcontextprotocol/serverInfo":
                        {"name":"gantry-bench-direct","version":env!("CARGO_PKG_VERSION")}}}}),
                None,
                sse,
            ),
            "tools/call" if stateless => {
                let text = msg
                    .pointer("/params/arguments/message")
                    .and_then(Value::as_str);
                match text {
                    Some(text) => json_response(
                        json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete",
                            "content":[{"type":"text","text":text}],"isError":false}}),
                        None,
                        sse,
                    ),
                    None => error(id, -32602, "only echo {message} is served here", sse),
                }
            }
            "tools/call" => {
                let name = msg.pointer("/params/name").and_then(Value::as_str);
                let text = msg
                    .pointer("/params/arguments/message")
                    .and_then(Value::as_str);
                match (name, text) {
                    (Some("echo"), Some(text)) => json_response(
                        json!({"jsonrpc":"2.0","id":id,"result":{
                            "content":[{"type":"text","text":text}],"isError":false}}),
                        None,
                        sse,
                    ),
                    _ => error(id, -32602, "only echo {message} is served here", sse),
                }
            }
            "ping" => json_response(json!({"jsonrpc":"2.0","id":id,"result":{}}), None, sse),
            "tools/list" => json_response(
                json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{
                    "name":"echo","inputSchema":{"type":"object",
                    "properties":{"message":{"type":"string"}},"required":["message"]}}]}}),
                None,
                sse,
            ),
            _ => error(id, -32601, "method not found", sse),
        }
    }
}

// ---------------------------------------------------------------------------------
// The stdio echo backend
// ---------------------------------------------------------------------------------

/// A minimal stdio MCP server with one tool, `echo`: the stdio counterpart of the
/// direct server, so the comparison measures the gateway and not a backend's SDK.
mod stdio_echo {
    use anyhow::Result;
    use serde_json::{json, Value};
    use std::io::{BufRead, Write};

    pub(crate) fn serve() -> Result<()> {
        let stdin = std::io::stdin();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for line in stdin.lock().lines() {
            let line = line?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let Some(id) = msg.get("id").cloned() else {
                continue;
            };
            let method = msg
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let result = match method {
                "initialize" => json!({
                    "protocolVersion": msg.pointer("/params/protocolVersion").cloned().unwrap_or_else(|| json!("2025-11-25")),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "bench-echo", "version": "1"},
                }),
                "tools/list" => {
                    if let Some(f) = std::env::var_os("BENCH_LIST_COUNT") {
                        let mut log = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(f)?;
                        writeln!(log, "tools/list")?;
                    }
                    json!({"tools": [{"name": "echo", "inputSchema": {"type": "object",
                        "properties": {"message": {"type": "string"}}}}]})
                }
                "tools/call" => {
                    let text = msg
                        .pointer("/params/arguments/message")
                        .cloned()
                        .unwrap_or_else(|| json!(""));
                    json!({"content": [{"type": "text", "text": text}], "isError": false})
                }
                "ping" => json!({}),
                _ => {
                    let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}});
                    writeln!(out, "{e}")?;
                    out.flush()?;
                    continue;
                }
            };
            writeln!(
                out,
                "{}",
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            )?;
            out.flush()?;
        }
        Ok(())
    }
}

/// Calls `end` (which exits) when the bench goes away: its end of our stdin closes.
/// For the servers the bench runs as its own children.
pub(crate) fn on_stdin_end(end: fn() -> !) -> Result<()> {
    use std::io::Read as _;
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            end();
        })
        .context("cannot start a thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::{paired_p50, payload, CellResult, Pace, Target};
    use std::time::Duration;

    fn round(target: Target, p50_us: u64, failed: bool) -> CellResult {
        let mut r = CellResult::empty(target, false, 1, 100);
        r.p50_us = p50_us;
        r.failed = failed.then(|| "down".to_owned());
        r
    }

    /// Each round's row is divided by `direct` of that same round, whatever round
    /// `direct` had its median in; failed rounds are left out.
    #[test]
    fn p50_ratios_are_taken_round_by_round() {
        let direct = Target::Direct;
        let http = Target::Gantry("http");
        let cells = [(1, 100, direct, false), (1, 100, http, false)];
        let by_cell = [
            vec![
                round(direct, 50, false),
                round(direct, 100, false),
                round(direct, 80, false),
                round(direct, 60, true),
            ],
            vec![
                round(http, 80, false),
                round(http, 150, false),
                round(http, 100, false),
                round(http, 70, false),
            ],
        ];
        let q = paired_p50(&cells, &by_cell, 1).unwrap();
        // 80/50, 150/100, 100/80 (the last round's direct failed).
        assert!((q.lo - 1.25).abs() < 1e-9, "{}", q.lo);
        assert!((q.median - 1.5).abs() < 1e-9, "{}", q.median);
        assert!((q.hi - 1.6).abs() < 1e-9, "{}", q.hi);
        assert!(paired_p50(&cells, &by_cell, 0).is_none(), "direct itself");
        let one_round = [vec![round(direct, 50, false)], vec![round(http, 80, false)]];
        assert!(paired_p50(&cells, &one_round, 1).is_none(), "one round");
    }

    /// The filler as first defined, a byte at a time.
    fn reference(size: usize, client: usize, seq: u64) -> String {
        let mut s = format!("c{client}s{seq}:");
        s.truncate(size);
        let fill = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut i = 0;
        while s.len() < size {
            s.push(char::from(fill[i % fill.len()]));
            i += 1;
        }
        s
    }

    #[test]
    fn payloads_are_exact_and_differ_by_client_and_call() {
        for size in [0, 1, 5, 36, 37, 100, 10_240, 102_400] {
            for (client, seq) in [(0, 1), (7, 123_456), (63, 9)] {
                let p = payload(size, client, seq);
                assert_eq!(p.len(), size);
                assert_eq!(p, reference(size, client, seq), "size {size}");
            }
        }
        assert_ne!(payload(100, 1, 2), payload(100, 2, 1));
    }

    #[test]
    fn paced_clients_share_the_rate_staggered_and_do_not_catch_up() {
        let start = tokio::time::Instant::now();
        // 4 clients sharing 1000 calls/s: each one every 4 ms, a ms apart.
        let firsts: Vec<_> = (0..4)
            .map(|i| Pace::of(1000.0, 4, i, start).at - start)
            .collect();
        assert_eq!(
            firsts,
            [0, 1, 2, 3].map(Duration::from_millis),
            "staggered by 1 ms"
        );
        let mut p = Pace::of(1000.0, 4, 1, start);
        assert_eq!(p.every, Duration::from_millis(4));
        // On time: the schedule, whatever the time now.
        assert_eq!(p.next(start) - start, Duration::from_millis(1));
        assert_eq!(p.next(start) - start, Duration::from_millis(5));
        // 20 ms late: the next call at once, the one after a period later (no burst
        // of the calls missed).
        let late = start + Duration::from_millis(29);
        assert_eq!(p.next(late), late);
        assert_eq!(p.next(late), late + Duration::from_millis(4));
    }
}
