//! Reading an HTTP response body with a bound in bytes: a peer (a backend, an
//! identity provider) cannot make Gantry hold more than it allows.

use futures::StreamExt as _;

/// The whole body, or an error once it is larger than `max` bytes (nothing more is
/// read) or the transfer fails.
pub async fn read_bounded(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            format!(
                "reading the reply failed: {}",
                crate::telemetry::error_chain(&e)
            )
        })?;
        if out.len() + chunk.len() > max {
            return Err(format!("reply larger than {max} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
