//! The `subscriptions/listen` filter (2026-07-28): which list changes and resource
//! updates a listen stream carries. Gantry reads it from clients (and honours the
//! part its backends declare) and builds it for the listen it keeps on each
//! stateless-era backend (everything that backend declares) — one type for both.

use serde_json::{json, Map, Value};

/// Resource URIs one listen stream may ask for.
pub const MAX_LISTEN_URIS: usize = 256;

/// What a listen stream asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenFilter {
    /// `notifications/tools/list_changed`.
    pub tools: bool,
    /// `notifications/prompts/list_changed`.
    pub prompts: bool,
    /// `notifications/resources/list_changed`.
    pub resources: bool,
    /// `notifications/resources/updated` for these URIs.
    pub uris: Vec<String>,
}

fn declared(caps: &Value, pointer: &str) -> bool {
    caps.pointer(pointer) == Some(&Value::Bool(true))
}

impl ListenFilter {
    /// Everything a server with `caps` can announce, and updates of `uris` if it
    /// supports subscriptions.
    pub fn all_declared(caps: &Value, uris: Vec<String>) -> Self {
        Self {
            tools: declared(caps, "/tools/listChanged"),
            prompts: declared(caps, "/prompts/listChanged"),
            resources: declared(caps, "/resources/listChanged"),
            uris: if declared(caps, "/resources/subscribe") {
                uris
            } else {
                Vec::new()
            },
        }
    }

    /// A listen request's `params.notifications` (absent: nothing). Duplicate URIs
    /// count once; the error says what is malformed.
    pub fn parse(notifications: Option<&Value>) -> Result<Self, String> {
        let asked = match notifications {
            None => return Ok(Self::default()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err("params.notifications must be an object".into()),
        };
        let flag = |k: &str| asked.get(k).and_then(Value::as_bool).unwrap_or(false);
        let bad_uris = || "params.notifications.resourceSubscriptions must be an array of URIs";
        let mut uris: Vec<String> = Vec::new();
        match asked.get("resourceSubscriptions") {
            None => {}
            Some(Value::Array(a)) => {
                for u in a {
                    let u = u.as_str().ok_or_else(|| bad_uris().to_owned())?;
                    if !uris.iter().any(|x| x == u) {
                        uris.push(u.to_owned());
                    }
                }
            }
            Some(_) => return Err(bad_uris().into()),
        }
        if uris.len() > MAX_LISTEN_URIS {
            return Err(format!(
                "at most {MAX_LISTEN_URIS} resourceSubscriptions per listen stream"
            ));
        }
        Ok(Self {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris,
        })
    }

    /// The part of this filter a server with `caps` can honour.
    pub fn within(self, caps: &Value) -> Self {
        let can = Self::all_declared(caps, self.uris);
        Self {
            tools: self.tools && can.tools,
            prompts: self.prompts && can.prompts,
            resources: self.resources && can.resources,
            uris: can.uris,
        }
    }

    /// Whether nothing is asked for.
    pub fn is_empty(&self) -> bool {
        !self.tools && !self.prompts && !self.resources && self.uris.is_empty()
    }

    /// Whether a notification (`method`, and `uri` for resource updates) is wanted.
    pub fn wants(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => {
                uri.is_some_and(|u| self.uris.iter().any(|x| x == u))
            }
            _ => false,
        }
    }

    /// The filter as a listen request carries it and its acknowledgement echoes it.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (on, key) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                m.insert(key.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            m.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_clients_filter_is_honoured_where_the_server_declares_it() {
        let caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
        let asked = json!({"toolsListChanged": true, "promptsListChanged": true,
                           "resourceSubscriptions": ["a://1", "a://1", "a://2"]});
        let f = ListenFilter::parse(Some(&asked)).unwrap().within(&caps);
        assert_eq!(
            f.to_json(),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["a://1", "a://2"]})
        );
        assert!(f.wants("notifications/tools/list_changed", None));
        assert!(!f.wants("notifications/prompts/list_changed", None));
        assert!(f.wants("notifications/resources/updated", Some("a://2")));
        assert!(!f.wants("notifications/resources/updated", Some("a://3")));
        assert!(!f.wants("notifications/resources/updated", None));
        let no_sub = ListenFilter::parse(Some(&asked))
            .unwrap()
            .within(&json!({}));
        assert!(no_sub.is_empty());
    }

    #[test]
    fn malformed_filters_are_refused() {
        for bad in [
            json!("x"),
            json!({"resourceSubscriptions": "a://1"}),
            json!({"resourceSubscriptions": [1]}),
        ] {
            assert!(ListenFilter::parse(Some(&bad)).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..257).map(|i| format!("u://{i}")).collect();
        assert!(ListenFilter::parse(Some(&json!({"resourceSubscriptions": many}))).is_err());
        assert_eq!(ListenFilter::parse(None).unwrap(), ListenFilter::default());
    }

    #[test]
    fn a_server_is_asked_for_what_it_declares() {
        let caps = json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true},
                          "resources": {"listChanged": false}});
        let f = ListenFilter::all_declared(&caps, vec!["r://1".into()]);
        assert_eq!(
            f.to_json(),
            json!({"toolsListChanged": true, "promptsListChanged": true})
        );
    }
}
