//! What one backend connection last listed, per kind: the merged catalog answers
//! from it instead of asking the backend again. An entry is stale once the backend
//! announces a change of its kind (`notifications/*/list_changed`), once the
//! incarnation it came from is gone (a restart), or past its time to live; a stale
//! entry is still the *last good* copy, served while the backend cannot answer.
//!
//! Every announced change (and every change Gantry finds on its own when it lists
//! again) bumps a counter per kind that routes watch ([`ListCache::subscribe`]):
//! that is how a change reaches the client sessions.

use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// The kinds of list a backend has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// `tools/list`.
    Tools = 0,
    /// `prompts/list`.
    Prompts = 1,
    /// `resources/list`.
    Resources = 2,
    /// `resources/templates/list`.
    Templates = 3,
}

impl ListKind {
    /// Every kind, in counter order.
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::Templates,
    ];

    /// Position in [`ListCache::subscribe`]'s counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The capability a backend declares for the kind.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::Templates => "resources",
        }
    }

    /// The list's field in a result.
    pub fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The list method.
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The notification a client gets when the kind changes.
    pub fn notification(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources | ListKind::Templates => "notifications/resources/list_changed",
        }
    }

    /// The kinds a backend's `notifications/*/list_changed` is about.
    pub fn changed_by(method: &str) -> &'static [ListKind] {
        match method {
            "notifications/tools/list_changed" => &[ListKind::Tools],
            "notifications/prompts/list_changed" => &[ListKind::Prompts],
            "notifications/resources/list_changed" => &[ListKind::Resources, ListKind::Templates],
            _ => &[],
        }
    }
}

/// One kind's last list: every item of every page, as the backend sent them.
#[derive(Clone)]
pub struct Listed {
    /// The items.
    pub items: Arc<Vec<Value>>,
    /// The incarnation that listed them.
    pub gen: u64,
    /// When.
    pub at: Instant,
    /// The backend announced a change since.
    pub stale: bool,
    digest: u64,
}

/// A connection's lists (see the module docs).
pub struct ListCache {
    entries: [Mutex<Option<Listed>>; 4],
    fills: [tokio::sync::Mutex<()>; 4],
    changed: watch::Sender<[u64; 4]>,
}

impl Default for ListCache {
    fn default() -> Self {
        Self {
            entries: Default::default(),
            fills: Default::default(),
            changed: watch::channel([0; 4]).0,
        }
    }
}

/// 64-bit FNV-1a over the items' JSON: equal lists, equal digests.
fn digest(items: &[Value]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for item in items {
        for b in item.to_string().bytes().chain([b'\n']) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl ListCache {
    /// The last list of `kind`, fresh or not.
    pub fn get(&self, kind: ListKind) -> Option<Listed> {
        self.entries.get(kind.index())?.lock().clone()
    }

    /// Held while one caller lists `kind` from the backend, so concurrent callers
    /// wait for its result instead of asking too.
    pub fn fill_lock(&self, kind: ListKind) -> Option<&tokio::sync::Mutex<()>> {
        self.fills.get(kind.index())
    }

    /// The backend announced a change of `kinds`: their lists are stale, and the
    /// routes hear of it.
    pub fn announce(&self, kinds: &[ListKind]) {
        for k in kinds {
            if let Some(e) = self.entries.get(k.index()) {
                if let Some(l) = e.lock().as_mut() {
                    l.stale = true;
                }
            }
        }
        self.bump(kinds);
    }

    /// Stores what incarnation `gen` listed, and returns it with the kind's change
    /// counter after it. A list that differs from the copy before it (or is the
    /// first) is a change the routes hear of — a restart, a time to live that ran
    /// out, a list that came after a client stopped waiting for it; the caller
    /// that stored it knows the new list already (the counter returned).
    pub fn store(&self, kind: ListKind, gen: u64, items: Vec<Value>) -> (Arc<Vec<Value>>, u64) {
        let d = digest(&items);
        let items = Arc::new(items);
        let Some(entry) = self.entries.get(kind.index()) else {
            return (items, 0);
        };
        let mut e = entry.lock();
        let new = e.as_ref().is_none_or(|old| old.digest != d);
        *e = Some(Listed {
            items: items.clone(),
            gen,
            at: Instant::now(),
            stale: false,
            digest: d,
        });
        // Bumped under the entry's lock: a reader that sees the new entry sees its
        // counter too.
        if new {
            self.bump(&[kind]);
        }
        drop(e);
        (items, self.counter(kind))
    }

    /// The change counter of `kind`.
    pub fn counter(&self, kind: ListKind) -> u64 {
        self.changed
            .borrow()
            .get(kind.index())
            .copied()
            .unwrap_or(0)
    }

    fn bump(&self, kinds: &[ListKind]) {
        self.changed.send_modify(|c| {
            for k in kinds {
                if let Some(n) = c.get_mut(k.index()) {
                    *n += 1;
                }
            }
        });
    }

    /// How many changes of each kind there have been (by [`ListKind::index`]).
    pub fn subscribe(&self) -> watch::Receiver<[u64; 4]> {
        self.changed.subscribe()
    }

    /// The current change counters.
    pub fn counters(&self) -> [u64; 4] {
        *self.changed.borrow()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn announced_changes_count_once_and_unannounced_ones_are_found() {
        let c = ListCache::default();
        let (_, n) = c.store(ListKind::Tools, 1, vec![json!({"name": "a"})]);
        assert_eq!(n, 1, "a first list is news to the routes that had none");
        c.store(ListKind::Tools, 1, vec![json!({"name": "a"})]);
        assert_eq!(
            c.counters(),
            [1, 0, 0, 0],
            "the same list again is no change"
        );
        c.announce(&[ListKind::Tools]);
        assert!(c.get(ListKind::Tools).unwrap().stale);
        assert_eq!(c.counters(), [2, 0, 0, 0]);
        c.store(ListKind::Tools, 1, vec![json!({"name": "a"})]);
        assert_eq!(
            c.counters(),
            [2, 0, 0, 0],
            "announced, but the same: nothing new"
        );
        let (_, n) = c.store(ListKind::Tools, 2, vec![json!({"name": "c"})]);
        assert_eq!(n, 3, "a change found on listing counts");
        c.announce(ListKind::changed_by("notifications/resources/list_changed"));
        assert_eq!(c.counters(), [3, 0, 1, 1]);
    }
}
