//! The legacy 2024-11-05 HTTP+SSE transport: `GET /sse` opens a session whose one
//! SSE stream carries every server message (first an `endpoint` event naming
//! `/messages?sessionId=…`); each client message is a `POST` there, answered `202`,
//! its response delivered on the stream. The session ends when the stream closes.

use super::http::{read_body, sse_response};
use super::session_era::{absorb, establish, run_call};
use super::{App, FrontError};
use crate::auth::Principal;
use crate::jsonrpc::{code, Incoming, Message, Response};
use crate::router::ClientInit;
use crate::session::{sse_body, Session};
use axum::extract::{Extension, Query, Request as HttpRequest, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) async fn open(
    State(app): State<Arc<App>>,
    Extension(principal): Extension<Principal>,
    extensions: axum::http::Extensions,
) -> HttpResponse {
    if app.is_stopping() {
        return FrontError::Unavailable("Gantry is shutting down").into_response();
    }
    let client = super::edge::quota_key(&principal, super::edge::peer_of(&extensions));
    let session = match app
        .sessions
        .create(principal.as_str(), true, client.as_deref())
    {
        Ok(s) => s,
        Err(e) => return FrontError::from(e).into_response(),
    };
    tracing::info!(session = %session.id, %principal, "legacy HTTP+SSE session opened");
    let mut opts = app.body_options(&session, false, false);
    opts.preamble = Some(format!(
        "event: endpoint\ndata: /messages?sessionId={}\n\n",
        session.id
    ));
    let (app2, id) = (app.clone(), session.id.clone());
    opts.on_drop = Some(Box::new(move || {
        // The stream is the session: when the client goes, so does the session.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                app2.sessions.end(&id).await;
            });
        }
    }));
    sse_response(
        &app,
        super::http::SseKind::Legacy,
        sse_body(session.standalone.clone(), 0, opts),
    )
}

pub(super) async fn message(
    State(app): State<Arc<App>>,
    Extension(principal): Extension<Principal>,
    Query(q): Query<HashMap<String, String>>,
    req: HttpRequest,
) -> HttpResponse {
    let Some(id) = q.get("sessionId") else {
        return FrontError::BadRequest("sessionId query parameter is required".into())
            .into_response();
    };
    // Someone else's session is as unknown as one never issued.
    let session = match app.sessions.get(id, principal.as_str()) {
        Ok(s) if s.legacy => s,
        _ => return FrontError::SessionNotFound.into_response(),
    };
    let (parts, body) = req.into_parts();
    let body = match read_body(&app, body, &parts.headers).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let mut messages = match Incoming::parse_shared(body) {
        Ok(Incoming::Single(m)) => vec![m],
        Ok(Incoming::Batch(ms)) => ms,
        Err(e) => return FrontError::from(e).into_response(),
    };
    super::edge::adopt_trace_header(&parts.headers, messages.iter_mut());
    let requests = messages.iter().filter_map(|m| match m {
        Message::Request(r) => Some(r),
        _ => None,
    });
    let requests: Vec<&crate::jsonrpc::Request> = requests.collect();
    if let Err(e) = super::edge::step_up(&app, &principal, requests.iter().copied()) {
        return e.into_response();
    }
    // The answers go on the SSE stream: a limited request refuses the POST (429).
    if app.limits().is_some() {
        let peer = super::edge::peer_of(&parts.extensions).map(|p| p.ip());
        let refuse = super::edge::Answer::Refuse;
        if let Some(resp) = super::edge::rate_limit(
            &app,
            &principal,
            peer,
            &parts.headers,
            requests.iter().copied(),
            refuse,
        )
        .await
        {
            return resp;
        }
    }
    session.set_caller(&principal);
    for m in messages {
        handle(app.clone(), session.clone(), m);
    }
    (StatusCode::ACCEPTED, "Accepted").into_response()
}

fn handle(app: Arc<App>, session: Arc<Session>, m: Message) {
    let req = match m {
        Message::Request(r) => r,
        other => return absorb(&app, &session, other),
    };
    tokio::spawn(async move {
        let out: Option<Response> = if req.method == "initialize" {
            if session.route().is_some() {
                Some(Response::err(
                    Some(req.id),
                    &crate::jsonrpc::RpcError::new(
                        code::INVALID_REQUEST,
                        "the session is already initialized",
                    ),
                ))
            } else {
                match ClientInit::parse(req.params.as_ref()) {
                    Ok(init) => Some(establish(&app, &session, &init, req.id).await),
                    Err(e) => Some(Response::err(Some(req.id), &e)),
                }
            }
        } else {
            let sink = session.standalone_sink();
            run_call(&app, &session, req, sink).await
        };
        if let Some(resp) = out {
            session.standalone.push(resp.to_json());
        }
    });
}
