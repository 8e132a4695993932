//! What is known and counted about one configured backend across all its
//! connections: live connections (and the cap on them), restarts, unattributable
//! messages, and the eras it was found to speak.

use super::core::Core;
use crate::mcp::Era;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Counters of one configured backend, across all its connections (exported as
/// Prometheus metrics).
#[derive(Default)]
pub struct BackendStats {
    /// Backend messages attributable to no single client, dropped.
    pub unattributed: AtomicU64,
    /// Times a connection was restarted after its process exited or its session broke.
    pub restarts: AtomicU64,
    /// Live connections (counted from start until the connection is dropped).
    live: std::sync::atomic::AtomicUsize,
    conns: Mutex<Vec<Weak<Core>>>,
    /// Which eras the backend was found to speak (`era = "auto"`), so that later
    /// connections go straight to the right handshake.
    pub eras: EraSupport,
}

/// What Gantry has learnt about the eras one backend speaks: for each, unknown,
/// yes or no. Learnt by the handshakes of its connections.
#[derive(Default, Debug)]
pub struct EraSupport([std::sync::atomic::AtomicU8; 2]);

impl EraSupport {
    const YES: u8 = 1;
    const NO: u8 = 2;

    /// Whether the backend speaks `era` (`None`: not known yet).
    pub fn get(&self, era: Era) -> Option<bool> {
        match self.0.get(era.index())?.load(Ordering::Relaxed) {
            Self::YES => Some(true),
            Self::NO => Some(false),
            _ => None,
        }
    }

    /// Records what a handshake found out.
    pub fn set(&self, era: Era, speaks: bool) {
        if let Some(a) = self.0.get(era.index()) {
            a.store(if speaks { Self::YES } else { Self::NO }, Ordering::Relaxed);
        }
    }

    /// The era a caller of `era` is served in: its own unless the backend is known
    /// not to speak it (then the other, with translation).
    pub fn serving(&self, era: Era) -> Era {
        if self.get(era) == Some(false) && self.get(era.other()) != Some(false) {
            era.other()
        } else {
            era
        }
    }
}

impl BackendStats {
    pub(super) fn track(&self, c: &Arc<Core>) {
        let mut v = self.conns.lock();
        v.retain(|w| w.strong_count() > 0);
        v.push(std::sync::Arc::downgrade(c));
    }

    /// Reserves a connection under `max` (0 = no limit); false when the cap is reached.
    /// The reservation is released when the connection's core is dropped.
    pub fn try_reserve(&self, max: usize) -> bool {
        use std::sync::atomic::Ordering::AcqRel;
        let mut cur = self.live.load(Ordering::Acquire);
        loop {
            if max > 0 && cur >= max {
                return false;
            }
            match self
                .live
                .compare_exchange(cur, cur + 1, AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn release(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// (live connections, requests waiting for the backend) right now.
    pub fn load(&self) -> (usize, usize) {
        let mut v = self.conns.lock();
        v.retain(|w| w.strong_count() > 0);
        let live: Vec<_> = v
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.is_closed())
            .collect();
        (live.len(), live.iter().map(|c| c.pending_len()).sum())
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
