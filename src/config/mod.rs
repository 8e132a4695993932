//! Typed configuration: the TOML file as written ([`ConfigFile`]) and its validated,
//! immutable runtime form ([`Config`]).
//!
//! Validation reports *every* problem with its key path, so a bad file never starts a
//! half-working gateway. `${VAR}` in backend env values, headers and URLs is replaced
//! by the environment variable `VAR` at load time (a missing variable is an error).

use std::net::SocketAddr;

/// Everything that can be wrong with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message, with line and key.
        message: String,
    },
    /// The file parsed, but some values are wrong: one line per problem.
    #[error("{path}: invalid configuration:\n{}", problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The file (or `command line`).
        path: String,
        /// Each problem as `key.path: what is wrong`.
        problems: Vec<String>,
    },
}

mod file;
pub mod preflight;
mod validate;

pub use file::*;
pub use validate::*;

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Front door settings.
    pub server: ServerConfig,
    /// Resolved listen address.
    pub listen: SocketAddr,
    /// Namespacing.
    pub namespacing: NamespacingConfig,
    /// Backends, at least one.
    pub backends: Vec<BackendConfig>,
    /// Authentication (validated: principals well-formed, digests 64 hex, unique).
    pub auth: AuthConfig,
}

impl Config {
    /// Reads, parses and validates a TOML file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_toml(&text, &shown)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        file.validate(origin, &|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::time::Duration;

    fn env(k: &str) -> Option<String> {
        (k == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn interpolation() {
        assert_eq!(
            interpolate("Bearer ${TOKEN}", &env).unwrap(),
            "Bearer s3cret"
        );
        assert_eq!(interpolate("a$$b$c", &env).unwrap(), "a$b$c");
        assert_eq!(interpolate("${NOPE}", &env).unwrap_err(), "NOPE");
    }

    #[test]
    fn reports_every_problem_with_its_key() {
        let text = r#"
            [server]
            listen = "nowhere"
            [[backends]]
            name = "bad name"
            [[backends]]
            name = "x"
            stdio = { command = "a" }
            http = { url = "ftp://x", headers = { Authorization = "${NOPE}" } }
        "#;
        let file: ConfigFile = toml::from_str(text).unwrap();
        let err = file.validate("t.toml", &env).unwrap_err().to_string();
        for want in [
            "server.listen",
            "backends[0].name",
            "backends[0]: set one of",
            "backends[1]: set either",
        ] {
            assert!(err.contains(want), "missing {want} in {err}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = Config::from_toml("[server]\nlisten_on = \"x\"\n", "t.toml").unwrap_err();
        assert!(err.to_string().contains("listen_on"), "{err}");
    }

    #[test]
    fn good_file() {
        let text = r#"
            [[backends]]
            name = "remote"
            http = { url = "http://127.0.0.1:9/mcp", headers = { Authorization = "Bearer ${TOKEN}" } }
            request_timeout = "2s"
        "#;
        let file: ConfigFile = toml::from_str(text).unwrap();
        let cfg = file.validate("t.toml", &env).unwrap();
        let b = cfg.backends.first().unwrap();
        let h = b.http.as_ref().unwrap();
        assert_eq!(h.headers.get("Authorization").unwrap(), "Bearer s3cret");
        assert_eq!(b.request_timeout, Duration::from_secs(2));
    }

    #[test]
    fn auth_keys_are_validated_with_their_key_paths() {
        let good = "72ee9d4355ccb9d3a4c9dbf37382e38e75c1b1a225b5bd1f729ee91bbda30c20";
        let text = format!(
            r#"
            [[backends]]
            name = "x"
            stdio = {{ command = "a" }}
            [[auth.api_keys]]
            principal = "alice"
            sha256 = "{good}"
            [[auth.api_keys]]
            principal = ""
            sha256 = "my-plain-secret-key"
            [[auth.api_keys]]
            principal = "bob"
            sha256 = "{upper}"
            [[auth.api_keys]]
            principal = "anonymous"
            sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            "#,
            upper = good.to_ascii_uppercase()
        );
        let file: ConfigFile = toml::from_str(&text).unwrap();
        let err = file.validate("t.toml", &env).unwrap_err().to_string();
        for want in [
            "auth.api_keys[1].principal",
            "auth.api_keys[1].sha256: must be 64 hexadecimal",
            "auth.api_keys[2].sha256: the same key as auth.api_keys[0]",
            "auth.api_keys[3].principal: `anonymous` is reserved",
            "auth.api_keys[3].sha256: is the SHA-256 of an empty key",
        ] {
            assert!(err.contains(want), "missing {want} in {err}");
        }
        assert!(!err.contains("my-plain-secret-key"), "{err}");
        assert!(!err.contains("auth.api_keys[0]."), "{err}");

        let ok = format!(
            "[[backends]]\nname = \"x\"\nstdio = {{ command = \"a\" }}\n\
             [[auth.api_keys]]\nprincipal = \"alice@example.com\"\nsha256 = \"{}\"\n",
            good.to_ascii_uppercase()
        );
        let cfg = Config::from_toml(&ok, "t.toml").unwrap();
        let k = cfg.auth.api_keys.first().unwrap();
        assert_eq!(k.sha256, good, "digests are normalised to lower case");
        assert!(
            !format!("{cfg:?}").contains(good),
            "Debug must not print digests"
        );
    }
}
