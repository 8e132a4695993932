//! `gantry status URL`: a running Gantry's `/readyz` and `/status`, as a table.
//!
//! Exit status: 0 ready, 2 reachable but not ready (a required backend is not up,
//! or shutting down), 1 when it cannot be asked (unreachable, refused credentials,
//! not a Gantry).

use serde_json::Value;
use std::fmt::Write as _;
use std::time::Duration;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `/status` or `/readyz` answer read.
const MAX_STATUS_BYTES: usize = 4 * 1024 * 1024;

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("{0}: not an http:// or https:// URL")]
    BadUrl(String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status}{hint}")]
    Refused {
        url: String,
        status: u16,
        hint: &'static str,
    },
    #[error("{url} did not answer with Gantry's status JSON: {reason}")]
    NotGantry { url: String, reason: String },
    #[error("{url}: {status} {said}")]
    Unhealthy {
        url: String,
        status: u16,
        said: String,
    },
}

/// What was read: the text to print and whether Gantry is ready.
pub struct Report {
    pub text: String,
    pub ready: bool,
}

/// The `/status` URL for what the operator typed: a Gantry origin, its MCP endpoint
/// URL, or the status URL itself.
pub fn status_url(given: &str) -> Result<reqwest::Url, StatusError> {
    let mut url = reqwest::Url::parse(given).map_err(|_| StatusError::BadUrl(given.to_owned()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(StatusError::BadUrl(given.to_owned()));
    }
    if !url.path().ends_with("/status") {
        url.set_path("/status");
    }
    url.set_query(None);
    Ok(url)
}

async fn get_json(
    client: &reqwest::Client,
    url: reqwest::Url,
    key: Option<&str>,
    accept_503: bool,
) -> Result<Value, StatusError> {
    let mut req = client.get(url.clone());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let shown = url.to_string();
    let resp = req.send().await.map_err(|e| StatusError::Unreachable {
        url: shown.clone(),
        reason: crate::telemetry::error_chain(&e.without_url()),
    })?;
    let status = resp.status().as_u16();
    if !(resp.status().is_success() || accept_503 && status == 503) {
        let hint = match status {
            401 => " (give the API key with --key or GANTRY_API_KEY)",
            403 => " (the key is not allowed, or the Host/Origin check refused it)",
            404 => " (is this a Gantry?)",
            _ => "",
        };
        return Err(StatusError::Refused {
            url: shown,
            status,
            hint,
        });
    }
    let body = crate::bounded::read_bounded(resp, MAX_STATUS_BYTES)
        .await
        .map_err(|reason| StatusError::NotGantry {
            url: shown.clone(),
            reason,
        })?;
    serde_json::from_slice(&body).map_err(|e| StatusError::NotGantry {
        url: shown,
        reason: e.to_string(),
    })
}

/// `gantry healthcheck`: `/healthz` (alive) or, with `ready`, `/readyz` (serving) of
/// the Gantry at `given` (its origin, or any URL of it). The one line to print, or why
/// it is not healthy. Needs nothing in the image but Gantry itself.
pub async fn healthcheck(
    given: &str,
    ready: bool,
    timeout: Duration,
) -> Result<String, StatusError> {
    let mut url = status_url(given)?;
    url.set_path(if ready { "/readyz" } else { "/healthz" });
    let shown = url.to_string();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| StatusError::Unreachable {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| StatusError::Unreachable {
            url: shown.clone(),
            reason: crate::telemetry::error_chain(&e.without_url()),
        })?;
    let status = resp.status().as_u16();
    let body = crate::bounded::read_bounded(resp, 64 * 1024)
        .await
        .unwrap_or_default();
    let said: String = String::from_utf8_lossy(&body)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect();
    if status == 200 {
        Ok(format!("{shown}: {status} {said}"))
    } else {
        Err(StatusError::Unhealthy {
            url: shown,
            status,
            said,
        })
    }
}

/// Reads `/readyz` and `/status` of the Gantry at `given`.
pub async fn fetch(given: &str, key: Option<&str>) -> Result<(Value, Value), StatusError> {
    let status = status_url(given)?;
    let mut readyz = status.clone();
    readyz.set_path("/readyz");
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| StatusError::Unreachable {
            url: status.to_string(),
            reason: e.to_string(),
        })?;
    let ready = get_json(&client, readyz, None, true).await?;
    let full = get_json(&client, status.clone(), key, false).await?;
    if full.get("backends").and_then(Value::as_array).is_none() {
        return Err(StatusError::NotGantry {
            url: status.to_string(),
            reason: "no `backends` list".into(),
        });
    }
    Ok((ready, full))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The eras a backend was found to speak: `session`, `stateless`, `?` when unknown.
fn eras(speaks: &Value) -> String {
    let mut out = Vec::new();
    for era in ["session", "stateless"] {
        match speaks.get(era).and_then(Value::as_bool) {
            Some(true) => out.push(era.to_owned()),
            Some(false) => {}
            None => out.push(format!("{era}?")),
        }
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

/// The report for what `fetch` read.
pub fn render(url: &str, ready: &Value, status: &Value) -> Report {
    let readiness = ready
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gantry {} at {url}: {readiness}; {} session(s), {} call(s) in flight",
        text(&status["version"]),
        text(&status["sessions"]),
        text(&status["calls_in_flight"]),
    );
    let header = [
        "BACKEND",
        "STATE",
        "REQUIRED",
        "MODE",
        "TRANSPORT",
        "CONNS",
        "PENDING",
        "RESTARTS",
        "ERAS",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    let mut notes = Vec::new();
    for b in status["backends"].as_array().into_iter().flatten() {
        let name = text(&b["name"]);
        rows.push(vec![
            name.clone(),
            text(&b["state"]),
            if b["required"] == Value::Bool(true) {
                "yes".into()
            } else {
                "no".into()
            },
            text(&b["session_mode"]),
            text(&b["transport"]),
            text(&b["connections"]),
            text(&b["pending_requests"]),
            text(&b["restarts"]),
            eras(&b["speaks"]),
        ]);
        if let Some(reason) = b.get("reason").and_then(Value::as_str) {
            notes.push(format!("{name}: {} now: {reason}", text(&b["state"])));
        } else if let Some(last) = b.get("last_error").filter(|v| v.is_object()) {
            notes.push(format!(
                "{name}: last error {}s ago: {}",
                text(&last["seconds_ago"]),
                text(&last["reason"])
            ));
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    for n in notes {
        let _ = writeln!(out, "{n}");
    }
    Report {
        text: out,
        ready: readiness == "ready",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_status_url_is_found_from_what_an_operator_types() {
        for (given, want) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/status"),
            ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/status"),
            ("https://g.example/status?x=1", "https://g.example/status"),
        ] {
            assert_eq!(status_url(given).unwrap().as_str(), want);
        }
        for bad in ["127.0.0.1:8080", "ftp://x/", "nonsense"] {
            assert!(status_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_down_backend_shows_its_reason() {
        let ready = json!({"status": "waiting for required backends", "waiting": ["db"]});
        let status = json!({"version": "0.1.0", "sessions": 2, "calls_in_flight": 0, "backends": [
            {"name": "db", "required": true, "transport": "stdio", "session_mode": "shared",
             "connections": 0, "pending_requests": 0, "restarts": 3, "state": "down",
             "reason": "process exited (exit status: 2)", "speaks": {"session": true, "stateless": false}},
            {"name": "web", "required": false, "transport": "http", "session_mode": "per-session",
             "connections": 1, "pending_requests": 0, "restarts": 0, "state": "up",
             "last_error": null, "speaks": {"session": null, "stateless": true}},
        ]});
        let r = render("http://x", &ready, &status);
        assert!(!r.ready);
        assert!(
            r.text.contains("waiting for required backends"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("db: down now: process exited (exit status: 2)"),
            "{}",
            r.text
        );
        let db = r.text.lines().find(|l| l.starts_with("db ")).unwrap();
        assert!(db.contains("yes") && db.ends_with("session"), "{db}");
        let web = r.text.lines().find(|l| l.starts_with("web ")).unwrap();
        assert!(web.ends_with("session?,stateless"), "{web}");
    }
}
