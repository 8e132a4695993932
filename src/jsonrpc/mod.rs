//! The thin JSON-RPC 2.0 envelope.
//!
//! Every message is parsed once into its kind (request, notification, response), its
//! `id` and `method`, with `params` / `result` / `error` kept as raw JSON. Gantry only
//! interprets what it must; everything else is relayed byte-for-byte. No I/O here.
//!
//! Invariant: a [`RequestId`] is always valid JSON of type string or integer, and is
//! written back exactly as it was read (`1` stays `1`, `"1"` stays `"1"`).

use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// Standard JSON-RPC and MCP error codes used by Gantry.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Implementation-defined server error: the backend failed (crashed,
    /// unreachable, bad reply), or Gantry refused for a reason JSON-RPC has no code
    /// for (credentials, Origin, overload); the error's fault says which.
    pub const SERVER_ERROR: i64 = -32000;
    /// [`SERVER_ERROR`] where the backend is at fault.
    pub const BACKEND_ERROR: i64 = SERVER_ERROR;
    /// Implementation-defined: the backend did not answer in time.
    pub const REQUEST_TIMEOUT: i64 = -32001;
    /// Implementation-defined: session missing / not found (as the TS SDK uses it).
    pub const SESSION_ERROR: i64 = -32001;
    /// Resource not found (session era, up to 2025-11-25).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// 2026-07-28: an `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` header is
    /// missing or disagrees with the body.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: the request needs a client capability it did not declare.
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// 2026-07-28: the request's protocol version is not one the server speaks.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// Why a byte string is not an acceptable JSON-RPC message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// JSON, but not a JSON-RPC 2.0 message.
    #[error("invalid JSON-RPC message: {0}")]
    Invalid(&'static str),
}

/// A JSON-RPC request id, kept as its exact raw JSON (a string or an integer).
#[derive(Clone)]
pub struct RequestId(Box<RawValue>);

impl RequestId {
    /// Validates raw JSON as an MCP request id: a string, or an integer number.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Self, ParseError> {
        let s = raw.get();
        let first = s.as_bytes().first().copied();
        match first {
            Some(b'"') => Ok(Self(raw)),
            Some(b'-' | b'0'..=b'9') => {
                if s.bytes().all(|b| b == b'-' || b.is_ascii_digit()) {
                    Ok(Self(raw))
                } else {
                    Err(ParseError::Invalid(
                        "request id must be a string or an integer",
                    ))
                }
            }
            _ => Err(ParseError::Invalid(
                "request id must be a string or an integer",
            )),
        }
    }

    /// An integer id (as Gantry allocates upstream).
    pub fn from_u64(n: u64) -> Self {
        Self(number_raw(n))
    }

    /// A string id.
    pub fn from_string(s: &str) -> Self {
        Self(to_raw(&s))
    }

    /// The exact JSON text of the id.
    pub fn raw(&self) -> &RawValue {
        &self.0
    }

    /// The id as an integer, if it is one that fits `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.0.get().parse().ok()
    }

    /// The id's JSON text, a stable key that keeps `1` and `"1"` apart.
    pub fn key(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}
impl Eq for RequestId {}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

/// A request: has an id and a method.
#[derive(Debug, Clone)]
pub struct Request {
    /// The id, exactly as sent.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params, untouched.
    pub params: Option<Box<RawValue>>,
}

/// A notification: a method and no id.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params, untouched.
    pub params: Option<Box<RawValue>>,
}

/// A response: a result or an error for the request with `id`.
#[derive(Debug, Clone)]
pub struct Response {
    /// The id of the request answered; `None` when the peer sent `null` or nothing.
    pub id: Option<RequestId>,
    /// `Ok(result)` or `Err(error object)`, both raw.
    pub outcome: Result<Box<RawValue>, Box<RawValue>>,
}

/// One JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response (result or error).
    Response(Response),
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    /// Present-but-null stays `Some("null")` (serde would make it `None`): a request
    /// with a null id must be told from a notification.
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Box<RawValue>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// What a body holds: one message, or (2025-03-26) a batch.
#[derive(Debug)]
pub enum Incoming {
    /// A single message.
    Single(Message),
    /// A JSON array of messages (2025-03-26 batching).
    Batch(Vec<Message>),
}

impl Message {
    /// Parses one JSON-RPC message.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let env: Envelope<'_> = serde_json::from_slice(bytes).map_err(|e| classify(&e))?;
        Self::from_envelope(env)
    }

    fn from_envelope(env: Envelope<'_>) -> Result<Self, ParseError> {
        match env.jsonrpc.map(RawValue::get) {
            Some("\"2.0\"") => {}
            _ => return Err(ParseError::Invalid("\"jsonrpc\" must be \"2.0\"")),
        }
        let null_id = env.id.as_ref().is_some_and(|raw| raw.get() == "null");
        if null_id && env.method.is_some() {
            // MCP: a request id must not be null; a notification has no id at all.
            return Err(ParseError::Invalid(
                "a request's \"id\" must be a string or an integer, not null (a notification has no \"id\")",
            ));
        }
        let id = match env.id {
            Some(raw) if raw.get() == "null" => None,
            Some(raw) => Some(RequestId::from_raw(raw)?),
            None => None,
        };
        if let Some(p) = &env.params {
            let c = p.get().as_bytes().first().copied();
            if !matches!(c, Some(b'{' | b'[')) {
                return Err(ParseError::Invalid(
                    "\"params\" must be an object or an array",
                ));
            }
        }
        match (env.method, env.result, env.error) {
            (Some(method), None, None) => match id {
                Some(id) => Ok(Message::Request(Request {
                    id,
                    method,
                    params: env.params,
                })),
                None => Ok(Message::Notification(Notification {
                    method,
                    params: env.params,
                })),
            },
            (None, Some(result), None) => Ok(Message::Response(Response {
                id,
                outcome: Ok(result),
            })),
            (None, None, Some(error)) => {
                if !error.get().starts_with('{') {
                    return Err(ParseError::Invalid("\"error\" must be an object"));
                }
                Ok(Message::Response(Response {
                    id,
                    outcome: Err(error),
                }))
            }
            _ => Err(ParseError::Invalid(
                "a message needs exactly one of \"method\", \"result\" or \"error\"",
            )),
        }
    }

    /// The JSON text of this message (compact, one line).
    pub fn to_json(&self) -> String {
        match self {
            Message::Request(r) => r.to_json(),
            Message::Notification(n) => n.to_json(),
            Message::Response(r) => r.to_json(),
        }
    }
}

impl Incoming {
    /// Parses a body that may be a single message or a batch.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
        if first == Some(b'[') {
            let items: Vec<Box<RawValue>> =
                serde_json::from_slice(bytes).map_err(|e| classify(&e))?;
            if items.is_empty() {
                return Err(ParseError::Invalid("an empty batch is not a message"));
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(Message::parse(item.get().as_bytes())?);
            }
            Ok(Incoming::Batch(out))
        } else {
            Message::parse(bytes).map(Incoming::Single)
        }
    }
}

fn classify(e: &serde_json::Error) -> ParseError {
    if e.is_data() {
        ParseError::Invalid("not a JSON-RPC object")
    } else {
        ParseError::Json(e.to_string())
    }
}

fn push_params(out: &mut String, params: &Option<Box<RawValue>>) {
    if let Some(p) = params {
        out.push_str(",\"params\":");
        out.push_str(p.get());
    }
}

impl Request {
    /// The JSON text of this request.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.params.as_ref().map_or(0, |p| p.get().len()));
        out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        out.push_str(self.id.raw().get());
        out.push_str(",\"method\":");
        out.push_str(&json_string(&self.method));
        push_params(&mut out, &self.params);
        out.push('}');
        out
    }
}

impl Notification {
    /// A notification with the given method and params.
    pub fn new(method: &str, params: Option<Box<RawValue>>) -> Self {
        Self {
            method: method.to_owned(),
            params,
        }
    }

    /// The JSON text of this notification.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(48 + self.params.as_ref().map_or(0, |p| p.get().len()));
        out.push_str("{\"jsonrpc\":\"2.0\",\"method\":");
        out.push_str(&json_string(&self.method));
        push_params(&mut out, &self.params);
        out.push('}');
        out
    }
}

impl Response {
    /// A success response.
    pub fn ok(id: RequestId, result: Box<RawValue>) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result),
        }
    }

    /// An error response.
    pub fn err(id: Option<RequestId>, error: &RpcError) -> Self {
        Self {
            id,
            outcome: Err(error.to_raw()),
        }
    }

    /// The JSON text of this response. An error without an id is written with
    /// `"id":null`, as JSON-RPC 2.0 requires for unreadable requests.
    pub fn to_json(&self) -> String {
        let (key, body) = match &self.outcome {
            Ok(r) => ("result", r.get()),
            Err(e) => ("error", e.get()),
        };
        let id = self.id.as_ref().map_or("null", |i| i.raw().get());
        let mut out = String::with_capacity(40 + id.len() + body.len());
        out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        out.push_str(id);
        out.push_str(",\"");
        out.push_str(key);
        out.push_str("\":");
        out.push_str(body);
        out.push('}');
        out
    }
}

/// A JSON-RPC error object that Gantry itself produces.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// A short, precise, human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<serde_json::Value>,
}

impl RpcError {
    /// An error with a code and message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Adds structured data.
    pub fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The error object as raw JSON.
    pub fn to_raw(&self) -> Box<RawValue> {
        let mut v = serde_json::json!({ "code": self.code, "message": self.message });
        if let (Some(d), Some(obj)) = (&self.data, v.as_object_mut()) {
            obj.insert("data".into(), d.clone());
        }
        to_raw(&v)
    }

    /// A whole error response with `id: null`, for HTTP-level rejections.
    pub fn to_null_id_response(&self) -> String {
        Response::err(None, self).to_json()
    }
}

/// Serializes any value into a raw JSON box. Serialization of the plain data types
/// used here cannot fail; if it ever did, `null` is returned rather than panicking.
pub fn to_raw<T: serde::Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| null_raw())
}

/// The raw JSON `null`.
pub fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| empty_object())
}

/// The raw JSON `{}`.
pub fn empty_object() -> Box<RawValue> {
    // `{}` is always valid JSON; the fallback is unreachable but avoids a panic path.
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| number_raw(0))
}

fn number_raw(n: u64) -> Box<RawValue> {
    serde_json::value::to_raw_value(&n).unwrap_or_else(|_| Box::<RawValue>::default())
}

/// Quotes a string as JSON.
pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Params as an ordered map of raw values, for the few rewrites Gantry makes
/// (progress tokens, names, URIs) without touching anything else.
pub type RawMap = serde_json::Map<String, serde_json::Value>;

/// Reads one string field of raw params (e.g. `name`, `uri`) without a full parse.
pub fn string_field(params: Option<&RawValue>, field: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Any<'a>(#[serde(borrow)] std::collections::HashMap<&'a str, &'a RawValue>);
    let p = params?;
    let map: Any<'_> = serde_json::from_str(p.get()).ok()?;
    let v = map.0.get(field)?;
    serde_json::from_str::<String>(v.get()).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn keeps_id_types_apart_and_exact() {
        let a = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        let b = Message::parse(br#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#).unwrap();
        let (Message::Request(a), Message::Request(b)) = (a, b) else {
            panic!("requests expected")
        };
        assert_ne!(a.id, b.id);
        assert_eq!(a.to_json(), r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert_eq!(b.to_json(), r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#);
    }

    #[test]
    fn rejects_bad_ids_and_versions() {
        assert!(Message::parse(br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#).is_err());
        assert!(Message::parse(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).is_err());
        assert!(Message::parse(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).is_err());
        assert!(Message::parse(br#"{"jsonrpc":"2.0","id":1}"#).is_err());
        // A null id is no request (and no notification either).
        assert!(matches!(
            Message::parse(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            Err(ParseError::Invalid(_))
        ));
        assert!(matches!(
            Message::parse(b"{not json"),
            Err(ParseError::Json(_))
        ));
        assert!(matches!(
            Incoming::parse(b"[]"),
            Err(ParseError::Invalid(_))
        ));
    }

    #[test]
    fn classifies_and_round_trips() {
        let n =
            Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(n, Message::Notification(_)));
        let r = Message::parse(br#"{"jsonrpc":"2.0","id":7,"result":{"a":[1, 2]}}"#).unwrap();
        assert_eq!(
            r.to_json(),
            r#"{"jsonrpc":"2.0","id":7,"result":{"a":[1, 2]}}"#
        );
        let e = Message::parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#)
            .unwrap();
        let Message::Response(e) = e else { panic!() };
        assert!(e.id.is_none() && e.outcome.is_err());
        let batch = Incoming::parse(
            br#" [{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]"#,
        )
        .unwrap();
        assert!(matches!(batch, Incoming::Batch(v) if v.len() == 2));
    }

    #[test]
    fn string_fields() {
        let p = to_raw(&serde_json::json!({"name":"x","uri":"test://a","n":1}));
        assert_eq!(string_field(Some(&p), "name").as_deref(), Some("x"));
        assert_eq!(string_field(Some(&p), "n"), None);
        assert_eq!(string_field(None, "name"), None);
    }
}
