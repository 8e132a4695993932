//! HTTP building blocks of the front door: what a client's `Accept` allows, bodies
//! read within the limit, JSON and SSE responses.

use super::error::FrontError;
use crate::front::App;
use crate::jsonrpc::{Raw, Response};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response as HttpResponse;

pub(super) fn json_response(body: String) -> HttpResponse {
    json_response_with(StatusCode::OK, body)
}

/// A JSON body with `status`, made directly: axum's `(status, headers, body)` would
/// first give a `String` body a `text/plain` type, then parse and replace it (a few
/// hundred instructions a response).
pub(super) fn json_response_with(status: StatusCode, body: String) -> HttpResponse {
    let mut r = HttpResponse::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Which SSE stream (the `kind` label of `gantry_sse_streams`).
#[derive(Clone, Copy)]
pub(crate) enum SseKind {
    /// A POST's response stream (or its resumption).
    Response,
    /// The standalone GET stream, or a stateless `subscriptions/listen`.
    Listen,
    /// The legacy HTTP+SSE transport's stream.
    Legacy,
}

impl SseKind {
    fn label(self) -> &'static str {
        match self {
            Self::Response => "response",
            Self::Listen => "listen",
            Self::Legacy => "legacy",
        }
    }
}

/// Counts an open SSE stream until it is dropped.
struct OpenStream(prometheus::IntGauge);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub(crate) fn sse_response(
    app: &App,
    kind: SseKind,
    body: impl futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
) -> HttpResponse {
    use futures::StreamExt as _;
    let gauge = app.metrics.sse_streams.with_label_values(&[kind.label()]);
    gauge.inc();
    let open = OpenStream(gauge);
    let body = body.map(move |chunk| {
        let _counted = &open;
        chunk
    });
    sse_of(Body::from_stream(body))
}

/// A complete body sent as its parts, each handed to the connection as it is (hyper
/// writes them with one vectored write, no copy into one buffer), its length known
/// up front (`Content-Length`, so the connection stays open for the next request).
struct Parts(std::collections::VecDeque<bytes::Bytes>);

impl Parts {
    fn new(parts: impl IntoIterator<Item = bytes::Bytes>) -> Self {
        Self(parts.into_iter().filter(|p| !p.is_empty()).collect())
    }
}

impl hyper::body::Body for Parts {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|part| Ok(hyper::body::Frame::data(part))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let len: usize = self.0.iter().map(bytes::Bytes::len).sum();
        hyper::body::SizeHint::with_exact(u64::try_from(len).unwrap_or(u64::MAX))
    }
}

/// A string for what goes before data of `len` bytes in a [`sse_message_body`], with
/// room for the data too when it will be copied in.
pub(super) fn sse_head_for(len: usize) -> String {
    let copied = if len < crate::sse::SENT_APART { len } else { 0 };
    String::with_capacity(128 + copied)
}

/// A complete SSE body: `head` (events already written, if any), then one `message`
/// event of `data`, a large one sent after its framing as it is (not copied), the
/// length known up front, so the connection stays open.
pub(super) fn sse_message_body(mut head: String, id: Option<&str>, data: String) -> HttpResponse {
    // Room for the event's framing, and for the data when it is framed with it
    // (below `SENT_APART`): no copy growing under it.
    let framed = if data.len() < crate::sse::SENT_APART {
        data.len()
    } else {
        0
    };
    head.reserve(framed + 48 + id.map_or(0, str::len));
    if !crate::sse::push_message_event_or_head(&mut head, id, &data) {
        return sse_of(Body::from(head));
    }
    let parts = [
        bytes::Bytes::from(head),
        bytes::Bytes::from(data),
        bytes::Bytes::from_static(crate::sse::EVENT_END.as_bytes()),
    ];
    sse_of(Body::new(Parts::new(parts)))
}

/// [`sse_message_body`] of a response: a large result or error (one with no raw
/// newline to blank) is sent after its envelope as it is, not copied into the
/// response's text first.
pub(super) fn sse_response_body(
    mut head: String,
    id: Option<&str>,
    resp: Response,
) -> HttpResponse {
    let (envelope, value) = match Apart::of(resp) {
        Apart::Whole(json) => return sse_message_body(head, id, json),
        Apart::Value { envelope, value } => (envelope, value),
    };
    head.reserve(48 + id.map_or(0, str::len) + envelope.len());
    crate::sse::push_event_head(&mut head, id);
    head.push_str(&envelope);
    let parts = [
        bytes::Bytes::from(head),
        value.into_bytes(),
        bytes::Bytes::from_static(b"}\n\n"),
    ];
    sse_of(Body::new(Parts::new(parts)))
}

/// A JSON response of `resp`, a large result or error sent after its envelope as it
/// is (not copied into the response's text first).
pub(super) fn json_response_of(resp: Response) -> HttpResponse {
    let (envelope, value) = match Apart::of(resp) {
        Apart::Whole(json) => return json_response(json),
        Apart::Value { envelope, value } => (envelope, value),
    };
    let parts = [
        bytes::Bytes::from(envelope),
        value.into_bytes(),
        bytes::Bytes::from_static(b"}"),
    ];
    let mut r = HttpResponse::new(Body::new(Parts::new(parts)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A response made ready to send.
enum Apart {
    /// A large value with no raw newline, sent after its envelope as it is; `}`
    /// closes the envelope after it.
    Value { envelope: String, value: Raw },
    /// The response's text, the value copied in: a small one, or one whose raw
    /// newlines an SSE event blanks.
    Whole(String),
}

impl Apart {
    fn of(resp: Response) -> Self {
        let (mut envelope, value) = resp.into_parts();
        let text = value.get();
        if text.len() < crate::sse::SENT_APART
            || memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some()
        {
            envelope.reserve(text.len() + 1);
            envelope.push_str(text);
            envelope.push('}');
            return Apart::Whole(envelope);
        }
        Apart::Value { envelope, value }
    }
}

/// An SSE response of `body` (type, no caching, no proxy buffering).
pub(super) fn sse_of(body: Body) -> HttpResponse {
    // Every SSE answer has these three: a copy of a map made once costs a third of
    // building it (hashing each name, growing the map) per response.
    static SSE: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
        // A constant name: not parsed from a string.
        const X_ACCEL_BUFFERING: header::HeaderName =
            header::HeaderName::from_static("x-accel-buffering");
        let mut h = HeaderMap::with_capacity(3);
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, no-transform"),
        );
        h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
        h
    });
    let mut resp = HttpResponse::new(body);
    *resp.headers_mut() = SSE.clone();
    resp
}

/// The request headers the MCP endpoint reads, found in one pass over them: a
/// lookup by name hashes the name and probes the map (about 150 instructions for
/// Gantry's own `mcp-*` names), and a POST was looked up eight to ten times. Each
/// holds the first value of its name, as [`HeaderMap::get`] would give.
#[derive(Clone, Copy, Default)]
pub(crate) struct Heads<'a> {
    /// The first `Accept`, and whether another follows.
    accept: Option<&'a HeaderValue>,
    more_accept: bool,
    pub(super) content_type: Option<&'a HeaderValue>,
    pub(super) session_id: Option<&'a HeaderValue>,
    pub(super) protocol_version: Option<&'a HeaderValue>,
    pub(super) method: Option<&'a HeaderValue>,
    pub(super) name: Option<&'a HeaderValue>,
    pub(super) traceparent: Option<&'a HeaderValue>,
}

impl<'a> Heads<'a> {
    pub(crate) fn read(headers: &'a HeaderMap) -> Self {
        let mut h = Heads::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                "accept" => {
                    h.more_accept = h.accept.is_some();
                    &mut h.accept
                }
                "content-type" => &mut h.content_type,
                "mcp-session-id" => &mut h.session_id,
                "mcp-protocol-version" => &mut h.protocol_version,
                "mcp-method" => &mut h.method,
                "mcp-name" => &mut h.name,
                "traceparent" => &mut h.traceparent,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        h
    }

    /// `Mcp-Session-Id`, if it is visible ASCII.
    pub(super) fn session_id(&self) -> Option<&'a str> {
        self.session_id.and_then(|v| v.to_str().ok())
    }
}

/// What the client's `Accept` allows.
#[derive(Clone, Copy)]
pub(crate) struct Accepts {
    pub(super) json: bool,
    pub(super) sse: bool,
}

impl Accepts {
    /// What `headers` accept, `heads` read from them.
    pub(super) fn of(heads: &Heads<'_>, headers: &HeaderMap) -> Self {
        // What the specification has clients send, and nearly all do: one compare
        // instead of splitting and trimming (1.3k instructions per request).
        if let (Some(v), false) = (heads.accept, heads.more_accept) {
            if matches!(
                v.as_bytes(),
                b"application/json, text/event-stream" | b"text/event-stream, application/json"
            ) {
                return Self {
                    json: true,
                    sse: true,
                };
            }
        }
        let mut json = false;
        let mut sse = false;
        let mut any = false;
        let mut stated = false;
        let parts = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .inspect(|_| stated = true)
            .flat_map(|v| v.split(','));
        for part in parts {
            let mime = part.split(';').next().unwrap_or_default().trim();
            let is = |m: &str| mime.eq_ignore_ascii_case(m);
            if is("application/json") || is("application/*") {
                json = true;
            } else if is("text/event-stream") || is("text/*") {
                sse = true;
            } else if is("*/*") {
                any = true;
            }
        }
        if !stated {
            // Lenient: a client that states nothing accepts what it gets.
            return Self {
                json: true,
                sse: true,
            };
        }
        Self {
            json: json || any,
            sse: sse || any,
        }
    }
}

/// An over-limit body is read on and thrown away up to this many bytes past the limit
/// before the 413 goes out. A client still sending when the connection closes under it sees
/// the reset (Node's fetch: `EPIPE`), not the answer; read to its end, the body
/// leaves the client free to read the refusal. Larger bodies are refused at once.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// Reads a request body within the configured limit, all of it within
/// `server.body_timeout`.
pub(crate) async fn read_body(
    app: &App,
    body: Body,
    headers: &HeaderMap,
) -> Result<bytes::Bytes, FrontError> {
    let limit = app.cfg.server.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(DRAIN_BYTES)) {
        return Err(FrontError::TooLarge(limit));
    }
    let within = app.cfg.server.body_timeout;
    match tokio::time::timeout(within, collect(body, limit)).await {
        Ok(Ok(Some(bytes))) => Ok(bytes),
        Ok(Ok(None)) | Ok(Err(_)) => Err(FrontError::TooLarge(limit)),
        Err(_) => Err(FrontError::BodyTimeout(within)),
    }
}

/// The body if it is at most `limit` bytes; `None` if it is larger, after reading
/// (and dropping) the rest of it up to [`DRAIN_BYTES`] past the limit.
async fn collect(body: Body, limit: usize) -> Result<Option<bytes::Bytes>, axum::Error> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut chunks: Vec<bytes::Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        total = total.saturating_add(data.len());
        if total > limit {
            chunks = Vec::new();
            if total - limit > DRAIN_BYTES {
                return Ok(None);
            }
        } else {
            chunks.push(data);
        }
    }
    if total > limit {
        return Ok(None);
    }
    Ok(Some(match chunks.len() {
        // Usually the whole body came as one chunk: no copy.
        0 => bytes::Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut all = bytes::BytesMut::with_capacity(total);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            all.freeze()
        }
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{collect, json_response_of, sse_response_body, Accepts, Heads, DRAIN_BYTES};
    use crate::jsonrpc::{Message, Response};
    use axum::body::Body;
    use bytes::Bytes;
    use futures::StreamExt;

    /// A body of these chunks that then never ends (a client that stops sending).
    fn stalled(chunks: Vec<Bytes>) -> Body {
        let s = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>))
            .chain(futures::stream::pending());
        Body::from_stream(s)
    }

    fn chunks(total: usize, size: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut left = total;
        while left > 0 {
            let n = left.min(size);
            out.push(Bytes::from(vec![b'x'; n]));
            left -= n;
        }
        out
    }

    async fn within_a_second(body: Body, limit: usize) -> Option<Bytes> {
        tokio::time::timeout(std::time::Duration::from_secs(1), collect(body, limit))
            .await
            .expect("collect returned")
            .unwrap()
    }

    #[tokio::test]
    async fn bodies_within_the_limit_come_whole_and_past_it_are_read_only_so_far() {
        // Several chunks up to the limit exactly: all of it, in order.
        let body = Body::from_stream(futures::stream::iter(
            [&b"ab"[..], b"cd", b"e"].map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        ));
        assert_eq!(collect(body, 5).await.unwrap().unwrap(), "abcde");
        // One byte over, then the client is done: refused once it is read.
        let body = Body::from_stream(futures::stream::iter(
            chunks(6, 2).into_iter().map(Ok::<_, std::io::Error>),
        ));
        assert_eq!(collect(body, 5).await.unwrap(), None);
        // More than DRAIN_BYTES past the limit: refused without waiting for the rest.
        let limit = 1024;
        let body = stalled(chunks(limit + DRAIN_BYTES + 1, 1 << 20));
        assert_eq!(within_a_second(body, limit).await, None);
    }

    /// A response as a backend could write it: `value` as its result.
    fn response(value: &str) -> Response {
        let text = format!(r#"{{"jsonrpc":"2.0","id":"a\u0062","result":{value}}}"#);
        match Message::parse(text.as_bytes()).unwrap() {
            Message::Response(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Results small and large, compact and with raw newlines between tokens.
    fn results() -> Vec<String> {
        let text = "0123456789abcdef".repeat(400);
        vec![
            r#"{"content":[]}"#.to_owned(),
            format!(r#"{{"content":[{{"type":"text","text":"{text}"}}]}}"#),
            format!("{{\n  \"content\": [\r\n {{\"type\":\"text\",\"text\":\"{text}\"}}\n  ]\n}}"),
        ]
    }

    async fn body_of(r: axum::response::Response) -> (Option<String>, usize, String) {
        use http_body_util::BodyExt;
        let length = hyper::body::Body::size_hint(r.body()).exact();
        let kind = r
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(length, Some(bytes.len() as u64), "announced length");
        (
            kind,
            bytes.len(),
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    /// A response answered as JSON is its text, whole, however large its result (a
    /// large one sent after its envelope rather than copied into it).
    #[tokio::test]
    async fn a_json_answer_is_the_response_whole() {
        for value in results() {
            let resp = response(&value);
            let want = resp.to_json();
            let (kind, _, got) = body_of(json_response_of(resp)).await;
            assert_eq!(kind.as_deref(), Some("application/json"));
            assert_eq!(got, want);
        }
    }

    /// A response answered over SSE is one event after what came before it, its data
    /// the response whole on one line: as written when compact, its raw newlines
    /// blanked otherwise.
    #[tokio::test]
    async fn an_sse_answer_is_one_event_of_the_response_whole() {
        for value in results() {
            let resp = response(&value);
            let want = resp.to_json();
            let head = "id: 7_0\nretry: 10\ndata: \n\n".to_owned();
            let (kind, _, got) = body_of(sse_response_body(head, Some("7_1"), resp)).await;
            assert_eq!(kind.as_deref(), Some("text/event-stream"));
            let events = crate::sse::Parser::new(1 << 20)
                .feed(got.as_bytes())
                .unwrap();
            assert_eq!(events.len(), 2, "{got}");
            assert_eq!(events[1].id.as_deref(), Some("7_1"));
            assert!(!events[1].data.contains(['\n', '\r']));
            let parsed: serde_json::Value = serde_json::from_str(&events[1].data).unwrap();
            assert_eq!(
                parsed,
                serde_json::from_str::<serde_json::Value>(&want).unwrap()
            );
            if !want.contains(['\n', '\r']) {
                assert_eq!(events[1].data, want);
            }
        }
    }

    /// Each header read in the one pass is its first value, as a lookup by name
    /// gives; a second `Accept` is noticed, so that every one of them is read.
    #[test]
    fn heads_are_the_first_values_and_a_second_accept_counts() {
        use axum::http::{HeaderMap, HeaderValue};
        let mut h = HeaderMap::new();
        let add = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
            h.append(k, HeaderValue::from_static(v));
        };
        add(&mut h, "accept", "application/json, text/event-stream");
        add(&mut h, "mcp-session-id", "first");
        add(&mut h, "x-other", "1");
        add(&mut h, "mcp-session-id", "second");
        add(&mut h, "mcp-protocol-version", "2025-11-25");
        add(&mut h, "mcp-method", "tools/call");
        add(&mut h, "mcp-name", "echo");
        add(&mut h, "content-type", "application/json");
        add(
            &mut h,
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        let heads = Heads::read(&h);
        for (name, got) in [
            ("mcp-session-id", heads.session_id),
            ("mcp-protocol-version", heads.protocol_version),
            ("mcp-method", heads.method),
            ("mcp-name", heads.name),
            ("content-type", heads.content_type),
            ("traceparent", heads.traceparent),
        ] {
            assert_eq!(got, h.get(name), "{name}");
        }
        assert_eq!(heads.session_id(), Some("first"));
        let a = Accepts::of(&heads, &h);
        assert!(a.json && a.sse);

        // A second Accept that narrows nothing: both are read, not only the first.
        let mut two = HeaderMap::new();
        add(&mut two, "accept", "application/json, text/event-stream");
        add(&mut two, "accept", "text/event-stream");
        let heads = Heads::read(&two);
        assert!(heads.more_accept);
        let mut only_sse = HeaderMap::new();
        add(&mut only_sse, "accept", "text/event-stream");
        add(&mut only_sse, "accept", "text/html");
        let a = Accepts::of(&Heads::read(&only_sse), &only_sse);
        assert!(a.sse && !a.json);
        assert!(Heads::read(&HeaderMap::new()).session_id().is_none());
    }
}
