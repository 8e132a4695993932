//! Streamable HTTP backends: Gantry as an MCP client over HTTP.
//!
//! Every outgoing message is one POST. Responses come back as JSON or as an SSE
//! stream; messages on a request's stream are attributed to that request. The
//! backend's session id is echoed, `MCP-Protocol-Version` is sent after initialize,
//! a POST stream that ends before its response is resumed with `GET` +
//! `Last-Event-ID`, and the standalone GET stream carries unrelated notifications.
//! A 404 on a request with a session id means the backend session expired: in-flight
//! requests fail and the connection re-initializes.

use super::client::{Body, Client, ClientError, Lease};
use super::core::{Core, ExtraHeaders, Outgoing, State};
use super::handshake::handshake;
use super::supervise::Transport;
use crate::config::{HttpConfig, RestartConfig};
use crate::jsonrpc::{Incoming, Notification};
use crate::sse;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, StatusCode};
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Headers a POST's map holds without growing (a request's own and a message's).
const POST_HEADER_ROOM: usize = 12;

/// Attempts to resume one POST stream with `Last-Event-ID` before giving up.
const MAX_RESUMES: u32 = 5;
/// Reconnect delay when the server gave no `retry`.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// How long a backend may take to connect when none is configured.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const JSON_OR_SSE: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
use crate::mcp::header::{LAST_EVENT_ID, PROTOCOL_VERSION, SESSION_ID};

/// One backend HTTP session (one incarnation).
pub(super) struct Session {
    core: Arc<Core>,
    gen: u64,
    client: Arc<Client>,
    /// The backend's URL, for messages.
    url: String,
    /// The configured `http.headers`.
    headers: HeaderMap,
    /// Gantry's own token for the backend (`http.oauth`).
    creds: Option<Arc<super::credentials::ClientCredentials>>,
    id: RwLock<Option<HeaderValue>>,
    version: RwLock<Option<HeaderValue>>,
    /// The headers every POST starts from ([`Session::post_headers`]), built once
    /// and again when the session id or protocol version becomes known.
    post_headers: RwLock<Option<HeaderMap>>,
    /// Cancelled when the backend says the session is gone.
    expired: CancellationToken,
    /// The backend speaks the stateless era: no session, per-request headers, and a
    /// request is cancelled by closing its response stream.
    stateless: std::sync::atomic::AtomicBool,
}

fn read<T: Clone>(l: &RwLock<Option<T>>) -> Option<T> {
    l.read().clone()
}

/// What a POST's answer holds, by its `Content-Type` (compared without regard to
/// case, and without a lower-cased copy of each answer's).
#[derive(Debug, PartialEq)]
enum Answered {
    Sse,
    Json,
    /// Anything else: the type, lower-cased, for the error.
    Other(String),
}

impl Answered {
    fn of(value: Option<&HeaderValue>) -> Self {
        let text = value.map(HeaderValue::as_bytes).unwrap_or_default();
        let is = |prefix: &str| {
            text.get(..prefix.len())
                .is_some_and(|t| t.eq_ignore_ascii_case(prefix.as_bytes()))
        };
        if is("text/event-stream") {
            Self::Sse
        } else if is("application/json") {
            Self::Json
        } else {
            Self::Other(String::from_utf8_lossy(text).to_ascii_lowercase())
        }
    }
}

impl Session {
    /// The session's headers: the configured ones, the session id and protocol
    /// version once known.
    fn headers(&self) -> HeaderMap {
        let mut h = self.headers.clone();
        if let Some(id) = read(&self.id) {
            h.insert(SESSION_ID, id);
        }
        if let Some(v) = read(&self.version) {
            h.insert(PROTOCOL_VERSION, v);
        }
        h
    }

    /// What every POST carries: [`Session::headers`], `Content-Type` and `Accept`
    /// (kept, not rebuilt for each message).
    fn post_headers(&self) -> HeaderMap {
        if let Some(h) = self.post_headers.read().as_ref() {
            return h.clone();
        }
        // Built under the lock: a session id learned meanwhile clears the map only
        // after this one is in place, so a map without it is never kept.
        let mut kept = self.post_headers.write();
        if let Some(h) = kept.as_ref() {
            return h.clone();
        }
        // Room for the headers a message adds (`Mcp-Method`, `Mcp-Name`, a trace
        // context, ...): a clone keeps it, so adding them does not grow the table and
        // rehash it on every request.
        let mut h = HeaderMap::with_capacity(POST_HEADER_ROOM);
        h.extend(self.headers());
        h.insert(CONTENT_TYPE, JSON);
        h.insert(ACCEPT, JSON_OR_SSE);
        *kept = Some(h.clone());
        h
    }

    /// Records the backend's session id or protocol version (`slot`), which the
    /// headers of the next requests carry.
    fn learn(&self, slot: &RwLock<Option<HeaderValue>>, v: HeaderValue) {
        *slot.write() = Some(v);
        *self.post_headers.write() = None;
    }

    /// Sends one request, with Gantry's token when `http.oauth` is set (a token that
    /// cannot be had is logged; the backend's 401 says the rest). The response's
    /// headers must come within the request timeout.
    async fn exchange(
        &self,
        method: Method,
        headers: HeaderMap,
        body: Body,
    ) -> Result<(http::Response<hyper::body::Incoming>, Lease), ClientError> {
        let after = self.core.request_timeout;
        tokio::time::timeout(after, self.exchange_untimed(method, headers, body))
            .await
            // The message is written only when it is needed (`unwrap_or` formatted it
            // on every request).
            .unwrap_or_else(|_| {
                Err(ClientError::Http(format!(
                    "no response within {}",
                    crate::telemetry::human(after)
                )))
            })
    }

    /// [`Session::exchange`] without a deadline of its own, for a caller that has one.
    async fn exchange_untimed(
        &self,
        method: Method,
        mut headers: HeaderMap,
        body: Body,
    ) -> Result<(http::Response<hyper::body::Incoming>, Lease), ClientError> {
        if let Some(c) = &self.creds {
            match c.bearer().await {
                Ok(t) => match HeaderValue::from_str(&format!("Bearer {t}")) {
                    Ok(v) => {
                        headers.insert(AUTHORIZATION, v);
                    }
                    Err(_) => {
                        tracing::warn!(backend = %self.core.name, "the backend's access token is not a valid header value")
                    }
                },
                Err(e) => {
                    tracing::warn!(backend = %self.core.name, error = %e, "no access token for the backend")
                }
            }
        }
        self.client.send(method, headers, body).await
    }

    fn remember_session_id(&self, resp: &http::Response<hyper::body::Incoming>) {
        if read(&self.id).is_none() {
            if let Some(id) = resp
                .headers()
                .get(SESSION_ID)
                .filter(|v| !v.is_empty() && v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b)))
            {
                self.learn(&self.id, id.clone());
            }
        }
    }

    /// The headers of the stateless era for one outgoing message (also used for the
    /// `server/discover` probe, before the era is known).
    fn stateless_headers(&self, h: &mut HeaderMap, line: &str, extra: &ExtraHeaders) {
        let stateless = self.stateless.load(std::sync::atomic::Ordering::Relaxed);
        // A relayed call brings its own (`bridge::call_stateless`).
        if extra.iter().any(|(k, _)| k == crate::mcp::header::METHOD) {
            return;
        }
        // Session-era traffic is not parsed here (only the era probe gets headers).
        if !stateless && crate::jsonrpc::written_request_method(line) != Some("\"server/discover\"")
        {
            return;
        }
        // Read in one pass, borrowing: the rest (a tool's arguments) is skipped.
        let Some((top, params)) = crate::jsonrpc::members::Object::parse_with(line, "params")
        else {
            return;
        };
        // Only a request (not a notification) gets the headers.
        if top.get("id").is_none_or(|id| id == "null") {
            return;
        }
        let Some(method) = top.str("method") else {
            return;
        };
        if !stateless && method != "server/discover" {
            return;
        }
        if let Ok(v) = HeaderValue::from_str(&method) {
            h.insert(crate::mcp::header::METHOD, v);
        }
        if !stateless {
            h.insert(
                PROTOCOL_VERSION,
                HeaderValue::from_static(crate::mcp::STATELESS_VERSION),
            );
        }
        let name =
            crate::mcp::header::name_field(&method).and_then(|field| params.as_ref()?.str(field));
        if let Some(v) = name {
            if let Ok(v) = HeaderValue::from_str(&crate::mcp::header::encode(&v)) {
                h.insert(crate::mcp::header::NAME, v);
            }
        }
    }

    /// Whether a request's params may go apart from its envelope's head
    /// ([`Outgoing::params`]): not when [`Session::stateless_headers`] reads them
    /// from the whole message (a stateless-era backend, the era probe).
    pub(super) fn takes_params_apart(&self, method: &str) -> bool {
        !self.stateless.load(std::sync::atomic::Ordering::Relaxed) && method != "server/discover"
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
        // The request's POST ran in its caller's task (`Core::send_request`), which
        // closed its stream when it gave up on it: nothing is left to send.
        n.method == "notifications/cancelled"
    }

    /// POSTs one message and relays whatever comes back.
    pub(super) async fn post(self: Arc<Self>, msg: Outgoing) {
        self.post_timed(msg, true).await;
    }

    /// [`Session::post`] of a request whose caller awaits it beside the request's
    /// own deadline (`Core::send_request`), which bounds the exchange: one timer per
    /// call, not two.
    pub(super) async fn post_in_call(self: Arc<Self>, msg: Outgoing) {
        self.post_timed(msg, false).await;
    }

    async fn post_timed(self: Arc<Self>, msg: Outgoing, timed: bool) {
        let Outgoing {
            line,
            params,
            request_id,
            headers: extra,
            ..
        } = msg;
        let fail = |reason: String| {
            if let Some(id) = request_id {
                self.core.fail_one(id, reason);
            }
        };
        let had_session = read(&self.id).is_some();
        let mut headers = self.post_headers();
        self.stateless_headers(&mut headers, &line, &extra);
        // Per-message headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`, trace
        // context): none of them is `Content-Type` or `Accept`.
        for (k, v) in extra {
            headers.append(k, v);
        }
        let body = match params {
            Some(p) => Body::parts(
                Bytes::from(line),
                p,
                Bytes::from_static(crate::jsonrpc::REQUEST_END.as_bytes()),
            ),
            None => Body::from(Bytes::from(line)),
        };
        let len = body.len();
        let retry_headers = self.creds.as_ref().map(|_| headers.clone());
        let this = &self;
        let exchange = |headers, body| async move {
            if timed {
                this.exchange(Method::POST, headers, body).await
            } else {
                this.exchange_untimed(Method::POST, headers, body).await
            }
        };
        let mut resp = exchange(headers, body.clone()).await;
        // A 401 with Gantry's own token: fetched anew, sent once more.
        if let (Some(c), Some(h), Ok((r, _))) = (&self.creds, retry_headers, &resp) {
            if r.status() == StatusCode::UNAUTHORIZED {
                c.refused().await;
                resp = exchange(h, body).await;
            }
        }
        let (resp, mut lease) = match resp {
            Ok(r) => r,
            Err(e) => return fail(format!("cannot reach {}: {e}", self.url)),
        };
        self.core.stats.bytes(false, len);
        self.remember_session_id(&resp);
        let status = resp.status();
        if status == StatusCode::NOT_FOUND && had_session {
            self.expired.cancel();
            return fail("the backend session expired; reconnecting".into());
        }
        let ctype = Answered::of(resp.headers().get(CONTENT_TYPE));
        let body = resp.into_body();
        if !status.is_success() {
            let body = match lease.read_body(body, self.core.max_message_bytes).await {
                Ok(b) => {
                    self.client.release(lease);
                    b
                }
                Err(_) => Bytes::new(),
            };
            // A JSON-RPC error answering this very request (the stateless era puts
            // -32020 … -32022 on a 400, -32601 on a 404) is the backend's answer.
            if let (Some(id), Ok(crate::jsonrpc::Message::Response(r))) =
                (request_id, crate::jsonrpc::Message::parse(&body))
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
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            if lease
                .read_body(body, self.core.max_message_bytes)
                .await
                .is_ok()
            {
                self.client.release(lease);
            }
            return;
        }
        if ctype == Answered::Sse {
            let mut last_id = None;
            let mut retry = DEFAULT_RETRY;
            if self
                .read_stream(body, &mut lease, request_id, &mut last_id, &mut retry)
                .await
            {
                self.client.release(lease);
            }
            self.resume(request_id, last_id, retry).await;
        } else if ctype == Answered::Json {
            match lease.read_body(body, self.core.max_message_bytes).await {
                Ok(body) => {
                    self.client.release(lease);
                    self.relay(body, request_id);
                }
                Err(e) => fail(e),
            }
        } else {
            let ctype = match ctype {
                Answered::Other(t) => t,
                _ => String::new(),
            };
            fail(format!("unexpected content type `{ctype}`"));
        }
    }

    fn relay(&self, body: Bytes, related: Option<u64>) {
        self.core.stats.bytes(true, body.len());
        // A stateless-era backend's results are shaped for the client's era
        // (`splice_for_stateless`, `for_session_client`): where their members are
        // is kept as they are checked. A session-era backend's are relayed unread.
        let parsed = if self.stateless.load(std::sync::atomic::Ordering::Relaxed) {
            Incoming::parse_shared_with_result(body)
        } else {
            Incoming::parse_shared(body)
        };
        match parsed {
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

    /// Reads an SSE response to its end, relaying each message; true when it
    /// ended as the server closed it (its connection can be reused).
    async fn read_stream(
        &self,
        mut body: hyper::body::Incoming,
        lease: &mut Lease,
        related: Option<u64>,
        last_id: &mut Option<String>,
        retry: &mut Duration,
    ) -> bool {
        let mut parser = sse::Parser::new(self.core.max_message_bytes);
        let mut expired = std::pin::pin!(crate::cancel::Cancelled::new(&self.expired));
        loop {
            let frame = tokio::select! {
                f = lease.frame(&mut body) => f,
                () = expired.as_mut() => return false,
            };
            let chunk = match frame {
                None => return true,
                Some(Err(e)) => {
                    tracing::debug!(backend = %self.core.name, error = %e, "backend SSE stream broke");
                    return false;
                }
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
            };
            let events = match parser.feed(&chunk) {
                Ok(evs) => evs,
                Err(e) => {
                    tracing::warn!(backend = %self.core.name, error = %e, "backend SSE stream dropped");
                    return false;
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
                self.relay(Bytes::from(ev.data), related);
            }
        }
    }

    /// A GET for an SSE stream (resumed from `last_id`).
    async fn get_stream(
        &self,
        last_id: Option<&str>,
    ) -> Result<(http::Response<hyper::body::Incoming>, Lease), ClientError> {
        let mut h = self.headers();
        h.insert(ACCEPT, SSE);
        if let Some(v) = last_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            h.insert(LAST_EVENT_ID, v);
        }
        self.exchange(Method::GET, h, Body::default()).await
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
            match self.get_stream(Some(&event_id)).await {
                Ok((r, mut lease)) if r.status().is_success() => {
                    if self
                        .read_stream(
                            r.into_body(),
                            &mut lease,
                            Some(id),
                            &mut last_id,
                            &mut retry,
                        )
                        .await
                    {
                        self.client.release(lease);
                    }
                }
                Ok((r, _)) => {
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
            let resp = tokio::select! {
                r = self.get_stream(last_id.as_deref()) => r,
                _ = self.expired.cancelled() => return,
            };
            match resp {
                Ok((r, _)) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                Ok((r, _)) if r.status() == StatusCode::NOT_FOUND => {
                    self.expired.cancel();
                    return;
                }
                Ok((r, mut lease)) if r.status().is_success() => {
                    failures = 0;
                    if self
                        .read_stream(r.into_body(), &mut lease, None, &mut last_id, &mut retry)
                        .await
                    {
                        self.client.release(lease);
                    }
                }
                Ok((r, _)) => {
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
            self.exchange(Method::DELETE, self.headers(), Body::default()),
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
    let extra_ca = match cfg
        .ca_file
        .as_deref()
        .map(crate::config::load_ca_file)
        .transpose()
    {
        Ok(ca) => ca.unwrap_or_default(),
        Err(reason) => {
            let _ = core.state.send_replace(State::Failed { reason });
            return;
        }
    };
    let client = match Client::new(&cfg.url, cfg.version, &extra_ca, CONNECT_TIMEOUT) {
        Ok(c) => Arc::new(c),
        Err(reason) => {
            let _ = core.state.send_replace(State::Failed { reason });
            return;
        }
    };
    let mut headers = HeaderMap::new();
    for (k, v) in &cfg.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
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
        url: cfg.url.clone(),
        headers,
        creds,
    };
    super::supervise::supervise(core, transport, restart, out_rx, shutdown).await;
}

/// The Streamable HTTP transport: each incarnation is one backend session.
struct Http {
    client: Arc<Client>,
    url: String,
    headers: HeaderMap,
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
            post_headers: RwLock::new(None),
            expired: CancellationToken::new(),
            stateless: std::sync::atomic::AtomicBool::new(false),
        });
        // Requests are POSTed by their callers from here on (`Core::send_request`).
        *core.http.write() = Some((gen, session.clone()));
        let _live = LiveSession(core);
        let (init_tx, mut init_rx) = tokio::sync::oneshot::channel();
        let init = {
            let session = session.clone();
            tokio::spawn(async move {
                let r = handshake(&session.core, gen).await;
                if let Ok(info) = &r {
                    if let Ok(v) = HeaderValue::from_str(&info.protocol_version) {
                        session.learn(&session.version, v);
                    }
                    if info.is_stateless() {
                        session
                            .stateless
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        let _ = init_tx.send(Ok(info.clone()));
                        return;
                    }
                    let note = Notification::new("notifications/initialized", None).to_json();
                    let h = session.post_headers();
                    match session
                        .exchange(Method::POST, h, Bytes::from(note).into())
                        .await
                    {
                        Ok((resp, mut lease)) => {
                            let max = session.core.max_message_bytes;
                            if lease.read_body(resp.into_body(), max).await.is_ok() {
                                session.client.release(lease);
                            }
                        }
                        Err(e) => {
                            let _ =
                                init_tx.send(Err(format!("initialized notification failed: {e}")));
                            return;
                        }
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
                        tokio::spawn(session.clone().post(msg));
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

/// Takes the session out of [`Core::http`] when its incarnation ends, however it ends
/// (the session holds the core: it must not outlive the incarnation there).
struct LiveSession<'a>(&'a Core);

impl Drop for LiveSession<'_> {
    fn drop(&mut self) {
        *self.0.http.write() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_by_its_content_type_whatever_its_case_and_parameters() {
        let of = |t: &'static str| Answered::of(Some(&HeaderValue::from_static(t)));
        assert_eq!(of("text/event-stream"), Answered::Sse);
        assert_eq!(of("Text/Event-Stream; charset=utf-8"), Answered::Sse);
        assert_eq!(of("application/json"), Answered::Json);
        assert_eq!(of("APPLICATION/JSON;charset=UTF-8"), Answered::Json);
        assert_eq!(of("Text/HTML"), Answered::Other("text/html".into()));
        assert_eq!(of("text/event"), Answered::Other("text/event".into()));
        assert_eq!(Answered::of(None), Answered::Other(String::new()));
    }
}
