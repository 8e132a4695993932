//! What the environment adds to the file, applied to its tree before it is read:
//!
//! 1. `${VAR}` / `${VAR:-default}` in every string value (`$$` is a literal `$`);
//! 2. `<key>_file = "/path"` anywhere: `<key>` is the file's contents (one trailing
//!    newline dropped), for secrets mounted as files (Kubernetes Secrets, Docker
//!    secrets);
//! 3. `GANTRY_<SECTION>_<KEY>` variables (`GANTRY_SERVER_MAX_SESSIONS=500`,
//!    `GANTRY_CATALOG_PAGE_SIZE=100`, `GANTRY_NAMESPACING_SEPARATOR=-`) and
//!    `GANTRY_BACKENDS_<NAME>_<KEY>` for a backend of the file
//!    (`GANTRY_BACKENDS_GITHUB_REQUEST_TIMEOUT=30s`, `…_POOL_MAX_CONNECTIONS=8`): the
//!    value is read as a TOML value when it is one (`500`, `true`, `["a", "b"]`,
//!    `{ cert = "…", key = "…" }`), else as a string. They override the file; flags
//!    override them.

use toml::{Table, Value};

/// Largest file a `*_file` key may name.
const MAX_SECRET_FILE: u64 = 1 << 20;

/// Keys that may be given as `<key>_file`: the secrets (besides every value of a
/// `headers` or `env` table).
const SECRET_KEYS: [&str; 7] = [
    "client_secret",
    "sha256",
    "url",
    "endpoint",
    "token",
    "state_key",
    "redis_url",
];

/// Sections whose keys `GANTRY_<SECTION>_<KEY>` sets.
const SECTIONS: [&str; 3] = ["server", "catalog", "namespacing"];

/// Backend sub-tables whose keys `GANTRY_BACKENDS_<NAME>_<TABLE>_<KEY>` sets.
const BACKEND_TABLES: [&str; 2] = ["pool", "restart"];

/// Applies the environment to `tree` (see the module docs); returns every problem,
/// each naming its key or variable.
pub(super) fn prepare(
    tree: &mut Table,
    env: &dyn Fn(&str) -> Option<String>,
    vars: &[(String, String)],
) -> Vec<String> {
    let mut problems = Vec::new();
    interpolate_all(tree, "", env, &mut problems);
    read_files(tree, "", &mut problems);
    overlay(tree, vars, &mut problems);
    problems
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn interpolate_value(
    v: &mut Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) {
    match v {
        Value::String(s) => match super::interpolate(s, env) {
            Ok(r) => *s = r,
            Err(var) => problems.push(format!("{path}: environment variable `{var}` is not set")),
        },
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate_value(item, &format!("{path}[{i}]"), env, problems);
            }
        }
        Value::Table(t) => interpolate_all(t, path, env, problems),
        _ => {}
    }
}

fn interpolate_all(
    t: &mut Table,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) {
    for (k, v) in t.iter_mut() {
        interpolate_value(v, &join(path, k), env, problems);
    }
}

fn read_files(t: &mut Table, path: &str, problems: &mut Vec<String>) {
    let map = path.ends_with("headers") || path.ends_with(".env");
    let keys: Vec<String> = t
        .iter()
        .filter(|(k, v)| {
            let base = k.strip_suffix("_file").unwrap_or_default();
            !base.is_empty() && v.is_str() && (map || SECRET_KEYS.contains(&base))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        let base = k.trim_end_matches("_file").to_owned();
        let key = join(path, &k);
        if t.contains_key(&base) {
            problems.push(format!("{key}: set either `{base}` or `{k}`, not both"));
            continue;
        }
        let Some(Value::String(file)) = t.remove(&k) else {
            problems.push(format!("{key}: must be the path of a file (a string)"));
            continue;
        };
        match read_secret(&file) {
            Ok(text) => {
                t.insert(base, Value::String(text));
            }
            Err(e) => problems.push(format!("{key}: `{file}`: {e}")),
        }
    }
    for (k, v) in t.iter_mut() {
        match v {
            Value::Table(sub) => read_files(sub, &join(path, k), problems),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Table(sub) = item {
                        read_files(sub, &format!("{}[{i}]", join(path, k)), problems);
                    }
                }
            }
            _ => {}
        }
    }
}

fn read_secret(file: &str) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    if meta.len() > MAX_SECRET_FILE {
        return Err(format!("larger than {MAX_SECRET_FILE} bytes"));
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_owned())
}

/// A variable's value as TOML: a value when it reads as one, else a string.
fn value_of(raw: &str) -> Value {
    toml::from_str::<Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(raw.to_owned()))
}

/// A backend name as it appears in a variable name: upper case, `-` as `_`.
fn env_name(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

fn overlay(tree: &mut Table, vars: &[(String, String)], problems: &mut Vec<String>) {
    let mut sorted: Vec<&(String, String)> = vars.iter().collect();
    sorted.sort();
    for (var, raw) in sorted {
        let Some(rest) = var.strip_prefix("GANTRY_") else {
            continue;
        };
        if let Some(section) = SECTIONS
            .iter()
            .find(|s| rest.starts_with(&format!("{}_", s.to_ascii_uppercase())))
        {
            let key = rest
                .get(section.len() + 1..)
                .unwrap_or_default()
                .to_ascii_lowercase();
            if key.is_empty() {
                problems.push(format!("{var}: names no key of [{section}]"));
                continue;
            }
            let table = tree
                .entry(section.to_string())
                .or_insert_with(|| Value::Table(Table::new()));
            match table {
                Value::Table(t) => {
                    t.insert(key, value_of(raw));
                }
                _ => problems.push(format!("{var}: `{section}` in the file is not a table")),
            }
        } else if let Some(rest) = rest.strip_prefix("BACKENDS_") {
            overlay_backend(tree, var, rest, raw, problems);
        }
    }
}

fn overlay_backend(tree: &mut Table, var: &str, rest: &str, raw: &str, problems: &mut Vec<String>) {
    let Some(Value::Array(backends)) = tree.get_mut("backends") else {
        problems.push(format!("{var}: the file has no [[backends]]"));
        return;
    };
    // The longest backend name that fits: `A_B_KEY` is backend `a-b`'s `key` when
    // both `a` and `a-b` exist.
    let mut best: Option<(usize, String)> = None;
    for (i, b) in backends.iter().enumerate() {
        let Some(name) = b.get("name").and_then(Value::as_str) else {
            continue;
        };
        let upper = env_name(name);
        if let Some(key) = rest.strip_prefix(&upper).and_then(|r| r.strip_prefix('_')) {
            if best.as_ref().is_none_or(|(j, _)| {
                backends
                    .get(*j)
                    .and_then(|b| b.get("name"))
                    .and_then(Value::as_str)
                    .is_none_or(|n| n.len() < name.len())
            }) {
                best = Some((i, key.to_ascii_lowercase()));
            }
        }
    }
    let Some((i, key)) = best.filter(|(_, k)| !k.is_empty()) else {
        problems.push(format!(
            "{var}: names no backend of the file (GANTRY_BACKENDS_<NAME>_<KEY>, the name in upper case with `-` as `_`)"
        ));
        return;
    };
    let Some(Value::Table(b)) = backends.get_mut(i) else {
        return;
    };
    let value = value_of(raw);
    match BACKEND_TABLES
        .iter()
        .find(|t| key.starts_with(&format!("{t}_")))
    {
        Some(sub) => {
            let inner = key.get(sub.len() + 1..).unwrap_or_default().to_owned();
            match b
                .entry(sub.to_string())
                .or_insert_with(|| Value::Table(Table::new()))
            {
                Value::Table(t) => {
                    t.insert(inner, value);
                }
                _ => problems.push(format!("{var}: `{sub}` of the backend is not a table")),
            }
        }
        None => {
            b.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn variables_set_keys_and_values_read_as_toml() {
        let mut t: Table = toml::from_str(
            "[server]\nlisten = \"${HOST:-127.0.0.1}:1\"\n[[backends]]\nname = \"a\"\n[[backends]]\nname = \"a-b\"\n",
        )
        .unwrap();
        let p = prepare(
            &mut t,
            &|_| None,
            &vars(&[
                ("GANTRY_SERVER_MAX_SESSIONS", "5"),
                ("GANTRY_SERVER_PATH", "/x"),
                ("GANTRY_BACKENDS_A_B_REQUEST_TIMEOUT", "3s"),
                ("GANTRY_BACKENDS_A_POOL_MAX_CONNECTIONS", "2"),
                ("GANTRY_COMMIT", "ignored"),
            ]),
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(t["server"]["listen"].as_str(), Some("127.0.0.1:1"));
        assert_eq!(t["server"]["max_sessions"].as_integer(), Some(5));
        assert_eq!(t["server"]["path"].as_str(), Some("/x"));
        assert_eq!(t["backends"][1]["request_timeout"].as_str(), Some("3s"));
        assert_eq!(
            t["backends"][0]["pool"]["max_connections"].as_integer(),
            Some(2)
        );
        let p = prepare(&mut t, &|_| None, &vars(&[("GANTRY_BACKENDS_NOPE_X", "1")]));
        assert!(p[0].contains("names no backend"), "{p:?}");
    }

    #[test]
    fn secrets_come_from_files_and_only_for_secret_keys() {
        let dir = std::env::temp_dir().join(format!("gantry-environ-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let s = secret.display().to_string();
        let mut t: Table = toml::from_str(&format!(
            "[[backends]]\nname = \"a\"\nhttp = {{ url = \"http://x\", headers = {{ Authorization_file = {s:?} }} }}\n\
             tools = {{ rename = {{ read_file = \"r\" }} }}\n\
             [[auth.api_keys]]\nprincipal = \"p\"\nsha256_file = {s:?}\n"
        ))
        .unwrap();
        let p = prepare(&mut t, &|_| None, &[]);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            t["backends"][0]["http"]["headers"]["Authorization"].as_str(),
            Some("s3cret")
        );
        assert_eq!(t["auth"]["api_keys"][0]["sha256"].as_str(), Some("s3cret"));
        assert_eq!(
            t["backends"][0]["tools"]["rename"]["read_file"].as_str(),
            Some("r"),
            "a tool named *_file is no secret"
        );
        let mut t: Table =
            toml::from_str("[limits.redis]\nurl_file = \"/no/such/file\"\n").unwrap();
        let p = prepare(&mut t, &|_| None, &[]);
        assert!(
            p[0].starts_with("limits.redis.url_file: `/no/such/file`"),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
