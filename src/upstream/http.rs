//! Streamable HTTP backends: Gantry as an MCP client over HTTP.
//!
//! Every outgoing message is one POST. Responses come back as JSON or as an SSE
//! stream; messages on a request's stream are attributed to that request. The
//! backend's session id is echoed, `MCP-Protocol-Version` is sent after initialize,
//! a POST stream that ends before its response is resumed with `GET` +
//! `Last-Event-ID`, and the standalone GET stream carries unrelated notifications.
//! A 404 on a request with a session id means the backend session expired: in-flight
//! requests fail and the connection re-initializes.

use super::core::{Core, Outgoing, State};
use super::handshake::handshake;
use super::supervise::Transport;
use crate::bounded::read_bounded;
use crate::config::{HttpConfig, RestartConfig};
use crate::jsonrpc::{Incoming, Notification};
use crate::sse;
use futures::StreamExt;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Attempts to resume one POST stream with `Last-Event-ID` before giving up.
const MAX_RESUMES: u32 = 5;
/// Reconnect delay when the server gave no `retry`.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// One backend HTTP session (one incarnation).
struct Session {
    core: Arc<Core>,
    gen: u64,
    client: reqwest::Client,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    /// Gantry's own token for the backend (`http.oauth`).
    creds: Option<Arc<super::credentials::ClientCredentials>>,
    id: RwLock<Option<String>>,
    version: RwLock<Option<String>>,
    /// Cancelled when the backend says the session is gone.
    expired: CancellationToken,
    /// The backend speaks the stateless era: no session, per-request headers, and a
    /// request is cancelled by closing its response stream.
    stateless: std::sync::atomic::AtomicBool,
    /// Stateless era: the POST tasks of requests in flight, by upstream id.
    streams: parking_lot::Mutex<std::collections::HashMap<u64, tokio::task::AbortHandle>>,
}

fn read<T: Clone>(l: &RwLock<Option<T>>) -> Option<T> {
    l.read().clone()
}

fn write<T>(l: &RwLock<Option<T>>, v: T) {
    *l.write() = Some(v);
}

impl Session {
    /// A request with the session's headers and, with `http.oauth`, Gantry's token
    /// (a token that cannot be had is logged; the backend's 401 says the rest).
    async fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut rb = self
            .client
            .request(method, self.url.clone())
            .headers(self.headers.clone());
        if let Some(c) = &self.creds {
            match c.bearer().await {
                Ok(t) => rb = rb.bearer_auth(t),
                Err(e) => {
                    tracing::warn!(backend = %self.core.name, error = %e, "no access token for the backend")
                }
            }
        }
        if let Some(id) = read(&self.id) {
            rb = rb.header("mcp-session-id", id);
        }
        if let Some(v) = read(&self.version) {
            rb = rb.header("mcp-protocol-version", v);
        }
        rb
    }

    fn remember_session_id(&self, resp: &reqwest::Response) {
        if read(&self.id).is_none() {
            if let Some(id) = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty() && v.bytes().all(|b| (0x21..=0x7e).contains(&b)))
            {
                write(&self.id, id.to_owned());
            }
        }
    }

    /// The headers of the stateless era for one outgoing message (also used for the
    /// `server/discover` probe, before the era is known).
    fn stateless_headers(
        &self,
        rb: reqwest::RequestBuilder,
        line: &str,
    ) -> reqwest::RequestBuilder {
        let stateless = self.stateless.load(std::sync::atomic::Ordering::Relaxed);
        // Session-era traffic is not parsed here (only the era probe gets headers).
        if !stateless && !line.contains("\"server/discover\"") {
            return rb;
        }
        let Ok(crate::jsonrpc::Message::Request(r)) =
            crate::jsonrpc::Message::parse(line.as_bytes())
        else {
            return rb;
        };
        if !stateless && r.method != "server/discover" {
            return rb;
        }
        let mut rb = rb.header("mcp-method", r.method.as_str());
        if !stateless {
            rb = rb.header("mcp-protocol-version", crate::mcp::STATELESS_VERSION);
        }
        let field = crate::mcp::header::name_field(&r.method);
        if let Some(v) = field.and_then(|f| crate::jsonrpc::string_field(r.params.as_deref(), f)) {
            rb = rb.header("mcp-name", crate::mcp::header::encode(&v));
        }
        rb
    }

    /// Stateless era: cancelling a request closes its response stream.
    fn close_stream(&self, line: &str) -> bool {
        if !self.stateless.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let Ok(crate::jsonrpc::Message::Notification(n)) =
            crate::jsonrpc::Message::parse(line.as_bytes())
        else {
            return false;
        };
        if n.method != "notifications/cancelled" {
            return false;
        }
        let id = crate::jsonrpc::string_field(n.params.as_deref(), "requestId")
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| {
                n.params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p.get("requestId").and_then(serde_json::Value::as_u64))
            });
        if let Some(h) = id.and_then(|id| self.streams.lock().remove(&id)) {
            h.abort();
        }
        true
    }

    /// Sends one message as a POST.
    async fn send_post(&self, msg: &Outgoing) -> reqwest::Result<reqwest::Response> {
        let mut rb = self.stateless_headers(self.request(reqwest::Method::POST).await, &msg.line);
        for (k, v) in &msg.headers {
            rb = rb.header(k.as_str(), v.as_str());
        }
        rb.header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(msg.line.clone())
            .send()
            .await
            .inspect(|_| self.core.stats.bytes(false, msg.line.len()))
    }

    /// POSTs one message and relays whatever comes back.
    async fn post(self: Arc<Self>, msg: Outgoing) {
        let fail = |reason: String| {
            if let Some(id) = msg.request_id {
                self.core.fail_one(id, reason);
            }
        };
        let had_session = read(&self.id).is_some();
        let mut resp = self.send_post(&msg).await;
        // A 401 with Gantry's own token: fetched anew, sent once more.
        if let (Some(c), Ok(r)) = (&self.creds, &resp) {
            if r.status() == reqwest::StatusCode::UNAUTHORIZED {
                c.refused().await;
                resp = self.send_post(&msg).await;
            }
        }
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return fail(format!("cannot reach {}: {e}", self.url)),
        };
        self.remember_session_id(&resp);
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND && had_session {
            self.expired.cancel();
            return fail("the backend session expired; reconnecting".into());
        }
        if !status.is_success() {
            let body = read_bounded(resp, self.core.max_message_bytes)
                .await
                .unwrap_or_default();
            // A JSON-RPC error answering this very request (the stateless era puts
            // -32020 … -32022 on a 400, -32601 on a 404) is the backend's answer.
            if let (Some(id), Ok(crate::jsonrpc::Message::Response(r))) =
                (msg.request_id, crate::jsonrpc::Message::parse(&body))
            {
                if r.outcome.is_err()
                    && r.id.as_ref().and_then(crate::jsonrpc::RequestId::as_u64) == Some(id)
                {
                    return self.core.incoming(
                        self.gen,
                        crate::jsonrpc::Message::Response(r),
                        Some(id),
                    );
                }
            }
            let body: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return fail(format!("HTTP {status}: {body}"));
        }
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return;
        }
        let ctype = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if ctype.starts_with("text/event-stream") {
            let mut last_id = None;
            let mut retry = DEFAULT_RETRY;
            self.read_stream(resp, msg.request_id, &mut last_id, &mut retry)
                .await;
            self.resume(msg.request_id, last_id, retry).await;
        } else if ctype.starts_with("application/json") {
            match read_bounded(resp, self.core.max_message_bytes).await {
                Ok(body) => self.relay(&body, msg.request_id),
                Err(e) => fail(e),
            }
        } else {
            fail(format!("unexpected content type `{ctype}`"));
        }
    }

    fn relay(&self, body: &[u8], related: Option<u64>) {
        self.core.stats.bytes(true, body.len());
        match Incoming::parse(body) {
            Ok(Incoming::Single(m)) => self.core.incoming(self.gen, m, related),
            Ok(Incoming::Batch(ms)) => {
                for m in ms {
                    self.core.incoming(self.gen, m, related);
                }
            }
            Err(e) => {
                tracing::warn!(backend = %self.core.name, error = %e, "backend sent a body that is not JSON-RPC");
                if let Some(id) = related {
                    self.core.fail_one(id, format!("invalid reply: {e}"));
                }
            }
        }
    }

    /// Reads an SSE response to its end, relaying each message.
    async fn read_stream(
        &self,
        resp: reqwest::Response,
        related: Option<u64>,
        last_id: &mut Option<String>,
        retry: &mut Duration,
    ) {
        let mut parser = sse::Parser::new(self.core.max_message_bytes);
        let mut body = resp.bytes_stream();
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                _ = self.expired.cancelled() => return,
            };
            let Some(Ok(chunk)) = chunk else { return };
            let events = match parser.feed(&chunk) {
                Ok(evs) => evs,
                Err(e) => {
                    tracing::warn!(backend = %self.core.name, error = %e, "backend SSE stream dropped");
                    return;
                }
            };
            for ev in events {
                if let Some(id) = ev.id {
                    *last_id = Some(id);
                }
                if let Some(ms) = ev.retry {
                    *retry = Duration::from_millis(ms.min(60_000));
                }
                if ev.data.trim().is_empty() || !(ev.event.is_empty() || ev.event == "message") {
                    continue;
                }
                self.relay(ev.data.as_bytes(), related);
            }
        }
    }

    /// Resumes a POST stream that ended before the response to `related` arrived.
    async fn resume(&self, related: Option<u64>, mut last_id: Option<String>, mut retry: Duration) {
        let Some(id) = related else { return };
        let mut attempts = 0;
        while self.core.is_pending(id) {
            let Some(event_id) = last_id.clone() else {
                return self.core.fail_one(
                    id,
                    "the backend closed the response stream without answering".into(),
                );
            };
            attempts += 1;
            if attempts > MAX_RESUMES {
                return self.core.fail_one(
                    id,
                    "the backend's response stream could not be resumed".into(),
                );
            }
            tokio::time::sleep(retry).await;
            let resp = self
                .request(reqwest::Method::GET)
                .await
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .header("last-event-id", event_id)
                .send()
                .await;
            match resp {
                Ok(r) if r.status().is_success() => {
                    self.read_stream(r, Some(id), &mut last_id, &mut retry)
                        .await;
                }
                Ok(r) => {
                    return self.core.fail_one(
                        id,
                        format!("resuming the response stream failed: HTTP {}", r.status()),
                    );
                }
                Err(e) => {
                    tracing::debug!(backend = %self.core.name, error = %e, "resume attempt failed")
                }
            }
        }
    }

    /// The standalone GET stream: notifications and requests unrelated to any call.
    async fn listen(self: Arc<Self>) {
        let mut last_id: Option<String> = None;
        let mut retry = DEFAULT_RETRY;
        let mut failures = 0u32;
        while !self.expired.is_cancelled() {
            let mut rb = self
                .request(reqwest::Method::GET)
                .await
                .header(reqwest::header::ACCEPT, "text/event-stream");
            if let Some(id) = &last_id {
                rb = rb.header("last-event-id", id.clone());
            }
            let resp = tokio::select! {
                r = rb.send() => r,
                _ = self.expired.cancelled() => return,
            };
            match resp {
                Ok(r) if r.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED => return,
                Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                    self.expired.cancel();
                    return;
                }
                Ok(r) if r.status().is_success() => {
                    failures = 0;
                    self.read_stream(r, None, &mut last_id, &mut retry).await;
                }
                Ok(r) => {
                    failures += 1;
                    tracing::debug!(backend = %self.core.name, status = %r.status(), "GET stream refused");
                }
                Err(e) => {
                    failures += 1;
                    tracing::debug!(backend = %self.core.name, error = %e, "GET stream failed");
                }
            }
            let delay = retry
                .saturating_mul(1 << failures.min(5))
                .min(Duration::from_secs(30));
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.expired.cancelled() => return,
            }
        }
    }

    async fn delete(&self) {
        if read(&self.id).is_none() {
            return;
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.request(reqwest::Method::DELETE).await.send(),
        )
        .await;
    }
}

/// Runs one HTTP backend connection until `shutdown`: initialize, relay, re-initialize.
pub(super) async fn supervise(
    core: Arc<Core>,
    cfg: HttpConfig,
    restart: RestartConfig,
    out_rx: mpsc::Receiver<Outgoing>,
    shutdown: CancellationToken,
) {
    let url = match reqwest::Url::parse(&cfg.url) {
        Ok(u) => u,
        Err(e) => {
            let _ = core.state.send_replace(State::Failed {
                reason: format!("invalid url: {e}"),
            });
            return;
        }
    };
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &cfg.headers {
        if let (Ok(k), Ok(v)) = (
            reqwest::header::HeaderName::from_bytes(k.as_bytes()),
            reqwest::header::HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = core.state.send_replace(State::Failed {
                reason: format!("cannot build HTTP client: {e}"),
            });
            return;
        }
    };
    let creds = match cfg
        .oauth
        .as_ref()
        .map(super::credentials::ClientCredentials::for_config)
    {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            let _ = core.state.send_replace(State::Failed { reason: e });
            return;
        }
    };
    let transport = Http {
        client,
        url,
        headers,
        creds,
    };
    super::supervise::supervise(core, transport, restart, out_rx, shutdown).await;
}

/// The Streamable HTTP transport: each incarnation is one backend session.
struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    creds: Option<Arc<super::credentials::ClientCredentials>>,
}

impl Transport for Http {
    const RESTARTING: &'static str = "backend connection lost; reconnecting";

    async fn run(
        &mut self,
        core: &Arc<Core>,
        gen: u64,
        out_rx: &mut mpsc::Receiver<Outgoing>,
        shutdown: &CancellationToken,
    ) -> Option<String> {
        let (client, url, headers) = (&self.client, &self.url, &self.headers);
        let session = Arc::new(Session {
            core: core.clone(),
            gen,
            client: client.clone(),
            url: url.clone(),
            headers: headers.clone(),
            creds: self.creds.clone(),
            id: RwLock::new(None),
            version: RwLock::new(None),
            expired: CancellationToken::new(),
            stateless: std::sync::atomic::AtomicBool::new(false),
            streams: parking_lot::Mutex::new(std::collections::HashMap::new()),
        });
        let (init_tx, mut init_rx) = tokio::sync::oneshot::channel();
        let init = {
            let session = session.clone();
            tokio::spawn(async move {
                let r = handshake(&session.core, gen).await;
                if let Ok(info) = &r {
                    write(&session.version, info.protocol_version.clone());
                    if info.is_stateless() {
                        session
                            .stateless
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        let _ = init_tx.send(Ok(info.clone()));
                        return;
                    }
                    let note = Notification::new("notifications/initialized", None).to_json();
                    let sent = session
                        .request(reqwest::Method::POST)
                        .await
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .header(
                            reqwest::header::ACCEPT,
                            "application/json, text/event-stream",
                        )
                        .body(note)
                        .send()
                        .await;
                    if let Err(e) = sent {
                        let _ = init_tx.send(Err(format!("initialized notification failed: {e}")));
                        return;
                    }
                }
                let _ = init_tx.send(r.map_err(|e| e.to_string()));
            })
        };
        let mut listener = None;
        let mut init_done = false;
        let reason = loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    // Notifications queued before the end still go out (bounded).
                    let flush = async {
                        while let Ok(msg) = out_rx.try_recv() {
                            if msg.gen == gen && msg.request_id.is_none() && !session.close_stream(&msg.line) {
                                session.clone().post(msg).await;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(2), flush).await;
                    session.delete().await;
                    break None;
                }
                _ = session.expired.cancelled() => break Some("the backend session expired".to_owned()),
                r = &mut init_rx, if !init_done => {
                    init_done = true;
                    match r {
                        Ok(Ok(info)) => {
                            tracing::info!(backend = %core.name, version = %info.protocol_version, era = %info.era, callers = %core.want, "backend initialized");
                            let stateless = info.is_stateless();
                            let _ = core.state.send_replace(State::Ready { gen, info });
                    core.stats.mark_ready();
                            if !stateless {
                                listener = Some(tokio::spawn(session.clone().listen()));
                            }
                        }
                        Ok(Err(e)) => break Some(e),
                        Err(_) => break Some("initialization aborted".to_owned()),
                    }
                }
                msg = out_rx.recv() => {
                    let Some(msg) = msg else { break None };
                    if msg.gen == gen && !session.close_stream(&msg.line) {
                        let id = msg.request_id;
                        let task = tokio::spawn(session.clone().post(msg));
                        if let (Some(id), true) = (id, session.stateless.load(std::sync::atomic::Ordering::Relaxed)) {
                            let mut streams = session.streams.lock();
                            streams.retain(|_, h| !h.is_finished());
                            streams.insert(id, task.abort_handle());
                        }
                    }
                }
            }
        };
        init.abort();
        session.expired.cancel();
        if let Some(l) = listener {
            l.abort();
        }
        reason
    }
}
