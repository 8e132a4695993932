//! Results shaped for each era: a stateless-era client's results carry
//! `resultType`, caching hints and the server's identity; an `input_required`
//! result's input requests are read here (for a session-era client, Gantry asks them
//! itself). Stripping the stateless-only fields for session-era clients is in
//! [`super::strip_stateless_result`].

use super::methods::CACHEABLE;
use super::META_SERVER_INFO;
use crate::jsonrpc::members::{Object, ObjectWriter};
use crate::jsonrpc::Raw;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// `resultType` of a final result.
pub const COMPLETE: &str = "complete";
/// `resultType` of a result asking the client for input.
pub const INPUT_REQUIRED: &str = "input_required";

/// A result object by its top-level fields, each kept as the backend wrote it:
/// shaping a result touches those fields only (a large `content` is not parsed).
pub type Fields = indexmap::IndexMap<String, Raw>;

/// A result read by its top-level members (and those of its `_meta`) for shaping:
/// nothing is parsed, the content beside them is copied as the backend wrote it.
pub struct ResultText<'a> {
    top: Object<'a>,
    meta: Option<Object<'a>>,
}

impl<'a> ResultText<'a> {
    /// A result that is not an object counts as an empty one.
    pub fn read(result: &'a str) -> Self {
        let (top, meta) = Object::parse_with(result, "_meta").unwrap_or_default();
        ResultText { top, meta }
    }

    /// Whether it asks for input.
    pub fn is_input_required(&self) -> bool {
        self.top.str("resultType").as_deref() == Some(INPUT_REQUIRED)
    }

    /// Its `requestState`, when it is a string.
    pub fn request_state(&self) -> Option<Cow<'a, str>> {
        self.top.str("requestState")
    }

    /// Writes the result of `method` shaped for a stateless-era client: `resultType`
    /// (complete unless the backend said otherwise), for complete cacheable
    /// results `ttlMs` (0 unless the backend set it) and `cacheScope` (`private`
    /// forced when `private`, as callers are told apart and what one is shown is
    /// not for the others), `server_info` in `_meta` unless the backend named
    /// itself (a `_meta` that is not an object is left as written), and `state` as
    /// `requestState` when given.
    pub fn write_for_stateless(
        &self,
        out: &mut String,
        method: &str,
        private: bool,
        server_info: &Raw,
        state: Option<&str>,
    ) {
        let complete = match self.top.str("resultType") {
            None => true,
            Some(t) => t == COMPLETE,
        };
        let hints = complete && CACHEABLE.contains(&method);
        let scope = if private { "\"private\"" } else { "\"public\"" };
        let o = ObjectWriter::begin(out);
        for (k, v) in self.top.iter() {
            match (k, &self.meta) {
                ("cacheScope", _) if hints && private => o.member(out, k, scope),
                ("requestState", _) if state.is_some() => o.member(
                    out,
                    k,
                    &crate::jsonrpc::json_string(state.unwrap_or_default()),
                ),
                ("_meta", Some(meta)) if meta.get(META_SERVER_INFO).is_none() => {
                    o.key(out, k);
                    write_with_server_info(out, meta, server_info);
                }
                _ => o.member(out, k, v),
            }
        }
        if self.top.get("resultType").is_none() {
            o.member(out, "resultType", "\"complete\"");
        }
        if hints {
            if self.top.get("ttlMs").is_none() {
                o.member(out, "ttlMs", "0");
            }
            if self.top.get("cacheScope").is_none() {
                o.member(out, "cacheScope", scope);
            }
        }
        if self.top.get("_meta").is_none() {
            o.key(out, "_meta");
            write_with_server_info(out, &Object::default(), server_info);
        }
        if let (Some(state), None) = (state, self.top.get("requestState")) {
            o.member(out, "requestState", &crate::jsonrpc::json_string(state));
        }
        o.end(out);
    }
}

/// `meta`'s members and `serverInfo`.
fn write_with_server_info(out: &mut String, meta: &Object<'_>, server_info: &Raw) {
    let o = ObjectWriter::begin(out);
    for (k, v) in meta.iter() {
        o.member(out, k, v);
    }
    o.member(out, META_SERVER_INFO, server_info.get());
    o.end(out);
}

/// The most [`splice_for_stateless`] writes beyond the result's own text, so that a
/// caller can size its string once (a large result grown into is copied whole).
pub fn stateless_splice_room(server_info: &Raw) -> usize {
    // `,"resultType":"complete"`, `,"ttlMs":0`, `,"cacheScope":"private"`,
    // `,"_meta":{"…":…}` and the closing brace: 72 bytes besides the two names'.
    96 + META_SERVER_INFO.len() + server_info.get().len()
}

/// Writes `result` shaped for a stateless-era client, as
/// [`ResultText::write_for_stateless`] would, into `out` by splicing the added
/// fields before its closing brace: the content is copied once and never parsed.
/// That covers a session-era backend's results (which name none of the fields) and
/// a stateless-era backend's complete ones (`resultType` written, hints it set
/// kept, its own `serverInfo` in `_meta`). Returns `false`, having written nothing,
/// for any other result: one that asks for input, needs a field replaced or
/// `serverInfo` added to its `_meta`, names a field twice, or is no object.
pub fn splice_for_stateless(
    out: &mut String,
    result: &Raw,
    method: &str,
    private: bool,
    server_info: &Raw,
) -> bool {
    use crate::jsonrpc::members::{key_is, string_value};
    let text = result.get();
    let (Some(inner), true) = (text.strip_suffix('}'), text.starts_with('{')) else {
        return false;
    };
    let hints = CACHEABLE.contains(&method);
    // The fields Gantry writes that the result names, a bit each.
    const RESULT_TYPE: u8 = 1;
    const META: u8 = 2;
    const TTL: u8 = 4;
    const SCOPE: u8 = 8;
    let mut named = 0u8;
    let needles = [
        crate::needle!("resultType"),
        crate::needle!("_meta"),
        crate::needle!("ttlMs"),
        crate::needle!("cacheScope"),
    ];
    // Top-level members only: the content beside them is not searched.
    if !crate::jsonrpc::surely_lacks(text, &needles) {
        // Where the check kept them (a stateless-era backend's result), or walked.
        for (k, v) in result.members() {
            let field = if key_is(k, "resultType") {
                if string_value(v).as_deref() != Some(COMPLETE) {
                    return false;
                }
                RESULT_TYPE
            } else if key_is(k, "_meta") {
                let names_itself = v.starts_with('{')
                    && result
                        .members_of(v)
                        .any(|(k, _)| key_is(k, META_SERVER_INFO));
                if !names_itself {
                    return false;
                }
                META
            } else if key_is(k, "ttlMs") {
                TTL
            } else if key_is(k, "cacheScope") {
                if hints && private {
                    return false;
                }
                SCOPE
            } else {
                continue;
            };
            // Named twice: left to the reader, which keeps the last.
            if named & field != 0 {
                return false;
            }
            named |= field;
        }
    }
    let has = |field: u8| named & field != 0;
    let mut more = !inner[1..].trim_ascii_start().is_empty();
    out.reserve(inner.len() + stateless_splice_room(server_info));
    out.push_str(inner);
    let mut add = |out: &mut String, member: &str| {
        if more {
            out.push(',');
        }
        more = true;
        out.push_str(member);
    };
    if !has(RESULT_TYPE) {
        add(out, "\"resultType\":\"complete\"");
    }
    if hints && !has(TTL) {
        add(out, "\"ttlMs\":0");
    }
    if hints && !has(SCOPE) {
        add(
            out,
            if private {
                "\"cacheScope\":\"private\""
            } else {
                "\"cacheScope\":\"public\""
            },
        );
    }
    if !has(META) {
        add(out, "\"_meta\":{\"");
        out.push_str(META_SERVER_INFO);
        out.push_str("\":");
        out.push_str(server_info.get());
        out.push('}');
    }
    out.push('}');
    true
}

/// The `_meta` object of `fields`, parsed as `T` (empty when there is none);
/// `None` when it is not an object, which is then left as it was written.
pub fn meta_object<T: serde::de::DeserializeOwned + Default>(fields: &Fields) -> Option<T> {
    match fields.get("_meta") {
        None => Some(T::default()),
        Some(m) => serde_json::from_str(m.get()).ok(),
    }
}

/// One round of input a stateless-era server asks for.
#[derive(Debug)]
pub struct InputRound {
    /// (key, method, params) of each input request, in the server's order.
    pub requests: Vec<(String, String, Option<Raw>)>,
    /// The server's `requestState`, to be echoed in the retry.
    pub state: Option<Value>,
}

impl InputRound {
    /// The input requests of a result, if it is `input_required` (requests without
    /// a method are left out).
    pub fn of(result: &Raw) -> Option<Self> {
        if !crate::jsonrpc::mentions(result.get(), crate::needle!(INPUT_REQUIRED)) {
            return None;
        }
        let r: Map<String, Value> = serde_json::from_str(result.get()).ok()?;
        if r.get("resultType") != Some(&json!(INPUT_REQUIRED)) {
            return None;
        }
        let requests = r
            .get("inputRequests")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| {
                        let method = v.get("method")?.as_str()?.to_owned();
                        let params = v.get("params").map(crate::jsonrpc::to_raw);
                        Some((k.clone(), method, params))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            requests,
            state: r.get("requestState").cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn shaped(v: Value, method: &str, private: bool) -> Value {
        let text = v.to_string();
        let info = crate::jsonrpc::to_raw(&json!({"name": "gantry"}));
        let mut out = String::new();
        ResultText::read(&text).write_for_stateless(&mut out, method, private, &info, None);
        serde_json::from_str(&out).unwrap()
    }

    #[test]
    fn results_are_shaped_for_the_stateless_era() {
        assert_eq!(
            shaped(json!({"tools": []}), "tools/list", false),
            json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "public",
                   "_meta": {META_SERVER_INFO: {"name": "gantry"}}})
        );
        // The backend's own hints are kept; private wins when callers are told apart.
        assert_eq!(
            shaped(
                json!({"tools": [], "ttlMs": 500, "cacheScope": "public"}),
                "tools/list",
                true
            ),
            json!({"tools": [], "ttlMs": 500, "cacheScope": "private", "resultType": "complete",
                   "_meta": {META_SERVER_INFO: {"name": "gantry"}}})
        );
        // Not cacheable: no hints; a backend's serverInfo stays.
        assert_eq!(
            shaped(
                json!({"content": [], "_meta": {META_SERVER_INFO: {"name": "b"}}}),
                "tools/call",
                false
            ),
            json!({"content": [], "resultType": "complete", "_meta": {META_SERVER_INFO: {"name": "b"}}})
        );
        // input_required is no complete result: no caching hints.
        let r = shaped(
            json!({"resultType": "input_required"}),
            "resources/read",
            false,
        );
        assert!(r.get("ttlMs").is_none(), "{r}");
        assert!(ResultText::read(&r.to_string()).is_input_required());
        // A backend's `_meta` gets serverInfo beside its own keys; one that is not
        // an object is left alone, as is a result that is not an object.
        assert_eq!(
            shaped(
                json!({"content": [], "_meta": {"k": 1}}),
                "tools/call",
                false
            ),
            json!({"content": [], "resultType": "complete",
                   "_meta": {"k": 1, META_SERVER_INFO: {"name": "gantry"}}})
        );
        assert_eq!(
            shaped(json!({"content": [], "_meta": 3}), "tools/call", false),
            json!({"content": [], "resultType": "complete", "_meta": 3})
        );
        assert_eq!(
            shaped(json!([1]), "tools/call", false),
            json!({"resultType": "complete", "_meta": {META_SERVER_INFO: {"name": "gantry"}}})
        );
        // The state the client gets replaces the backend's.
        let text = r#"{"resultType":"input_required","requestState":"inner"}"#;
        let r = ResultText::read(text);
        assert_eq!(r.request_state().as_deref(), Some("inner"));
        let mut out = String::new();
        r.write_for_stateless(
            &mut out,
            "tools/call",
            false,
            &crate::jsonrpc::to_raw(&json!({})),
            Some("sealed"),
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["requestState"], "sealed");
    }

    #[test]
    fn spliced_results_equal_shaped_ones() {
        let info = crate::jsonrpc::to_raw(&json!({"name": "gantry"}));
        for (text, method, private) in [
            (
                r#"{"content":[{"type":"text","text":"a}"}],"isError":false}"#,
                "tools/call",
                false,
            ),
            (r#"{ "tools" : [] }"#, "tools/list", true),
            (r#"{"resources":[]}"#, "resources/list", false),
            ("{}", "tools/call", false),
            (" { } ", "prompts/list", false),
            // A stateless-era backend's complete results.
            (
                r#"{"resultType":"complete","content":[],"isError":false}"#,
                "tools/call",
                true,
            ),
            (r#"{"tools":[],"ttlMs":5}"#, "tools/list", false),
            (r#"{"tools":[],"cacheScope":"public"}"#, "tools/list", false),
            (
                r#"{"resultType":"complete","content":[],"_meta":{"a":1,"io.modelcontextprotocol/serverInfo":{"name":"b"}}}"#,
                "tools/call",
                false,
            ),
        ] {
            let mut out = String::new();
            let raw = Raw::from_string(text.to_owned()).unwrap();
            assert!(
                splice_for_stateless(&mut out, &raw, method, private, &info),
                "{text}"
            );
            let spliced: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                spliced,
                shaped(serde_json::from_str(text).unwrap(), method, private),
                "{text}"
            );
        }
        // Results that need a field replaced or added inside, or are no object, are
        // left to the parser.
        for (text, private) in [
            (r#"{"content":[],"_meta":{}}"#, false),
            (r#"{"content":[],"_meta":[]}"#, false),
            (r#"{"resultType":"input_required"}"#, false),
            (
                r#"{"resultType":"complete","resultType":"input_required"}"#,
                false,
            ),
            (r#"{"tools":[],"ttlMs":5,"ttlMs":6}"#, false),
            (r#"{"tools":[],"cacheScope":"public"}"#, true),
            ("[1]", false),
            (r#""text""#, false),
        ] {
            let mut out = String::new();
            let raw = Raw::from_string(text.to_owned()).unwrap();
            assert!(
                !splice_for_stateless(&mut out, &raw, "tools/list", private, &info),
                "{text}"
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn input_rounds_are_read() {
        let raw = crate::jsonrpc::to_raw(&json!({
            "resultType": "input_required",
            "inputRequests": {"a": {"method": "roots/list"},
                              "b": {"method": "elicitation/create", "params": {"message": "?"}},
                              "c": {"params": {}}},
            "requestState": "s"
        }));
        let round = InputRound::of(&raw).unwrap();
        let keys: Vec<&str> = round.requests.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(round.requests[1].1, "elicitation/create");
        assert_eq!(round.state, Some(json!("s")));
        let done = crate::jsonrpc::to_raw(&json!({"resultType": "complete"}));
        assert!(InputRound::of(&done).is_none());
    }
}

#[cfg(test)]
mod props {
    //! A spliced result is the shaped one, whatever fields a backend's result names
    //! and in whatever order.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;

    /// A result's top-level members: the fields Gantry writes (each well-formed or
    /// not, sometimes twice) among others, in any order and spacing.
    fn result_text() -> impl Strategy<Value = String> {
        let member = prop::sample::select(vec![
            r#""content":[{"type":"text","text":"}\"resultType\""}]"#,
            r#""isError":false"#,
            r#""tools":[]"#,
            r#""resultType":"complete""#,
            r#""resultType":"input_required""#,
            r#""resultType":5"#,
            r#""ttlMs":500"#,
            r#""cacheScope":"public""#,
            r#""_meta":{}"#,
            r#""_meta":{"io.modelcontextprotocol/serverInfo":{"name":"b"}}"#,
            r#""_meta":{"x":1,"io.modelcontextprotocol/serverInfo":{"name":"b"}}"#,
            r#""_meta":null"#,
            r#""resultT\u0079pe":"complete""#,
        ]);
        (prop::collection::vec(member, 0..6), " ?", " ?").prop_map(|(members, pad, sep)| {
            format!("{pad}{{{sep}{}}}", members.join(&format!(",{sep}")))
        })
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn a_spliced_result_is_the_shaped_one(
            text in result_text(),
            method in prop::sample::select(vec!["tools/call", "tools/list", "resources/read"]),
            private in any::<bool>(),
        ) {
            let info = crate::jsonrpc::to_raw(&json!({"name": "gantry"}));
            let room = text.len() + stateless_splice_room(&info);
            let mut spliced = String::with_capacity(room);
            // The result alone (its members walked), and as a stateless-era backend's
            // answer (its members and its `_meta`'s kept by the message's check).
            let alone = Raw::from_string(text.clone()).unwrap();
            let message = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{text}}}"#);
            let Ok(crate::jsonrpc::Incoming::Single(crate::jsonrpc::Message::Response(
                crate::jsonrpc::Response { outcome: Ok(answered), .. },
            ))) = crate::jsonrpc::Incoming::parse_shared_with_result(message.into()) else {
                return Err(TestCaseError::fail("not a response"));
            };
            let mut from_answer = String::new();
            let spliced_answer =
                splice_for_stateless(&mut from_answer, &answered, method, private, &info);
            if splice_for_stateless(&mut spliced, &alone, method, private, &info) {
                prop_assert!(spliced_answer);
                prop_assert_eq!(&from_answer, &spliced);
                // Sized once: the room the caller was told of was enough.
                prop_assert_eq!(spliced.capacity(), room);
                let mut shaped = String::new();
                ResultText::read(&text).write_for_stateless(&mut shaped, method, private, &info, None);
                let a: Value = serde_json::from_str(&spliced).unwrap();
                let b: Value = serde_json::from_str(&shaped).unwrap();
                prop_assert_eq!(a, b, "{}", text);
            } else {
                prop_assert!(!spliced_answer);
                prop_assert!(spliced.is_empty());
            }
        }
    }
}
