//! The floor of a gateway: the least a relay must do to put one backend hop between a
//! client and the echo server, so that Gantry's rows can be read against what the hop
//! itself costs on this host (two more process wake-ups, two more copies, one more
//! HTTP or pipe exchange) rather than only against no hop at all.
//!
//! * `relay` (`--serve-relay stdio`): an HTTP server (axum, as Gantry and the direct
//!   server use, its connections served as Gantry serves its own: see
//!   [`serve_connections`]) in front of one stdio echo process shared by every client. Each
//!   request's `id` is replaced by a number of the relay's own (spliced into the
//!   original bytes: nothing is parsed beyond locating the id), written to the pipe,
//!   and the answer line gets the client's id back the same way.
//! * `relay-per-session` (`--serve-relay per-session`): the same, one echo process per
//!   session, started by its `initialize`, stopped by its DELETE.
//! * `relay-http` (`--serve-relay http --relay-to URL`): each request forwarded as it
//!   is to the direct server over a pool of keep-alive HTTP/1.1 connections, the
//!   answer returned as it came.
//!
//! None of them checks sessions, protocol versions, capabilities or limits, or
//! understands a notification: they are not gateways, only what a gateway cannot
//! avoid.

use crate::lean::LeanConn;
use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

/// How long the relay waits for its backend's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Lines queued for one backend's stdin.
const QUEUE: usize = 1024;
/// The longest answer line the relay reads.
const MAX_LINE: usize = 16 << 20;

/// Runs a relay of `kind` (`stdio`, `per-session`, `http`; `to`: the HTTP backend).
pub(crate) fn serve(kind: &str, to: Option<&str>) -> Result<()> {
    // Exit when the bench goes away (its end of our stdin closes).
    crate::on_stdin_end(exit_now)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async {
        let relay = match (kind, to) {
            ("stdio", _) => Relay::Shared(Backend::spawn()?),
            ("per-session", _) => Relay::PerSession(Mutex::default()),
            ("http", Some(url)) => Relay::Http {
                url: url.to_owned(),
                idle: Mutex::default(),
            },
            _ => anyhow::bail!("unknown relay `{kind}` (stdio, per-session, http --relay-to URL)"),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(post).delete(delete))
            .with_state(Arc::new(relay));
        eprintln!("relay listening on http://{addr}/mcp");
        // SIGTERM (the bench's stop) or Ctrl-C: the echo processes go first.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch SIGTERM")?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            exit_now();
        });
        serve_connections(listener, app).await
    })
}

/// Accepts connections and serves each on a task of its own, inside Gantry's
/// `AbsorbOwnWakes` as Gantry's own are: hyper's dispatcher wakes its own task on
/// every exchange, and a relay that paid for that (as `axum::serve` does) would put
/// the floor above what a gateway must spend.
async fn serve_connections(listener: tokio::net::TcpListener, app: axum::Router) -> Result<()> {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of descriptors, say: the connections open go on.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(gantry::front::own_wakes::AbsorbOwnWakes::new(async move {
            let io = hyper_util::rt::TokioIo::new(tcp);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        }));
    }
}

/// The echo processes alive, by pid. They end with their stdin, but only once they
/// notice; a relay that exits stops them first, so that nothing it started outlives it.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn children() -> std::sync::MutexGuard<'static, Vec<u32>> {
    CHILDREN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kills and reaps the echo processes, then exits.
fn exit_now() -> ! {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let pids = std::mem::take(&mut *children());
    for &pid in &pids {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    for pid in pids {
        // ECHILD if the runtime reaped it first: gone either way.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid as i32), None);
    }
    std::process::exit(0)
}

enum Relay {
    Shared(Arc<Backend>),
    PerSession(Mutex<HashMap<String, Arc<Backend>>>),
    Http {
        url: String,
        idle: Mutex<Vec<LeanConn>>,
    },
}

/// An answer line and where its `id` is in it.
type Answer = ((usize, usize), Vec<u8>);
/// The requests waiting for an answer, by the relay's id.
type Waiting = HashMap<u64, oneshot::Sender<Answer>>;

/// One stdio echo process: a writer task feeding its stdin, a reader task matching
/// its answers to the requests waiting for them.
struct Backend {
    lines: mpsc::Sender<Vec<u8>>,
    waiting: Arc<Mutex<Waiting>>,
    next: AtomicU64,
}

impl Backend {
    fn spawn() -> Result<Arc<Self>> {
        let exe = std::env::current_exe().context("cannot find the bench binary")?;
        let mut child = tokio::process::Command::new(exe)
            .arg("--serve-stdio-echo")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the echo backend")?;
        let pid = child.id();
        children().extend(pid);
        let mut stdin = child.stdin.take().context("no stdin pipe")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let (lines, mut rx) = mpsc::channel::<Vec<u8>>(QUEUE);
        let waiting: Arc<Mutex<Waiting>> = Arc::default();
        // Writes what is queued in one write when several lines wait.
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(line) = rx.recv().await {
                buf.clear();
                buf.extend_from_slice(&line);
                while let Ok(more) = rx.try_recv() {
                    buf.extend_from_slice(&more);
                }
                if stdin.write_all(&buf).await.is_err() {
                    break;
                }
            }
            // The process ends with its stdin; `kill_on_drop` covers the rest.
            drop(child);
            children().retain(|p| Some(*p) != pid);
        });
        let answers = waiting.clone();
        tokio::spawn(async move {
            let mut out = tokio::io::BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut out)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let Some((span, n)) =
                    id_of(&line).and_then(|(s, raw)| raw.get().parse::<u64>().ok().map(|n| (s, n)))
                else {
                    continue;
                };
                let Some(tx) = lock(&answers).remove(&n) else {
                    continue;
                };
                let _ = tx.send((span, std::mem::take(&mut line)));
            }
            // The process is gone: every waiting request fails now.
            lock(&answers).clear();
        });
        Ok(Arc::new(Self {
            lines,
            waiting,
            next: AtomicU64::new(1),
        }))
    }

    /// Relays one request whose `id` is at `span` of `body`; returns the answer with
    /// `id` (the client's, as written) in place of the relay's.
    async fn call(&self, body: &[u8], span: (usize, usize), id: &[u8]) -> Result<Vec<u8>, String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(mut line) = splice(body, span, n.to_string().as_bytes()) else {
            return Err("the id is not where it was found".into());
        };
        line.push(b'\n');
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(n, tx);
        if self.lines.send(line).await.is_err() {
            lock(&self.waiting).remove(&n);
            return Err("the backend is gone".into());
        }
        let ((start, end), answer) = match tokio::time::timeout(ANSWER_WITHIN, rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => return Err("the backend is gone".into()),
            Err(_) => {
                lock(&self.waiting).remove(&n);
                return Err("no answer in time".into());
            }
        };
        splice(answer.trim_ascii_end(), (start, end), id)
            .ok_or_else(|| "the answer's id is not where it was found".into())
    }

    /// A notification (or anything without an id): written as it is.
    async fn tell(&self, body: &[u8]) {
        let mut line = body.to_vec();
        line.push(b'\n');
        let _ = self.lines.send(line).await;
    }
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
}

/// Where a message's top-level `id` is (byte offsets into `bytes`) and what it is.
fn id_of(bytes: &[u8]) -> Option<((usize, usize), &RawValue)> {
    let head: Head<'_> = serde_json::from_slice(bytes).ok()?;
    let raw = head.id?;
    let start = (raw.get().as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
    Some(((start, start + raw.get().len()), raw))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn json(body: Vec<u8>, session: Option<String>) -> Response {
    let mut resp = (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Some(v) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        resp.headers_mut().insert("mcp-session-id", v);
    }
    resp
}

fn session_of(headers: &HeaderMap) -> Option<&str> {
    headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

static SESSIONS: AtomicU64 = AtomicU64::new(1);

async fn post(State(relay): State<Arc<Relay>>, headers: HeaderMap, body: Bytes) -> Response {
    let backend = match &*relay {
        Relay::Http { url, idle } => return forward(url, idle, Method::POST, &headers, body).await,
        Relay::Shared(b) => Some(b.clone()),
        Relay::PerSession(map) => session_of(&headers).and_then(|s| lock(map).get(s).cloned()),
    };
    let head: Option<Head<'_>> = serde_json::from_slice(&body).ok();
    let initialize = head
        .as_ref()
        .is_some_and(|h| h.method.as_deref() == Some("initialize"));
    let (backend, session) = match (backend, initialize, &*relay) {
        (_, true, Relay::PerSession(map)) => {
            let b = match Backend::spawn() {
                Ok(b) => b,
                Err(e) => return (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
            };
            let sid = format!("relay-{}", SESSIONS.fetch_add(1, Ordering::Relaxed));
            lock(map).insert(sid.clone(), b.clone());
            (b, Some(sid))
        }
        (Some(b), init, _) => (
            b,
            init.then(|| format!("relay-{}", SESSIONS.fetch_add(1, Ordering::Relaxed))),
        ),
        (None, ..) => return (StatusCode::NOT_FOUND, "unknown session").into_response(),
    };
    let Some((span, id)) = id_of(&body) else {
        backend.tell(&body).await;
        return StatusCode::ACCEPTED.into_response();
    };
    let id = id.get().as_bytes().to_vec();
    match backend.call(&body, span, &id).await {
        Ok(answer) => json(answer, session),
        Err(why) => (StatusCode::BAD_GATEWAY, why).into_response(),
    }
}

async fn delete(State(relay): State<Arc<Relay>>, headers: HeaderMap) -> Response {
    match &*relay {
        Relay::Http { url, idle } => {
            forward(url, idle, Method::DELETE, &headers, Bytes::new()).await
        }
        Relay::PerSession(map) => {
            // Dropping the last handle ends the writer task, and with it the process.
            match session_of(&headers).and_then(|s| lock(map).remove(s)) {
                Some(_) => StatusCode::NO_CONTENT.into_response(),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        }
        Relay::Shared(_) => StatusCode::NO_CONTENT.into_response(),
    }
}

/// One request to the HTTP backend on a kept connection (or a new one), its answer
/// returned as it came.
async fn forward(
    url: &str,
    idle: &Mutex<Vec<LeanConn>>,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let conn = lock(idle).pop();
    let conn = match conn.map_or_else(|| LeanConn::new(url, ANSWER_WITHIN), Ok) {
        Ok(c) => c,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
    };
    let mut pass: Vec<(&str, &str)> = Vec::with_capacity(4);
    for name in [
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
    ] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            pass.push((name, v));
        }
    }
    let answer = conn.send_bytes(method, &pass, body).await;
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
    };
    lock(idle).push(conn);
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let ct = if answer.sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut resp = (
        status,
        [(axum::http::header::CONTENT_TYPE, ct)],
        answer.body,
    )
        .into_response();
    if let Some(v) = answer.session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        resp.headers_mut().insert("mcp-session-id", v);
    }
    resp
}

/// `buf` with the bytes at `span` replaced by `with`; `None` if `span` is not in `buf`.
fn splice(buf: &[u8], (start, end): (usize, usize), with: &[u8]) -> Option<Vec<u8>> {
    let (head, tail) = (buf.get(..start)?, buf.get(end..)?);
    let mut out = Vec::with_capacity(buf.len() + with.len() + 1);
    out.extend_from_slice(head);
    out.extend_from_slice(with);
    out.extend_from_slice(tail);
    Some(out)
}
