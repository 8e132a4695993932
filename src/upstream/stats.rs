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
    /// The last time a connection became ready, and the last failure.
    health: Mutex<Health>,
    /// Message bytes read from the backend (stdout lines, HTTP bodies).
    pub received_bytes: AtomicU64,
    /// Message bytes written to the backend (stdin lines, HTTP bodies).
    pub sent_bytes: AtomicU64,
    /// Processes that ended, by `Exit::index`.
    exits: [AtomicU64; 4],
    /// Merged lists that went without a fresh list of this backend (down, late,
    /// failed): its last good entries were served, or none.
    pub catalog_last_good: AtomicU64,
    pub catalog_omitted: AtomicU64,
    /// Items of this backend refused because another backend's item has their name.
    pub catalog_conflicts: AtomicU64,
}

/// Why a backend process ended (the `reason` label of `gantry_backend_exits_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with status 0 by itself.
    Clean,
    /// It exited with a non-zero status.
    Error,
    /// A signal Gantry did not send ended it (OOM killer, an operator's `kill`…).
    Signal,
    /// Gantry stopped it (shutdown, idle, failed handshake, closed stdout, hung).
    Stopped,
}

impl Exit {
    pub const ALL: [Exit; 4] = [Self::Clean, Self::Error, Self::Signal, Self::Stopped];

    pub fn label(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Error => "error",
            Self::Signal => "signal",
            Self::Stopped => "stopped",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Clean => 0,
            Self::Error => 1,
            Self::Signal => 2,
            Self::Stopped => 3,
        }
    }

    /// How a process that ended by itself ended.
    pub fn of(status: &std::io::Result<std::process::ExitStatus>) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match status {
            Ok(s) if s.success() => Self::Clean,
            Ok(s) if s.signal().is_some() => Self::Signal,
            _ => Self::Error,
        }
    }
}

#[derive(Default)]
struct Health {
    ready_at: Option<tokio::time::Instant>,
    failed: Option<(tokio::time::Instant, String)>,
}

/// What an operator needs to know about a backend right now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "state", content = "reason")]
pub enum BackendState {
    /// A connection is ready, or the last one to try was (and none is failing).
    Up,
    /// Connections are starting, none has been ready yet.
    Starting,
    /// A ready connection broke and is being restarted.
    Restarting(String),
    /// The last attempt failed (start-up, handshake, or a connection broke for good).
    Down(String),
    /// Never started (per-session and per-user backends start with their sessions).
    Idle,
}

impl BackendState {
    /// Whether it serves calls now (or would: the last connection was fine).
    pub fn is_up(&self) -> bool {
        matches!(self, Self::Up)
    }
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
    /// Counts a process that ended.
    pub(crate) fn exited(&self, why: Exit) {
        if let Some(n) = self.exits.get(why.index()) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Processes that ended so far, by reason.
    pub fn exits(&self) -> impl Iterator<Item = (Exit, u64)> + '_ {
        Exit::ALL
            .into_iter()
            .zip(&self.exits)
            .map(|(e, n)| (e, n.load(Ordering::Relaxed)))
    }

    /// Counts message bytes read from (`received`) or written to the backend.
    pub(crate) fn bytes(&self, received: bool, n: usize) {
        let c = if received {
            &self.received_bytes
        } else {
            &self.sent_bytes
        };
        c.fetch_add(n as u64, Ordering::Relaxed);
    }

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

    /// (live connections, requests waiting for the backend) right now. A parked
    /// connection (`idle_timeout`) has no process or session: not live.
    pub fn load(&self) -> (usize, usize) {
        let mut v = self.conns.lock();
        v.retain(|w| w.strong_count() > 0);
        let live: Vec<_> = v
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.is_closed() && !matches!(*c.state.borrow(), super::core::State::Parked))
            .collect();
        (live.len(), live.iter().map(|c| c.pending_len()).sum())
    }

    pub(super) fn mark_ready(&self) {
        self.health.lock().ready_at = Some(tokio::time::Instant::now());
    }

    pub(super) fn mark_failed(&self, reason: &str) {
        self.health.lock().failed = Some((tokio::time::Instant::now(), reason.to_owned()));
    }

    /// The last failure of any connection (start-up, handshake, crash), and how long
    /// ago it was.
    pub fn last_failure(&self) -> Option<(std::time::Duration, String)> {
        self.health
            .lock()
            .failed
            .as_ref()
            .map(|(at, why)| (at.elapsed(), why.clone()))
    }

    /// The backend's state, from its live connections and, when it has none, from
    /// how the last one fared.
    pub fn state(&self) -> BackendState {
        use super::core::State;
        let live: Vec<Arc<Core>> = {
            let mut v = self.conns.lock();
            v.retain(|w| w.strong_count() > 0);
            v.iter().filter_map(Weak::upgrade).collect()
        };
        let states: Vec<State> = live.iter().map(|c| c.state.borrow().clone()).collect();
        if states.iter().any(|s| matches!(s, State::Ready { .. })) {
            return BackendState::Up;
        }
        if let Some(State::Restarting { reason, .. }) = states
            .iter()
            .find(|s| matches!(s, State::Restarting { .. }))
        {
            return BackendState::Restarting(reason.clone());
        }
        let h = self.health.lock();
        let failed_last = match (&h.failed, h.ready_at) {
            (Some((at, why)), Some(ok)) if *at >= ok => Some(why.clone()),
            (Some((_, why)), None) => Some(why.clone()),
            _ => None,
        };
        if let Some(State::Failed { reason }) =
            states.iter().find(|s| matches!(s, State::Failed { .. }))
        {
            return BackendState::Down(reason.clone());
        }
        if states.iter().any(|s| matches!(s, State::Starting)) {
            return match failed_last {
                Some(why) => BackendState::Restarting(why),
                None => BackendState::Starting,
            };
        }
        match (failed_last, h.ready_at) {
            (Some(why), _) => BackendState::Down(why),
            (None, Some(_)) => BackendState::Up,
            (None, None) => BackendState::Idle,
        }
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
