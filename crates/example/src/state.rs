//! Server-wide state of the example server, shared by every session-era session and
//! every stateless (2026-07-28) request: which eras are served, the list-changed
//! broadcast, the fixture lists that `test_trigger_*_change` mutate, and the key
//! that seals MRTR `requestState`.
//!
//! Over Streamable HTTP rmcp builds a fresh handler for each session and for each
//! stateless request, so anything that must outlive one request (an open
//! `subscriptions/listen` stream, a dynamic tool) lives here, behind an `Arc`.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

use rmcp::model::{ProtocolVersion, RequestStateCodec, RequestStateError, SealOptions};
use serde_json::Value;
use tokio::sync::broadcast;

/// How long a sealed `requestState` stays valid.
const REQUEST_STATE_TTL: Duration = Duration::from_secs(600);
/// Pending list-changed events per subscriber before the slowest one lags.
const CHANGE_CHANNEL_CAPACITY: usize = 64;

/// Which protocol eras the server speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eras {
    /// The session era (`initialize`, 2024-11-05 .. 2025-11-25) and the stateless
    /// era (per-request `_meta`, 2026-07-28), chosen by how each client opens.
    #[default]
    Both,
    /// Only the session era, like a server written before 2026-07-28:
    /// `server/discover` is unknown and every client must `initialize` first.
    SessionOnly,
    /// Both eras, but the tools that ask the client (`test_sampling`,
    /// `test_elicitation`, …) work in the session era only, as in many real servers
    /// whose SDK cannot ask a stateless-era client: asked statelessly they fail with
    /// a tool error (`MCP error -32601: Method not found`) instead of answering
    /// `input_required`.
    BothWithSessionEraPeerTools,
}

impl Eras {
    /// The protocol versions served (and advertised by `server/discover`).
    pub fn versions(self) -> &'static [ProtocolVersion] {
        match self {
            Eras::Both | Eras::BothWithSessionEraPeerTools => {
                ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28)
            }
            Eras::SessionOnly => ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25),
        }
    }
}

/// A change of a list the client may watch (`notifications/*/list_changed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListChange {
    Tools,
    Prompts,
}

/// State shared by all handlers of one server process.
pub(super) struct ServerState {
    eras: Eras,
    changes: broadcast::Sender<ListChange>,
    /// Whether `test_dynamic_tool` is listed (toggled by `test_trigger_tool_change`).
    dynamic_tool: AtomicBool,
    /// Whether `test_dynamic_prompt` is listed (toggled by `test_trigger_prompt_change`).
    dynamic_prompt: AtomicBool,
    /// Version of `test://watched-resource` as seen by stateless requests; bumped
    /// while a `subscriptions/listen` stream watches it.
    watched_version: AtomicU64,
    state_codec: RequestStateCodec,
}

impl ServerState {
    /// Fresh state with a random per-process `requestState` key.
    pub(super) fn new(eras: Eras) -> Result<Self, RequestStateError> {
        let key: [u8; 32] = rand::random();
        Ok(Self {
            eras,
            changes: broadcast::channel(CHANGE_CHANNEL_CAPACITY).0,
            dynamic_tool: AtomicBool::new(false),
            dynamic_prompt: AtomicBool::new(false),
            watched_version: AtomicU64::new(0),
            state_codec: RequestStateCodec::try_new(key.to_vec())?,
        })
    }

    pub(super) fn eras(&self) -> Eras {
        self.eras
    }

    /// Receives every list change from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<ListChange> {
        self.changes.subscribe()
    }

    /// Toggles the dynamic tool or prompt and tells every subscriber.
    pub(super) fn change(&self, list: ListChange) {
        let flag = match list {
            ListChange::Tools => &self.dynamic_tool,
            ListChange::Prompts => &self.dynamic_prompt,
        };
        flag.fetch_xor(true, Ordering::Relaxed);
        // No receiver is not an error: nobody is listening right now.
        let _ = self.changes.send(list);
    }

    pub(super) fn has_dynamic_tool(&self) -> bool {
        self.dynamic_tool.load(Ordering::Relaxed)
    }

    pub(super) fn has_dynamic_prompt(&self) -> bool {
        self.dynamic_prompt.load(Ordering::Relaxed)
    }

    pub(super) fn watched_version(&self) -> u64 {
        self.watched_version.load(Ordering::Relaxed)
    }

    pub(super) fn bump_watched_version(&self) {
        self.watched_version.fetch_add(1, Ordering::Relaxed);
    }

    /// Seals an MRTR state so that only this process can open it, and only for
    /// the same `binding` (method and target), within [`REQUEST_STATE_TTL`].
    pub(super) fn seal_state(
        &self,
        state: &Value,
        binding: &str,
    ) -> Result<String, RequestStateError> {
        let options = SealOptions::new()
            .associated_data(binding.as_bytes())
            .ttl(REQUEST_STATE_TTL);
        self.state_codec.seal_json_with(state, &options)
    }

    /// Opens a `requestState` echoed by a client; fails if it was forged,
    /// tampered with, sealed for another binding or expired.
    pub(super) fn open_state(
        &self,
        sealed: &str,
        binding: &str,
    ) -> Result<Value, RequestStateError> {
        self.state_codec.open_json_with(sealed, binding.as_bytes())
    }
}
