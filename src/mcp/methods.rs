//! Method tables of both eras: which methods 2026-07-28 removed, which results carry
//! caching hints, which client capability a server→client request needs, and the
//! log levels with their order.

/// Methods of the session era that 2026-07-28 removed.
pub const REMOVED_IN_STATELESS: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Methods whose complete stateless-era results say how long they may be cached
/// (`ttlMs`, `cacheScope`).
pub const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// The client capability a server→client request (or an `input_required` input
/// request) needs, if any.
pub fn required_capability(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// RFC 5424 severities as MCP names them, least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of a level name (0 = debug … 7 = emergency).
pub fn level_rank(name: &str) -> Option<u8> {
    LOG_LEVELS
        .iter()
        .position(|l| *l == name)
        .and_then(|p| u8::try_from(p).ok())
}

/// The name of a level rank (`None` past emergency).
pub fn level_name(rank: u8) -> Option<&'static str> {
    LOG_LEVELS.get(usize::from(rank)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables() {
        assert_eq!(level_rank("debug"), Some(0));
        assert_eq!(level_rank("warning"), Some(3));
        assert_eq!(level_rank("emergency"), Some(7));
        assert_eq!(level_rank("loud"), None);
        assert_eq!(level_name(3), Some("warning"));
        assert_eq!(level_name(8), None);
        assert_eq!(required_capability("roots/list"), Some("roots"));
        assert_eq!(required_capability("tools/call"), None);
        assert!(REMOVED_IN_STATELESS.contains(&"ping"));
        assert!(!REMOVED_IN_STATELESS.contains(&"tools/call"));
        assert!(CACHEABLE.contains(&"resources/read"));
    }
}
