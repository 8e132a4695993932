//! HTTPS at the front door (`server.tls`): the certificate chain and key from PEM
//! files, HTTP/2 and HTTP/1.1 by ALPN, and the files watched — a renewed
//! certificate is served to the next connection, open ones keep theirs.

use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// How often the files are looked at.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// Why the certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("server.tls.cert {path}: {why}")]
    Cert { path: String, why: String },
    #[error("server.tls.key {path}: {why}")]
    Key { path: String, why: String },
    #[error("server.tls: the key does not fit the certificate, or they cannot be used: {0}")]
    Config(String),
}

/// The current TLS configuration, replaced when the files change.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
    stamp: RwLock<Option<(SystemTime, SystemTime)>>,
    /// The stamp of files that did not load (logged once).
    failed: RwLock<Option<(SystemTime, SystemTime)>>,
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// A server configuration from the two PEM files.
pub fn load(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let shown = |p: &Path| p.display().to_string();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| TlsError::Cert {
            path: shown(cert),
            why: e.to_string(),
        })?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Cert {
            path: shown(cert),
            why: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Cert {
            path: shown(cert),
            why: "no CERTIFICATE in the file".into(),
        });
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: shown(key),
        why: format!("no usable private key ({e})"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

impl Tls {
    /// Loads the files (an error stops Gantry at start: better than serving none).
    pub fn new(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        let cfg = load(cert, key)?;
        Ok(Arc::new(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(cfg)),
            stamp: RwLock::new(modified(cert).zip(modified(key))),
            failed: RwLock::new(None),
        }))
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// Looks at the files every few seconds until `stop`; a changed pair that loads
    /// replaces the configuration, one that does not is logged and the old one kept.
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(WATCH_EVERY) => {}
                _ = stop.cancelled() => return,
            }
            let now = modified(&self.cert).zip(modified(&self.key));
            if now.is_none() || now == *self.stamp.read() || now == *self.failed.read() {
                continue;
            }
            match load(&self.cert, &self.key) {
                Ok(cfg) => {
                    *self.current.write() = Arc::new(cfg);
                    *self.stamp.write() = now;
                    tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                }
                Err(e) => {
                    // Half-written files (cert renewed before key) settle: the next
                    // change is tried again.
                    *self.failed.write() = now;
                    tracing::warn!(error = %e, "TLS certificate changed but cannot be used; keeping the previous one");
                }
            }
        }
    }
}
