//! A thin wrapper around rmcp's [`LocalSessionManager`] that lets a tool close
//! the SSE stream of its own in-flight `tools/call` POST (SEP-1699), so the
//! `test_reconnection` tool can make the client resume with `Last-Event-ID`.
//!
//! rmcp can close a request's SSE stream ([`LocalSessionHandle::close_sse_stream`]),
//! but it keys streams by an internal per-session HTTP request counter that a
//! request handler never sees. This wrapper opens the request stream itself
//! (the same two calls `LocalSessionManager::create_stream` makes) so it learns
//! that counter, remembers it for `test_reconnection` calls, and notices when
//! the client comes back with a `Last-Event-ID` for that stream.
//!
//! [`LocalSessionHandle::close_sse_stream`]: rmcp::transport::streamable_http_server::session::local::LocalSessionHandle::close_sse_stream

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::{Stream, StreamExt};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage},
    transport::{
        streamable_http_server::{
            session::{
                local::{
                    LocalSessionHandle, LocalSessionManager, LocalSessionManagerError,
                    LocalSessionWorker, SessionError,
                },
                EventStore, ServerSseMessage,
            },
            RestoreOutcome, SessionId, SessionManager,
        },
        WorkerTransport,
    },
};
use tokio::sync::Notify;
use tokio_stream::wrappers::ReceiverStream;

/// The tool whose request streams are tracked.
pub(super) const RECONNECTION_TOOL: &str = "test_reconnection";

/// One tracked `test_reconnection` request stream.
struct TrackedStream {
    /// rmcp's HTTP request id of the POST that carried the call.
    http_request_id: u64,
    /// Signalled when the client resumes this stream with `Last-Event-ID`.
    resumed: Arc<Notify>,
}

type StreamKey = (SessionId, RequestId);

#[derive(Default)]
pub(super) struct ReconnectableSessions {
    inner: LocalSessionManager,
    tracked: Mutex<HashMap<StreamKey, TrackedStream>>,
}

/// What [`ReconnectableSessions::close_request_stream`] achieved.
pub(super) enum StreamClosed {
    /// The stream was closed; await the notify to learn when the client is back.
    Closed(Arc<Notify>),
    /// Nothing to close (unknown session or request, e.g. over stdio).
    NotTracked,
}

impl ReconnectableSessions {
    fn tracked(&self) -> std::sync::MutexGuard<'_, HashMap<StreamKey, TrackedStream>> {
        // The map holds plain data, so a panic elsewhere cannot leave it inconsistent.
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn handle(&self, id: &SessionId) -> Result<LocalSessionHandle, LocalSessionManagerError> {
        self.inner
            .sessions
            .read()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))
    }

    /// Close the SSE stream carrying the in-flight request `request_id` of
    /// `session_id`, after sending a priming event that tells the client to
    /// reconnect after `retry`. The request keeps running; its response is
    /// cached and delivered once the client resumes the stream.
    pub(super) async fn close_request_stream(
        &self,
        session_id: &str,
        request_id: &RequestId,
        retry: Duration,
    ) -> Result<StreamClosed, SessionError> {
        let session_id: SessionId = session_id.into();
        let key = (session_id.clone(), request_id.clone());
        let Some((http_request_id, resumed)) = self
            .tracked()
            .get(&key)
            .map(|tracked| (tracked.http_request_id, tracked.resumed.clone()))
        else {
            return Ok(StreamClosed::NotTracked);
        };
        let Ok(handle) = self.handle(&session_id).await else {
            return Ok(StreamClosed::NotTracked);
        };
        handle
            .close_sse_stream(http_request_id, Some(retry))
            .await?;
        Ok(StreamClosed::Closed(resumed))
    }

    /// Forget a tracked request once its tool call is over.
    pub(super) fn forget(&self, session_id: &str, request_id: &RequestId) {
        let key: StreamKey = (session_id.into(), request_id.clone());
        self.tracked().remove(&key);
    }
}

fn is_reconnection_call(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => match &request.request {
            ClientRequest::CallToolRequest(call) if call.params.name == RECONNECTION_TOOL => {
                Some(request.id.clone())
            }
            _ => None,
        },
        _ => None,
    }
}

/// rmcp's local event ids look like `<index>/<http request id>`.
fn http_request_id_of_event(last_event_id: &str) -> Option<u64> {
    last_event_id.split_once('/')?.1.parse().ok()
}

impl SessionManager for ReconnectableSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.tracked().retain(|(session, _), _| session != id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let Some(request_id) = is_reconnection_call(&message) else {
            return Ok(self.inner.create_stream(id, message).await?.left_stream());
        };
        // Same steps as LocalSessionManager::create_stream, keeping the id.
        let handle = self.handle(id).await?;
        let receiver = handle.establish_request_wise_channel().await?;
        let http_request_id = receiver.http_request_id;
        if let Some(http_request_id) = http_request_id {
            self.tracked().insert(
                (id.clone(), request_id),
                TrackedStream {
                    http_request_id,
                    resumed: Arc::new(Notify::new()),
                },
            );
        }
        handle.push_message(message, http_request_id).await?;
        Ok(ReceiverStream::new(receiver.inner).right_stream())
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let resumed_request = http_request_id_of_event(&last_event_id);
        let stream = self.inner.resume(id, last_event_id).await?;
        if let Some(http_request_id) = resumed_request {
            for ((session, _), tracked) in self.tracked().iter() {
                if session == id && tracked.http_request_id == http_request_id {
                    // notify_one keeps a permit if the tool is not waiting yet.
                    tracked.resumed.notify_one();
                }
            }
        }
        Ok(stream)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::http_request_id_of_event;

    #[test]
    fn parses_local_event_ids() {
        assert_eq!(http_request_id_of_event("3/17"), Some(17));
        assert_eq!(http_request_id_of_event("3"), None);
        assert_eq!(http_request_id_of_event("x/y"), None);
    }
}
