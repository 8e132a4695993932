//! One stateless call driven to its answer: the result, an `input_required` (the call
//! parked until the client retries), or an SSE stream when the call sends progress or
//! logs first; the client closing the stream cancels it.

use super::super::http::Accepts;
use super::super::session_era::run_tracked_as;
use super::super::App;
use super::mrtr::{Ask, Binding, StateError};
use super::route::Internal;
use super::up::{UpReceiver, UpSender};
use crate::auth::Principal;
use crate::call::{ClientAnswer, Downstream, Sink};
use crate::front::stateless::answer;
use crate::front::stateless::cache_scope;
use crate::front::stateless::json_body;
use crate::front::stateless::server_info;
use crate::front::stateless::validate::Declared;
use crate::front::stateless::{server_info_raw, with_request_state, Params};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, Notification, Request, RequestId, Response, RpcError};
use crate::mcp::META_SERVER_INFO;
use crate::router::level_rank;
use axum::http::StatusCode;
use axum::response::Response as HttpResponse;
use futures::future::BoxFuture;
use futures::StreamExt as _;
use indexmap::IndexMap;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use sync_wrapper::SyncWrapper;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Backend traffic of one stateless call, for its HTTP handler.
pub(super) enum Up {
    Note(Notification),
    Ask(Ask),
    /// The backend needs a capability the client did not declare.
    Missing(&'static str),
}

/// The [`Downstream`] of one stateless call.
pub(super) struct CallSink {
    pub(super) tx: UpSender,
    pub(super) capabilities: crate::call::Capabilities,
    pub(super) log_rank: Option<u8>,
    pub(super) cancel: CancellationToken,
}

impl Downstream for CallSink {
    fn notify(&self, n: Notification) {
        let wanted = match n.method.as_str() {
            "notifications/progress" => true,
            "notifications/message" => self.log_rank.is_some_and(|min| {
                crate::jsonrpc::string_field(n.params.as_ref(), "level")
                    .and_then(|l| level_rank(&l))
                    .is_some_and(|r| r >= min)
            }),
            _ => false,
        };
        if wanted && self.tx.try_send(Up::Note(n)).is_err() {
            tracing::debug!("stateless call: notification dropped (client not reading)");
        }
    }

    fn ask(&self, method: String, params: Option<Raw>) -> BoxFuture<'static, ClientAnswer> {
        let tx = self.tx.handle();
        let cancel = self.cancel.clone();
        let missing = crate::session::required_capability(&method)
            .filter(|cap| !self.capabilities.declares(cap));
        Box::pin(async move {
            let gone = || {
                Err(RpcError::new(code::INTERNAL_ERROR, "the client request has ended").to_raw())
            };
            if let Some(cap) = missing {
                let _ = tx.try_send(Up::Missing(cap));
                return Err(RpcError::new(
                    code::METHOD_NOT_FOUND,
                    format!("the client did not declare the `{cap}` capability"),
                )
                .to_raw());
            }
            let (reply, rx) = oneshot::channel();
            let ask = Up::Ask(Ask {
                method,
                params,
                reply,
            });
            if tx.send(ask).await.is_err() {
                return gone();
            }
            tokio::select! {
                r = rx => r.unwrap_or_else(|_| gone()),
                _ = cancel.cancelled() => gone(),
            }
        })
    }
}

/// The answer of a stateless call. The call runs right in its HTTP handler (no task,
/// no hop between tasks) until it has to outlive the handler's wait: when it asks the
/// client for input (it goes on while parked, and may ask more) or is dropped (it
/// still has to finish its cancellation upstream), it moves to a task of its own.
pub(super) enum Done {
    Inline(SyncWrapper<BoxFuture<'static, Option<Response>>>),
    Spawned(oneshot::Receiver<Option<Response>>),
    /// Finished, its answer not taken yet: notifications it sent in the very poll
    /// that finished it (an HTTP backend's stream read in that poll) go first.
    Ready(Option<Response>),
    /// Already answered.
    Taken,
}

impl Done {
    /// Moves an inline call to its own task.
    pub(super) fn detach(&mut self) {
        if let Done::Inline(_) = self {
            let Done::Inline(call) = std::mem::replace(self, Done::Taken) else {
                return;
            };
            let (tx, rx) = oneshot::channel();
            spawn_call(call.into_inner(), Some(tx));
            *self = Done::Spawned(rx);
        }
    }
}

/// Runs `call` to its end in a task of its own, answering `tx` if given. Outside a
/// runtime (a process shutting down) the call is dropped.
fn spawn_call(
    call: BoxFuture<'static, Option<Response>>,
    tx: Option<oneshot::Sender<Option<Response>>>,
) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let r = call.await;
            if let Some(tx) = tx {
                let _ = tx.send(r);
            }
        });
    }
}

impl std::future::Future for Done {
    type Output = Option<Response>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.get_mut();
        let r = match this {
            Done::Inline(call) => match call.get_mut().as_mut().poll(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => return Poll::Pending,
            },
            Done::Spawned(rx) => match std::pin::Pin::new(rx).poll(cx) {
                Poll::Ready(r) => r.ok().flatten(),
                Poll::Pending => return Poll::Pending,
            },
            Done::Ready(r) => r.take(),
            Done::Taken => None,
        };
        *this = Done::Taken;
        Poll::Ready(r)
    }
}

/// A stateless call in progress. Dropping it cancels the call upstream (the client
/// closed its stream, or its parked call expired).
pub(crate) struct Running {
    pub(super) done: Done,
    pub(super) up: UpReceiver,
    pub(super) cancel: CancellationToken,
    /// Input requests asked so far (names the keys).
    pub(super) asked: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
        // A call still running in the handler is cancelled in a task of its own: it
        // tells the backend (`notifications/cancelled`) and releases its place.
        if let Done::Inline(call) = std::mem::replace(&mut self.done, Done::Taken) {
            spawn_call(call.into_inner(), None);
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn call(
    app: Arc<App>,
    principal: Principal,
    internal: Arc<Internal>,
    id: RequestId,
    method: String,
    params: &Params<'_>,
    declared: Declared,
    accepts: Accepts,
) -> HttpResponse {
    let binding = crate::mcp::header::named_method(&method).map(|(method, field)| Binding {
        principal: principal.shared_name(),
        method,
        name: params.str(field).unwrap_or_default().into_owned(),
    });
    // The params travel on as the client wrote them, with `inputResponses`,
    // `requestState` and the protocol's `_meta` keys: a stateless-era backend's
    // connection restates the keys it owns (`bridge::for_stateless_era`), a
    // session-era backend's takes out all of them (`bridge::for_session_era`).
    let mut foreign = None;
    if let (Some(state), Some(binding)) = (params.str("requestState"), &binding) {
        if state.starts_with("g2.") {
            // A stateless-era backend's own state, wrapped by Gantry: unwrapped for it.
            match app.mrtr.open_foreign(&state, binding) {
                Ok(inner) => foreign = Some(inner),
                Err(e) => {
                    tracing::info!(principal = %binding.principal, error = %e, "stateless retry refused");
                    return answer(
                        StatusCode::OK,
                        Some(id),
                        &RpcError::new(code::INVALID_PARAMS, e.to_string()),
                    );
                }
            }
        } else {
            return resume(
                app,
                id,
                &method,
                binding.clone(),
                state.into_owned(),
                params,
                declared,
                accepts,
            )
            .await;
        }
    }
    let relayed = match foreign.as_deref() {
        None => params.raw.cloned(),
        Some(state) => Some(with_request_state(params, state)),
    };
    let session = internal.session.clone();
    let capabilities = declared.capabilities;
    let client = crate::call::ClientView {
        capabilities: Some(capabilities.clone()),
        log_level: declared
            .log_rank
            .and_then(|r| crate::router::LOG_LEVELS.get(usize::from(r)).copied()),
        era: crate::mcp::Era::Stateless,
        access: app.access(&principal),
    };
    // The tool a call names (limits and metrics), read here from the client's
    // params rather than again from those relayed.
    let tool = (method == "tools/call")
        .then(|| params.str("name").map(std::borrow::Cow::into_owned))
        .flatten();
    let upstream = Request {
        id: id.clone(),
        method: method.clone(),
        params: relayed,
    };
    let guard = session.track_uncancellable();
    let cancel = guard.token();
    let (tx, up) = super::up::queue();
    let sink: Sink = Arc::new(CallSink {
        tx,
        capabilities,
        log_rank: declared.log_rank,
        cancel: cancel.clone(),
    });
    let task_app = app.clone();
    let done = Done::Inline(SyncWrapper::new(crate::boxed_in_place(|| async move {
        run_tracked_as(&task_app, &session, upstream, tool, sink, guard, client).await
    })));
    let running = Running {
        done,
        up,
        cancel,
        asked: 0,
    };
    drive(app, running, id, method, binding, accepts).await
}

/// A retry with `inputResponses`: the parked call gets its answers and goes on.
#[allow(clippy::too_many_arguments)]
pub(super) async fn resume(
    app: Arc<App>,
    id: RequestId,
    method: &str,
    binding: Binding,
    state: String,
    params: &Params<'_>,
    _declared: Declared,
    accepts: Accepts,
) -> HttpResponse {
    let responses = match params.value("inputResponses") {
        Some(Value::Object(r)) if r.values().all(Value::is_object) => r,
        _ => {
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(
                    code::INVALID_PARAMS,
                    "inputResponses must be an object mapping each input request's key to its result object",
                ),
            )
        }
    };
    let mut parked = match app.mrtr.redeem(&state, &binding) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(principal = %binding.principal, error = %e, "stateless retry refused");
            let e: &StateError = &e;
            return answer(
                StatusCode::OK,
                Some(id),
                &RpcError::new(code::INVALID_PARAMS, e.to_string()),
            );
        }
    };
    let mut open = IndexMap::new();
    for (key, ask) in parked.asks.drain(..) {
        match responses.get(&key) {
            Some(v) => {
                let _ = ask.reply.send(Ok(to_raw(v)));
            }
            None => {
                open.insert(key, ask);
            }
        }
    }
    let running = parked.call;
    if !open.is_empty() {
        // Some answers are missing: ask again for those.
        let (status, body) = park(&app, running, open, binding, id);
        return json_body(status, body);
    }
    drive(app, running, id, method.to_owned(), Some(binding), accepts).await
}

/// How long Gantry waits for more input requests after the first, so that requests
/// a backend sends together reach the client in one `input_required`.
pub(super) const ASK_GATHER: Duration = Duration::from_millis(20);

/// Waits for the call's next step and answers the client: its result, an
/// `input_required` (the call parked), or an SSE stream when the call sends progress
/// or logs first.
pub(super) async fn drive(
    app: Arc<App>,
    mut running: Running,
    id: RequestId,
    method: String,
    binding: Option<Binding>,
    accepts: Accepts,
) -> HttpResponse {
    loop {
        // What the call sent before its result is taken first: a notification
        // pushed just before the result must not lose to it.
        let up = tokio::select! {
            biased;
            up = running.up.recv() => up,
            r = &mut running.done => {
                if running.up.is_empty() {
                    return complete(&app, &method, binding.as_ref(), id, r, accepts);
                }
                running.done = Done::Ready(r);
                continue;
            }
        };
        match up {
            None => {
                // The sink is gone: only the result can come now.
                let r = (&mut running.done).await;
                return complete(&app, &method, binding.as_ref(), id, r, accepts);
            }
            Some(Up::Note(n)) => {
                if accepts.sse {
                    return stream(app, running, id, method, binding, n);
                }
            }
            Some(Up::Ask(first)) => {
                // It goes on while parked, and may ask for more meanwhile.
                running.done.detach();
                let asks = gather(&mut running, first).await;
                let (status, body) = step(&app, running, asks, id, &method, binding);
                return json_body(status, body);
            }
            Some(Up::Missing(cap)) => {
                let (status, body) = stuck(id, &method, Some(cap));
                return json_body(status, body);
            }
        }
    }
}

/// The first input request plus any others that follow within [`ASK_GATHER`], keyed.
pub(super) async fn gather(running: &mut Running, first: Ask) -> IndexMap<String, Ask> {
    let mut asks = IndexMap::new();
    let mut next = Some(first);
    let deadline = tokio::time::Instant::now() + ASK_GATHER;
    while let Some(ask) = next.take() {
        running.asked += 1;
        let kind = match ask.method.as_str() {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => "input",
        };
        asks.insert(format!("{kind}-{}", running.asked), ask);
        if asks.len() >= 16 {
            break;
        }
        if let Ok(Some(Up::Ask(a))) = tokio::time::timeout_at(deadline, running.up.recv()).await {
            next = Some(a);
        }
    }
    asks
}

pub(super) fn input_requests(asks: &IndexMap<String, Ask>) -> Map<String, Value> {
    let mut requests = Map::new();
    for (key, ask) in asks {
        let mut r = json!({ "method": ask.method });
        if let (Some(p), Some(obj)) = (&ask.params, r.as_object_mut()) {
            if let Ok(v) = serde_json::from_str::<Value>(p.get()) {
                obj.insert("params".into(), v);
            }
        }
        requests.insert(key.clone(), r);
    }
    requests
}

/// Parks the call and builds the `input_required` answer naming its open requests.
pub(super) fn park(
    app: &App,
    running: Running,
    asks: IndexMap<String, Ask>,
    binding: Binding,
    id: RequestId,
) -> (StatusCode, String) {
    let requests = input_requests(&asks);
    match app.mrtr.park(running, asks, binding) {
        Ok(state) => {
            let body = json!({
                "resultType": "input_required",
                "inputRequests": requests,
                "requestState": state,
                "_meta": { META_SERVER_INFO: server_info() },
            });
            (StatusCode::OK, Response::ok(id, to_raw(&body)).to_json())
        }
        Err((e, running)) => {
            drop(running);
            let e = RpcError::new(code::INTERNAL_ERROR, e.to_string());
            (StatusCode::OK, Response::err(Some(id), &e).to_json())
        }
    }
}

/// The call cannot continue: the backend asked for input during a request that
/// cannot return `input_required`, or the client lacks the capability it needs.
pub(super) fn stuck(id: RequestId, method: &str, missing: Option<&str>) -> (StatusCode, String) {
    let (status, e) = match missing {
        Some(cap) => {
            let mut required = Map::new();
            required.insert(cap.to_owned(), json!({}));
            (
                StatusCode::BAD_REQUEST,
                RpcError::new(
                    code::MISSING_CLIENT_CAPABILITY,
                    format!("Missing required client capability: {cap}"),
                )
                .with_data(json!({ "requiredCapabilities": required })),
            )
        }
        None => (
            StatusCode::OK,
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("the backend asked the client for input during {method}, which cannot return input_required"),
            ),
        ),
    };
    (status, Response::err(Some(id), &e).to_json())
}

/// The next step of a call that is not a notification, as the client's answer.
pub(super) fn step(
    app: &App,
    running: Running,
    asks: IndexMap<String, Ask>,
    id: RequestId,
    method: &str,
    binding: Option<Binding>,
) -> (StatusCode, String) {
    match binding {
        Some(b) => park(app, running, asks, b, id),
        None => stuck(id, method, None),
    }
}

/// Shapes a backend's final answer for a stateless client.
pub(super) fn final_message(
    app: &App,
    method: &str,
    binding: Option<&Binding>,
    id: RequestId,
    r: Option<Response>,
) -> (StatusCode, String) {
    let Some(r) = r else {
        let e = RpcError::new(code::INTERNAL_ERROR, "the request was cancelled");
        return (StatusCode::OK, Response::err(Some(id), &e).to_json());
    };
    match r.outcome {
        Ok(result) => {
            let private = cache_scope(app) == "private";
            let id_text = id.raw().get();
            // The envelope around the result (40 bytes) and what the splice adds.
            let room = 40 + crate::mcp::results::stateless_splice_room(server_info_raw());
            let mut out = String::with_capacity(result.get().len() + id_text.len() + room);
            out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
            out.push_str(id_text);
            out.push_str(",\"result\":");
            if crate::mcp::results::splice_for_stateless(
                &mut out,
                &result,
                method,
                private,
                server_info_raw(),
            ) {
                out.push('}');
                return (StatusCode::OK, out);
            }
            // Shaped by its top-level fields: the content is relayed as it came.
            let shaped = crate::mcp::results::ResultText::read(result.get());
            let mut sealed = None;
            if shaped.is_input_required() {
                // A stateless-era backend asks for input: its state goes to the client
                // sealed, so only this caller can bring it back, for this call.
                let Some(binding) = binding else {
                    return stuck(id, method, None);
                };
                sealed = shaped
                    .request_state()
                    .map(|state| app.mrtr.seal_foreign(&state, binding));
            }
            shaped.write_for_stateless(
                &mut out,
                method,
                private,
                server_info_raw(),
                sealed.as_deref(),
            );
            out.push('}');
            (StatusCode::OK, out)
        }
        Err(error) => {
            let mut e: Map<String, Value> = serde_json::from_str(error.get()).unwrap_or_default();
            let code_of = e
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(code::INTERNAL_ERROR);
            if code_of == code::RESOURCE_NOT_FOUND {
                // 2026-07-28: a missing resource is invalid params, naming the URI.
                e.insert("code".into(), json!(code::INVALID_PARAMS));
            }
            let status = match e.get("code").and_then(Value::as_i64) {
                Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
                Some(
                    code::HEADER_MISMATCH
                    | code::MISSING_CLIENT_CAPABILITY
                    | code::UNSUPPORTED_PROTOCOL_VERSION,
                ) => StatusCode::BAD_REQUEST,
                _ => StatusCode::OK,
            };
            let raw = to_raw(&e);
            (
                status,
                Response {
                    id: Some(id),
                    outcome: Err(raw),
                }
                .to_json(),
            )
        }
    }
}

pub(super) fn complete(
    app: &App,
    method: &str,
    binding: Option<&Binding>,
    id: RequestId,
    r: Option<Response>,
    accepts: Accepts,
) -> HttpResponse {
    let (status, body) = final_message(app, method, binding, id, r);
    reply(status, body, accepts)
}

/// An answer in one write: JSON when the client takes JSON, as every client of the
/// era must. The call sent nothing before its answer (or it would be streaming
/// already), and the era has no stream to resume, so an SSE event around the lone
/// answer would only cost both ends its framing. SSE for a client that takes only
/// that; JSON for HTTP-level errors.
pub(super) fn reply(status: StatusCode, body: String, accepts: Accepts) -> HttpResponse {
    if status == StatusCode::OK && accepts.sse && !accepts.json {
        crate::front::http::sse_message_body(String::new(), None, body)
    } else {
        json_body(status, body)
    }
}

/// Streams the rest of a call as SSE: its notifications, then its result (or an
/// `input_required`). The client closing the stream cancels the call.
pub(super) fn stream(
    app: Arc<App>,
    mut running: Running,
    id: RequestId,
    method: String,
    binding: Option<Binding>,
    first: Notification,
) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(64);
    let event = |json: String| bytes::Bytes::from(crate::sse::message_event(None, &json));
    let streams = app.clone();
    tokio::spawn(async move {
        if tx.send(event(first.to_json())).await.is_err() {
            return;
        }
        loop {
            // Notifications sent before the result go first (see `drive`).
            let up = tokio::select! {
                biased;
                up = running.up.recv() => up,
                r = &mut running.done => {
                    if !running.up.is_empty() {
                        running.done = Done::Ready(r);
                        continue;
                    }
                    let (_, body) = final_message(&app, &method, binding.as_ref(), id, r);
                    let _ = tx.send(event(body)).await;
                    return;
                }

                // The client went away: dropping `running` cancels the call.
                _ = tx.closed() => return,
            };
            let out = match up {
                None => {
                    let r = (&mut running.done).await;
                    let (_, body) = final_message(&app, &method, binding.as_ref(), id, r);
                    let _ = tx.send(event(body)).await;
                    return;
                }
                Some(Up::Note(n)) => n.to_json(),
                Some(Up::Ask(first)) => {
                    running.done.detach();
                    let asks = gather(&mut running, first).await;
                    let (_, body) = step(&app, running, asks, id, &method, binding);
                    let _ = tx.send(event(body)).await;
                    return;
                }
                Some(Up::Missing(cap)) => {
                    let (_, body) = stuck(id, &method, Some(cap));
                    let _ = tx.send(event(body)).await;
                    return;
                }
            };
            if tx.send(event(out)).await.is_err() {
                return;
            }
        }
    });
    crate::front::http::sse_response(
        &streams,
        crate::front::http::SseKind::Response,
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    )
}
