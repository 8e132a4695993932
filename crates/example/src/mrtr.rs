//! Multi round-trip requests (MRTR, SEP-2322, protocol 2026-07-28), written once as a
//! state machine and run in either protocol era.
//!
//! A fixture is a pure function from one [`Round`] (the client's `inputResponses`,
//! the verified `requestState` and the client's capabilities) to a [`Step`]: either
//! the final result or the questions it still needs answered.
//!
//! - **Stateless era** ([`run_stateless`]): every round is one request. Questions go
//!   back as an `InputRequiredResult`; the state is sealed with the server's key and
//!   bound to the method and target, so a forged, tampered or replayed-elsewhere
//!   `requestState` is rejected with `-32602` before the fixture runs.
//! - **Session era** ([`run_in_session`]): there is no `InputRequiredResult`, so the
//!   server asks the questions itself, as real `elicitation/create`,
//!   `sampling/createMessage` and `roots/list` requests on the session, and feeds
//!   the answers back into the same state machine until it finishes.
//!
//! Invariant: a question is only asked if the client declared the capability it
//! needs (in this request's `_meta` in the stateless era, at `initialize` in the
//! session era); a round whose every question is undeclared fails with
//! `-32021` (stateless) or a tool error result (session).

// Sampling and roots are deprecated by SEP-2577 but are still protocol features.
#![allow(deprecated)]

use rmcp::{
    model::{
        CallToolResponse, CallToolResult, ClientCapabilities, CreateMessageRequest,
        CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
        ElicitResult, ElicitationAction, ElicitationSchema, ErrorCode, GetPromptResponse,
        GetPromptResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
        ListRootsRequest, ListRootsResult, Root, SamplingMessage,
    },
    ErrorData, Peer, RoleServer,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::state::ServerState;

/// Rounds a session-era run may take before it gives up (a fixture bug guard).
const MAX_SESSION_ROUNDS: usize = 10;

/// A client capability an input request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Capability {
    Elicitation,
    Sampling,
    Roots,
}

impl Capability {
    fn key(self) -> &'static str {
        match self {
            Capability::Elicitation => "elicitation",
            Capability::Sampling => "sampling",
            Capability::Roots => "roots",
        }
    }

    fn declared_by(self, capabilities: &ClientCapabilities) -> bool {
        match self {
            Capability::Elicitation => capabilities.elicitation.is_some(),
            Capability::Sampling => capabilities.sampling.is_some(),
            Capability::Roots => capabilities.roots.is_some(),
        }
    }
}

/// `-32021` naming the capabilities a request needs (a `ClientCapabilities` object).
pub(super) fn missing_capabilities(needed: &[Capability]) -> ErrorData {
    let required: Map<String, Value> = needed
        .iter()
        .map(|capability| (capability.key().to_owned(), json!({})))
        .collect();
    ErrorData::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!(
            "Missing required client capability: {}",
            needed
                .iter()
                .map(|capability| capability.key())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(json!({ "requiredCapabilities": required })),
    )
}

/// One question for the client.
#[derive(Clone, Debug)]
pub(super) enum Ask {
    /// `elicitation/create` (form mode) with a `requestedSchema`.
    Elicit { message: String, schema: Value },
    /// `sampling/createMessage` with one user message.
    Sample { prompt: String, max_tokens: u32 },
    /// `roots/list`.
    Roots,
}

impl Ask {
    pub(super) fn elicit(message: &str, schema: Value) -> Self {
        Ask::Elicit {
            message: message.to_owned(),
            schema,
        }
    }

    pub(super) fn sample(prompt: &str, max_tokens: u32) -> Self {
        Ask::Sample {
            prompt: prompt.to_owned(),
            max_tokens,
        }
    }

    pub(super) fn capability(&self) -> Capability {
        match self {
            Ask::Elicit { .. } => Capability::Elicitation,
            Ask::Sample { .. } => Capability::Sampling,
            Ask::Roots => Capability::Roots,
        }
    }

    fn elicit_params(message: &str, schema: &Value) -> Result<ElicitRequestParams, ErrorData> {
        let requested_schema: ElicitationSchema =
            serde_json::from_value(schema.clone()).map_err(|error| {
                ErrorData::internal_error(format!("invalid elicitation schema: {error}"), None)
            })?;
        Ok(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema,
        })
    }

    fn sample_params(prompt: &str, max_tokens: u32) -> CreateMessageRequestParams {
        CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], max_tokens)
    }

    /// The question as an entry of `InputRequiredResult.inputRequests`.
    fn to_input_request(&self) -> Result<InputRequest, ErrorData> {
        Ok(match self {
            Ask::Elicit { message, schema } => {
                InputRequest::Elicitation(ElicitRequest::new(Self::elicit_params(message, schema)?))
            }
            Ask::Sample { prompt, max_tokens } => InputRequest::CreateMessage(
                CreateMessageRequest::new(Self::sample_params(prompt, *max_tokens)),
            ),
            Ask::Roots => InputRequest::ListRoots(ListRootsRequest {
                method: Default::default(),
                extensions: Default::default(),
            }),
        })
    }

    /// Asks the question as a real server-to-client request (session era); the
    /// answer comes back in the shape an `inputResponses` entry has.
    async fn ask_peer(&self, peer: &Peer<RoleServer>) -> Result<Value, String> {
        let answer = match self {
            Ask::Elicit { message, schema } => {
                let params = Self::elicit_params(message, schema).map_err(|e| e.message)?;
                let result = peer
                    .create_elicitation(params)
                    .await
                    .map_err(|error| format!("elicitation/create failed: {error}"))?;
                serde_json::to_value(result)
            }
            Ask::Sample { prompt, max_tokens } => {
                let result = peer
                    .create_message(Self::sample_params(prompt, *max_tokens))
                    .await
                    .map_err(|error| format!("sampling/createMessage failed: {error}"))?;
                serde_json::to_value(result)
            }
            Ask::Roots => {
                let result = peer
                    .list_roots()
                    .await
                    .map_err(|error| format!("roots/list failed: {error}"))?;
                serde_json::to_value(result)
            }
        };
        answer.map_err(|error| format!("cannot encode the client's answer: {error}"))
    }
}

/// What a fixture decides in one round.
pub(super) enum Step<T> {
    /// Ask these questions (keyed as in `inputRequests`), carrying `state` to the
    /// next round.
    Ask {
        asks: Vec<(String, Ask)>,
        state: Option<Value>,
    },
    /// The final result.
    Done(T),
}

/// The input of one round.
pub(super) struct Round<'a> {
    responses: &'a InputResponses,
    state: Option<&'a Value>,
    capabilities: &'a ClientCapabilities,
}

impl Round<'_> {
    /// The state the previous round carried (verified), if any.
    pub(super) fn state(&self) -> Option<&Value> {
        self.state
    }

    /// The state's integer `field`, if the previous round carried one.
    pub(super) fn state_number(&self, field: &str) -> Option<u64> {
        self.state?.get(field)?.as_u64()
    }

    /// The state's string `field`, if the previous round carried one.
    pub(super) fn state_text(&self, field: &str) -> Option<&str> {
        self.state?.get(field)?.as_str()
    }

    fn answer<T: DeserializeOwned>(&self, key: &str, what: &str) -> Result<Option<T>, ErrorData> {
        let Some(value) = self.responses.get(key) else {
            return Ok(None);
        };
        serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|error| {
                ErrorData::invalid_params(
                    format!("inputResponses.{key} is not a valid {what}: {error}"),
                    Some(json!({ "inputResponse": key })),
                )
            })
    }

    /// The `ElicitResult` answering `key`; `-32602` if it is malformed.
    pub(super) fn elicited(&self, key: &str) -> Result<Option<ElicitResult>, ErrorData> {
        self.answer(key, "ElicitResult")
    }

    /// The text of the `CreateMessageResult` answering `key`; `-32602` if malformed.
    pub(super) fn sampled(&self, key: &str) -> Result<Option<String>, ErrorData> {
        let result: Option<CreateMessageResult> = self.answer(key, "CreateMessageResult")?;
        Ok(result.map(|result| {
            let content = serde_json::to_value(&result.message.content).unwrap_or_default();
            sampled_text(&content)
        }))
    }

    /// The roots of the `ListRootsResult` answering `key`; `-32602` if malformed.
    pub(super) fn roots(&self, key: &str) -> Result<Option<Vec<Root>>, ErrorData> {
        let result: Option<ListRootsResult> = self.answer(key, "ListRootsResult")?;
        Ok(result.map(|result| result.roots))
    }

    /// `-32021` unless the client declared `capability` (in this request's `_meta`
    /// in the stateless era).
    pub(super) fn require(&self, capability: Capability) -> Result<(), ErrorData> {
        if capability.declared_by(self.capabilities) {
            Ok(())
        } else {
            Err(missing_capabilities(&[capability]))
        }
    }

    /// The questions the client can answer (it declared their capability).
    pub(super) fn answerable<'a>(
        &self,
        asks: &'a [(&'static str, Ask)],
    ) -> Vec<&'a (&'static str, Ask)> {
        asks.iter()
            .filter(|(_, ask)| ask.capability().declared_by(self.capabilities))
            .collect()
    }

    /// Asks the questions the client can answer; `-32021` if it can answer none.
    pub(super) fn ask<T>(
        &self,
        asks: Vec<(&'static str, Ask)>,
        state: Option<Value>,
    ) -> Result<Step<T>, ErrorData> {
        let needed: Vec<Capability> = asks.iter().map(|(_, ask)| ask.capability()).collect();
        let asks: Vec<(String, Ask)> = asks
            .into_iter()
            .filter(|(_, ask)| ask.capability().declared_by(self.capabilities))
            .map(|(key, ask)| (key.to_owned(), ask))
            .collect();
        if asks.is_empty() {
            let mut needed = needed;
            needed.dedup();
            return Err(missing_capabilities(&needed));
        }
        Ok(Step::Ask { asks, state })
    }
}

/// The text of an elicitation answer's `field`, if the user accepted and gave one.
pub(super) fn accepted_text(answer: &ElicitResult, field: &str) -> Option<String> {
    if answer.action != ElicitationAction::Accept {
        return None;
    }
    match answer.content.as_ref()?.get(field)? {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Join every `text` found in sampled content (one block or a list).
pub(super) fn sampled_text(content: &Value) -> String {
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

/// A fixture: one round in, one step out.
pub(super) type Fixture<T> = fn(&Round<'_>) -> Result<Step<T>, ErrorData>;

/// The retry fields of a `tools/call`, `prompts/get` or `resources/read`.
pub(super) struct Retry {
    /// What the state is bound to, e.g. `tools/call test_input_required_result_multi_round`.
    pub binding: String,
    pub input_responses: Option<InputResponses>,
    pub request_state: Option<String>,
}

/// The result of one stateless round.
pub enum Outcome<T> {
    Complete(T),
    InputRequired(InputRequiredResult),
}

/// Runs one round of `fixture` (a [`Fixture`] or a closure over the request's
/// arguments) for a stateless (2026-07-28) request.
pub(super) fn run_stateless<T>(
    server: &ServerState,
    retry: Retry,
    capabilities: &ClientCapabilities,
    fixture: impl FnOnce(&Round<'_>) -> Result<Step<T>, ErrorData>,
) -> Result<Outcome<T>, ErrorData> {
    let state = match &retry.request_state {
        None => None,
        Some(sealed) => Some(server.open_state(sealed, &retry.binding).map_err(|error| {
            ErrorData::invalid_params(
                format!("requestState integrity check failed: {error}"),
                None,
            )
        })?),
    };
    let responses = retry.input_responses.unwrap_or_default();
    let round = Round {
        responses: &responses,
        state: state.as_ref(),
        capabilities,
    };
    match fixture(&round)? {
        Step::Done(result) => Ok(Outcome::Complete(result)),
        Step::Ask { asks, state } => {
            let mut requests = InputRequests::new();
            for (key, ask) in asks {
                requests.insert(key, ask.to_input_request()?);
            }
            let sealed = match state {
                None => None,
                Some(state) => {
                    Some(server.seal_state(&state, &retry.binding).map_err(|error| {
                        ErrorData::internal_error(
                            format!("cannot seal requestState: {error}"),
                            None,
                        )
                    })?)
                }
            };
            Ok(Outcome::InputRequired(InputRequiredResult::new(
                Some(requests),
                sealed,
            )))
        }
    }
}

/// How a session-era run reports a failure that is not a protocol error
/// (the client lacks a capability, or failed a request).
pub(super) trait SessionFailure: Sized {
    fn failed(message: String) -> Result<Self, ErrorData>;
}

/// Runs `fixture` to completion on a session-era session, asking its questions as
/// real requests to the client. Each round sees the answers to the previous round's
/// questions and the previous round's state, exactly as a stateless retry would.
pub(super) async fn run_in_session<T: SessionFailure>(
    peer: &Peer<RoleServer>,
    capabilities: &ClientCapabilities,
    fixture: Fixture<T>,
) -> Result<T, ErrorData> {
    let mut responses = InputResponses::new();
    let mut state: Option<Value> = None;
    for _ in 0..MAX_SESSION_ROUNDS {
        let round = Round {
            responses: &responses,
            state: state.as_ref(),
            capabilities,
        };
        let (asks, next_state) = match fixture(&round) {
            Ok(Step::Done(result)) => return Ok(result),
            Ok(Step::Ask { asks, state }) => (asks, state),
            Err(error) if error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY => {
                return T::failed(format!(
                    "{}: the client did not declare it at initialize",
                    error.message
                ));
            }
            Err(error) => return Err(error),
        };
        let mut answers = InputResponses::new();
        for (key, ask) in asks {
            match ask.ask_peer(peer).await {
                Ok(answer) => {
                    answers.insert(key, answer);
                }
                Err(message) => return T::failed(message),
            }
        }
        responses = answers;
        state = next_state;
    }
    T::failed(format!(
        "gave up after {MAX_SESSION_ROUNDS} rounds of questions"
    ))
}

impl From<Outcome<CallToolResult>> for CallToolResponse {
    fn from(outcome: Outcome<CallToolResult>) -> Self {
        match outcome {
            Outcome::Complete(result) => result.into(),
            Outcome::InputRequired(result) => result.into(),
        }
    }
}

impl From<Outcome<GetPromptResult>> for GetPromptResponse {
    fn from(outcome: Outcome<GetPromptResult>) -> Self {
        match outcome {
            Outcome::Complete(result) => result.into(),
            Outcome::InputRequired(result) => result.into(),
        }
    }
}
