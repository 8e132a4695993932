//! Session-era client sessions and their SSE event logs.
//!
//! A [`Session`] belongs to one principal and holds: the negotiated protocol version,
//! the client's capabilities, one [`EventStream`] per SSE stream (the standalone GET
//! stream and one per request answered with SSE), the server→client requests waiting
//! for the client's answer, and the in-flight requests a `notifications/cancelled`
//! can reach. Event logs are per stream, bounded, and never shared between sessions.
//! Sessions expire when idle; ending one cancels everything it started.

mod quota;
mod stream;

pub use quota::{QuotaConfig, QuotaError};
pub use stream::{sse_body, BodyOptions, EventStream, StreamRead};

use quota::Quotas;

use crate::call::{ClientAnswer, Downstream, Sink};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, Notification, Request, RequestId, RpcError};
use crate::router::SessionRoute;
use dashmap::DashMap;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rand::RngCore;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Request streams kept per session for resumption after they finish.
const MAX_STREAMS_KEPT: usize = 32;
/// Bytes of finished request streams that a client has already read to their end
/// which a session keeps for resumption (in case a connection broke after the last
/// bytes were handed to it); beyond it the oldest such streams are forgotten. Without
/// it a session that read 32 large answers kept them all: 64 sessions of 100 KB
/// answers held 290 MB.
const MAX_READ_BYTES_KEPT: usize = 1024 * 1024;
/// Server→client requests that may wait for a client's answer at once, per session.
const MAX_PENDING_ASKS: usize = 64;

/// A session id: 128 random bits as 32 lowercase hex characters.
pub fn new_session_id() -> String {
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Whether a client-supplied session id is shaped like one Gantry issues; anything
/// else is rejected before it is used as a map key or logged.
pub fn plausible_session_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One client session.
pub struct Session {
    /// The id (the `Mcp-Session-Id`, or the legacy `sessionId`).
    pub id: String,
    /// Who created it; only they may use it.
    pub principal: String,
    /// Served over the legacy 2024-11-05 HTTP+SSE transport.
    pub legacy: bool,
    version: OnceLock<String>,
    capabilities: OnceLock<crate::call::Capabilities>,
    route: OnceLock<SessionRoute>,
    /// The standalone stream (GET; for legacy sessions, the one SSE connection).
    pub standalone: Arc<EventStream>,
    streams: Mutex<StreamTable>,
    asks: Mutex<crate::FastMap<u64, oneshot::Sender<ClientAnswer>>>,
    next_ask: AtomicU64,
    inflight: Mutex<Inflight>,
    next_track: AtomicU64,
    inflight_count: AtomicUsize,
    /// Cancelled when the session ends ([`Session::end`], which also cancels the
    /// requests in flight: their tokens are not its children).
    pub cancel: CancellationToken,
    /// Set by [`Session::end`] before it cancels anything: one atomic load for the
    /// per-request checks (a token's own check locks it, and a principal's stateless
    /// route is one session that every one of its requests checks).
    ended: AtomicBool,
    /// When it was created, and when it was last used: nanoseconds since then (a
    /// store, not a lock, at the end of every request).
    created: Instant,
    last_seen: AtomicU64,
    event_buffer: usize,
    /// The client quota it counts against, if any.
    quota_key: Option<String>,
    /// The principal of its latest request, with that request's token (scopes grow
    /// with a step-up; the identity is the session's own).
    caller: Mutex<Option<crate::auth::Principal>>,
}

struct StreamTable {
    map: crate::FastMap<u64, Arc<EventStream>>,
    order: VecDeque<u64>,
    next: u64,
}

impl Session {
    fn new(principal: String, legacy: bool, event_buffer: usize) -> Self {
        Self {
            id: new_session_id(),
            principal,
            legacy,
            version: OnceLock::new(),
            capabilities: OnceLock::new(),
            route: OnceLock::new(),
            standalone: Arc::new(EventStream::new(0, event_buffer)),
            streams: Mutex::new(StreamTable {
                map: crate::FastMap::default(),
                order: VecDeque::new(),
                next: 1,
            }),
            asks: Mutex::new(crate::FastMap::default()),
            next_ask: AtomicU64::new(1),
            inflight: Mutex::new(crate::FastMap::default()),
            next_track: AtomicU64::new(1),
            inflight_count: AtomicUsize::new(0),
            cancel: CancellationToken::new(),
            ended: AtomicBool::new(false),
            created: Instant::now(),
            last_seen: AtomicU64::new(0),
            event_buffer,
            quota_key: None,
            caller: Mutex::new(None),
        }
    }

    /// Records the outcome of `initialize`: version, client capabilities, backends.
    pub fn establish(&self, version: String, capabilities: serde_json::Value, route: SessionRoute) {
        let _ = self.version.set(version);
        let _ = self
            .capabilities
            .set(crate::call::Capabilities::of_value(&capabilities));
        let _ = self.route.set(route);
    }

    /// The negotiated protocol version (`None` before initialize, legacy only).
    pub fn version(&self) -> Option<&str> {
        self.version.get().map(String::as_str)
    }

    /// The client as backends of the stateless era are told about it.
    pub fn client_view(&self) -> crate::call::ClientView {
        crate::call::ClientView {
            capabilities: self.capabilities.get().cloned(),
            log_level: self.route().map(SessionRoute::log_level),
            era: crate::mcp::Era::Session,
            access: None,
        }
    }

    /// The per-session routing state (`None` before initialize, legacy only).
    pub fn route(&self) -> Option<&SessionRoute> {
        self.route.get()
    }

    /// Records the principal of the request being handled (the session's own).
    pub fn set_caller(&self, p: &crate::auth::Principal) {
        *self.caller.lock() = Some(p.clone());
    }

    /// The principal of the latest request.
    pub fn caller(&self) -> Option<crate::auth::Principal> {
        self.caller.lock().clone()
    }

    /// Marks the session as used now.
    pub fn touch(&self) {
        self.last_seen.store(self.age_nanos(), Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let seen = self.last_seen.load(Ordering::Relaxed);
        Duration::from_nanos(self.age_nanos().saturating_sub(seen))
    }

    /// Nanoseconds since it was created (584 years fit).
    fn age_nanos(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the session has ended ([`Session::end`]).
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Whether something is still going on (a call in flight or a stream attached).
    fn busy(&self) -> bool {
        self.inflight_count.load(Ordering::Relaxed) > 0 || self.standalone.has_reader()
    }

    /// Opens a new SSE stream for one request's response.
    pub fn open_stream(&self) -> Arc<EventStream> {
        let mut t = self.streams.lock();
        let id = t.next;
        t.next += 1;
        let s = Arc::new(EventStream::new(id, self.event_buffer));
        t.map.insert(id, s.clone());
        t.order.push_back(id);
        let mut read_bytes: usize = t.map.values().map(|s| s.read_whole_bytes()).sum();
        loop {
            // Beyond the count, evict the oldest *finished* stream (live ones stay);
            // beyond the bytes, the oldest one already read to its end.
            let over_count = t.order.len() > MAX_STREAMS_KEPT;
            if !over_count && read_bytes <= MAX_READ_BYTES_KEPT {
                break;
            }
            let Some(pos) = t.order.iter().position(|k| {
                t.map.get(k).is_none_or(|s| {
                    if over_count {
                        s.is_closed()
                    } else {
                        s.read_whole_bytes() > 0
                    }
                })
            }) else {
                break;
            };
            if let Some(gone) = t.order.remove(pos).and_then(|k| t.map.remove(&k)) {
                read_bytes = read_bytes.saturating_sub(gone.read_whole_bytes());
            }
        }
        s
    }

    /// Drops a request stream whose only message was delivered another way.
    pub fn forget_stream(&self, id: u64) {
        let mut t = self.streams.lock();
        t.map.remove(&id);
        t.order.retain(|k| *k != id);
    }

    /// The stream named by an event id's stream part (0 = standalone).
    pub fn stream(&self, id: u64) -> Option<Arc<EventStream>> {
        if id == 0 {
            return Some(self.standalone.clone());
        }
        self.streams.lock().map.get(&id).cloned()
    }

    /// A sink writing to `stream`.
    pub fn sink_for(self: &Arc<Self>, stream: Arc<EventStream>) -> Sink {
        Arc::new(StreamSink {
            stream,
            session: Arc::downgrade(self),
        })
    }

    /// A sink writing to the standalone stream.
    pub fn standalone_sink(self: &Arc<Self>) -> Sink {
        self.sink_for(self.standalone.clone())
    }

    /// Registers a request in flight so `notifications/cancelled` can reach it.
    ///
    /// Its token is a token of its own, not a child of the session's: a child costs a
    /// lock of the session's token on creation and another on drop, on every call.
    /// [`Session::end`] cancels the tracked tokens instead. Both sides look at the
    /// session's token under the in-flight lock, and `end` sets it before it takes
    /// that lock, so a request tracked while the session ends is cancelled either way.
    pub fn track(self: &Arc<Self>, id: &RequestId) -> InflightGuard {
        let token = CancellationToken::new();
        let n = self.next_track.fetch_add(1, Ordering::Relaxed);
        let key: Arc<str> = Arc::from(id.key());
        {
            let mut inflight = self.inflight.lock();
            inflight
                .entry(key.clone())
                .or_default()
                .push((n, token.clone()));
            if self.is_ended() {
                token.cancel();
            }
        }
        self.inflight_count.fetch_add(1, Ordering::Relaxed);
        InflightGuard {
            session: self.clone(),
            entry: Some((key, n)),
            token,
        }
    }

    /// [`Session::track`] for a request that no client can cancel by its id: a call
    /// on a principal's stateless route, which every request of that principal
    /// shares (the era has no `notifications/cancelled`; its client cancels by
    /// going away, which drops the call and cancels its token). It counts as in
    /// flight, so the route is not reaped while it runs, but takes no place in the
    /// in-flight table, whose lock all of the principal's calls would contend for.
    /// [`Session::end`] does not reach its token: ending the route closes its
    /// backends, and the call ends with its client's request.
    pub fn track_uncancellable(self: &Arc<Self>) -> InflightGuard {
        let token = CancellationToken::new();
        self.inflight_count.fetch_add(1, Ordering::Relaxed);
        if self.is_ended() {
            token.cancel();
        }
        InflightGuard {
            session: self.clone(),
            entry: None,
            token,
        }
    }

    /// Cancels the in-flight request(s) with this client id. A client that reuses
    /// ids while they are in flight cannot say which one it means; all are cancelled.
    pub fn cancel_request(&self, id: &RequestId) -> usize {
        let tokens = self
            .inflight
            .lock()
            .get(id.key())
            .cloned()
            .unwrap_or_default();
        for (_, t) in &tokens {
            t.cancel();
        }
        tokens.len()
    }

    /// Number of client requests in flight.
    pub fn inflight(&self) -> usize {
        self.inflight_count.load(Ordering::Relaxed)
    }

    /// Delivers a client's answer to a server→client request. Returns false if no
    /// such request is waiting (late, unknown, or already answered).
    pub fn answer(&self, id: &RequestId, answer: ClientAnswer) -> bool {
        let Some(n) = id.as_u64() else { return false };
        match self.asks.lock().remove(&n) {
            Some(tx) => tx.send(answer).is_ok(),
            None => false,
        }
    }

    fn register_ask(&self) -> Option<(u64, oneshot::Receiver<ClientAnswer>)> {
        let mut asks = self.asks.lock();
        if asks.len() >= MAX_PENDING_ASKS {
            return None;
        }
        let id = self.next_ask.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        asks.insert(id, tx);
        Some((id, rx))
    }

    /// Ends the session: cancels its calls and streams. Backends are shut down by
    /// the caller (see [`SessionStore::end`]).
    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        for (_, t) in self.inflight.lock().values().flatten() {
            t.cancel();
        }
        self.standalone.close();
        for s in self.streams.lock().map.values() {
            s.close();
        }
        self.asks.lock().clear();
    }
}

/// The client requests in flight, by id (as written): each one's tracking number
/// and token.
type Inflight = crate::FastMap<Arc<str>, Vec<(u64, CancellationToken)>>;

/// Unregisters an in-flight request when dropped.
pub struct InflightGuard {
    session: Arc<Session>,
    /// Its key and tracking number in the in-flight table, if it has a place there.
    entry: Option<(Arc<str>, u64)>,
    token: CancellationToken,
}

impl InflightGuard {
    /// The request's cancellation token.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if let Some((key, n)) = &self.entry {
            let mut m = self.session.inflight.lock();
            if let Some(v) = m.get_mut(key) {
                if let Some(pos) = v.iter().position(|(k, _)| k == n) {
                    v.swap_remove(pos);
                }
                if v.is_empty() {
                    m.remove(key);
                }
            }
        }
        self.session.inflight_count.fetch_sub(1, Ordering::Relaxed);
        self.session.touch();
    }
}

/// Writes backend traffic for one client into one of its streams.
struct StreamSink {
    stream: Arc<EventStream>,
    session: Weak<Session>,
}

pub(crate) use crate::mcp::methods::required_capability;

impl Downstream for StreamSink {
    fn notify(&self, n: Notification) {
        if n.method == "notifications/message" {
            if let (Some(session), Some(level)) = (
                self.session.upgrade(),
                crate::jsonrpc::string_field(n.params.as_ref(), "level"),
            ) {
                if session.route().is_some_and(|r| !r.wants_log(&level)) {
                    return;
                }
            }
        }
        self.stream.push_notification(n.to_json());
    }

    fn ask(&self, method: String, params: Option<Raw>) -> BoxFuture<'static, ClientAnswer> {
        let session = self.session.upgrade();
        let stream = self.stream.clone();
        Box::pin(async move {
            let unavailable = |msg: &str| Err(RpcError::new(code::INTERNAL_ERROR, msg).to_raw());
            let Some(session) = session else {
                return unavailable("the client session has ended");
            };
            if let Some(cap) = required_capability(&method) {
                let declared = session.capabilities.get().is_some_and(|c| c.declares(cap));
                if !declared {
                    return Err(RpcError::new(
                        code::METHOD_NOT_FOUND,
                        format!("the client did not declare the `{cap}` capability"),
                    )
                    .to_raw());
                }
            }
            let Some((id, rx)) = session.register_ask() else {
                return unavailable("too many requests are waiting for this client's answer");
            };
            let req = Request {
                id: RequestId::from_u64(id),
                method,
                params,
            };
            // A request stream that already finished cannot carry it; use the standalone one.
            let target = if stream.is_closed() {
                session.standalone.clone()
            } else {
                stream
            };
            target.push(req.to_json());
            let cancel = session.cancel.clone();
            drop(session);
            tokio::select! {
                r = rx => r.unwrap_or_else(|_| unavailable("the client session has ended")),
                _ = cancel.cancelled() => unavailable("the client session has ended"),
            }
        })
    }
}

/// Why a session could not be found or created.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// The id is unknown, expired, ended, or belongs to someone else.
    #[error("session not found")]
    NotFound,
    /// `max_sessions` are live.
    #[error("too many sessions")]
    Full,
    /// This client's quota forbids one more now.
    #[error(transparent)]
    Quota(#[from] QuotaError),
}

/// How long ending a session waits for its backends to stop before letting them
/// finish stopping in the background.
const PROMPT_CLOSE: Duration = Duration::from_secs(1);

/// All live sessions.
pub struct SessionStore {
    map: DashMap<String, Arc<Session>, foldhash::fast::RandomState>,
    max: usize,
    idle: Duration,
    event_buffer: usize,
    quotas: Quotas,
    /// Ended sessions whose backends are still stopping.
    closing: tokio_util::task::TaskTracker,
    /// Sessions ended because they were idle too long.
    pub reaped: AtomicU64,
}

impl SessionStore {
    /// A store for at most `max` sessions that expire after `idle`, each client
    /// within `quota`.
    pub fn new(max: usize, idle: Duration, event_buffer: usize, quota: QuotaConfig) -> Self {
        Self {
            map: DashMap::default(),
            max,
            idle,
            event_buffer,
            quotas: Quotas::new(quota),
            closing: tokio_util::task::TaskTracker::new(),
            reaped: AtomicU64::new(0),
        }
    }

    /// Creates a session for `principal`, counted against `client`'s quota (`None`:
    /// Gantry's own sessions, such as a principal's stateless-era route).
    pub fn create(
        &self,
        principal: &str,
        legacy: bool,
        client: Option<&str>,
    ) -> Result<Arc<Session>, SessionError> {
        if self.map.len() >= self.max {
            return Err(SessionError::Full);
        }
        if let Some(key) = client {
            self.quotas.admit(key)?;
        }
        let mut session = Session::new(principal.to_owned(), legacy, self.event_buffer);
        session.quota_key = client.map(str::to_owned);
        let s = Arc::new(session);
        self.map.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    /// Finds a session by id, for `principal` only (anyone else gets `NotFound`).
    pub fn get(&self, id: &str, principal: &str) -> Result<Arc<Session>, SessionError> {
        if !plausible_session_id(id) {
            return Err(SessionError::NotFound);
        }
        let s = self.map.get(id).map(|e| e.value().clone());
        match s {
            Some(s) if s.principal == principal && !s.is_ended() => {
                s.touch();
                Ok(s)
            }
            _ => Err(SessionError::NotFound),
        }
    }

    /// Ends and removes a session, shutting down its per-session backends.
    pub async fn end(&self, id: &str) -> bool {
        let Some((_, s)) = self.map.remove(id) else {
            return false;
        };
        if let Some(key) = &s.quota_key {
            self.quotas.release(key);
        }
        s.end();
        // Its backends are stopped before this returns when they exit promptly (so
        // their connection slots are free again); one that takes its time (up to
        // its graces) goes on stopping in the background rather than hold up a
        // DELETE or the reaper. [`SessionStore::end_all`] waits for every one.
        let mut closing = self.closing.spawn(async move {
            if let Some(route) = s.route() {
                route.close().await;
            }
        });
        let _ = tokio::time::timeout(PROMPT_CLOSE, &mut closing).await;
        true
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no sessions.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Ends every session idle longer than the idle timeout. Returns how many.
    pub async fn reap(&self) -> usize {
        let idle: Vec<String> = self
            .map
            .iter()
            .filter(|e| !e.value().busy() && e.value().idle_for() >= self.idle)
            .map(|e| e.key().clone())
            .collect();
        let ended = futures::future::join_all(idle.iter().map(|id| async move {
            let ended = self.end(id).await;
            if ended {
                tracing::info!(session = %id, "session expired after being idle");
            }
            ended
        }))
        .await;
        let n = ended.into_iter().filter(|e| *e).count();
        self.reaped.fetch_add(n as u64, Ordering::Relaxed);
        self.quotas.prune();
        n
    }

    /// Every live session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    /// Ends every session (shutdown).
    pub async fn end_all(&self) {
        let ids: Vec<String> = self.map.iter().map(|e| e.key().clone()).collect();
        futures::future::join_all(ids.iter().map(|id| self.end(id))).await;
        self.closing.close();
        self.closing.wait().await;
        self.closing.reopen();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::session::stream::StreamRead;

    /// A finished request stream holding one answer of `len` bytes.
    fn answered(s: &Session, len: usize) -> Arc<EventStream> {
        let st = s.open_stream();
        st.finish(Some("x".repeat(len)));
        st
    }

    /// Reads a stream as a reader would: its events, then (if `to_end`) its end.
    fn read(st: &EventStream, to_end: bool) {
        let r = st.attach();
        assert!(matches!(st.read(0, r), StreamRead::Events(_)));
        if to_end {
            assert!(matches!(st.read(st.delivered(), r), StreamRead::Closed));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_no_client_can_cancel_by_id_keeps_the_session_busy_and_not_idle() {
        let s = Arc::new(Session::new("p".into(), false, 16));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(s.idle_for() >= Duration::from_secs(60));
        let call = s.track_uncancellable();
        assert!(s.busy() && s.inflight() == 1);
        // Not in the table: cancelling by an id reaches nothing.
        assert_eq!(s.cancel_request(&RequestId::from_string("1")), 0);
        assert!(!call.token().is_cancelled());
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(call);
        assert!(!s.busy());
        assert!(
            s.idle_for() < Duration::from_secs(1),
            "the call's end did not count as use"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(s.idle_for(), Duration::from_secs(2));
        // Tracked once the session ended, a call is cancelled from the start.
        s.end();
        assert!(s.is_ended());
        assert!(s.track_uncancellable().token().is_cancelled());
        assert!(s.track(&RequestId::from_string("2")).token().is_cancelled());
    }

    #[test]
    fn streams_read_to_their_end_are_kept_only_within_a_byte_budget() {
        let s = Session::new("p".into(), false, 16);
        let big = MAX_READ_BYTES_KEPT / 2 + 1;
        // Handed over but never read to its end (the connection broke), and never
        // read at all: both are kept whatever their size, older or not.
        let c = answered(&s, 4 * MAX_READ_BYTES_KEPT);
        read(&c, false);
        let d = answered(&s, 4 * MAX_READ_BYTES_KEPT);
        let a = answered(&s, big);
        read(&a, true);
        let b = answered(&s, big);
        read(&b, true);
        let live = s.open_stream();
        assert!(s.stream(a.id).is_none(), "the oldest read stream was kept");
        for kept in [&b, &c, &d, &live] {
            assert!(
                s.stream(kept.id).is_some(),
                "stream {} was dropped",
                kept.id
            );
        }
        // Small answers read whole stay, up to the count.
        for _ in 0..MAX_STREAMS_KEPT {
            read(&answered(&s, 10), true);
        }
        assert!(s.stream(live.id).is_some(), "a live stream was dropped");
        assert!(s.stream(b.id).is_none() && s.stream(d.id).is_none());
        assert_eq!(s.streams.lock().order.len(), MAX_STREAMS_KEPT);
    }
}
