//! The merged catalog of several backends: each backend connection's lists cached
//! (`upstream::lists`), merged per session into one view per kind under the
//! operator's policy (allow/deny, renames, overrides, prefixes), paged with
//! Gantry's own cursors, and watched, so that a change anywhere reaches the
//! session once.
//!
//! Names: a tool or prompt is `<prefix><sep><name>` (the prefix is the backend's
//! name unless `prefix` says otherwise; `""`: none), kept within
//! `^[A-Za-z0-9_-]{1,64}$` by deterministic hash-shortening. Two items of one name:
//! the backend configured first keeps it, the later one is left out (logged and
//! counted once). Resource URIs are kept; one URI two backends announce is the
//! first-configured one's.

use super::{forward, Fail, Router, SessionRoute};
use crate::call::{CallCtx, Sink};
use crate::config::{ItemOverride, ItemPolicy, OnUnavailable};
use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, raw_object, to_raw, Notification, RpcError};
use crate::upstream::{Availability, Conn, ListKind};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Pages followed per backend and list before giving up (a backend that never stops
/// returning `nextCursor` must not hang a client).
const MAX_PAGES: usize = 1000;
/// Longest name major model APIs accept for a tool.
const MAX_NAME: usize = 64;

/// What one backend contributed to a view.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Seen {
    idx: usize,
    /// Its change counter of the kind when the view was built.
    counter: u64,
    /// Its availability then.
    avail: Availability,
    /// The incarnation whose fresh list is in the view (`None`: its last good
    /// copy, or nothing).
    live: Option<u64>,
}

/// One kind's merged list, as one session sees it.
pub(super) struct View {
    inputs: Vec<Option<Arc<Vec<Value>>>>,
    seen: Vec<Seen>,
    /// The items as clients see them, in order: backends as configured, each
    /// backend's items as it listed them.
    items: Vec<Raw>,
    /// Tools, prompts: the name clients use → (backend, the backend's own name).
    names: HashMap<String, (usize, String)>,
    /// Resources: URI → backend.
    uris: HashMap<String, usize>,
    /// Templates: (the template's text before its first `{`, backend).
    templates: Vec<(String, usize)>,
    digest: u64,
    /// How long a stateless-era client may keep it (`ttlMs`): the shortest
    /// `list_ttl` of its backends (changes reach listen streams at once).
    ttl: Duration,
}

/// A session's views and the URIs its tool results named.
#[derive(Default)]
pub(crate) struct Catalog {
    views: [Option<Arc<View>>; 4],
    /// URIs tool results named (`resource_link`, embedded resources) → backend.
    linked: HashMap<String, usize>,
}

/// What each kind's last served view was built from (`None`: not served since the
/// session was last told of a change): the watcher's baseline.
pub(crate) type Served = Mutex<[Option<Vec<Seen>>; 4]>;

/// 64-bit FNV-1a: a tiny, stable hash (the same on every build and restart).
fn fnv1a(s: &str) -> u64 {
    fnv1a_more(0xcbf2_9ce4_8422_2325, s)
}

fn fnv1a_more(h: u64, s: &str) -> u64 {
    s.bytes()
        .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The name a client sees for `name` of a backend with `prefix`:
/// `<prefix><sep><name>` (just `name` for an empty prefix), with any character
/// outside `[A-Za-z0-9_-]` replaced and, past 64 characters, shortened to a prefix
/// plus a hash of the full name (deterministic, so stable across restarts).
pub(super) fn expose(prefix: &str, sep: &str, name: &str) -> String {
    let full = if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}{sep}{name}")
    };
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
    if clean == full && !full.is_empty() && full.len() <= MAX_NAME {
        return full;
    }
    let hash = format!("{:08x}", fnv1a(&full) as u32);
    let keep = MAX_NAME - hash.len() - 1;
    let prefix: String = clean.chars().take(keep).collect();
    format!("{prefix}_{hash}")
}

fn parse_params(params: Option<&Raw>) -> indexmap::IndexMap<String, Raw> {
    params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default()
}

/// The prefix of `slot`'s names: its `prefix`, else its name — none in a session
/// opened with one backend (`bare`).
fn prefix_of(slot: &super::Slot, bare: bool) -> &str {
    match &slot.cfg.prefix {
        Some(p) => p,
        None if bare => "",
        None => &slot.cfg.name,
    }
}

/// Whether the policy lets clients see `name` (a URI for resources).
fn allowed(policy: &ItemPolicy, name: &str) -> bool {
    use crate::auth::policy::glob;
    (policy.allow.is_empty() || policy.allow.iter().any(|g| glob(g, name)))
        && !policy.deny.iter().any(|g| glob(g, name))
}

/// The operator's replacements in a listed item.
fn apply_override(item: &mut Value, o: &ItemOverride) {
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    if let Some(t) = &o.title {
        obj.insert("title".into(), Value::String(t.clone()));
    }
    if let Some(d) = &o.description {
        obj.insert("description".into(), Value::String(d.clone()));
    }
    if let Some(a) = &o.annotations {
        let entry = obj
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if !entry.is_object() {
            *entry = Value::Object(Default::default());
        }
        if let Some(target) = entry.as_object_mut() {
            for (k, v) in a {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Remembers the URIs a tool result names (`resource_link`, embedded resources), so
/// that reading one works without listing first.
fn remember_linked_uris(route: &SessionRoute, idx: usize, result: &Raw) {
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
    if !crate::jsonrpc::mentions(raw, crate::needle!("\"uri\"")) {
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
            // A URI a backend listed stays that backend's (see `lookup_uri`).
            if cat.linked.len() < 10_000 {
                cat.linked.entry(uri.into_owned()).or_insert(idx);
            }
        }
    }
}

fn invalid(msg: impl Into<String>) -> Fail {
    Fail::Own(RpcError::new(code::INVALID_PARAMS, msg))
}

/// A cursor of Gantry's: the kind, the view's digest (a cursor of another view is
/// stale) and the offset, as hex.
fn cursor_for(kind: ListKind, digest: u64, offset: usize) -> String {
    format!("g{}{digest:016x}{offset:08x}", kind.index())
}

fn parse_cursor(c: &str, kind: ListKind, digest: u64, len: usize) -> Result<usize, Fail> {
    let bad = || invalid("invalid cursor: not one this list gave");
    let rest = c
        .strip_prefix('g')
        .and_then(|r| r.strip_prefix(char::from(b'0' + kind.index() as u8)))
        .ok_or_else(bad)?;
    if rest.len() != 24 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let (d, o) = rest.split_at(16);
    let d = u64::from_str_radix(d, 16).map_err(|_| bad())?;
    let o = usize::from_str_radix(o, 16).map_err(|_| bad())?;
    if d != digest {
        return Err(invalid(
            "stale cursor: the list has changed since; list again from the start",
        ));
    }
    if o == 0 || o >= len {
        return Err(bad());
    }
    Ok(o)
}

/// What a backend's list came to.
enum Got {
    /// Listed now or cached and fresh, by this incarnation.
    Live(Arc<Vec<Value>>, u64),
    /// Its last good copy (it is down, too slow, or failed).
    LastGood(Arc<Vec<Value>>),
    /// Nothing.
    Absent,
}

/// Where raw backend `*/list_changed` stop in a multi-backend session: the route's
/// watcher tells the session instead, once per change.
pub(super) struct QuietLists(pub(super) Sink);

impl crate::call::Downstream for QuietLists {
    fn notify(&self, n: Notification) {
        if ListKind::changed_by(&n.method).is_empty() {
            self.0.notify(n);
        }
    }

    fn ask(
        &self,
        method: String,
        params: Option<Raw>,
    ) -> futures::future::BoxFuture<'static, crate::call::ClientAnswer> {
        self.0.ask(method, params)
    }
}

impl Router {
    /// Starts (again, after a reload) the watcher of the session's lists (see
    /// [`watch`]).
    pub(super) fn watch_catalog(&self, route: &SessionRoute) {
        let stop = CancellationToken::new();
        let old = std::mem::replace(&mut *route.watcher.lock(), stop.clone());
        old.cancel();
        watch(
            route.links().conns.clone(),
            route.served.clone(),
            route.session.clone(),
            self.catalog().on_unavailable == OnUnavailable::Omit,
            stop,
        );
    }
}

/// Tells the session of every change of a list it was served, once, until it is
/// served again: a backend's announcement, a change found on listing, a backend
/// that came up, restarted or (with `on_unavailable = "omit"`) went down. Ends
/// with `stop`.
fn watch(
    conns: Vec<Option<Arc<Conn>>>,
    served: Arc<Served>,
    session: Sink,
    omit: bool,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let live: Vec<&Arc<Conn>> = conns.iter().flatten().collect();
        let mut lists: Vec<_> = live.iter().map(|c| c.lists().subscribe()).collect();
        let mut states: Vec<_> = live.iter().map(|c| c.watch_availability()).collect();
        loop {
            let changes = lists
                .iter_mut()
                .map(|r| Box::pin(async move { r.changed().await.is_ok() }) as _)
                .chain(
                    states
                        .iter_mut()
                        .map(|r| Box::pin(async move { r.changed().await.is_ok() }) as _),
                )
                .collect::<Vec<std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>>>>();
            if changes.is_empty() {
                return;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                (ok, _, _) = futures::future::select_all(changes) => {
                    if !ok {
                        return;
                    }
                }
            }
            for method in changed_kinds(&conns, &served, omit) {
                session.notify(Notification {
                    method: method.into(),
                    params: None,
                });
            }
        }
    });
}

/// The notifications due now (see [`watch`]); the kinds they are for are marked
/// told.
fn changed_kinds(conns: &[Option<Arc<Conn>>], served: &Served, omit: bool) -> Vec<&'static str> {
    let mut served = served.lock();
    let mut due: Vec<&'static str> = Vec::new();
    for kind in ListKind::ALL {
        let Some(Some(seen)) = served.get(kind.index()) else {
            continue;
        };
        let changed = seen.iter().any(|s| {
            let Some(Some(conn)) = conns.get(s.idx) else {
                return false;
            };
            if conn
                .lists()
                .counters()
                .get(kind.index())
                .copied()
                .unwrap_or(0)
                > s.counter
            {
                return true;
            }
            match conn.availability() {
                Availability::Up(g) => s.live != Some(g) && s.avail != Availability::Up(g),
                Availability::Down => omit && s.live.is_some(),
                Availability::Waiting => false,
            }
        });
        if changed && !due.contains(&kind.notification()) {
            due.push(kind.notification());
        }
    }
    for kind in ListKind::ALL {
        if due.contains(&kind.notification()) {
            if let Some(s) = served.get_mut(kind.index()) {
                *s = None;
            }
        }
    }
    due
}

impl Router {
    pub(crate) async fn dispatch_many(
        &self,
        route: &SessionRoute,
        method: &str,
        params: Option<Raw>,
        ctx: &CallCtx,
    ) -> Result<Raw, Fail> {
        match method {
            "tools/list" => self.list(route, ListKind::Tools, params, ctx).await,
            "prompts/list" => self.list(route, ListKind::Prompts, params, ctx).await,
            "resources/list" => self.list(route, ListKind::Resources, params, ctx).await,
            "resources/templates/list" => self.list(route, ListKind::Templates, params, ctx).await,
            "tools/call" | "prompts/get" => {
                let kind = if method == "tools/call" {
                    ListKind::Tools
                } else {
                    ListKind::Prompts
                };
                let mut p = parse_params(params.as_ref());
                let name: String = p
                    .get("name")
                    .and_then(|v| serde_json::from_str(v.get()).ok())
                    .ok_or_else(|| {
                        invalid(format!("{method}: params.name (a string) is required"))
                    })?;
                let (idx, original) = self
                    .resolve_name(route, kind, &name, ctx)
                    .await?
                    .ok_or_else(|| {
                        invalid(format!(
                            "unknown {}: {name}",
                            if kind == ListKind::Tools {
                                "tool"
                            } else {
                                "prompt"
                            }
                        ))
                    })?;
                p.insert("name".into(), to_raw(&original));
                let p = raw_object(&p);
                let result = forward(route, idx, method, Some(p), ctx).await?;
                if kind == ListKind::Tools {
                    remember_linked_uris(route, idx, &result);
                }
                Ok(result)
            }
            "resources/read" => {
                let uri =
                    crate::jsonrpc::string_field(params.as_ref(), "uri").ok_or_else(|| {
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
                    .as_ref()
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
                            .resolve_name(route, ListKind::Prompts, &name, ctx)
                            .await?
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

    /// The backend and its own name of the tool or prompt clients call `name`: from
    /// the session's view, built first when the session never listed (so every
    /// name a list would show resolves, shortened and renamed ones too, and a name
    /// the policy hides does not).
    async fn resolve_name(
        &self,
        route: &SessionRoute,
        kind: ListKind,
        name: &str,
        ctx: &CallCtx,
    ) -> Result<Option<(usize, String)>, Fail> {
        let known = route
            .catalog
            .lock()
            .views
            .get(kind.index())
            .and_then(|v| v.as_ref()?.names.get(name).cloned());
        if known.is_some() {
            return Ok(known);
        }
        let view = self.view(route, kind, ctx).await?;
        if let Some(hit) = view.names.get(name) {
            return Ok(Some(hit.clone()));
        }
        // Not listed (a backend that is down, one that has not announced a new
        // tool yet, a tool it does not list): `<prefix><sep><name>` goes to that
        // backend, as a direct connection would, unless its policy hides the name.
        let links = route.links();
        let configured = self.slots();
        Ok(links.slots.iter().enumerate().find_map(|(i, s)| {
            // A backend a reload removed is no one's to call.
            if !configured.iter().any(|c| Arc::ptr_eq(c, s)) {
                return None;
            }
            let prefix = prefix_of(s, route.bare);
            let rest = match (prefix.is_empty(), route.bare) {
                // The only backend, without a prefix: every name is its own.
                (true, true) => name,
                (true, false) => return None,
                (false, _) => name.strip_prefix(prefix)?.strip_prefix(&self.sep)?,
            };
            let policy = match kind {
                ListKind::Tools => &s.cfg.tools,
                _ => &s.cfg.prompts,
            };
            let own = match policy.rename.iter().find(|(_, to)| to.as_str() == rest) {
                Some((from, _)) => from.as_str(),
                None if policy.rename.contains_key(rest) => return None,
                None => rest,
            };
            (!rest.is_empty() && allowed(policy, own)).then(|| (i, own.to_owned()))
        }))
    }

    /// Where `uri` lives, from the session's views and its tool results; `None` for
    /// a URI the backend's policy hides.
    fn lookup_uri(&self, route: &SessionRoute, uri: &str) -> Option<usize> {
        let cat = route.catalog.lock();
        let view = |k: ListKind| cat.views.get(k.index()).and_then(Option::as_ref);
        let found = view(ListKind::Resources)
            .and_then(|v| v.uris.get(uri).copied())
            .or_else(|| cat.linked.get(uri).copied())
            .or_else(|| {
                view(ListKind::Templates)?
                    .templates
                    .iter()
                    .filter(|(prefix, _)| uri.starts_with(prefix.as_str()))
                    .max_by_key(|(prefix, _)| prefix.len())
                    .map(|(_, i)| *i)
            })?;
        drop(cat);
        let slot = route.links().slots.get(found)?.clone();
        allowed(&slot.cfg.resources, uri).then_some(found)
    }

    /// The backend that serves `uri`: one that listed it, returned it from a tool,
    /// or announced a template it falls under (the longest prefix). Not known yet: the
    /// resources and templates are brought up to date first (the session may never
    /// have listed them). `Ok(None)`: no backend announced it — never a guess.
    pub(crate) async fn resolve_uri(
        &self,
        route: &SessionRoute,
        uri: &str,
        ctx: &CallCtx,
    ) -> Result<Option<usize>, Fail> {
        if let Some(i) = self.lookup_uri(route, uri) {
            return Ok(Some(i));
        }
        for kind in [ListKind::Resources, ListKind::Templates] {
            self.view(route, kind, ctx).await?;
            if let Some(i) = self.lookup_uri(route, uri) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// One page of the session's merged list of `kind`.
    async fn list(
        &self,
        route: &SessionRoute,
        kind: ListKind,
        params: Option<Raw>,
        ctx: &CallCtx,
    ) -> Result<Raw, Fail> {
        let cursor = crate::jsonrpc::string_field(params.as_ref(), "cursor");
        let view = self.view(route, kind, ctx).await?;
        let len = view.items.len();
        let start = match cursor.as_deref() {
            None => 0,
            Some(c) => parse_cursor(c, kind, view.digest, len)?,
        };
        let size = self.catalog().page_size;
        let end = if size == 0 {
            len
        } else {
            start.saturating_add(size).min(len)
        };
        let page = view.items.get(start..end).unwrap_or_default();
        let mut out =
            String::with_capacity(page.iter().map(|i| i.get().len() + 1).sum::<usize>() + 64);
        out.push_str("{\"");
        out.push_str(kind.field());
        out.push_str("\":[");
        for (n, item) in page.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(item.get());
        }
        out.push(']');
        if end < len {
            out.push_str(&format!(
                ",\"nextCursor\":\"{}\"",
                cursor_for(kind, view.digest, end)
            ));
        }
        if ctx.client.era == crate::mcp::Era::Stateless {
            out.push_str(&format!(",\"ttlMs\":{}", view.ttl.as_millis()));
        }
        out.push('}');
        if let Some(s) = route.served.lock().get_mut(kind.index()) {
            *s = Some(view.seen.clone());
        }
        Ok(Raw::written(out))
    }

    /// Whether backend `idx` has lists of `kind`, as far as the session knows (a
    /// backend not seen yet is asked).
    fn declares(&self, route: &SessionRoute, idx: usize, kind: ListKind) -> bool {
        let info = route.info(idx).or_else(|| {
            route
                .links()
                .slots
                .get(idx)
                .and_then(|s| s.last_info.lock().clone())
        });
        match info {
            Some(i) => i.capabilities().get(kind.capability()).is_some(),
            None => true,
        }
    }

    /// The session's merged view of `kind`: each backend's list from its
    /// connection's cache when fresh, else listed now (within `catalog.deadline`,
    /// else its last good copy or nothing, as `catalog.on_unavailable` says).
    async fn view(
        &self,
        route: &SessionRoute,
        kind: ListKind,
        ctx: &CallCtx,
    ) -> Result<Arc<View>, Fail> {
        let deadline = tokio::time::Instant::now() + self.catalog().deadline;
        let links = route.links();
        let targets: Vec<usize> = (0..links.slots.len())
            .filter(|&i| matches!(links.conns.get(i), Some(Some(_))))
            .filter(|&i| self.declares(route, i, kind))
            .collect();
        let avails: Vec<Availability> = targets
            .iter()
            .map(|&i| match links.conns.get(i) {
                Some(Some(c)) => c.availability(),
                _ => Availability::Down,
            })
            .collect();
        let got = futures::future::join_all(
            targets
                .iter()
                .map(|&i| self.items_of(route, i, kind, ctx, deadline)),
        )
        .await;
        let mut inputs = Vec::with_capacity(got.len());
        let mut seen = Vec::with_capacity(got.len());
        for ((&idx, avail), g) in targets.iter().zip(avails).zip(got) {
            let Ok((g, counter)) = g else {
                return Err(Fail::Cancelled);
            };
            let (items, live) = match g {
                Got::Live(items, gen) => (Some(items), Some(gen)),
                Got::LastGood(items) => (Some(items), None),
                Got::Absent => (None, None),
            };
            inputs.push(items);
            seen.push(Seen {
                idx,
                counter,
                avail,
                live,
            });
        }
        let same = |v: &View| {
            v.seen == seen
                && v.inputs.len() == inputs.len()
                && v.inputs.iter().zip(&inputs).all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                })
        };
        if let Some(v) = route
            .catalog
            .lock()
            .views
            .get(kind.index())
            .and_then(Option::as_ref)
        {
            if same(v) {
                return Ok(v.clone());
            }
        }
        let view = Arc::new(self.build(&links.slots, route.bare, kind, inputs, seen));
        let mut cat = route.catalog.lock();
        if let Some(v) = cat.views.get_mut(kind.index()) {
            *v = Some(view.clone());
        }
        Ok(view)
    }

    /// Merges the backends' items under their policies (see the module docs).
    fn build(
        &self,
        slots: &[Arc<super::Slot>],
        bare: bool,
        kind: ListKind,
        inputs: Vec<Option<Arc<Vec<Value>>>>,
        seen: Vec<Seen>,
    ) -> View {
        let mut view = View {
            inputs: Vec::new(),
            seen: Vec::new(),
            items: Vec::new(),
            names: HashMap::new(),
            uris: HashMap::new(),
            templates: Vec::new(),
            digest: 0,
            ttl: Duration::from_secs(60),
        };
        let mut shortest: Option<Duration> = None;
        for (s, items) in seen.iter().zip(&inputs) {
            let Some(slot) = slots.get(s.idx) else {
                continue;
            };
            let Some(items) = items else { continue };
            shortest = Some(shortest.map_or(slot.cfg.list_ttl, |d| d.min(slot.cfg.list_ttl)));
            let policy = match kind {
                ListKind::Tools => &slot.cfg.tools,
                ListKind::Prompts => &slot.cfg.prompts,
                ListKind::Resources | ListKind::Templates => &slot.cfg.resources,
            };
            let prefix = prefix_of(slot, bare);
            for item in items.iter() {
                let key_field = match kind {
                    ListKind::Tools | ListKind::Prompts => "name",
                    ListKind::Resources => "uri",
                    ListKind::Templates => "uriTemplate",
                };
                let Some(own) = item.get(key_field).and_then(Value::as_str) else {
                    continue;
                };
                if !allowed(policy, own) {
                    continue;
                }
                let mut item = item.clone();
                if let Some(o) = policy.overrides.get(own) {
                    apply_override(&mut item, o);
                }
                match kind {
                    ListKind::Tools | ListKind::Prompts => {
                        let shown = policy.rename.get(own).map_or(own, String::as_str);
                        let exposed = expose(prefix, &self.sep, shown);
                        if let Some((held, _)) = view.names.get(&exposed) {
                            conflict(slots, kind, s.idx, *held, &exposed);
                            continue;
                        }
                        if let Some(obj) = item.as_object_mut() {
                            obj.insert("name".into(), Value::String(exposed.clone()));
                        }
                        view.names.insert(exposed, (s.idx, own.to_owned()));
                    }
                    ListKind::Resources => {
                        if let Some(held) = view.uris.get(own) {
                            conflict(slots, kind, s.idx, *held, own);
                            continue;
                        }
                        view.uris.insert(own.to_owned(), s.idx);
                    }
                    ListKind::Templates => {
                        let before = own.split('{').next().unwrap_or_default().to_owned();
                        view.templates.push((before, s.idx));
                    }
                }
                view.items.push(to_raw(&item));
            }
        }
        if let Some(d) = shortest {
            view.ttl = d;
        }
        view.digest = view
            .items
            .iter()
            .fold(fnv1a(kind.field()), |h, i| fnv1a_more(h, i.get()));
        view.inputs = inputs;
        view.seen = seen;
        view
    }

    /// Backend `idx`'s list of `kind` for a view (see [`Router::view`]), and the
    /// kind's change counter it goes with. `Err`: the client cancelled.
    async fn items_of(
        &self,
        route: &SessionRoute,
        idx: usize,
        kind: ListKind,
        ctx: &CallCtx,
        deadline: tokio::time::Instant,
    ) -> Result<(Got, u64), ()> {
        let links = route.links();
        let (Some(Some(conn)), Some(slot)) = (links.conns.get(idx), links.slots.get(idx)) else {
            return Ok((Got::Absent, 0));
        };
        let announces = route.info(idx).is_some_and(|i| {
            i.capabilities()
                .get(kind.capability())
                .and_then(|c| c.get("listChanged"))
                == Some(&Value::Bool(true))
        });
        let ttl = slot.cfg.list_ttl;
        // The counter is read before the entry: a change after it is one the
        // session will hear of.
        let before = conn.lists().counter(kind);
        if let Some((items, gen)) = fresh(conn, kind, announces, ttl) {
            return Ok((Got::Live(items, gen), before));
        }
        let why = if conn.availability() == Availability::Down {
            "it is down"
        } else if links.per_call.get(idx) == Some(&true) {
            // Listed on a connection made for the call, as the session's calls are.
            let filled = tokio::time::timeout_at(deadline, async {
                let items =
                    fetch_pages(kind, |p| forward(route, idx, kind.method(), p, ctx)).await?;
                let gen = match conn.availability() {
                    Availability::Up(g) => g,
                    _ => 0,
                };
                let (items, counter) = conn.lists().store(kind, gen, items);
                Ok::<_, Fail>((items, gen, counter))
            })
            .await;
            match filled {
                Ok(Ok((items, gen, counter))) => return Ok((Got::Live(items, gen), counter)),
                Ok(Err(Fail::Cancelled)) => return Err(()),
                Ok(Err(_)) => "its list failed",
                Err(_) => "it did not list within catalog.deadline",
            }
        } else {
            // Listed by a task of its own: a list that comes after the deadline
            // still fills the cache (and the session hears of it).
            let fill = tokio::spawn(fill(conn.clone(), kind, announces, ttl));
            tokio::select! {
                _ = ctx.cancel.cancelled() => return Err(()),
                r = tokio::time::timeout_at(deadline, fill) => match r {
                    Ok(Ok(Ok((items, gen, counter)))) => {
                        return Ok((Got::Live(items, gen), counter))
                    }
                    Ok(Ok(Err(Fail::Cancelled))) => return Err(()),
                    Ok(_) => "its list failed",
                    Err(_) => "it did not list within catalog.deadline (it goes on in the background)",
                }
            }
        };
        let last = match self.catalog().on_unavailable {
            OnUnavailable::LastGood => conn.lists().get(kind).map(|l| l.items),
            OnUnavailable::Omit => None,
        };
        let served = if last.is_some() {
            "its last good entries"
        } else {
            "none of its entries"
        };
        tracing::warn!(backend = %slot.cfg.name, list = kind.method(), "{why}: the merged list has {served}");
        let counter = if last.is_some() {
            &slot.stats.catalog_last_good
        } else {
            &slot.stats.catalog_omitted
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((last.map_or(Got::Absent, Got::LastGood), before))
    }
}

/// Logs and counts, once per name, an item left out for a name another backend's
/// item has.
fn conflict(slots: &[Arc<super::Slot>], kind: ListKind, idx: usize, held: usize, name: &str) {
    let (Some(slot), Some(holder)) = (slots.get(idx), slots.get(held)) else {
        return;
    };
    if held == idx {
        // One backend listing a name twice: its own affair; the first is kept.
        return;
    }
    let first = {
        let mut seen = slot.conflicts.lock();
        seen.len() < 10_000 && seen.insert((kind.index(), name.to_owned()))
    };
    if first {
        slot.stats
            .catalog_conflicts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            backend = %slot.cfg.name,
            kept = %holder.cfg.name,
            name = %name.chars().take(200).collect::<String>(),
            list = kind.field(),
            "two backends offer one name; the one configured first keeps it, the other's is left out (set `prefix` or `rename`)"
        );
    }
}

/// The connection's cached list of `kind` when it is still good: from the live
/// incarnation, not announced stale, and (for a kind the backend does not announce
/// changes of) younger than `ttl`.
fn fresh(
    conn: &Conn,
    kind: ListKind,
    announces: bool,
    ttl: Duration,
) -> Option<(Arc<Vec<Value>>, u64)> {
    match (conn.availability(), conn.lists().get(kind)) {
        (Availability::Up(gen), Some(l))
            if !l.stale && l.gen == gen && (announces || l.at.elapsed() < ttl) =>
        {
            Some((l.items, gen))
        }
        _ => None,
    }
}

/// Lists `kind` on `conn` into its cache (one caller at a time; one that waited
/// finds the list another just made): the items, the incarnation, the counter.
async fn fill(
    conn: Arc<Conn>,
    kind: ListKind,
    announces: bool,
    ttl: Duration,
) -> Result<(Arc<Vec<Value>>, u64, u64), Fail> {
    let Some(lock) = conn.lists().fill_lock(kind) else {
        return Err(Fail::Internal(RpcError::new(
            code::INTERNAL_ERROR,
            "no such list",
        )));
    };
    let _filling = lock.lock().await;
    let before = conn.lists().counter(kind);
    if let Some((items, gen)) = fresh(&conn, kind, announces, ttl) {
        return Ok((items, gen, before));
    }
    let gen = match conn.availability() {
        Availability::Up(g) => Some(g),
        _ => None,
    };
    // Gantry's own request: nothing it causes belongs to a client.
    let ctx = CallCtx {
        sink: Arc::new(super::Hub::new(
            conn.name(),
            Arc::new(crate::upstream::BackendStats::default()),
        )),
        cancel: CancellationToken::new(),
        client: crate::call::ClientView::default(),
        timeout: None,
        trace: None,
    };
    let items = fetch_pages(kind, |p| {
        super::forward::relay(&conn, kind.method(), p, &ctx)
    })
    .await?;
    let gen = gen
        .or_else(|| match conn.availability() {
            Availability::Up(g) => Some(g),
            _ => None,
        })
        .unwrap_or(0);
    let (items, counter) = conn.lists().store(kind, gen, items);
    Ok((items, gen, counter))
}

/// Every item of one backend's list, following `nextCursor` to the end (at most
/// `MAX_PAGES` pages).
async fn fetch_pages<F, Fut>(kind: ListKind, mut page: F) -> Result<Vec<Value>, Fail>
where
    F: FnMut(Option<Raw>) -> Fut,
    Fut: std::future::Future<Output = Result<Raw, Fail>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| to_raw(&json!({ "cursor": c })));
        let raw = page(params).await?;
        let mut got: Value = serde_json::from_str(raw.get()).map_err(|e| {
            Fail::Own(RpcError::new(
                code::BACKEND_ERROR,
                format!("invalid list result: {e}"),
            ))
        })?;
        if let Some(Value::Array(list)) = got.get_mut(kind.field()).map(Value::take) {
            items.extend(list);
        }
        match got.get("nextCursor").and_then(Value::as_str) {
            Some(next) if Some(next) != cursor.as_deref() => cursor = Some(next.to_owned()),
            _ => return Ok(items),
        }
    }
    tracing::warn!(
        method = kind.method(),
        "backend returned more than {MAX_PAGES} pages; the rest is left out"
    );
    Ok(items)
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
