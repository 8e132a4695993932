//! The protocol's vocabulary, for both eras, with no I/O: which era a peer speaks,
//! the protocol versions of each era and how they are negotiated, and the `_meta`
//! keys that exist only in the stateless era. Both the front door (towards clients)
//! and `upstream` (towards backends) take these from here, so a rule is written once.
//!
//! See `README.md` beside this file for the two eras and where each rule lives.

pub mod header;
pub mod listen;
pub mod meta;
pub mod methods;
pub mod param;
pub mod results;

use serde_json::{Map, Value};

/// The two eras of MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize`, sessions, server→client requests.
    Session,
    /// 2026-07-28: no session; every request carries its version and the client's
    /// capabilities in `_meta`; input requests come back as `input_required`.
    Stateless,
}

impl Era {
    /// The other era.
    pub fn other(self) -> Self {
        match self {
            Era::Session => Era::Stateless,
            Era::Stateless => Era::Session,
        }
    }

    /// The era's name in logs and status output.
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Session => "session",
            Era::Stateless => "stateless",
        }
    }

    /// Index for per-era tables (`[T; 2]`).
    pub fn index(self) -> usize {
        match self {
            Era::Session => 0,
            Era::Stateless => 1,
        }
    }
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Protocol versions of the session era Gantry speaks, newest first.
pub const SESSION_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Versions of the stateless era Gantry speaks, newest first.
pub const STATELESS_VERSIONS: [&str; 1] = ["2026-07-28"];

/// The stateless-era version Gantry speaks to backends.
pub const STATELESS_VERSION: &str = STATELESS_VERSIONS[0];

/// The session-era version Gantry asks for when it initializes a backend on its
/// own behalf (shared, per-user and warm connections).
pub const LATEST_SESSION_VERSION: &str = SESSION_VERSIONS[0];

/// Every version Gantry serves, newest first (`server/discover`, `-32022`).
pub fn all_versions() -> Vec<&'static str> {
    STATELESS_VERSIONS
        .iter()
        .chain(SESSION_VERSIONS.iter())
        .copied()
        .collect()
}

/// The era a version belongs to, if Gantry knows the version.
pub fn era_of(version: &str) -> Option<Era> {
    if SESSION_VERSIONS.contains(&version) {
        Some(Era::Session)
    } else if STATELESS_VERSIONS.contains(&version) {
        Some(Era::Stateless)
    } else {
        None
    }
}

/// The session-era version answered to a client that asked for `requested`: its
/// own if supported, else the newest.
pub fn negotiate_session(requested: &str) -> &'static str {
    SESSION_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_SESSION_VERSION)
}

/// Gantry's own `Implementation` (`serverInfo` towards clients, `clientInfo`
/// towards backends when a connection is Gantry's rather than one client's).
pub fn gantry_implementation() -> Value {
    serde_json::json!({
        "name": "gantry",
        "title": "Gantry MCP gateway",
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// The prefix of the `_meta` keys the protocol itself defines.
pub const META_PREFIX: &str = "io.modelcontextprotocol/";
/// Stateless era: the request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Stateless era: the client's capabilities, on every request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Stateless era: the client's implementation info.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Stateless era: the least severe log level the request wants.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Stateless era: the server's implementation info, on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Stateless era: the listen request a notification belongs to.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// `_meta` keys that exist only in the stateless era: never sent to a session-era
/// peer, which a direct connection would not have shown them either.
pub const STATELESS_ONLY_META: [&str; 6] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
];

/// Result fields that exist only in the stateless era.
pub const STATELESS_ONLY_RESULT_FIELDS: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];

/// Removes from a result object what only the stateless era has (the fields above
/// and the stateless-only `_meta` keys; an emptied `_meta` goes too). Returns
/// whether anything was removed.
pub fn strip_stateless_result(result: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    for f in STATELESS_ONLY_RESULT_FIELDS {
        changed |= result.remove(f).is_some();
    }
    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
        for k in STATELESS_ONLY_META {
            changed |= meta.remove(k).is_some();
        }
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
    changed
}

/// Whether a result's JSON text may hold something [`strip_stateless_result`]
/// removes (a cheap test before parsing).
pub fn may_hold_stateless_fields(text: &str) -> bool {
    use crate::jsonrpc::members::{key_is, members};
    let needles = [
        crate::needle!("resultType"),
        crate::needle!("ttlMs"),
        crate::needle!("cacheScope"),
        crate::needle!(META_PREFIX),
    ];
    if crate::jsonrpc::surely_lacks(text, &needles) {
        return false;
    }
    // Only the top level is looked at, not the content beside it.
    members(text).any(|(k, v)| {
        STATELESS_ONLY_RESULT_FIELDS.iter().any(|f| key_is(k, f))
            || (key_is(k, "_meta") && crate::jsonrpc::mentions(v, crate::needle!(META_PREFIX)))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_and_eras() {
        assert_eq!(era_of("2025-06-18"), Some(Era::Session));
        assert_eq!(era_of("2024-11-05"), Some(Era::Session));
        assert_eq!(era_of("2026-07-28"), Some(Era::Stateless));
        assert_eq!(era_of("2099-01-01"), None);
        assert_eq!(negotiate_session("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate_session("2026-07-28"), "2025-11-25");
        assert_eq!(negotiate_session(""), "2025-11-25");
        assert_eq!(all_versions().first(), Some(&"2026-07-28"));
        assert_eq!(all_versions().len(), 5);
        assert_eq!(Era::Session.other(), Era::Stateless);
    }

    #[test]
    fn stateless_fields_are_stripped_and_nothing_else() {
        let mut r = json!({
            "content": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "public",
            "_meta": { META_SERVER_INFO: {"name": "x"}, "io.modelcontextprotocol/related-task": 1, "mine": 2 }
        });
        let obj = r.as_object_mut().unwrap();
        assert!(strip_stateless_result(obj));
        assert_eq!(
            r,
            json!({"content": [], "_meta": {"io.modelcontextprotocol/related-task": 1, "mine": 2}})
        );
        let mut only = json!({"content": [], "_meta": { META_SERVER_INFO: {} }});
        assert!(strip_stateless_result(only.as_object_mut().unwrap()));
        assert_eq!(only, json!({"content": []}));
        let mut plain = json!({"content": [{"type": "text", "text": "resultType"}]});
        assert!(!strip_stateless_result(plain.as_object_mut().unwrap()));
        assert!(may_hold_stateless_fields(r#"{"resultType":"complete"}"#));
        assert!(!may_hold_stateless_fields(r#"{"content":[]}"#));
        // The top level only: what the content says is not looked at.
        assert!(!may_hold_stateless_fields(
            r#"{"content":[{"type":"text","text":"{\"resultType\":1,\"_meta\":{\"io.modelcontextprotocol/x\":1}}"}]}"#
        ));
        assert!(may_hold_stateless_fields(
            r#"{"content":[], "_meta" : {"io.modelcontextprotocol/serverInfo":{}}}"#
        ));
        assert!(!may_hold_stateless_fields(r#"{"_meta":{"mine":1}}"#));
    }
}
