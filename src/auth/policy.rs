//! Who may use which tool, prompt or resource (`[[auth.rules]]`): globs over the
//! names clients see, each rule asking for scopes (an OAuth caller without them is
//! told to step up: 403 `insufficient_scope`) and/or naming the principals allowed
//! (anyone else is told the item does not exist). What a caller may not use is
//! absent from its lists.

use super::Principal;
use crate::config::RuleConfig;
use std::sync::Arc;

/// What kind of item a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Tool,
    Prompt,
    Resource,
}

/// May this caller use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// An OAuth caller lacking scopes: `missing`, and what to ask for (granted +
    /// missing).
    StepUp {
        missing: String,
        ask: String,
    },
    /// Not for this caller: as if it did not exist.
    Deny,
}

struct Rule {
    tools: Vec<String>,
    prompts: Vec<String>,
    resources: Vec<String>,
    scopes: Vec<String>,
    principals: Vec<String>,
}

/// The configured rules.
pub struct Policy {
    rules: Vec<Rule>,
}

/// `*` (any run of characters, `/` included) and `?` (one character) globs.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(c) if *c == '?' || Some(c) == n.get(ni) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
}

impl Policy {
    /// The rules of a validated config; `None` when there are none.
    pub fn new(rules: &[RuleConfig]) -> Option<Arc<Self>> {
        if rules.is_empty() {
            return None;
        }
        Some(Arc::new(Self {
            rules: rules
                .iter()
                .map(|r| Rule {
                    tools: r.tools.clone(),
                    prompts: r.prompts.clone(),
                    resources: r.resources.clone(),
                    scopes: r.scopes.clone(),
                    principals: r.principals.clone(),
                })
                .collect(),
        }))
    }

    /// Whether `who` may use the item `name`: every rule that matches it must pass.
    pub fn decide(&self, who: &Principal, item: Item, name: &str) -> Decision {
        let granted: &[String] = who.token().map_or(&[], |t| t.scopes.as_slice());
        let mut missing: Vec<&str> = Vec::new();
        for r in &self.rules {
            let globs = match item {
                Item::Tool => &r.tools,
                Item::Prompt => &r.prompts,
                Item::Resource => &r.resources,
            };
            if !globs.iter().any(|g| glob(g, name)) {
                continue;
            }
            if !r.principals.is_empty() && !r.principals.iter().any(|p| p == who.as_str()) {
                return Decision::Deny;
            }
            for s in &r.scopes {
                if !granted.contains(s) && !missing.contains(&s.as_str()) {
                    missing.push(s);
                }
            }
        }
        if missing.is_empty() {
            return Decision::Allow;
        }
        if who.token().is_none() {
            // An API key or anonymous caller has no scopes and cannot step up.
            return Decision::Deny;
        }
        // Never `offline_access` in a challenge (SEP-2207): not a resource's scope.
        let mut ask: Vec<&str> = granted
            .iter()
            .map(String::as_str)
            .filter(|s| *s != "offline_access")
            .collect();
        ask.extend(missing.iter().copied());
        Decision::StepUp {
            missing: missing.join(" "),
            ask: ask.join(" "),
        }
    }
}

/// One caller under the policy, as a request carries it.
pub struct Access {
    pub policy: Arc<Policy>,
    pub caller: Principal,
}

impl Access {
    pub fn decide(&self, item: Item, name: &str) -> Decision {
        self.policy.decide(&self.caller, item, name)
    }

    /// Whether the item is in the caller's lists (usable as it is, no step-up).
    pub fn visible(&self, item: Item, name: &str) -> bool {
        self.decide(item, name) == Decision::Allow
    }
}

/// What a request uses: the item and its name, for the methods that use one.
pub fn item_of(method: &str, params: Option<&crate::jsonrpc::Raw>) -> Option<(Item, String)> {
    let (item, field) = match method {
        "tools/call" => (Item::Tool, "name"),
        "prompts/get" => (Item::Prompt, "name"),
        "resources/read" | "resources/subscribe" => (Item::Resource, "uri"),
        _ => return None,
    };
    crate::jsonrpc::string_field(params, field).map(|n| (item, n))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::auth::oauth::TokenInfo;

    #[test]
    fn globs() {
        for (p, n) in [
            ("*", "x"),
            ("admin__*", "admin__drop"),
            ("*__delete_*", "gh__delete_repo"),
            ("file:///secret/*", "file:///secret/a/b"),
            ("t?ol", "tool"),
            ("exact", "exact"),
        ] {
            assert!(glob(p, n), "{p} {n}");
        }
        for (p, n) in [
            ("admin__*", "admin_x"),
            ("exact", "exact2"),
            ("t?ol", "tooool"),
            ("a*b", "ac"),
        ] {
            assert!(!glob(p, n), "{p} {n}");
        }
    }

    fn rule(tools: &[&str], scopes: &[&str], principals: &[&str]) -> RuleConfig {
        let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect();
        RuleConfig {
            tools: v(tools),
            prompts: Vec::new(),
            resources: Vec::new(),
            scopes: v(scopes),
            principals: v(principals),
        }
    }

    fn oauth(sub: &str, scopes: &[&str]) -> Principal {
        Principal::from_token(TokenInfo {
            issuer: "https://idp".into(),
            subject: sub.into(),
            client_id: None,
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            expires_at: None,
        })
    }

    #[test]
    fn scopes_step_up_principals_deny() {
        let p = Policy::new(&[
            rule(&["admin__*"], &["mcp:admin"], &[]),
            rule(&["admin__drop"], &[], &["alice@https://idp", "ops"]),
        ])
        .unwrap();
        let reader = oauth("bob", &["mcp:read"]);
        assert_eq!(p.decide(&reader, Item::Tool, "echo"), Decision::Allow);
        assert_eq!(
            p.decide(&reader, Item::Tool, "admin__list"),
            Decision::StepUp {
                missing: "mcp:admin".into(),
                ask: "mcp:read mcp:admin".into()
            }
        );
        assert_eq!(p.decide(&reader, Item::Tool, "admin__drop"), Decision::Deny);
        // The challenge never asks for offline_access, even when it was granted.
        let offline = oauth("bob", &["mcp:read", "offline_access"]);
        assert_eq!(
            p.decide(&offline, Item::Tool, "admin__list"),
            Decision::StepUp {
                missing: "mcp:admin".into(),
                ask: "mcp:read mcp:admin".into()
            }
        );
        let alice = oauth("alice", &["mcp:admin"]);
        assert_eq!(p.decide(&alice, Item::Tool, "admin__drop"), Decision::Allow);
        // A key has no scopes to step up with.
        assert_eq!(
            p.decide(&Principal::named("ops"), Item::Tool, "admin__list"),
            Decision::Deny
        );
        assert_eq!(
            p.decide(&Principal::named("ops"), Item::Prompt, "admin__list"),
            Decision::Allow
        );
    }
}
