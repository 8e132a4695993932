//! A stateless-era request's `_meta`, typed: what the caller declares about itself on
//! every request (version, capabilities, identity, log level), read once with a
//! precise error for each way it can be wrong.

use super::methods::level_rank;
use super::{META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION};
use crate::jsonrpc::members::{key_is, string_value};
use std::borrow::Cow;

/// The protocol's own `_meta` fields of a stateless-era request, as written (read
/// from the request's text, nothing parsed but the version).
#[derive(Debug, PartialEq)]
pub struct RequestMeta<'a> {
    /// `io.modelcontextprotocol/protocolVersion` (required).
    pub protocol_version: Cow<'a, str>,
    /// `io.modelcontextprotocol/clientCapabilities` (required, an object): its text.
    pub client_capabilities: &'a str,
    /// `io.modelcontextprotocol/clientInfo`, if sent: its text.
    pub client_info: Option<&'a str>,
    /// `io.modelcontextprotocol/logLevel`, if sent: still to be checked with
    /// [`RequestMeta::log_rank`] (validation order puts it last).
    log_level: Option<&'a str>,
}

/// Why a request's `_meta` is not what the era requires.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum MetaError {
    #[error("params._meta is required (with `{META_PROTOCOL_VERSION}` and `{META_CLIENT_CAPABILITIES}`)")]
    Missing,
    #[error("params._meta[\"{META_PROTOCOL_VERSION}\"] (a string) is required")]
    NoVersion,
    #[error("params._meta[\"{META_CLIENT_CAPABILITIES}\"] (an object) is required")]
    NoCapabilities,
    #[error("params._meta[\"{META_LOG_LEVEL}\"] is not a logging level")]
    BadLogLevel,
}

impl<'a> RequestMeta<'a> {
    /// Reads a request's `_meta` from its members, keys as written (`None`: absent,
    /// or not an object). A repeated key counts by its last value.
    pub fn read(meta: Option<impl Iterator<Item = (&'a str, &'a str)>>) -> Result<Self, MetaError> {
        let meta = meta.ok_or(MetaError::Missing)?;
        let (mut version, mut capabilities, mut client_info, mut log_level) =
            (None, None, None, None);
        for (k, v) in meta {
            let slot = if key_is(k, META_PROTOCOL_VERSION) {
                &mut version
            } else if key_is(k, META_CLIENT_CAPABILITIES) {
                &mut capabilities
            } else if key_is(k, META_CLIENT_INFO) {
                &mut client_info
            } else if key_is(k, META_LOG_LEVEL) {
                &mut log_level
            } else {
                continue;
            };
            *slot = Some(v);
        }
        let protocol_version = version.and_then(string_value).ok_or(MetaError::NoVersion)?;
        let client_capabilities = capabilities
            .filter(|c| c.starts_with('{'))
            .ok_or(MetaError::NoCapabilities)?;
        Ok(Self {
            protocol_version,
            client_capabilities,
            client_info,
            log_level,
        })
    }

    /// The rank of the requested log level: messages at or above it reach the
    /// caller; `None`: none do (no level asked for).
    pub fn log_rank(&self) -> Result<Option<u8>, MetaError> {
        match self.log_level {
            None => Ok(None),
            Some(l) => string_value(l)
                .and_then(|l| level_rank(&l))
                .map(Some)
                .ok_or(MetaError::BadLogLevel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::members::{member, members};
    use serde_json::{json, Value};

    /// Reads the `_meta` of params written as `text`.
    pub(super) fn read(text: &str) -> Result<RequestMeta<'_>, MetaError> {
        let meta = member(text, "_meta").filter(|m| m.starts_with('{'));
        RequestMeta::read(meta.map(members))
    }

    fn value(text: Option<&str>) -> Option<Value> {
        text.map(|t| serde_json::from_str(t).unwrap())
    }

    #[test]
    fn each_way_of_being_wrong_has_its_error() {
        let cases = [
            (json!({}), MetaError::Missing),
            (json!({"_meta": 3}), MetaError::Missing),
            (json!({"_meta": {}}), MetaError::NoVersion),
            (
                json!({"_meta": {META_PROTOCOL_VERSION: 2026}}),
                MetaError::NoVersion,
            ),
            (
                json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}),
                MetaError::NoCapabilities,
            ),
            (
                json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: []}}),
                MetaError::NoCapabilities,
            ),
        ];
        for (p, want) in cases {
            let p = p.to_string();
            assert_eq!(read(&p).err(), Some(want), "{p}");
        }
    }

    #[test]
    fn a_complete_meta_is_read_and_its_log_level_ranked() {
        let p = json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28",
            META_CLIENT_CAPABILITIES: {"sampling": {}},
            META_CLIENT_INFO: {"name": "c", "version": "1"},
            META_LOG_LEVEL: "warning",
            "mine": 1,
        }})
        .to_string();
        let m = read(&p).unwrap();
        assert_eq!(m.protocol_version, "2026-07-28");
        assert_eq!(
            value(Some(m.client_capabilities)),
            Some(json!({"sampling": {}}))
        );
        assert_eq!(
            value(m.client_info),
            Some(json!({"name": "c", "version": "1"}))
        );
        assert_eq!(m.log_rank(), Ok(level_rank("warning")));
        // Escapes are decoded, a repeated key counts by its last value.
        let escaped = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"x",
            "io.modelcontextprotocol/protocolVersion":"2026-07-2\u0038",
            "io.modelcontextprotocol/clientCapabilities":{}}}"#;
        assert_eq!(read(escaped).unwrap().protocol_version, "2026-07-28");
        let quiet = json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}})
        .to_string();
        assert_eq!(read(&quiet).unwrap().log_rank(), Ok(None));
        let loud = json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
            META_LOG_LEVEL: "shouting"}})
        .to_string();
        assert_eq!(read(&loud).unwrap().log_rank(), Err(MetaError::BadLogLevel));
    }
}

#[cfg(test)]
mod props {
    //! Property tests: reading a request's `_meta` never panics, whatever the client
    //! put in its params, and accepts exactly what the era requires.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            crate::testkit::json_scalar(),
            // The log level names (and near misses), so that some levels are valid.
            prop::sample::select(
                crate::mcp::methods::LOG_LEVELS
                    .iter()
                    .copied()
                    .chain(["Debug", ""])
                    .collect::<Vec<_>>()
            )
            .prop_map(Value::from),
        ];
        crate::testkit::json_tree(leaf.boxed(), key().boxed(), (3, 24, 5))
    }

    /// Keys: the protocol's `_meta` fields most of the time, else any text.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(vec![
                "_meta",
                META_PROTOCOL_VERSION,
                META_CLIENT_CAPABILITIES,
                META_CLIENT_INFO,
                META_LOG_LEVEL,
            ])
            .prop_map(str::to_owned),
            1 => any::<String>(),
        ]
    }

    /// Params objects: any, or with a `_meta` object of any protocol fields.
    fn params() -> impl Strategy<Value = Map<String, Value>> {
        let field = |k: &'static str| proptest::option::of(json()).prop_map(move |v| (k, v));
        let meta = (
            field(META_PROTOCOL_VERSION),
            prop_oneof![
                Just(None),
                any::<String>().prop_map(|s| Some(Value::from(s)))
            ],
            field(META_CLIENT_CAPABILITIES),
            prop_oneof![Just(None), Just(Some(serde_json::json!({})))],
            field(META_CLIENT_INFO),
            field(META_LOG_LEVEL),
            prop::collection::vec((key(), json()), 0..3),
        )
            .prop_map(|(v, vs, c, cs, i, l, extra)| {
                let mut m: Map<String, Value> = extra.into_iter().collect();
                for (k, x) in [
                    v,
                    (META_PROTOCOL_VERSION, vs),
                    c,
                    (META_CLIENT_CAPABILITIES, cs),
                    i,
                    l,
                ] {
                    if let Some(x) = x {
                        m.insert(k.to_owned(), x);
                    }
                }
                m
            });
        prop_oneof![
            json().prop_map(|v| match v {
                Value::Object(m) => m,
                other => [("_meta".to_owned(), other)].into_iter().collect(),
            }),
            (meta, prop::collection::vec((key(), json()), 0..3)).prop_map(|(meta, extra)| {
                let mut p: Map<String, Value> = extra.into_iter().collect();
                p.insert("_meta".into(), Value::Object(meta));
                p
            }),
        ]
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn reading_any_params_never_panics(p in params()) {
            let meta = p.get("_meta").and_then(Value::as_object);
            let version = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str);
            let caps = meta
                .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
                .filter(|c| c.is_object());
            let text = Value::Object(p.clone()).to_string();
            let value = |t: &str| serde_json::from_str::<Value>(t).unwrap();
            match super::tests::read(&text) {
                Ok(m) => {
                    prop_assert_eq!(Some(m.protocol_version.as_ref()), version);
                    // Compared as parsed from text both ways (floats do not all
                    // survive a round trip exactly).
                    let again = |v: &Value| value(&v.to_string());
                    prop_assert_eq!(Some(value(m.client_capabilities)), caps.map(again));
                    let info = meta.and_then(|x| x.get(META_CLIENT_INFO)).map(again);
                    prop_assert_eq!(m.client_info.map(value), info);
                    let level = meta.and_then(|x| x.get(META_LOG_LEVEL));
                    match (m.log_rank(), level) {
                        (Ok(None), None) => {}
                        (Ok(Some(r)), Some(l)) => {
                            prop_assert_eq!(l.as_str().and_then(level_rank), Some(r));
                        }
                        (Err(MetaError::BadLogLevel), Some(l)) => {
                            prop_assert_eq!(l.as_str().and_then(level_rank), None);
                        }
                        (got, l) => prop_assert!(false, "{got:?} for level {l:?}"),
                    }
                }
                Err(e) => {
                    prop_assert!(meta.is_none() || version.is_none() || caps.is_none());
                    let want = if meta.is_none() {
                        MetaError::Missing
                    } else if version.is_none() {
                        MetaError::NoVersion
                    } else {
                        MetaError::NoCapabilities
                    };
                    prop_assert_eq!(e, want);
                }
            }
        }
    }
}
