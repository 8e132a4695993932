//! The transport-independent half of a backend connection: id allocation, the pending
//! table, progress-token rewriting, attribution of backend→client traffic, and the
//! connection state that requests wait on while a backend (re)starts.

use super::UpstreamError;
use crate::call::{CallCtx, Sink};
use crate::config::BackendConfig;
use crate::jsonrpc::{
    code, empty_object, to_raw, Message, Notification, Request, RequestId, Response, RpcError,
};
use crate::mcp::{Era, META_PREFIX, STATELESS_VERSION};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// Capacity of the queue of messages waiting to be written to one backend.
const OUTGOING_QUEUE: usize = 1024;
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
    /// The last attempt failed; a retry is scheduled. Requests fail at once.
    Failed { reason: String },
    /// Shut down for good.
    Closed,
}

/// A message on its way to the backend, tagged with the incarnation it belongs to:
/// a message for an incarnation that has died is dropped, never sent to its successor.
pub(crate) struct Outgoing {
    pub gen: u64,
    pub line: String,
    /// For requests: the upstream id (HTTP uses it to attribute the response stream).
    pub request_id: Option<u64>,
    /// HTTP only: headers that go with this message (`Mcp-Param-*`).
    pub headers: Vec<(String, String)>,
}

struct Pending {
    gen: u64,
    /// The call's sink; `None` for Gantry's own requests (initialize).
    sink: Option<Sink>,
    /// The progress token the client chose, restored on the way back.
    client_progress: Option<serde_json::Value>,
    /// Gantry's `subscriptions/listen`: the version of the subscribed resources it
    /// carries (its acknowledgement puts them in force).
    listen_version: Option<u64>,
    reply: oneshot::Sender<Result<Response, UpstreamError>>,
}

/// The shared state of one backend connection.
pub(crate) struct Core {
    pub name: String,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    asks: Mutex<HashMap<String, AbortHandle>>,
    pub out: mpsc::Sender<Outgoing>,
    pub state: watch::Sender<State>,
    /// The incarnation messages may be sent to now (0 while none is alive). Set before
    /// an incarnation's pending requests are failed, so no request can slip between.
    pub live_gen: AtomicU64,
    owner: Mutex<Option<Sink>>,
    /// In-flight limit: permits, the limit, and how many wait for one.
    slots: Option<(tokio::sync::Semaphore, usize)>,
    queue: usize,
    waiting: std::sync::atomic::AtomicUsize,
    pub started: tokio::time::Instant,
    /// The params of the `initialize` Gantry sends on every (re)start.
    pub init_params: Box<RawValue>,
    /// Which era the backend speaks, as configured (`auto`: find out).
    pub era: crate::config::Era,
    /// The era of the callers this connection is for: spoken when the backend
    /// speaks it (translation only when it does not).
    pub want: Era,
    pub request_timeout: Duration,
    pub init_timeout: Duration,
    pub max_message_bytes: usize,
    /// Counters shared by every connection of this backend.
    pub stats: Arc<super::BackendStats>,
    /// Stdio only: the live child's stdin. Requests are written here by the calling
    /// task itself (no hop through the writer task); other messages go through `out`.
    pub stdin: tokio::sync::Mutex<Option<StdinSlot>>,
    direct: bool,
    /// Stateless-era backends: the resources clients subscribed to (the backend's
    /// `subscriptions/listen` asks for their updates), and a nudge when they change.
    listen_uris: Mutex<std::collections::BTreeSet<String>>,
    listen_changed: tokio::sync::Notify,
    /// Bumped (under `listen_uris`) on every change of the subscribed resources;
    /// and the version the backend last acknowledged a listen stream of (a
    /// subscription is in force once acknowledged).
    listen_version: AtomicU64,
    listen_acked: watch::Sender<u64>,
    /// Stateless-era HTTP backends: their tools' `Mcp-Param-*` declarations
    /// (`None`: not listed since the last `tools/list_changed`).
    tool_headers: Mutex<Option<Arc<crate::mcp::param::ToolHeaders>>>,
    /// The era of a handshake attempt that is not the last to try, while it is
    /// unanswered: a stdio backend that dies meanwhile died of it, and its
    /// supervisor restarts it at once for the other era, without a failure between.
    probing: Mutex<Option<Era>>,
}

/// The stdin of one incarnation of a stdio backend.
pub(crate) struct StdinSlot {
    pub gen: u64,
    pub w: tokio::process::ChildStdin,
}

impl Core {
    fn set_probing(&self, era: Option<Era>) {
        *self.probing.lock() = era;
    }

    /// The era whose handshake the last incarnation died of, if it did (and
    /// forgets it). The backend does not speak it: recorded here.
    pub(crate) fn take_probe_death(&self) -> Option<Era> {
        let era = self.probing.lock().take()?;
        self.stats.eras.set(era, false);
        Some(era)
    }

    fn next_id(&self) -> u64 {
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
        }
    }

    /// Waits until the connection is ready (or fails), bounded by the init timeout.
    async fn wait_ready(
        &self,
        cancel: &CancellationToken,
    ) -> Result<(u64, Arc<InitInfo>), UpstreamError> {
        let mut rx = self.state.subscribe();
        let wait = async {
            loop {
                let st = rx.borrow_and_update().clone();
                match st {
                    State::Ready { gen, info } => return Ok((gen, info)),
                    State::Failed { reason } => return Err(self.unavailable(reason)),
                    State::Closed => {
                        return Err(UpstreamError::Closed {
                            backend: self.name.clone(),
                        })
                    }
                    State::Starting => {}
                }
                if rx.changed().await.is_err() {
                    return Err(UpstreamError::Closed {
                        backend: self.name.clone(),
                    });
                }
            }
        };
        tokio::select! {
            r = wait => r,
            _ = tokio::time::sleep(self.init_timeout) => Err(self.unavailable(format!(
                "not ready after {}", humantime::format_duration(self.init_timeout)))),
            _ = cancel.cancelled() => Err(UpstreamError::Cancelled),
        }
    }

    /// Sends a request for incarnation `gen` and waits for its response.
    pub(crate) async fn request(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: Option<Box<RawValue>>,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Result<Response, UpstreamError> {
        self.request_with(gen, method, params, sink, cancel, timeout, Vec::new())
            .await
    }

    /// [`Core::request`] with extra HTTP headers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn request_with(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: Option<Box<RawValue>>,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
        headers: Vec<(String, String)>,
    ) -> Result<Response, UpstreamError> {
        self.send_request(gen, method, params, sink, cancel, timeout, headers, None)
            .await
    }

    /// [`Core::request_with`], optionally as a listen stream carrying `listen_version`.
    #[allow(clippy::too_many_arguments)]
    async fn send_request(
        self: &Arc<Self>,
        gen: u64,
        method: &str,
        params: Option<Box<RawValue>>,
        sink: Option<Sink>,
        cancel: &CancellationToken,
        timeout: Duration,
        headers: Vec<(String, String)>,
        listen_version: Option<u64>,
    ) -> Result<Response, UpstreamError> {
        let id = self.next_id();
        let (params, client_progress) = rewrite_progress_token(params, id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(
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
            self.pending.lock().remove(&id);
            return Err(UpstreamError::Crashed {
                backend: self.name.clone(),
                reason: "the backend restarted before the request could be sent".into(),
            });
        }
        let line = Request {
            id: RequestId::from_u64(id),
            method: method.to_owned(),
            params,
        }
        .to_json();
        if self.direct {
            let write = tokio::time::timeout(timeout, self.write_direct(gen, &line));
            match write.await {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => {
                    return Err(UpstreamError::Crashed {
                        backend: self.name.clone(),
                        reason,
                    })
                }
                Err(_) => {
                    return Err(UpstreamError::Timeout {
                        backend: self.name.clone(),
                        after: timeout,
                    })
                }
            }
        } else if self
            .out
            .send(Outgoing {
                gen,
                line,
                request_id: Some(id),
                headers,
            })
            .await
            .is_err()
        {
            return Err(UpstreamError::Closed {
                backend: self.name.clone(),
            });
        }
        let mut guard = guard;
        tokio::select! {
            r = rx => {
                guard.disarm();
                r.unwrap_or_else(|_| Err(UpstreamError::Crashed {
                    backend: self.name.clone(),
                    reason: "connection lost".into(),
                }))
            }
            _ = tokio::time::sleep(timeout) => {
                guard.reason = "timeout";
                drop(guard);
                Err(UpstreamError::Timeout { backend: self.name.clone(), after: timeout })
            }
            _ = cancel.cancelled() => {
                guard.reason = "cancelled by the client";
                drop(guard);
                Err(UpstreamError::Cancelled)
            }
        }
    }

    /// Writes one line to incarnation `gen`'s stdin (stdio backends).
    pub(crate) async fn write_direct(&self, gen: u64, line: &str) -> Result<(), String> {
        let mut slot = self.stdin.lock().await;
        match slot.as_mut() {
            Some(s) if s.gen == gen => super::stdio::write_line(&mut s.w, line)
                .await
                .map_err(|e| format!("cannot write to the backend: {e}")),
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
        let drained: Vec<Pending> = {
            let mut p = self.pending.lock();
            let ids: Vec<u64> = p
                .iter()
                .filter(|(_, e)| gen.is_none_or(|g| e.gen == g))
                .map(|(k, _)| *k)
                .collect();
            ids.into_iter().filter_map(|k| p.remove(&k)).collect()
        };
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

    /// Fails one pending request (its transport broke).
    pub(crate) fn fail_one(&self, id: u64, reason: String) {
        if let Some(p) = self.pending.lock().remove(&id) {
            let _ = p.reply.send(Err(UpstreamError::Crashed {
                backend: self.name.clone(),
                reason,
            }));
        }
    }

    /// Whether request `id` still waits for its response.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.lock().contains_key(&id)
    }

    /// Number of requests waiting for the backend.
    /// Client requests waiting for the backend's answer (Gantry's own, such as the
    /// long-lived `subscriptions/listen` of a stateless-era backend, are not counted).
    pub(crate) fn pending_len(&self) -> usize {
        self.pending
            .lock()
            .values()
            .filter(|p| p.sink.is_some())
            .count()
    }

    fn attribute(&self, related: Option<u64>) -> Option<Sink> {
        let p = self.pending.lock();
        if let Some(sink) = related
            .and_then(|id| p.get(&id))
            .and_then(|e| e.sink.clone())
        {
            return Some(sink);
        }
        let mut calls = p.values().filter_map(|e| e.sink.as_ref());
        match (calls.next(), calls.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }

    /// Whether the connection has been shut down for good.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(*self.state.borrow(), State::Closed)
    }

    fn owner(&self) -> Option<Sink> {
        self.owner.lock().clone()
    }

    fn drop_unattributed(&self, what: &str) {
        self.stats.unattributed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(backend = %self.name, what, "backend message with no client to deliver it to; dropped");
    }

    /// Handles one message from the backend (incarnation `gen`). `related` is the
    /// upstream id of the request whose response stream carried it, if any.
    pub(crate) fn incoming(self: &Arc<Self>, gen: u64, msg: Message, related: Option<u64>) {
        match msg {
            Message::Response(r) => {
                let entry =
                    r.id.as_ref()
                        .and_then(RequestId::as_u64)
                        .and_then(|id| self.pending.lock().remove(&id));
                match entry {
                    Some(p) => {
                        let _ = p.reply.send(Ok(r));
                    }
                    None => tracing::debug!(backend = %self.name, id = ?r.id,
                        "response to no pending request (late, cancelled or unknown); dropped"),
                }
            }
            Message::Notification(n) => self.incoming_notification(n, related),
            Message::Request(req) => self.incoming_request(gen, req, related),
        }
    }

    fn incoming_notification(&self, n: Notification, related: Option<u64>) {
        match n.method.as_str() {
            "notifications/progress" => {
                let Some(mut params) = parse_object(n.params.as_deref()) else {
                    return self.drop_unattributed("malformed progress");
                };
                let token = params
                    .get("progressToken")
                    .and_then(serde_json::Value::as_u64);
                let route = token.and_then(|t| {
                    let p = self.pending.lock();
                    p.get(&t)
                        .and_then(|e| Some((e.sink.clone()?, e.client_progress.clone()?)))
                });
                match route {
                    Some((sink, client_token)) => {
                        params.insert("progressToken".into(), client_token);
                        sink.notify(Notification::new(&n.method, Some(to_raw(&params))));
                    }
                    None => self.drop_unattributed("progress for no active request"),
                }
            }
            "notifications/cancelled" => {
                // The backend withdraws one of its own requests to the client.
                let key = parse_object(n.params.as_deref())
                    .and_then(|p| p.get("requestId").map(|v| v.to_string()));
                if let Some(h) = key.and_then(|k| self.asks.lock().remove(&k)) {
                    h.abort();
                }
            }
            // A stateless-era backend acknowledging Gantry's listen: nothing for clients.
            "notifications/subscriptions/acknowledged" => {
                // Which listen it acknowledges: its subscriptionId is the listen
                // request's id (an old, cancelled listen's counts for nothing).
                let listen = parse_object(n.params.as_deref())
                    .and_then(|p| {
                        p.get("_meta")?
                            .get(crate::mcp::META_SUBSCRIPTION_ID)?
                            .as_u64()
                    })
                    .and_then(|id| self.pending.lock().get(&id)?.listen_version);
                let Some(v) = listen else { return };
                self.listen_acked.send_if_modified(|acked| {
                    let newer = v > *acked;
                    if newer {
                        *acked = v;
                    }
                    newer
                });
            }
            "notifications/tools/list_changed" => {
                *self.tool_headers.lock() = None;
                match self.owner() {
                    Some(sink) => sink.notify(n),
                    None => self.drop_unattributed("notification"),
                }
            }
            "notifications/message" => match self.attribute(related).or_else(|| self.owner()) {
                Some(sink) => sink.notify(n),
                None => self.drop_unattributed("log message"),
            },
            // list_changed, resources/updated …: about the connection, not one call,
            // whichever stream carried them; the owner (session or hub) fans out.
            _ => match self.owner() {
                Some(sink) => sink.notify(n),
                None => self.drop_unattributed("notification"),
            },
        }
    }

    fn incoming_request(self: &Arc<Self>, gen: u64, req: Request, related: Option<u64>) {
        if req.method == "ping" {
            self.send_line(gen, Response::ok(req.id, empty_object()).to_json());
            return;
        }
        let Some(sink) = self.attribute(related).or_else(|| self.owner()) else {
            self.drop_unattributed("server-to-client request");
            let err = RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "no client session can answer `{}` for this backend",
                    req.method
                ),
            );
            self.send_line(gen, Response::err(Some(req.id), &err).to_json());
            return;
        };
        let core = self.clone();
        let key = req.id.key().to_owned();
        let key2 = key.clone();
        let task = tokio::spawn(async move {
            let answer = sink.ask(req.method, req.params).await;
            core.asks.lock().remove(&key2);
            let resp = Response {
                id: Some(req.id),
                outcome: answer,
            };
            core.send_line(gen, resp.to_json());
        });
        self.asks.lock().insert(key, task.abort_handle());
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.stats.release();
    }
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
        if self.core.pending.lock().remove(&self.id).is_some() {
            let params =
                to_raw(&serde_json::json!({ "requestId": self.id, "reason": self.reason }));
            self.core.send_line(
                self.gen,
                Notification::new("notifications/cancelled", Some(params)).to_json(),
            );
        }
    }
}

fn parse_object(raw: Option<&RawValue>) -> Option<serde_json::Map<String, serde_json::Value>> {
    serde_json::from_str(raw?.get()).ok()
}

/// How long a `resources/subscribe` for a stateless-era backend waits for the
/// backend to acknowledge the listen stream that carries it.
const LISTEN_ACK_WAIT: Duration = Duration::from_secs(5);
/// How long a backend's `subscriptions/listen` may stay open before Gantry renews it.
const LISTEN_RENEW: Duration = Duration::from_secs(24 * 3600);

/// Keeps one `subscriptions/listen` open on a stateless-era backend while it is up:
/// list changes it declares and updates of the resources clients subscribed to.
/// What arrives on it goes to the connection's owner like any session-era
/// notification. Reopened after a restart, when the subscribed resources change,
/// and (after a pause) when the backend ends it.
async fn keep_listening(core: Arc<Core>, shutdown: CancellationToken) {
    let mut state = core.state.subscribe();
    loop {
        let ready = match &*state.borrow_and_update() {
            State::Ready { gen, info } if info.is_stateless() => Some((*gen, info.clone())),
            State::Closed => return,
            _ => None,
        };
        let Some((gen, info)) = ready else {
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = shutdown.cancelled() => return,
            }
            continue;
        };
        let caps = info.capabilities();
        let on = |p: &str| caps.pointer(p) == Some(&serde_json::Value::Bool(true));
        let (uris, version): (Vec<String>, u64) = {
            let set = core.listen_uris.lock();
            let version = core.listen_version.load(Ordering::Acquire);
            let uris = if on("/resources/subscribe") {
                set.iter().cloned().collect()
            } else {
                Vec::new()
            };
            (uris, version)
        };
        let mut filter = serde_json::Map::new();
        for (key, ptr) in [
            ("toolsListChanged", "/tools/listChanged"),
            ("promptsListChanged", "/prompts/listChanged"),
            ("resourcesListChanged", "/resources/listChanged"),
        ] {
            if on(ptr) {
                filter.insert(key.into(), serde_json::Value::Bool(true));
            }
        }
        if !uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), serde_json::json!(uris));
        }
        if filter.is_empty() {
            // Nothing to listen for: nothing to wait for either.
            core.listen_acked.send_if_modified(|acked| {
                let newer = version > *acked;
                if newer {
                    *acked = version;
                }
                newer
            });
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = core.listen_changed.notified() => {}
                _ = shutdown.cancelled() => return,
            }
            continue;
        }
        let params =
            to_raw(&serde_json::json!({ "notifications": filter, "_meta": own_meta(&core) }));
        let cancel = CancellationToken::new();
        let listen = core.send_request(
            gen,
            "subscriptions/listen",
            Some(params),
            None,
            &cancel,
            LISTEN_RENEW,
            Vec::new(),
            Some(version),
        );
        tokio::select! {
            r = listen => {
                tracing::debug!(backend = %core.name, ended = ?r.as_ref().map(|_| ()), "backend listen stream ended");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            r = state.changed() => { cancel.cancel(); if r.is_err() { return } }
            _ = core.listen_changed.notified() => cancel.cancel(),
            _ = shutdown.cancelled() => { cancel.cancel(); return }
        }
    }
}

/// Rounds of `input_required` Gantry answers for a session-era client, per call.
const MAX_INPUT_ROUNDS: usize = 16;

/// Params for a session-era backend: nothing of the stateless era (its `_meta` keys,
/// `inputResponses`, `requestState`). Params without them pass through untouched.
fn for_session_era(params: Option<Box<RawValue>>) -> Option<Box<RawValue>> {
    let raw = params?;
    let text = raw.get();
    if !(text.contains(META_PREFIX)
        || text.contains("\"inputResponses\"")
        || text.contains("\"requestState\""))
    {
        return Some(raw);
    }
    let Some(mut p) = parse_object(Some(&raw)) else {
        return Some(raw);
    };
    p.remove("inputResponses");
    p.remove("requestState");
    if let Some(serde_json::Value::Object(meta)) = p.get_mut("_meta") {
        meta.retain(|k, _| !k.starts_with(META_PREFIX));
        if meta.is_empty() {
            p.remove("_meta");
        }
    }
    Some(to_raw(&p))
}

/// Params for a stateless-era backend: `_meta` says which version, and what the
/// client can do and wants to hear.
fn for_stateless_era(
    params: Option<Box<RawValue>>,
    client: &crate::call::ClientView,
) -> serde_json::Map<String, serde_json::Value> {
    let mut p = parse_object(params.as_deref()).unwrap_or_default();
    let meta = p.entry("_meta").or_insert_with(|| serde_json::json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.insert(
            crate::mcp::META_PROTOCOL_VERSION.into(),
            serde_json::json!(STATELESS_VERSION),
        );
        m.insert(
            crate::mcp::META_CLIENT_CAPABILITIES.into(),
            client
                .capabilities
                .as_deref()
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
        );
        match client.log_level {
            Some(l) => {
                m.insert(crate::mcp::META_LOG_LEVEL.into(), serde_json::json!(l));
            }
            None => {
                m.remove(crate::mcp::META_LOG_LEVEL);
            }
        }
    }
    p
}

/// A stateless-era result as a session-era client expects it: without what only
/// the stateless era has (`resultType`, `ttlMs`, `cacheScope`, the era's `_meta`
/// keys such as `serverInfo`), which a direct connection would not have shown it.
fn for_session_client(mut resp: Response) -> Response {
    let Ok(result) = &resp.outcome else {
        return resp;
    };
    if !crate::mcp::may_hold_stateless_fields(result.get()) {
        return resp;
    }
    if let Some(mut r) = parse_object(Some(result)) {
        if crate::mcp::strip_stateless_result(&mut r) {
            resp.outcome = Ok(to_raw(&r));
        }
    }
    resp
}

/// One round of input a stateless-era backend asks for.
struct InputRound {
    /// (key, method, params) of each input request.
    requests: Vec<(String, String, Option<Box<RawValue>>)>,
    state: Option<serde_json::Value>,
}

/// The input requests of an `input_required` result, if `resp` is one.
fn input_round(resp: &Response) -> Option<InputRound> {
    let result = resp.outcome.as_ref().ok()?;
    if !result.get().contains("input_required") {
        return None;
    }
    let r = parse_object(Some(result))?;
    if r.get("resultType")?.as_str()? != "input_required" {
        return None;
    }
    let requests = r
        .get("inputRequests")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    let method = v.get("method")?.as_str()?.to_owned();
                    Some((k.clone(), method, v.get("params").map(to_raw)))
                })
                .collect()
        })
        .unwrap_or_default();
    Some(InputRound {
        requests,
        state: r.get("requestState").cloned(),
    })
}

/// If `params._meta.progressToken` is set, replaces it with `gateway_token` and
/// returns the client's token. Params without a token are passed through untouched.
fn rewrite_progress_token(
    params: Option<Box<RawValue>>,
    gateway_token: u64,
) -> (Option<Box<RawValue>>, Option<serde_json::Value>) {
    let Some(raw) = params else {
        return (None, None);
    };
    if !raw.get().contains("progressToken") {
        return (Some(raw), None);
    }
    let Ok(mut top) = serde_json::from_str::<indexmap::IndexMap<String, Box<RawValue>>>(raw.get())
    else {
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
    (Some(to_raw(&top)), Some(client))
}

/// One MCP client session with one backend, over stdio or Streamable HTTP.
pub struct Conn {
    pub(crate) core: Arc<Core>,
    shutdown: CancellationToken,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Conn {
    /// Starts a connection to `cfg`'s backend for callers of era `want` (spoken if
    /// the backend speaks it). The caller must have reserved it with
    /// [`super::BackendStats::try_reserve`]; the reservation ends when it is
    /// dropped. A session-era handshake sends `init_params` (again after every
    /// restart); traffic no call can claim goes to `owner`.
    pub fn start(
        cfg: &BackendConfig,
        want: Era,
        init_params: Box<RawValue>,
        owner: Option<Sink>,
        stats: Arc<super::BackendStats>,
    ) -> Arc<Self> {
        let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
        let (state, _) = watch::channel(State::Starting);
        let core = Arc::new(Core {
            name: cfg.name.clone(),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            asks: Mutex::new(HashMap::new()),
            out: out_tx,
            state,
            live_gen: AtomicU64::new(0),
            owner: Mutex::new(owner),
            slots: (cfg.pool.max_in_flight > 0).then(|| {
                (
                    tokio::sync::Semaphore::new(cfg.pool.max_in_flight),
                    cfg.pool.max_in_flight,
                )
            }),
            queue: cfg.pool.queue,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            started: tokio::time::Instant::now(),
            init_params,
            era: cfg.era,
            want,
            request_timeout: cfg.request_timeout,
            init_timeout: cfg.init_timeout,
            max_message_bytes: cfg.max_message_bytes,
            stats,
            stdin: tokio::sync::Mutex::new(None),
            direct: cfg.stdio.is_some(),
            listen_uris: Mutex::new(std::collections::BTreeSet::new()),
            listen_changed: tokio::sync::Notify::new(),
            listen_version: AtomicU64::new(0),
            listen_acked: watch::channel(0).0,
            tool_headers: Mutex::new(None),
            probing: Mutex::new(None),
        });
        core.stats.track(&core);
        let shutdown = CancellationToken::new();
        let task = match (&cfg.stdio, &cfg.http) {
            (Some(s), _) => tokio::spawn(super::stdio::supervise(
                core.clone(),
                s.clone(),
                cfg.restart.clone(),
                out_rx,
                shutdown.clone(),
            )),
            (None, Some(h)) => tokio::spawn(super::http::supervise(
                core.clone(),
                h.clone(),
                cfg.restart.clone(),
                out_rx,
                shutdown.clone(),
            )),
            (None, None) => {
                let _ = core.state.send_replace(State::Failed {
                    reason: "no transport configured".into(),
                });
                tokio::spawn(async {})
            }
        };
        tokio::spawn(keep_listening(core.clone(), shutdown.clone()));
        Arc::new(Self {
            core,
            shutdown,
            task: Mutex::new(Some(task)),
        })
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The era of the callers this connection was started for.
    pub fn want(&self) -> Era {
        self.core.want
    }

    /// Waits until the backend is initialized and returns what it said about itself.
    pub async fn ready(&self, cancel: &CancellationToken) -> Result<Arc<InitInfo>, UpstreamError> {
        self.core.wait_ready(cancel).await.map(|(_, i)| i)
    }

    /// The backend's initialize result, if it is ready now.
    pub fn info(&self) -> Option<Arc<InitInfo>> {
        match &*self.core.state.borrow() {
            State::Ready { info, .. } => Some(info.clone()),
            _ => None,
        }
    }

    /// Forwards one client request and waits for the backend's response. The id and
    /// progress token are rewritten; the response comes back with the upstream id,
    /// and the caller restores the client's. Params are shaped for the backend's era;
    /// a stateless-era backend's `input_required` is answered for a session-era
    /// client through its server→client requests (see [`Conn::call_stateless`]).
    pub async fn call(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
    ) -> Result<Response, UpstreamError> {
        // Time spent queued for an in-flight slot counts against the request timeout.
        let deadline = tokio::time::Instant::now() + self.core.request_timeout;
        let _permit = self.in_flight_permit(ctx, deadline).await?;
        let (gen, info) = self.core.wait_ready(&ctx.cancel).await?;
        if info.is_stateless() {
            return self
                .call_stateless(gen, method, params, ctx, deadline)
                .await;
        }
        self.core
            .request(
                gen,
                method,
                for_session_era(params),
                Some(ctx.sink.clone()),
                &ctx.cancel,
                deadline.saturating_duration_since(tokio::time::Instant::now()),
            )
            .await
    }

    /// A call to a stateless-era backend. A stateless-era client gets its answer as
    /// is; for a session-era client, each round of `input_required` becomes
    /// server→client requests to the client, whose answers go back to the backend
    /// in a retry (`inputResponses`, the backend's `requestState` echoed).
    async fn call_stateless(
        &self,
        gen: u64,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
        deadline: tokio::time::Instant,
    ) -> Result<Response, UpstreamError> {
        let done = || Ok(Response::ok(RequestId::from_u64(0), empty_object()));
        match method {
            // Gone in the stateless era: the level travels with each request, and
            // liveness is the connection's business.
            "ping" | "logging/setLevel" => return done(),
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = crate::jsonrpc::string_field(params.as_deref(), "uri") else {
                    let e =
                        RpcError::new(code::INVALID_PARAMS, "params.uri (a string) is required");
                    return Ok(Response::err(None, &e));
                };
                let changed = {
                    let mut uris = self.core.listen_uris.lock();
                    let changed = if method == "resources/subscribe" {
                        uris.insert(uri)
                    } else {
                        uris.remove(&uri)
                    };
                    changed.then(|| self.core.listen_version.fetch_add(1, Ordering::AcqRel) + 1)
                };
                if let Some(version) = changed {
                    self.core.listen_changed.notify_one();
                    if method == "resources/subscribe" {
                        // Answered once the backend's listen stream carries the URI, so
                        // an update the client causes right after is not missed.
                        let mut acked = self.core.listen_acked.subscribe();
                        let wait = acked.wait_for(|a| *a >= version);
                        if tokio::time::timeout(LISTEN_ACK_WAIT, wait).await.is_err() {
                            tracing::debug!(backend = %self.core.name, "the backend did not acknowledge the subscription in time");
                        }
                    }
                }
                return done();
            }
            _ => {}
        }
        let base = for_stateless_era(params, &ctx.client);
        let headers = if method == "tools/call" && !self.core.direct {
            self.param_headers(gen, &base).await
        } else {
            Vec::new()
        };
        let mut params = Some(to_raw(&base));
        for _ in 0..MAX_INPUT_ROUNDS {
            let resp = self
                .core
                .request_with(
                    gen,
                    method,
                    params.take(),
                    Some(ctx.sink.clone()),
                    &ctx.cancel,
                    deadline.saturating_duration_since(tokio::time::Instant::now()),
                    headers.clone(),
                )
                .await?;
            if ctx.client.era == Era::Stateless {
                return Ok(resp);
            }
            let Some(round) = input_round(&resp) else {
                return Ok(for_session_client(resp));
            };
            let mut answers = serde_json::Map::new();
            for (key, method, request_params) in round.requests {
                match ctx.sink.ask(method.clone(), request_params).await {
                    Ok(answer) => {
                        let v =
                            serde_json::from_str(answer.get()).unwrap_or(serde_json::Value::Null);
                        answers.insert(key, v);
                    }
                    Err(e) => {
                        let why: serde_json::Value =
                            serde_json::from_str(e.get()).unwrap_or(serde_json::Value::Null);
                        let err = RpcError::new(
                            code::INVALID_REQUEST,
                            format!(
                                "the backend `{}` needs input the client could not give ({method})",
                                self.core.name
                            ),
                        )
                        .with_data(serde_json::json!({ "reason": why }));
                        return Ok(Response::err(resp.id, &err));
                    }
                }
            }
            let mut next = base.clone();
            next.insert("inputResponses".into(), serde_json::Value::Object(answers));
            if let Some(state) = round.state {
                next.insert("requestState".into(), state);
            }
            params = Some(to_raw(&next));
        }
        Err(UpstreamError::Protocol {
            backend: self.core.name.clone(),
            reason: format!("still asking for input after {MAX_INPUT_ROUNDS} rounds"),
        })
    }

    /// The `Mcp-Param-*` headers of a `tools/call` to a stateless-era HTTP backend,
    /// from the tool's `x-mcp-header` declarations (listed from the backend once,
    /// and again after it announces a change).
    async fn param_headers(
        &self,
        gen: u64,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<(String, String)> {
        let Some(name) = params.get("name").and_then(serde_json::Value::as_str) else {
            return Vec::new();
        };
        let known = self.core.tool_headers.lock().clone();
        let declared = match known {
            Some(d) => d,
            None => {
                let d = Arc::new(self.list_tool_headers(gen).await);
                *self.core.tool_headers.lock() = Some(d.clone());
                d
            }
        };
        let Some(mirrored) = declared.get(name) else {
            return Vec::new();
        };
        let arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        crate::mcp::param::headers_for(mirrored, &arguments)
    }

    async fn list_tool_headers(&self, gen: u64) -> crate::mcp::param::ToolHeaders {
        let mut all = crate::mcp::param::ToolHeaders::new();
        let never = CancellationToken::new();
        let mut cursor: Option<serde_json::Value> = None;
        for _ in 0..100 {
            let mut params = serde_json::json!({ "_meta": own_meta(&self.core) });
            if let (Some(c), Some(p)) = (cursor.take(), params.as_object_mut()) {
                p.insert("cursor".into(), c);
            }
            let resp = self
                .core
                .request(
                    gen,
                    "tools/list",
                    Some(to_raw(&params)),
                    None,
                    &never,
                    self.core.request_timeout,
                )
                .await;
            let Some(page) = resp
                .ok()
                .and_then(|r| r.outcome.ok())
                .and_then(|r| parse_object(Some(&r)))
            else {
                break;
            };
            if let Some(tools) = page.get("tools").and_then(serde_json::Value::as_array) {
                crate::mcp::param::of_tools(tools, &mut all);
            }
            match page.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        all
    }

    /// Waits for an in-flight slot when the connection has a limit: immediately
    /// refused when the queue is full; waiting counts against the request timeout.
    async fn in_flight_permit(
        &self,
        ctx: &CallCtx,
        deadline: tokio::time::Instant,
    ) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, UpstreamError> {
        let Some((sem, limit)) = &self.core.slots else {
            return Ok(None);
        };
        if let Ok(p) = sem.try_acquire() {
            return Ok(Some(p));
        }
        let busy = || UpstreamError::Busy {
            backend: self.core.name.clone(),
            in_flight: *limit,
        };
        if self.core.waiting.fetch_add(1, Ordering::AcqRel) >= self.core.queue {
            self.core.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(busy());
        }
        let r = tokio::select! {
            p = sem.acquire() => p.map(Some).map_err(|_| UpstreamError::Closed { backend: self.core.name.clone() }),
            _ = tokio::time::sleep_until(deadline) => Err(UpstreamError::Timeout {
                backend: self.core.name.clone(),
                after: self.core.request_timeout,
            }),
            _ = ctx.cancel.cancelled() => Err(UpstreamError::Cancelled),
        };
        self.core.waiting.fetch_sub(1, Ordering::AcqRel);
        r
    }

    /// Hands unattributable traffic to a new owner (a warm connection adopted by a
    /// session).
    pub fn set_owner(&self, owner: Sink) {
        *self.core.owner.lock() = Some(owner);
    }

    /// How long ago the connection was started.
    pub fn age(&self) -> std::time::Duration {
        self.core.started.elapsed()
    }

    /// Forwards a notification (e.g. `notifications/roots/list_changed`). The
    /// stateless era has no client notifications for a backend to receive.
    pub fn notify(&self, n: &Notification) {
        if let State::Ready { gen, info } = &*self.core.state.borrow() {
            if !info.is_stateless() {
                self.core.send_line(*gen, n.to_json());
            }
        }
    }

    /// Number of requests in flight on this connection.
    pub fn pending(&self) -> usize {
        self.core.pending_len()
    }

    /// Stops the connection: fails in-flight requests, ends the backend session and,
    /// for stdio, terminates the process group. Waits until that is done.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
        self.core.fail_pending(None, "connection shut down");
        let _ = self.core.state.send_replace(State::Closed);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How long a backend of unknown era gets to answer the `server/discover` probe
/// before Gantry tries `initialize` instead.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The handshakes to try for a connection, in order: the era its callers speak
/// first, then the other (translation), skipping what the backend is known not to
/// speak; only the configured era when `era` is fixed.
fn handshake_order(core: &Core) -> Vec<Era> {
    match core.era {
        crate::config::Era::Session => vec![Era::Session],
        crate::config::Era::Stateless => vec![Era::Stateless],
        crate::config::Era::Auto => {
            let both = [core.want, core.want.other()];
            let known: Vec<Era> = both
                .into_iter()
                .filter(|e| core.stats.eras.get(*e) != Some(false))
                .collect();
            // Knowledge that rules out everything is stale (the backend was
            // replaced or upgraded): try both again.
            if known.is_empty() {
                both.to_vec()
            } else {
                known
            }
        }
    }
}

/// Brings incarnation `gen` up in the best era for the connection's callers:
/// their own when the backend speaks it, else the other with translation. A
/// session-era connection starts with `initialize` (a dual-era backend then gives
/// session-era clients everything it gives them directly); a stateless-era one with
/// `server/discover`. A refusal, silence (the probe waits [`PROBE_TIMEOUT`]) or,
/// for stdio, the process dying means the backend lacks that era; the finding is
/// kept for the backend's later connections. The transport then sends
/// `notifications/initialized` (session era only) and marks the connection ready.
pub(crate) async fn handshake(core: &Arc<Core>, gen: u64) -> Result<Arc<InitInfo>, UpstreamError> {
    let order = handshake_order(core);
    let mut last_err = None;
    for (i, era) in order.iter().copied().enumerate() {
        let last = i + 1 == order.len();
        let timeout = match era {
            Era::Stateless if !last && core.stats.eras.get(era) != Some(true) => {
                PROBE_TIMEOUT.min(core.init_timeout)
            }
            _ => core.init_timeout,
        };
        // A stdio process that dies now died of this handshake: its supervisor
        // restarts it at once for the other era, without counting a failure.
        core.set_probing((!last).then_some(era));
        let attempt = match era {
            Era::Stateless => discover(core, gen, timeout).await,
            Era::Session => initialize(core, gen, timeout).await,
        };
        match attempt {
            Ok(info) => {
                core.set_probing(None);
                core.stats.eras.set(era, true);
                if era != core.want {
                    tracing::info!(backend = %core.name, callers = %core.want, era = %era,
                        "backend does not speak its callers' era; translating");
                }
                return Ok(info);
            }
            Err(e @ UpstreamError::Crashed { .. }) if core.direct => {
                // Left set for the supervisor (the process is gone).
                if last {
                    core.set_probing(None);
                }
                return Err(e);
            }
            Err(e) => {
                core.set_probing(None);
                if core.era == crate::config::Era::Auto {
                    core.stats.eras.set(era, false);
                }
                tracing::debug!(backend = %core.name, era = %era, error = %e, "handshake refused");
                last_err = Some(e);
            }
        }
    }
    Err(last_err.unwrap_or_else(|| core.unavailable("no handshake to try")))
}

/// `_meta` of Gantry's own requests to a stateless-era backend.
fn own_meta(core: &Core) -> serde_json::Value {
    let caps: serde_json::Value = serde_json::from_str::<serde_json::Value>(core.init_params.get())
        .ok()
        .and_then(|p| p.get("capabilities").cloned())
        .unwrap_or_else(|| serde_json::json!({}));
    serde_json::json!({
        crate::mcp::META_PROTOCOL_VERSION: STATELESS_VERSION,
        crate::mcp::META_CLIENT_CAPABILITIES: caps,
        crate::mcp::META_CLIENT_INFO: crate::mcp::gantry_implementation(),
    })
}

async fn discover(
    core: &Arc<Core>,
    gen: u64,
    timeout: Duration,
) -> Result<Arc<InitInfo>, UpstreamError> {
    let never = CancellationToken::new();
    let params = to_raw(&serde_json::json!({ "_meta": own_meta(core) }));
    let resp = core
        .request(gen, "server/discover", Some(params), None, &never, timeout)
        .await?;
    let result = resp
        .outcome
        .map_err(|e| core.unavailable(format!("server/discover was refused: {}", e.get())))?;
    let result: serde_json::Value =
        serde_json::from_str(result.get()).map_err(|e| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: format!("server/discover result: {e}"),
        })?;
    let speaks = result
        .get("supportedVersions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|v| v.iter().any(|x| x == STATELESS_VERSION));
    if !speaks {
        return Err(core.unavailable(format!(
            "server/discover names no version Gantry speaks ({STATELESS_VERSION})"
        )));
    }
    let mut shaped = serde_json::json!({
        "protocolVersion": STATELESS_VERSION,
        "capabilities": result.get("capabilities").cloned().unwrap_or_else(|| serde_json::json!({})),
        "serverInfo": result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"name": core.name, "version": "unknown"})),
    });
    if let (Some(i), Some(obj)) = (result.get("instructions"), shaped.as_object_mut()) {
        obj.insert("instructions".into(), i.clone());
    }
    Ok(Arc::new(InitInfo {
        protocol_version: STATELESS_VERSION.to_owned(),
        result: shaped,
        era: Era::Stateless,
    }))
}

async fn initialize(
    core: &Arc<Core>,
    gen: u64,
    timeout: Duration,
) -> Result<Arc<InitInfo>, UpstreamError> {
    let never = CancellationToken::new();
    let resp = core
        .request(
            gen,
            "initialize",
            Some(core.init_params.clone()),
            None,
            &never,
            timeout,
        )
        .await?;
    let result = match resp.outcome {
        Ok(r) => r,
        Err(e) => {
            return Err(core.unavailable(format!("initialize was refused: {}", e.get())));
        }
    };
    let result: serde_json::Value =
        serde_json::from_str(result.get()).map_err(|e| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: format!("initialize result: {e}"),
        })?;
    let protocol_version = result
        .get("protocolVersion")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: "initialize result has no protocolVersion".into(),
        })?
        .to_owned();
    let info = Arc::new(InitInfo {
        protocol_version,
        result,
        era: Era::Session,
    });
    Ok(info)
}

/// Exponential backoff between restarts.
pub(crate) struct Backoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    pub(super) fn new(cfg: &crate::config::RestartConfig) -> Self {
        Self {
            next: cfg.initial_backoff,
            initial: cfg.initial_backoff,
            max: cfg.max_backoff,
        }
    }
    /// The delay to wait now; doubles the next one.
    pub(super) fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    /// Back to the initial delay (after a run that lasted).
    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
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
