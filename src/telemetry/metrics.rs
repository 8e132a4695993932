//! Prometheus metrics. Label sets are bounded: backend names come from the config,
//! methods from a fixed list (anything else is `other`), outcomes from a fixed set.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// MCP methods that get their own label value.
const METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
];

/// A method as a bounded label value.
pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

/// Distinct tool names that get their own label value; the rest are `other`.
const MAX_TOOL_LABELS: usize = 1000;

/// How a client request ended, as counted in `requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a result.
    Ok,
    /// Answered with the backend's own JSON-RPC error (an unknown tool, bad
    /// arguments …): the backend's verdict, relayed.
    Error,
    /// Refused or failed by Gantry, for a reason whose fault is known: the
    /// request's (`client_error`), Gantry's limits or state (`gateway_error`), or a
    /// backend that failed (`backend_error`: crashed, unreachable, too slow).
    Failed(crate::fault::Fault),
    /// Cancelled by the client: no response.
    Cancelled,
}

/// The series of one method label, resolved once: looking a label set up in a
/// metric vector hashes it and takes a lock, on every call otherwise.
struct MethodSeries {
    label: &'static str,
    ok: IntCounter,
    error: IntCounter,
    client_error: IntCounter,
    gateway_error: IntCounter,
    backend_error: IntCounter,
    cancelled: IntCounter,
    latency: prometheus::Histogram,
}

/// Gantry's metrics, registered in their own registry (no globals).
pub struct Metrics {
    registry: Registry,
    /// Client requests answered, by method and outcome (`ok`, `error`, `client_error`,
    /// `gateway_error`, `backend_error`, `cancelled`).
    pub requests: IntCounterVec,
    /// Time to answer a client request, by method.
    pub latency: HistogramVec,
    /// Live client sessions.
    pub sessions: IntGauge,
    /// Sessions ended because they were idle.
    pub sessions_reaped: IntCounter,
    /// Client requests being answered now.
    pub calls_in_flight: IntGauge,
    /// Stateless-era calls parked until their client answers `input_required`.
    pub calls_awaiting_input: IntGauge,
    /// Live backend connections, by backend.
    pub backend_connections: IntGaugeVec,
    /// 1 while the backend serves (a connection is ready, or the last one was).
    pub backend_up: IntGaugeVec,
    /// Requests waiting for a backend, by backend.
    pub backend_pending: IntGaugeVec,
    /// Backend restarts, by backend.
    pub backend_restarts: IntCounterVec,
    /// Backend messages attributable to no single client (dropped), by backend.
    pub backend_unattributed: IntCounterVec,
    /// Requests refused at authentication, by reason (a fixed set).
    pub auth_failures: IntCounterVec,
    /// Fetches of an issuer's signing keys, by issuer (configured) and outcome.
    pub jwks_fetches: IntCounterVec,
    /// Opaque tokens checked, by how (`cache`, `introspection`).
    pub introspections: IntCounterVec,
    /// The built-in authorization server's refusals, by endpoint and OAuth error.
    pub as_refusals: IntCounterVec,
    /// Its tokens issued, by grant type.
    pub as_tokens: IntCounterVec,
    /// Its grants revoked, by reason.
    pub as_revocations: IntCounterVec,
    /// Its clients registered, by how.
    pub as_registrations: IntCounterVec,
    /// Requests refused by a rate-limit rule, by rule (configured names).
    pub rate_limited: IntCounterVec,
    /// Requests decided by a rule's `on_store_error` while Redis did not answer.
    pub rate_limit_fallbacks: IntCounterVec,
    /// Redis failures of the rate-limit store, by reason.
    pub redis_errors: IntCounterVec,
    /// Time a call waited for a `[[limits.concurrency]]` place, by rule.
    pub queue_wait: HistogramVec,
    /// SSE streams open, by kind (`response`, `listen`, `legacy`).
    pub sse_streams: IntGaugeVec,
    /// Bytes read from and written to client connections.
    pub client_received_bytes: IntCounter,
    pub client_sent_bytes: IntCounter,
    /// Bytes read from and written to backends, by backend.
    pub backend_received_bytes: IntCounterVec,
    pub backend_sent_bytes: IntCounterVec,
    /// Backend processes that ended, by backend and reason.
    pub backend_exits: IntCounterVec,
    /// Merged lists served without a fresh list of a backend, by what was served.
    pub catalog_fallbacks: IntCounterVec,
    /// Backend items refused for a name another backend's item has.
    pub catalog_conflicts: IntCounterVec,
    /// Tool calls answered, by backend, tool and outcome.
    tool_calls: IntCounterVec,
    /// Time to answer a tool call, by backend and tool.
    tool_latency: HistogramVec,
    /// The series of each tool label in use, by backend (bounded: beyond
    /// `MAX_TOOL_LABELS` tools, `other`), fetched from the vectors once rather than
    /// by hashing their labels on every call.
    tool_series: parking_lot::RwLock<crate::FastMap<String, Vec<ToolSeries>>>,
    /// `requests` and `latency` per method label (`METHODS`, then `other`).
    by_method: Vec<MethodSeries>,
}

/// The `outcome` label values of `tool_calls_total`, in the order
/// [`Metrics::observe_tool`] numbers them.
const TOOL_OUTCOMES: [&str; 6] = [
    "ok",
    "error",
    "client_error",
    "gateway_error",
    "backend_error",
    "cancelled",
];

/// One tool label's series under one backend.
struct ToolSeries {
    backend: Box<str>,
    tool: Box<str>,
    /// `tool_calls_total` by outcome ([`TOOL_OUTCOMES`]), each made when first
    /// counted, as the vector makes a series on first use.
    calls: [std::sync::OnceLock<IntCounter>; 6],
    latency: Histogram,
}

impl ToolSeries {
    fn observe(&self, calls: &IntCounterVec, outcome: usize, seconds: f64) {
        if let (Some(cell), Some(name)) = (self.calls.get(outcome), TOOL_OUTCOMES.get(outcome)) {
            cell.get_or_init(|| calls.with_label_values(&[&*self.backend, &*self.tool, *name]))
                .inc();
        }
        self.latency.observe(seconds);
    }
}

/// Why the metrics could not be set up (a programming error: names are fixed).
#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new_custom(Some("gantry".into()), None)?;
        let requests = IntCounterVec::new(
            Opts::new(
                "requests_total",
                "Client requests answered, by method and outcome",
            ),
            &["method", "outcome"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "request_duration_seconds",
                "Time to answer a client request",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ]),
            &["method"],
        )?;
        let sessions = IntGauge::new("sessions", "Live client sessions")?;
        let sessions_reaped = IntCounter::new(
            "sessions_reaped_total",
            "Sessions ended because they were idle",
        )?;
        let calls_in_flight =
            IntGauge::new("calls_in_flight", "Client requests being answered now")?;
        let calls_awaiting_input = IntGauge::new(
            "calls_awaiting_input",
            "Stateless-era calls waiting for their client's input (input_required)",
        )?;
        let backend_connections = IntGaugeVec::new(
            Opts::new(
                "backend_connections",
                "Live backend connections (processes or HTTP sessions)",
            ),
            &["backend"],
        )?;
        let backend_up = IntGaugeVec::new(
            Opts::new(
                "backend_up",
                "1 while the backend serves: a connection is ready, or the last one to run was and none is failing",
            ),
            &["backend"],
        )?;
        let backend_pending = IntGaugeVec::new(
            Opts::new(
                "backend_pending_requests",
                "Requests waiting for a backend's answer",
            ),
            &["backend"],
        )?;
        let backend_restarts = IntCounterVec::new(
            Opts::new(
                "backend_restarts_total",
                "Backend connections restarted after a crash or lost session",
            ),
            &["backend"],
        )?;
        let backend_unattributed = IntCounterVec::new(
            Opts::new(
                "backend_unattributed_messages_total",
                "Backend messages attributable to no single client, dropped",
            ),
            &["backend"],
        )?;
        let auth_failures = IntCounterVec::new(
            Opts::new(
                "auth_failures_total",
                "Requests refused at authentication, by reason",
            ),
            &["reason"],
        )?;
        let jwks_fetches = IntCounterVec::new(
            Opts::new(
                "oauth_jwks_fetches_total",
                "Fetches of an authorization server's signing keys, by issuer and outcome",
            ),
            &["issuer", "outcome"],
        )?;
        let as_refusals = IntCounterVec::new(
            Opts::new(
                "oauth_server_refusals_total",
                "Requests the built-in authorization server refused, by endpoint and OAuth error code",
            ),
            &["endpoint", "error"],
        )?;
        let as_tokens = IntCounterVec::new(
            Opts::new(
                "oauth_server_tokens_issued_total",
                "Access tokens the built-in authorization server issued, by grant type",
            ),
            &["grant"],
        )?;
        let as_revocations = IntCounterVec::new(
            Opts::new(
                "oauth_server_grants_revoked_total",
                "Grants revoked by the built-in authorization server: code_replayed, refresh_reused, client",
            ),
            &["reason"],
        )?;
        let as_registrations = IntCounterVec::new(
            Opts::new(
                "oauth_server_registrations_total",
                "Clients the built-in authorization server registered: dynamic (RFC 7591) or document (a client ID metadata document fetched)",
            ),
            &["via"],
        )?;
        let introspections = IntCounterVec::new(
            Opts::new(
                "oauth_introspections_total",
                "Opaque tokens checked: answered from the cache or by an introspection call",
            ),
            &["source"],
        )?;
        let rate_limited = IntCounterVec::new(
            Opts::new(
                "rate_limited_total",
                "Requests refused by a rate-limit rule, by rule",
            ),
            &["rule"],
        )?;
        let rate_limit_fallbacks = IntCounterVec::new(
            Opts::new(
                "rate_limit_fallbacks_total",
                "Requests decided by a rule's on_store_error policy because Redis did not answer",
            ),
            &["rule", "policy"],
        )?;
        let redis_errors = IntCounterVec::new(
            Opts::new(
                "redis_errors_total",
                "Checks the rate-limit store (Redis) could not answer, by reason",
            ),
            &["reason"],
        )?;
        let queue_wait = HistogramVec::new(
            HistogramOpts::new(
                "queue_wait_seconds",
                "Time a call waited for a place under a concurrency limit (refused ones included)",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            &["rule"],
        )?;
        let sse_streams = IntGaugeVec::new(
            Opts::new(
                "sse_streams",
                "SSE streams open to clients, by kind: response (a POST's), listen (GET or subscriptions/listen), legacy (HTTP+SSE)",
            ),
            &["kind"],
        )?;
        let client_received_bytes = IntCounter::new(
            "client_received_bytes_total",
            "Bytes read from client connections (TLS and HTTP framing included)",
        )?;
        let client_sent_bytes = IntCounter::new(
            "client_sent_bytes_total",
            "Bytes written to client connections (TLS and HTTP framing included)",
        )?;
        let backend_received_bytes = IntCounterVec::new(
            Opts::new(
                "backend_received_bytes_total",
                "Message bytes read from backends (stdout lines, HTTP bodies)",
            ),
            &["backend"],
        )?;
        let backend_sent_bytes = IntCounterVec::new(
            Opts::new(
                "backend_sent_bytes_total",
                "Message bytes written to backends (stdin lines, HTTP bodies)",
            ),
            &["backend"],
        )?;
        let backend_exits = IntCounterVec::new(
            Opts::new(
                "backend_exits_total",
                "Backend processes that ended, by reason: clean (exit 0), error (non-zero exit), signal (killed, not by Gantry), stopped (by Gantry)",
            ),
            &["backend", "reason"],
        )?;
        let catalog_fallbacks = IntCounterVec::new(
            Opts::new(
                "catalog_fallbacks_total",
                "Merged lists served without a fresh list of a backend (down, too slow, failed), by what was served of it: last_good or omitted",
            ),
            &["backend", "served"],
        )?;
        let catalog_conflicts = IntCounterVec::new(
            Opts::new(
                "catalog_conflicts_total",
                "Tools and prompts of a backend left out because another backend's item already has their name (counted once per name)",
            ),
            &["backend"],
        )?;
        let tool_calls = IntCounterVec::new(
            Opts::new(
                "tool_calls_total",
                "Tool calls answered, by backend, tool (as clients name it) and outcome",
            ),
            &["backend", "tool", "outcome"],
        )?;
        let tool_latency = HistogramVec::new(
            HistogramOpts::new("tool_call_duration_seconds", "Time to answer a tool call").buckets(
                vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 300.0,
                ],
            ),
            &["backend", "tool"],
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new(
                "build_info",
                "Gantry's version and the commit it was built from (the value is always 1)",
            ),
            &["version", "commit"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("GANTRY_COMMIT")])
            .set(1);
        let by_method = METHODS
            .iter()
            .copied()
            .chain(std::iter::once("other"))
            .map(|label| {
                Ok(MethodSeries {
                    label,
                    ok: requests.get_metric_with_label_values(&[label, "ok"])?,
                    error: requests.get_metric_with_label_values(&[label, "error"])?,
                    client_error: requests
                        .get_metric_with_label_values(&[label, "client_error"])?,
                    gateway_error: requests
                        .get_metric_with_label_values(&[label, "gateway_error"])?,
                    backend_error: requests
                        .get_metric_with_label_values(&[label, "backend_error"])?,
                    cancelled: requests.get_metric_with_label_values(&[label, "cancelled"])?,
                    latency: latency.get_metric_with_label_values(&[label])?,
                })
            })
            .collect::<Result<Vec<_>, prometheus::Error>>()?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(sessions.clone()))?;
        registry.register(Box::new(sessions_reaped.clone()))?;
        registry.register(Box::new(calls_in_flight.clone()))?;
        registry.register(Box::new(calls_awaiting_input.clone()))?;
        registry.register(Box::new(backend_connections.clone()))?;
        registry.register(Box::new(backend_up.clone()))?;
        registry.register(Box::new(backend_pending.clone()))?;
        registry.register(Box::new(backend_restarts.clone()))?;
        registry.register(Box::new(backend_unattributed.clone()))?;
        registry.register(Box::new(auth_failures.clone()))?;
        registry.register(Box::new(jwks_fetches.clone()))?;
        registry.register(Box::new(introspections.clone()))?;
        registry.register(Box::new(as_refusals.clone()))?;
        registry.register(Box::new(as_tokens.clone()))?;
        registry.register(Box::new(as_revocations.clone()))?;
        registry.register(Box::new(as_registrations.clone()))?;
        registry.register(Box::new(rate_limited.clone()))?;
        registry.register(Box::new(rate_limit_fallbacks.clone()))?;
        registry.register(Box::new(redis_errors.clone()))?;
        registry.register(Box::new(queue_wait.clone()))?;
        registry.register(Box::new(sse_streams.clone()))?;
        registry.register(Box::new(client_received_bytes.clone()))?;
        registry.register(Box::new(client_sent_bytes.clone()))?;
        registry.register(Box::new(backend_received_bytes.clone()))?;
        registry.register(Box::new(backend_sent_bytes.clone()))?;
        registry.register(Box::new(backend_exits.clone()))?;
        registry.register(Box::new(catalog_fallbacks.clone()))?;
        registry.register(Box::new(catalog_conflicts.clone()))?;
        registry.register(Box::new(tool_calls.clone()))?;
        registry.register(Box::new(tool_latency.clone()))?;
        registry.register(Box::new(build_info))?;
        Ok(Self {
            registry,
            requests,
            latency,
            sessions,
            sessions_reaped,
            calls_in_flight,
            calls_awaiting_input,
            backend_connections,
            backend_up,
            backend_pending,
            backend_restarts,
            backend_unattributed,
            auth_failures,
            jwks_fetches,
            introspections,
            as_refusals,
            as_tokens,
            as_revocations,
            as_registrations,
            rate_limited,
            rate_limit_fallbacks,
            redis_errors,
            queue_wait,
            sse_streams,
            client_received_bytes,
            client_sent_bytes,
            backend_received_bytes,
            backend_sent_bytes,
            backend_exits,
            catalog_fallbacks,
            catalog_conflicts,
            tool_calls,
            tool_latency,
            tool_series: parking_lot::RwLock::new(crate::FastMap::default()),
            by_method,
        })
    }

    /// Counts one answered client request and its latency.
    pub fn observe_request(&self, method: &str, outcome: Outcome, elapsed: std::time::Duration) {
        let label = method_label(method);
        let Some(series) = self
            .by_method
            .iter()
            .find(|s| s.label == label)
            .or_else(|| self.by_method.last())
        else {
            return;
        };
        match outcome {
            Outcome::Ok => series.ok.inc(),
            Outcome::Error => series.error.inc(),
            Outcome::Failed(crate::fault::Fault::Client) => series.client_error.inc(),
            Outcome::Failed(crate::fault::Fault::Gateway) => series.gateway_error.inc(),
            Outcome::Failed(crate::fault::Fault::Backend) => series.backend_error.inc(),
            Outcome::Cancelled => series.cancelled.inc(),
        }
        series.latency.observe(elapsed.as_secs_f64());
    }

    /// Counts one answered tool call. Only a tool some backend answered for gets its
    /// own label (an unknown name a client sends is `other`), at most
    /// `MAX_TOOL_LABELS` of them.
    pub fn observe_tool(
        &self,
        backend: Option<&str>,
        tool: &str,
        outcome: Outcome,
        elapsed: std::time::Duration,
    ) {
        let answered = matches!(outcome, Outcome::Ok | Outcome::Error);
        let backend = backend.unwrap_or("other");
        let outcome = match outcome {
            Outcome::Ok => 0,
            Outcome::Error => 1,
            Outcome::Failed(crate::fault::Fault::Client) => 2,
            Outcome::Failed(crate::fault::Fault::Gateway) => 3,
            Outcome::Failed(crate::fault::Fault::Backend) => 4,
            Outcome::Cancelled => 5,
        };
        let seconds = elapsed.as_secs_f64();
        // The label a tool gets: its own once some backend answered for it, while
        // fewer than `MAX_TOOL_LABELS` tools have one (`other` is not one of them).
        let label = |series: &crate::FastMap<String, Vec<ToolSeries>>| {
            if series.contains_key(tool) {
                return tool;
            }
            let tools = series.len() - usize::from(series.contains_key("other"));
            if answered && tools < MAX_TOOL_LABELS {
                tool
            } else {
                "other"
            }
        };
        {
            let series = self.tool_series.read();
            // A tool with its own label is found by one lookup, the common case.
            let found = series
                .get(tool)
                .or_else(|| series.get(label(&series)))
                .and_then(|by| by.iter().find(|s| &*s.backend == backend));
            if let Some(s) = found {
                s.observe(&self.tool_calls, outcome, seconds);
                return;
            }
        }
        let mut series = self.tool_series.write();
        let label = label(&series).to_owned();
        let by = series.entry(label.clone()).or_default();
        if !by.iter().any(|s| &*s.backend == backend) {
            by.push(ToolSeries {
                latency: self.tool_latency.with_label_values(&[backend, &label]),
                backend: backend.into(),
                tool: label.into(),
                calls: Default::default(),
            });
        }
        if let Some(s) = by.iter().find(|s| &*s.backend == backend) {
            s.observe(&self.tool_calls, outcome, seconds);
        }
    }

    /// Raises a counter to `value` (counters kept as atomics elsewhere).
    pub fn catch_up(counter: &IntCounter, value: u64) {
        let now = counter.get();
        if value > now {
            counter.inc_by(value - now);
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The `tool` label values `tool_calls_total` has for `outcome`.
    fn tools_with(m: &Metrics, outcome: &str) -> Vec<String> {
        let mut tools: Vec<String> = m
            .render()
            .lines()
            .filter(|l| l.starts_with("gantry_tool_calls_total{"))
            .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
            .filter_map(|l| {
                l.split("tool=\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        tools.sort();
        tools
    }

    #[test]
    fn tool_labels_stop_at_their_bound_and_unanswered_names_are_other() {
        let m = Metrics::new().unwrap();
        let ms = Duration::from_millis(1);
        // A name no backend answered for, first: `other` takes no tool's place.
        m.observe_tool(
            Some("b"),
            "typo",
            Outcome::Failed(crate::fault::Fault::Client),
            ms,
        );
        for i in 0..MAX_TOOL_LABELS + 5 {
            m.observe_tool(Some("b"), &format!("t{i}"), Outcome::Ok, ms);
        }
        // A name no backend answered for, and a known one that then failed.
        m.observe_tool(
            Some("b"),
            "typo",
            Outcome::Failed(crate::fault::Fault::Client),
            ms,
        );
        m.observe_tool(
            Some("b"),
            "t0",
            Outcome::Failed(crate::fault::Fault::Backend),
            ms,
        );
        m.observe_tool(
            Some("b"),
            "t0",
            Outcome::Failed(crate::fault::Fault::Backend),
            ms,
        );

        let ok = tools_with(&m, "ok");
        assert_eq!(ok.len(), MAX_TOOL_LABELS + 1, "the bound, then `other`");
        assert!(ok.contains(&"other".to_owned()));
        assert!(!ok.contains(&format!("t{}", MAX_TOOL_LABELS + 4)));
        assert_eq!(tools_with(&m, "client_error"), ["other"]);
        let text = m.render();
        assert!(
            text.contains(
                "gantry_tool_calls_total{backend=\"b\",outcome=\"backend_error\",tool=\"t0\"} 2"
            ),
            "{}",
            text.lines()
                .filter(|l| l.contains("backend_error"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // The calls past the bound are counted under `other`.
        assert!(
            text.contains("gantry_tool_calls_total{backend=\"b\",outcome=\"ok\",tool=\"other\"} 5")
        );
        assert!(
            text.contains("gantry_tool_call_duration_seconds_count{backend=\"b\",tool=\"t0\"} 3")
        );
    }
}
