//! `Mcp-Param-*` headers (2026-07-28): a tool's input schema may mark primitive
//! properties with `"x-mcp-header": "Name"`; clients then mirror the argument's value
//! into the header `Mcp-Param-Name`, and servers (and gateways routing on them) check
//! that header and body agree. Gantry does both: it checks what stateless-era
//! clients send, and sends the headers to stateless-era HTTP backends. No I/O here.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The kinds of value a header can mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Integer,
    Boolean,
}

/// One property of a tool's input mirrored into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The name after `Mcp-Param-`, as declared.
    pub name: String,
    /// Property names from the arguments object down to the value.
    pub path: Vec<String>,
    pub kind: Kind,
}

/// Tool name → its mirrored properties (tools without any are left out).
pub type ToolHeaders = HashMap<String, Vec<ParamHeader>>;

/// Whether `s` is an RFC 9110 token.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The mirrored properties of one input schema (reached through `properties` only,
/// as the spec allows). Invalid or duplicate declarations are ignored.
pub fn of_schema(schema: &Value) -> Vec<ParamHeader> {
    let mut out = Vec::new();
    collect(schema, &mut Vec::new(), &mut out, 0);
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.name.to_ascii_lowercase()));
    out
}

fn collect(schema: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>, depth: usize) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    if depth > 8 {
        return;
    }
    for (key, prop) in props {
        path.push(key.clone());
        if let Some(name) = prop.get("x-mcp-header").and_then(Value::as_str) {
            let kind = match prop.get("type").and_then(Value::as_str) {
                Some("string") => Some(Kind::String),
                Some("integer") => Some(Kind::Integer),
                Some("boolean") => Some(Kind::Boolean),
                _ => None,
            };
            if let (Some(kind), true) = (kind, is_token(name)) {
                out.push(ParamHeader {
                    name: name.to_owned(),
                    path: path.clone(),
                    kind,
                });
            }
        } else {
            collect(prop, path, out, depth + 1);
        }
        path.pop();
    }
}

/// Pages of `tools/list` read at most when collecting the declarations (a backend
/// that never stops returning `nextCursor` must not hang a call).
const MAX_PAGES: usize = 100;

/// The declarations of every tool, walking the pages of `tools/list` through
/// `fetch(cursor)` (the page's result, `None` if it could not be had). The flag
/// says whether every page was read (only then is the answer worth keeping).
pub async fn list_all<F, Fut>(mut fetch: F) -> (ToolHeaders, bool)
where
    F: FnMut(Option<Value>) -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let mut all = ToolHeaders::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let Some(page) = fetch(cursor.take()).await else {
            return (all, false);
        };
        if let Some(tools) = page.get("tools").and_then(Value::as_array) {
            of_tools(tools, &mut all);
        }
        match page.get("nextCursor") {
            Some(c) if !c.is_null() => cursor = Some(c.clone()),
            _ => return (all, true),
        }
    }
    (all, false)
}

/// The mirrored properties of every tool in a `tools/list` result's `tools`.
pub fn of_tools(tools: &[Value], into: &mut ToolHeaders) {
    for t in tools {
        let (Some(name), Some(schema)) =
            (t.get("name").and_then(Value::as_str), t.get("inputSchema"))
        else {
            continue;
        };
        let headers = of_schema(schema);
        if !headers.is_empty() {
            into.insert(name.to_owned(), headers);
        }
    }
}

/// Tool header declarations, listed once and again after a
/// `notifications/tools/list_changed`. Every `tools/call` reads them: a read is
/// a load, with no lock or counter that the calls would share.
#[derive(Default)]
pub struct ToolCache {
    /// `None`: not listed since the last change.
    listed: arc_swap::ArcSwapOption<ToolHeaders>,
    /// Changes seen; a listing under way keeps what it read only if none came
    /// meanwhile.
    changes: std::sync::atomic::AtomicU64,
    /// Held while listing, so that calls waiting for the list do not all list.
    listing: tokio::sync::Mutex<()>,
}

impl ToolCache {
    /// The declarations as listed, if they are.
    pub fn listed(&self) -> arc_swap::Guard<Option<Arc<ToolHeaders>>> {
        self.listed.load()
    }

    /// Forgets the list: the tools changed.
    pub fn changed(&self) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.listed.store(None);
    }

    /// The declarations, listed by `list` (what it read, and whether that was all)
    /// if they are not at hand: by one caller at a time, the others waiting for its
    /// list. A list that is not complete is used once and not kept.
    pub async fn get_or_list<F, Fut>(&self, list: F) -> Arc<ToolHeaders>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = (ToolHeaders, bool)>,
    {
        use std::sync::atomic::Ordering;
        if let Some(t) = self.listed.load_full() {
            return t;
        }
        let _listing = self.listing.lock().await;
        if let Some(t) = self.listed.load_full() {
            return t;
        }
        let changes = self.changes.load(Ordering::SeqCst);
        let (all, complete) = list().await;
        let all = Arc::new(all);
        if complete {
            // Kept unless the tools changed while they were listed; a change after
            // this look forgets it again (it counts before it forgets).
            self.listed.store(Some(all.clone()));
            if self.changes.load(Ordering::SeqCst) != changes {
                self.listed.store(None);
            }
        }
        all
    }
}

fn value_at<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(arguments, |v, k| v.get(k))
        .filter(|v| !v.is_null())
}

/// The header value a client sends for `v` (`None`: no header): strings as they
/// are, integers in decimal, booleans as `true` / `false`, then encoded.
pub fn encode(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    Some(super::header::encode(&text))
}

/// The headers a client sends for a call with `arguments`.
pub fn headers_for(
    params: &[ParamHeader],
    arguments: &Value,
) -> Vec<(http::HeaderName, http::HeaderValue)> {
    params
        .iter()
        .filter_map(|p| {
            let v = value_at(arguments, &p.path)?;
            let name = format!("mcp-param-{}", p.name.to_ascii_lowercase());
            Some((
                http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                http::HeaderValue::from_str(&encode(v)?).ok()?,
            ))
        })
        .collect()
}

/// Checks the `Mcp-Param-*` headers of a call against its arguments. `header` looks
/// a header up by its (lowercase) name. The error says what disagrees.
pub fn check<'h>(
    params: &[ParamHeader],
    arguments: &Value,
    header: impl Fn(&str) -> Option<&'h [u8]>,
) -> Result<(), String> {
    for p in params {
        let name = format!("mcp-param-{}", p.name.to_ascii_lowercase());
        let body = value_at(arguments, &p.path);
        let sent = header(&name);
        let shown = format!("Mcp-Param-{}", p.name);
        match (sent, body) {
            (None, None) => {}
            (None, Some(_)) => return Err(format!("the {shown} header is required")),
            (Some(_), None) => {
                return Err(format!("{shown} header is set but the argument is absent"))
            }
            (Some(raw), Some(v)) => {
                let Some(h) = super::header::decode(raw) else {
                    return Err(format!("the {shown} header value is not valid"));
                };
                let agrees = match (p.kind, v) {
                    (Kind::String, Value::String(s)) => h == *s,
                    (Kind::Integer, Value::Number(n)) => {
                        h.parse::<i64>()
                            .ok()
                            .zip(n.as_i64())
                            .is_some_and(|(a, b)| a == b)
                            || h.parse::<u64>()
                                .ok()
                                .zip(n.as_u64())
                                .is_some_and(|(a, b)| a == b)
                    }
                    (Kind::Boolean, Value::Bool(b)) => h == b.to_string(),
                    // The body has another type than the schema says: the backend
                    // will judge the argument; the header cannot agree with it.
                    _ => false,
                };
                if !agrees {
                    return Err(format!(
                        "{shown} header value '{}' does not match body value",
                        h.chars().take(80).collect::<String>()
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )]
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
            "bad": {"type": "number", "x-mcp-header": "Bad"},
            "nested": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}},
            "plain": {"type": "string"}
        }})
    }

    #[test]
    fn declarations_are_read_through_properties_only() {
        let names: Vec<String> = of_schema(&schema()).into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["Region", "Priority", "Flag", "Zone"]);
    }

    #[test]
    fn what_a_client_sends_a_server_accepts() {
        let params = of_schema(&schema());
        let args =
            json!({"region": "eu-west", "priority": 3, "flag": true, "nested": {"zone": "  é  "}});
        let sent: HashMap<String, String> = headers_for(&params, &args)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        assert_eq!(sent["mcp-param-region"], "eu-west");
        assert_eq!(sent["mcp-param-priority"], "3");
        assert_eq!(sent["mcp-param-flag"], "true");
        assert!(sent["mcp-param-zone"].starts_with("=?base64?"));
        assert_eq!(
            check(&params, &args, |n| sent.get(n).map(|v| v.as_bytes())),
            Ok(())
        );
    }

    #[test]
    fn mismatches_are_refused() {
        let params = of_schema(&schema());
        let args = json!({"region": "Hello"});
        let with =
            |v: &'static str| move |n: &str| (n == "mcp-param-region").then_some(v.as_bytes());
        assert!(check(&params, &args, with("=?base64?SGVsbG8=?=")).is_ok());
        assert!(check(&params, &args, with("  Hello ")).is_ok());
        assert!(check(&params, &args, with("SGVsbG8=")).is_err());
        assert!(
            check(&params, &args, with("=?base64?SGVsbG8?=")).is_err(),
            "bad padding"
        );
        assert!(
            check(&params, &args, with("=?base64?SGVs!!!bG8=?=")).is_err(),
            "bad characters"
        );
        assert!(check(&params, &args, |_| None).is_err(), "missing header");
        assert!(
            check(&params, &json!({}), with("Hello")).is_err(),
            "header without argument"
        );
        assert!(check(&params, &json!({}), |_| None).is_ok());
    }

    fn declared(tool: &str) -> ToolHeaders {
        let mut t = ToolHeaders::new();
        t.insert(tool.to_owned(), Vec::new());
        t
    }

    #[tokio::test]
    async fn declarations_are_listed_once_until_the_tools_change() {
        let cache = ToolCache::default();
        let lists = AtomicUsize::new(0);
        let list = |tool: &'static str| {
            let lists = &lists;
            move || async move {
                lists.fetch_add(1, Ordering::SeqCst);
                (declared(tool), true)
            }
        };
        assert!(cache.get_or_list(list("a")).await.contains_key("a"));
        assert!(cache.get_or_list(list("b")).await.contains_key("a"));
        assert!(cache.listed().is_some());
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        cache.changed();
        assert!(cache.listed().is_none());
        assert!(cache.get_or_list(list("b")).await.contains_key("b"));
        assert_eq!(lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_list_the_tools_changed_under_or_that_is_not_complete_is_not_kept() {
        let cache = ToolCache::default();
        let got = cache
            .get_or_list(|| async {
                // The backend says its tools changed while they are being listed.
                cache.changed();
                (declared("old"), true)
            })
            .await;
        assert!(
            got.contains_key("old"),
            "the caller still gets what was read"
        );
        assert!(
            cache.listed().is_none(),
            "a list older than a change was kept"
        );
        let got = cache
            .get_or_list(|| async { (declared("part"), false) })
            .await;
        assert!(got.contains_key("part"));
        assert!(cache.listed().is_none(), "an incomplete list was kept");
        cache
            .get_or_list(|| async { (declared("new"), true) })
            .await;
        assert!(cache
            .listed()
            .as_deref()
            .is_some_and(|t| t.contains_key("new")));
    }

    #[tokio::test]
    async fn callers_waiting_for_a_list_share_it() {
        let cache = Arc::new(ToolCache::default());
        let lists = Arc::new(AtomicUsize::new(0));
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (cache, lists) = (cache.clone(), lists.clone());
            tokio::spawn(async move {
                cache
                    .get_or_list(|| async move {
                        lists.fetch_add(1, Ordering::SeqCst);
                        let _ = wait.await;
                        (declared("a"), true)
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let second = {
            let (cache, lists) = (cache.clone(), lists.clone());
            tokio::spawn(async move {
                cache
                    .get_or_list(|| async move {
                        lists.fetch_add(1, Ordering::SeqCst);
                        (declared("b"), true)
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let _ = go.send(());
        assert!(first.await.unwrap().contains_key("a"));
        assert!(second.await.unwrap().contains_key("a"));
        assert_eq!(lists.load(Ordering::SeqCst), 1);
    }
}
