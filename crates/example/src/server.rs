//! The MCP server handler: the conformance-suite fixture plus `echo` and `slow`.
//!
//! One handler serves both protocol eras. rmcp decides the era of each request
//! (an `initialize`d session, or a stateless 2026-07-28 request carrying its own
//! `_meta`); the handler asks [`is_stateless`] where the behaviour differs:
//! logging is per request, MRTR fixtures and the tools that ask the client
//! (`peer_tools.rs`) return `InputRequiredResult` instead of sending requests to
//! the client, cacheable results carry caching hints, and
//! list changes reach `subscriptions/listen` streams instead of the session.

// rmcp 3.11 marks logging, sampling and roots as deprecated (SEP-2577 drops
// them after 2025-11-25). They are still protocol features in both eras this
// fixture serves, so the deprecation warnings do not apply.
#![allow(deprecated)]

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use rmcp::{
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
        CompleteResult, CompletionInfo, ContentBlock, CreateMessageRequestParams,
        DiscoverRequestMethod, DiscoverResult, ElicitRequestParams, ElicitationSchema,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
        InitializeRequestParams, InitializeResult, InitializeResultMethod, JsonObject,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
        ProgressNotificationParam, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, ReadResourceResult, Reference, ResourceContents,
        ResourceUpdatedNotificationParam, Role, SamplingMessage, ServerCapabilities, ServerConfig,
        SetLevelRequestMethod, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
        Tool, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSendError},
    ErrorData, Peer, RoleServer, ServerHandler,
};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::{
    fixtures::{self, PNG_BASE64, WAV_BASE64},
    input_required,
    mrtr::{self, Fixture, Outcome, Retry, SessionFailure},
    peer_tools::{self, PeerTool},
    sessions::{ReconnectableSessions, StreamClosed},
    state::{Eras, ListChange, ServerState},
};

const LOGGER: &str = "gantry-example";
/// `retry` hint sent when `test_reconnection` closes its stream.
const RECONNECT_RETRY: Duration = Duration::from_millis(500);
/// How long `test_reconnection` waits for the client to resume its stream.
const RECONNECT_WAIT: Duration = Duration::from_secs(10);
/// How often a subscribed `test://watched-resource` changes.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// `ttlMs` of the lists that never change (resources, templates), of static
/// resource contents and of `server/discover`.
const STATIC_TTL_MS: u64 = 60_000;
/// `ttlMs` of the tool and prompt lists: `test_trigger_*_change` can change them
/// at any time, so they are stale at once (listeners get `list_changed`).
const CHANGING_TTL_MS: u64 = 0;

/// State of one session-era MCP session (one stdio connection or one HTTP
/// session). A stateless request gets a fresh, unused one.
#[derive(Default)]
struct Session {
    /// Minimum level of `notifications/message` (none before `logging/setLevel`).
    log_level: Mutex<Option<LoggingLevel>>,
    /// Resource subscriptions; cancelling a token stops its update task.
    subscriptions: Mutex<HashMap<String, CancellationToken>>,
    /// Bumped every time `test://watched-resource` changes.
    watched_version: AtomicU64,
    /// Cancelled when the session ends; stops its list-change forwarder.
    closed: CancellationToken,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.closed.cancel();
        for token in lock(&self.subscriptions).values() {
            token.cancel();
        }
    }
}

/// Whether `context` is a stateless-era request (protocol 2026-07-28 or later,
/// named in its `_meta`), as opposed to a request on an `initialize`d session.
/// rmcp uses the same rule to decide whether an `InputRequiredResult` may go out.
fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Lock a mutex holding plain data; a poisoned one is still consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[derive(Clone)]
pub(super) struct ExampleServer {
    session: Arc<Session>,
    /// Server-wide state, shared by all sessions and stateless requests.
    state: Arc<ServerState>,
    /// Present when serving Streamable HTTP; lets `test_reconnection` close its stream.
    http_sessions: Option<Arc<ReconnectableSessions>>,
}

impl ExampleServer {
    pub(super) fn new(
        state: Arc<ServerState>,
        http_sessions: Option<Arc<ReconnectableSessions>>,
    ) -> Self {
        Self {
            session: Arc::default(),
            state,
            http_sessions,
        }
    }

    /// Session era: everything at or above the `logging/setLevel` level (all
    /// before the first one). Stateless era: only at or above this request's
    /// `_meta` logLevel, nothing without one (2026-07-28, SEP-2575).
    fn log_enabled(&self, context: &RequestContext<RoleServer>, level: LoggingLevel) -> bool {
        if is_stateless(context) {
            context
                .meta
                .log_level()
                .is_some_and(|min| severity(level) >= severity(min))
        } else {
            lock(&self.session.log_level).is_none_or(|min| severity(level) >= severity(min))
        }
    }

    async fn log(&self, context: &RequestContext<RoleServer>, level: LoggingLevel, message: &str) {
        if !self.log_enabled(context, level) {
            return;
        }
        let param = LoggingMessageNotificationParam::new(level, json!(message)).with_logger(LOGGER);
        if let Err(error) = context.peer.notify_logging_message(param).await {
            tracing::debug!(%error, "could not send a log message");
        }
    }

    fn watched_text(&self, stateless: bool) -> String {
        let version = if stateless {
            self.state.watched_version()
        } else {
            self.session.watched_version.load(Ordering::Relaxed)
        };
        format!("Watched resource content (version {version})")
    }

    /// Runs an MRTR fixture: one round per request in the stateless era, all
    /// rounds at once with real client requests in the session era.
    async fn input_required<T: SessionFailure>(
        &self,
        retry: Retry,
        context: &RequestContext<RoleServer>,
        fixture: Fixture<T>,
    ) -> Result<Outcome<T>, ErrorData> {
        let capabilities = context.client_capabilities().unwrap_or_default();
        if is_stateless(context) {
            mrtr::run_stateless(&self.state, retry, &capabilities, fixture)
        } else {
            mrtr::run_in_session(&context.peer, &capabilities, fixture)
                .await
                .map(Outcome::Complete)
        }
    }

    /// Session era: forwards server-wide list changes to this session's client
    /// until the session ends.
    fn forward_list_changes(&self, peer: Peer<RoleServer>) {
        let mut changes = self.state.subscribe();
        let closed = self.session.closed.clone();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    () = closed.cancelled() => return,
                    change = changes.recv() => change,
                };
                let sent = match change {
                    Ok(ListChange::Tools) => peer.notify_tool_list_changed().await,
                    Ok(ListChange::Prompts) => peer.notify_prompt_list_changed().await,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }

    /// Change `test://watched-resource` every [`WATCH_INTERVAL`] and tell the
    /// client, until `stop` is cancelled or the client goes away.
    fn watch(&self, peer: Peer<RoleServer>, uri: String, stop: CancellationToken) {
        let session = Arc::downgrade(&self.session);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(WATCH_INTERVAL);
            ticks.tick().await;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let Some(session) = session.upgrade() else {
                    return;
                };
                session.watched_version.fetch_add(1, Ordering::Relaxed);
                drop(session);
                let update = ResourceUpdatedNotificationParam::new(uri.clone());
                if peer.notify_resource_updated(update).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Sends server-wide changes to one `subscriptions/listen` stream, as its filter
/// allows, until the client closes it.
async fn run_listen(state: &ServerState, context: SubscriptionContext) {
    let sink = context.sink().clone();
    let watch_resource = sink
        .accepted()
        .resource_subscriptions
        .as_ref()
        .is_some_and(|uris| uris.iter().any(|uri| uri == fixtures::WATCHED_URI));
    let mut changes = state.subscribe();
    let mut ticks = tokio::time::interval(WATCH_INTERVAL);
    ticks.tick().await;
    loop {
        let sent = tokio::select! {
            () = context.cancelled() => return,
            change = changes.recv() => match change {
                Ok(ListChange::Tools) => sink.notify_tool_list_changed().await,
                Ok(ListChange::Prompts) => sink.notify_prompt_list_changed().await,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            },
            _ = ticks.tick(), if watch_resource => {
                state.bump_watched_version();
                sink.notify_resource_updated(fixtures::WATCHED_URI).await
            }
        };
        match sent {
            Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
            Err(error) => {
                tracing::debug!(%error, "subscription stream ended");
                return;
            }
        }
    }
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn text_resource(uri: &str, mime_type: &str, text: impl Into<String>) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_owned(),
        mime_type: Some(mime_type.to_owned()),
        text: text.into(),
        meta: None,
    }
}

fn string_argument<'a>(arguments: &'a JsonObject, name: &str) -> Option<&'a str> {
    arguments.get(name).and_then(Value::as_str)
}

impl ExampleServer {
    /// A tool that asks the client one question ([`PeerTool`]): in the session
    /// era a real request to the client; in the stateless era an
    /// `InputRequiredResult` round carrying the same request.
    async fn peer_tool(
        &self,
        tool: PeerTool,
        arguments: &JsonObject,
        retry: Retry,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if is_stateless(context) && self.state.eras() == Eras::BothWithSessionEraPeerTools {
            let feature = match tool {
                PeerTool::Sampling { .. } => "Sampling",
                PeerTool::Elicitation { .. } => "Elicitation",
            };
            return Ok(error_result(format!(
                "{feature} not supported or error: MCP error -32601: Method not found"
            ))
            .into());
        }
        if is_stateless(context) {
            let capabilities = context.client_capabilities().unwrap_or_default();
            let outcome = mrtr::run_stateless(&self.state, retry, &capabilities, |round| {
                tool.round(arguments, round)
            })?;
            return Ok(outcome.into());
        }
        let result = match tool {
            PeerTool::Sampling { prompt } => self.sampling(&prompt, context).await,
            PeerTool::Elicitation {
                message,
                schema,
                result_prefix,
            } => {
                self.elicitation(&message, schema, result_prefix, context)
                    .await
            }
        };
        Ok(result.into())
    }

    /// Session era: `test_sampling` asks the client's LLM.
    async fn sampling(&self, prompt: &str, context: &RequestContext<RoleServer>) -> CallToolResult {
        let supported = context
            .peer
            .peer_info()
            .is_some_and(|client| client.capabilities.sampling.is_some());
        if !supported {
            return error_result(
                "Sampling not supported: the client did not declare the sampling capability",
            );
        }
        let request = CreateMessageRequestParams::new(
            vec![SamplingMessage::user_text(prompt)],
            peer_tools::SAMPLING_MAX_TOKENS,
        );
        match context.peer.create_message(request).await {
            Ok(result) => {
                let content = serde_json::to_value(&result.message.content).unwrap_or_default();
                text_result(peer_tools::sampling_content_text(&content))
            }
            Err(error) => error_result(format!("Sampling failed: {error}")),
        }
    }

    /// Session era: an elicitation tool asks the user.
    async fn elicitation(
        &self,
        message: &str,
        schema: Value,
        result_prefix: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let supported = context
            .peer
            .peer_info()
            .is_some_and(|client| client.capabilities.elicitation.is_some());
        if !supported {
            return error_result(
                "Elicitation not supported: the client did not declare the elicitation capability",
            );
        }
        let requested_schema: ElicitationSchema = match serde_json::from_value(schema) {
            Ok(schema) => schema,
            Err(error) => return error_result(format!("Invalid elicitation schema: {error}")),
        };
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema,
        };
        match context.peer.create_elicitation(request).await {
            Ok(result) => text_result(peer_tools::elicitation_text(result_prefix, &result)),
            Err(error) => error_result(format!("Elicitation failed: {error}")),
        }
    }

    async fn progress(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        let token = context.meta.get_progress_token();
        for (index, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if index > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(token) = &token {
                let notification = ProgressNotificationParam::new(token.clone(), progress)
                    .with_total(100.0)
                    .with_message(format!("Completed step {progress} of 100"));
                if let Err(error) = context.peer.notify_progress(notification).await {
                    tracing::debug!(%error, "could not send a progress notification");
                }
            }
        }
        match token {
            Some(token) => text_result(format!(
                "Progress test completed; progressToken={}",
                serde_json::to_string(&token).unwrap_or_default()
            )),
            None => text_result("Progress test completed (no progressToken was given)"),
        }
    }

    async fn logging(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        self.log(context, LoggingLevel::Info, "Tool execution started")
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(context, LoggingLevel::Info, "Tool processing data")
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(context, LoggingLevel::Info, "Tool execution completed")
            .await;
        text_result("Tool with logging executed successfully")
    }

    /// `test_missing_capability`: needs sampling in this request's capabilities.
    fn missing_capability(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let declared = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.sampling.is_some());
        if declared {
            Ok(text_result("The client declared the sampling capability"))
        } else if is_stateless(context) {
            Err(mrtr::missing_capabilities(&[mrtr::Capability::Sampling]))
        } else {
            Ok(error_result(
                "Sampling not supported: the client did not declare the sampling capability",
            ))
        }
    }

    /// Reports one progress step, then runs the elicitation fixture: in the
    /// stateless era nothing but notifications precede the result on the stream.
    async fn streaming_elicitation(
        &self,
        retry: Retry,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(token) = context.meta.get_progress_token() {
            let notification = ProgressNotificationParam::new(token, 0.0)
                .with_total(1.0)
                .with_message("Waiting for the user's name");
            if let Err(error) = context.peer.notify_progress(notification).await {
                tracing::debug!(%error, "could not send a progress notification");
            }
        }
        let fixture = input_required::tool(input_required::STREAMING_ELICITATION)
            .ok_or_else(|| ErrorData::internal_error("no streaming elicitation fixture", None))?;
        Ok(self.input_required(retry, context, fixture).await?.into())
    }

    fn trigger(&self, list: ListChange) -> CallToolResult {
        self.state.change(list);
        let (what, name) = match list {
            ListChange::Tools => ("tools", fixtures::DYNAMIC_TOOL),
            ListChange::Prompts => ("prompts", fixtures::DYNAMIC_PROMPT),
        };
        let listed = match list {
            ListChange::Tools => self.state.has_dynamic_tool(),
            ListChange::Prompts => self.state.has_dynamic_prompt(),
        };
        let action = if listed { "added" } else { "removed" };
        text_result(format!(
            "{name} {action}; notifications/{what}/list_changed sent to every listener"
        ))
    }

    async fn slow(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(ms) = arguments.get("ms").and_then(Value::as_u64) else {
            return Ok(error_result(
                "Missing or invalid argument: ms must be a non-negative integer",
            ));
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(text_result("done")),
            // rmcp drops the response of a cancelled request; this just stops the work.
            () = context.ct.cancelled() => Ok(error_result("cancelled")),
        }
    }

    async fn reconnection(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        let session_id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|value| value.to_str().ok());
        let mut note = "no stream to close: not a Streamable HTTP session";
        if let (Some(sessions), Some(session_id)) = (&self.http_sessions, session_id) {
            match sessions
                .close_request_stream(session_id, &context.id, RECONNECT_RETRY)
                .await
            {
                Ok(StreamClosed::Closed(resumed)) => {
                    note = tokio::select! {
                        waited = tokio::time::timeout(RECONNECT_WAIT, resumed.notified()) => {
                            if waited.is_ok() {
                                "the server closed the SSE stream mid-call and the client resumed it"
                            } else {
                                "the server closed the SSE stream mid-call; the client did not resume it in time"
                            }
                        }
                        () = context.ct.cancelled() => "cancelled",
                    };
                }
                Ok(StreamClosed::NotTracked) => {}
                Err(error) => tracing::warn!(%error, "could not close the SSE stream"),
            }
            sessions.forget(session_id, &context.id);
        }
        text_result(format!(
            "Reconnection test completed successfully ({note}). If you received this, \
             the client properly reconnected after stream closure."
        ))
    }
}

impl ServerHandler for ExampleServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources_subscribe()
            .build();
        let mut implementation = Implementation::new("gantry-example", env!("CARGO_PKG_VERSION"));
        implementation.title = Some("Gantry example MCP server".to_owned());
        ServerConfig::new(capabilities)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(implementation)
            .with_instructions(
                "Example MCP server of the Gantry gateway: the MCP conformance-suite fixture \
                 plus `echo` and `slow` tools.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(self.state.eras().versions())
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        if self.state.eras() == Eras::SessionOnly {
            return Err(ErrorData::method_not_found::<DiscoverRequestMethod>());
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        )
        .with_ttl_ms(STATIC_TTL_MS)
        .with_cache_scope(CacheScope::Public))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // A stateless-era envelope on `initialize` names a method 2026-07-28 removed.
        if context.meta.protocol_version().is_some() {
            return Err(ErrorData::method_not_found::<InitializeResultMethod>());
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.forward_list_changes(context.peer);
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Lets rmcp check SEP-2243 `Mcp-Param-*` headers against the tool's schema.
        fixtures::tools_with(self.state.has_dynamic_tool())
            .into_iter()
            .find(|tool| tool.name == name)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        if self.state.eras() == Eras::SessionOnly {
            return None;
        }
        let mut accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed();
        if let Some(uris) = &requested.resource_subscriptions {
            accepted = accepted.resource_subscriptions(
                uris.iter()
                    .filter(|uri| fixtures::is_known_resource(uri))
                    .cloned(),
            );
        }
        Some(accepted.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        run_listen(&self.state, context).await;
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let result =
            ListToolsResult::with_all_items(fixtures::tools_with(self.state.has_dynamic_tool()));
        Ok(if is_stateless(&context) {
            result
                .with_ttl_ms(CHANGING_TTL_MS)
                .with_cache_scope(CacheScope::Public)
        } else {
            result
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let retry = Retry {
            binding: format!("tools/call {}", request.name),
            input_responses: request.input_responses,
            request_state: request.request_state,
        };
        if request.name == input_required::STREAMING_ELICITATION {
            return self.streaming_elicitation(retry, &context).await;
        }
        if let Some(fixture) = input_required::tool(&request.name) {
            return Ok(self.input_required(retry, &context, fixture).await?.into());
        }
        let arguments = request.arguments.unwrap_or_default();
        if let Some(tool) = PeerTool::of(&request.name, &arguments) {
            return match tool {
                Ok(tool) => self.peer_tool(tool, &arguments, retry, &context).await,
                Err(message) => Ok(error_result(message).into()),
            };
        }
        let result = match request.name.as_ref() {
            "echo" => match string_argument(&arguments, "message") {
                Some(message) => text_result(message),
                None => error_result("Missing required string argument: message"),
            },
            "slow" => self.slow(&arguments, &context).await?,
            "test_simple_text" => text_result("This is a simple text response for testing."),
            "test_image_content" => {
                CallToolResult::success(vec![ContentBlock::image(PNG_BASE64, "image/png")])
            }
            "test_audio_content" => CallToolResult::success(vec![ContentBlock::Audio(
                rmcp::model::AudioContent::new(WAV_BASE64, "audio/wav"),
            )]),
            "test_embedded_resource" => {
                CallToolResult::success(vec![ContentBlock::resource(text_resource(
                    "test://embedded-resource",
                    "text/plain",
                    "This is an embedded resource content.",
                ))])
            }
            "test_multiple_content_types" => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG_BASE64, "image/png"),
                ContentBlock::resource(text_resource(
                    "test://mixed-content-resource",
                    "application/json",
                    json!({ "test": "data", "value": 123 }).to_string(),
                )),
            ]),
            "test_tool_with_logging" | fixtures::LOGGING_TOOL => self.logging(&context).await,
            fixtures::MISSING_CAPABILITY_TOOL => self.missing_capability(&context)?,
            fixtures::TRIGGER_TOOL_CHANGE => self.trigger(ListChange::Tools),
            fixtures::TRIGGER_PROMPT_CHANGE => self.trigger(ListChange::Prompts),
            fixtures::CUSTOM_HEADERS_TOOL => text_result(format!(
                "Custom headers tool called with: {}",
                Value::Object(arguments.clone())
            )),
            fixtures::DYNAMIC_TOOL if self.state.has_dynamic_tool() => {
                text_result("The dynamic tool is listed and callable")
            }
            "test_tool_with_progress" => self.progress(&context).await,
            "test_error_handling" => {
                error_result("This tool intentionally returns an error for testing")
            }
            "test_reconnection" => self.reconnection(&context).await,
            "json_schema_2020_12_tool" => text_result(format!(
                "JSON Schema 2020-12 tool called with: {}",
                Value::Object(arguments.clone())
            )),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("Unknown tool: {other}"),
                    Some(json!({ "name": other })),
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let result = ListResourcesResult::with_all_items(fixtures::resources());
        Ok(if is_stateless(&context) {
            result
                .with_ttl_ms(STATIC_TTL_MS)
                .with_cache_scope(CacheScope::Public)
        } else {
            result
        })
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let result = ListResourceTemplatesResult::with_all_items(fixtures::resource_templates());
        Ok(if is_stateless(&context) {
            result
                .with_ttl_ms(STATIC_TTL_MS)
                .with_cache_scope(CacheScope::Public)
        } else {
            result
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let stateless = is_stateless(&context);
        let uri = request.uri.as_str();
        // The watched resource changes while someone watches it; the rest never do.
        let ttl_ms = if uri == fixtures::WATCHED_URI {
            0
        } else {
            STATIC_TTL_MS
        };
        let contents = match uri {
            fixtures::STATIC_TEXT_URI => text_resource(uri, "text/plain", fixtures::STATIC_TEXT),
            fixtures::STATIC_BINARY_URI => ResourceContents::BlobResourceContents {
                uri: uri.to_owned(),
                mime_type: Some("image/png".to_owned()),
                blob: PNG_BASE64.to_owned(),
                meta: None,
            },
            fixtures::WATCHED_URI => text_resource(uri, "text/plain", self.watched_text(stateless)),
            _ => match fixtures::template_id(uri) {
                Some(id) => text_resource(
                    uri,
                    "application/json",
                    json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") })
                        .to_string(),
                ),
                None => {
                    // rmcp turns -32002 into -32602 for 2026-07-28 (SEP-2164).
                    return Err(ErrorData::resource_not_found(
                        format!("Resource not found: {uri}"),
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        let result = ReadResourceResult::new(vec![contents]);
        Ok(if stateless {
            result
                .with_ttl_ms(ttl_ms)
                .with_cache_scope(CacheScope::Public)
        } else {
            result
        }
        .into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        if !fixtures::is_known_resource(&uri) {
            return Err(ErrorData::resource_not_found(
                format!("Resource not found: {uri}"),
                Some(json!({ "uri": uri })),
            ));
        }
        let stop = CancellationToken::new();
        if let Some(previous) = lock(&self.session.subscriptions).insert(uri.clone(), stop.clone())
        {
            previous.cancel();
        }
        if uri == fixtures::WATCHED_URI {
            self.watch(context.peer.clone(), uri.clone(), stop);
        }
        self.log(
            &context,
            LoggingLevel::Debug,
            &format!("Subscribed to resource: {uri}"),
        )
        .await;
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some(stop) = lock(&self.session.subscriptions).remove(&request.uri) {
            stop.cancel();
        }
        self.log(
            &context,
            LoggingLevel::Debug,
            &format!("Unsubscribed from resource: {}", request.uri),
        )
        .await;
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let result = ListPromptsResult::with_all_items(fixtures::prompts_with(
            self.state.has_dynamic_prompt(),
        ));
        Ok(if is_stateless(&context) {
            result
                .with_ttl_ms(CHANGING_TTL_MS)
                .with_cache_scope(CacheScope::Public)
        } else {
            result
        })
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if let Some(fixture) = input_required::prompt(&request.name) {
            let retry = Retry {
                binding: format!("prompts/get {}", request.name),
                input_responses: request.input_responses,
                request_state: request.request_state,
            };
            return Ok(self.input_required(retry, &context, fixture).await?.into());
        }
        let arguments = request.arguments.unwrap_or_default();
        let required = |name: &str| {
            string_argument(&arguments, name).ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("Missing required argument: {name}"),
                    Some(json!({ "argument": name })),
                )
            })
        };
        let result = match request.name.as_str() {
            "test_simple_prompt" => GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                "This is a simple prompt for testing.",
            )]),
            "test_prompt_with_arguments" => {
                let (arg1, arg2) = (required("arg1")?, required("arg2")?);
                GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"),
                )])
            }
            "test_prompt_with_embedded_resource" => {
                let uri = required("resourceUri")?;
                GetPromptResult::new(vec![
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::resource(text_resource(
                            uri,
                            "text/plain",
                            "Embedded resource content for testing.",
                        )),
                    ),
                    PromptMessage::new_text(
                        Role::User,
                        "Please process the embedded resource above.",
                    ),
                ])
            }
            "test_prompt_with_image" => GetPromptResult::new(vec![
                PromptMessage::new(Role::User, ContentBlock::image(PNG_BASE64, "image/png")),
                PromptMessage::new_text(Role::User, "Please analyze the image above."),
            ]),
            fixtures::DYNAMIC_PROMPT if self.state.has_dynamic_prompt() => {
                GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    "This prompt is listed because test_trigger_prompt_change added it.",
                )])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("Unknown prompt: {other}"),
                    Some(json!({ "name": other })),
                ));
            }
        };
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let reference = match &request.r#ref {
            Reference::Prompt(prompt) => prompt.name.as_str(),
            Reference::Resource(resource) => resource.uri.as_str(),
            _ => "",
        };
        let prefix = request.argument.value.as_str();
        let values: Vec<String> =
            fixtures::completion_candidates(reference, &request.argument.name)
                .iter()
                .filter(|candidate| candidate.starts_with(prefix))
                .map(|candidate| (*candidate).to_owned())
                .collect();
        let info = CompletionInfo::with_all_values(values)
            .map_err(|error| ErrorData::internal_error(error, None))?;
        Ok(CompleteResult::new(info))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // 2026-07-28 removed logging/setLevel (the level is per request); rmcp
        // does not gate it by era, so do it here.
        if is_stateless(&context) {
            return Err(ErrorData::method_not_found::<SetLevelRequestMethod>());
        }
        *lock(&self.session.log_level) = Some(request.level);
        Ok(())
    }
}
