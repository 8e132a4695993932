//! Traces (`[tracing]`, off by default): a span for each client request (kind
//! server) and one for its hop to the backend (kind client), exported over OTLP/HTTP.
//! The client's W3C trace context — the `traceparent` header, or `_meta.traceparent`
//! where the MCP specification carries it (SEP-414) — is the request span's parent;
//! the backend gets the hop span's context in `_meta` (every backend) and in the
//! `traceparent` header (HTTP backends). With tracing off, a client's context still
//! reaches the backend unchanged.

use crate::config::TracingConfig;
use crate::jsonrpc::Raw;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use std::sync::Arc;

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("tracing: {0}")]
pub struct TraceError(String);

/// The exporter and its tracer.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    /// Sets up export to the configured collector (nothing is sent until a span ends).
    pub fn new(cfg: &TracingConfig) -> Result<Arc<Self>, TraceError> {
        let mut endpoint = cfg.endpoint.trim_end_matches('/').to_owned();
        if !endpoint.ends_with("/v1/traces") {
            endpoint.push_str("/v1/traces");
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(cfg.timeout)
            .with_headers(cfg.headers.clone().into_iter().collect())
            .build()
            .map_err(|e| TraceError(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", cfg.service_name.clone()),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                cfg.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("gantry");
        Ok(Arc::new(Self { provider, tracer }))
    }

    /// Exports what is still buffered and stops (blocks: call off the runtime).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "tracing: could not export the last spans");
        }
    }

    /// The span of one client request, child of the client's context if it sent one.
    pub fn request(
        self: &Arc<Self>,
        method: &str,
        target: Option<&str>,
        parent: Option<&W3c>,
    ) -> RequestSpan {
        let parent = parent
            .and_then(W3c::span_context)
            .map_or_else(Context::new, |sc| {
                Context::new().with_remote_span_context(sc)
            });
        let mut attrs = vec![KeyValue::new("mcp.method.name", method.to_owned())];
        if let (Some(t), "tools/call") = (target, method) {
            attrs.push(KeyValue::new("gen_ai.tool.name", t.to_owned()));
        }
        let span = self
            .tracer
            .span_builder(span_name(method, target))
            .with_kind(SpanKind::Server)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &parent);
        RequestSpan {
            tracing: self.clone(),
            cx: parent.with_span(span),
        }
    }
}

fn span_name(method: &str, target: Option<&str>) -> String {
    match target {
        Some(t) => format!("{method} {t}"),
        None => method.to_owned(),
    }
}

/// A W3C trace context as carried in headers and `_meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct W3c {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl W3c {
    /// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, ids not all zero.
    pub fn span_context(&self) -> Option<SpanContext> {
        let mut parts = self.traceparent.trim().split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        if version.len() != 2
            || !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(parent, 16)
            || !hex(flags, 2)
        {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace = TraceId::from_hex(trace)
            .ok()
            .filter(|t| *t != TraceId::INVALID)?;
        let parent = SpanId::from_hex(parent)
            .ok()
            .filter(|s| *s != SpanId::INVALID)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        let state = self
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(SpanContext::new(
            trace,
            parent,
            TraceFlags::new(flags & 1),
            true,
            state,
        ))
    }

    fn of(sc: &SpanContext) -> Self {
        let state = sc.trace_state().header();
        Self {
            traceparent: format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            ),
            tracestate: (!state.is_empty()).then_some(state),
        }
    }

    /// The `traceparent` / `tracestate` headers.
    /// A value that is not a valid header value (a client's `tracestate` with control
    /// characters) is left out.
    pub fn headers(&self) -> Vec<(http::HeaderName, http::HeaderValue)> {
        use http::{HeaderName, HeaderValue};
        const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
        const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
        [
            (TRACEPARENT, Some(self.traceparent.as_str())),
            (TRACESTATE, self.tracestate.as_deref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, HeaderValue::from_str(v?).ok()?)))
        .collect()
    }
}

/// The client request's span: its backend hops are its children. Ends when dropped.
#[derive(Clone)]
pub struct RequestSpan {
    tracing: Arc<Tracing>,
    cx: Context,
}

impl RequestSpan {
    /// Records the request's outcome.
    pub fn set_error(&self, message: &str) {
        self.cx.span().set_status(Status::error(message.to_owned()));
    }

    /// The span of the hop to `backend`, and the context the backend is given.
    pub fn hop(&self, backend: &str, method: &str, target: Option<&str>) -> (HopSpan, W3c) {
        let span = self
            .tracing
            .tracer
            .span_builder(span_name(method, target))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("mcp.method.name", method.to_owned()),
                KeyValue::new("gantry.backend", backend.to_owned()),
            ])
            .start_with_context(&self.tracing.tracer, &self.cx);
        let w3c = W3c::of(span.span_context());
        (HopSpan(span), w3c)
    }
}

/// A backend hop's span. Ends when dropped.
pub struct HopSpan(opentelemetry_sdk::trace::Span);

impl HopSpan {
    pub fn set_error(&mut self, message: &str) {
        self.0.set_status(Status::error(message.to_owned()));
    }
}

/// `_meta.traceparent` / `_meta.tracestate` of a request's params.
pub fn from_meta(params: Option<&Raw>) -> Option<W3c> {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        traceparent: Option<String>,
        tracestate: Option<String>,
    }
    let raw = params?;
    // Most requests carry none: not worth parsing for.
    if !crate::jsonrpc::meta_may_name(raw, "traceparent", crate::needle!("traceparent")) {
        return None;
    }
    let p: Params = serde_json::from_str(raw.get()).ok()?;
    let m = p.meta?;
    Some(W3c {
        traceparent: m.traceparent?,
        tracestate: m.tracestate,
    })
}

/// The params with `_meta.traceparent` (and `tracestate`) set to `w3c`; params that
/// are not an object are returned unchanged.
pub fn with_meta(params: Option<Raw>, w3c: &W3c) -> Option<Raw> {
    let mut obj = match params.as_ref() {
        None => serde_json::Map::new(),
        Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => return params,
        },
    };
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return params;
    };
    meta.insert("traceparent".into(), w3c.traceparent.clone().into());
    match &w3c.tracestate {
        Some(s) => {
            meta.insert("tracestate".into(), s.clone().into());
        }
        None => {
            meta.remove("tracestate");
        }
    }
    Some(crate::jsonrpc::to_raw(&serde_json::Value::Object(obj)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn w3c(tp: &str) -> W3c {
        W3c {
            traceparent: tp.into(),
            tracestate: None,
        }
    }

    #[test]
    fn traceparent_is_parsed_by_the_w3c_rules() {
        let sc = w3c("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .span_context()
            .unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
        ] {
            assert!(w3c(bad).span_context().is_none(), "{bad}");
        }
    }

    #[test]
    fn meta_is_read_and_replaced_in_place() {
        let params = crate::jsonrpc::to_raw(&serde_json::json!({
            "name": "t", "_meta": {"traceparent": "a", "tracestate": "x=1", "progressToken": 3}
        }));
        let got = from_meta(Some(&params)).unwrap();
        assert_eq!(got.traceparent, "a");
        assert_eq!(got.tracestate.as_deref(), Some("x=1"));
        let out = with_meta(Some(params), &w3c("b")).unwrap();
        let v: serde_json::Value = serde_json::from_str(out.get()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name": "t", "_meta": {"traceparent": "b", "progressToken": 3}})
        );
        let arr = crate::jsonrpc::to_raw(&serde_json::json!([1]));
        assert_eq!(with_meta(Some(arr), &w3c("b")).unwrap().get(), "[1]");
    }
}
