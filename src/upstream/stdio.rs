//! Stdio backends: a supervised child process speaking newline-delimited JSON-RPC.
//!
//! The child runs in its own process group so that the grandchildren of launchers
//! like `npx` and `uvx` die with it; its environment is an explicit allow-list plus
//! configured variables (Gantry's own secrets never leak). Each stdout line is parsed
//! once; a line that is not JSON-RPC is logged and skipped. stderr goes to Gantry's
//! log under the backend's name. On exit, in-flight requests fail at once and the
//! child is restarted with exponential backoff and re-initialized.

use super::core::{Core, Outgoing, State, StdinSlot};
use super::handshake::handshake;
use super::supervise::Transport;
use crate::config::{RestartConfig, StdioConfig};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a child gets to exit after its stdin closes, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Longest stderr line logged (the rest is cut).
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Kills the child's whole process group when dropped, so no path (panic, abort,
/// early return) can leave a process behind.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        if let Some(pid) = self.0 {
            let _ = killpg(pid, sig);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

fn spawn(cfg: &StdioConfig) -> std::io::Result<Child> {
    let mut cmd = Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for k in &cfg.inherit_env {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd.envs(&cfg.env);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn()
}

/// Runs one stdio backend until `shutdown`: spawn, initialize, relay, restart.
pub(super) async fn supervise(
    core: Arc<Core>,
    cfg: StdioConfig,
    restart: RestartConfig,
    out_rx: mpsc::Receiver<Outgoing>,
    shutdown: CancellationToken,
) {
    super::supervise::supervise(core, ChildProcess(cfg), restart, out_rx, shutdown).await;
}

/// The stdio transport: each incarnation is a child process.
struct ChildProcess(StdioConfig);

impl Transport for ChildProcess {
    const RESTARTING: &'static str = "backend stopped; restarting";

    async fn run(
        &mut self,
        core: &Arc<Core>,
        gen: u64,
        out_rx: &mut mpsc::Receiver<Outgoing>,
        shutdown: &CancellationToken,
    ) -> Option<String> {
        let reason = run_once(core, &self.0, gen, out_rx, shutdown).await;
        (!shutdown.is_cancelled()).then_some(reason)
    }
}

/// One incarnation of the child. Returns why it ended.
async fn run_once(
    core: &Arc<Core>,
    cfg: &StdioConfig,
    gen: u64,
    out_rx: &mut mpsc::Receiver<Outgoing>,
    shutdown: &CancellationToken,
) -> String {
    let mut child = match spawn(cfg) {
        Ok(c) => c,
        Err(e) => return format!("cannot start `{}`: {e}", cfg.command),
    };
    let guard = GroupGuard(
        child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw),
    );
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return "child has no stdio pipes".into();
    };
    tracing::info!(backend = %core.name, pid = ?child.id(), command = %cfg.command, "backend process started");
    *core.stdin.lock().await = Some(StdinSlot { gen, w: stdin });
    let reader = tokio::spawn(read_stdout(core.clone(), gen, BufReader::new(stdout)));
    let name = core.name.clone();
    let stderr_task = tokio::spawn(log_stderr(name, BufReader::new(stderr)));
    let init_failed = CancellationToken::new();
    let init = {
        let core = core.clone();
        let init_failed = init_failed.clone();
        tokio::spawn(async move {
            match handshake(&core, gen).await {
                Ok(info) => {
                    // Written before the connection is marked ready, so no request can
                    // overtake it. (The stateless era has no handshake to complete.)
                    let note = crate::jsonrpc::Notification::new("notifications/initialized", None);
                    let sent = if info.is_stateless() {
                        Ok(())
                    } else {
                        core.write_direct(gen, &note.to_json()).await
                    };
                    if let Err(e) = sent {
                        tracing::warn!(backend = %core.name, error = %e, "backend initialization failed");
                        init_failed.cancel();
                        return;
                    }
                    tracing::info!(backend = %core.name, version = %info.protocol_version, era = %info.era, callers = %core.want, "backend initialized");
                    let _ = core.state.send_replace(State::Ready { gen, info });
                }
                Err(e) => {
                    tracing::warn!(backend = %core.name, error = %e, "backend initialization failed");
                    init_failed.cancel();
                }
            }
        })
    };
    let reason = loop {
        tokio::select! {
            status = child.wait() => {
                break match status {
                    Ok(s) => format!("process exited ({s})"),
                    Err(e) => format!("cannot wait for process: {e}"),
                };
            }
            _ = shutdown.cancelled() => {
                // What was queued before the end still goes out (a cancellation of
                // the request whose end stopped the connection, say).
                while let Ok(msg) = out_rx.try_recv() {
                    if msg.gen == gen && core.write_direct(gen, &msg.line).await.is_err() {
                        break;
                    }
                }
                let stdin = core.stdin.lock().await.take().map(|s| s.w);
                stop_gracefully(&mut child, &guard, stdin).await;
                break "shut down".into();
            }
            _ = init_failed.cancelled() => {
                let stdin = core.stdin.lock().await.take().map(|s| s.w);
                stop_gracefully(&mut child, &guard, stdin).await;
                break "initialization failed".into();
            }
            msg = out_rx.recv() => {
                let Some(msg) = msg else { break "connection dropped".into() };
                if msg.gen != gen { continue; }
                if let Err(e) = core.write_direct(gen, &msg.line).await {
                    tracing::warn!(backend = %core.name, error = %e, "cannot write to backend stdin");
                }
            }
        }
    };
    init.abort();
    drop(core.stdin.lock().await.take());
    // Let the reader drain what the child wrote before it died (its last responses).
    let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
    stderr_task.abort();
    // The group may still hold grandchildren; the guard's drop kills them.
    drop(guard);
    reason
}

async fn stop_gracefully(child: &mut Child, guard: &GroupGuard, stdin: Option<ChildStdin>) {
    drop(stdin);
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    guard.signal(Signal::SIGTERM);
    if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_ok() {
        return;
    }
    guard.signal(Signal::SIGKILL);
    let _ = child.wait().await;
}

/// What one bounded line read produced.
enum Line {
    Data,
    TooLong(usize),
    Eof,
}

/// Reads one `\n`-terminated line into `buf` (without the newline), discarding any
/// line longer than `max` bytes instead of buffering it.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut discarded = 0usize;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if discarded > 0 {
                Line::TooLong(discarded)
            } else if buf.is_empty() {
                Line::Eof
            } else {
                Line::Data
            });
        }
        let (part, found) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (chunk.get(..i).unwrap_or_default(), Some(i + 1)),
            None => (chunk, None),
        };
        if discarded > 0 || buf.len() + part.len() > max {
            discarded += buf.len() + part.len();
            buf.clear();
        } else {
            buf.extend_from_slice(part);
        }
        let used = found.unwrap_or(chunk.len());
        r.consume(used);
        if found.is_some() {
            return Ok(if discarded > 0 {
                Line::TooLong(discarded)
            } else {
                Line::Data
            });
        }
    }
}

async fn read_stdout<R: AsyncBufRead + Unpin>(core: Arc<Core>, gen: u64, mut r: R) {
    let mut buf = Vec::new();
    loop {
        match read_line_bounded(&mut r, &mut buf, core.max_message_bytes).await {
            Ok(Line::Eof) => break,
            Ok(Line::TooLong(n)) => {
                tracing::warn!(backend = %core.name, bytes = n, limit = core.max_message_bytes,
                    "backend message larger than max_message_bytes; skipped");
            }
            Ok(Line::Data) => {
                let line = buf.strip_suffix(b"\r").unwrap_or(&buf);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match crate::jsonrpc::Incoming::parse(line) {
                    Ok(crate::jsonrpc::Incoming::Single(m)) => core.incoming(gen, m, None),
                    Ok(crate::jsonrpc::Incoming::Batch(ms)) => {
                        for m in ms {
                            core.incoming(gen, m, None);
                        }
                    }
                    Err(e) => {
                        let shown = String::from_utf8_lossy(line.get(..200).unwrap_or(line));
                        tracing::warn!(backend = %core.name, error = %e, line = %shown,
                            "backend wrote a line to stdout that is not JSON-RPC; skipped");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(backend = %core.name, error = %e, "cannot read backend stdout");
                break;
            }
        }
    }
}

async fn log_stderr<R: AsyncBufRead + Unpin>(name: String, mut r: R) {
    let mut buf = Vec::new();
    while let Ok(Line::Data | Line::TooLong(_)) =
        read_line_bounded(&mut r, &mut buf, MAX_STDERR_LINE).await
    {
        if !buf.is_empty() {
            tracing::info!(backend = %name, "stderr: {}", String::from_utf8_lossy(&buf));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test]
    async fn bounded_lines() {
        let data = b"short\nthis line is far too long\nok\nlast-no-newline".to_vec();
        let mut r = BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line_bounded(&mut r, &mut buf, 10).await.unwrap(),
            Line::Data
        ));
        assert_eq!(buf, b"short");
        assert!(matches!(
            read_line_bounded(&mut r, &mut buf, 10).await.unwrap(),
            Line::TooLong(_)
        ));
        assert!(matches!(
            read_line_bounded(&mut r, &mut buf, 10).await.unwrap(),
            Line::Data
        ));
        assert_eq!(buf, b"ok");
        assert!(matches!(
            read_line_bounded(&mut r, &mut buf, 100).await.unwrap(),
            Line::Data
        ));
        assert_eq!(buf, b"last-no-newline");
        assert!(matches!(
            read_line_bounded(&mut r, &mut buf, 10).await.unwrap(),
            Line::Eof
        ));
    }
}
