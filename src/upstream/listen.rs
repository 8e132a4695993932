//! The `subscriptions/listen` Gantry keeps open on a stateless-era backend: the
//! list changes it declares and the resources clients subscribed to, reopened when
//! they change; a subscription counts as in force once the backend acknowledged a
//! listen stream that carries it.

use super::core::{Core, State};
use super::handshake::own_meta;
use crate::jsonrpc::to_raw;
use crate::mcp::listen::ListenFilter;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a `resources/subscribe` for a stateless-era backend waits for the
/// backend to acknowledge the listen stream that carries it.
pub(super) const LISTEN_ACK_WAIT: Duration = Duration::from_secs(5);
/// How long a backend's `subscriptions/listen` may stay open before Gantry renews it.
const LISTEN_RENEW: Duration = Duration::from_secs(24 * 3600);

/// Keeps one `subscriptions/listen` open on a stateless-era backend while it is up:
/// list changes it declares and updates of the resources clients subscribed to.
/// What arrives on it goes to the connection's owner like any session-era
/// notification. Reopened after a restart, when the subscribed resources change,
/// and (after a pause) when the backend ends it.
pub(super) async fn keep_listening(core: Arc<Core>, shutdown: CancellationToken) {
    let mut state = core.state.subscribe();
    loop {
        let ready = match &*state.borrow_and_update() {
            State::Ready { gen, info } if info.is_stateless() => Some((*gen, info.clone())),
            State::Closed => return,
            _ => None,
        };
        let Some((gen, info)) = ready else {
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = shutdown.cancelled() => return,
            }
            continue;
        };
        let (uris, version): (Vec<String>, u64) = {
            let set = core.listen_uris.lock();
            let version = core.listen_version.load(Ordering::Acquire);
            (set.iter().cloned().collect(), version)
        };
        let filter = ListenFilter::all_declared(info.capabilities(), uris);
        if filter.is_empty() {
            // Nothing to listen for: nothing to wait for either.
            core.listen_acked.send_if_modified(|acked| {
                let newer = version > *acked;
                if newer {
                    *acked = version;
                }
                newer
            });
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = core.listen_changed.notified() => {}
                _ = shutdown.cancelled() => return,
            }
            continue;
        }
        let params = to_raw(
            &serde_json::json!({ "notifications": filter.to_json(), "_meta": own_meta(&core) }),
        );
        let cancel = CancellationToken::new();
        let listen = core.send_request(
            gen,
            "subscriptions/listen",
            Some(params).into(),
            None,
            &cancel,
            LISTEN_RENEW,
            Vec::new(),
            Some(version),
        );
        tokio::select! {
            r = listen => {
                tracing::debug!(backend = %core.name, ended = ?r.as_ref().map(|_| ()), "backend listen stream ended");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            r = state.changed() => { cancel.cancel(); if r.is_err() { return } }
            _ = core.listen_changed.notified() => cancel.cancel(),
            _ = shutdown.cancelled() => { cancel.cancel(); return }
        }
    }
}
