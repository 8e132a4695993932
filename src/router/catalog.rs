//! The merged catalog of several backends: namespaced names, remembered URIs, and
//! list fan-out that follows every backend's pages to the end.

use super::{forward, Fail, Router, SessionRoute};
use crate::call::CallCtx;
use crate::jsonrpc::{code, to_raw, RpcError};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Pages followed per backend and list before giving up (a backend that never stops
/// returning `nextCursor` must not hang a client).
const MAX_PAGES: usize = 1000;
/// Longest name major model APIs accept for a tool.
const MAX_NAME: usize = 64;

/// What the last lists told Gantry about where things live.
#[derive(Default)]
pub(crate) struct Catalog {
    tools: HashMap<String, (usize, String)>,
    prompts: HashMap<String, (usize, String)>,
    uris: HashMap<String, usize>,
    templates: Vec<(String, usize)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tool,
    Prompt,
    Resource,
    Template,
}

impl Kind {
    fn capability(self) -> &'static str {
        match self {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::Resource | Kind::Template => "resources",
        }
    }
    fn field(self) -> &'static str {
        match self {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::Resource => "resources",
            Kind::Template => "resourceTemplates",
        }
    }
}

/// 64-bit FNV-1a: a tiny, stable hash (the same on every build and restart).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The name a client sees for `name` of `backend`: `<backend><sep><name>`, with any
/// character outside `[A-Za-z0-9_-]` replaced and, past 64 characters, shortened to
/// a prefix plus a hash of the full name (deterministic, so stable across restarts).
pub(super) fn expose(backend: &str, sep: &str, name: &str) -> String {
    let full = format!("{backend}{sep}{name}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == full && full.len() <= MAX_NAME {
        return full;
    }
    let hash = format!("{:08x}", fnv1a(&full) as u32);
    let keep = MAX_NAME - hash.len() - 1;
    let prefix: String = clean.chars().take(keep).collect();
    format!("{prefix}_{hash}")
}

fn parse_params(params: Option<&RawValue>) -> indexmap::IndexMap<String, Box<RawValue>> {
    params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default()
}

/// Where `uri` lives, from what this session's lists and tool results said.
fn lookup_uri(route: &SessionRoute, uri: &str) -> Option<usize> {
    let cat = route.catalog.lock();
    if let Some(i) = cat.uris.get(uri) {
        return Some(*i);
    }
    cat.templates
        .iter()
        .filter(|(prefix, _)| uri.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, i)| *i)
}

/// Records that backend `idx` serves `uri`. Two backends announcing one URI: the one
/// configured first keeps it (logged), so a later backend cannot take over another's
/// resources.
fn remember_uri(
    uris: &mut HashMap<String, usize>,
    uri: &str,
    idx: usize,
    slots: &[std::sync::Arc<super::slot::Slot>],
) {
    match uris.get(uri) {
        Some(&held) if held < idx => {
            let name = |i: usize| slots.get(i).map(|s| s.cfg.name.as_str()).unwrap_or("?");
            tracing::warn!(
                uri = %uri.chars().take(200).collect::<String>(),
                kept = name(held),
                ignored = name(idx),
                "two backends announce one resource URI; the one configured first serves it"
            );
        }
        _ => {
            uris.insert(uri.to_owned(), idx);
        }
    }
}

/// Remembers the URIs a tool result names (`resource_link`, embedded resources), so
/// that reading one works without listing first.
fn remember_linked_uris(route: &SessionRoute, idx: usize, result: &RawValue) {
    #[derive(serde::Deserialize)]
    struct Result<'a> {
        #[serde(borrow, default)]
        content: Vec<Item<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Item<'a> {
        #[serde(borrow, rename = "type", default)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        uri: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        resource: Option<Embedded<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Embedded<'a> {
        #[serde(borrow, default)]
        uri: Option<std::borrow::Cow<'a, str>>,
    }
    let raw = result.get();
    if !raw.contains("\"uri\"") {
        return;
    }
    let Ok(r) = serde_json::from_str::<Result<'_>>(raw) else {
        return;
    };
    let mut cat = route.catalog.lock();
    for item in r.content {
        let uri = match item.kind.as_ref() {
            "resource_link" => item.uri,
            "resource" => item.resource.and_then(|e| e.uri),
            _ => None,
        };
        if let Some(uri) = uri {
            // A URI another backend listed stays that backend's.
            cat.uris.entry(uri.into_owned()).or_insert(idx);
        }
    }
}

fn invalid(msg: impl Into<String>) -> Fail {
    Fail::Own(RpcError::new(code::INVALID_PARAMS, msg))
}

impl Router {
    pub(crate) async fn dispatch_many(
        &self,
        route: &SessionRoute,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
    ) -> Result<Box<RawValue>, Fail> {
        match method {
            "tools/list" => self.list(route, Kind::Tool, method, params, ctx).await,
            "prompts/list" => self.list(route, Kind::Prompt, method, params, ctx).await,
            "resources/list" => self.list(route, Kind::Resource, method, params, ctx).await,
            "resources/templates/list" => {
                self.list(route, Kind::Template, method, params, ctx).await
            }
            "tools/call" | "prompts/get" => {
                let kind = if method == "tools/call" {
                    Kind::Tool
                } else {
                    Kind::Prompt
                };
                let mut p = parse_params(params.as_deref());
                let name: String = p
                    .get("name")
                    .and_then(|v| serde_json::from_str(v.get()).ok())
                    .ok_or_else(|| {
                        invalid(format!("{method}: params.name (a string) is required"))
                    })?;
                let (idx, original) = self.resolve_name(route, kind, &name).ok_or_else(|| {
                    invalid(format!(
                        "unknown {}: {name}",
                        if kind == Kind::Tool { "tool" } else { "prompt" }
                    ))
                })?;
                p.insert("name".into(), to_raw(&original));
                let result = forward(route, idx, method, Some(to_raw(&p)), ctx).await?;
                if kind == Kind::Tool {
                    remember_linked_uris(route, idx, &result);
                }
                Ok(result)
            }
            "resources/read" => {
                let uri =
                    crate::jsonrpc::string_field(params.as_deref(), "uri").ok_or_else(|| {
                        invalid(format!("{method}: params.uri (a string) is required"))
                    })?;
                let idx = self.resolve_uri(route, &uri, ctx).await?.ok_or_else(|| {
                    Fail::Own(
                        RpcError::new(code::RESOURCE_NOT_FOUND, "Resource not found")
                            .with_data(json!({ "uri": uri })),
                    )
                })?;
                forward(route, idx, method, params, ctx).await
            }
            "completion/complete" => {
                let mut p: Value = params
                    .as_deref()
                    .and_then(|r| serde_json::from_str(r.get()).ok())
                    .unwrap_or(Value::Null);
                let kind = p
                    .pointer("/ref/type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let idx = match kind.as_str() {
                    "ref/prompt" => {
                        let name = p
                            .pointer("/ref/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        let (idx, original) = self
                            .resolve_name(route, Kind::Prompt, &name)
                            .ok_or_else(|| invalid(format!("unknown prompt: {name}")))?;
                        if let Some(n) = p.pointer_mut("/ref/name") {
                            *n = Value::String(original);
                        }
                        idx
                    }
                    "ref/resource" => {
                        let uri = p
                            .pointer("/ref/uri")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        self.resolve_uri(route, &uri, ctx)
                            .await?
                            .ok_or_else(|| invalid(format!("unknown resource: {uri}")))?
                    }
                    _ => return Err(invalid(
                        "completion/complete: params.ref.type must be ref/prompt or ref/resource",
                    )),
                };
                forward(route, idx, method, Some(to_raw(&p)), ctx).await
            }
            _ => Err(Fail::Own(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            ))),
        }
    }

    fn resolve_name(
        &self,
        route: &SessionRoute,
        kind: Kind,
        name: &str,
    ) -> Option<(usize, String)> {
        {
            let cat = route.catalog.lock();
            let map = if kind == Kind::Tool {
                &cat.tools
            } else {
                &cat.prompts
            };
            if let Some(hit) = map.get(name) {
                return Some(hit.clone());
            }
        }
        // Not listed yet in this session: the plain `<backend><sep><name>` form.
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let rest = name.strip_prefix(&s.cfg.name)?.strip_prefix(&self.sep)?;
            Some((i, rest.to_owned()))
        })
    }

    /// The backend that serves `uri`: one that listed it, returned it from a tool,
    /// or announced a template it falls under (the longest prefix). Not known yet: the
    /// resources and templates are listed again first (the session may never have
    /// listed them). `Ok(None)`: no backend announced it — never a guess.
    pub(crate) async fn resolve_uri(
        &self,
        route: &SessionRoute,
        uri: &str,
        ctx: &CallCtx,
    ) -> Result<Option<usize>, Fail> {
        if let Some(i) = lookup_uri(route, uri) {
            return Ok(Some(i));
        }
        for (kind, method) in [
            (Kind::Resource, "resources/list"),
            (Kind::Template, "resources/templates/list"),
        ] {
            // A backend that failed to list is left out (logged by `list`).
            if let Err(Fail::Cancelled) = self.list(route, kind, method, None, ctx).await {
                return Err(Fail::Cancelled);
            }
            if let Some(i) = lookup_uri(route, uri) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    async fn list(
        &self,
        route: &SessionRoute,
        kind: Kind,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: &CallCtx,
    ) -> Result<Box<RawValue>, Fail> {
        if crate::jsonrpc::string_field(params.as_deref(), "cursor").is_some() {
            return Err(invalid("invalid cursor: this list has a single page"));
        }
        let targets: Vec<usize> = (0..route.slots.len())
            .filter(|&i| {
                route
                    .info(i)
                    .is_some_and(|i| i.capabilities().get(kind.capability()).is_some())
            })
            .collect();
        let fetches = targets
            .iter()
            .map(|&i| self.fetch_all(route, i, kind, method, ctx));
        let results = futures::future::join_all(fetches).await;
        let mut items = Vec::new();
        let mut cat = Catalog::default();
        {
            let old = route.catalog.lock();
            // Lists of other kinds stay as they were.
            if kind != Kind::Tool {
                cat.tools = old.tools.clone();
            }
            if kind != Kind::Prompt {
                cat.prompts = old.prompts.clone();
            }
            if kind != Kind::Resource {
                cat.uris = old.uris.clone();
            }
            if kind != Kind::Template {
                cat.templates = old.templates.clone();
            }
        }
        for (&idx, r) in targets.iter().zip(results) {
            let backend = self
                .slots
                .get(idx)
                .map(|s| s.cfg.name.as_str())
                .unwrap_or_default();
            let page = match r {
                Ok(p) => p,
                Err(Fail::Cancelled) => return Err(Fail::Cancelled),
                Err(_) => {
                    tracing::warn!(
                        backend,
                        method,
                        "backend failed to list; its entries are left out"
                    );
                    continue;
                }
            };
            for mut item in page {
                match kind {
                    Kind::Tool | Kind::Prompt => {
                        let Some(name) =
                            item.get("name").and_then(Value::as_str).map(str::to_owned)
                        else {
                            continue;
                        };
                        let exposed = expose(backend, &self.sep, &name);
                        if let Some(obj) = item.as_object_mut() {
                            obj.insert("name".into(), Value::String(exposed.clone()));
                        }
                        let map = if kind == Kind::Tool {
                            &mut cat.tools
                        } else {
                            &mut cat.prompts
                        };
                        map.insert(exposed, (idx, name));
                    }
                    Kind::Resource => {
                        if let Some(uri) = item.get("uri").and_then(Value::as_str) {
                            remember_uri(&mut cat.uris, uri, idx, &self.slots);
                        }
                    }
                    Kind::Template => {
                        if let Some(t) = item.get("uriTemplate").and_then(Value::as_str) {
                            let prefix = t.split('{').next().unwrap_or_default().to_owned();
                            cat.templates.push((prefix, idx));
                        }
                    }
                }
                items.push(item);
            }
        }
        *route.catalog.lock() = cat;
        let mut out = serde_json::Map::new();
        out.insert(kind.field().into(), Value::Array(items));
        Ok(to_raw(&out))
    }

    /// Every item of one backend's list, following `nextCursor` to the end.
    async fn fetch_all(
        &self,
        route: &SessionRoute,
        idx: usize,
        kind: Kind,
        method: &str,
        ctx: &CallCtx,
    ) -> Result<Vec<Value>, Fail> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = cursor.as_ref().map(|c| to_raw(&json!({ "cursor": c })));
            let raw = forward(route, idx, method, params, ctx).await?;
            let mut page: Value = serde_json::from_str(raw.get()).map_err(|e| {
                Fail::Own(RpcError::new(
                    code::BACKEND_ERROR,
                    format!("invalid list result: {e}"),
                ))
            })?;
            if let Some(Value::Array(list)) = page.get_mut(kind.field()).map(Value::take) {
                items.extend(list);
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
        tracing::warn!(
            method,
            "backend returned more than {MAX_PAGES} pages; the rest is left out"
        );
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn names_fit_model_api_rules_and_are_stable() {
        assert_eq!(expose("fs", "__", "read_file"), "fs__read_file");
        let long = "x".repeat(100);
        let a = expose("github", "__", &long);
        assert_eq!(a.len(), 64);
        assert_eq!(a, expose("github", "__", &long));
        assert_ne!(a, expose("github", "__", &format!("{long}y")));
        let dotted = expose("b", "__", "a.b c");
        assert!(dotted
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        assert_ne!(
            dotted,
            expose("b", "__", "a_b_c"),
            "a renamed name must not collide with a real one"
        );
    }
}
