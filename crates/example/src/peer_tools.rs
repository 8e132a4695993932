//! The session-era fixture tools that ask the client something: `test_sampling`
//! (`sampling/createMessage`) and `test_elicitation`,
//! `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums`
//! (`elicitation/create`).
//!
//! - **Session era**: the server sends that request to the client on the session
//!   and waits for the answer (`server.rs`); unchanged since before 2026-07-28.
//! - **Stateless era**: there is no peer to ask, so [`PeerTool::round`] runs the
//!   tool as a one-question MRTR round ([`crate::mrtr::run_stateless`]):
//!   an `InputRequiredResult` with the very request the session era would send,
//!   under the key [`SAMPLING_KEY`] or [`ELICITATION_KEY`], and a sealed
//!   `requestState` holding the tool's arguments. The retry carrying the answer
//!   and that state gets the result the session era gives after the client's
//!   answer, text for text.
//!
//! A gateway serving session-era clients can therefore turn the
//! `InputRequiredResult` into one real server-to-client request and retry with
//! its result.

use rmcp::{
    model::{CallToolResult, ContentBlock, ElicitResult, JsonObject},
    ErrorData,
};
use serde_json::{json, Value};

use crate::{
    fixtures,
    mrtr::{sampled_text, Ask, Capability, Round, Step},
};

pub(super) const SAMPLING_TOOL: &str = "test_sampling";
pub(super) const ELICITATION_TOOL: &str = "test_elicitation";
pub(super) const ELICITATION_DEFAULTS_TOOL: &str = "test_elicitation_sep1034_defaults";
pub(super) const ELICITATION_ENUMS_TOOL: &str = "test_elicitation_sep1330_enums";

/// The `inputRequests` key of the `sampling/createMessage` request.
pub(super) const SAMPLING_KEY: &str = "sampling";
/// The `inputRequests` key of the `elicitation/create` request.
pub(super) const ELICITATION_KEY: &str = "elicitation";

/// `maxTokens` of the `test_sampling` request.
pub(super) const SAMPLING_MAX_TOKENS: u32 = 100;

/// A tool call that asks the client one question.
#[derive(Clone, Debug)]
pub(super) enum PeerTool {
    /// `sampling/createMessage` with the user message `prompt`.
    Sampling { prompt: String },
    /// `elicitation/create` (form mode); the result text starts with `result_prefix`.
    Elicitation {
        message: String,
        schema: Value,
        result_prefix: &'static str,
    },
}

fn string_argument<'a>(arguments: &'a JsonObject, name: &str) -> Result<&'a str, String> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("Missing required string argument: {name}"))
}

impl PeerTool {
    /// The question tool `name` asks when called with `arguments`, if it is one of
    /// these tools; `Err` is the text of the tool error result for missing
    /// arguments (the same in both eras).
    pub(super) fn of(name: &str, arguments: &JsonObject) -> Option<Result<Self, String>> {
        let tool = match name {
            SAMPLING_TOOL => {
                string_argument(arguments, "prompt").map(|prompt| PeerTool::Sampling {
                    prompt: prompt.to_owned(),
                })
            }
            ELICITATION_TOOL => {
                string_argument(arguments, "message").map(|message| PeerTool::Elicitation {
                    message: message.to_owned(),
                    schema: fixtures::elicitation_schema(),
                    result_prefix: "User response",
                })
            }
            ELICITATION_DEFAULTS_TOOL => Ok(PeerTool::Elicitation {
                message: "Please review and update the form fields with defaults".to_owned(),
                schema: fixtures::elicitation_defaults_schema(),
                result_prefix: "Elicitation completed",
            }),
            ELICITATION_ENUMS_TOOL => Ok(PeerTool::Elicitation {
                message: "Please select options from the enum fields".to_owned(),
                schema: fixtures::elicitation_enums_schema(),
                result_prefix: "Elicitation completed",
            }),
            _ => return None,
        };
        Some(tool)
    }

    /// The client capability the question needs.
    pub(super) fn capability(&self) -> Capability {
        match self {
            PeerTool::Sampling { .. } => Capability::Sampling,
            PeerTool::Elicitation { .. } => Capability::Elicitation,
        }
    }

    /// The question's key in `inputRequests` / `inputResponses`.
    pub(super) fn key(&self) -> &'static str {
        match self {
            PeerTool::Sampling { .. } => SAMPLING_KEY,
            PeerTool::Elicitation { .. } => ELICITATION_KEY,
        }
    }

    /// The question, as the session era sends it.
    fn ask(&self) -> Ask {
        match self {
            PeerTool::Sampling { prompt } => Ask::sample(prompt, SAMPLING_MAX_TOKENS),
            PeerTool::Elicitation {
                message, schema, ..
            } => Ask::elicit(message, schema.clone()),
        }
    }

    /// The result text for the client's answer, if this round carries one;
    /// `-32602` if it is malformed.
    fn answered(&self, round: &Round<'_>) -> Result<Option<String>, ErrorData> {
        Ok(match self {
            PeerTool::Sampling { .. } => round
                .sampled(SAMPLING_KEY)?
                .map(|text| sampling_text(&text)),
            PeerTool::Elicitation { result_prefix, .. } => round
                .elicited(ELICITATION_KEY)?
                .map(|answer| elicitation_text(result_prefix, &answer)),
        })
    }

    /// One stateless round of the tool called with `arguments`:
    ///
    /// - `-32021` if this request's `_meta` does not declare the capability;
    /// - `-32602` if the (verified) `requestState` was issued for other arguments;
    /// - the result, once the retry carries both that state and the answer;
    /// - otherwise (first call, or an answer without state) the question, again.
    pub(super) fn round(
        &self,
        arguments: &JsonObject,
        round: &Round<'_>,
    ) -> Result<Step<CallToolResult>, ErrorData> {
        round.require(self.capability())?;
        let asked = json!({ "arguments": arguments });
        if let Some(state) = round.state() {
            if *state != asked {
                return Err(ErrorData::invalid_params(
                    "requestState was issued for other arguments of this tool",
                    None,
                ));
            }
            if let Some(text) = self.answered(round)? {
                return Ok(Step::Done(CallToolResult::success(vec![
                    ContentBlock::text(text),
                ])));
            }
        }
        round.ask(vec![(self.key(), self.ask())], Some(asked))
    }
}

/// `test_sampling`'s result text for the sampled text of the client's answer.
pub(super) fn sampling_text(sampled: &str) -> String {
    format!("LLM response: {sampled}")
}

/// `test_sampling`'s result text for the `content` of a `CreateMessageResult`.
pub(super) fn sampling_content_text(content: &Value) -> String {
    sampling_text(&sampled_text(content))
}

/// An elicitation tool's result text for the client's answer.
pub(super) fn elicitation_text(result_prefix: &str, answer: &ElicitResult) -> String {
    let action = serde_json::to_value(&answer.action).unwrap_or_default();
    let action = action.as_str().unwrap_or("unknown");
    let content = answer.content.clone().unwrap_or_else(|| json!({}));
    format!("{result_prefix}: action={action}, content={content}")
}
