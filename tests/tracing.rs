//! Traces: a client's W3C trace context (`traceparent` header, or `_meta.traceparent`
//! as the MCP specification carries it) is followed across Gantry — its request span
//! is the client's child, each backend hop the request's child, and the backends get
//! the hop's context (`_meta` for stdio, `_meta` and headers for HTTP). Spans are
//! received over OTLP/HTTP by a collector stand-in that decodes them with the official
//! OpenTelemetry protobuf types. With tracing off, the context passes unchanged.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use prost::Message as _;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Receives OTLP/HTTP protobuf exports on `/v1/traces`.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn collector() -> Collector {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let store = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body.as_ref())
                    .expect("an export that is not an OTLP ExportTraceServiceRequest");
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .map(|a| format!("{:?}", a.value));
                    assert!(
                        service.is_some_and(|s| s.contains("gantry-under-test")),
                        "service.name"
                    );
                    for ss in rs.scope_spans {
                        store.lock().unwrap().extend(ss.spans);
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::default()
                        .encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Collector { url, spans, task }
}

/// The parent span id of a `traceparent` of the client's trace.
fn parent_in(traceparent: &str) -> String {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], CLIENT_TRACE, "another trace: {traceparent}");
    parts[2].to_owned()
}

/// `_meta.traceparent` of the `tools/call` a stdio backend received.
fn stdio_traceparent(record: &std::path::Path) -> String {
    let calls: Vec<Value> = recorded(record)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls[0]["params"]["_meta"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no _meta.traceparent: {}", calls[0]))
        .to_owned()
}

/// `traceparent` headers an HTTP backend received.
fn http_traceparents(file: &std::path::Path) -> Vec<String> {
    recorded(file)
        .iter()
        .filter_map(|r| r["headers"]["traceparent"].as_str().map(str::to_owned))
        .collect()
}

fn client_with_trace(g: &Gantry) -> Client {
    let mut c = g.client();
    c.http = reqwest::Client::builder()
        .default_headers({
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("traceparent", client_traceparent().parse().unwrap());
            h
        })
        .build()
        .unwrap();
    c
}

#[tokio::test]
async fn a_call_is_one_trace_from_the_client_through_gantry_to_each_backend() {
    let otel = collector().await;
    let dir = Scratch::new("tracing");
    let record = dir.file("stdio.jsonl");
    let headers = dir.file("headers.jsonl");
    let http = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let g = gantry()
        .section(&format!(
            "[tracing]\nendpoint = \"{}\"\nservice_name = \"gantry-under-test\"\n",
            otel.url
        ))
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .backend(python_fixture("mb", "misbehaving_server.py").record(&record))
        .backend(http_backend("web", &http.url))
        .start();
    let mut c = client_with_trace(&g);
    c.initialize().await;
    let r = c
        .call_tool(json!(1), "mb__echo", json!({"message": "a"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "a", "{r}");
    let r = c
        .call_tool(json!(2), "web__echo", json!({"message": "b"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "b", "{r}");

    // Each backend got the trace, with Gantry's hop as the parent.
    let stdio_parent = parent_in(&stdio_traceparent(&record));
    let http_parents: Vec<String> = http_traceparents(&headers)
        .iter()
        .map(|t| parent_in(t))
        .collect();
    assert!(
        !http_parents.is_empty(),
        "no traceparent header reached the HTTP backend"
    );
    assert_ne!(
        stdio_parent, CLIENT_SPAN,
        "the client's span was passed on, not Gantry's"
    );

    // The collector has the spans that make that chain.
    let chain = poll_until(Duration::from_secs(10), || {
        let spans = otel.spans.lock().unwrap().clone();
        let hop = spans
            .iter()
            .find(|s| hex(&s.span_id) == stdio_parent && s.kind == SpanKind::Client as i32)?;
        let request = spans
            .iter()
            .find(|s| s.span_id == hop.parent_span_id && s.kind == SpanKind::Server as i32)?;
        let http_hop = spans.iter().find(|s| {
            http_parents.contains(&hex(&s.span_id)) && s.kind == SpanKind::Client as i32
        })?;
        Some((hop.clone(), request.clone(), http_hop.clone()))
    })
    .await;
    let (hop, request, http_hop) = chain.unwrap_or_else(|| {
        panic!(
            "no client→gantry→backend chain among {:#?}",
            otel.spans.lock().unwrap()
        )
    });
    assert_eq!(hex(&request.trace_id), CLIENT_TRACE);
    assert_eq!(
        hex(&request.parent_span_id),
        CLIENT_SPAN,
        "request span's parent"
    );
    assert_eq!(request.name, "tools/call mb__echo");
    assert_eq!(hex(&hop.trace_id), CLIENT_TRACE);
    assert_eq!(hex(&http_hop.trace_id), CLIENT_TRACE);
    assert!(
        hop.attributes
            .iter()
            .any(|a| a.key == "gantry.backend" && format!("{:?}", a.value).contains("mb")),
        "{hop:?}"
    );
}

#[tokio::test]
async fn with_tracing_off_a_clients_trace_context_reaches_backends_unchanged() {
    let dir = Scratch::new("tracing-off");
    let record = dir.file("stdio.jsonl");
    let headers = dir.file("headers.jsonl");
    let http = HttpServer::example_with_env(&[("MB_RECORD_HEADERS", headers.to_str().unwrap())]);
    let g = gantry()
        .backend(python_fixture("mb", "misbehaving_server.py").record(&record))
        .backend(http_backend("web", &http.url))
        .start();
    // The header, from a session-era client.
    let mut c = client_with_trace(&g);
    c.initialize().await;
    c.call_tool(json!(1), "mb__echo", json!({"message": "a"}))
        .await;
    c.call_tool(json!(2), "web__echo", json!({"message": "b"}))
        .await;
    assert_eq!(stdio_traceparent(&record), client_traceparent());
    assert!(
        http_traceparents(&headers).contains(&client_traceparent()),
        "{:?}",
        recorded(&headers)
    );
    // `_meta.traceparent`, from a stateless-era client: the HTTP backend also gets
    // it as a header.
    let other = format!("00-{CLIENT_TRACE}-1111111111111111-01");
    let s = Stateless::new(&g);
    let r = s
        .request(
            json!(3),
            "tools/call",
            json!({"name": "web__echo", "arguments": {"message": "c"}, "_meta": {"traceparent": other}}),
            json!({}),
        )
        .await;
    assert!(r.response(&json!(3)).is_some(), "{}", r.raw);
    assert!(
        http_traceparents(&headers).contains(&other),
        "{:?}",
        recorded(&headers)
    );
}
