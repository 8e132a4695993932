//! Static data of the fixture: tool, resource and prompt listings, sample
//! media and the schemas of the elicitation requests.

use rmcp::model::{JsonObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool};
use serde_json::{json, Value};

use crate::input_required;

/// A 1x1 PNG (one teal pixel), base64.
pub(super) const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mOQz38NAAIqAXpGbxguAAAAAElFTkSuQmCC";
/// A WAV file holding 1 ms of 8 kHz mono silence, base64.
pub(super) const WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

pub(super) const STATIC_TEXT_URI: &str = "test://static-text";
pub(super) const STATIC_TEXT: &str = "This is the content of the static text resource.";
pub(super) const STATIC_BINARY_URI: &str = "test://static-binary";
pub(super) const WATCHED_URI: &str = "test://watched-resource";
pub(super) const TEMPLATE_URI: &str = "test://template/{id}/data";
pub(super) const TEMPLATE_PREFIX: &str = "test://template/";
pub(super) const TEMPLATE_SUFFIX: &str = "/data";

pub(super) const MISSING_CAPABILITY_TOOL: &str = "test_missing_capability";
pub(super) const LOGGING_TOOL: &str = "test_logging_tool";
pub(super) const TRIGGER_TOOL_CHANGE: &str = "test_trigger_tool_change";
pub(super) const TRIGGER_PROMPT_CHANGE: &str = "test_trigger_prompt_change";
pub(super) const CUSTOM_HEADERS_TOOL: &str = "test_custom_headers";
pub(super) const DYNAMIC_TOOL: &str = "test_dynamic_tool";
pub(super) const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

/// Turn a `json!` literal into a JSON object (non-objects become `{}`).
pub(super) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn no_arguments() -> JsonObject {
    object(json!({ "type": "object", "properties": {} }))
}

fn tool(name: &'static str, title: &str, description: &'static str, schema: JsonObject) -> Tool {
    let mut tool = Tool::new(name, description, schema);
    tool.title = Some(title.to_owned());
    tool
}

/// The JSON Schema 2020-12 input schema the `json-schema-2020-12` scenario
/// expects to see verbatim in `tools/list` (SEP-1613, SEP-2106).
fn json_schema_2020_12() -> JsonObject {
    object(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {
                    "street": { "type": "string" },
                    "city": { "type": "string" }
                }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": {
            "properties": { "contactMethod": { "const": "phone" } },
            "required": ["contactMethod"]
        },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    }))
}

pub(super) fn tools() -> Vec<Tool> {
    vec![
        tool(
            "echo",
            "Echo",
            "Returns the given message as text content.",
            object(json!({
                "type": "object",
                "properties": {
                    "message": { "type": "string", "description": "Text to send back" }
                },
                "required": ["message"]
            })),
        ),
        tool(
            "slow",
            "Slow",
            "Sleeps for `ms` milliseconds, then returns \"done\". Honours notifications/cancelled.",
            object(json!({
                "type": "object",
                "properties": {
                    "ms": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "How long to sleep, in milliseconds"
                    }
                },
                "required": ["ms"]
            })),
        ),
        tool(
            "test_simple_text",
            "Simple text",
            "Tests simple text content response",
            no_arguments(),
        ),
        tool(
            "test_image_content",
            "Image content",
            "Tests image content response",
            no_arguments(),
        ),
        tool(
            "test_audio_content",
            "Audio content",
            "Tests audio content response",
            no_arguments(),
        ),
        tool(
            "test_embedded_resource",
            "Embedded resource",
            "Tests embedded resource content response",
            no_arguments(),
        ),
        tool(
            "test_multiple_content_types",
            "Multiple content types",
            "Tests response with multiple content types (text, image, resource)",
            no_arguments(),
        ),
        tool(
            "test_tool_with_logging",
            "Tool with logging",
            "Tests tool that emits log messages during execution",
            no_arguments(),
        ),
        tool(
            "test_tool_with_progress",
            "Tool with progress",
            "Tests tool that reports progress notifications",
            no_arguments(),
        ),
        tool(
            "test_error_handling",
            "Error handling",
            "Tests error response handling",
            no_arguments(),
        ),
        tool(
            "test_sampling",
            "Sampling",
            "Tests server-initiated sampling (LLM completion request)",
            object(json!({
                "type": "object",
                "properties": {
                    "prompt": { "type": "string", "description": "The prompt to send to the LLM" }
                },
                "required": ["prompt"]
            })),
        ),
        tool(
            "test_elicitation",
            "Elicitation",
            "Tests server-initiated elicitation (user input request)",
            object(json!({
                "type": "object",
                "properties": {
                    "message": { "type": "string", "description": "The message to show the user" }
                },
                "required": ["message"]
            })),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicitation with defaults",
            "Tests elicitation with default values per SEP-1034",
            no_arguments(),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicitation with enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            no_arguments(),
        ),
        tool(
            "test_reconnection",
            "Reconnection",
            "Tests SSE stream disconnection and client reconnection (SEP-1699): over \
             Streamable HTTP the server closes the request's SSE stream mid-call and \
             sends the result after the client resumes it with Last-Event-ID.",
            no_arguments(),
        ),
        tool(
            "json_schema_2020_12_tool",
            "JSON Schema 2020-12",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613, SEP-2106)",
            json_schema_2020_12(),
        ),
        tool(
            input_required::ELICITATION,
            "MRTR: elicitation",
            "Asks the user's name (elicitation key `user_name`), then greets them. \
             2026-07-28: returns an InputRequiredResult; session era: sends elicitation/create.",
            no_arguments(),
        ),
        tool(
            input_required::SAMPLING,
            "MRTR: sampling",
            "Asks the client's LLM a question (sampling/createMessage), then returns the answer.",
            no_arguments(),
        ),
        tool(
            input_required::LIST_ROOTS,
            "MRTR: roots",
            "Asks for the client's roots (roots/list), then lists them.",
            no_arguments(),
        ),
        tool(
            input_required::REQUEST_STATE,
            "MRTR: request state",
            "Asks for a confirmation and carries an integrity-protected requestState; \
             answers \"state-ok\" when both come back.",
            no_arguments(),
        ),
        tool(
            input_required::MULTIPLE_INPUTS,
            "MRTR: multiple inputs",
            "Asks an elicitation, a sampling and a roots request in one round.",
            no_arguments(),
        ),
        tool(
            input_required::MULTI_ROUND,
            "MRTR: multiple rounds",
            "Asks the user's name, then their favourite colour (two rounds, two states).",
            no_arguments(),
        ),
        tool(
            input_required::TAMPERED_STATE,
            "MRTR: tampered state",
            "Carries an HMAC-sealed requestState; a modified state is rejected with -32602.",
            no_arguments(),
        ),
        tool(
            input_required::CAPABILITIES,
            "MRTR: capabilities",
            "Asks only for input the client declared a capability for (elicitation, sampling).",
            no_arguments(),
        ),
        tool(
            input_required::STREAMING_ELICITATION,
            "Streaming elicitation",
            "Reports progress, then asks the user's name without any server-to-client \
             request on the response stream (2026-07-28: InputRequiredResult).",
            no_arguments(),
        ),
        tool(
            MISSING_CAPABILITY_TOOL,
            "Missing capability",
            "Requires the sampling client capability: -32021 (2026-07-28) or an error \
             result (session era) when the client did not declare it.",
            no_arguments(),
        ),
        tool(
            LOGGING_TOOL,
            "Logging",
            "Emits notifications/message only at or above the requested log level \
             (2026-07-28: `_meta` logLevel; none without it).",
            no_arguments(),
        ),
        tool(
            TRIGGER_TOOL_CHANGE,
            "Trigger tool list change",
            "Adds or removes `test_dynamic_tool` and sends notifications/tools/list_changed.",
            no_arguments(),
        ),
        tool(
            TRIGGER_PROMPT_CHANGE,
            "Trigger prompt list change",
            "Adds or removes `test_dynamic_prompt` and sends notifications/prompts/list_changed.",
            no_arguments(),
        ),
        tool(
            CUSTOM_HEADERS_TOOL,
            "Custom headers",
            "Echoes its arguments; `region` and `priority` are mirrored into the \
             Mcp-Param-Region / Mcp-Param-Priority headers (SEP-2243).",
            object(json!({
                "type": "object",
                "properties": {
                    "region": {
                        "type": "string",
                        "description": "Region name, mirrored into Mcp-Param-Region",
                        "x-mcp-header": "Region"
                    },
                    "priority": {
                        "type": "integer",
                        "description": "Priority, mirrored into Mcp-Param-Priority",
                        "x-mcp-header": "Priority"
                    },
                    "query": { "type": "string", "description": "Not mirrored" }
                },
                "required": ["region"]
            })),
        ),
    ]
}

/// The tool `test_trigger_tool_change` adds and removes.
pub(super) fn dynamic_tool() -> Tool {
    tool(
        DYNAMIC_TOOL,
        "Dynamic tool",
        "Listed only while `test_trigger_tool_change` has been called an odd number of times.",
        no_arguments(),
    )
}

/// Every tool, with the dynamic one when it is listed.
pub(super) fn tools_with(dynamic: bool) -> Vec<Tool> {
    let mut tools = tools();
    if dynamic {
        tools.push(dynamic_tool());
    }
    tools
}

pub(super) fn resources() -> Vec<Resource> {
    vec![
        Resource::new(STATIC_TEXT_URI, "static-text")
            .with_title("Static Text Resource")
            .with_description("A static text resource for testing")
            .with_mime_type("text/plain"),
        Resource::new(STATIC_BINARY_URI, "static-binary")
            .with_title("Static Binary Resource")
            .with_description("A static binary resource (image) for testing")
            .with_mime_type("image/png"),
        Resource::new(WATCHED_URI, "watched-resource")
            .with_title("Watched Resource")
            .with_description(
                "A resource that changes every second while a client is subscribed to it",
            )
            .with_mime_type("text/plain"),
    ]
}

pub(super) fn resource_templates() -> Vec<ResourceTemplate> {
    vec![ResourceTemplate::new(TEMPLATE_URI, "template")
        .with_title("Resource Template")
        .with_description("A resource template with parameter substitution")
        .with_mime_type("application/json")]
}

/// The `{id}` of a URI matching [`TEMPLATE_URI`].
pub(super) fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(TEMPLATE_PREFIX)?
        .strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

pub(super) fn is_known_resource(uri: &str) -> bool {
    [STATIC_TEXT_URI, STATIC_BINARY_URI, WATCHED_URI].contains(&uri) || template_id(uri).is_some()
}

fn required_argument(name: &str, description: &str) -> PromptArgument {
    PromptArgument::new(name)
        .with_description(description)
        .with_required(true)
}

pub(super) fn prompts() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "test_simple_prompt",
            Some("A simple prompt without arguments"),
            None,
        )
        .with_title("Simple Test Prompt"),
        Prompt::new(
            "test_prompt_with_arguments",
            Some("A prompt with required arguments"),
            Some(vec![
                required_argument("arg1", "First test argument"),
                required_argument("arg2", "Second test argument"),
            ]),
        )
        .with_title("Prompt With Arguments"),
        Prompt::new(
            "test_prompt_with_embedded_resource",
            Some("A prompt that includes an embedded resource"),
            Some(vec![required_argument(
                "resourceUri",
                "URI of the resource to embed",
            )]),
        )
        .with_title("Prompt With Embedded Resource"),
        Prompt::new(
            "test_prompt_with_image",
            Some("A prompt that includes image content"),
            None,
        )
        .with_title("Prompt With Image"),
        Prompt::new(
            input_required::PROMPT,
            Some(
                "A prompt that first asks for user context (2026-07-28: InputRequiredResult; \
                 session era: elicitation/create)",
            ),
            None,
        )
        .with_title("Prompt With Input Required"),
    ]
}

/// The prompt `test_trigger_prompt_change` adds and removes.
pub(super) fn dynamic_prompt() -> Prompt {
    Prompt::new(
        DYNAMIC_PROMPT,
        Some(
            "Listed only while `test_trigger_prompt_change` has been called an odd number of times",
        ),
        None,
    )
    .with_title("Dynamic Prompt")
}

/// Every prompt, with the dynamic one when it is listed.
pub(super) fn prompts_with(dynamic: bool) -> Vec<Prompt> {
    let mut prompts = prompts();
    if dynamic {
        prompts.push(dynamic_prompt());
    }
    prompts
}

/// Completion candidates for a prompt argument or a template variable.
pub(super) fn completion_candidates(reference: &str, argument: &str) -> &'static [&'static str] {
    match (reference, argument) {
        ("test_prompt_with_arguments", "arg1" | "arg2") => {
            &["paris", "park", "party", "test", "testValue1", "testValue2"]
        }
        ("test_prompt_with_embedded_resource", "resourceUri") => {
            &[STATIC_TEXT_URI, STATIC_BINARY_URI, WATCHED_URI]
        }
        (TEMPLATE_URI, "id") => &["1", "2", "3", "42", "123"],
        _ => &[],
    }
}

/// `requestedSchema` of `test_elicitation`.
pub(super) fn elicitation_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        },
        "required": ["username", "email"]
    })
}

/// `requestedSchema` of `test_elicitation_sep1034_defaults`: a default for
/// every primitive type.
pub(super) fn elicitation_defaults_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        },
        "required": []
    })
}

/// `requestedSchema` of `test_elicitation_sep1330_enums`: the five enum
/// shapes of SEP-1330.
pub(super) fn elicitation_enums_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        },
        "required": []
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_ids() {
        assert_eq!(template_id("test://template/123/data"), Some("123"));
        assert_eq!(template_id("test://template//data"), None);
        assert_eq!(template_id("test://template/1/2/data"), None);
        assert_eq!(template_id("test://static-text"), None);
    }

    #[test]
    fn tool_names_are_unique() {
        let tools = tools_with(true);
        let mut names: Vec<_> = tools.iter().map(|tool| tool.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), tools.len());
    }
}
