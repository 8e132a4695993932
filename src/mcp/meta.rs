//! A stateless-era request's `_meta`, typed: what the caller declares about itself on
//! every request (version, capabilities, identity, log level), read once with a
//! precise error for each way it can be wrong.

use super::methods::level_rank;
use super::{META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION};
use serde_json::{Map, Value};

/// The protocol's own `_meta` fields of a stateless-era request.
#[derive(Debug, PartialEq)]
pub struct RequestMeta<'a> {
    /// `io.modelcontextprotocol/protocolVersion` (required).
    pub protocol_version: &'a str,
    /// `io.modelcontextprotocol/clientCapabilities` (required, an object).
    pub client_capabilities: &'a Value,
    /// `io.modelcontextprotocol/clientInfo`, if sent.
    pub client_info: Option<&'a Value>,
    /// `io.modelcontextprotocol/logLevel`, if sent: still to be checked with
    /// [`RequestMeta::log_rank`] (validation order puts it last).
    log_level: Option<&'a Value>,
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
    /// Reads the `_meta` of a request's params.
    pub fn read(params: &'a Map<String, Value>) -> Result<Self, MetaError> {
        let meta = params
            .get("_meta")
            .and_then(Value::as_object)
            .ok_or(MetaError::Missing)?;
        let protocol_version = meta
            .get(META_PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .ok_or(MetaError::NoVersion)?;
        let client_capabilities = meta
            .get(META_CLIENT_CAPABILITIES)
            .filter(|c| c.is_object())
            .ok_or(MetaError::NoCapabilities)?;
        Ok(Self {
            protocol_version,
            client_capabilities,
            client_info: meta.get(META_CLIENT_INFO),
            log_level: meta.get(META_LOG_LEVEL),
        })
    }

    /// The rank of the requested log level: messages at or above it reach the
    /// caller; `None`: none do (no level asked for).
    pub fn log_rank(&self) -> Result<Option<u8>, MetaError> {
        match self.log_level {
            None => Ok(None),
            Some(l) => l
                .as_str()
                .and_then(level_rank)
                .map(Some)
                .ok_or(MetaError::BadLogLevel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
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
            let p = params(p);
            assert_eq!(RequestMeta::read(&p).err(), Some(want), "{p:?}");
        }
    }

    #[test]
    fn a_complete_meta_is_read_and_its_log_level_ranked() {
        let p = params(json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28",
            META_CLIENT_CAPABILITIES: {"sampling": {}},
            META_CLIENT_INFO: {"name": "c", "version": "1"},
            META_LOG_LEVEL: "warning",
            "mine": 1,
        }}));
        let m = RequestMeta::read(&p).unwrap();
        assert_eq!(m.protocol_version, "2026-07-28");
        assert_eq!(m.client_capabilities, &json!({"sampling": {}}));
        assert_eq!(m.client_info, Some(&json!({"name": "c", "version": "1"})));
        assert_eq!(m.log_rank(), Ok(level_rank("warning")));
        let quiet = params(json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}}));
        assert_eq!(RequestMeta::read(&quiet).unwrap().log_rank(), Ok(None));
        let loud = params(json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
            META_LOG_LEVEL: "shouting"}}));
        assert_eq!(
            RequestMeta::read(&loud).unwrap().log_rank(),
            Err(MetaError::BadLogLevel)
        );
    }
}
