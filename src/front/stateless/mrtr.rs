//! Multi-round-trip requests (2026-07-28) in front of session-era backends.
//!
//! A session-era backend that needs sampling, elicitation or roots *while* serving a
//! stateless-era client's call sends a server→client request and waits. Gantry
//! cannot send that request to the client (the stateless era has none), so it answers
//! the client's call with `resultType: "input_required"` listing the backend's
//! requests as `inputRequests`, and **parks** the backend call here. The client
//! retries with `inputResponses` and the opaque `requestState`; Gantry finds the
//! parked call, hands the answers to the backend and goes on waiting for the call's
//! result (or the next round of input requests).
//!
//! `requestState` is `g1.<parked id>.<expiry ms>.<mac>`, the MAC an HMAC-SHA256 under
//! a key drawn at start-up over the id, the expiry, the principal, the method and the
//! tool / prompt / resource name. So a state cannot be forged, altered, replayed by
//! another principal, or replayed against another call; a parked call is taken out
//! of the table when its state is redeemed, so a state also works only once. Parked
//! calls that are not resumed before their expiry are dropped, which cancels the
//! backend call (`notifications/cancelled` upstream).

use crate::call::ClientAnswer;
use crate::jsonrpc::Raw;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use dashmap::DashMap;
use hmac::{Hmac, KeyInit, Mac};
use indexmap::IndexMap;
use rand::RngCore;
use sha2::Sha256;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Parked calls one principal may hold at once.
const MAX_PARKED_PER_PRINCIPAL: usize = 64;

/// One server→client request of a backend, waiting for the client's answer.
pub(crate) struct Ask {
    /// `sampling/createMessage`, `elicitation/create` or `roots/list`.
    pub method: String,
    /// Its params, untouched.
    pub params: Option<Raw>,
    /// Where the answer goes.
    pub reply: oneshot::Sender<ClientAnswer>,
}

/// What a call is, for binding its `requestState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    /// Who called.
    pub principal: Arc<str>,
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'static str,
    /// The tool / prompt name or resource URI.
    pub name: String,
}

/// A call waiting for a client's input.
pub(crate) struct Parked<C> {
    /// The running call (dropping it cancels it).
    pub call: C,
    /// Its open requests by input key, in the order they were asked.
    pub asks: IndexMap<String, Ask>,
    binding: Binding,
    expires_ms: u64,
}

/// Why a retry's `requestState` was refused. Each is a `-32602` for the client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum StateError {
    /// Not a state Gantry issued, altered, or issued for another caller or call.
    #[error("requestState is not valid for this request")]
    Invalid,
    /// Issued by Gantry but past its expiry; the backend call was cancelled.
    #[error("requestState has expired; the call was cancelled, start it again")]
    Expired,
    /// Already redeemed (a replay), or the call ended meanwhile.
    #[error("requestState was already used or its call has ended; start the call again")]
    Gone,
}

/// Why a call could not be parked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("too many calls of this caller are waiting for input")]
pub(crate) struct TooMany;

/// The parked calls of the front door.
pub(crate) struct Mrtr<C> {
    key: [u8; 32],
    ttl: Duration,
    next: AtomicU64,
    parked: DashMap<u64, Parked<C>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl<C> Mrtr<C> {
    /// A table whose parked calls live at most `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        Self {
            key,
            ttl,
            next: AtomicU64::new(1),
            parked: DashMap::new(),
        }
    }

    /// The MAC of a state: over its kind, payload and expiry and the binding, each
    /// length-prefixed. Empty (never verifies) only if HMAC refused the key, which it
    /// does not for any length.
    fn mac(&self, kind: &str, payload: &str, expires_ms: u64, b: &Binding) -> Vec<u8> {
        let Ok(mut m) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key) else {
            return Vec::new();
        };
        for part in [
            kind.as_bytes(),
            payload.as_bytes(),
            expires_ms.to_string().as_bytes(),
            b.principal.as_bytes(),
            b.method.as_bytes(),
            b.name.as_bytes(),
        ] {
            m.update(&(part.len() as u64).to_be_bytes());
            m.update(part);
        }
        m.finalize().into_bytes().to_vec()
    }

    /// A state `kind.payload.expiry.mac`, valid for `binding` until `ttl` from now.
    fn seal(&self, kind: &str, payload: &str, binding: &Binding) -> (String, u64) {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let expires_ms = now_ms().saturating_add(ttl_ms);
        let mac = URL_SAFE_NO_PAD.encode(self.mac(kind, payload, expires_ms, binding));
        (format!("{kind}.{payload}.{expires_ms}.{mac}"), expires_ms)
    }

    /// The payload and expiry of a state of `kind`, if it is genuine and for
    /// `binding` (expiry not checked here).
    fn open<'s>(
        &self,
        kind: &str,
        state: &'s str,
        binding: &Binding,
    ) -> Result<(&'s str, u64), StateError> {
        let mut parts = state.split('.');
        let (Some(k), Some(payload), Some(exp), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(StateError::Invalid);
        };
        // The expiry exactly as it was sealed (`u64::to_string`): no sign, no leading
        // zero, so no other spelling of the same number opens.
        let canonical =
            |e: &str| e.bytes().all(|b| b.is_ascii_digit()) && (e == "0" || !e.starts_with('0'));
        let (true, true, Ok(expires_ms), Ok(mac)) = (
            k == kind,
            canonical(exp),
            exp.parse::<u64>(),
            URL_SAFE_NO_PAD.decode(mac),
        ) else {
            return Err(StateError::Invalid);
        };
        let expected = self.mac(kind, payload, expires_ms, binding);
        if expected.is_empty()
            || !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], &mac[..]))
        {
            return Err(StateError::Invalid);
        }
        Ok((payload, expires_ms))
    }

    /// Parks `call` with its open `asks`; returns the `requestState` to give the client.
    pub(crate) fn park(
        &self,
        call: C,
        asks: IndexMap<String, Ask>,
        binding: Binding,
    ) -> Result<String, (TooMany, C)> {
        let held = self
            .parked
            .iter()
            .filter(|e| e.value().binding.principal == binding.principal)
            .count();
        if held >= MAX_PARKED_PER_PRINCIPAL {
            return Err((TooMany, call));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (state, expires_ms) = self.seal("g1", &id.to_string(), &binding);
        self.parked.insert(
            id,
            Parked {
                call,
                asks,
                binding,
                expires_ms,
            },
        );
        Ok(state)
    }

    /// Takes the parked call `state` names, if `state` is genuine and for `binding`.
    pub(crate) fn redeem(&self, state: &str, binding: &Binding) -> Result<Parked<C>, StateError> {
        let (id, expires_ms) = self.open("g1", state, binding)?;
        let id = id.parse::<u64>().map_err(|_| StateError::Invalid)?;
        if now_ms() > expires_ms {
            // Dropped by the sweeper already, or now.
            self.parked.remove(&id);
            return Err(StateError::Expired);
        }
        match self.parked.remove(&id) {
            Some((_, p)) if p.binding == *binding => Ok(p),
            Some((id, p)) => {
                // Cannot happen with a verified MAC; keep the call for its owner.
                self.parked.insert(id, p);
                Err(StateError::Invalid)
            }
            None => Err(StateError::Gone),
        }
    }

    /// Wraps a stateless-era backend's own `requestState` so that only this caller
    /// can return it, for this call, before the expiry: `g2.<state>.<expiry>.<mac>`.
    pub(crate) fn seal_foreign(&self, state: &str, binding: &Binding) -> String {
        self.seal("g2", &URL_SAFE_NO_PAD.encode(state.as_bytes()), binding)
            .0
    }

    /// The backend's `requestState` inside a `g2.` state, if genuine, unexpired and
    /// for `binding`.
    pub(crate) fn open_foreign(
        &self,
        state: &str,
        binding: &Binding,
    ) -> Result<String, StateError> {
        let (inner, expires_ms) = self.open("g2", state, binding)?;
        if now_ms() > expires_ms {
            return Err(StateError::Expired);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(inner)
            .map_err(|_| StateError::Invalid)?;
        String::from_utf8(bytes).map_err(|_| StateError::Invalid)
    }

    /// Drops every parked call past its expiry (cancelling it). Returns how many.
    pub(crate) fn sweep(&self) -> usize {
        let now = now_ms();
        let before = self.parked.len();
        self.parked.retain(|_, p| p.expires_ms >= now);
        before.saturating_sub(self.parked.len())
    }

    /// Calls parked now.
    pub(crate) fn len(&self) -> usize {
        self.parked.len()
    }

    /// Drops every parked call (shutdown).
    pub(crate) fn clear(&self) {
        self.parked.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn binding(p: &str) -> Binding {
        Binding {
            principal: p.into(),
            method: "tools/call",
            name: "ask".into(),
        }
    }

    #[test]
    fn a_state_works_once_for_its_owner_only() {
        let m: Mrtr<u32> = Mrtr::new(Duration::from_secs(60));
        let state = m.park(7, IndexMap::new(), binding("alice")).unwrap();
        assert_eq!(
            m.redeem(&state, &binding("bob")).err(),
            Some(StateError::Invalid)
        );
        let other_call = Binding {
            name: "other".into(),
            ..binding("alice")
        };
        assert_eq!(
            m.redeem(&state, &other_call).err(),
            Some(StateError::Invalid)
        );
        assert_eq!(
            m.redeem(&state, &binding("alice")).map(|p| p.call).ok(),
            Some(7)
        );
        assert_eq!(
            m.redeem(&state, &binding("alice")).err(),
            Some(StateError::Gone)
        );
    }

    #[test]
    fn altered_or_foreign_states_are_refused() {
        let m: Mrtr<u32> = Mrtr::new(Duration::from_secs(60));
        let state = m.park(1, IndexMap::new(), binding("alice")).unwrap();
        let other: Mrtr<u32> = Mrtr::new(Duration::from_secs(60));
        assert_eq!(
            other.redeem(&state, &binding("alice")).err(),
            Some(StateError::Invalid)
        );
        for bad in [
            format!("{state}-TAMPERED"),
            state.replacen("g1.1.", "g1.2.", 1),
            String::new(),
            "g1.1.2".into(),
            "g1.x.y.z".into(),
        ] {
            assert_eq!(
                m.redeem(&bad, &binding("alice")).err(),
                Some(StateError::Invalid),
                "{bad}"
            );
        }
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn foreign_states_round_trip_for_their_owner_only() {
        let m: Mrtr<u32> = Mrtr::new(Duration::from_secs(60));
        let sealed = m.seal_foreign("backend.state-1", &binding("alice"));
        assert_eq!(
            m.open_foreign(&sealed, &binding("alice")).as_deref(),
            Ok("backend.state-1")
        );
        assert_eq!(
            m.open_foreign(&sealed, &binding("bob")),
            Err(StateError::Invalid)
        );
        let tampered = format!("{sealed}-TAMPERED");
        assert_eq!(
            m.open_foreign(&tampered, &binding("alice")),
            Err(StateError::Invalid)
        );
        assert_eq!(
            m.redeem(&sealed, &binding("alice")).err(),
            Some(StateError::Invalid)
        );
    }

    #[test]
    fn expired_calls_are_swept_and_their_states_refused() {
        let m: Mrtr<u32> = Mrtr::new(Duration::ZERO);
        let state = m.park(1, IndexMap::new(), binding("alice")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(m.sweep(), 1);
        assert_eq!(m.len(), 0);
        assert_eq!(
            m.redeem(&state, &binding("alice")).err(),
            Some(StateError::Expired)
        );
    }
}

#[cfg(test)]
mod props {
    //! Property tests of sealed `requestState` values: opening what a client sends
    //! never panics and succeeds only for a state this table sealed, unaltered, for
    //! the same call.
    use super::*;
    use crate::testkit::config;
    use proptest::prelude::*;

    fn table() -> Mrtr<u32> {
        Mrtr::new(Duration::from_secs(60))
    }

    fn binding() -> impl Strategy<Value = Binding> {
        (
            prop_oneof!["[a-z]{0,6}", any::<String>()],
            prop::sample::select(vec!["tools/call", "prompts/get", "resources/read"]),
            prop_oneof!["[a-z]{0,6}", any::<String>()],
        )
            .prop_map(|(principal, method, name)| Binding {
                principal: principal.into(),
                method,
                name,
            })
    }

    /// Strings a client could send: anything, and things shaped like a state (kind,
    /// payload, expiry, a MAC-sized Base64 tail).
    fn state_like() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "g[12]\\.[0-9A-Za-z_-]{0,12}\\.[+0-9]{0,20}\\.[A-Za-z0-9_-]{0,60}",
            ("g[12]", 0u64..100, any::<u64>(), "[A-Za-z0-9_-]{43}")
                .prop_map(|(k, id, exp, mac)| format!("{k}.{id}.{exp}.{mac}")),
            "[.g12]{0,12}",
        ]
    }

    /// One edit of a string: replace, insert or delete the character at a position.
    #[derive(Debug, Clone)]
    enum Edit {
        Replace(usize, char),
        Insert(usize, char),
        /// Insert at the start of a part (after its `n`th dot, modulo their count).
        InsertInPart(usize, char),
        Delete(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let c = prop_oneof![
            3 => prop::sample::select(vec!['.', '0', '1', '9', '+', '-', '_', 'A', 'g', '=', ' ']),
            1 => any::<char>(),
        ];
        prop_oneof![
            1 => (any::<usize>(), c.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
            1 => (any::<usize>(), c.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
            // Where a part starts is where a lenient reader would skip a sign or a zero.
            2 => (any::<usize>(), c).prop_map(|(i, c)| Edit::InsertInPart(i, c)),
            1 => any::<usize>().prop_map(Edit::Delete),
        ]
    }

    /// `s` with `edit` applied (positions modulo the length), if that changes it.
    fn apply(s: &str, edit: &Edit) -> Option<String> {
        let mut cs: Vec<char> = s.chars().collect();
        match *edit {
            Edit::Replace(i, c) => {
                let i = i % cs.len();
                if cs[i] == c {
                    return None;
                }
                cs[i] = c;
            }
            Edit::Insert(i, c) => cs.insert(i % (cs.len() + 1), c),
            Edit::InsertInPart(n, c) => {
                let dots: Vec<usize> = (0..cs.len()).filter(|&i| cs[i] == '.').collect();
                let at = dots.get(n % dots.len().max(1)).map_or(0, |d| d + 1);
                cs.insert(at, c);
            }
            Edit::Delete(i) => {
                cs.remove(i % cs.len());
            }
        }
        Some(cs.into_iter().collect())
    }

    proptest! {
        #![proptest_config(config(256))]

        /// A table that sealed nothing opens nothing.
        #[test]
        fn arbitrary_states_never_open(s in state_like(), b in binding()) {
            let m = table();
            prop_assert_eq!(m.open("g1", &s, &b).err(), Some(StateError::Invalid));
            prop_assert_eq!(m.open("g2", &s, &b).err(), Some(StateError::Invalid));
            prop_assert_eq!(m.redeem(&s, &b).err(), Some(StateError::Invalid));
            prop_assert_eq!(m.open_foreign(&s, &b), Err(StateError::Invalid));
        }

        #[test]
        fn sealed_states_open_for_their_table_and_call_only(
            payload in "[^.]{0,24}",
            kind in prop::sample::select(vec!["g1", "g2", "x"]),
            b in binding(),
            other in binding(),
        ) {
            let m = table();
            let (state, expires_ms) = m.seal(kind, &payload, &b);
            prop_assert_eq!(m.open(kind, &state, &b), Ok((payload.as_str(), expires_ms)));
            // Another key, another call, another kind: refused.
            prop_assert_eq!(table().open(kind, &state, &b).err(), Some(StateError::Invalid));
            if other != b {
                prop_assert_eq!(m.open(kind, &state, &other).err(), Some(StateError::Invalid));
            }
            let wrong = if kind == "g1" { "g2" } else { "g1" };
            prop_assert_eq!(m.open(wrong, &state, &b).err(), Some(StateError::Invalid));
        }

        #[test]
        fn foreign_states_round_trip(inner in any::<String>(), b in binding()) {
            let m = table();
            let sealed = m.seal_foreign(&inner, &b);
            prop_assert_eq!(m.open_foreign(&sealed, &b), Ok(inner));
            prop_assert_eq!(table().open_foreign(&sealed, &b), Err(StateError::Invalid));
            prop_assert_eq!(m.redeem(&sealed, &b).err(), Some(StateError::Invalid));
        }

        #[test]
        fn parked_calls_are_redeemed_once(call in any::<u32>(), b in binding()) {
            let m = table();
            let state = m.park(call, IndexMap::new(), b.clone()).map_err(|_| TestCaseError::fail("park"))?;
            prop_assert_eq!(m.open_foreign(&state, &b), Err(StateError::Invalid));
            prop_assert_eq!(m.redeem(&state, &b).map(|p| p.call).ok(), Some(call));
            prop_assert_eq!(m.redeem(&state, &b).err(), Some(StateError::Gone));
        }

        /// Any one character replaced, inserted or removed: refused.
        #[test]
        fn altered_states_never_open(
            inner in "[ -~]{0,12}",
            foreign in any::<bool>(),
            b in binding(),
            edit in edit(),
        ) {
            let m = table();
            let state = if foreign {
                m.seal_foreign(&inner, &b)
            } else {
                m.park(1, IndexMap::new(), b.clone()).map_err(|_| TestCaseError::fail("park"))?
            };
            let Some(altered) = apply(&state, &edit) else { return Ok(()) };
            prop_assert_eq!(m.open_foreign(&altered, &b), Err(StateError::Invalid), "{} -> {}", state, altered);
            prop_assert_eq!(m.redeem(&altered, &b).err(), Some(StateError::Invalid), "{} -> {}", state, altered);
            // The genuine state still works.
            if foreign {
                prop_assert_eq!(m.open_foreign(&state, &b), Ok(inner));
            } else {
                prop_assert_eq!(m.redeem(&state, &b).map(|p| p.call).ok(), Some(1));
            }
        }
    }
}
