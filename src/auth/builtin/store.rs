//! The built-in authorization server's state — clients, consents, codes, refresh
//! tokens, grants, pending logins, signing keys — behind one small key-value trait
//! ([`Store`]) with the three atomic operations the protocol needs: store-unless-
//! present (a refresh token used once, a signing key per period), take (a code used
//! once) and expiry. Two implementations: SQLite (one file, the default; survives
//! restarts) and Redis (shared by replicas).
//!
//! Invariants: values are opaque bytes to the store; callers put only hashes of
//! bearer secrets in keys and values (a leaked store lets nobody in) and encrypt the
//! private keys; an expired entry is never returned.

use async_trait::async_trait;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What an entry is (its namespace in the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A registered client (dynamic registration), by `client_id`.
    Client,
    /// An approval on the consent page, by user and client.
    Consent,
    /// An authorization request between `/authorize` and the redirect back.
    Pending,
    /// An authorization code not yet exchanged, by its hash.
    Code,
    /// A code already exchanged, by its hash: the grant it started (for replays).
    CodeUsed,
    /// A refresh token, by its hash.
    Refresh,
    /// A refresh token already rotated out, by its hash: when.
    RefreshUsed,
    /// A revoked grant, by its id.
    Revoked,
    /// A signing key, by its period.
    Key,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Consent => "consent",
            Self::Pending => "pending",
            Self::Code => "code",
            Self::CodeUsed => "code_used",
            Self::Refresh => "refresh",
            Self::RefreshUsed => "refresh_used",
            Self::Revoked => "revoked",
            Self::Key => "key",
        }
    }
}

/// The store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (disk, corruption, a lock held too long).
    #[error("the auth state file: {0}")]
    Sqlite(String),
    /// Redis failed or did not answer in time.
    #[error("the auth state in Redis: {0}")]
    Redis(String),
}

/// Durable key-value state with expiry.
#[async_trait]
pub trait Store: Send + Sync {
    /// The value, unless absent or expired.
    async fn get(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores `value` (replacing any), expiring after `ttl` (never with `None`).
    async fn put(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), StoreError>;
    /// Stores `value` unless an unexpired entry is there: `None` when stored, else
    /// the value already there (untouched). Atomic.
    async fn put_new(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the entry and returns it (unless absent or expired). Atomic: of two
    /// concurrent takes, one gets the value.
    async fn take(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the entry.
    async fn delete(&self, kind: Kind, key: &str) -> Result<(), StoreError>;
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn expiry(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|t| now_ms().saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX)))
}

/// The SQLite store: one file, one table, WAL journal.
pub struct SqliteStore {
    conn: Arc<Mutex<rusqlite::Connection>>,
    path: PathBuf,
    writes: AtomicU64,
}

impl SqliteStore {
    /// Opens (or creates, mode 0600) the file and its table.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let fail = |e: rusqlite::Error| StoreError::Sqlite(format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Sqlite(format!("{}: {e}", dir.display())))?;
        }
        let fresh = !path.exists();
        let conn = rusqlite::Connection::open(path).map_err(fail)?;
        if fresh {
            restrict(path);
        }
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS kv (
                 kind TEXT NOT NULL,
                 key TEXT NOT NULL,
                 value BLOB NOT NULL,
                 expires_at INTEGER,
                 PRIMARY KEY (kind, key)
             ) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL;",
        )
        .map_err(fail)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_owned(),
            writes: AtomicU64::new(0),
        })
    }

    /// Runs `f` on the connection off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock();
            f(&mut c)
        })
        .await
        .map_err(|e| StoreError::Sqlite(format!("{}: {e}", path.display())))?
        .map_err(|e| StoreError::Sqlite(format!("{}: {e}", self.path.display())))
    }

    /// Every 256th write also removes expired entries.
    fn purge_due(&self) -> bool {
        self.writes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(256)
    }
}

#[cfg(unix)]
fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot make the auth state file private");
    }
}

#[cfg(not(unix))]
fn restrict(_path: &Path) {}

const SELECT: &str =
    "SELECT value FROM kv WHERE kind = ?1 AND key = ?2 AND (expires_at IS NULL OR expires_at > ?3)";

fn select(
    c: &rusqlite::Connection,
    kind: &str,
    key: &str,
    now: i64,
) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::OptionalExtension as _;
    c.query_row(SELECT, rusqlite::params![kind, key, now], |r| r.get(0))
        .optional()
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        self.with(move |c| select(c, kind.as_str(), &key, now_ms()))
            .await
    }

    async fn put(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (key, value, purge) = (key.to_owned(), value.to_vec(), self.purge_due());
        self.with(move |c| {
            if purge {
                c.execute(
                    "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?1",
                    [now_ms()],
                )?;
            }
            c.execute(
                "INSERT OR REPLACE INTO kv (kind, key, value, expires_at) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![kind.as_str(), key, value, expiry(ttl)],
            )
            .map(drop)
        })
        .await
    }

    async fn put_new(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (key, value) = (key.to_owned(), value.to_vec());
        self.with(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            if let Some(old) = select(&tx, kind.as_str(), &key, now_ms())? {
                return Ok(Some(old));
            }
            tx.execute(
                "INSERT OR REPLACE INTO kv (kind, key, value, expires_at) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![kind.as_str(), key, value, expiry(ttl)],
            )?;
            tx.commit()?;
            Ok(None)
        })
        .await
    }

    async fn take(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_owned();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let v = select(&tx, kind.as_str(), &key, now_ms())?;
            tx.execute(
                "DELETE FROM kv WHERE kind = ?1 AND key = ?2",
                rusqlite::params![kind.as_str(), key],
            )?;
            tx.commit()?;
            Ok(v)
        })
        .await
    }

    async fn delete(&self, kind: Kind, key: &str) -> Result<(), StoreError> {
        let key = key.to_owned();
        self.with(move |c| {
            c.execute(
                "DELETE FROM kv WHERE kind = ?1 AND key = ?2",
                rusqlite::params![kind.as_str(), key],
            )
            .map(drop)
        })
        .await
    }
}

/// Stores unless present (KEYS[1]; ARGV[1] value, ARGV[2] ttl in ms or 0): the value
/// already there, or nil when stored.
const PUT_NEW: &str = r"
local old = redis.call('GET', KEYS[1])
if old then return old end
if ARGV[2] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return false
";

/// Gets and deletes (KEYS[1]) — GETDEL for any Redis version.
const TAKE: &str = r"
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v
";

/// The Redis store: `<prefix><kind>:<key>`, expiry by Redis.
pub struct RedisStore {
    conn: redis::aio::ConnectionManager,
    prefix: String,
    timeout: Duration,
    put_new: redis::Script,
    take: redis::Script,
}

impl RedisStore {
    /// A store on `url` (connected lazily; reconnects by itself).
    pub fn new(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|e| StoreError::Redis(e.to_string()))?;
        let timeout = Duration::from_secs(2);
        let cfg = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, cfg)
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            timeout,
            put_new: redis::Script::new(PUT_NEW),
            take: redis::Script::new(TAKE),
        })
    }

    fn key(&self, kind: Kind, key: &str) -> String {
        format!("{}{}:{key}", self.prefix, kind.as_str())
    }

    async fn run<T>(
        &self,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(StoreError::Redis("no answer in time".into())),
            Ok(r) => r.map_err(|e| StoreError::Redis(e.to_string())),
        }
    }
}

fn ttl_ms(ttl: Option<Duration>) -> u64 {
    ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1))
        .unwrap_or(0)
}

#[async_trait]
impl Store for RedisStore {
    async fn get(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.conn.clone();
        let k = self.key(kind, key);
        self.run(async move {
            redis::cmd("GET")
                .arg(k)
                .query_async::<Option<Vec<u8>>>(&mut c)
                .await
        })
        .await
    }

    async fn put(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let mut c = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(kind, key)).arg(value);
        if ttl.is_some() {
            cmd.arg("PX").arg(ttl_ms(ttl));
        }
        self.run(async move { cmd.query_async::<()>(&mut c).await })
            .await
    }

    async fn put_new(
        &self,
        kind: Kind,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.conn.clone();
        let mut inv = self.put_new.prepare_invoke();
        inv.key(self.key(kind, key)).arg(value).arg(ttl_ms(ttl));
        self.run(async move { inv.invoke_async::<Option<Vec<u8>>>(&mut c).await })
            .await
    }

    async fn take(&self, kind: Kind, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.conn.clone();
        let mut inv = self.take.prepare_invoke();
        inv.key(self.key(kind, key));
        self.run(async move { inv.invoke_async::<Option<Vec<u8>>>(&mut c).await })
            .await
    }

    async fn delete(&self, kind: Kind, key: &str) -> Result<(), StoreError> {
        let mut c = self.conn.clone();
        let k = self.key(kind, key);
        self.run(async move { redis::cmd("DEL").arg(k).query_async::<()>(&mut c).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test]
    async fn sqlite_keeps_entries_across_opens_and_honours_expiry_and_atomic_ops() {
        let dir = std::env::temp_dir().join(format!("gantry-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("auth.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.put(Kind::Client, "c1", b"one", None).await.unwrap();
            s.put(Kind::Code, "k", b"code", Some(Duration::from_millis(30)))
                .await
                .unwrap();
            assert_eq!(
                s.get(Kind::Code, "k").await.unwrap().as_deref(),
                Some(&b"code"[..])
            );
            // Kinds are separate namespaces.
            assert_eq!(s.get(Kind::Consent, "c1").await.unwrap(), None);
            assert_eq!(s.put_new(Kind::Key, "p1", b"a", None).await.unwrap(), None);
            assert_eq!(
                s.put_new(Kind::Key, "p1", b"b", None)
                    .await
                    .unwrap()
                    .as_deref(),
                Some(&b"a"[..])
            );
            assert_eq!(
                s.take(Kind::Key, "p1").await.unwrap().as_deref(),
                Some(&b"a"[..])
            );
            assert_eq!(s.take(Kind::Key, "p1").await.unwrap(), None);
            tokio::time::sleep(Duration::from_millis(40)).await;
            assert_eq!(s.get(Kind::Code, "k").await.unwrap(), None, "expired");
            assert_eq!(s.take(Kind::Code, "k").await.unwrap(), None);
            assert_eq!(
                s.put_new(Kind::Code, "k", b"again", None).await.unwrap(),
                None,
                "an expired entry does not block a new one"
            );
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(
            s.get(Kind::Client, "c1").await.unwrap().as_deref(),
            Some(&b"one"[..])
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "private file");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
