//! The pending table of one backend connection: every request Gantry has sent and
//! not yet seen answered, keyed by the upstream id Gantry gave it.
//!
//! An entry is the only way back to the exact call (its reply channel and its
//! [`Sink`]); it is removed exactly once — by the response, or by the call ending
//! any other way (cancel, timeout, crash, shutdown) — so a late response finds
//! nothing and is dropped, never delivered to another call.

use super::error::UpstreamError;
use crate::call::Sink;
use crate::jsonrpc::Response;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::oneshot;

/// One request waiting for the backend's answer.
pub(super) struct Pending {
    /// The backend incarnation the request was sent to.
    pub(super) gen: u64,
    /// The call's sink; `None` for Gantry's own requests (initialize, listen).
    pub(super) sink: Option<Sink>,
    /// The progress token the client chose, restored on the way back.
    pub(super) client_progress: Option<Value>,
    /// Gantry's `subscriptions/listen`: the version of the subscribed resources it
    /// carries (its acknowledgement puts them in force).
    pub(super) listen_version: Option<u64>,
    pub(super) reply: oneshot::Sender<Result<Response, UpstreamError>>,
}

/// The requests in flight on one connection.
#[derive(Default)]
pub(super) struct PendingTable {
    map: Mutex<crate::FastMap<u64, Pending>>,
}

impl PendingTable {
    pub(super) fn insert(&self, id: u64, p: Pending) {
        self.map.lock().insert(id, p);
    }

    /// Removes and returns request `id`'s entry (`None`: answered or ended already).
    pub(super) fn take(&self, id: u64) -> Option<Pending> {
        self.map.lock().remove(&id)
    }

    /// Removes every entry of incarnation `gen` (all when `None`).
    pub(super) fn take_gen(&self, gen: Option<u64>) -> Vec<Pending> {
        let mut p = self.map.lock();
        let ids: Vec<u64> = p
            .iter()
            .filter(|(_, e)| gen.is_none_or(|g| e.gen == g))
            .map(|(k, _)| *k)
            .collect();
        ids.into_iter().filter_map(|k| p.remove(&k)).collect()
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.map.lock().contains_key(&id)
    }

    /// Client calls waiting (Gantry's own requests are not counted).
    pub(super) fn calls(&self) -> usize {
        self.map
            .lock()
            .values()
            .filter(|p| p.sink.is_some())
            .count()
    }

    /// Where a message the backend sent belongs: to the call `related` names if it is
    /// one, else to the only call in flight, else to nobody.
    pub(super) fn attribute(&self, related: Option<u64>) -> Option<Sink> {
        let p = self.map.lock();
        if let Some(sink) = related
            .and_then(|id| p.get(&id))
            .and_then(|e| e.sink.clone())
        {
            return Some(sink);
        }
        let mut calls = p.values().filter_map(|e| e.sink.as_ref());
        match (calls.next(), calls.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }

    /// The call a rewritten progress token belongs to, and the client's own token.
    pub(super) fn progress_route(&self, token: u64) -> Option<(Sink, Value)> {
        let p = self.map.lock();
        let e = p.get(&token)?;
        Some((e.sink.clone()?, e.client_progress.clone()?))
    }

    /// The resource version listen request `id` carries, if it is a pending listen.
    pub(super) fn listen_version(&self, id: u64) -> Option<u64> {
        self.map.lock().get(&id)?.listen_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(gen: u64) -> (Pending, oneshot::Receiver<Result<Response, UpstreamError>>) {
        let (reply, rx) = oneshot::channel();
        let p = Pending {
            gen,
            sink: None,
            client_progress: None,
            listen_version: Some(gen),
            reply,
        };
        (p, rx)
    }

    #[test]
    fn an_entry_is_taken_once() {
        let t = PendingTable::default();
        let (p, _rx) = entry(1);
        t.insert(7, p);
        assert!(t.contains(7));
        assert_eq!(t.listen_version(7), Some(1));
        assert!(t.take(7).is_some());
        assert!(t.take(7).is_none(), "a late response finds nothing");
        assert!(!t.contains(7));
    }

    #[test]
    fn a_dead_incarnation_takes_only_its_own() {
        let t = PendingTable::default();
        for (id, gen) in [(1, 1), (2, 2), (3, 1)] {
            t.insert(id, entry(gen).0);
        }
        let mut gone: Vec<u64> = t.take_gen(Some(1)).iter().map(|p| p.gen).collect();
        gone.sort_unstable();
        assert_eq!(gone, [1, 1]);
        assert!(t.contains(2));
        assert_eq!(t.take_gen(None).len(), 1);
        assert!(!t.contains(2));
    }

    #[test]
    fn gantrys_own_requests_are_not_calls_and_claim_nothing() {
        let t = PendingTable::default();
        t.insert(1, entry(1).0);
        assert_eq!(t.calls(), 0);
        assert!(t.attribute(Some(1)).is_none());
        assert!(t.attribute(None).is_none());
    }
}
