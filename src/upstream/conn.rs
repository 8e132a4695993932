//! [`Conn`]: one MCP client session with one backend, as the router uses it: start,
//! wait until ready, call (through the in-flight limit), notify, shut down.

use super::bridge::for_session_era;
use super::core::{Core, InitInfo, State};
use super::error::UpstreamError;
use crate::call::{CallCtx, Sink};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{Notification, Response};
use crate::mcp::Era;
use crate::telemetry::trace;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Whether a connection can serve, as the catalog sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Ready: incarnation `0`.
    Up(u64),
    /// Broken (failed to start, restarting after a crash) or closed.
    Down,
    /// Starting, or parked for `idle_timeout` (a request starts it).
    Waiting,
}

impl Availability {
    pub(crate) fn of(state: &State) -> Self {
        match state {
            State::Ready { gen, .. } => Availability::Up(*gen),
            State::Restarting { .. } | State::Failed { .. } | State::Closed => Availability::Down,
            State::Starting | State::Stopping | State::Parked => Availability::Waiting,
        }
    }
}

/// One MCP client session with one backend, over stdio or Streamable HTTP.
pub struct Conn {
    pub(crate) core: Arc<Core>,
    pub(super) shutdown: CancellationToken,
    pub(super) task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Conn {
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

    /// What the backend last listed.
    pub fn lists(&self) -> &super::ListCache {
        &self.core.lists
    }

    /// Whether the connection can serve now, and which incarnation.
    pub fn availability(&self) -> Availability {
        Availability::of(&self.core.state.borrow())
    }

    /// Changes of [`Conn::availability`] (read it again on each).
    pub(crate) fn watch_availability(&self) -> tokio::sync::watch::Receiver<State> {
        self.core.state.subscribe()
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
    /// client through its server→client requests (`bridge::call_stateless`).
    pub async fn call(
        &self,
        method: &str,
        params: Option<Raw>,
        ctx: &CallCtx,
    ) -> Result<Response, UpstreamError> {
        // Time spent queued for an in-flight slot counts against the request timeout.
        let timeout = ctx.timeout.unwrap_or(self.core.request_timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        // Whether any wait below suspended (else all of `timeout` is left: the clock
        // is not read again).
        let mut waited = false;
        // Each wait below is taken without suspending when it need not wait (nearly
        // always), and boxed when it must: this future is part of every call's, which
        // is allocated and moved per request, so what is rare is kept out of it.
        let _in_use = match &self.core.idle {
            Some(idle) => Some(match idle.try_enter() {
                Some(in_use) => in_use,
                None => {
                    waited = true;
                    Box::pin(idle.enter()).await
                }
            }),
            None => None,
        };
        let _permit = match &self.core.slots {
            Some((sem, _)) => match sem.try_acquire() {
                Ok(p) => Some(p),
                Err(_) => {
                    waited = true;
                    Box::pin(self.in_flight_permit(ctx, deadline, timeout)).await?
                }
            },
            None => None,
        };
        let (gen, info) = match self.core.ready_now() {
            Some(ready) => ready,
            None => {
                waited = true;
                Box::pin(self.core.wait_ready(&ctx.cancel)).await?
            }
        };
        // The trace context the backend gets: the hop's span when tracing is on (in
        // `_meta` and, for HTTP, the headers), else the client's, passed on as is.
        let (mut hop, w3c, params) = match &ctx.trace {
            Some(span) => {
                let target = (method == "tools/call")
                    .then(|| crate::jsonrpc::string_field(params.as_ref(), "name"))
                    .flatten();
                let (hop, w3c) = span.hop(&self.core.name, method, target.as_deref());
                let params = trace::with_meta(params, &w3c);
                (Some(Box::new(hop)), Some(w3c), params)
            }
            None => (None, trace::from_meta(params.as_ref()), params),
        };
        let trace_headers = w3c.map(|w| w.headers()).unwrap_or_default();
        let r = if info.is_stateless() {
            crate::boxed_in_place(|| {
                super::bridge::call_stateless(
                    &self.core,
                    gen,
                    method,
                    params,
                    ctx,
                    deadline,
                    trace_headers,
                )
            })
            .await
        } else {
            self.core
                .request_with(
                    gen,
                    method,
                    for_session_era(params).into(),
                    Some(ctx.sink.clone()),
                    &ctx.cancel,
                    if waited {
                        deadline.saturating_duration_since(tokio::time::Instant::now())
                    } else {
                        timeout
                    },
                    trace_headers,
                )
                .await
        };
        if let (Some(hop), Err(e)) = (hop.as_mut(), &r) {
            hop.set_error(&e.to_string());
        }
        // The limit the client is told of is the configured one, not what was left
        // of it once the connection was ready.
        r.map_err(|e| match e {
            UpstreamError::Timeout { backend, .. } => UpstreamError::Timeout {
                backend,
                after: timeout,
            },
            e => e,
        })
    }

    /// Waits for an in-flight slot when the connection has a limit: immediately
    /// refused when the queue is full; waiting counts against the request timeout.
    async fn in_flight_permit(
        &self,
        ctx: &CallCtx,
        deadline: tokio::time::Instant,
        timeout: std::time::Duration,
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
                after: timeout,
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
        if let Some(idle) = &self.core.idle {
            idle.arm();
        }
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
