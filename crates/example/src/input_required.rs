//! The MRTR fixtures of the conformance suite (`input-required-result-*`
//! scenarios, protocol 2026-07-28), as [`Fixture`] state machines that
//! [`crate::mrtr`] runs in either era.
//!
//! Every fixture completes as soon as the answers it asked for are present and
//! well-formed; unknown extra `inputResponses` keys are ignored; a missing answer
//! re-asks the question; a malformed one is `-32602`.

// Roots are deprecated by SEP-2577 but are still a protocol feature.
#![allow(deprecated)]

use rmcp::{
    model::{CallToolResult, ContentBlock, GetPromptResult, PromptMessage, Role, Root},
    ErrorData,
};
use serde_json::{json, Value};

use crate::mrtr::{accepted_text, Ask, Fixture, Round, SessionFailure, Step};

pub(super) const ELICITATION: &str = "test_input_required_result_elicitation";
pub(super) const SAMPLING: &str = "test_input_required_result_sampling";
pub(super) const LIST_ROOTS: &str = "test_input_required_result_list_roots";
pub(super) const REQUEST_STATE: &str = "test_input_required_result_request_state";
pub(super) const MULTIPLE_INPUTS: &str = "test_input_required_result_multiple_inputs";
pub(super) const MULTI_ROUND: &str = "test_input_required_result_multi_round";
pub(super) const TAMPERED_STATE: &str = "test_input_required_result_tampered_state";
pub(super) const CAPABILITIES: &str = "test_input_required_result_capabilities";
pub(super) const STREAMING_ELICITATION: &str = "test_streaming_elicitation";
pub(super) const PROMPT: &str = "test_input_required_result_prompt";

type ToolStep = Result<Step<CallToolResult>, ErrorData>;

impl SessionFailure for CallToolResult {
    fn failed(message: String) -> Result<Self, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
    }
}

impl SessionFailure for GetPromptResult {
    fn failed(message: String) -> Result<Self, ErrorData> {
        Err(ErrorData::internal_error(message, None))
    }
}

/// The fixture behind an MRTR tool.
pub(super) fn tool(name: &str) -> Option<Fixture<CallToolResult>> {
    Some(match name {
        ELICITATION | STREAMING_ELICITATION => elicitation,
        SAMPLING => sampling,
        LIST_ROOTS => list_roots,
        REQUEST_STATE => request_state,
        MULTIPLE_INPUTS => multiple_inputs,
        MULTI_ROUND => multi_round,
        TAMPERED_STATE => tampered_state,
        CAPABILITIES => capabilities,
        _ => return None,
    })
}

/// The fixture behind an MRTR prompt.
pub(super) fn prompt(name: &str) -> Option<Fixture<GetPromptResult>> {
    (name == PROMPT).then_some(prompt_with_context as Fixture<GetPromptResult>)
}

fn done(text: impl Into<String>) -> ToolStep {
    Ok(Step::Done(CallToolResult::success(vec![
        ContentBlock::text(text),
    ])))
}

fn string_schema(field: &str) -> Value {
    json!({
        "type": "object",
        "properties": { field: { "type": "string" } },
        "required": [field]
    })
}

fn ask_name() -> Ask {
    Ask::elicit("What is your name?", string_schema("name"))
}

fn ask_confirmation() -> Ask {
    Ask::elicit(
        "Please confirm to continue",
        json!({
            "type": "object",
            "properties": { "ok": { "type": "boolean" } },
            "required": ["ok"]
        }),
    )
}

/// The state every stateful fixture carries; its content matters less than the
/// seal, which binds it to the tool.
fn first_round_state() -> Value {
    json!({ "round": 1 })
}

fn name_of(round: &Round<'_>, key: &str) -> Result<Option<String>, ErrorData> {
    Ok(round
        .elicited(key)?
        .map(|answer| accepted_text(&answer, "name").unwrap_or_else(|| "anonymous".to_owned())))
}

fn roots_text(roots: &[Root]) -> String {
    if roots.is_empty() {
        return "no roots".to_owned();
    }
    roots
        .iter()
        .map(|root| match &root.name {
            Some(name) => format!("{name} ({})", root.uri),
            None => root.uri.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `user_name` elicitation, then "Hello, <name>!" (no state needed).
fn elicitation(round: &Round<'_>) -> ToolStep {
    match name_of(round, "user_name")? {
        Some(name) => done(format!("Hello, {name}!")),
        None => round.ask(vec![("user_name", ask_name())], None),
    }
}

fn sampling(round: &Round<'_>) -> ToolStep {
    match round.sampled("sample_request")? {
        Some(text) => done(format!("Sampling result: {text}")),
        None => round.ask(
            vec![(
                "sample_request",
                Ask::sample("What is the capital of France?", 100),
            )],
            None,
        ),
    }
}

fn list_roots(round: &Round<'_>) -> ToolStep {
    match round.roots("roots_request")? {
        Some(roots) => done(format!("Client roots: {}", roots_text(&roots))),
        None => round.ask(vec![("roots_request", Ask::Roots)], None),
    }
}

/// A confirmation plus a state that must come back: "state-ok" once both do.
fn request_state(round: &Round<'_>) -> ToolStep {
    match (round.state(), round.elicited("confirm")?) {
        (Some(_), Some(_)) => done("state-ok: the requestState came back intact"),
        _ => round.ask(
            vec![("confirm", ask_confirmation())],
            Some(first_round_state()),
        ),
    }
}

/// Like [`request_state`]; the conformance suite tampers with the state and
/// expects the retry to be rejected (which [`crate::mrtr`] does).
fn tampered_state(round: &Round<'_>) -> ToolStep {
    match (round.state(), round.elicited("confirm")?) {
        (Some(_), Some(_)) => done("The requestState passed its integrity check"),
        _ => round.ask(
            vec![("confirm", ask_confirmation())],
            Some(first_round_state()),
        ),
    }
}

/// Describes the answer to every question the client could answer (elicitations
/// ask for a `name`), or `None` while one is missing.
fn describe_answers(
    round: &Round<'_>,
    asks: &[(&'static str, Ask)],
) -> Result<Option<Vec<String>>, ErrorData> {
    let mut parts = Vec::new();
    for (key, ask) in round.answerable(asks) {
        let part = match ask {
            Ask::Elicit { .. } => name_of(round, key)?,
            Ask::Sample { .. } => round.sampled(key)?,
            Ask::Roots => round.roots(key)?.map(|roots| roots_text(&roots)),
        };
        let Some(part) = part else {
            return Ok(None);
        };
        parts.push(format!("{key}: {part}"));
    }
    Ok(Some(parts))
}

/// An elicitation, a sampling and a roots request at once.
fn multiple_inputs(round: &Round<'_>) -> ToolStep {
    let asks = vec![
        ("user_name", ask_name()),
        ("greeting", Ask::sample("Generate a greeting", 50)),
        ("client_roots", Ask::Roots),
    ];
    if round.state().is_some() {
        if let Some(parts) = describe_answers(round, &asks)? {
            return done(format!("All inputs received; {}", parts.join("; ")));
        }
    }
    round.ask(asks, Some(first_round_state()))
}

/// Three rounds: name, then favourite colour, then the answer. Each state differs.
fn multi_round(round: &Round<'_>) -> ToolStep {
    let ask_color = || Ask::elicit("What is your favorite color?", string_schema("color"));
    match round.state_number("round") {
        Some(1) => match name_of(round, "step1")? {
            Some(name) => round.ask(
                vec![("step2", ask_color())],
                Some(json!({ "round": 2, "name": name })),
            ),
            None => round.ask(vec![("step1", ask_name())], Some(first_round_state())),
        },
        Some(2) => {
            let name = round.state_text("name").unwrap_or("anonymous").to_owned();
            match round.elicited("step2")? {
                Some(answer) => {
                    let color =
                        accepted_text(&answer, "color").unwrap_or_else(|| "unknown".to_owned());
                    done(format!("Hello, {name}! Your favorite color is {color}."))
                }
                None => round.ask(
                    vec![("step2", ask_color())],
                    Some(json!({ "round": 2, "name": name })),
                ),
            }
        }
        _ => round.ask(vec![("step1", ask_name())], Some(first_round_state())),
    }
}

/// Asks only what the client declared: an elicitation and/or a sampling request.
fn capabilities(round: &Round<'_>) -> ToolStep {
    let asks = vec![
        ("elicit_input", ask_name()),
        ("sample_input", Ask::sample("Say hello", 50)),
    ];
    if round.state().is_some() {
        if let Some(parts) = describe_answers(round, &asks)? {
            return done(format!(
                "Asked only for declared capabilities; {}",
                parts.join("; ")
            ));
        }
    }
    round.ask(asks, Some(first_round_state()))
}

/// `prompts/get` MRTR: asks for some context, then returns a prompt using it.
fn prompt_with_context(round: &Round<'_>) -> Result<Step<GetPromptResult>, ErrorData> {
    match round.elicited("user_context")? {
        Some(answer) => {
            let context = accepted_text(&answer, "context").unwrap_or_else(|| "none".to_owned());
            Ok(Step::Done(
                GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with user context: {context}"),
                )])
                .with_description("A prompt built from user-provided context"),
            ))
        }
        None => round.ask(
            vec![(
                "user_context",
                Ask::elicit(
                    "What context should the prompt include?",
                    string_schema("context"),
                ),
            )],
            None,
        ),
    }
}
