//! The thin JSON-RPC 2.0 envelope.
//!
//! Every message is parsed once into its kind (request, notification, response), its
//! `id` and `method`, with `params` / `result` / `error` kept as raw JSON. Gantry only
//! interprets what it must; everything else is relayed byte-for-byte. No I/O here.
//!
//! Invariant: a [`RequestId`] is always valid JSON of type string or integer, and is
//! written back exactly as it was read (`1` stays `1`, `"1"` stays `"1"`).

use std::borrow::Cow;
use std::fmt;

pub mod members;
pub mod raw;

pub use raw::{Raw, RawMembers};

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
pub struct RequestId(Raw);

impl RequestId {
    /// Validates raw JSON as an MCP request id: a string, or an integer number.
    pub fn from_raw(raw: Raw) -> Result<Self, ParseError> {
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
    pub fn raw(&self) -> &Raw {
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
    pub params: Option<Raw>,
}

/// A notification: a method and no id.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params, untouched.
    pub params: Option<Raw>,
}

/// A response: a result or an error for the request with `id`.
#[derive(Debug, Clone)]
pub struct Response {
    /// The id of the request answered; `None` when the peer sent `null` or nothing.
    pub id: Option<RequestId>,
    /// `Ok(result)` or `Err(error object)`, both raw.
    pub outcome: Result<Raw, Raw>,
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

/// The members of a message's envelope, as text (other members are ignored).
#[derive(Default)]
struct Envelope<'a> {
    /// `None` when absent or `null`.
    jsonrpc: Option<&'a str>,
    /// Present-but-null stays `Some("null")`: a request with a null id must be told
    /// from a notification.
    id: Option<&'a str>,
    method: Option<Cow<'a, str>>,
    /// `params`, `result` and `error`: `None` when absent or `null`.
    params: Option<&'a str>,
    result: Option<&'a str>,
    error: Option<&'a str>,
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
        // The envelope's members are found by the check, in the same pass.
        let mut members = Vec::with_capacity(8);
        let mut shape = raw::ParamsShape::default();
        let text = raw::check_message(bytes, &mut members, Some(&mut shape))
            .map_err(|_| not_json(bytes))?;
        Self::from_members(raw::Source::borrowed(text), members, shape)
    }

    /// Parses one message from text known to be one JSON value, and its members if
    /// it is an object.
    fn from_members<'a>(
        source: raw::Source<'a>,
        members: impl IntoIterator<Item = raw::Member<'a>>,
        shape: raw::ParamsShape,
    ) -> Result<Self, ParseError> {
        // A message is a JSON object (serde would also have read the envelope's
        // fields by position from an array, `["2.0", 1, "ping"]`).
        if !source.text().starts_with('{') {
            return Err(ParseError::Invalid("not a JSON-RPC object"));
        }
        Self::from_envelope(source, Envelope::read(members)?, shape)
    }

    fn from_envelope(
        source: raw::Source<'_>,
        env: Envelope<'_>,
        shape: raw::ParamsShape,
    ) -> Result<Self, ParseError> {
        match env.jsonrpc {
            Some("\"2.0\"") => {}
            _ => return Err(ParseError::Invalid("\"jsonrpc\" must be \"2.0\"")),
        }
        let null_id = env.id == Some("null");
        if null_id && env.method.is_some() {
            // MCP: a request id must not be null; a notification has no id at all.
            return Err(ParseError::Invalid(
                "a request's \"id\" must be a string or an integer, not null (a notification has no \"id\")",
            ));
        }
        let id = match env.id {
            Some("null") | None => None,
            Some(text) => Some(RequestId::from_raw(Raw::trusted(text))?),
        };
        if let Some(p) = env.params {
            if !matches!(p.as_bytes().first(), Some(b'{' | b'[')) {
                return Err(ParseError::Invalid(
                    "\"params\" must be an object or an array",
                ));
            }
        }
        let (params, shape) = match env.params {
            Some(p) => (Some(Raw::params_of(source, p, shape)), None),
            None => (None, Some(shape)),
        };
        match (env.method, env.result, env.error) {
            (Some(method), None, None) => match id {
                Some(id) => Ok(Message::Request(Request {
                    id,
                    method: method.into_owned(),
                    params,
                })),
                None => Ok(Message::Notification(Notification {
                    method: method.into_owned(),
                    params,
                })),
            },
            (None, Some(result), None) => Ok(Message::Response(Response {
                id,
                outcome: Ok(match shape {
                    Some(shape) => Raw::params_of(source, result, shape),
                    None => source.raw(result),
                }),
            })),
            (None, None, Some(error)) => {
                if !error.starts_with('{') {
                    return Err(ParseError::Invalid("\"error\" must be an object"));
                }
                Ok(Message::Response(Response {
                    id,
                    outcome: Err(source.raw(error)),
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

impl<'a> Envelope<'a> {
    /// The envelope of an object (valid JSON) from its members in order, as
    /// serde_json read it into a struct before: a repeated envelope member, a key
    /// whose escapes do not decode or a `method` that is not a string is refused at
    /// the first one met; `null` is an absent `jsonrpc`, `method`, `params`,
    /// `result` or `error`.
    fn read(members: impl IntoIterator<Item = raw::Member<'a>>) -> Result<Self, ParseError> {
        const NOT_AN_OBJECT: ParseError = ParseError::Invalid("not a JSON-RPC object");
        let mut env = Envelope::default();
        let mut seen = [false; 6];
        for (key, value) in members {
            let name = match members::string_value(key) {
                Some(name) => name,
                None => return Err(not_json(key.as_bytes())),
            };
            let (slot, field) = match name.as_ref() {
                "jsonrpc" => (0, &mut env.jsonrpc),
                "id" => (1, &mut env.id),
                "method" => {
                    if std::mem::replace(&mut seen[2], true) {
                        return Err(NOT_AN_OBJECT);
                    }
                    env.method = match value {
                        "null" => None,
                        v if v.starts_with('"') => match members::string_value(v) {
                            Some(m) => Some(m),
                            None => return Err(not_json(v.as_bytes())),
                        },
                        _ => return Err(NOT_AN_OBJECT),
                    };
                    continue;
                }
                "params" => (3, &mut env.params),
                "result" => (4, &mut env.result),
                "error" => (5, &mut env.error),
                _ => continue,
            };
            if seen
                .get_mut(slot)
                .is_some_and(|s| std::mem::replace(s, true))
            {
                return Err(NOT_AN_OBJECT);
            }
            *field = (slot == 1 || value != "null").then_some(value);
        }
        Ok(env)
    }
}

impl Incoming {
    /// Parses a body that may be a single message or a batch.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        // A message's envelope has four or five members.
        let mut top = Vec::with_capacity(8);
        let mut shape = raw::ParamsShape::default();
        let text =
            raw::check_message(bytes, &mut top, Some(&mut shape)).map_err(|_| not_json(bytes))?;
        Self::of_checked(raw::Source::borrowed(text), top, shape)
    }

    /// [`Incoming::parse`] of a whole buffer: its params, results and errors are
    /// slices of `bytes` (when large), not copies.
    pub fn parse_shared(bytes: bytes::Bytes) -> Result<Self, ParseError> {
        Self::parse_shared_as(bytes, raw::ParamsShape::default())
    }

    /// [`Incoming::parse_shared`] that also keeps where a response's `result`
    /// members are (and its `_meta`'s), for a reader of them: a stateless-era
    /// backend's results are shaped for each client's era.
    pub fn parse_shared_with_result(bytes: bytes::Bytes) -> Result<Self, ParseError> {
        Self::parse_shared_as(bytes, raw::ParamsShape::with_result())
    }

    fn parse_shared_as(
        bytes: bytes::Bytes,
        mut shape: raw::ParamsShape,
    ) -> Result<Self, ParseError> {
        let buf = match bytestring::ByteString::try_from(bytes.clone()) {
            Ok(buf) => buf,
            Err(_) => return Err(not_json(&bytes)),
        };
        let mut top = Vec::with_capacity(8);
        let text =
            raw::check_text(&buf, &mut top, Some(&mut shape)).map_err(|_| not_json(&bytes))?;
        Self::of_checked(raw::Source::shared(&buf).narrowed(text), top, shape)
    }

    /// A checked body: one message, or a batch of them.
    fn of_checked<'a>(
        source: raw::Source<'a>,
        top: Vec<raw::Member<'a>>,
        shape: raw::ParamsShape,
    ) -> Result<Self, ParseError> {
        let text = source.text();
        if text.starts_with('[') {
            let mut out = Vec::new();
            for item in members::elements(text) {
                let shape = raw::ParamsShape::default();
                out.push(Message::from_members(
                    source.narrowed(item),
                    members::members(item),
                    shape,
                )?);
            }
            if out.is_empty() {
                return Err(ParseError::Invalid("an empty batch is not a message"));
            }
            Ok(Incoming::Batch(out))
        } else {
            Message::from_members(source, top, shape).map(Incoming::Single)
        }
    }
}

/// The error for text that is not JSON: serde_json's description of where and why
/// (its wording, which clients have seen from Gantry so far), or the byte where the
/// UTF-8 breaks, the one thing serde_json lets pass when it skips a value.
fn not_json(bytes: &[u8]) -> ParseError {
    let described = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str::<String>(text)
            .err()
            .filter(|_| text.starts_with('"'))
            .or_else(|| serde_json::from_str::<serde::de::IgnoredAny>(text).err()),
        Err(e) => {
            return ParseError::Json(format!("invalid UTF-8 at byte {}", e.valid_up_to()));
        }
    };
    ParseError::Json(described.map_or_else(|| "invalid JSON".to_owned(), |e| e.to_string()))
}

fn push_params(out: &mut String, params: &Option<Raw>) {
    if let Some(p) = params {
        out.push_str(",\"params\":");
        out.push_str(p.get());
    }
}

impl Request {
    /// The JSON text of this request.
    pub fn to_json(&self) -> String {
        request_json(&self.id, &self.method, self.params.as_ref().map(Raw::get))
    }
}

/// The JSON text of a request whose params are `params` (JSON text, written as is).
pub fn request_json(id: &RequestId, method: &str, params: Option<&str>) -> String {
    // Room for the envelope and a newline (stdio framing) after it.
    let size = params.map_or(0, str::len);
    let mut out = String::with_capacity(48 + id.raw().get().len() + method.len() + size);
    push_request_head(&mut out, id, method);
    if let Some(p) = params {
        out.push_str(",\"params\":");
        out.push_str(p);
    }
    out.push('}');
    out
}

/// A request's text up to its params' value, for params sent after it as they are
/// and followed by [`REQUEST_END`]: together, [`request_json`] with those params.
pub fn request_head(id: &RequestId, method: &str) -> String {
    let mut out = String::with_capacity(56 + id.raw().get().len() + method.len());
    push_request_head(&mut out, id, method);
    out.push_str(",\"params\":");
    out
}

/// What ends a request written after [`request_head`] and its params.
pub const REQUEST_END: &str = "}";

/// The method of a request Gantry wrote ([`request_json`], [`request_head`]) with a
/// numeric id, as written (quoted): read from where the head puts it, not searched
/// for. `None` for any other text.
pub fn written_request_method(line: &str) -> Option<&str> {
    let rest = line
        .as_bytes()
        .strip_prefix(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let name = rest.get(digits..)?.strip_prefix(b",\"method\":\"")?;
    // A method name is short: a plain loop beats a vector search.
    let len = name.iter().position(|&c| c == b'"' || c == b'\\')?;
    if name.get(len) != Some(&b'"') {
        return None;
    }
    let open = line.len() - name.len() - 1;
    line.get(open..open + len + 2)
}

fn push_request_head(out: &mut String, id: &RequestId, method: &str) {
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    out.push_str(id.raw().get());
    out.push_str(",\"method\":");
    push_json_string(out, method);
}

impl Notification {
    /// A notification with the given method and params.
    pub fn new(method: &str, params: Option<Raw>) -> Self {
        Self {
            method: method.to_owned(),
            params,
        }
    }

    /// The JSON text of this notification.
    pub fn to_json(&self) -> String {
        let params = self.params.as_ref().map_or(0, |p| p.get().len());
        let mut out = String::with_capacity(40 + self.method.len() + params);
        out.push_str("{\"jsonrpc\":\"2.0\",\"method\":");
        push_json_string(&mut out, &self.method);
        push_params(&mut out, &self.params);
        out.push('}');
        out
    }
}

impl Response {
    /// A success response.
    pub fn ok(id: RequestId, result: Raw) -> Self {
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
        let body = match &self.outcome {
            Ok(r) | Err(r) => r.get(),
        };
        let mut out = self.head(body.len() + 1);
        out.push_str(body);
        out.push('}');
        out
    }

    /// [`Response::to_json`] in two parts, the result or error not copied: the
    /// envelope up to it, and it. The text is the head, the value, then `}`.
    pub fn into_parts(self) -> (String, Raw) {
        let head = self.head(0);
        match self.outcome {
            Ok(r) | Err(r) => (head, r),
        }
    }

    /// The envelope up to the result or error, with `room` to spare.
    fn head(&self, room: usize) -> String {
        let key = match &self.outcome {
            Ok(_) => "result",
            Err(_) => "error",
        };
        let id = self.id.as_ref().map_or("null", |i| i.raw().get());
        let mut out = String::with_capacity(40 + id.len() + room);
        out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        out.push_str(id);
        out.push_str(",\"");
        out.push_str(key);
        out.push_str("\":");
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
    pub fn to_raw(&self) -> Raw {
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

/// Serializes any value into raw JSON. Serialization of the plain data types used
/// here cannot fail; if it ever did, `null` is returned rather than panicking.
pub fn to_raw<T: serde::Serialize + ?Sized>(value: &T) -> Raw {
    serde_json::to_string(value).map_or_else(|_| null_raw(), Raw::trusted)
}

/// The object of `fields`, each value's JSON text written as is: how an object read
/// member by member into raw values is written back, without checking again what
/// was checked when it was read.
pub fn raw_object(fields: &indexmap::IndexMap<String, Raw>) -> Raw {
    let mut out = String::new();
    let o = members::ObjectWriter::begin(&mut out);
    for (k, v) in fields {
        o.member(&mut out, k, v.get());
    }
    o.end(&mut out);
    Raw::trusted(out)
}

/// The raw JSON `null`.
pub fn null_raw() -> Raw {
    Raw::trusted("null")
}

/// The raw JSON `{}`.
pub fn empty_object() -> Raw {
    Raw::trusted("{}")
}

fn number_raw(n: u64) -> Raw {
    Raw::trusted(n.to_string())
}

/// Quotes a string as JSON.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

/// Appends `s` quoted as JSON: copied as it is when nothing in it needs an escape
/// (a method name, a tool name, a `_meta` key), through serde_json otherwise.
pub fn push_json_string(out: &mut String, s: &str) {
    if needs_escape(s.as_bytes()) {
        out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
    } else {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

/// Whether a JSON string of `b` needs an escape: a control character, `"` or `\`.
/// Eight bytes at a time (the keys and names Gantry writes on every call are tens
/// of bytes long, and a byte-by-byte test costs several instructions a byte).
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    // Whether some byte of `x` is below `n` (n <= 128), exactly (no false positive
    // for the word as a whole).
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH != 0;
    let zero = |x: u64| below(x, 1);
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let Ok(w) = <[u8; 8]>::try_from(w) else {
            return true;
        };
        let x = u64::from_le_bytes(w);
        if below(x, 0x20) || zero(x ^ (ONES * u64::from(b'"'))) || zero(x ^ (ONES * 0x5c)) {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&c| c < 0x20 || c == b'"' || c == b'\\')
}

/// Params as an ordered map of raw values, for the few rewrites Gantry makes
/// (progress tokens, names, URIs) without touching anything else.
pub type RawMap = serde_json::Map<String, serde_json::Value>;

/// A fixed string Gantry looks for in messages, its searcher built once: building
/// one (what `memmem::find` does on every call) costs more than scanning a small
/// message. Made by [`needle!`](crate::needle).
pub type Needle = std::sync::LazyLock<memchr::memmem::Finder<'static>>;

/// `needle!("text")`: a `&'static` [`Needle`] for a constant string.
#[macro_export]
macro_rules! needle {
    ($text:expr) => {{
        static NEEDLE: $crate::jsonrpc::Needle =
            $crate::jsonrpc::Needle::new(|| ::memchr::memmem::Finder::new($text));
        &NEEDLE
    }};
}

/// Whether `needle` occurs in `text`: the cheap test before parsing a message for
/// something it rarely holds (a vectorized search; a large message is scanned in
/// well under a microsecond).
pub fn mentions(text: &str, needle: &Needle) -> bool {
    needle.find(text.as_bytes()).is_some()
}

/// Reads one string field of raw params (e.g. `name`, `uri`) without a full parse:
/// the other fields (a call's arguments) are skipped over, not parsed. A repeated key
/// counts by its last value, as in the JSON parsers of the backends that act on it.
pub fn string_field(params: Option<&Raw>, field: &str) -> Option<String> {
    members::string_value(params?.member(field)?).map(std::borrow::Cow::into_owned)
}

/// Whether the `_meta` object of raw params (any of its repeats) mentions `needle`:
/// the arguments beside it are not searched.
pub fn meta_mentions(params: &Raw, needle: &Needle) -> bool {
    meta_in(params.get(), params.members(), needle)
}

/// Whether the `_meta` object of raw params may have a member named `key` (`needle`
/// is that name's searcher), the cheap test before reading it: exact from the
/// members the message's check kept (a few keys compared), else [`meta_mentions`].
pub fn meta_may_name(params: &Raw, key: &str, needle: &Needle) -> bool {
    match params.any_key(|_| false, |k| members::key_is(k, key)) {
        Some(found) => found,
        None => meta_mentions(params, needle),
    }
}

fn meta_in<'a>(
    text: &str,
    mut members: impl Iterator<Item = raw::Member<'a>>,
    needle: &Needle,
) -> bool {
    !surely_lacks(text, &[needle])
        && members.any(|(k, v)| members::key_is(k, "_meta") && mentions(v, needle))
}

/// Below this size a search of the whole text is cheaper than walking its members.
const SMALL_TEXT: usize = 2048;

/// Whether `text` surely holds none of `needles`, however a key is spelled: it is
/// small, has no escape (`\u0061` for `a`) and no needle occurs in it. The cheap
/// test before [`members`] for the small messages most calls are.
pub fn surely_lacks(text: &str, needles: &[&Needle]) -> bool {
    text.len() < SMALL_TEXT
        && memchr::memchr(b'\\', text.as_bytes()).is_none()
        && !needles.iter().any(|n| mentions(text, n))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_method_of_a_written_request_is_read_from_its_head() {
        let id = RequestId::from_u64(42);
        for method in ["server/discover", "tools/call", "a\"b"] {
            let want = serde_json::to_string(method).unwrap();
            // An escape ends the plain read: not a method Gantry looks for.
            let want = (!method.contains('"')).then_some(want.as_str());
            let line = request_json(&id, method, Some(r#"{"x":"\"server/discover\""}"#));
            assert_eq!(written_request_method(&line), want, "{line}");
            assert_eq!(written_request_method(&request_head(&id, method)), want);
        }
        for other in [
            r#"{"jsonrpc":"2.0","method":"server/discover"}"#,
            r#"{"jsonrpc":"2.0","id":"1","method":"server/discover"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"method":"server/discover"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"#,
            "",
        ] {
            assert_eq!(written_request_method(other), None, "{other}");
        }
    }

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
        // Only the top level; a repeated key counts by its last value; escapes read.
        let raw = |s: &str| Raw::from_string(s.to_owned()).unwrap();
        let p = raw(r#"{"arguments":{"name":"inner"},"name":"a","name":"b"}"#);
        assert_eq!(string_field(Some(&p), "name").as_deref(), Some("b"));
        let p = raw(r#"{"n\u0061me":"x\"y"}"#);
        assert_eq!(string_field(Some(&p), "name").as_deref(), Some("x\"y"));
        assert_eq!(string_field(Some(&raw("[1]")), "name"), None);
    }
}

#[cfg(test)]
mod props {
    //! Property tests: the envelope parser never panics, whatever a client or a
    //! backend sends, and what it parses is written back unchanged.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    /// Any JSON value: scalars (finite floats, large integers, any text) and nested
    /// arrays and objects.
    fn json() -> impl Strategy<Value = Value> {
        crate::testkit::json_tree(crate::testkit::json_scalar(), key().boxed(), (4, 48, 6))
    }

    /// Object keys: the envelope's own fields most of the time, else any text.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(vec!["jsonrpc", "id", "method", "params", "result", "error"])
                .prop_map(str::to_owned),
            1 => any::<String>(),
        ]
    }

    /// The JSON text of a valid id: an integer of any size, or a string whose
    /// characters are written literally or as `\u` escapes.
    fn id_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            "-?[1-9][0-9]{19,40}",
            prop::collection::vec((any::<char>(), any::<bool>()), 0..12).prop_map(|cs| {
                let mut s = String::from('"');
                for (c, escape) in cs {
                    if escape || c == '"' || c == '\\' || c < ' ' {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            s.push_str(&format!("\\u{u:04x}"));
                        }
                    } else {
                        s.push(c);
                    }
                }
                s.push('"');
                s
            }),
        ]
    }

    /// Mostly message-shaped objects: each envelope field absent, well-typed or any
    /// value, plus unknown fields.
    fn message_value() -> impl Strategy<Value = Value> {
        let jsonrpc = prop_oneof![4 => Just(Some(Value::from("2.0"))), 1 => Just(None), 1 => json().prop_map(Some)];
        let id = prop_oneof![
            2 => Just(None),
            4 => id_text().prop_map(|t| Some(serde_json::from_str::<Value>(&t).unwrap())),
            1 => Just(Some(Value::Null)),
            1 => json().prop_map(Some),
        ];
        let null = || Just(Some(Value::Null));
        let method = prop_oneof![
            2 => Just(None),
            3 => any::<String>().prop_map(|m| Some(Value::from(m))),
            1 => null(),
            1 => json().prop_map(Some),
        ];
        let params = prop_oneof![
            2 => Just(None),
            3 => json().prop_map(|v| Some(serde_json::json!({ "p": v }))),
            1 => prop::collection::vec(json(), 0..3).prop_map(|v| Some(Value::Array(v))),
            1 => null(),
            1 => json().prop_map(Some),
        ];
        let result = prop_oneof![3 => Just(None), 1 => null(), 1 => json().prop_map(Some)];
        let error = prop_oneof![
            3 => Just(None),
            1 => null(),
            1 => json().prop_map(|d| Some(serde_json::json!({"code": -1, "message": "m", "data": d}))),
            1 => json().prop_map(Some),
        ];
        let extra = prop::collection::vec((any::<String>(), json()), 0..2);
        (jsonrpc, id, method, params, result, error, extra).prop_map(
            |(jsonrpc, id, method, params, result, error, extra)| {
                let mut m = Map::new();
                for (k, v) in extra {
                    m.insert(k, v);
                }
                for (k, v) in [
                    ("jsonrpc", jsonrpc),
                    ("id", id),
                    ("method", method),
                    ("params", params),
                    ("result", result),
                    ("error", error),
                ] {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                }
                Value::Object(m)
            },
        )
    }

    /// The parser as it was until 2026-12-04 (serde_json reading the envelope into a
    /// struct, its raw values checked by serde_json): what the own one must agree
    /// with, error kind and message included.
    mod before {
        use super::super::{Message, ParseError};
        use serde::Deserialize;
        use serde_json::value::RawValue;

        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(borrow, default)]
            jsonrpc: Option<&'a RawValue>,
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

        fn present<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Box<RawValue>>, D::Error> {
            Box::<RawValue>::deserialize(d).map(Some)
        }

        fn classify(e: &serde_json::Error) -> ParseError {
            if e.is_data() {
                ParseError::Invalid("not a JSON-RPC object")
            } else {
                ParseError::Json(e.to_string())
            }
        }

        /// The envelope as the own parser sees it, rebuilt as JSON text for it.
        pub(super) fn parse(bytes: &[u8]) -> Result<Message, ParseError> {
            let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
            if first != Some(b'{') {
                serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(|e| classify(&e))?;
                return Err(ParseError::Invalid("not a JSON-RPC object"));
            }
            let env: Envelope<'_> = serde_json::from_slice(bytes).map_err(|e| classify(&e))?;
            let mut text = String::from("{");
            let mut put = |k: &str, v: &str| {
                if text.len() > 1 {
                    text.push(',');
                }
                text.push_str(&format!("\"{k}\":{v}"));
            };
            if let Some(v) = env.jsonrpc {
                put("jsonrpc", v.get());
            }
            if let Some(v) = &env.id {
                put("id", v.get());
            }
            if let Some(m) = &env.method {
                put("method", &serde_json::to_string(m).unwrap());
            }
            for (k, v) in [
                ("params", &env.params),
                ("result", &env.result),
                ("error", &env.error),
            ] {
                if let Some(v) = v {
                    put(k, v.get());
                }
            }
            text.push('}');
            Message::parse(text.as_bytes())
        }

        pub(super) fn parse_batch(bytes: &[u8]) -> Result<Vec<Message>, ParseError> {
            let items: Vec<Box<RawValue>> =
                serde_json::from_slice(bytes).map_err(|e| classify(&e))?;
            if items.is_empty() {
                return Err(ParseError::Invalid("an empty batch is not a message"));
            }
            items.iter().map(|i| parse(i.get().as_bytes())).collect()
        }
    }

    /// A parse's outcome, comparable: the message's text, or the error (a JSON
    /// error's wording aside).
    fn outcome(r: &Result<Message, ParseError>) -> Result<String, String> {
        match r {
            Ok(m) => Ok(m.to_json()),
            Err(ParseError::Json(_)) => Err("not JSON".into()),
            Err(ParseError::Invalid(why)) => Err((*why).into()),
        }
    }

    /// Whether the own parser and the one before agree on `bytes`: the same message
    /// or the same kind of refusal. Text that is not JSON is refused as such: serde_json
    /// let bad UTF-8 pass in members it skipped, and called a message that breaks
    /// off after a member of the wrong type an invalid request, not invalid JSON.
    fn agrees(bytes: &[u8]) -> Result<(), TestCaseError> {
        let json = std::str::from_utf8(bytes).is_ok()
            && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
        let now = Message::parse(bytes);
        let then = before::parse(bytes);
        if json {
            prop_assert_eq!(
                outcome(&now),
                outcome(&then),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        } else {
            prop_assert!(matches!(now, Err(ParseError::Json(_))));
        }
        let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
        if first == Some(b'[') {
            let now = Incoming::parse(bytes).map(|i| match i {
                Incoming::Batch(ms) => ms,
                Incoming::Single(m) => vec![m],
            });
            let then = before::parse_batch(bytes);
            let texts = |r: &Result<Vec<Message>, ParseError>| match r {
                Ok(ms) => Ok(ms.iter().map(Message::to_json).collect::<Vec<_>>()),
                Err(ParseError::Json(_)) => Err("not JSON".to_owned()),
                Err(ParseError::Invalid(why)) => Err((*why).to_owned()),
            };
            if json {
                prop_assert_eq!(texts(&now), texts(&then));
            } else {
                prop_assert!(matches!(now, Err(ParseError::Json(_))));
            }
        }
        Ok(())
    }

    #[test]
    fn the_envelopes_edges_parse_as_before() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"x","\ud800":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"\ud800"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"\ud800\udc00\n"}"#,
            r#"{"jsonrpc":"2.0","\u0069d":1,"m\u0065thod":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","x":1,"x":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#,
            r#"{"jsonrpc":null,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#" [ {"jsonrpc":"2.0","method":"a"} , {"jsonrpc":"2.0","id":"b","result":[]} ] "#,
            "[]",
            "[1]",
            r#"[{"jsonrpc":"2.0","method":"a"},]"#,
        ] {
            agrees(text.as_bytes()).unwrap();
        }
    }

    /// Bytes that look like JSON-RPC text: fragments of it glued together.
    fn jsonish_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\n",
            "\"",
            "\\",
            "\"jsonrpc\"",
            "\"2.0\"",
            "\"id\"",
            "\"method\"",
            "\"params\"",
            "\"result\"",
            "\"error\"",
            "null",
            "true",
            "1",
            "-0",
            "1.5e3",
            "18446744073709551616",
            "\"\\ud800\"",
            "\u{feff}",
            "\u{0}",
        ]);
        prop::collection::vec(token, 0..40).prop_map(|t| t.concat().into_bytes())
    }

    /// The text of a message-shaped value (or a batch of them) with a few bytes
    /// replaced, inserted or removed, or cut short.
    fn mutated_message() -> impl Strategy<Value = Vec<u8>> {
        let text = prop_oneof![
            message_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
            prop::collection::vec(message_value(), 1..3)
                .prop_map(|v| serde_json::to_vec_pretty(&Value::Array(v)).unwrap()),
        ];
        let edits = prop::collection::vec((0u8..4, any::<usize>(), any::<u8>()), 0..4);
        (text, edits).prop_map(|(mut t, edits)| {
            for (op, at, b) in edits {
                let i = at % (t.len() + 1);
                match op {
                    0 if i < t.len() => t[i] = b,
                    1 => t.insert(i, b),
                    2 if i < t.len() => {
                        t.remove(i);
                    }
                    _ => t.truncate(i),
                }
            }
            t
        })
    }

    /// The envelope fields of a message-shaped object as an array, in the order
    /// they are declared (absent ones null, trailing ones left out).
    fn positional(v: Value) -> Value {
        let mut row: Vec<Value> = ["jsonrpc", "id", "method", "params", "result", "error"]
            .iter()
            .map(|k| v.get(k).cloned().unwrap_or(Value::Null))
            .collect();
        while row.last() == Some(&Value::Null) {
            row.pop();
        }
        Value::Array(row)
    }

    fn kind(m: &Message) -> &'static str {
        match m {
            Message::Request(_) => "request",
            Message::Notification(_) => "notification",
            Message::Response(_) => "response",
        }
    }

    fn id_key(m: &Message) -> Option<&str> {
        match m {
            Message::Request(r) => Some(r.id.key()),
            Message::Notification(_) => None,
            Message::Response(r) => r.id.as_ref().map(RequestId::key),
        }
    }

    /// A parsed message writes back to text that parses to the same message, and
    /// that text holds the envelope fields the original text held, as values (both
    /// read by serde_json, whose float reading is not exact: Gantry relays the text).
    fn check_round_trip(original: Option<&[u8]>, m: &Message) -> Result<(), TestCaseError> {
        let text = m.to_json();
        let again = Message::parse(text.as_bytes());
        prop_assert!(again.is_ok(), "{text} does not parse again: {again:?}");
        let again = again.unwrap();
        prop_assert_eq!(kind(&again), kind(m));
        prop_assert_eq!(id_key(&again), id_key(m));
        prop_assert_eq!(again.to_json(), text.clone());
        let original: Option<Value> = original.map(|t| serde_json::from_slice(t).unwrap());
        if let Some(Value::Object(orig)) = original {
            let written: Value = serde_json::from_str(&text).unwrap();
            let mut want = Map::new();
            want.insert("jsonrpc".into(), Value::from("2.0"));
            for k in ["id", "method", "params", "result", "error"] {
                match orig.get(k) {
                    // serde reads a null optional field as absent; only `"id":null`
                    // is told apart (a response to an unreadable request).
                    Some(Value::Null) if k != "id" => {}
                    // A response's stray `params` is ignored, not relayed.
                    Some(_) if k == "params" && matches!(m, Message::Response(_)) => {}
                    Some(v) => {
                        want.insert(k.into(), v.clone());
                    }
                    None => {}
                }
            }
            if matches!(m, Message::Response(_)) {
                want.entry("id").or_insert(Value::Null);
            }
            prop_assert_eq!(written, Value::Object(want), "{}", text);
        }
        Ok(())
    }

    /// Text mostly of the bytes a string's quoting turns on (controls, `"`, `\\`,
    /// DEL and multi-byte characters beside them), at every place in a word.
    fn quotable() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            4 => prop::char::range(' ', '~'),
            1 => prop::sample::select(vec!['"', '\\', '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', 'é', '\u{2028}', '😀']),
            1 => prop::char::range('\u{0}', '\u{1f}'),
        ];
        prop::collection::vec(c, 0..40).prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn strings_are_quoted_as_serde_quotes_them(s in quotable()) {
            let mut out = String::from("[");
            push_json_string(&mut out, &s);
            prop_assert_eq!(&out[1..], serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in prop_oneof![any::<Vec<u8>>(), jsonish_bytes(), mutated_message()],
        ) {
            if let Ok(m) = Message::parse(&bytes) {
                check_round_trip(None, &m)?;
            }
            if let Ok(Incoming::Batch(ms)) = Incoming::parse(&bytes) {
                prop_assert!(!ms.is_empty());
                for m in &ms {
                    check_round_trip(None, m)?;
                }
            }
        }

        #[test]
        fn parses_as_serde_json_did(
            bytes in prop_oneof![any::<Vec<u8>>(), jsonish_bytes(), mutated_message()],
            v in message_value(),
        ) {
            agrees(&bytes)?;
            agrees(&serde_json::to_vec(&v).unwrap())?;
        }

        #[test]
        fn arbitrary_json_never_panics(v in prop_oneof![json(), message_value()]) {
            for text in [serde_json::to_vec(&v).unwrap(), serde_json::to_vec_pretty(&v).unwrap()] {
                if let Ok(m) = Message::parse(&text) {
                    check_round_trip(Some(&text), &m)?;
                }
                let _ = Incoming::parse(&text);
            }
        }

        #[test]
        fn parsed_messages_round_trip(v in message_value()) {
            let text = serde_json::to_vec(&v).unwrap();
            let single = Message::parse(&text);
            if let Ok(m) = &single {
                check_round_trip(Some(&text), m)?;
            }
            // The same message alone in a batch is accepted or refused the same way.
            let batch = Incoming::parse(&serde_json::to_vec(&Value::Array(vec![v.clone()])).unwrap());
            match (&single, &batch) {
                (Ok(m), Ok(Incoming::Batch(ms))) => {
                    prop_assert_eq!(ms.len(), 1);
                    prop_assert_eq!(ms[0].to_json(), m.to_json());
                }
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "single {single:?} vs batch {batch:?}"),
            }
        }

        /// Only a JSON object is a message: not a scalar, not an array, not the
        /// envelope's fields in a row.
        #[test]
        fn only_objects_are_messages(v in prop_oneof![json(), message_value().prop_map(positional)]) {
            if !v.is_object() {
                let text = serde_json::to_vec(&v).unwrap();
                let m = Message::parse(&text);
                prop_assert!(m.is_err(), "{} parsed as {:?}", String::from_utf8_lossy(&text), m);
            }
        }

        /// Ids keep their type and their exact text, escapes and all.
        #[test]
        fn ids_keep_type_and_text(
            id in id_text(),
            method in any::<String>(),
            response in any::<bool>(),
        ) {
            let text = if response {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
            } else {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{}}}"#, json_string(&method))
            };
            let m = Message::parse(text.as_bytes());
            prop_assert!(m.is_ok(), "{text}: {m:?}");
            let m = m.unwrap();
            prop_assert_eq!(id_key(&m), Some(id.as_str()));
            prop_assert_eq!(m.to_json(), text.clone());
            let rid = match &m {
                Message::Request(r) => r.id.clone(),
                Message::Response(r) => r.id.clone().unwrap(),
                Message::Notification(_) => return Err(TestCaseError::fail("not a notification")),
            };
            let is_string = id.starts_with('"');
            prop_assert_eq!(rid.key().starts_with('"'), is_string);
            if is_string {
                prop_assert_eq!(rid.as_u64(), None);
                let s: String = serde_json::from_str(&id).unwrap();
                // A string id never equals the number with the same digits.
                if let Ok(n) = s.parse::<u64>() {
                    prop_assert_ne!(rid.clone(), RequestId::from_u64(n));
                }
                if !id.contains('\\') {
                    prop_assert_eq!(rid, RequestId::from_string(&s));
                }
            } else {
                prop_assert_eq!(rid.as_u64(), id.parse::<u64>().ok());
                if let Ok(n) = id.parse::<u64>() {
                    prop_assert_eq!(rid, RequestId::from_u64(n));
                }
            }
        }

        /// A string quoted by Gantry is what serde_json writes, escapes and all.
        #[test]
        fn strings_quote_as_serde_does(s in prop_oneof![any::<String>(), "[ -~\\x00-\\x1f\\x7f\"\\\\]{0,12}"]) {
            prop_assert_eq!(json_string(&s), serde_json::to_string(&s).unwrap());
        }

        /// Numbers that are not integers are refused as ids.
        #[test]
        fn non_integer_ids_are_refused(
            n in prop_oneof![
                "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,4})?([eE][-+]?[0-9]{1,3})?",
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:?}")),
            ],
        ) {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"m"}}"#);
            let is_integer_text = !n.contains(['.', 'e', 'E']);
            prop_assert_eq!(Message::parse(text.as_bytes()).is_ok(), is_integer_text, "{}", text);
        }
    }

    /// Whether `part` is memory of `buf` (not a copy of it).
    fn is_slice_of(buf: &bytes::Bytes, part: &str) -> bool {
        raw::within(std::str::from_utf8(buf).unwrap(), part)
    }

    /// A body parsed from its buffer hands out its large params, results and errors
    /// as slices of that buffer (a 100 KB call crosses Gantry without those copies),
    /// and its small values as copies (an id kept for long keeps no large body alive).
    #[test]
    fn large_values_of_a_shared_body_are_not_copied() {
        let big = "x".repeat(4096);
        let bodies = [
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","arguments":{{"m":"{big}"}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{big}"}}]}}}}"#
            ),
            format!(r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":1,"message":"{big}"}}}}"#),
            format!(r#"[{{"jsonrpc":"2.0","id":7,"result":{{"t":"{big}"}}}}]"#),
        ];
        for body in bodies {
            let buf = bytes::Bytes::from(body.clone());
            let m = match Incoming::parse_shared(buf.clone()).unwrap() {
                Incoming::Single(m) => m,
                Incoming::Batch(mut ms) => ms.remove(0),
            };
            let (id, value) = match &m {
                Message::Request(r) => (Some(&r.id), r.params.as_ref().unwrap()),
                Message::Response(r) => (r.id.as_ref(), r.outcome.as_ref().unwrap_or_else(|e| e)),
                Message::Notification(_) => unreachable!(),
            };
            assert!(value.get().contains(&big), "{body}");
            assert!(is_slice_of(&buf, value.get()), "copied: {body}");
            assert!(
                !is_slice_of(&buf, id.unwrap().raw().get()),
                "id shared: {body}"
            );
            // The same message as parsed from a borrowed slice.
            assert_eq!(
                m.to_json(),
                Message::parse(body.trim_matches(['[', ']']).as_bytes())
                    .unwrap()
                    .to_json()
            );
        }
        let small =
            bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#);
        let Ok(Incoming::Single(Message::Response(r))) = Incoming::parse_shared(small.clone())
        else {
            panic!("not a response");
        };
        let result = r.outcome.unwrap();
        assert_eq!(result.get(), r#"{"content":[]}"#);
        assert!(!is_slice_of(&small, result.get()), "a small value shared");
    }

    /// A params object parsed from a shared buffer keeps what the check found of its
    /// members and its `_meta`, as one parsed from a slice does.
    #[test]
    fn shared_params_keep_their_members() {
        let big = "y".repeat(2048);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"n","arguments":{{"a":"{big}"}},"_meta":{{"k":1,"progressToken":"p"}}}}}}"#
        );
        let Ok(Incoming::Single(Message::Request(r))) =
            Incoming::parse_shared(bytes::Bytes::from(body))
        else {
            panic!("not a request");
        };
        let params = r.params.unwrap();
        let keys: Vec<&str> = params.members().map(|(k, _)| k).collect();
        assert_eq!(keys, [r#""name""#, r#""arguments""#, r#""_meta""#]);
        let meta = params
            .members()
            .find(|(k, _)| *k == r#""_meta""#)
            .unwrap()
            .1;
        let nested: Vec<(&str, &str)> = params.nested_members(meta).unwrap().collect();
        assert_eq!(nested, [(r#""k""#, "1"), (r#""progressToken""#, r#""p""#)]);
    }

    proptest! {
        // Bigger inputs: fewer cases.
        #![proptest_config(config(48))]

        /// Parsing a buffer gives what parsing a slice of the same bytes gives: the
        /// same messages, or an error for the same bodies.
        #[test]
        fn shared_parsing_agrees_with_borrowed(
            v in prop_oneof![
                message_value(),
                prop::collection::vec(message_value(), 1..4).prop_map(Value::Array),
                json(),
            ],
            cut in any::<prop::sample::Index>(),
            garble in any::<bool>(),
        ) {
            let mut text = serde_json::to_vec(&v).unwrap();
            if garble {
                // A broken body: cut short, or with a byte that is not UTF-8.
                let at = cut.index(text.len());
                text.truncate(at);
                text.push(0xff);
            }
            let borrowed = Incoming::parse(&text);
            let shared = Incoming::parse_shared(bytes::Bytes::from(text.clone()));
            let json = |i: &Incoming| match i {
                Incoming::Single(m) => vec![m.to_json()],
                Incoming::Batch(ms) => ms.iter().map(Message::to_json).collect(),
            };
            match (&borrowed, &shared) {
                (Ok(a), Ok(b)) => prop_assert_eq!(json(a), json(b)),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                _ => prop_assert!(false, "borrowed {borrowed:?} vs shared {shared:?}"),
            }
        }

        #[test]
        fn batches_parse_item_by_item(vs in prop::collection::vec(message_value(), 1..5)) {
            let text = serde_json::to_vec(&Value::Array(vs.clone())).unwrap();
            let each: Result<Vec<Message>, ParseError> = vs
                .iter()
                .map(|v| Message::parse(&serde_json::to_vec(v).unwrap()))
                .collect();
            match (Incoming::parse(&text), each) {
                (Ok(Incoming::Batch(got)), Ok(want)) => {
                    let got: Vec<String> = got.iter().map(Message::to_json).collect();
                    let want: Vec<String> = want.iter().map(Message::to_json).collect();
                    prop_assert_eq!(got, want);
                }
                (Err(_), Err(_)) => {}
                (got, want) => prop_assert!(false, "batch {got:?} vs items {want:?}"),
            }
        }

        /// Deeply nested values (serde_json skips raw values without a depth limit)
        /// are relayed, never overflow the stack.
        #[test]
        fn deep_nesting_never_overflows(depth in prop_oneof![0usize..300, 300usize..20_000], object in any::<bool>()) {
            let (open, close) = if object { ("{\"a\":", "}") } else { ("[", "]") };
            let nested = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{nested}}}"#);
            if let Ok(m) = Message::parse(text.as_bytes()) {
                check_round_trip(None, &m)?;
            }
            let _ = Incoming::parse(format!("[{text}]").as_bytes());
        }
    }
}
