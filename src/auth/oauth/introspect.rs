//! Opaque access tokens, checked with the issuer's RFC 7662 introspection endpoint;
//! answers kept in a bounded cache keyed by the token's SHA-256 (never the token),
//! for at most `introspection_cache_ttl` and never past the token's `exp`.

use super::{OAuthError, Resource, TokenInfo};
use serde_json::Value;
use std::time::Duration;

/// An inactive answer is reused at most this long (a token may become active only
/// by being issued anew, but keep the window short).
pub(super) const NEGATIVE_TTL: Duration = Duration::from_secs(10);

pub(super) type Answer = Result<TokenInfo, OAuthError>;

/// Introspection answers by token digest.
pub(super) type Cache = super::cache::TokenCache<Answer>;

/// What an introspection answer says, checked: active, for this resource, of this
/// issuer, not expired, with a subject. `Err` for an answer that does not let the
/// token in; the `u64` is the token's `exp`, if given.
pub(super) fn read_answer(
    doc: &Value,
    issuer: &str,
    resource: &Resource,
    audiences: &[String],
) -> (Answer, Option<u64>) {
    let invalid = |label: &'static str, why: String| Err(OAuthError::Invalid(label, why));
    let exp = doc.get("exp").and_then(Value::as_u64);
    if doc.get("active") != Some(&Value::Bool(true)) {
        return (
            invalid(
                "inactive",
                "the token is not active (expired, revoked or unknown to the issuer)".into(),
            ),
            None,
        );
    }
    if exp.is_some_and(|e| e <= super::now_secs()) {
        return (invalid("expired", "the token has expired".into()), exp);
    }
    if let Some(iss) = doc.get("iss").and_then(Value::as_str) {
        if iss != issuer {
            return (
                invalid(
                    "untrusted_issuer",
                    "the token's issuer does not match".into(),
                ),
                exp,
            );
        }
    }
    let for_us = super::names_us(doc.get("aud"), resource, audiences);
    if !for_us {
        return (
            invalid(
                "audience",
                format!(
                    "the token's audience is not this server ({})",
                    resource.url()
                ),
            ),
            exp,
        );
    }
    let Some(subject) = doc
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return (
            invalid("missing_claim", "the token has no subject".into()),
            exp,
        );
    };
    let scopes = doc
        .get("scope")
        .and_then(Value::as_str)
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    (
        Ok(TokenInfo {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            client_id: doc
                .get("client_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            scopes,
            expires_at: exp,
        }),
        exp,
    )
}
