//! The MCP server handler: the conformance-suite fixture plus `echo` and `slow`.

// rmcp 3.11 marks logging, sampling and roots as deprecated (SEP-2577 drops
// them after 2025-11-25). This fixture targets 2025-11-25, where they are
// current protocol features, so the deprecation warnings do not apply.
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
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
        CompleteResult, CompletionInfo, ContentBlock, CreateMessageRequestParams,
        ElicitRequestParams, ElicitationSchema, GetPromptRequestParams, GetPromptResponse,
        GetPromptResult, Implementation, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
        PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Reference, ResourceContents, ResourceUpdatedNotificationParam, Role,
        SamplingMessage, ServerCapabilities, ServerConfig, SetLevelRequestParams,
        SubscribeRequestParams, UnsubscribeRequestParams,
    },
    service::RequestContext,
    ErrorData, Peer, RoleServer, ServerHandler,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::example::{
    fixtures::{self, PNG_BASE64, WAV_BASE64},
    sessions::{ReconnectableSessions, StreamClosed},
};

const LOGGER: &str = "gantry-example";
/// `retry` hint sent when `test_reconnection` closes its stream.
const RECONNECT_RETRY: Duration = Duration::from_millis(500);
/// How long `test_reconnection` waits for the client to resume its stream.
const RECONNECT_WAIT: Duration = Duration::from_secs(10);
/// How often a subscribed `test://watched-resource` changes.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// State of one MCP session (one stdio connection or one HTTP session).
#[derive(Default)]
struct Session {
    /// Minimum level of `notifications/message` (none before `logging/setLevel`).
    log_level: Mutex<Option<LoggingLevel>>,
    /// Resource subscriptions; cancelling a token stops its update task.
    subscriptions: Mutex<HashMap<String, CancellationToken>>,
    /// Bumped every time `test://watched-resource` changes.
    watched_version: AtomicU64,
}

impl Drop for Session {
    fn drop(&mut self) {
        for token in lock(&self.subscriptions).values() {
            token.cancel();
        }
    }
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
pub struct ExampleServer {
    session: Arc<Session>,
    /// Present when serving Streamable HTTP; lets `test_reconnection` close its stream.
    http_sessions: Option<Arc<ReconnectableSessions>>,
}

impl ExampleServer {
    pub fn new(http_sessions: Option<Arc<ReconnectableSessions>>) -> Self {
        Self {
            session: Arc::default(),
            http_sessions,
        }
    }

    fn log_enabled(&self, level: LoggingLevel) -> bool {
        lock(&self.session.log_level).is_none_or(|min| severity(level) >= severity(min))
    }

    async fn log(&self, peer: &Peer<RoleServer>, level: LoggingLevel, message: &str) {
        if !self.log_enabled(level) {
            return;
        }
        let param = LoggingMessageNotificationParam::new(level, json!(message)).with_logger(LOGGER);
        if let Err(error) = peer.notify_logging_message(param).await {
            tracing::debug!(%error, "could not send a log message");
        }
    }

    fn watched_text(&self) -> String {
        let version = self.session.watched_version.load(Ordering::Relaxed);
        format!("Watched resource content (version {version})")
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

/// Join every `text` found in a sampling response's content (one block or a list).
fn sampled_text(content: &Value) -> String {
    let blocks = match content {
        Value::Array(blocks) => blocks.iter().collect(),
        block => vec![block],
    };
    let texts: Vec<&str> = blocks
        .into_iter()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    if texts.is_empty() {
        "No response".to_owned()
    } else {
        texts.join("\n")
    }
}

impl ExampleServer {
    async fn sampling(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(prompt) = string_argument(arguments, "prompt") else {
            return error_result("Missing required string argument: prompt");
        };
        let supported = context
            .peer
            .peer_info()
            .is_some_and(|client| client.capabilities.sampling.is_some());
        if !supported {
            return error_result(
                "Sampling not supported: the client did not declare the sampling capability",
            );
        }
        let request =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
        match context.peer.create_message(request).await {
            Ok(result) => {
                let content = serde_json::to_value(&result.message.content).unwrap_or_default();
                text_result(format!("LLM response: {}", sampled_text(&content)))
            }
            Err(error) => error_result(format!("Sampling failed: {error}")),
        }
    }

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
            Ok(result) => {
                let action = serde_json::to_value(result.action).unwrap_or_default();
                let action = action.as_str().unwrap_or("unknown");
                let content = result.content.unwrap_or_else(|| json!({}));
                text_result(format!(
                    "{result_prefix}: action={action}, content={content}"
                ))
            }
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
        self.log(&context.peer, LoggingLevel::Info, "Tool execution started")
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(&context.peer, LoggingLevel::Info, "Tool processing data")
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.log(
            &context.peer,
            LoggingLevel::Info,
            "Tool execution completed",
        )
        .await;
        text_result("Tool with logging executed successfully")
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
            .enable_resources()
            .enable_tools()
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
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(fixtures::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
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
            "test_tool_with_logging" => self.logging(&context).await,
            "test_tool_with_progress" => self.progress(&context).await,
            "test_error_handling" => {
                error_result("This tool intentionally returns an error for testing")
            }
            "test_sampling" => self.sampling(&arguments, &context).await,
            "test_elicitation" => {
                let Some(message) = string_argument(&arguments, "message") else {
                    return Ok(error_result("Missing required string argument: message").into());
                };
                self.elicitation(
                    message,
                    fixtures::elicitation_schema(),
                    "User response",
                    &context,
                )
                .await
            }
            "test_elicitation_sep1034_defaults" => {
                self.elicitation(
                    "Please review and update the form fields with defaults",
                    fixtures::elicitation_defaults_schema(),
                    "Elicitation completed",
                    &context,
                )
                .await
            }
            "test_elicitation_sep1330_enums" => {
                self.elicitation(
                    "Please select options from the enum fields",
                    fixtures::elicitation_enums_schema(),
                    "Elicitation completed",
                    &context,
                )
                .await
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
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(fixtures::resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            fixtures::resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            fixtures::STATIC_TEXT_URI => text_resource(uri, "text/plain", fixtures::STATIC_TEXT),
            fixtures::STATIC_BINARY_URI => ResourceContents::BlobResourceContents {
                uri: uri.to_owned(),
                mime_type: Some("image/png".to_owned()),
                blob: PNG_BASE64.to_owned(),
                meta: None,
            },
            fixtures::WATCHED_URI => text_resource(uri, "text/plain", self.watched_text()),
            _ => match fixtures::template_id(uri) {
                Some(id) => text_resource(
                    uri,
                    "application/json",
                    json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") })
                        .to_string(),
                ),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("Resource not found: {uri}"),
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
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
            &context.peer,
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
            &context.peer,
            LoggingLevel::Debug,
            &format!("Unsubscribed from resource: {}", request.uri),
        )
        .await;
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(fixtures::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
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
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *lock(&self.session.log_level) = Some(request.level);
        Ok(())
    }
}
