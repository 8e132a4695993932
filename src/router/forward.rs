//! Sending one request to one backend of a route: on its connection, or on a
//! connection made for the call.

use super::route::SessionRoute;
use crate::call::{CallCtx, Sink};
use crate::fault::Fault;
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, Notification, RpcError};
use crate::telemetry::metrics::Outcome;
use crate::upstream::{Conn, UpstreamError};
use std::sync::Arc;

/// How a routed request failed.
pub(crate) enum Fail {
    /// The backend's own error object, relayed untouched.
    Raw(Raw),
    /// Gantry's verdict on the request itself (bad params, unknown name): the
    /// client's fault.
    Own(RpcError),
    /// A backend connection failed or Gantry's limits refused the request; the
    /// error knows whose fault that is.
    Upstream(UpstreamError),
    /// Gantry's own failure (a route without the backend it names).
    Internal(RpcError),
    /// Cancelled by the client: no response at all.
    Cancelled,
}

impl Fail {
    /// The JSON-RPC error the client gets (none for a cancellation), and how the
    /// request ended for the metrics.
    pub(crate) fn settle(self) -> (Option<crate::call::ClientAnswer>, Outcome) {
        match self {
            Fail::Raw(e) => (Some(Err(e)), Outcome::Error),
            Fail::Own(e) => (Some(Err(e.to_raw())), Outcome::Failed(Fault::Client)),
            Fail::Upstream(e) => (Some(Err(e.to_rpc().to_raw())), Outcome::Failed(e.fault())),
            Fail::Internal(e) => (Some(Err(e.to_raw())), Outcome::Failed(Fault::Gateway)),
            Fail::Cancelled => (None, Outcome::Cancelled),
        }
    }
}

impl From<RpcError> for Fail {
    fn from(e: RpcError) -> Self {
        Self::Own(e)
    }
}

/// Sends one request to backend `idx` of the session.
pub(crate) async fn forward(
    route: &SessionRoute,
    idx: usize,
    method: &str,
    params: Option<Raw>,
    ctx: &CallCtx,
) -> Result<Raw, Fail> {
    let gantrys_own = matches!(method, "resources/subscribe" | "resources/unsubscribe");
    let links = route.links();
    if links.per_call.get(idx) == Some(&true) && !gantrys_own {
        return forward_per_call(route, idx, method, params, ctx).await;
    }
    let Some(Some(conn)) = links.conns.get(idx) else {
        return Err(Fail::Internal(RpcError::new(
            code::INTERNAL_ERROR,
            "no such backend",
        )));
    };
    relay(conn, method, params, ctx).await
}

/// One request on a connection of its own, stopped when the request ends: its
/// `input_required` rounds included, since the call waits for them. Everything the
/// backend sends meanwhile belongs to this call.
pub(super) async fn forward_per_call(
    route: &SessionRoute,
    idx: usize,
    method: &str,
    params: Option<Raw>,
    ctx: &CallCtx,
) -> Result<Raw, Fail> {
    let Some(slot) = route.links().slots.get(idx).cloned() else {
        return Err(Fail::Internal(RpcError::new(
            code::INTERNAL_ERROR,
            "no such backend",
        )));
    };
    let owner: Sink = Arc::new(PerCallSink {
        call: ctx.sink.clone(),
        route: route.owner.clone(),
    });
    let conn = slot.own_stateless(owner).map_err(Fail::Upstream)?;
    let r = relay(&conn, method, params, ctx).await;
    if let Some(info) = conn.info() {
        slot.remember(&info);
    }
    tokio::spawn(async move { conn.shutdown().await });
    r
}

/// The owner of a connection made for one call: what the backend asks and sends
/// about the call goes to the call; list changes go to the route (its listen
/// streams), as from any of its connections.
pub(super) struct PerCallSink {
    pub(super) call: Sink,
    pub(super) route: Sink,
}

impl crate::call::Downstream for PerCallSink {
    fn notify(&self, n: Notification) {
        if n.method.ends_with("/list_changed") {
            self.route.notify(n);
        } else {
            self.call.notify(n);
        }
    }

    fn ask(
        &self,
        method: String,
        params: Option<Raw>,
    ) -> futures::future::BoxFuture<'static, crate::call::ClientAnswer> {
        self.call.ask(method, params)
    }
}

pub(super) async fn relay(
    conn: &Conn,
    method: &str,
    params: Option<Raw>,
    ctx: &CallCtx,
) -> Result<Raw, Fail> {
    match conn.call(method, params, ctx).await {
        Ok(resp) => resp.outcome.map_err(Fail::Raw),
        Err(UpstreamError::Cancelled) => Err(Fail::Cancelled),
        Err(e) => Err(Fail::Upstream(e)),
    }
}
