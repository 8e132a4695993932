//! The transport-independent half of a backend connection: id allocation, the pending
//! table, progress-token rewriting, attribution of backend→client traffic, and the
//! connection state that requests wait on while a backend (re)starts. The handshake
//! (`handshake`), the era bridge (`bridge`), the listen stream of a stateless-era
//! backend (`listen`) and the public [`super::Conn`] (`conn`) are its siblings.

use super::error::UpstreamError;
use super::pending::{Pending, PendingTable};
use crate::call::Sink;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{to_raw, Notification, RequestId, Response};
use crate::mcp::Era;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// Capacity of the queue of messages waiting to be written to one backend.
pub(super) const OUTGOING_QUEUE: usize = 1024;
/// How long an HTTP backend's response stream may stay open after it carried the
/// answer: read to its end meanwhile (its connection is kept), closed after.
const STREAM_DRAIN: Duration = Duration::from_secs(2);
/// Largest upstream id before wrapping (JavaScript peers lose precision above 2^53).
const MAX_UPSTREAM_ID: u64 = (1 << 53) - 1;

/// What a backend said about itself in its `initialize` result.
#[derive(Debug)]
pub struct InitInfo {
    /// The protocol version the backend agreed to.
    pub protocol_version: String,
    /// The whole `initialize` result (capabilities, serverInfo, instructions …); for
    /// a stateless-era backend, the same shape built from its `server/discover`.
    pub result: serde_json::Value,
    /// The era this connection speaks: the stateless era (2026-07-28) means every
    /// request carries the client's `_meta` and there is no session.
    pub era: Era,
}

impl InitInfo {
    /// Whether the connection speaks the stateless era.
    pub fn is_stateless(&self) -> bool {
        self.era == Era::Stateless
    }

    /// The backend's declared capabilities (an object, possibly empty).
    pub fn capabilities(&self) -> &serde_json::Value {
        self.result
            .get("capabilities")
            .unwrap_or(&serde_json::Value::Null)
    }
}

/// Where a connection is in its life.
#[derive(Clone)]
pub(crate) enum State {
    /// Starting or restarting; requests wait.
    Starting,
    /// Initialized: requests flow, tagged with this incarnation.
    Ready { gen: u64, info: Arc<InitInfo> },
    /// A ready incarnation broke; the next one follows after the backoff. Requests
    /// wait for it (up to the init timeout): a crash fails only the calls in flight.
    Restarting {
        reason: String,
        /// When the next incarnation starts.
        at: tokio::time::Instant,
    },
    /// The last attempt failed before it was ready (start-up, handshake); a retry is
    /// scheduled. Requests fail at once with the reason.
    Failed { reason: String },
    /// Being stopped for `idle_timeout`; requests wait, then find it parked.
    Stopping,
    /// Stopped after `idle_timeout` without a request; the next request starts it
    /// again (and waits for it).
    Parked,
    /// Shut down for good.
    Closed,
}

/// A message on its way to the backend, tagged with the incarnation it belongs to:
/// a message for an incarnation that has died is dropped, never sent to its successor.
pub(crate) struct Outgoing {
    pub gen: u64,
    pub line: String,
    /// HTTP only: a large request's params, sent as they are after `line` (then the
    /// head of the request's envelope) and before [`crate::jsonrpc::REQUEST_END`].
    pub params: Option<bytes::Bytes>,
    /// For requests: the upstream id (HTTP uses it to attribute the response stream).
    pub request_id: Option<u64>,
    /// HTTP only: headers that go with this message (`Mcp-Param-*`).
    pub headers: ExtraHeaders,
}

/// Params on their way to a backend.
pub(crate) enum OutParams {
    /// Checked JSON text (a client's, or serialized by serde), or none.
    Checked(Option<Raw>),
    /// An object Gantry wrote itself around checked text (keys quoted by
    /// [`crate::jsonrpc::push_json_string`], values copied from checked text): valid
    /// by construction, so not parsed again to make a [`Raw`](crate::jsonrpc::Raw) of it.
    /// `progress`: whether its `_meta` holds a progress token, as the writer knows
    /// from what it copied.
    Written { text: String, progress: bool },
}

impl OutParams {
    /// The params' text, owned, without a copy.
    fn into_bytes(self) -> bytes::Bytes {
        match self {
            OutParams::Checked(Some(p)) => p.into_bytes(),
            OutParams::Checked(None) => bytes::Bytes::new(),
            OutParams::Written { text, .. } => bytes::Bytes::from(text),
        }
    }
}

impl From<Option<Raw>> for OutParams {
    fn from(p: Option<Raw>) -> Self {
        OutParams::Checked(p)
    }
}

/// Headers a request carries to an HTTP backend beside the connection's own (the
/// stateless era's `Mcp-Method` / `Mcp-Name` / `Mcp-Param-*`, trace context), made
/// and checked once where they are known.
pub(crate) type ExtraHeaders = Vec<(http::HeaderName, http::HeaderValue)>;

/// The shared state of one backend connection.
pub(crate) struct Core {
    pub name: String,
    pub(super) next_id: AtomicU64,
    pub(super) pending: PendingTable,
    pub(super) asks: Mutex<HashMap<String, AbortHandle>>,
    pub out: mpsc::Sender<Outgoing>,
    pub state: watch::Sender<State>,
    /// The incarnation messages may be sent to now (0 while none is alive). Set before
    /// an incarnation's pending requests are failed, so no request can slip between.
    pub live_gen: AtomicU64,
    pub(super) owner: Mutex<Option<Sink>>,
    /// In-flight limit: permits, the limit, and how many wait for one.
    pub(super) slots: Option<(tokio::sync::Semaphore, usize)>,
    pub(super) queue: usize,
    pub(super) waiting: std::sync::atomic::AtomicUsize,
    pub started: tokio::time::Instant,
    /// The params of the `initialize` Gantry sends on every (re)start.
    pub init_params: Raw,
    /// Which era the backend speaks, as configured (`auto`: find out).
    pub era: crate::config::Era,
    /// The era of the callers this connection is for: spoken when the backend
    /// speaks it (translation only when it does not).
    pub want: Era,
    pub request_timeout: Duration,
    pub init_timeout: Duration,
    pub max_message_bytes: usize,
    /// Counters shared by every connection of this backend.
    pub stats: Arc<super::stats::BackendStats>,
    /// Stdio only: the live child's stdin. Requests are written here by the calling
    /// task itself (no hop through the writer task); other messages go through `out`.
    pub stdin: tokio::sync::Mutex<Option<StdinSlot>>,
    pub(super) direct: bool,
    /// HTTP only: the live incarnation's session. Requests are POSTed by the calling
    /// task itself (no hop through the connection task, no task per POST); other
    /// messages go through `out`.
    pub(super) http: parking_lot::RwLock<Option<(u64, Arc<super::http::Session>)>>,
    /// Stateless-era backends: the resources clients subscribed to (the backend's
    /// `subscriptions/listen` asks for their updates), and a nudge when they change.
    pub(super) listen_uris: Mutex<std::collections::BTreeSet<String>>,
    pub(super) listen_changed: tokio::sync::Notify,
    /// Bumped (under `listen_uris`) on every change of the subscribed resources;
    /// and the version the backend last acknowledged a listen stream of (a
    /// subscription is in force once acknowledged).
    pub(super) listen_version: AtomicU64,
    pub(super) listen_acked: watch::Sender<u64>,
    /// Stateless-era HTTP backends: their tools' `Mcp-Param-*` declarations,
    /// listed again after a `tools/list_changed`.
    pub(super) tool_headers: crate::mcp::param::ToolCache,
    /// What the backend last listed (the merged catalog's cache).
    pub(super) lists: super::lists::ListCache,
    /// Stdio: the last stderr lines of the latest incarnation that ended before it
    /// was ready (empty once one was), for the error clients get.
    pub(super) start_stderr: Mutex<Vec<String>>,
    /// The era of a handshake attempt that is not the last to try, while it is
    /// unanswered: a stdio backend that dies meanwhile died of it, and its
    /// supervisor restarts it at once for the other era, without a failure between.
    pub(super) probing: Mutex<Option<Era>>,
    /// `idle_timeout`: stopping the connection when idle, starting it on demand.
    pub(crate) idle: Option<super::idle::IdleStop>,
    /// Whether the connection holds a place under `pool.max_connections` (not while
    /// parked), and that cap.
    pub(super) reserved: std::sync::atomic::AtomicBool,
    pub(super) max_connections: usize,
}

/// The stdin of one incarnation of a stdio backend.
pub(crate) struct StdinSlot {
    pub gen: u64,
    pub w: tokio::process::ChildStdin,
    /// Room in the pipe behind `w`, grown for a message larger than it.
    pub room: super::pipes::PipeRoom,
    /// A write was cut short (its call timed out or was cancelled while the pipe was
    /// full): part of a line is in the pipe, to be ended before the next message.
    pub torn: bool,
}

impl Core {
    pub(super) fn set_probing(&self, era: Option<Era>) {
        *self.probing.lock() = era;
    }

    /// The era whose handshake the last incarnation died of, if it did (and
    /// forgets it). The backend does not speak it: recorded here.
    pub(crate) fn take_probe_death(&self) -> Option<Era> {
        let era = self.probing.lock().take()?;
        self.stats.eras.set(era, false);
        Some(era)
    }

    pub(super) fn next_id(&self) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if id >= MAX_UPSTREAM_ID {
            self.next_id.store(1, Ordering::Relaxed);
        }
        id % MAX_UPSTREAM_ID
    }

    pub(crate) fn unavailable(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Unavailable {
            backend: self.name.clone(),
            reason: reason.into(),
            stderr: Vec::new(),
        }
    }

    /// The incarnation and its handshake when the backend is ready now.
    pub(super) fn ready_now(&self) -> Option<(u64, Arc<InitInfo>)> {
        match &*self.state.borrow() {
            State::Ready { gen, info } => Some((*gen, info.clone())),
            _ => None,
        }
    }

    /// Waits until the connection is ready (or fails), bounded by the init timeout.
    pub(super) async fn wait_ready(
        &self,
        cancel: &CancellationToken,
    ) -> Result<(u64, Arc<InitInfo>), UpstreamError> {
        // Almost always: ready, answered without a subscription or a timer.
        if let Some(ready) = self.ready_now() {
            return Ok(ready);
        }
        let mut rx = self.state.subscribe();
        // Why the backend is restarting, for the error if it is not back in time.
        let mut restarting: Option<String> = None;
        let outcome = {
            let wait = async {
                loop {
                    let st = rx.borrow_and_update().clone();
                    match st {
                        State::Ready { gen, info } => return Ok((gen, info)),
                        State::Failed { reason } => {
                            let mut e = self.unavailable(reason);
                            if let UpstreamError::Unavailable { stderr, .. } = &mut e {
                                stderr.clone_from(&self.start_stderr.lock());
                            }
                            return Err(e);
                        }
                        State::Closed => {
                            return Err(UpstreamError::Closed {
                                backend: self.name.clone(),
                            })
                        }
                        State::Restarting { reason, at } => {
                            // Not back within the init timeout anyway: say so now.
                            let wait = at.saturating_duration_since(tokio::time::Instant::now());
                            if wait >= self.init_timeout {
                                return Err(self.unavailable(format!(
                                    "restarting in {} ({reason})",
                                    crate::telemetry::human(wait)
                                )));
                            }
                            restarting = Some(reason);
                        }
                        State::Parked => self.unpark()?,
                        State::Starting | State::Stopping => {}
                    }
                    if rx.changed().await.is_err() {
                        return Err(UpstreamError::Closed {
                            backend: self.name.clone(),
                        });
                    }
                }
            };
            tokio::select! {
                r = wait => Some(r),
                _ = tokio::time::sleep(self.init_timeout) => None,
                _ = cancel.cancelled() => return Err(UpstreamError::Cancelled),
            }
        };
        outcome.unwrap_or_else(|| {
            let after = crate::telemetry::human(self.init_timeout);
            Err(self.unavailable(match restarting {
                Some(why) => format!("not ready after {after} (restarting: {why})"),
                None => format!("not ready after {after}"),
            }))
        })
    }

    /// A request for a parked connection: takes its place under
    /// `pool.max_connections` back (the first such request does) and wakes it.
    fn unpark(&self) -> Result<(), UpstreamError> {
        let Some(idle) = &self.idle else {
            return Ok(());
        };
        if self
            .reserved
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            if !self.stats.try_reserve(self.max_connections) {
                self.reserved.store(false, Ordering::Release);
                return Err(UpstreamError::AtCapacity {
                    backend: self.name.clone(),
                    max: self.max_connections,
                });
            }
            idle.wake.notify_one();
        }
        Ok(())
    }

    /// Sends a request for incarnation `gen` and waits for its response.
    pub(crate) async fn request(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: Option<Raw>,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Result<Response, UpstreamError> {
        self.request_with(
            gen,
            method,
            params.into(),
            sink,
            cancel,
            timeout,
            Vec::new(),
        )
        .await
    }

    /// [`Core::request`] with extra HTTP headers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn request_with(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: OutParams,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
        headers: ExtraHeaders,
    ) -> Result<Response, UpstreamError> {
        self.send_request(gen, method, params, sink, cancel, timeout, headers, None)
            .await
    }

    /// [`Core::request_with`], optionally as a listen stream carrying `listen_version`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_request(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: OutParams,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
        headers: ExtraHeaders,
        listen_version: Option<u64>,
    ) -> Result<Response, UpstreamError> {
        let id = self.next_id();
        let (params, client_progress) = match params {
            OutParams::Written {
                text,
                progress: false,
            } => (
                OutParams::Written {
                    text,
                    progress: false,
                },
                None,
            ),
            // A progress token to rewrite (rare): the params as checked JSON.
            OutParams::Written { text, .. } => {
                let (p, c) = rewrite_progress_token(Raw::from_string(text).ok(), id);
                (OutParams::Checked(p), c)
            }
            OutParams::Checked(p) => {
                let (p, c) = rewrite_progress_token(p, id);
                (OutParams::Checked(p), c)
            }
        };
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id,
            Pending {
                gen,
                sink,
                client_progress,
                listen_version,
                reply: tx,
            },
        );
        let guard = PendingGuard {
            core: self.clone(),
            gen,
            id,
            reason: "request abandoned",
        };
        if self.live_gen.load(Ordering::Acquire) != gen {
            let mut guard = guard;
            guard.disarm();
            self.pending.take(id);
            return Err(UpstreamError::Crashed {
                backend: self.name.clone(),
                reason: "the backend restarted before the request could be sent".into(),
            });
        }
        let text = match &params {
            OutParams::Checked(p) => p.as_ref().map(Raw::get),
            OutParams::Written { text, .. } => Some(text.as_str()),
        };
        // An HTTP backend's POST runs here, beside the wait for its answer: what it
        // relays (progress, requests, the response) reaches the pending table as it
        // comes; an answer, a timeout or a cancellation ends it (closing its stream).
        let session = if self.direct {
            None
        } else {
            self.http_session(gen)
        };
        // Large params go to the backend after the envelope's head as they are (one
        // vectored write to a stdio backend's pipe, or the HTTP body's parts), not
        // copied into one line; below SENT_APART copying costs less.
        let apart = text.filter(|t| {
            t.len() >= crate::sse::SENT_APART
                && (self.direct
                    || session
                        .as_ref()
                        .is_some_and(|s| s.takes_params_apart(method)))
        });
        let mut line = match apart {
            Some(_) => crate::jsonrpc::request_head(&RequestId::from_u64(id), method),
            None => crate::jsonrpc::request_json(&RequestId::from_u64(id), method, text),
        };
        // One deadline for the whole request, its write included (one timer per call).
        let sleep = tokio::time::sleep(timeout);
        tokio::pin!(sleep);
        if self.direct {
            let written = tokio::select! {
                w = self.write_direct_parts(gen, &mut line, apart) => w,
                _ = &mut sleep => {
                    return Err(UpstreamError::Timeout {
                        backend: self.name.clone(),
                        after: timeout,
                    })
                }
            };
            if let Err(reason) = written {
                return Err(UpstreamError::Crashed {
                    backend: self.name.clone(),
                    reason,
                });
            }
        }
        let params = match apart {
            Some(_) if !self.direct => Some(params.into_bytes()),
            _ => None,
        };
        let msg = Outgoing {
            gen,
            line,
            params,
            request_id: Some(id),
            headers,
        };
        let mut posted = session.is_none();
        let mut post = match session {
            Some(s) => Some(crate::boxed_in_place(|| s.post_in_call(msg))),
            None if self.direct => None,
            None => {
                if self.out.send(msg).await.is_err() {
                    return Err(UpstreamError::Closed {
                        backend: self.name.clone(),
                    });
                }
                None
            }
        };
        let mut guard = guard;
        let mut rx = rx;
        let mut cancelled = std::pin::pin!(crate::cancel::Cancelled::new(cancel));
        let answer = loop {
            let posting = async {
                match post.as_mut() {
                    Some(p) => p.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut rx => break r,
                () = posting, if !posted => posted = true,
                _ = &mut sleep => {
                    guard.reason = "timeout";
                    drop(guard);
                    return Err(UpstreamError::Timeout { backend: self.name.clone(), after: timeout });
                }
                () = cancelled.as_mut() => {
                    guard.reason = "cancelled by the client";
                    drop(guard);
                    return Err(UpstreamError::Cancelled);
                }
            }
        };
        guard.disarm();
        // The answer came on a response stream that is still open: it is read to its
        // end (bounded) elsewhere, so that its connection is kept rather than closed.
        if let Some(mut p) = post.filter(|_| !posted) {
            if futures::FutureExt::now_or_never(p.as_mut()).is_none() {
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(STREAM_DRAIN, p).await;
                });
            }
        }
        answer.unwrap_or_else(|_| {
            Err(UpstreamError::Crashed {
                backend: self.name.clone(),
                reason: "connection lost".into(),
            })
        })
    }

    /// The live HTTP session of incarnation `gen`, if this is an HTTP backend.
    fn http_session(&self, gen: u64) -> Option<Arc<super::http::Session>> {
        match &*self.http.read() {
            Some((g, s)) if *g == gen => Some(s.clone()),
            _ => None,
        }
    }

    /// Writes one line to incarnation `gen`'s stdin (stdio backends). `line` is
    /// written as it is, its newline added and taken off again (a message is not
    /// copied to be framed); raw newlines in it are blanked first.
    pub(crate) async fn write_direct(&self, gen: u64, line: &mut String) -> Result<(), String> {
        let mut slot = self.stdin.lock().await;
        match slot.as_mut() {
            Some(s) if s.gen == gen => {
                s.room.fit(line.len() + 1);
                write_line(s, line)
                    .await
                    .map_err(|e| format!("cannot write to the backend: {e}"))?;
                self.stats.bytes(false, line.len() + 1);
                Ok(())
            }
            _ => Err("the backend restarted before the request could be sent".into()),
        }
    }

    /// [`Core::write_direct`] of a request written as `head`, then `params` as they
    /// are, then [`crate::jsonrpc::REQUEST_END`], in one vectored write (`params`
    /// with a raw newline to blank is framed into one line instead). Without
    /// `params`, `head` is the whole line.
    async fn write_direct_parts(
        &self,
        gen: u64,
        head: &mut String,
        params: Option<&str>,
    ) -> Result<(), String> {
        let Some(params) = params else {
            return self.write_direct(gen, head).await;
        };
        if memchr::memchr2(b'\n', b'\r', params.as_bytes()).is_some() {
            head.push_str(params);
            head.push_str(crate::jsonrpc::REQUEST_END);
            return self.write_direct(gen, head).await;
        }
        let mut slot = self.stdin.lock().await;
        match slot.as_mut() {
            Some(s) if s.gen == gen => {
                const END: &str = "}\n";
                debug_assert_eq!(END.trim_end(), crate::jsonrpc::REQUEST_END);
                let len = head.len() + params.len() + END.len();
                s.room.fit(len);
                let mut parts = [
                    std::io::IoSlice::new(head.as_bytes()),
                    std::io::IoSlice::new(params.as_bytes()),
                    std::io::IoSlice::new(END.as_bytes()),
                ];
                write_parts(s, &mut parts)
                    .await
                    .map_err(|e| format!("cannot write to the backend: {e}"))?;
                self.stats.bytes(false, len);
                Ok(())
            }
            _ => Err("the backend restarted before the request could be sent".into()),
        }
    }

    /// Sends a message without waiting for anything.
    pub(crate) fn send_line(&self, gen: u64, line: String) {
        if self
            .out
            .try_send(Outgoing {
                gen,
                line,
                params: None,
                request_id: None,
                headers: Vec::new(),
            })
            .is_err()
        {
            tracing::warn!(backend = %self.name, "outgoing queue full or closed; message dropped");
        }
    }

    /// Fails every pending request of incarnation `gen` (all when `None`).
    pub(crate) fn fail_pending(&self, gen: Option<u64>, reason: &str) {
        let drained = self.pending.take_gen(gen);
        for p in drained {
            let _ = p.reply.send(Err(UpstreamError::Crashed {
                backend: self.name.clone(),
                reason: reason.to_owned(),
            }));
        }
        for (_, h) in self.asks.lock().drain() {
            h.abort();
        }
    }

    /// Whether the connection has been shut down for good.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(*self.state.borrow(), State::Closed)
    }

    /// Fails one pending request (its transport broke).
    pub(crate) fn fail_one(&self, id: u64, reason: String) {
        let backend = self.name.clone();
        self.fail_request(id, UpstreamError::Crashed { backend, reason });
    }

    /// Fails one pending request with `err`.
    pub(crate) fn fail_request(&self, id: u64, err: UpstreamError) {
        if let Some(p) = self.pending.take(id) {
            let _ = p.reply.send(Err(err));
        }
    }

    /// Whether request `id` still waits for its response.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains(id)
    }

    /// Number of requests waiting for the backend.
    /// Client requests waiting for the backend's answer (Gantry's own, such as the
    /// long-lived `subscriptions/listen` of a stateless-era backend, are not counted).
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.calls()
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if self.reserved.load(Ordering::Acquire) {
            self.stats.release();
        }
    }
}

/// Writes one message to a stdio backend: newline-delimited JSON, one line, in one
/// write (the newline pushed onto `line`, where the JSON writers leave room for it,
/// and popped after).
async fn write_line(s: &mut StdinSlot, line: &mut String) -> std::io::Result<()> {
    // JSON never holds a raw newline except as whitespace between tokens, so blanking
    // them keeps the message valid and on one line, as stdio framing requires.
    if memchr::memchr2(b'\n', b'\r', line.as_bytes()).is_some() {
        *line = line.replace(['\n', '\r'], " ");
    }
    line.push('\n');
    let written = write_parts(s, &mut [std::io::IoSlice::new(line.as_bytes())]).await;
    line.pop();
    written
}

/// Writes `parts` (one message, its newline last) one after the other with as few
/// writes as the pipe allows (`writev`), then flushes.
///
/// A write is cut short when its call ends first (a timeout while the backend does
/// not read its stdin): part of the message stays in the pipe. The next message then
/// ends that line first, so the backend loses one unreadable line and not the next
/// message as well (a cancellation, say, glued to the torn line).
async fn write_parts(s: &mut StdinSlot, parts: &mut [std::io::IoSlice<'_>]) -> std::io::Result<()> {
    if s.torn {
        // One byte: written whole or not at all, so this cannot tear in turn.
        s.w.write_all(b"\n").await?;
        s.torn = false;
    }
    let mut rest = parts;
    while !rest.is_empty() {
        let n = s.w.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut rest, n);
        s.torn = !rest.is_empty();
    }
    s.w.flush().await
}

/// Removes a pending entry when a request ends any way other than a response, and
/// tells the backend to stop working on it.
struct PendingGuard {
    core: Arc<Core>,
    gen: u64,
    id: u64,
    reason: &'static str,
}

impl PendingGuard {
    fn disarm(&mut self) {
        self.id = u64::MAX;
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.id == u64::MAX {
            return;
        }
        if self.core.pending.take(self.id).is_some() {
            let params =
                to_raw(&serde_json::json!({ "requestId": self.id, "reason": self.reason }));
            self.core.send_line(
                self.gen,
                Notification::new("notifications/cancelled", Some(params)).to_json(),
            );
        }
    }
}

pub(super) fn parse_object(
    raw: Option<&Raw>,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    serde_json::from_str(raw?.get()).ok()
}

/// If `params._meta.progressToken` is set, replaces it with `gateway_token` and
/// returns the client's token. Params without a token are passed through untouched.
pub(super) fn rewrite_progress_token(
    params: Option<Raw>,
    gateway_token: u64,
) -> (Option<Raw>, Option<serde_json::Value>) {
    let Some(raw) = params else {
        return (None, None);
    };
    if !crate::jsonrpc::meta_may_name(&raw, "progressToken", crate::needle!("progressToken")) {
        return (Some(raw), None);
    }
    let Ok(mut top) = serde_json::from_str::<indexmap::IndexMap<String, Raw>>(raw.get()) else {
        return (Some(raw), None);
    };
    let Some(mut meta) = top.get("_meta").and_then(|m| {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(m.get()).ok()
    }) else {
        return (Some(raw), None);
    };
    let Some(client) = meta.insert("progressToken".into(), gateway_token.into()) else {
        return (Some(raw), None);
    };
    top.insert("_meta".into(), to_raw(&meta));
    let top = crate::jsonrpc::raw_object(&top);
    (Some(top), Some(client))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn progress_token_rewrite_keeps_everything_else() {
        let p = to_raw(
            &serde_json::json!({"name":"t","arguments":{"x":1},"_meta":{"progressToken":"abc","other":2}}),
        );
        let (out, client) = rewrite_progress_token(Some(p), 42);
        assert_eq!(client, Some(serde_json::json!("abc")));
        let v: serde_json::Value = serde_json::from_str(out.unwrap().get()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name":"t","arguments":{"x":1},"_meta":{"progressToken":42,"other":2}})
        );
        let untouched = to_raw(&serde_json::json!({"name":"t"}));
        let (out, client) = rewrite_progress_token(Some(untouched), 1);
        assert_eq!(out.unwrap().get(), r#"{"name":"t"}"#);
        assert!(client.is_none());
    }
}
