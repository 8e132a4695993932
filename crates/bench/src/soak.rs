//! `gantry-bench soak`: long-running mixed load, watching for growth.
//!
//! Starts the real `gantry` (two processes: a supervisor whose only child is the
//! gateway worker) in front of the example MCP server over stdio, by default in
//! `per-session` mode, so every client session has its own backend process (a child
//! of the worker). `--sessions` clients then loop, each on its own session
//! (Streamable HTTP, protocol 2025-11-25), over a random mix of calls:
//!
//! * `echo` (60%): `echo {message}`, the answer checked exactly;
//! * `slow` (15%): `slow {ms}` with 50–500 ms, answered "done" and not early;
//! * `cancel` (10%): `slow {5000}`; 0–150 ms after its response head arrived (the
//!   call is in flight), `notifications/cancelled` for its id on another connection:
//!   the call's SSE body must then end without a response, within 2 s;
//! * `drop` (5%): `slow {200–1500}` whose HTTP request the client abandons, before
//!   the response head (2–20 ms in) or while reading the body: a disconnect, which
//!   Gantry does not treat as a cancellation (the call runs on, resumable);
//! * `error` (10%): `test_error_handling` (a tool result with `isError`) or a tool
//!   that does not exist (a JSON-RPC error), each of which must come back as such;
//!
//! and every `--churn` (±20%; the first one anywhere in the first period, so the
//! sessions do not churn in step) ends its session with DELETE and opens a new one on
//! a new connection: sessions, backend processes and connections churn. Every HTTP
//! request has a deadline (`--request-timeout`); every loop ends at `--duration`.
//!
//! Every `--sample` the process tree is read from `/proc`: VmRSS of the supervisor
//! and the worker ("gantry") and of the backends (the worker's children and their
//! descendants), the worker's open file descriptors (by kind) and threads, live and
//! zombie backends; and the calls of each kind since the previous sample. The report
//! gives the least-squares slope, over the samples after `--warmup`, of the gantry
//! RSS and of the worker's descriptors, and calls each flat when the growth its slope
//! predicts over 10 minutes is at most `--flat-pct` (1%) of its mean (descriptors: or
//! at most two). Anything but the deliberate outcomes above is an unexpected error.
//! The exit status is non-zero on any unexpected error, on a slope that is not flat,
//! or if, once every session has ended, a backend still runs or the worker holds
//! more descriptors than it did idle before the load.

use super::{clip, lock, payload, proc, CallResult, McpClient, Reply, Server, TempDir, PROTOCOL};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the clients accept (the specification requires both).
const ACCEPT: &str = "application/json, text/event-stream";
/// The `slow` call a `cancel` cancels: far longer than the cancellation takes.
const CANCELLED_MS: u64 = 5000;
/// How soon after `notifications/cancelled` the cancelled call's stream must end.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// A session loop gives up after this many unexpected errors.
const MAX_UNEXPECTED_PER_SESSION: u64 = 50;
/// Unexpected errors kept whole for the report (all are counted).
const KEPT_ERRORS: usize = 20;
/// Echo payload, in bytes.
const ECHO_BYTES: usize = 100;
/// Growth of the worker's descriptors over 10 minutes that is flat whatever the
/// mean: the count moves by a few with the connections and calls in flight at the
/// instant of each sample, so a fitted slope carries about one descriptor of noise.
const FD_FLOOR: f64 = 2.0;
/// After the load, how long the backends get to exit once every session has ended.
const QUIET_TIMEOUT: Duration = Duration::from_secs(15);

/// Options of `gantry-bench soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct SoakArgs {
    /// The gantry executable. Default: `gantry` next to this binary.
    #[arg(long, value_name = "PATH")]
    gantry: Option<PathBuf>,
    /// The stdio backend: the example MCP server executable. Default:
    /// `gantry-example` next to gantry, or else `gantry example-server`.
    #[arg(long, value_name = "PATH")]
    example: Option<PathBuf>,
    /// How long the load runs.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Concurrent client sessions.
    #[arg(long, default_value_t = 20)]
    sessions: usize,
    /// Interval between samples of the process tree.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    sample: Duration,
    /// Samples before this are left out of the slopes.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Mean lifetime of a session before it is ended with DELETE and replaced.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    churn: Duration,
    /// Deadline of one HTTP request.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// `session_mode` of the backend.
    #[arg(long, default_value = "per-session", value_parser = ["per-session", "shared"])]
    mode: String,
    /// `RUST_LOG` given to gantry.
    #[arg(long, default_value = "info", value_name = "FILTER")]
    gantry_log: String,
    /// A slope is flat when the growth it predicts over 10 minutes is at most this
    /// percentage of the mean.
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT")]
    flat_pct: f64,
    /// Seed of the call mix (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
}

/// What a client does in one step of its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Echo,
    Slow,
    Cancel,
    Drop,
    Error,
    /// Opening (initialize) and ending (DELETE) sessions; never drawn.
    Session,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Echo,
        Kind::Slow,
        Kind::Cancel,
        Kind::Drop,
        Kind::Error,
        Kind::Session,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Echo => "echo",
            Kind::Slow => "slow",
            Kind::Cancel => "cancel",
            Kind::Drop => "drop",
            Kind::Error => "error",
            Kind::Session => "session",
        }
    }

    /// Share of the mix, in percent.
    fn weight(self) -> u64 {
        match self {
            Kind::Echo => 60,
            Kind::Slow => 15,
            Kind::Cancel => 10,
            Kind::Drop => 5,
            Kind::Error => 10,
            Kind::Session => 0,
        }
    }
}

/// A small deterministic generator (xorshift64*): the mix needs no better.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn bits(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.bits() % (hi.saturating_sub(lo) + 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.bits() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick(&mut self) -> Kind {
        let total: u64 = Kind::ALL.iter().map(|k| k.weight()).sum();
        let mut r = self.bits() % total.max(1);
        for k in Kind::ALL {
            if r < k.weight() {
                return k;
            }
            r -= k.weight();
        }
        Kind::Echo
    }
}

/// Counters of one kind.
#[derive(Default)]
struct KindStat {
    /// Steps that ended as they should.
    ok: AtomicU64,
    unexpected: AtomicU64,
    /// Summed duration of the `ok` steps, in µs.
    micros: AtomicU64,
}

/// Counters shared by every session loop.
#[derive(Default)]
struct Stats {
    echo: KindStat,
    slow: KindStat,
    cancel: KindStat,
    drop: KindStat,
    error: KindStat,
    session: KindStat,
    opened: AtomicU64,
    deleted: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// A snapshot of [`Stats`] (per kind in [`Kind::ALL`] order), or a difference of two.
#[derive(Clone, Default)]
struct Counts {
    ok: Vec<u64>,
    unexpected: Vec<u64>,
    micros: Vec<u64>,
    opened: u64,
    deleted: u64,
}

impl Counts {
    fn since(&self, before: &Counts) -> Counts {
        let sub = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .zip(b.iter().chain(std::iter::repeat(&0)))
                .map(|(x, y)| x.saturating_sub(*y))
                .collect()
        };
        Counts {
            ok: sub(&self.ok, &before.ok),
            unexpected: sub(&self.unexpected, &before.unexpected),
            micros: sub(&self.micros, &before.micros),
            opened: self.opened.saturating_sub(before.opened),
            deleted: self.deleted.saturating_sub(before.deleted),
        }
    }

    fn ok_of(&self, k: Kind) -> u64 {
        self.at(&self.ok, k)
    }

    fn unexpected_of(&self, k: Kind) -> u64 {
        self.at(&self.unexpected, k)
    }

    fn at(&self, v: &[u64], k: Kind) -> u64 {
        Kind::ALL
            .iter()
            .position(|x| *x == k)
            .and_then(|i| v.get(i))
            .copied()
            .unwrap_or(0)
    }

    fn unexpected_total(&self) -> u64 {
        self.unexpected.iter().sum()
    }

    /// Mean duration of the `ok` steps of `k`, in ms.
    fn mean_ms(&self, k: Kind) -> Option<f64> {
        let n = self.ok_of(k);
        (n > 0).then(|| self.at(&self.micros, k) as f64 / n as f64 / 1000.0)
    }
}

impl Stats {
    fn of(&self, k: Kind) -> &KindStat {
        match k {
            Kind::Echo => &self.echo,
            Kind::Slow => &self.slow,
            Kind::Cancel => &self.cancel,
            Kind::Drop => &self.drop,
            Kind::Error => &self.error,
            Kind::Session => &self.session,
        }
    }

    fn ok(&self, k: Kind, took: Duration) {
        let s = self.of(k);
        s.ok.fetch_add(1, Ordering::Relaxed);
        s.micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn unexpected(&self, k: Kind, session: usize, what: &str) {
        self.of(k).unexpected.fetch_add(1, Ordering::Relaxed);
        let mut kept = lock(&self.errors);
        if kept.len() < KEPT_ERRORS {
            let line = format!("session {session}, {}: {}", k.name(), clip(what));
            eprintln!("soak: unexpected: {line}");
            kept.push(line);
        }
    }

    fn snapshot(&self) -> Counts {
        let get = |f: fn(&KindStat) -> &AtomicU64| -> Vec<u64> {
            Kind::ALL
                .iter()
                .map(|k| f(self.of(*k)).load(Ordering::Relaxed))
                .collect()
        };
        Counts {
            ok: get(|s| &s.ok),
            unexpected: get(|s| &s.unexpected),
            micros: get(|s| &s.micros),
            opened: self.opened.load(Ordering::Relaxed),
            deleted: self.deleted.load(Ordering::Relaxed),
        }
    }
}

/// What every session loop shares.
struct Ctx {
    url: String,
    timeout: Duration,
    churn: Duration,
    seed: u64,
    stats: Stats,
}

// ---------------------------------------------------------------------------------
// Run and report
// ---------------------------------------------------------------------------------

/// Runs the soak; `Ok(false)`: it ran, and failed its criteria.
pub(crate) async fn run(args: SoakArgs) -> Result<bool> {
    if args.sessions == 0 {
        bail!("--sessions must be at least 1");
    }
    if args.duration.is_zero() || args.sample.is_zero() || args.churn.is_zero() {
        bail!("--duration, --sample and --churn must be positive");
    }
    if args.warmup >= args.duration {
        bail!("--warmup must be shorter than --duration (the slopes use the samples after it)");
    }
    let bench = std::env::current_exe().context("cannot locate the gantry-bench executable")?;
    let gantry = match &args.gantry {
        Some(p) => p.clone(),
        None => bench
            .parent()
            .map(|d| d.join("gantry"))
            .context("the bench executable has no directory")?,
    };
    if !gantry.is_file() {
        bail!(
            "{} does not exist: build it with `cargo build --release --bin gantry --bin gantry-example` or pass --gantry PATH",
            gantry.display()
        );
    }
    let gantry = gantry.canonicalize().unwrap_or(gantry);
    let (command, cmd_args) = match &args.example {
        Some(p) => (p.clone(), Vec::new()),
        None => match gantry.parent().map(|d| d.join("gantry-example")) {
            Some(p) if p.is_file() => (p, Vec::new()),
            _ => (gantry.clone(), vec!["example-server".to_owned()]),
        },
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let dir = TempDir::new()?;
    let config = soak_config(&args, &command, &cmd_args)?;
    let path = dir.0.join("gantry-soak.toml");
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))?;
    let backend = std::iter::once(command.display().to_string())
        .chain(cmd_args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!(
        "soak: {} sessions for {} ({} mode), sample every {}, warm-up {}, churn ~{}, seed {seed}; gantry {}; backend {backend}; {} CPUs",
        args.sessions,
        humantime::format_duration(args.duration),
        args.mode,
        humantime::format_duration(args.sample),
        humantime::format_duration(args.warmup),
        humantime::format_duration(args.churn),
        gantry.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut server = Server::start(
        "gantry (soak)",
        &gantry,
        &[
            "--config".into(),
            path.into_os_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &[("RUST_LOG", args.gantry_log.as_str())],
        "gantry listening on ",
        false,
    )
    .await?;
    let outcome = soak(&args, &server, seed).await;
    let (warnings, early) = server.early_warnings();
    let stopping = Instant::now();
    let stopped = server.stop().await;
    let stop_time = stopping.elapsed();
    let outcome = outcome?;
    let mut text = report(&args, seed, &backend, &outcome);
    let _ = writeln!(
        text,
        "gantry logged {warnings} warning(s) or error(s){}",
        if early.is_empty() { "" } else { "; the first:" }
    );
    for w in &early {
        let _ = writeln!(text, "    {w}");
    }
    let stop_ok = match &stopped {
        Ok(()) => {
            let _ = writeln!(
                text,
                "gantry stopped cleanly on SIGTERM in {:.2} s",
                stop_time.as_secs_f64()
            );
            true
        }
        Err(e) => {
            let _ = writeln!(text, "gantry did not stop cleanly: {e:#}");
            false
        }
    };
    let passed = outcome.verdict.passed() && stop_ok;
    let _ = writeln!(text, "\nsoak: {}", if passed { "PASS" } else { "FAIL" });
    print!("{text}");
    Ok(passed)
}

/// The configuration of Gantry for the soak.
fn soak_config(args: &SoakArgs, command: &std::path::Path, cmd_args: &[String]) -> Result<String> {
    let command = toml::Value::String(command.display().to_string());
    let cmd_args = toml::Value::Array(
        cmd_args
            .iter()
            .map(|a| toml::Value::String(a.clone()))
            .collect(),
    );
    let mode = toml::Value::String(args.mode.clone());
    // Room for the sessions being replaced while their successors open.
    let max_sessions = args.sessions * 2 + 64;
    Ok(format!(
        "# Generated by gantry-bench soak.\n\
         [server]\n\
         listen = \"127.0.0.1:0\"\n\
         max_sessions = {max_sessions}\n\
         \n\
         [[backends]]\n\
         name = \"example\"\n\
         session_mode = {mode}\n\
         stdio = {{ command = {command}, args = {cmd_args} }}\n"
    ))
}

/// One reading of the process tree, and the calls since the previous one.
struct Sample {
    /// Since the load started (the first, idle sample: zero).
    at: Duration,
    /// Taken with no session open (before and after the load).
    idle: bool,
    tree: Tree,
    delta: Counts,
}

/// The outcome of the verdict's checks.
struct Verdict {
    rss: Option<Slope>,
    fds: Option<Slope>,
    unexpected: u64,
    /// Backends still running after every session ended (beyond the shared one).
    leftover_backends: usize,
    /// Descriptors of the worker once idle again, beyond those it had idle before.
    leftover_fds: u64,
    sessions_stuck: bool,
}

impl Verdict {
    fn passed(&self) -> bool {
        self.rss.as_ref().is_some_and(|s| s.flat)
            && self.fds.as_ref().is_some_and(|s| s.flat)
            && self.unexpected == 0
            && self.leftover_backends == 0
            && self.leftover_fds == 0
            && !self.sessions_stuck
    }
}

/// A least-squares slope over the samples after the warm-up, judged.
struct Slope {
    /// Per minute.
    slope: f64,
    /// Standard error of the slope, per minute.
    stderr: f64,
    mean: f64,
    n: usize,
    /// The growth the slope predicts over 10 minutes.
    growth_10min: f64,
    /// The largest growth over 10 minutes that is still flat.
    allowed: f64,
    flat: bool,
}

struct Outcome {
    samples: Vec<Sample>,
    totals: Counts,
    errors: Vec<String>,
    verdict: Verdict,
    backend_exits: Duration,
}

async fn soak(args: &SoakArgs, server: &Server, seed: u64) -> Result<Outcome> {
    let sup = server.pid;
    // The worker is up (it printed its address); let it settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = read_tree(sup);
    if base.workers != 1 {
        bail!(
            "gantry's supervisor (pid {sup}) has {} children, expected one (the worker)",
            base.workers
        );
    }
    let ctx = Arc::new(Ctx {
        url: server.url.clone(),
        timeout: args.request_timeout,
        churn: args.churn,
        seed,
        stats: Stats::default(),
    });
    let mut samples = vec![Sample {
        at: Duration::ZERO,
        idle: true,
        tree: base,
        delta: ctx.stats.snapshot(),
    }];
    let start = Instant::now();
    let end = start + args.duration;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.sessions {
        let ctx = ctx.clone();
        tasks.spawn(session_loop(ctx, i, end));
    }
    let mut prev = ctx.stats.snapshot();
    for k in 1u32.. {
        let at = (start + args.sample * k).min(end);
        tokio::time::sleep_until(at).await;
        let now = ctx.stats.snapshot();
        let tree = read_tree(sup);
        let delta = now.since(&prev);
        prev = now;
        eprintln!(
            "soak: {:>5.0} s  gantry {} KiB  backends {} ({} KiB)  fds {}  calls {}  unexpected {}",
            at.duration_since(start).as_secs_f64(),
            tree.gantry_kib(),
            tree.backends,
            tree.backend_kib,
            tree.fds.total,
            delta.ok.iter().sum::<u64>(),
            delta.unexpected_total(),
        );
        samples.push(Sample {
            at: at.duration_since(start),
            idle: false,
            tree,
            delta,
        });
        if at >= end {
            break;
        }
    }
    // Each loop ends after its step in flight (one request) and its DELETE.
    let deadline = args.request_timeout * 2 + Duration::from_secs(10);
    let sessions_stuck = tokio::time::timeout(deadline, async {
        while let Some(r) = tasks.join_next().await {
            if let Err(e) = r {
                ctx.stats
                    .unexpected(Kind::Session, usize::MAX, &format!("session task: {e}"));
            }
        }
    })
    .await
    .is_err();
    if sessions_stuck {
        eprintln!("soak: session loops did not end within {deadline:?} of the end; aborted");
        tasks.abort_all();
    }
    // Every session has ended: their backends must go.
    let keep = usize::from(args.mode == "shared");
    let quiet_start = Instant::now();
    loop {
        let t = read_tree(sup);
        if t.backends <= keep || quiet_start.elapsed() >= QUIET_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let backend_exits = quiet_start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tree = read_tree(sup);
    let totals = ctx.stats.snapshot();
    let leftover_backends = tree.backends.saturating_sub(keep);
    let leftover_fds = samples
        .first()
        .map_or(0, |s| tree.fds.total.saturating_sub(s.tree.fds.total));
    samples.push(Sample {
        at: start.elapsed(),
        idle: true,
        tree,
        delta: totals.since(&prev),
    });
    let after_warmup = |f: fn(&Tree) -> f64| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter(|s| !s.idle && s.at >= args.warmup)
            .map(|s| (s.at.as_secs_f64() / 60.0, f(&s.tree)))
            .collect()
    };
    let rss = fit(&after_warmup(|t| t.gantry_kib() as f64), args.flat_pct, 0.0);
    let fds = fit(
        &after_warmup(|t| t.fds.total as f64),
        args.flat_pct,
        FD_FLOOR,
    );
    let errors = lock(&ctx.stats.errors).clone();
    Ok(Outcome {
        verdict: Verdict {
            rss,
            fds,
            unexpected: totals.unexpected_total(),
            leftover_backends,
            leftover_fds,
            sessions_stuck,
        },
        samples,
        totals,
        errors,
        backend_exits,
    })
}

/// Least-squares line through `points` (minutes, value), judged flat when its growth
/// over 10 minutes is at most `pct`% of the mean, or at most `floor`.
fn fit(points: &[(f64, f64)], pct: f64, floor: f64) -> Option<Slope> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ssr: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    let stderr = (ssr / (nf - 2.0) / sxx).sqrt();
    let growth_10min = slope * 10.0;
    let allowed = (my * pct / 100.0).max(floor);
    Some(Slope {
        slope,
        stderr,
        mean: my,
        n,
        growth_10min,
        allowed,
        flat: growth_10min <= allowed,
    })
}

fn report(args: &SoakArgs, seed: u64, backend: &str, o: &Outcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nSoak: {} sessions, {} ({} mode, backend `{backend}`), churn ~{}, sample {}, seed {seed}, {} CPUs.\n\
         gantry RSS = VmRSS of the supervisor + the worker; backends = the worker's children (zombies in parentheses);\n\
         fds = entries of /proc/<worker>/fd (sockets / pipes / anon inodes / other); calls are those completed as expected since the previous row.\n",
        args.sessions,
        humantime::format_duration(args.duration),
        args.mode,
        humantime::format_duration(args.churn),
        humantime::format_duration(args.sample),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut headers: Vec<String> = [
        "t s",
        "gantry RSS KiB",
        "worker RSS KiB (anon/file)",
        "backends",
        "backend RSS MiB",
        "fds (s/p/a/o)",
        "threads",
    ]
    .iter()
    .map(|h| (*h).to_owned())
    .collect();
    headers.extend(
        Kind::ALL
            .iter()
            .filter(|k| **k != Kind::Session)
            .map(|k| k.name().to_owned()),
    );
    headers.extend(
        ["opened", "unexpected", "echo ms"]
            .iter()
            .map(|h| (*h).to_owned()),
    );
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        headers.iter().map(|_| " ---: |").collect::<String>()
    );
    for s in &o.samples {
        let t = &s.tree;
        let mut row = vec![
            if s.idle {
                format!("{:.0} (idle)", s.at.as_secs_f64())
            } else {
                format!("{:.0}", s.at.as_secs_f64())
            },
            t.gantry_kib().to_string(),
            format!(
                "{} ({}/{})",
                t.worker_kib, t.worker_anon_kib, t.worker_file_kib
            ),
            if t.zombies > 0 {
                format!("{} ({})", t.backends, t.zombies)
            } else {
                t.backends.to_string()
            },
            format!("{:.1}", t.backend_kib as f64 / 1024.0),
            format!(
                "{} ({}/{}/{}/{})",
                t.fds.total, t.fds.sockets, t.fds.pipes, t.fds.anon, t.fds.other
            ),
            t.threads.to_string(),
        ];
        row.extend(
            Kind::ALL
                .iter()
                .filter(|k| **k != Kind::Session)
                .map(|k| s.delta.ok_of(*k).to_string()),
        );
        row.push(s.delta.opened.to_string());
        row.push(s.delta.unexpected_total().to_string());
        row.push(
            s.delta
                .mean_ms(Kind::Echo)
                .map_or_else(String::new, |m| format!("{m:.2}")),
        );
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    let _ = writeln!(out);
    let describe = |name: &str, unit: &str, s: &Option<Slope>| -> String {
        match s {
            Some(s) => format!(
                "{name}: slope {:+.2} {unit}/min (± {:.2}) over {} samples after the {} warm-up; mean {:.1} {unit}; {:+.1} {unit} per 10 min = {:+.2}% of the mean; {} (flat: ≤ {:.1} {unit} per 10 min)",
                s.slope,
                s.stderr,
                s.n,
                humantime::format_duration(args.warmup),
                s.mean,
                s.growth_10min,
                if s.mean > 0.0 { 100.0 * s.growth_10min / s.mean } else { 0.0 },
                if s.flat { "FLAT" } else { "NOT FLAT" },
                s.allowed,
            ),
            None => format!("{name}: too few samples after the warm-up to fit a slope (need 3)"),
        }
    };
    let _ = writeln!(out, "{}", describe("gantry RSS", "KiB", &o.verdict.rss));
    let _ = writeln!(out, "{}", describe("worker fds", "fds", &o.verdict.fds));
    // Informational: where the gantry RSS slope comes from, and whether it slows.
    let points = |f: fn(&Tree) -> f64, from: Duration| -> Vec<(f64, f64)> {
        o.samples
            .iter()
            .filter(|s| !s.idle && s.at >= from)
            .map(|s| (s.at.as_secs_f64() / 60.0, f(&s.tree)))
            .collect()
    };
    let slope_of = |f: fn(&Tree) -> f64, from: Duration| -> String {
        fit(&points(f, from), args.flat_pct, 0.0).map_or_else(
            || "n/a".to_owned(),
            |s| format!("{:+.2} KiB/min (± {:.2})", s.slope, s.stderr),
        )
    };
    let half = args.warmup + (args.duration.saturating_sub(args.warmup)) / 2;
    let _ = writeln!(
        out,
        "gantry RSS slope over the second half (from {}): {}; worker RssAnon {}, RssFile {}, supervisor {} (after the warm-up)",
        humantime::format_duration(Duration::from_secs(half.as_secs())),
        slope_of(|t| t.gantry_kib() as f64, half),
        slope_of(|t| t.worker_anon_kib as f64, args.warmup),
        slope_of(|t| t.worker_file_kib as f64, args.warmup),
        slope_of(|t| t.supervisor_kib as f64, args.warmup),
    );
    // Informational: the backends' memory per process.
    let per_backend: Vec<(f64, f64)> = o
        .samples
        .iter()
        .filter(|s| !s.idle && s.at >= args.warmup && s.tree.backends > 0)
        .map(|s| {
            (
                s.at.as_secs_f64() / 60.0,
                s.tree.backend_kib as f64 / s.tree.backends as f64,
            )
        })
        .collect();
    if let Some(s) = fit(&per_backend, args.flat_pct, 0.0) {
        let _ = writeln!(
            out,
            "backend RSS per process (informational; backends are replaced as sessions churn): mean {:.0} KiB, slope {:+.2} KiB/min (± {:.2})",
            s.mean, s.slope, s.stderr
        );
    }
    if let (Some(first), Some(last)) = (o.samples.first(), o.samples.last()) {
        let _ = writeln!(
            out,
            "idle before → after the load: gantry RSS {} → {} KiB, worker fds {} → {}, threads {} → {}, backends {} → {} (after the last session ended, the backends took {:.1} s to exit)",
            first.tree.gantry_kib(),
            last.tree.gantry_kib(),
            first.tree.fds.total,
            last.tree.fds.total,
            first.tree.threads,
            last.tree.threads,
            first.tree.backends,
            last.tree.backends,
            o.backend_exits.as_secs_f64(),
        );
    }
    let t = &o.totals;
    let calls: Vec<String> = Kind::ALL
        .iter()
        .filter(|k| **k != Kind::Session)
        .map(|k| {
            let mean = t
                .mean_ms(*k)
                .map_or_else(String::new, |m| format!(", mean {m:.1} ms"));
            format!(
                "{} {} ({} unexpected{mean})",
                k.name(),
                t.ok_of(*k),
                t.unexpected_of(*k)
            )
        })
        .collect();
    let _ = writeln!(out, "calls: {}", calls.join("; "));
    let _ = writeln!(
        out,
        "sessions: {} opened, {} ended with DELETE ({} unexpected)",
        t.opened,
        t.deleted,
        t.unexpected_of(Kind::Session)
    );
    let _ = writeln!(out, "unexpected errors: {}", o.verdict.unexpected);
    for e in &o.errors {
        let _ = writeln!(out, "    {e}");
    }
    if o.verdict.leftover_backends > 0 {
        let _ = writeln!(
            out,
            "{} backend process(es) still running after every session ended",
            o.verdict.leftover_backends
        );
    }
    if o.verdict.leftover_fds > 0 {
        let _ = writeln!(
            out,
            "the worker holds {} descriptor(s) more idle after the load than idle before it",
            o.verdict.leftover_fds
        );
    }
    if o.verdict.sessions_stuck {
        let _ = writeln!(out, "some session loops did not end in time");
    }
    out
}

// ---------------------------------------------------------------------------------
// One session's loop
// ---------------------------------------------------------------------------------

async fn session_loop(ctx: Arc<Ctx>, index: usize, end: Instant) {
    let mut rng = Rng::new(ctx.seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut client: Option<McpClient> = None;
    let mut first = true;
    let mut churn_at = Instant::now();
    let mut seq = 0u64;
    let mut unexpected = 0u64;
    while Instant::now() < end && unexpected < MAX_UNEXPECTED_PER_SESSION {
        let Some(c) = client.as_ref() else {
            match open(&ctx, index).await {
                Ok(c) => {
                    ctx.stats.opened.fetch_add(1, Ordering::Relaxed);
                    // The first period is drawn from all of it, so the sessions do not
                    // churn in step; then ±20%.
                    let f = if first {
                        rng.unit()
                    } else {
                        0.8 + 0.4 * rng.unit()
                    };
                    first = false;
                    churn_at = Instant::now() + ctx.churn.mul_f64(f);
                    seq = 0;
                    client = Some(c);
                }
                Err(e) => {
                    unexpected += 1;
                    ctx.stats
                        .unexpected(Kind::Session, index, &format!("initialize: {e:#}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            continue;
        };
        if Instant::now() >= churn_at {
            match delete(c).await {
                Ok(()) => {
                    ctx.stats.deleted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    unexpected += 1;
                    ctx.stats
                        .unexpected(Kind::Session, index, &format!("DELETE: {e:#}"));
                }
            }
            client = None;
            continue;
        }
        seq += 1;
        let kind = rng.pick();
        let started = Instant::now();
        let r = match kind {
            Kind::Echo => c.echo(seq, &payload(ECHO_BYTES, index, seq)).await,
            Kind::Slow => slow(c, seq, rng.range(50, 500)).await,
            Kind::Cancel => cancelled(c, seq, Duration::from_millis(rng.range(0, 150))).await,
            Kind::Drop => {
                let ms = rng.range(200, 1500);
                let when = if rng.bits().is_multiple_of(2) {
                    Abandon::BeforeHead(Duration::from_millis(rng.range(2, 20)))
                } else {
                    Abandon::AfterHead(Duration::from_millis(rng.range(0, 100)))
                };
                dropped(c, seq, ms, when).await
            }
            Kind::Error => failing(c, seq, rng.bits().is_multiple_of(2)).await,
            Kind::Session => Ok(()),
        };
        match r {
            Ok(()) => ctx.stats.ok(kind, started.elapsed()),
            Err(e) => {
                unexpected += 1;
                ctx.stats
                    .unexpected(kind, index, &format!("call {seq}: {e:#}"));
                // The session may be broken: end it (best effort) and start over.
                let _ = delete(c).await;
                client = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    if let Some(c) = client {
        match delete(&c).await {
            Ok(()) => {
                ctx.stats.deleted.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => ctx
                .stats
                .unexpected(Kind::Session, index, &format!("final DELETE: {e:#}")),
        }
    }
}

/// A new session on a new connection.
async fn open(ctx: &Ctx, index: usize) -> Result<McpClient> {
    let mut c = McpClient::new(index, &ctx.url, ACCEPT, ctx.timeout)?;
    c.initialize().await?;
    Ok(c)
}

/// Ends the session with DELETE.
async fn delete(c: &McpClient) -> Result<()> {
    let resp = c
        .http
        .delete(&c.url)
        .header("mcp-session-id", &c.session)
        .header("mcp-protocol-version", PROTOCOL)
        .send()
        .await?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap_or_default();
    if status != 200 && status != 204 {
        bail!("HTTP {status}: {}", clip(&String::from_utf8_lossy(&body)));
    }
    Ok(())
}

fn call_body(seq: u64, name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": seq, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string()
}

/// How call `seq` was answered.
enum Answer {
    Result(CallResult),
    Error(Value),
    Nothing,
}

impl Answer {
    fn describe(&self) -> String {
        match self {
            Answer::Result(r) => format!(
                "a result (isError {}): {}",
                r.is_error,
                clip(text_of(r).unwrap_or("<no text>"))
            ),
            Answer::Error(e) => format!("error {}", clip(&e.to_string())),
            Answer::Nothing => "no response".to_owned(),
        }
    }
}

fn text_of(r: &CallResult) -> Option<&str> {
    match r.content.as_slice() {
        [c] if c.kind == "text" => c.text.as_deref(),
        _ => None,
    }
}

/// The answer to call `seq` among the messages of its response body.
fn answer(seq: u64, messages: &[String]) -> Result<Answer> {
    let want = Value::from(seq);
    let mut found = Answer::Nothing;
    for m in messages {
        let r: Reply =
            serde_json::from_str(m).with_context(|| format!("not JSON-RPC: {}", clip(m)))?;
        if r.method.is_some() {
            continue; // a notification or request riding on the stream
        }
        if r.id.as_ref() != Some(&want) {
            bail!("response with id {:?}: {}", r.id, clip(m));
        }
        if !matches!(found, Answer::Nothing) {
            bail!("two responses: {}", clip(m));
        }
        found = match (r.result, r.error) {
            (_, Some(e)) => Answer::Error(e),
            (Some(res), None) => Answer::Result(res),
            (None, None) => bail!("a response with neither result nor error: {}", clip(m)),
        };
    }
    Ok(found)
}

/// `slow {ms}`: answered "done", no earlier than `ms`.
async fn slow(c: &McpClient, seq: u64, ms: u64) -> Result<()> {
    let t0 = Instant::now();
    let (status, _, messages) = c.post(call_body(seq, "slow", json!({ "ms": ms }))).await?;
    let took = t0.elapsed();
    if status != 200 {
        bail!("slow {ms}: HTTP {status}: {}", clip(&messages.join(" ")));
    }
    match answer(seq, &messages)? {
        Answer::Result(r) if !r.is_error && text_of(&r) == Some("done") => {}
        other => bail!("slow {ms}: {}", other.describe()),
    }
    if took < Duration::from_millis(ms) {
        bail!("slow {ms}: answered after {took:?}");
    }
    Ok(())
}

/// `slow {CANCELLED_MS}`, cancelled `after` its response head arrived: its stream
/// must end, without a response, within `CANCEL_GRACE` of the cancellation.
async fn cancelled(c: &McpClient, seq: u64, after: Duration) -> Result<()> {
    let resp = c
        .send(call_body(seq, "slow", json!({ "ms": CANCELLED_MS })))
        .await?;
    if resp.status().as_u16() != 200 {
        let (status, _, messages) = McpClient::read(resp).await?;
        bail!("HTTP {status}: {}", clip(&messages.join(" ")));
    }
    tokio::time::sleep(after).await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": seq, "reason": "gantry-bench soak"}});
    let (status, _, _) = c.post(note.to_string()).await?;
    if status != 202 {
        bail!("notifications/cancelled: HTTP {status}, expected 202");
    }
    let sent = Instant::now();
    let (_, _, messages) = tokio::time::timeout(CANCEL_GRACE, McpClient::read(resp))
        .await
        .map_err(|_| {
            anyhow!("the stream did not end within {CANCEL_GRACE:?} of notifications/cancelled")
        })??;
    match answer(seq, &messages)? {
        Answer::Nothing => Ok(()),
        other => bail!(
            "cancelled, yet answered {:?} later: {}",
            sent.elapsed(),
            other.describe()
        ),
    }
}

/// When a `drop` step abandons its request.
enum Abandon {
    /// This long after sending it, before the response head (which Gantry sends
    /// once a call has run for 25 ms).
    BeforeHead(Duration),
    /// This long after the response head arrived, while the call still runs.
    AfterHead(Duration),
}

/// `slow {ms}`, abandoned by the client (it drops the HTTP request) `when` says.
async fn dropped(c: &McpClient, seq: u64, ms: u64, when: Abandon) -> Result<()> {
    let body = call_body(seq, "slow", json!({ "ms": ms }));
    match when {
        Abandon::BeforeHead(before) => match tokio::time::timeout(before, c.send(body)).await {
            Err(_) => Ok(()),
            // The head came first after all: abandon the body instead.
            Ok(Ok(resp)) => {
                drop(resp);
                Ok(())
            }
            Ok(Err(e)) => Err(e),
        },
        Abandon::AfterHead(after) => {
            let resp = c.send(body).await?;
            if resp.status().as_u16() != 200 {
                let (status, _, messages) = McpClient::read(resp).await?;
                bail!("HTTP {status}: {}", clip(&messages.join(" ")));
            }
            tokio::time::sleep(after).await;
            drop(resp);
            Ok(())
        }
    }
}

/// A deliberate error: `test_error_handling` must give a tool result with
/// `isError`; a tool that does not exist, a JSON-RPC error.
async fn failing(c: &McpClient, seq: u64, tool_error: bool) -> Result<()> {
    let name = if tool_error {
        "test_error_handling"
    } else {
        "gantry_bench_no_such_tool"
    };
    let (status, _, messages) = c.post(call_body(seq, name, json!({}))).await?;
    if status != 200 {
        bail!("{name}: HTTP {status}: {}", clip(&messages.join(" ")));
    }
    match (tool_error, answer(seq, &messages)?) {
        (true, Answer::Result(r)) if r.is_error => Ok(()),
        (false, Answer::Error(_)) => Ok(()),
        (_, other) => bail!(
            "{name}: expected {}, got {}",
            if tool_error {
                "a tool result with isError"
            } else {
                "a JSON-RPC error"
            },
            other.describe()
        ),
    }
}

// ---------------------------------------------------------------------------------
// The process tree
// ---------------------------------------------------------------------------------

/// Open descriptors of a process, by what they are.
#[derive(Default)]
struct Fds {
    total: u64,
    sockets: u64,
    pipes: u64,
    anon: u64,
    other: u64,
}

/// Gantry's process tree at one instant.
#[derive(Default)]
struct Tree {
    supervisor_kib: u64,
    /// Live children of the supervisor (one: the worker).
    workers: usize,
    worker_kib: u64,
    /// The worker's `RssAnon` (heap, stacks) and `RssFile` (pages of its executable
    /// and libraries), in KiB.
    worker_anon_kib: u64,
    worker_file_kib: u64,
    /// Live children of the worker.
    backends: usize,
    /// Children of the worker that exited and were not reaped yet.
    zombies: usize,
    /// VmRSS of the backends and everything below them.
    backend_kib: u64,
    fds: Fds,
    threads: u64,
}

impl Tree {
    fn gantry_kib(&self) -> u64 {
        self.supervisor_kib + self.worker_kib
    }
}

/// Reads the tree below `supervisor` (one scan of `/proc`).
fn read_tree(supervisor: u32) -> Tree {
    let mut kids: HashMap<u32, Vec<(u32, bool)>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some(s) = proc::stat(pid) {
                kids.entry(s.ppid).or_default().push((pid, s.zombie));
            }
        }
    }
    let live = |p: u32| -> Vec<u32> {
        kids.get(&p)
            .map(|v| v.iter().filter(|k| !k.1).map(|k| k.0).collect())
            .unwrap_or_default()
    };
    let mut tree = Tree {
        supervisor_kib: proc::rss_kib(supervisor).unwrap_or(0),
        ..Tree::default()
    };
    let workers = live(supervisor);
    tree.workers = workers.len();
    let Some(&worker) = workers.first() else {
        return tree;
    };
    tree.worker_kib = proc::rss_kib(worker).unwrap_or(0);
    tree.fds = fds(worker);
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).unwrap_or_default();
    tree.threads = status_field(&status, "Threads:");
    tree.worker_anon_kib = status_field(&status, "RssAnon:");
    tree.worker_file_kib = status_field(&status, "RssFile:");
    let backends = live(worker);
    tree.backends = backends.len();
    tree.zombies = kids
        .get(&worker)
        .map_or(0, |v| v.iter().filter(|k| k.1).count());
    // Bounded: each pid has one parent, so each is visited once.
    let mut todo = backends;
    while let Some(p) = todo.pop() {
        tree.backend_kib += proc::rss_kib(p).unwrap_or(0);
        todo.extend(live(p));
    }
    tree
}

fn fds(pid: u32) -> Fds {
    let mut f = Fds::default();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return f;
    };
    for e in dir.flatten() {
        f.total += 1;
        let target = std::fs::read_link(e.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        if target.starts_with("socket:") {
            f.sockets += 1;
        } else if target.starts_with("pipe:") {
            f.pipes += 1;
        } else if target.starts_with("anon_inode:") {
            f.anon += 1;
        } else {
            f.other += 1;
        }
    }
    f
}

/// A number field of `/proc/<pid>/status` (`kB` dropped), 0 if absent.
fn status_field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_finds_the_slope() {
        let pts: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64, 100.0 + 2.0 * i as f64))
            .collect();
        let s = fit(&pts, 1.0, 0.0).unwrap();
        assert!((s.slope - 2.0).abs() < 1e-9);
        assert!(s.stderr < 1e-9);
        // 20 per 10 minutes against 1% of a mean of 109.
        assert!(!s.flat);
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 100.0)).collect();
        assert!(fit(&flat, 1.0, 0.0).unwrap().flat);
        assert!(fit(&pts[..2], 1.0, 0.0).is_none());
    }

    #[test]
    fn the_mix_draws_every_kind_but_session() {
        let mut rng = Rng::new(7);
        let mut seen = HashMap::new();
        for _ in 0..10_000 {
            *seen.entry(rng.pick().name()).or_insert(0u32) += 1;
        }
        assert!(!seen.contains_key("session"));
        assert_eq!(seen.len(), 5);
        assert!(seen["echo"] > 5000 && seen["echo"] < 7000);
    }
}
