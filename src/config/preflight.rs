//! Checks of a valid configuration against the machine it runs on: does each stdio
//! backend's command exist, as the child will look it up? Is something written in a
//! way that will not do what it looks like? Logged at start-up and reported by
//! `gantry check-config`.

use super::{BackendConfig, Config};
use std::path::{Path, PathBuf};

/// One finding about one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Where: ``backends[0] (`files`).stdio.command``.
    pub key: String,
    /// What is wrong, and what to do.
    pub problem: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

/// Everything found about `cfg`'s backends on this machine (`env` is Gantry's own
/// environment, from which the children inherit what they inherit).
pub fn check(cfg: &Config, env: &dyn Fn(&str) -> Option<String>) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(t) = &cfg.server.tls {
        if let Err(e) = crate::front::tls::load(&t.cert, &t.key) {
            out.push(Finding {
                key: "server.tls".into(),
                problem: e.to_string(),
            });
        }
    }
    for (i, b) in cfg.backends.iter().enumerate() {
        check_backend(&format!("backends[{i}] (`{}`)", b.name), b, env, &mut out);
    }
    out
}

fn check_backend(
    key: &str,
    b: &BackendConfig,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<Finding>,
) {
    let Some(s) = &b.stdio else { return };
    // The child's PATH: its own `env` table, else Gantry's if it is inherited.
    let path = s.env.get("PATH").cloned().or_else(|| {
        s.inherit_env
            .iter()
            .any(|k| k == "PATH")
            .then(|| env("PATH"))
            .flatten()
    });
    let cwd = s.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    if let Err(problem) = resolve(&s.command, path.as_deref(), &cwd) {
        out.push(Finding {
            key: format!("{key}.stdio.command"),
            problem,
        });
    }
    for (j, a) in s.args.iter().enumerate() {
        if unexpanded(a).is_some() {
            out.push(Finding {
                key: format!("{key}.stdio.args[{j}]"),
                problem: format!(
                    "`{a}` is passed as written: there is no shell; only `${{VAR}}` is \
                     replaced (write `${{{}}}`, or the value)",
                    unexpanded(a).unwrap_or("VAR")
                ),
            });
        }
    }
}

/// A shell-style `$NAME` in an argument, if any (`${NAME}` was replaced when the
/// file was read; what is left of it was written `$${NAME}`, meant as is).
fn unexpanded(arg: &str) -> Option<&str> {
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        let after = rest.get(at + 1..)?;
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let n = after.get(..end)?;
        if !n.is_empty() && n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return Some(n);
        }
        rest = after;
    }
    None
}

/// Finds `command` as the child will (`PATH` lookup unless it holds a `/`).
fn resolve(command: &str, path: Option<&str>, cwd: &Path) -> Result<PathBuf, String> {
    if command.contains('/') {
        let p = cwd.join(command);
        return if executable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(format!("`{command}` exists but is not executable"))
        } else {
            Err(format!("`{command}` does not exist"))
        };
    }
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Err(format!(
            "`{command}` cannot be found: the child has no PATH (inherit it, or set env.PATH)"
        ));
    };
    std::env::split_paths(path)
        .map(|dir| cwd.join(dir).join(command))
        .find(|p| executable(p))
        .ok_or_else(|| {
            format!("`{command}` is not found in the child's PATH ({path}); install it or give its full path")
        })
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_as_the_child_finds_them() {
        let here = Path::new(".");
        assert!(resolve("sh", Some("/usr/bin:/bin"), here).is_ok());
        let e = resolve("no-such-cmd-xyz", Some("/usr/bin:/bin"), here).unwrap_err();
        assert!(
            e.contains("not found in the child's PATH (/usr/bin:/bin)"),
            "{e}"
        );
        assert!(resolve("sh", None, here).unwrap_err().contains("no PATH"));
        assert!(resolve("/bin/sh", None, here).is_ok());
        assert!(resolve("/no/such/file", None, here)
            .unwrap_err()
            .contains("does not exist"));
        let plain = std::env::temp_dir().join(format!("gantry-preflight-{}", std::process::id()));
        std::fs::write(&plain, "not a program").unwrap();
        let shown = plain.to_string_lossy().into_owned();
        let e = resolve(&shown, None, here).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(e.contains("not executable"), "{e}");
    }

    #[test]
    fn unexpanded_variables_are_spotted() {
        assert_eq!(unexpanded("$HOME/data"), Some("HOME"));
        // What is left of `${…}` was written `$${…}`: meant as is.
        assert_eq!(unexpanded("${HOME}/data"), None);
        assert_eq!(unexpanded("--root=$ROOT"), Some("ROOT"));
        assert_eq!(unexpanded("costs $5"), None);
        assert_eq!(unexpanded("plain"), None);
    }
}
