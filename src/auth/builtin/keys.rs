//! Gantry's signing keys: one ES256 (P-256) key per rotation period, created by
//! whichever replica needs it first (store-unless-present, so replicas agree), its
//! private half sealed with AES-256-GCM under the state key. A token is signed with
//! the current period's key and verified with the keys of the previous, current and
//! next periods; the JWKS publishes the same three, so a key is known before it
//! signs and still known after, whatever caches verifiers keep.

use super::store::{Kind, Store, StoreError};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored key that does not open with the state key (another key, or tampering).
    #[error("the signing key of period {0} cannot be opened with the state key (was state_key changed?)")]
    Sealed(u64),
    #[error("cannot create a signing key: {0}")]
    Create(&'static str),
}

/// What the store keeps of a key.
#[derive(Serialize, Deserialize)]
struct Stored {
    kid: String,
    /// nonce || AES-256-GCM(PKCS#8 DER), base64.
    sealed: String,
    /// The public point, uncompressed SEC1 (0x04 || x || y), base64.
    public: String,
}

/// One usable key.
pub struct SigningKey {
    pub kid: String,
    encoding: jsonwebtoken::EncodingKey,
    /// Its public JWK (`kty` EC, `crv` P-256, `use` sig, `alg` ES256).
    pub jwk: Jwk,
}

impl SigningKey {
    /// Signs `claims` as a JWT (`typ` at+jwt, RFC 9068).
    pub fn sign(&self, claims: &serde_json::Value) -> Result<String, KeyError> {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|_| KeyError::Create("sign"))
    }
}

/// The state key: seals and opens private keys.
pub struct Sealer(LessSafeKey);

impl Sealer {
    /// From 32 raw bytes.
    pub fn new(key: &[u8]) -> Option<Self> {
        UnboundKey::new(&AES_256_GCM, key)
            .ok()
            .map(|k| Self(LessSafeKey::new(k)))
    }

    fn seal(&self, aad: &str, plain: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KeyError::Create("random"))?;
        let mut buf = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut buf,
            )
            .map_err(|_| KeyError::Create("seal"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(out)
    }

    fn open(&self, aad: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        let (nonce, ct) = sealed.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = ct.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut buf)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// The key of each period, loaded or created on demand.
pub struct Keys {
    store: Arc<dyn Store>,
    sealer: Sealer,
    period: Duration,
    loaded: parking_lot::Mutex<HashMap<u64, Arc<SigningKey>>>,
}

use crate::auth::now_secs;

impl Keys {
    pub fn new(store: Arc<dyn Store>, sealer: Sealer, period: Duration) -> Self {
        Self {
            store,
            sealer,
            period: period.max(Duration::from_secs(60)),
            loaded: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    fn current_period(&self) -> u64 {
        now_secs() / self.period.as_secs().max(1)
    }

    /// The key that signs now.
    pub async fn current(&self) -> Result<Arc<SigningKey>, KeyError> {
        self.of_period(self.current_period()).await
    }

    /// The keys that verify now (previous, current, next period).
    pub async fn verifying(&self) -> Result<Vec<Arc<SigningKey>>, KeyError> {
        let p = self.current_period();
        let mut v = Vec::with_capacity(3);
        for q in [p.saturating_sub(1), p, p + 1] {
            v.push(self.of_period(q).await?);
        }
        Ok(v)
    }

    /// The verifying key named `kid`, if it is one.
    pub async fn find(&self, kid: &str) -> Result<Option<Arc<SigningKey>>, KeyError> {
        let Some(period) = kid
            .strip_prefix('p')
            .and_then(|r| r.split_once('-'))
            .and_then(|(p, _)| p.parse::<u64>().ok())
        else {
            return Ok(None);
        };
        let now = self.current_period();
        if period + 1 < now || period > now + 1 {
            return Ok(None);
        }
        let k = self.of_period(period).await?;
        Ok((k.kid == kid).then_some(k))
    }

    async fn of_period(&self, period: u64) -> Result<Arc<SigningKey>, KeyError> {
        if let Some(k) = self.loaded.lock().get(&period) {
            return Ok(k.clone());
        }
        let name = period.to_string();
        let stored = match self.store.get(Kind::Key, &name).await? {
            Some(v) => v,
            None => {
                let fresh = self.create(period)?;
                // Kept for the period it signs, the one after, and a margin.
                let ttl = self.period * 3 + Duration::from_secs(86_400);
                match self
                    .store
                    .put_new(Kind::Key, &name, &fresh, Some(ttl))
                    .await?
                {
                    None => fresh,
                    Some(theirs) => theirs, // another replica was first
                }
            }
        };
        let key = Arc::new(self.open(period, &stored)?);
        let mut loaded = self.loaded.lock();
        let now = self.current_period();
        loaded.retain(|p, _| *p + 1 >= now && *p <= now + 1);
        loaded.insert(period, key.clone());
        Ok(key)
    }

    fn aad(period: u64) -> String {
        format!("gantry signing key {period}")
    }

    fn create(&self, period: u64) -> Result<Vec<u8>, KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Create("generate"))?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| KeyError::Create("generate"))?;
        let mut id = [0u8; 6];
        rng.fill(&mut id).map_err(|_| KeyError::Create("random"))?;
        let stored = Stored {
            kid: format!("p{period}-{}", URL_SAFE_NO_PAD.encode(id)),
            sealed: STANDARD.encode(self.sealer.seal(&Self::aad(period), pkcs8.as_ref())?),
            public: STANDARD.encode(pair.public_key().as_ref()),
        };
        serde_json::to_vec(&stored).map_err(|_| KeyError::Create("encode"))
    }

    fn open(&self, period: u64, bytes: &[u8]) -> Result<SigningKey, KeyError> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|_| KeyError::Sealed(period))?;
        let sealed = STANDARD
            .decode(&stored.sealed)
            .map_err(|_| KeyError::Sealed(period))?;
        let pkcs8 = self
            .sealer
            .open(&Self::aad(period), &sealed)
            .ok_or(KeyError::Sealed(period))?;
        let public = STANDARD
            .decode(&stored.public)
            .map_err(|_| KeyError::Sealed(period))?;
        let (x, y) = match public.as_slice() {
            [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
            _ => return Err(KeyError::Sealed(period)),
        };
        let jwk: Jwk = serde_json::from_value(serde_json::json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
            "kid": stored.kid,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }))
        .map_err(|_| KeyError::Sealed(period))?;
        Ok(SigningKey {
            kid: stored.kid,
            encoding: jsonwebtoken::EncodingKey::from_ec_der(&pkcs8),
            jwk,
        })
    }
}

/// The state key from `state_key` (base64 of 32 bytes), or with SQLite and none
/// configured, from `<db>.key` (created once, mode 0600).
pub fn state_key(configured: Option<&str>, db: Option<&std::path::Path>) -> Result<Sealer, String> {
    let raw = match (configured, db) {
        (Some(k), _) => STANDARD
            .decode(k.trim())
            .map_err(|_| "auth.builtin.state_key: not base64".to_owned())?,
        (None, Some(db)) => {
            let mut name = db.as_os_str().to_owned();
            name.push(".key");
            let path = std::path::PathBuf::from(name);
            match std::fs::read_to_string(&path) {
                Ok(s) => STANDARD
                    .decode(s.trim())
                    .map_err(|_| format!("{}: not a base64 key", path.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let mut k = [0u8; 32];
                    SystemRandom::new()
                        .fill(&mut k)
                        .map_err(|_| "no randomness for the state key".to_owned())?;
                    write_private(&path, &STANDARD.encode(k))
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    tracing::info!(path = %path.display(), "created the state key of the built-in authorization server");
                    k.to_vec()
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        (None, None) => {
            return Err("auth.builtin.state_key: required with store = \"redis\"".into())
        }
    };
    if raw.len() != 32 {
        return Err(format!(
            "auth.builtin.state_key: {} bytes; it must be 32 (openssl rand -base64 32)",
            raw.len()
        ));
    }
    Sealer::new(&raw).ok_or_else(|| "auth.builtin.state_key: unusable".into())
}

fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::auth::builtin::store::SqliteStore;

    #[tokio::test]
    async fn a_key_signs_verifies_and_is_shared_through_the_store() {
        let dir = std::env::temp_dir().join(format!("gantry-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.join("a.db")).unwrap());
        let a = Keys::new(
            store.clone(),
            Sealer::new(&[7; 32]).unwrap(),
            Duration::from_secs(3600),
        );
        let b = Keys::new(
            store.clone(),
            Sealer::new(&[7; 32]).unwrap(),
            Duration::from_secs(3600),
        );
        let ka = a.current().await.unwrap();
        let kb = b.current().await.unwrap();
        assert_eq!(ka.kid, kb.kid, "replicas agree on the period's key");
        let token = ka
            .sign(&serde_json::json!({"sub": "x", "exp": now_secs() + 60}))
            .unwrap();
        let found = b.find(&ka.kid).await.unwrap().unwrap();
        let key = jsonwebtoken::DecodingKey::from_jwk(&found.jwk).unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        v.set_required_spec_claims(&["exp"]);
        jsonwebtoken::decode::<serde_json::Value>(&token, &key, &v).unwrap();
        assert_eq!(a.verifying().await.unwrap().len(), 3);
        assert!(
            a.find("p1-zzz").await.unwrap().is_none(),
            "a period long gone"
        );
        // Rotation: the previous period's key still verifies (its tokens live on), the
        // next one is already published, one two periods back is gone.
        let p = a.current_period();
        let prev = a.of_period(p - 1).await.unwrap();
        let next = a.of_period(p + 1).await.unwrap();
        assert!(b.find(&prev.kid).await.unwrap().is_some());
        assert!(b.find(&next.kid).await.unwrap().is_some());
        let old = a.of_period(p - 2).await.unwrap();
        assert!(b.find(&old.kid).await.unwrap().is_none());
        let published: Vec<String> = a
            .verifying()
            .await
            .unwrap()
            .iter()
            .map(|k| k.kid.clone())
            .collect();
        assert_eq!(
            published,
            vec![prev.kid.clone(), ka.kid.clone(), next.kid.clone()]
        );
        assert_ne!(prev.kid, ka.kid);
        // A kid naming the right period with other random bits is not a key.
        let forged = format!("p{p}-AAAAAAAA");
        assert!(b.find(&forged).await.unwrap().is_none());
        // Another state key cannot open them.
        let c = Keys::new(
            store,
            Sealer::new(&[8; 32]).unwrap(),
            Duration::from_secs(3600),
        );
        assert!(matches!(c.current().await, Err(KeyError::Sealed(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
