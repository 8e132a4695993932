//! Gantry: an MCP gateway. Streamable HTTP (and legacy HTTP+SSE) in front; stdio
//! child processes and Streamable HTTP servers behind; ids rewritten so nothing is
//! ever misrouted.
#![forbid(unsafe_code)]

pub mod auth;
pub mod bounded;
pub mod call;
pub mod cancel;
pub mod config;
pub mod fault;

pub mod front;
pub mod jsonrpc;
pub mod limits;
pub mod mcp;
pub mod process_tree;
pub mod router;
pub mod session;
pub mod sse;
pub mod status_cli;
pub mod supervisor;
pub mod telemetry;
#[cfg(test)]
mod testkit;
pub mod upstream;

/// A hash map of Gantry's own state on a call's path: foldhash, seeded at random per
/// process (keys a client picks, such as request ids, cannot be aimed at one bucket
/// without the seed), several times cheaper per lookup than std's SipHash.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The set of [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A future on the heap, built there: `make` writes it into a slot allocated first.
/// `Box::pin(make())` builds it on the stack and copies all of it, however little of
/// it is set before its first poll; a call path's futures are kilobytes, allocated
/// per request.
#[inline(always)]
pub(crate) fn boxed_in_place<F>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    let slot = Box::new_uninit();
    Box::into_pin(Box::write(slot, make()))
}

/// `0.1.0 (commit 1a2b3c4d5e6f, 2026-12-01)`: the version, and the commit it was built
/// from with that commit's date (see build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GANTRY_COMMIT"),
    ", ",
    env!("GANTRY_COMMIT_DATE"),
    ")"
);
