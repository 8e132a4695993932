//! What the example server received, for tests that must see what really reached a
//! backend (not what Gantry says it sent): with `MB_RECORD=FILE` every JSON-RPC
//! message received is appended to FILE as one line, exactly as it arrived (a batch
//! as one line); with `MB_RECORD_HEADERS=FILE` (HTTP) every request's method and
//! headers as `{"method":…,"headers":{lowercased name: value}}`. The same variables
//! as the Python fixtures in `tests/fixtures`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Appends lines to one file; writes are whole lines (one `write` each).
#[derive(Clone)]
pub(super) struct Recorder(Arc<Mutex<std::fs::File>>);

impl Recorder {
    /// The recorder the environment variable `var` names, if it is set.
    pub(super) fn from_env(var: &str) -> anyhow::Result<Option<Self>> {
        let Some(path) = std::env::var_os(var).map(PathBuf::from) else {
            return Ok(None);
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("{var}={}: {e}", path.display()))?;
        Ok(Some(Self(Arc::new(Mutex::new(file)))))
    }

    /// Appends `line` (without its newline) and a newline.
    pub(super) fn line(&self, line: &[u8]) {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend(line.iter().map(|b| if *b == b'\n' { b' ' } else { *b }));
        buf.push(b'\n');
        let mut f = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = f.write_all(&buf) {
            tracing::warn!(error = %e, "cannot record a message");
        }
    }
}

/// stdin, with every line recorded on its way to the server.
pub(super) fn tee_stdin(rec: Recorder) -> tokio::io::DuplexStream {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (mut tx, rx) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin());
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lines.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        rec.line(line);
                    }
                    if tx.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            }
        }
        // stdin closed: the server sees end of input.
        let _ = tx.shutdown().await;
    });
    rx
}

/// Axum middleware: records each request's headers and JSON body.
pub(super) async fn http(
    axum::extract::State(recs): axum::extract::State<(Option<Recorder>, Option<Recorder>)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (messages, headers) = recs;
    if let Some(h) = &headers {
        let map: serde_json::Map<String, serde_json::Value> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    serde_json::Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
                )
            })
            .collect();
        let line = serde_json::json!({ "method": req.method().as_str(), "headers": map });
        h.line(line.to_string().as_bytes());
    }
    let Some(m) = messages else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(_) => {
            return axum::response::IntoResponse::into_response(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            )
        }
    };
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        m.line(&bytes);
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}
