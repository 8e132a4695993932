//! Stdio backends: a supervised child process speaking newline-delimited JSON-RPC.
//!
//! The child runs in its own process group so that the grandchildren of launchers
//! like `npx` and `uvx` die with it; its environment is an explicit allow-list plus
//! configured variables (Gantry's own secrets never leak). Each stdout line is parsed
//! once; a line that is not JSON-RPC is logged and skipped. stderr goes to Gantry's
//! log under the backend's name. On exit, in-flight requests fail at once and the
//! child is restarted with exponential backoff and re-initialized.

use super::core::{Core, Outgoing, State, StdinSlot};
use super::error::UpstreamError;
use super::handshake::handshake;
use super::lines::{Line, LineReader};
use super::pipes::PipeRoom;
use super::stats::Exit;
use super::supervise::Transport;
use crate::config::{RestartConfig, StdioConfig};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncRead;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a child gets to exit after its stdin closes, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// After a child closes its stdout, how long it may take to exit by itself before it
/// is stopped (it can no longer answer anything).
const STDOUT_EOF_GRACE: Duration = Duration::from_millis(500);
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
    let stdout_room = PipeRoom::new(stdout.as_raw_fd());
    let room = PipeRoom::new(stdin.as_raw_fd());
    *core.stdin.lock().await = Some(StdinSlot {
        gen,
        w: stdin,
        room,
        torn: false,
    });
    let stdout_closed = CancellationToken::new();
    let reader = tokio::spawn(read_stdout(
        core.clone(),
        gen,
        LineReader::new(stdout),
        Some(stdout_room),
        stdout_closed.clone(),
    ));
    let name = core.name.clone();
    let tail = Arc::new(parking_lot::Mutex::new(std::collections::VecDeque::new()));
    let stderr_task = tokio::spawn(log_stderr(name, LineReader::new(stderr), tail.clone()));
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
                        core.write_direct(gen, &mut note.to_json()).await
                    };
                    if let Err(e) = sent {
                        tracing::warn!(backend = %core.name, error = %e, "backend initialization failed");
                        init_failed.cancel();
                        return;
                    }
                    tracing::info!(backend = %core.name, version = %info.protocol_version, era = %info.era, callers = %core.want, "backend initialized");
                    let _ = core.state.send_replace(State::Ready { gen, info });
                    core.stats.mark_ready();
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
                core.stats.exited(Exit::of(&status));
                break exit_reason(&status);
            }
            _ = shutdown.cancelled() => {
                // What was queued before the end still goes out (a cancellation of
                // the request whose end stopped the connection, say).
                while let Ok(mut msg) = out_rx.try_recv() {
                    if msg.gen == gen && core.write_direct(gen, &mut msg.line).await.is_err() {
                        break;
                    }
                }
                let stdin = core.stdin.lock().await.take().map(|s| s.w);
                stop_gracefully(&mut child, &guard, stdin).await;
                core.stats.exited(Exit::Stopped);
                break "shut down".into();
            }
            _ = stdout_closed.cancelled() => {
                // Usually the child is exiting; if it lingers with its stdout closed it
                // can never answer again: stop it (in-flight calls fail at once).
                if let Ok(status) = tokio::time::timeout(STDOUT_EOF_GRACE, child.wait()).await {
                    core.stats.exited(Exit::of(&status));
                    break exit_reason(&status);
                }
                let stdin = core.stdin.lock().await.take().map(|s| s.w);
                stop_gracefully(&mut child, &guard, stdin).await;
                core.stats.exited(Exit::Stopped);
                break "the process closed its stdout (it can no longer answer); stopped".into();
            }
            _ = init_failed.cancelled() => {
                // A handshake that failed because the child died (its stdin closed):
                // the exit says why, not the handshake.
                if let Ok(status) = tokio::time::timeout(INIT_EXIT_GRACE, child.wait()).await {
                    core.stats.exited(Exit::of(&status));
                    break exit_reason(&status);
                }
                let stdin = core.stdin.lock().await.take().map(|s| s.w);
                stop_gracefully(&mut child, &guard, stdin).await;
                core.stats.exited(Exit::Stopped);
                break "initialization failed".into();
            }
            msg = out_rx.recv() => {
                let Some(mut msg) = msg else {
                    // The guard's drop below kills the group.
                    core.stats.exited(Exit::Stopped);
                    break "connection dropped".into()
                };
                if msg.gen != gen { continue; }
                if let Err(e) = core.write_direct(gen, &mut msg.line).await {
                    tracing::warn!(backend = %core.name, error = %e, "cannot write to backend stdin");
                }
            }
        }
    };
    init.abort();
    drop(core.stdin.lock().await.take());
    // Let the reader drain what the child wrote before it died (its last responses).
    let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
    // Its last lines (and a summary of any it left out), unless a grandchild keeps
    // stderr open.
    let mut stderr_task = stderr_task;
    if tokio::time::timeout(Duration::from_millis(200), &mut stderr_task)
        .await
        .is_err()
    {
        stderr_task.abort();
    }
    // The group may still hold grandchildren; the guard's drop kills them.
    drop(guard);
    // Why a backend could not start is usually in its last stderr lines: keep them
    // for the clients that will be told it is unavailable.
    let was_ready = matches!(&*core.state.borrow(), State::Ready { gen: g, .. } if *g == gen);
    *core.start_stderr.lock() = if was_ready || shutdown.is_cancelled() {
        Vec::new()
    } else {
        tail.lock().iter().cloned().collect()
    };
    reason
}

/// Stops the child: stdin closed, then SIGTERM to its group, then SIGKILL; and
/// its descendants that left the group (`setsid`, daemons), found while the tree
/// is still whole, SIGTERM then SIGKILL.
async fn stop_gracefully(child: &mut Child, guard: &GroupGuard, stdin: Option<ChildStdin>) {
    let family = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(crate::process_tree::descendants)
        .unwrap_or_default();
    drop(stdin);
    if tokio::time::timeout(EXIT_GRACE, child.wait())
        .await
        .is_err()
    {
        guard.signal(Signal::SIGTERM);
        if tokio::time::timeout(EXIT_GRACE, child.wait())
            .await
            .is_err()
        {
            guard.signal(Signal::SIGKILL);
            let _ = child.wait().await;
        }
    }
    guard.signal(Signal::SIGKILL);
    crate::process_tree::stop_all(&family, EXIT_GRACE).await;
}

/// The upstream id of the response a discarded line was, when that can be told
/// without doubt: a top-level `"result"` or `"error"` (and no `"method"`) among the
/// first keys, and the id either among them or as the line's very last member
/// (`…,"id":7}`, the order the TypeScript SDK writes). Anything else: `None`, never
/// a guess, so no other call can be failed by mistake.
fn oversize_answer_id(head: &[u8], tail: &[u8]) -> Option<u64> {
    let keys = top_level_keys(head);
    let is_answer = keys.iter().any(|(k, _)| k == "result" || k == "error")
        && !keys.iter().any(|(k, _)| k == "method");
    if !is_answer {
        return None;
    }
    if let Some((_, id)) = keys.iter().find(|(k, _)| k == "id") {
        return *id;
    }
    // The tail: `"id"` `:` digits `}` and nothing after (whitespace aside).
    let t = std::str::from_utf8(tail).ok()?.trim_end();
    let t = t.strip_suffix('}')?.trim_end();
    let digits_at = t.rfind(|c: char| !c.is_ascii_digit())? + 1;
    let id = t.get(digits_at..)?.parse::<u64>().ok()?;
    let before = t.get(..digits_at)?.trim_end().strip_suffix(':')?.trim_end();
    before.ends_with("\"id\"").then_some(id)
}

/// The top-level keys of a JSON object's beginning (as far as `head` goes), each with
/// its value when that is a plain unsigned integer.
fn top_level_keys(head: &[u8]) -> Vec<(String, Option<u64>)> {
    let mut keys = Vec::new();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while head.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    // A string starting at `i` (on its quote): its raw text and the index after it.
    let string_at = |i: usize| -> Option<(String, usize)> {
        let mut j = i + 1;
        let mut out = Vec::new();
        loop {
            match head.get(j)? {
                b'"' => return Some((String::from_utf8(out).ok()?, j + 1)),
                b'\\' => {
                    out.push(*head.get(j + 1)?);
                    j += 2;
                }
                b => {
                    out.push(*b);
                    j += 1;
                }
            }
        }
    };
    skip_ws(&mut i);
    if head.get(i) != Some(&b'{') {
        return keys;
    }
    i += 1;
    loop {
        skip_ws(&mut i);
        if head.get(i) != Some(&b'"') {
            return keys;
        }
        let Some((key, next)) = string_at(i) else {
            return keys;
        };
        i = next;
        skip_ws(&mut i);
        if head.get(i) != Some(&b':') {
            return keys;
        }
        i += 1;
        skip_ws(&mut i);
        // The value: a number is read, anything else skipped (nesting and strings).
        let start = i;
        let mut depth = 0usize;
        loop {
            match head.get(i) {
                None => {
                    keys.push((key, None));
                    return keys;
                }
                Some(b'"') => match string_at(i) {
                    Some((_, next)) => i = next,
                    None => {
                        keys.push((key, None));
                        return keys;
                    }
                },
                Some(b'{' | b'[') => {
                    depth += 1;
                    i += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                Some(b',' | b'}') if depth == 0 => break,
                Some(_) => i += 1,
            }
        }
        let number = std::str::from_utf8(head.get(start..i).unwrap_or_default())
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        keys.push((key, number));
        if head.get(i) == Some(&b'}') {
            return keys;
        }
        i += 1;
    }
}

/// How much of a backend's noise reaches Gantry's log: at most `per_window` lines per
/// `WINDOW`, then one summary of how many were left out. A backend that writes junk
/// in a loop cannot flood the log (or the disk behind it).
struct Noise {
    what: &'static str,
    per_window: u32,
    started: tokio::time::Instant,
    logged: u32,
    suppressed: u64,
}

const NOISE_WINDOW: Duration = Duration::from_secs(10);

impl Noise {
    fn new(what: &'static str, per_window: u32) -> Self {
        Self {
            what,
            per_window,
            started: tokio::time::Instant::now(),
            logged: 0,
            suppressed: 0,
        }
    }

    /// Whether this line may be logged (a summary of what was left out is logged
    /// first when a new window starts).
    fn allow(&mut self, backend: &str) -> bool {
        if self.started.elapsed() >= NOISE_WINDOW {
            self.flush(backend);
            self.started = tokio::time::Instant::now();
            self.logged = 0;
        }
        if self.logged < self.per_window {
            self.logged += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// Logs how many lines were left out, if any.
    fn flush(&mut self, backend: &str) {
        if self.suppressed > 0 {
            tracing::warn!(
                backend,
                lines = self.suppressed,
                what = self.what,
                "backend noise not logged (more than {} lines in {}s)",
                self.per_window,
                NOISE_WINDOW.as_secs()
            );
            self.suppressed = 0;
        }
    }
}

/// How long a child whose handshake failed gets to show that it exited.
const INIT_EXIT_GRACE: Duration = Duration::from_millis(200);

/// Why an incarnation ended, from its exit.
fn exit_reason(status: &std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(s) => format!("process exited ({s})"),
        Err(e) => format!("cannot wait for process: {e}"),
    }
}

/// One line of the child's stdout (`taken`: the same, as the buffer it came in, whose
/// large values are then relayed without a copy): its messages go to `core`.
fn deliver(
    core: &Arc<Core>,
    gen: u64,
    room: &mut Option<PipeRoom>,
    noise: &mut Noise,
    line: &[u8],
    taken: Option<&bytes::Bytes>,
) {
    core.stats.bytes(true, line.len() + 1);
    if let Some(room) = room {
        // The next answer this large crosses the pipe in one piece.
        room.fit(line.len() + 1);
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let parsed = match taken {
        Some(buf) => crate::jsonrpc::Incoming::parse_shared(buf.slice(..line.len())),
        None => crate::jsonrpc::Incoming::parse(line),
    };
    match parsed {
        Ok(crate::jsonrpc::Incoming::Single(m)) => core.incoming(gen, m, None),
        Ok(crate::jsonrpc::Incoming::Batch(ms)) => {
            for m in ms {
                core.incoming(gen, m, None);
            }
        }
        Err(_) if !noise.allow(&core.name) => {}
        Err(e) => {
            let shown = String::from_utf8_lossy(line.get(..200).unwrap_or(line));
            tracing::warn!(backend = %core.name, error = %e, line = %shown,
                "backend wrote a line to stdout that is not JSON-RPC; skipped");
        }
    }
}

/// Reads the child's stdout until it closes; cancels `closed` then. An answer larger
/// than the pipe grows it (`room`) for the next one.
async fn read_stdout<R: AsyncRead + Unpin>(
    core: Arc<Core>,
    gen: u64,
    mut r: LineReader<R>,
    mut room: Option<PipeRoom>,
    closed: CancellationToken,
) {
    let _closed = closed.drop_guard();
    let mut noise = Noise::new("stdout lines that are not JSON-RPC", 20);
    loop {
        match r.next(core.max_message_bytes).await {
            Ok(Line::Eof) => break,
            Ok(Line::TooLong(o)) => {
                core.stats.bytes(true, o.bytes);
                let limit = core.max_message_bytes;
                match oversize_answer_id(&o.head, &o.tail) {
                    Some(id) if core.is_pending(id) => {
                        tracing::warn!(backend = %core.name, bytes = o.bytes, limit,
                            "backend answer larger than max_message_bytes; its call fails");
                        core.fail_request(
                            id,
                            UpstreamError::Protocol {
                                backend: core.name.clone(),
                                reason: format!(
                                    "its answer is {} bytes, more than max_message_bytes ({limit})",
                                    o.bytes
                                ),
                            },
                        );
                    }
                    _ if noise.allow(&core.name) => tracing::warn!(backend = %core.name,
                        bytes = o.bytes, limit, "backend message larger than max_message_bytes; skipped"),
                    _ => {}
                }
            }
            Ok(Line::Data(line)) => deliver(&core, gen, &mut room, &mut noise, line, None),
            Ok(Line::Taken(line)) => deliver(&core, gen, &mut room, &mut noise, &line, Some(&line)),
            Err(e) => {
                tracing::warn!(backend = %core.name, error = %e, "cannot read backend stdout");
                break;
            }
        }
    }
    noise.flush(&core.name);
}

/// Lines of stderr kept for a start-up failure's error, and the length of each.
const STDERR_TAIL_LINES: usize = 10;
const STDERR_TAIL_LINE: usize = 400;

async fn log_stderr<R: AsyncRead + Unpin>(
    name: String,
    mut r: LineReader<R>,
    tail: Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>,
) {
    let mut noise = Noise::new("stderr lines", 200);
    loop {
        // A line over the limit shows its beginning.
        let over;
        let taken;
        let bytes = match r.next(MAX_STDERR_LINE).await {
            Ok(Line::Data(line)) => line,
            Ok(Line::Taken(line)) => {
                taken = line;
                &taken
            }
            Ok(Line::TooLong(o)) => {
                over = o;
                &over.head
            }
            Ok(Line::Eof) | Err(_) => break,
        };
        if bytes.is_empty() {
            continue;
        }
        let line = String::from_utf8_lossy(bytes);
        {
            let mut t = tail.lock();
            if t.len() == STDERR_TAIL_LINES {
                t.pop_front();
            }
            let mut kept: String = line.chars().take(STDERR_TAIL_LINE).collect();
            if kept.len() < line.len() {
                kept.push('…');
            }
            t.push_back(kept);
        }
        if noise.allow(&name) {
            tracing::info!(backend = %name, "stderr: {line}");
        }
    }
    noise.flush(&name);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn an_oversize_answer_is_attributed_only_without_doubt() {
        let cases: [(&str, &str, Option<u64>); 9] = [
            // Python SDK order: id first.
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"xxxx"#,
                "",
                Some(7),
            ),
            (
                r#"{ "jsonrpc" : "2.0" , "id" : 12 , "error" : {"code":1,"message":"xx"#,
                "",
                Some(12),
            ),
            // TypeScript SDK order: result first, id last.
            (
                r#"{"result":{"content":[{"type":"text","text":"yyyy"#,
                r#"yyyy"}]},"jsonrpc":"2.0","id":9}"#,
                Some(9),
            ),
            (r#"{"result":{"a":"#, "xx\"}}, \"id\": 9 }  ", Some(9)),
            // A nested id is not the answer's.
            (r#"{"result":{"a":"#, r#"x","item":{"id":5}}}"#, None),
            // A request from the backend (its own id space): never.
            (
                r#"{"method":"sampling/createMessage","params":{"messages":"#,
                r#"x"}]},"jsonrpc":"2.0","id":3}"#,
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"roots/list","params":{"#,
                "",
                None,
            ),
            // Not JSON, or no id to be found.
            ("xxxxxxxxxxxxxxxxxx", "xxxxxxxx", None),
            (r#"{"jsonrpc":"2.0","result":{"big":"#, r#"x"}}"#, None),
        ];
        for (head, tail, want) in cases {
            assert_eq!(
                oversize_answer_id(head.as_bytes(), tail.as_bytes()),
                want,
                "{head} … {tail}"
            );
        }
    }
}
