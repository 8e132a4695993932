//! Results shaped for each era: a stateless-era client's results carry
//! `resultType`, caching hints and the server's identity; an `input_required`
//! result's input requests are read here (for a session-era client, Gantry asks them
//! itself). Stripping the stateless-only fields for session-era clients is in
//! [`super::strip_stateless_result`].

use super::methods::CACHEABLE;
use super::META_SERVER_INFO;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// `resultType` of a final result.
pub const COMPLETE: &str = "complete";
/// `resultType` of a result asking the client for input.
pub const INPUT_REQUIRED: &str = "input_required";

/// Shapes a result of `method` for a stateless-era client: `resultType` (complete
/// unless the backend said otherwise), for complete cacheable results `ttlMs` (0
/// unless the backend set it) and `cacheScope` (`private` forced when `private`,
/// as callers are told apart and what one is shown is not for the others), and
/// `server_info` in `_meta` unless the backend named itself.
pub fn shape_for_stateless(
    result: &mut Map<String, Value>,
    method: &str,
    private: bool,
    server_info: impl FnOnce() -> Value,
) {
    result
        .entry("resultType")
        .or_insert_with(|| json!(COMPLETE));
    let complete = result.get("resultType") == Some(&json!(COMPLETE));
    if complete && CACHEABLE.contains(&method) {
        result.entry("ttlMs").or_insert_with(|| json!(0));
        let scope = result
            .entry("cacheScope")
            .or_insert_with(|| json!("public"));
        if private {
            *scope = json!("private");
        }
    }
    let meta = result.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.entry(META_SERVER_INFO).or_insert_with(server_info);
    }
}

/// Whether a shaped result asks for input.
pub fn is_input_required(result: &Map<String, Value>) -> bool {
    result.get("resultType") == Some(&json!(INPUT_REQUIRED))
}

/// One round of input a stateless-era server asks for.
#[derive(Debug)]
pub struct InputRound {
    /// (key, method, params) of each input request, in the server's order.
    pub requests: Vec<(String, String, Option<Box<RawValue>>)>,
    /// The server's `requestState`, to be echoed in the retry.
    pub state: Option<Value>,
}

impl InputRound {
    /// The input requests of a result, if it is `input_required` (requests without
    /// a method are left out).
    pub fn of(result: &RawValue) -> Option<Self> {
        if !crate::jsonrpc::mentions(result.get(), INPUT_REQUIRED) {
            return None;
        }
        let r: Map<String, Value> = serde_json::from_str(result.get()).ok()?;
        if !is_input_required(&r) {
            return None;
        }
        let requests = r
            .get("inputRequests")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| {
                        let method = v.get("method")?.as_str()?.to_owned();
                        let params = v
                            .get("params")
                            .and_then(|p| serde_json::value::to_raw_value(p).ok());
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
        let mut m = v.as_object().unwrap().clone();
        shape_for_stateless(&mut m, method, private, || json!({"name": "gantry"}));
        Value::Object(m)
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
        assert!(is_input_required(r.as_object().unwrap()));
    }

    #[test]
    fn input_rounds_are_read() {
        let raw = serde_json::value::to_raw_value(&json!({
            "resultType": "input_required",
            "inputRequests": {"a": {"method": "roots/list"},
                              "b": {"method": "elicitation/create", "params": {"message": "?"}},
                              "c": {"params": {}}},
            "requestState": "s"
        }))
        .unwrap();
        let round = InputRound::of(&raw).unwrap();
        let keys: Vec<&str> = round.requests.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(round.requests[1].1, "elicitation/create");
        assert_eq!(round.state, Some(json!("s")));
        let done = serde_json::value::to_raw_value(&json!({"resultType": "complete"})).unwrap();
        assert!(InputRound::of(&done).is_none());
    }
}
