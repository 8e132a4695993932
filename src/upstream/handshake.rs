//! The handshake of one backend incarnation: `initialize` (session era) or
//! `server/discover` (stateless era), in the order that serves the connection's
//! callers best, with what each attempt teaches about the backend's eras.

use super::core::{Core, InitInfo};
use super::error::UpstreamError;
use crate::jsonrpc::to_raw;
use crate::mcp::{Era, STATELESS_VERSION};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a backend of unknown era gets to answer the `server/discover` probe
/// before Gantry tries `initialize` instead.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The handshakes to try for a connection, in order: the era its callers speak
/// first, then the other (translation), skipping what the backend is known not to
/// speak; only the configured era when `era` is fixed.
fn handshake_order(core: &Core) -> Vec<Era> {
    match core.era {
        crate::config::Era::Session => vec![Era::Session],
        crate::config::Era::Stateless => vec![Era::Stateless],
        crate::config::Era::Auto => {
            let both = [core.want, core.want.other()];
            let known: Vec<Era> = both
                .into_iter()
                .filter(|e| core.stats.eras.get(*e) != Some(false))
                .collect();
            // Knowledge that rules out everything is stale (the backend was
            // replaced or upgraded): try both again.
            if known.is_empty() {
                both.to_vec()
            } else {
                known
            }
        }
    }
}

/// Brings incarnation `gen` up in the best era for the connection's callers:
/// their own when the backend speaks it, else the other with translation. A
/// session-era connection starts with `initialize` (a dual-era backend then gives
/// session-era clients everything it gives them directly); a stateless-era one with
/// `server/discover`. A refusal, silence (the probe waits [`PROBE_TIMEOUT`]) or,
/// for stdio, the process dying means the backend lacks that era; the finding is
/// kept for the backend's later connections. The transport then sends
/// `notifications/initialized` (session era only) and marks the connection ready.
pub(crate) async fn handshake(core: &Arc<Core>, gen: u64) -> Result<Arc<InitInfo>, UpstreamError> {
    let order = handshake_order(core);
    let mut last_err = None;
    for (i, era) in order.iter().copied().enumerate() {
        let last = i + 1 == order.len();
        let timeout = match era {
            Era::Stateless if !last && core.stats.eras.get(era) != Some(true) => {
                PROBE_TIMEOUT.min(core.init_timeout)
            }
            _ => core.init_timeout,
        };
        // A stdio process that dies now died of this handshake: its supervisor
        // restarts it at once for the other era, without counting a failure.
        core.set_probing((!last).then_some(era));
        let attempt = match era {
            Era::Stateless => discover(core, gen, timeout).await,
            Era::Session => initialize(core, gen, timeout).await,
        };
        match attempt {
            Ok(info) => {
                core.set_probing(None);
                core.stats.eras.set(era, true);
                if era != core.want {
                    tracing::info!(backend = %core.name, callers = %core.want, era = %era,
                        "backend does not speak its callers' era; translating");
                }
                return Ok(info);
            }
            Err(e @ UpstreamError::Crashed { .. }) if core.direct => {
                // Left set for the supervisor (the process is gone).
                if last {
                    core.set_probing(None);
                }
                return Err(e);
            }
            Err(e) => {
                core.set_probing(None);
                if core.era == crate::config::Era::Auto {
                    core.stats.eras.set(era, false);
                }
                tracing::debug!(backend = %core.name, era = %era, error = %e, "handshake refused");
                last_err = Some(e);
            }
        }
    }
    Err(last_err.unwrap_or_else(|| core.unavailable("no handshake to try")))
}

/// `_meta` of Gantry's own requests to a stateless-era backend.
pub(super) fn own_meta(core: &Core) -> serde_json::Value {
    let caps: serde_json::Value = serde_json::from_str::<serde_json::Value>(core.init_params.get())
        .ok()
        .and_then(|p| p.get("capabilities").cloned())
        .unwrap_or_else(|| serde_json::json!({}));
    serde_json::json!({
        crate::mcp::META_PROTOCOL_VERSION: STATELESS_VERSION,
        crate::mcp::META_CLIENT_CAPABILITIES: caps,
        crate::mcp::META_CLIENT_INFO: crate::mcp::gantry_implementation(),
    })
}

async fn discover(
    core: &Arc<Core>,
    gen: u64,
    timeout: Duration,
) -> Result<Arc<InitInfo>, UpstreamError> {
    let never = CancellationToken::new();
    let params = to_raw(&serde_json::json!({ "_meta": own_meta(core) }));
    let resp = core
        .request(gen, "server/discover", Some(params), None, &never, timeout)
        .await?;
    let result = resp
        .outcome
        .map_err(|e| core.unavailable(format!("server/discover was refused: {}", e.get())))?;
    let result: serde_json::Value =
        serde_json::from_str(result.get()).map_err(|e| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: format!("server/discover result: {e}"),
        })?;
    let speaks = result
        .get("supportedVersions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|v| v.iter().any(|x| x == STATELESS_VERSION));
    if !speaks {
        return Err(core.unavailable(format!(
            "server/discover names no version Gantry speaks ({STATELESS_VERSION})"
        )));
    }
    let mut shaped = serde_json::json!({
        "protocolVersion": STATELESS_VERSION,
        "capabilities": result.get("capabilities").cloned().unwrap_or_else(|| serde_json::json!({})),
        "serverInfo": result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"name": core.name, "version": "unknown"})),
    });
    if let (Some(i), Some(obj)) = (result.get("instructions"), shaped.as_object_mut()) {
        obj.insert("instructions".into(), i.clone());
    }
    Ok(Arc::new(InitInfo {
        protocol_version: STATELESS_VERSION.to_owned(),
        result: shaped,
        era: Era::Stateless,
    }))
}

async fn initialize(
    core: &Arc<Core>,
    gen: u64,
    timeout: Duration,
) -> Result<Arc<InitInfo>, UpstreamError> {
    let never = CancellationToken::new();
    let resp = core
        .request(
            gen,
            "initialize",
            Some(core.init_params.clone()),
            None,
            &never,
            timeout,
        )
        .await?;
    let result = match resp.outcome {
        Ok(r) => r,
        Err(e) => {
            return Err(core.unavailable(format!("initialize was refused: {}", e.get())));
        }
    };
    let result: serde_json::Value =
        serde_json::from_str(result.get()).map_err(|e| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: format!("initialize result: {e}"),
        })?;
    let protocol_version = result
        .get("protocolVersion")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| UpstreamError::Protocol {
            backend: core.name.clone(),
            reason: "initialize result has no protocolVersion".into(),
        })?
        .to_owned();
    let info = Arc::new(InitInfo {
        protocol_version,
        result,
        era: Era::Session,
    });
    Ok(info)
}
